//! The simulator's launches beside an Nsight Compute export of the same launches
//! (`linattn profile --against FILE.csv`): paired per kernel name in order (the k-th launch of
//! a kernel in the file with the k-th the simulator ran), each counter beside the hardware's
//! with the ratio, and the model's time (latency model, and the roofline alone) beside the
//! measured one.
//!
//! Held (the test against bench-results/h100 keeps them within 5%): global load/store
//! sectors and requests, shared load/store wavefronts, registers, theoretical occupancy.
//! Shown, not held: shared load/store instructions and warp instructions (the simulator counts
//! PTX instructions with at least one active lane; ncu counts SASS instructions issued, with
//! those ptxas predicated off entirely where the PTX branched around them), DRAM bytes (the
//! simulator's are an infinite L2's) and time (a *model*: PTX timed as written, one latency
//! per instruction class).

use linattn_cuda::executor::sim::model::{launch as launch_model, occupancy};
use linattn_cuda::executor::sim::{Counters, LaunchRecord, Sampled, SimArch};
use tabled::builder::Builder;
use tabled::settings::Style;

use super::ncu::{current_name, NcuLaunch};

/// One launch the simulator ran, with what the comparison needs.
#[derive(Debug, Clone)]
pub struct SimLaunch {
    /// `sim/…` backend and phase (`forward` / `backward`) it ran in.
    pub backend: String,
    pub phase: String,
    pub entry: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub registers: u32,
    pub counters: Counters,
    /// Theoretical occupancy on the modelled part, percent of its warp slots.
    pub occupancy_pct: f64,
    /// The warps that occupancy puts on each of an SM's schedulers.
    pub resident_warps_per_scheduler: f64,
    /// The model's time of this launch alone (never a measurement): the latency model,
    /// which of its terms won, and the roofline bound alone.
    pub model_ns: f64,
    pub bound: &'static str,
    pub roofline_ns: f64,
    /// Which CTAs ran when the launch was sampled (`profile --sample`).
    pub sampled: Option<Sampled>,
    /// The SASS warp instructions it executed, estimated from its PTX warp instructions per
    /// PTX line and the SASS ptxas made of each line (`profile --replay … --sass`); not a
    /// count.
    pub sass_estimate: Option<f64>,
}

impl SimLaunch {
    pub fn new(backend: &str, phase: &str, launch: &LaunchRecord, arch: &SimArch) -> SimLaunch {
        let (b, g) = (launch.block, launch.grid);
        let threads = b.0 * b.1 * b.2;
        let shared = launch.static_shared + u64::from(launch.dynamic_shared);
        let occ = occupancy(arch, threads, launch.registers, shared);
        let ctas = u64::from(g.0) * u64::from(g.1) * u64::from(g.2);
        let model = launch_model(arch, &launch.counters, ctas, &occ);
        SimLaunch {
            backend: backend.to_string(),
            phase: phase.to_string(),
            entry: launch.entry.clone(),
            grid: [g.0, g.1, g.2],
            block: [b.0, b.1, b.2],
            registers: launch.registers,
            counters: launch.counters,
            occupancy_pct: 100.0 * occ.fraction,
            resident_warps_per_scheduler: occ.fraction * f64::from(arch.max_warps_per_sm)
                / f64::from(arch.schedulers_per_sm.max(1)),
            model_ns: 1e9 * model.total_s,
            bound: model.bound,
            roofline_ns: 1e9 * model.roofline.total_s,
            sampled: launch.sampled.clone(),
            sass_estimate: None,
        }
    }
}

/// One compared quantity: its label, the ncu metrics whose sum is the hardware's value, the
/// simulator's value (None: not computed for this launch, the row is left out), and whether
/// the test holds it.
pub struct Quantity {
    pub label: &'static str,
    pub metrics: &'static [&'static str],
    pub sim: fn(&SimLaunch) -> Option<f64>,
    pub held: bool,
}

