//! Latency microbenchmarks (`kernels/latency_probe.cu`): each probe times one dependency
//! chain with `%clock64` and reports cycles per link beside the performance model's constant
//! for that instruction class (`linattn_ptxsim::arch::Latencies`).
//!
//! On a GPU this is a measurement, the source the model's constants should come from. On the
//! PTX simulator `%clock64` is the latency model's own warp issue clock, so every probe reads
//! back the model's constant: that checks the probes and the clock model, and measures
//! nothing (`tests/latency_probe.rs`).

use linattn_core::AttnError;
use linattn_ptxsim::arch::Latencies;
use linattn_ptxsim::SimArch;

use crate::executor::{Executor, Launch, Platform};
use crate::params::launch;
use crate::runtime::KernelVariant;

/// `kernels/latency_probe.cu`.
pub const SOURCE: &str = include_str!("../../../kernels/latency_probe.cu");

crate::kernel_params! {
    /// The argument structs of latency_probe.cu.
    pub mod params;
    /// `lp_alu`: a chain of dependent `fma.rn.f32`.
    pub struct Alu => "lp_alu" { out: Ptr, steps: i32 }
    /// `lp_conversion`: f32 → f16 → f32 (two conversions a link).
    pub struct Conversion => "lp_conversion" = Alu;
    /// `lp_sfu`: dependent `ex2.approx.ftz.f32`.
    pub struct Sfu => "lp_sfu" = Alu;
    /// `lp_shfl`: dependent `shfl.sync.bfly`.
    pub struct Shfl => "lp_shfl" = Alu;
    /// `lp_mma`: `mma.sync.m16n8k16` accumulating into its own D.
    pub struct Mma => "lp_mma" = Alu;
    /// `lp_shared_chase`: `ld.shared.u32 p, [p]` around a ring.
    pub struct SharedChase => "lp_shared_chase" = Alu;
    /// `lp_barrier`: `bar.sync 0` in a CTA of four warps.
    pub struct Barrier => "lp_barrier" = Alu;
    /// `lp_global_chase`: `ld.global{.cg}.u64 p, [p]` around a host-built ring.
    pub struct GlobalChase => "lp_global_chase" {
        ring: Ptr, out: Ptr, steps: i32, cache_global: bool, warm: bool,
    }
    /// `lp_scan_group4`: cc_scan's loop, four loads then the stores in place.
    pub struct ScanGroup4 => "lp_scan_group4" {
        buf: Ptr, out: Ptr, steps: i32, stride: i64, decay: f32,
    }
    /// `lp_load_group4`: four loads a link, no stores.
    pub struct LoadGroup4 => "lp_load_group4" = ScanGroup4;
    /// `lp_load_group1`: one load a link, no stores.
    pub struct LoadGroup1 => "lp_load_group1" = ScanGroup4;
}

pub use params::SPECS as KERNEL_PARAMS;
use params::{
    Alu, Barrier, Conversion, GlobalChase, LoadGroup1, LoadGroup4, Mma, ScanGroup4, Sfu,
    SharedChase, Shfl,
};

/// The one variant (no `-D` specialisation).
pub fn kernel_variants() -> Vec<KernelVariant> {
    vec![KernelVariant::new("latency_probe.cu", SOURCE).entries(&params::ENTRIES)]
}

/// The state stride of cc_scan (the scan the H100 ran on 2026-11-25, the launch the model
/// missed most; since replaced) at D = M = 64, in floats (C·(M+1) = 64·65): its loads'
/// spacing.
pub const SCAN_STRIDE_D64: i64 = 64 * 65;

/// Which model constant a probe measures, and how a link relates to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelClass {
    Alu,
    Conversion,
    Sfu,
    Shfl,
    Mma,
    SharedLoad,
    Barrier,
    L2Hit,
    Dram,
}

