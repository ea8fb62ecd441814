//! The `profiles` section of a results file (schema_version 2): what `linattn profile`
//! measured on the simulator, per kernel, and the model built on it. Documented field by
//! field in bench-results/SCHEMA.md.

use serde::{Deserialize, Serialize};

use super::cell::{CellShape, Mode};
use linattn_core::Causality;
use linattn_cuda::executor::sim::model::{LaunchModel, Occupancy};
use linattn_cuda::executor::sim::{Counters, InstrClass, SimArch};

/// One profiled (backend, problem, mode).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileRecord {
    pub backend: String,
    pub shape: CellShape,
    pub causality: Causality,
    pub map: String,
    pub eps: f64,
    pub decay: f64,
    pub mode: Mode,
    /// B·H·N: the denominator of every per-token figure.
    pub tokens: u64,
    /// The simulated architecture and the part the model uses.
    pub arch: ModelParams,
    pub kernels: Vec<KernelProfile>,
    pub phases: Vec<PhaseProfile>,
}

impl ProfileRecord {
    /// What identifies a profile across runs.
    pub fn key(&self) -> String {
        format!(
            "{} {} B={} H={} N={} D={} M={} {:?} {} eps={} decay={}",
            self.backend,
            self.mode,
            self.shape.batch,
            self.shape.heads,
            self.shape.seq,
            self.shape.dk,
            self.shape.dv,
            self.causality,
            self.map,
            self.eps,
            self.decay
        )
    }
}

/// The architecture numbers the model used (see `linattn_ptxsim::arch` for sources).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelParams {
    /// `sm_90`, `sm_80`.
    pub arch: String,
    /// `H100`, `A100`.
    pub part: String,
    pub sm_count: u32,
    pub boost_clock_ghz: f64,
    pub hbm_gbps: f64,
    pub tensor_tflops: f64,
    pub fp32_tflops: f64,
    pub launch_overhead_us: f64,
}

impl From<&SimArch> for ModelParams {
    fn from(a: &SimArch) -> Self {
        ModelParams {
            arch: a.name.into(),
            part: a.part.into(),
            sm_count: a.sm_count,
            boost_clock_ghz: a.boost_clock_ghz,
            hbm_gbps: a.hbm_gbps,
            tensor_tflops: a.tensor_tflops,
            fp32_tflops: a.fp32_tflops,
            launch_overhead_us: a.launch_overhead_us,
        }
    }
}

/// The launches of one kernel (entry point) within one phase, summed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelProfile {
    /// `forward` or `backward`.
    pub phase: String,
    pub kernel: String,
    /// The compiled variant (source and defines).
    pub variant: String,
    pub launches: u64,
    pub ctas: u64,
    pub threads_per_cta: u32,
    pub registers: u32,
    /// Static + dynamic shared bytes per CTA (of the first launch).
    pub shared_bytes: u64,
    pub counters: CounterRecord,
    pub per_token: PerToken,
    /// Active lanes per warp instruction / 32.
    pub lane_utilisation: f64,
    /// Sectors per global request, and bytes used / bytes of sectors touched.
    pub global_sectors_per_request: f64,
    pub sector_efficiency: f64,
    /// Shared wavefronts per request, and per conflict-free wavefront.
    pub shared_wavefronts_per_request: f64,
    pub bank_conflict_factor: f64,
    pub occupancy: OccupancyRecord,
    pub model: ModelTime,
    /// The longest CTA critical path of its launches, split by where the cycles went
    /// (absent in files before 2026-11-27: zeros).
    #[serde(default)]
    pub critical_path: PathRecord,
    /// Per launch, when `linattn profile --sample` simulated only some CTAs: which, and the
    /// scale (absent: every CTA ran).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sampled: Vec<String>,
    /// Its warp instructions per CUDA source line, most first, when `linattn profile
    /// --lines` asked (absent otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_lines: Vec<SourceLineRecord>,
    /// With `--sass` or `--lines`, and ptxas and nvdisasm: its executed SASS warp
    /// instructions per token, estimated per PTX line from the SASS ptxas makes of each
    /// (`profile::sass_cost`); None when some launch had no estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sass_per_token_estimate: Option<f64>,
}