pub const QUANTITIES: &[Quantity] = &[
    Quantity {
        label: "global ld sectors",
        metrics: &["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"],
        sim: |s| Some(s.counters.global_load_sectors as f64),
        held: true,
    },
    Quantity {
        label: "global ld requests",
        metrics: &["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"],
        sim: |s| Some(s.counters.global_load_requests as f64),
        held: true,
    },
    Quantity {
        label: "global st sectors",
        metrics: &["l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"],
        sim: |s| Some(s.counters.global_store_sectors as f64),
        held: true,
    },
    Quantity {
        label: "global st requests",
        metrics: &["l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"],
        sim: |s| Some(s.counters.global_store_requests as f64),
        held: true,
    },
    Quantity {
        label: "shared ld wavefronts",
        metrics: &["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"],
        sim: |s| Some(s.counters.shared_load_wavefronts as f64),
        held: true,
    },
    Quantity {
        label: "shared st wavefronts",
        metrics: &["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"],
        sim: |s| Some(s.counters.shared_store_wavefronts as f64),
        held: true,
    },
    Quantity {
        label: "registers/thread",
        metrics: &["launch__registers_per_thread"],
        sim: |s| Some(f64::from(s.registers)),
        held: true,
    },
    Quantity {
        label: "theoretical occupancy %",
        metrics: &["sm__maximum_warps_per_active_cycle_pct"],
        sim: |s| Some(s.occupancy_pct),
        held: true,
    },
    Quantity {
        label: "shared ld instructions",
        metrics: &["smsp__inst_executed_op_shared_ld.sum"],
        sim: |s| Some(s.counters.shared_load_requests as f64),
        held: false,
    },
    Quantity {
        label: "shared st instructions",
        metrics: &["smsp__inst_executed_op_shared_st.sum"],
        sim: |s| Some(s.counters.shared_store_requests as f64),
        held: false,
    },
    Quantity {
        label: "warp instructions",
        metrics: &["smsp__inst_executed.sum"],
        sim: |s| Some(s.counters.warp_instructions as f64),
        held: false,
    },
    Quantity {
        label: "warp instructions (sim: SASS, estimated)",
        metrics: &["smsp__inst_executed.sum"],
        sim: |s| s.sass_estimate,
        held: false,
    },
    Quantity {
        label: "DRAM bytes (sim: infinite L2)",
        metrics: &["dram__bytes_read.sum", "dram__bytes_write.sum"],
        sim: |s| Some(s.counters.unique_dram_bytes() as f64),
        held: false,
    },
    Quantity {
        label: "time ns (sim: model)",
        metrics: &["gpu__time_duration.sum"],
        sim: |s| Some(s.model_ns),
        held: false,
    },
    Quantity {
        label: "time ns (sim: roofline alone)",
        metrics: &["gpu__time_duration.sum"],
        sim: |s| Some(s.roofline_ns),
        held: false,
    },
];

/// One row of the comparison: a hardware launch and its simulated partner, or one side
/// alone, or both with different shapes (`problem` says which).
pub struct Pair<'a> {
    pub hw: Option<&'a NcuLaunch>,
    pub sim: Option<&'a SimLaunch>,
    pub problem: Option<String>,
}

/// The pairs: the file's launches in its order, then the simulator's left over.
pub fn pair<'a>(hw: &'a [NcuLaunch], sim: &'a [SimLaunch]) -> Vec<Pair<'a>> {
    let mut used = vec![false; sim.len()];
    let mut pairs = Vec::new();
    for h in hw {
        let name = current_name(&h.kernel);
        let next = (0..sim.len()).find(|&i| !used[i] && sim[i].entry == name);
        let Some(i) = next else {
            let ran = sim.iter().filter(|s| s.entry == name).count();
            pairs.push(Pair {
                hw: Some(h),
                sim: None,
                problem: Some(format!(
                    "unmatched: the simulated backends ran {ran} launch(es) of {name}, fewer \
                     than the file has"
                )),
            });
            continue;
        };
        used[i] = true;
        let s = &sim[i];
        let problem = (s.grid != h.grid || s.block != h.block).then(|| {
            format!(
                "not like for like: grid {:?} block {:?} on the hardware, grid {:?} block {:?} \
                 simulated (another shape?)",
                h.grid, h.block, s.grid, s.block
            )
        });
        pairs.push(Pair {
            hw: Some(h),
            sim: Some(s),
            problem,
        });
    }
    for (s, _) in sim.iter().zip(&used).filter(|(_, u)| !**u) {
        pairs.push(Pair {
            hw: None,
            sim: Some(s),
            problem: Some(format!(
                "unmatched: no launch of {} left in the file",
                s.entry
            )),
        });
    }
    pairs
}