impl ModelClass {
    /// The field of [`Latencies`] it names.
    pub fn name(self) -> &'static str {
        match self {
            ModelClass::Alu => "alu",
            ModelClass::Conversion => "conversion",
            ModelClass::Sfu => "sfu",
            ModelClass::Shfl => "shfl",
            ModelClass::Mma => "mma",
            ModelClass::SharedLoad => "shared_load",
            ModelClass::Barrier => "barrier",
            ModelClass::L2Hit => "l2_hit",
            ModelClass::Dram => "dram",
        }
    }

    pub fn constant(self, lat: &Latencies) -> u32 {
        match self {
            ModelClass::Alu => lat.alu,
            ModelClass::Conversion => lat.conversion,
            ModelClass::Sfu => lat.sfu,
            ModelClass::Shfl => lat.shfl,
            ModelClass::Mma => lat.mma,
            ModelClass::SharedLoad => lat.shared_load,
            ModelClass::Barrier => lat.barrier,
            ModelClass::L2Hit => lat.l2_hit,
            ModelClass::Dram => lat.dram,
        }
    }
}

/// Launches one `out, steps` entry point with its own argument struct.
type PlainLaunch = fn(&dyn Executor, &KernelVariant, &Launch, Alu) -> Result<(), AttnError>;
/// Launches one of the group entry points.
type GroupLaunch = fn(&dyn Executor, &KernelVariant, &Launch, ScanGroup4) -> Result<(), AttnError>;

/// How a probe is launched: its kernel, its memory, and what one link is.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// `out` and `steps` only, `threads` per CTA.
    Plain { launch: PlainLaunch, threads: u32 },
    /// A ring of `steps` addresses `stride` bytes apart; `flush`: evict L2 before timing.
    Chase {
        stride: u64,
        cache_global: bool,
        warm: bool,
        flush: bool,
    },
    /// cc_scan-like groups `stride` floats apart, L2 flushed first; `stores`: each group's
    /// values stored back in place before the next group's loads.
    Groups {
        launch: GroupLaunch,
        group: u32,
        stores: bool,
    },
}

/// One probe: what it measures and how.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    pub name: &'static str,
    /// One line: the chain and its link.
    pub what: &'static str,
    pub class: ModelClass,
    /// Instructions of `class` per link (lp_conversion: 2).
    pub per_link: u32,
    kind: Kind,
}

impl Probe {
    /// The model's expected cycles per link from its constants: the class's × `per_link`,
    /// plus, for the group probes, the fma chain on the loaded values (one ALU latency per
    /// load), or where the group stores in place, the stores' completion that the next
    /// group's loads wait for (one more `dram`) and one ALU latency. The simulator's timing
    /// of the probe's PTX adds address arithmetic to this.
    pub fn model_cycles_per_link(&self, lat: &Latencies) -> f64 {
        // The model has no caches: it charges every global load `dram`, L2 hits included.
        let constant = match self.class {
            ModelClass::L2Hit => lat.dram,
            class => class.constant(lat),
        };
        let base = f64::from(constant * self.per_link);
        match self.kind {
            Kind::Groups { stores: true, .. } => base + f64::from(lat.dram + lat.alu),
            Kind::Groups { group, .. } => base + f64::from(group * lat.alu),
            _ => base,
        }
    }
}

const fn plain(
    name: &'static str,
    what: &'static str,
    class: ModelClass,
    per_link: u32,
    (threads, launch): (u32, PlainLaunch),
) -> Probe {
    Probe {
        name,
        what,
        class,
        per_link,
        kind: Kind::Plain { launch, threads },
    }
}

/// `launch` of `wrap(args)`: each entry point's own argument struct.
macro_rules! launcher {
    ($wrap:expr, $args:ty) => {
        |exec: &dyn Executor, variant: &KernelVariant, shape: &Launch, args: $args| {
            launch(exec, variant, shape, &$wrap(args))
        }
    };
}