/// Warp instructions of one CUDA source line of a kernel, summed over its launches (PTX's
/// instructions: they rank lines, they are not ncu's SASS counts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceLineRecord {
    /// The kernel file (`causal_chunked_segments.cuh`); empty for instructions the PTX gives
    /// no line for.
    pub file: String,
    /// 1-based; 0 for code the compiler made for no line.
    pub line: u32,
    pub warp_instructions: u64,
    /// `warp_instructions` per token of the profile (B·H·N).
    pub per_token: f64,
    /// Class name → warp instructions (classes with none omitted).
    pub by_class: std::collections::BTreeMap<String, u64>,
    /// The kernel's PTX instructions at this line, executed or not.
    pub ptx_static: u64,
    /// The SASS instructions ptxas made of the line (`nvdisasm -g` of the `-lineinfo`
    /// cubin), when nvdisasm ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sass_static: Option<u64>,
    /// The SASS warp instructions per token the line executed, estimated per PTX line
    /// (`profile::sass_cost`; code ptxas moved to another line counts there), when every
    /// launch of the kernel had an estimate. (A line no simulated warp executed has no
    /// record, though its if-converted SASS issues: the kernel's estimate counts that.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sass_per_token: Option<f64>,
}

impl SourceLineRecord {
    /// The records of `lines` (ranked as given), per token of `tokens`; files by their name
    /// alone (`-lineinfo` prefixes NVRTC's working directory, not the file's).
    pub fn of(lines: &linattn_cuda::executor::sim::SourceLines, tokens: u64) -> Vec<Self> {
        lines
            .lines
            .iter()
            .map(|l| SourceLineRecord {
                file: l.file.rsplit('/').next().unwrap_or_default().to_string(),
                line: l.line,
                warp_instructions: l.warp_instructions,
                per_token: l.warp_instructions as f64 / tokens.max(1) as f64,
                by_class: InstrClass::ALL
                    .iter()
                    .zip(&l.by_class)
                    .filter(|(_, &n)| n > 0)
                    .map(|(c, &n)| (c.name().to_string(), n))
                    .collect(),
                ptx_static: l.static_instructions,
                sass_static: None,
                sass_per_token: None,
            })
            .collect()
    }
}

/// A CTA's critical path in cycles of the model's clock and its parts, which sum to it
/// (`linattn_ptxsim::PathBreakdown`): one cycle per instruction the last warp issued, its
/// waits for operands by the class of the instruction that produced them (classes it never
/// waited on omitted), for its earlier global stores before a global load, and at barriers.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PathRecord {
    pub cycles: u64,
    pub issue: u64,
    pub operand_wait: std::collections::BTreeMap<String, u64>,
    pub store_drain: u64,
    pub barrier: u64,
}

impl PathRecord {
    pub fn of(c: &Counters) -> PathRecord {
        let p = &c.critical_path;
        PathRecord {
            cycles: c.critical_path_cycles,
            issue: p.issue,
            operand_wait: InstrClass::ALL
                .iter()
                .map(|&k| (k.name().to_string(), p.operand_wait[k as usize]))
                .filter(|(_, cycles)| *cycles > 0)
                .collect(),
            store_drain: p.store_drain,
            barrier: p.barrier,
        }
    }

    /// Cycles waited on values of class `name` (0 when it never was).
    pub fn waited_on(&self, name: &str) -> u64 {
        self.operand_wait.get(name).copied().unwrap_or(0)
    }
}

/// Per-token figures (divided by B·H·N): what the regression gate compares.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct PerToken {
    pub warp_instructions: f64,
    pub thread_instructions: f64,
    pub global_sectors: f64,
    pub shared_wavefronts: f64,
    pub unique_dram_bytes: f64,
    pub mma: f64,
    pub fp32_flops: f64,
}

impl PerToken {
    pub fn of(c: &Counters, tokens: u64) -> PerToken {
        let t = tokens.max(1) as f64;
        PerToken {
            warp_instructions: c.warp_instructions as f64 / t,
            thread_instructions: c.thread_instructions as f64 / t,
            global_sectors: (c.global_load_sectors + c.global_store_sectors) as f64 / t,
            shared_wavefronts: (c.shared_load_wavefronts + c.shared_store_wavefronts) as f64 / t,
            unique_dram_bytes: c.unique_dram_bytes() as f64 / t,
            mma: c.mma as f64 / t,
            fp32_flops: c.fp32_flops as f64 / t,
        }
    }
}

/// The raw counters, with instructions by class as a name → (warp, thread) map.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CounterRecord {
    pub warp_instructions: u64,
    pub thread_instructions: u64,
    pub by_class: std::collections::BTreeMap<String, [u64; 2]>,
    pub fp32_flops: u64,
    pub mma: u64,
    pub barriers: u64,
    pub global_load_requests: u64,
    pub global_load_sectors: u64,
    pub global_load_bytes: u64,
    pub global_store_requests: u64,
    pub global_store_sectors: u64,
    pub global_store_bytes: u64,
    pub unique_load_sectors: u64,
    pub unique_store_sectors: u64,
    pub shared_load_requests: u64,
    pub shared_load_wavefronts: u64,
    pub shared_load_ideal_wavefronts: u64,
    pub shared_store_requests: u64,
    pub shared_store_wavefronts: u64,
    pub shared_store_ideal_wavefronts: u64,
}