/// The hardware's value of `q` for a launch: the sum of its metrics, None if any is absent.
pub fn hardware(q: &Quantity, h: &NcuLaunch) -> Option<f64> {
    q.metrics.iter().map(|m| h.metric(m)).sum()
}

/// Held quantities of compared pairs whose simulator/hardware ratio is off by more than
/// `tolerance` (0.05 = 5%), or whose hardware value is absent; one line each.
pub fn outside(pairs: &[Pair<'_>], tolerance: f64) -> Vec<String> {
    let mut out = Vec::new();
    for p in pairs {
        let (Some(h), Some(s), None) = (p.hw, p.sim, &p.problem) else {
            continue;
        };
        for q in QUANTITIES.iter().filter(|q| q.held) {
            let Some(sim) = (q.sim)(s) else { continue };
            let line = |what: String| format!("#{} {} {}: {what}", h.id, h.kernel, q.label);
            match hardware(q, h) {
                None => out.push(line(format!("absent from the file (simulator {sim})"))),
                Some(hw) if !within(sim, hw, tolerance) => {
                    out.push(line(format!("simulator {sim}, hardware {hw}")))
                }
                Some(_) => {}
            }
        }
    }
    out
}

fn within(sim: f64, hw: f64, tolerance: f64) -> bool {
    if hw == 0.0 {
        sim == 0.0
    } else {
        (sim / hw - 1.0).abs() <= tolerance
    }
}

fn number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// The comparison as text: per launch, each quantity's simulator and hardware values and
/// their ratio; unmatched launches say why.
pub fn render(pairs: &[Pair<'_>]) -> String {
    let mut b = Builder::new();
    b.push_record([
        "launch",
        "kernel",
        "quantity",
        "simulator",
        "hardware",
        "sim/hw",
        "held",
    ]);
    for p in pairs {
        let id = p.hw.map_or("—".into(), |h| format!("#{}", h.id));
        let kernel = match (p.hw, p.sim) {
            (Some(h), _) if current_name(&h.kernel) != h.kernel => {
                format!("{} (file: {})", current_name(&h.kernel), h.kernel)
            }
            (Some(h), _) => h.kernel.clone(),
            (None, Some(s)) => s.entry.clone(),
            (None, None) => String::new(),
        };
        let origin = p
            .sim
            .map_or(String::new(), |s| format!("{} {}", s.backend, s.phase));
        if let Some(problem) = &p.problem {
            b.push_record([
                id,
                kernel,
                problem.clone(),
                origin,
                String::new(),
                String::new(),
                String::new(),
            ]);
            continue;
        }
        let (Some(h), Some(s)) = (p.hw, p.sim) else {
            continue;
        };
        let shown = QUANTITIES
            .iter()
            .filter_map(|q| (q.sim)(s).map(|sim| (q, sim)));
        for (k, (q, sim)) in shown.enumerate() {
            let (hw, ratio) = match hardware(q, h) {
                Some(hw) if hw != 0.0 => (number(hw), format!("{:.3}", sim / hw)),
                Some(hw) => (number(hw), if sim == 0.0 { "=".into() } else { "—".into() }),
                None => ("absent".into(), "—".into()),
            };
            let first = |text: &str| {
                if k == 0 {
                    text.to_string()
                } else {
                    String::new()
                }
            };
            b.push_record([
                first(&id),
                if k == 0 {
                    kernel.clone()
                } else if k == 1 {
                    origin.clone()
                } else if k == 2 {
                    format!("model bound: {}", s.bound)
                } else {
                    String::new()
                },
                q.label.to_string(),
                number(sim),
                hw,
                ratio,
                (if q.held { "yes" } else { "no" }).to_string(),
            ]);
        }
    }
    let mut t = b.build();
    t.with(Style::sharp());
    t.to_string()
}