/// Every probe, in the order they run and print.
pub const PROBES: [Probe; 13] = [
    plain(
        "lp_alu",
        "fma.rn.f32 d, d, a, b",
        ModelClass::Alu,
        1,
        (32, launcher!(|a| a, Alu)),
    ),
    plain(
        "lp_conversion",
        "cvt.rn.f16.f32 + cvt.f32.f16",
        ModelClass::Conversion,
        2,
        (32, launcher!(Conversion, Alu)),
    ),
    plain(
        "lp_sfu",
        "ex2.approx.ftz.f32 d, d",
        ModelClass::Sfu,
        1,
        (32, launcher!(Sfu, Alu)),
    ),
    plain(
        "lp_shfl",
        "shfl.sync.bfly.b32 d, d, 1",
        ModelClass::Shfl,
        1,
        (32, launcher!(Shfl, Alu)),
    ),
    plain(
        "lp_mma",
        "mma.sync m16n8k16 f32.f16, D = A·B + D",
        ModelClass::Mma,
        1,
        (32, launcher!(Mma, Alu)),
    ),
    plain(
        "lp_shared_chase",
        "ld.shared.u32 p, [p]",
        ModelClass::SharedLoad,
        1,
        (32, launcher!(SharedChase, Alu)),
    ),
    plain(
        "lp_barrier",
        "bar.sync 0, 4 warps",
        ModelClass::Barrier,
        1,
        (128, launcher!(Barrier, Alu)),
    ),
    Probe {
        name: "l2_chase",
        what: "ld.global.cg.u64 p, [p], 256 B apart, ring warmed",
        class: ModelClass::L2Hit,
        per_link: 1,
        kind: Kind::Chase {
            stride: 256,
            cache_global: true,
            warm: true,
            flush: false,
        },
    },
    Probe {
        name: "dram_chase",
        what: "ld.global.u64 p, [p], 4 KiB + 128 B apart, L2 flushed",
        class: ModelClass::Dram,
        per_link: 1,
        kind: Kind::Chase {
            stride: 4096 + 128,
            cache_global: false,
            warm: false,
            flush: true,
        },
    },
    Probe {
        name: "dram_chase_pages",
        what: "ld.global.u64 p, [p], 2 MiB + 128 B apart (a page a link), L2 flushed",
        class: ModelClass::Dram,
        per_link: 1,
        kind: Kind::Chase {
            stride: (2 << 20) + 128,
            cache_global: false,
            warm: false,
            flush: true,
        },
    },
    Probe {
        name: "lp_load_group1",
        what: "1 coalesced ld.global.f32 + fma, cc_scan's stride, L2 flushed",
        class: ModelClass::Dram,
        per_link: 1,
        kind: Kind::Groups {
            launch: launcher!(LoadGroup1, ScanGroup4),
            group: 1,
            stores: false,
        },
    },
    Probe {
        name: "lp_load_group4",
        what: "4 coalesced loads + 4 fma, cc_scan's stride, L2 flushed",
        class: ModelClass::Dram,
        per_link: 1,
        kind: Kind::Groups {
            launch: launcher!(LoadGroup4, ScanGroup4),
            group: 4,
            stores: false,
        },
    },
    Probe {
        name: "lp_scan_group4",
        what: "cc_scan's loop: 4 loads, 4 stores in place + fma, L2 flushed",
        class: ModelClass::Dram,
        per_link: 1,
        kind: Kind::Groups {
            launch: launcher!(|a| a, ScanGroup4),
            group: 4,
            stores: true,
        },
    },
];

/// How long the chains are. The simulator's latency does not depend on footprint, so it
/// runs short chains over small buffers; on a GPU the chase footprints must pass L2 and
/// the TLB reach the probe names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeSizes {
    /// Links of the ALU / SFU / shared / barrier chains.
    pub steps: u32,
    /// Links of the global-memory chains (each a new line: footprint = steps × stride).
    pub memory_steps: u32,
    /// Stride of the chase rings on the simulator (`None`: each probe's own).
    pub chase_stride: Option<u64>,
}

impl ProbeSizes {
    pub fn for_platform(platform: Platform) -> ProbeSizes {
        match platform {
            Platform::Cuda => ProbeSizes {
                steps: 4096,
                memory_steps: 256,
                chase_stride: None,
            },
            Platform::Sim => ProbeSizes {
                steps: 256,
                memory_steps: 32,
                chase_stride: Some(256),
            },
        }
    }
}

/// What one probe gave.
#[derive(Debug, Clone)]
pub struct ProbeRun {
    pub probe: Probe,
    pub steps: u32,
    /// `%clock64` cycles of the timed loop, one per repeat.
    pub cycles: Vec<u64>,
    /// Global-memory footprint of the chain in bytes (0 for on-chip probes).
    pub footprint_bytes: u64,
}

impl ProbeRun {
    /// Cycles per instruction of the probe's class: median over repeats / steps / per_link.
    pub fn median_per_instruction(&self) -> Option<f64> {
        let mut c = self.cycles.clone();
        c.sort_unstable();
        let mid = *c.get(c.len() / 2)?;
        Some(mid as f64 / f64::from(self.steps) / f64::from(self.probe.per_link))
    }