impl From<&Counters> for CounterRecord {
    fn from(c: &Counters) -> Self {
        CounterRecord {
            warp_instructions: c.warp_instructions,
            thread_instructions: c.thread_instructions,
            by_class: InstrClass::ALL
                .iter()
                .map(|&k| {
                    (
                        k.name().to_string(),
                        [c.warp_by_class[k as usize], c.thread_by_class[k as usize]],
                    )
                })
                .filter(|(_, [w, _])| *w > 0)
                .collect(),
            fp32_flops: c.fp32_flops,
            mma: c.mma,
            barriers: c.barriers,
            global_load_requests: c.global_load_requests,
            global_load_sectors: c.global_load_sectors,
            global_load_bytes: c.global_load_bytes,
            global_store_requests: c.global_store_requests,
            global_store_sectors: c.global_store_sectors,
            global_store_bytes: c.global_store_bytes,
            unique_load_sectors: c.unique_load_sectors,
            unique_store_sectors: c.unique_store_sectors,
            shared_load_requests: c.shared_load_requests,
            shared_load_wavefronts: c.shared_load_wavefronts,
            shared_load_ideal_wavefronts: c.shared_load_ideal_wavefronts,
            shared_store_requests: c.shared_store_requests,
            shared_store_wavefronts: c.shared_store_wavefronts,
            shared_store_ideal_wavefronts: c.shared_store_ideal_wavefronts,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OccupancyRecord {
    pub ctas_per_sm: u32,
    pub warps_per_sm: u32,
    /// Resident warps / the SM's maximum (64).
    pub fraction: f64,
    pub limiter: String,
}

impl From<Occupancy> for OccupancyRecord {
    fn from(o: Occupancy) -> Self {
        OccupancyRecord {
            ctas_per_sm: o.ctas_per_sm,
            warps_per_sm: o.warps_per_sm,
            fraction: o.fraction,
            limiter: o.limiter.into(),
        }
    }
}

/// The model's time (seconds): never a measurement. `total_s` is the latency model
/// (`linattn_ptxsim::model::launch`, summed over launches), `roofline_s` the roofline alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelTime {
    pub total_s: f64,
    /// The roofline lower bound alone (the model before its latency term).
    #[serde(default)]
    pub roofline_s: f64,
    /// Waves of CTAs on the SMs: critical path and per-SM issue, combined as
    /// `linattn_ptxsim::model::overlap` (max + min²/max).
    #[serde(default)]
    pub sm_s: f64,
    pub dram_s: f64,
    pub tensor_s: f64,
    pub fp32_s: f64,
    pub issue_s: f64,
    pub launch_s: f64,
    /// latency / issue / dram / tensor / fp32: the largest term (of the longest launch).
    pub bound: String,
}

impl ModelTime {
    /// The models of some launches, summed; the bound is the longest launch's.
    pub fn of(models: &[LaunchModel]) -> ModelTime {
        let sum = |f: fn(&LaunchModel) -> f64| models.iter().map(f).sum::<f64>();
        let longest = models.iter().max_by(|a, b| a.total_s.total_cmp(&b.total_s));
        ModelTime {
            total_s: sum(|m| m.total_s),
            roofline_s: sum(|m| m.roofline.total_s),
            sm_s: sum(|m| m.sm_s),
            dram_s: sum(|m| m.roofline.dram_s),
            tensor_s: sum(|m| m.roofline.tensor_s),
            fp32_s: sum(|m| m.roofline.fp32_s),
            issue_s: sum(|m| m.roofline.issue_s),
            launch_s: sum(|m| m.roofline.launch_s),
            bound: longest.map_or("dram", |m| m.bound).into(),
        }
    }
}

/// One phase (forward or backward) summed over its kernels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseProfile {
    pub phase: String,
    pub launches: u64,
    pub per_token: PerToken,
    /// Bytes a token must move at least: its inputs read once and outputs written once at the
    /// storage precision (forward q, k, v, o; backward q, k, v, dO, dq, dk, dv).
    pub minimal_bytes_per_token: f64,
    /// unique DRAM bytes / minimal bytes.
    pub dram_over_minimum: f64,
    /// Sum of the kernels' model times.
    pub model_s: f64,
}