    /// Cycles per link (median).
    pub fn median_per_link(&self) -> Option<f64> {
        self.median_per_instruction()
            .map(|c| c * f64::from(self.probe.per_link))
    }
}

/// The model's latency constants for the executor's architecture.
pub fn model_latencies(exec: &dyn Executor) -> Latencies {
    let arch = exec.arch();
    SimArch::by_name(&format!("sm_{}{}", arch.major, arch.minor))
        .unwrap_or(SimArch::SM90)
        .latency
}

/// Runs `probe` `repeats` times on `exec`. The caller turns on the simulator's latency
/// clocks (a profile) when `exec` is the simulator.
pub fn run_probe(
    exec: &dyn Executor,
    probe: &Probe,
    sizes: ProbeSizes,
    repeats: usize,
) -> Result<ProbeRun, AttnError> {
    let variant = kernel_variants().remove(0);
    let out = Buffer::new(exec, 24, true)?;
    let mut cycles = Vec::with_capacity(repeats);
    let mut footprint_bytes = 0;
    match probe.kind {
        Kind::Plain {
            launch: launch_plain,
            threads,
        } => {
            let args = Alu {
                out: out.ptr(),
                steps: sizes.steps as i32,
            };
            let shape = Launch::new((1, 1, 1), threads);
            for _ in 0..repeats {
                launch_plain(exec, &variant, &shape, args)?;
                cycles.push(read_cycles(exec, &out)?);
            }
        }
        Kind::Chase {
            stride,
            cache_global,
            warm,
            flush,
        } => {
            let steps = sizes.memory_steps;
            let stride = sizes.chase_stride.unwrap_or(stride);
            footprint_bytes = u64::from(steps) * stride;
            let ring = Buffer::new(exec, footprint_bytes, false)?;
            for i in 0..u64::from(steps) {
                let next = ring.ptr().0 + ((i + 1) % u64::from(steps)) * stride;
                exec.upload(ring.ptr().0 + i * stride, &next.to_le_bytes())?;
            }
            let args = GlobalChase {
                ring: ring.ptr(),
                out: out.ptr(),
                steps: steps as i32,
                cache_global,
                warm,
            };
            for _ in 0..repeats {
                if flush {
                    exec.flush_l2()?;
                }
                launch(exec, &variant, &Launch::new((1, 1, 1), 32), &args)?;
                cycles.push(read_cycles(exec, &out)?);
            }
        }
        Kind::Groups {
            launch: launch_group,
            group,
            ..
        } => {
            let steps = sizes.memory_steps;
            let floats = u64::from(steps) * u64::from(group) * SCAN_STRIDE_D64 as u64 + 32;
            footprint_bytes = floats * 4;
            let buf = Buffer::new(exec, footprint_bytes, true)?;
            let args = ScanGroup4 {
                buf: buf.ptr(),
                out: out.ptr(),
                steps: steps as i32,
                stride: SCAN_STRIDE_D64,
                decay: 0.5,
            };
            for _ in 0..repeats {
                exec.flush_l2()?;
                launch_group(exec, &variant, &Launch::new((1, 1, 1), 32), args)?;
                cycles.push(read_cycles(exec, &out)?);
            }
        }
    }
    Ok(ProbeRun {
        probe: *probe,
        steps: match probe.kind {
            Kind::Plain { .. } => sizes.steps,
            _ => sizes.memory_steps,
        },
        cycles,
        footprint_bytes,
    })
}

fn read_cycles(exec: &dyn Executor, out: &Buffer<'_>) -> Result<u64, AttnError> {
    exec.synchronize()?;
    let mut bytes = [0u8; 8];
    exec.download(out.ptr().0, &mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}

/// A device allocation freed on drop (errors of `free` are only reported by the executor).
/// The mma probe's buffers too.
pub(crate) struct Buffer<'a> {
    exec: &'a dyn Executor,
    address: u64,
}

impl<'a> Buffer<'a> {
    pub(crate) fn new(exec: &'a dyn Executor, bytes: u64, zeroed: bool) -> Result<Self, AttnError> {
        Ok(Buffer {
            exec,
            address: exec.alloc(bytes.max(16), zeroed)?,
        })
    }

    pub(crate) fn ptr(&self) -> crate::params::Ptr {
        crate::params::Ptr(self.address)
    }
}

impl Drop for Buffer<'_> {
    fn drop(&mut self) {
        self.exec.free(self.address);
    }
}
