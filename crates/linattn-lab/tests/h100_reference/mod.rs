//! The H100 runs' Nsight Compute exports and the same launches on the simulator: what
//! counters_vs_h100 and model_vs_h100 compare. Each run keeps its export beside a launch
//! trace of the kernels it ran (`linattn profile --record-trace`), so that the comparison
//! keeps measuring the simulator when the kernels change.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use linattn_lab::profile::against::SimLaunch;
use linattn_lab::profile::ncu::{self, NcuLaunch};
use linattn_lab::profile::replay;

/// One hardware run under bench-results/h100/: B = H = 1, N = 4096, D = M = 64, f16, elu+1,
/// forward + backward, `ncu --clock-control none`.
#[derive(Clone, Copy, Debug)]
pub enum Run {
    /// 2026-11-25, main at 588430d: causal_recurrent, causal_chunked, noncausal; 27 launches.
    First,
    /// 2026-11-26, kernels of ae9b497: causal_recurrent, causal_chunked (the training
    /// forward that keeps its states), noncausal, causal_cumsum; 36 launches.
    Second,
    /// 2026-11-27, kernels of b95b7bc: the same backends, the chunked training forward in
    /// segments (cc_seg_sums_train, cc_seg_scan, cc_forward_seg_train); 37 launches.
    Third,
}

impl Run {
    fn dir(self) -> PathBuf {
        let date = match self {
            Run::First => "2026-11-25",
            Run::Second => "2026-11-26",
            Run::Third => "2026-11-27",
        };
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../bench-results/h100")
            .join(date)
    }

    /// The launches Nsight Compute recorded.
    pub fn launches(self) -> usize {
        match self {
            Run::First => 27,
            Run::Second => 36,
            Run::Third => 37,
        }
    }

    /// The run's `ncu --csv` export.
    pub fn csv(self) -> PathBuf {
        self.dir().join("ncu-n4096.csv")
    }

    /// The run's Nsight Compute export of the chunked bf16 kernels at fla's shape
    /// (2, 16384, 16, 128) (the second and third runs).
    pub fn fla_csv(self) -> PathBuf {
        self.dir().join("ncu-fla.csv")
    }

    /// The launches of the export as the simulator ran them with the kernels the H100 ran:
    /// their PTX, shapes, arguments and input bytes.
    pub fn trace(self) -> PathBuf {
        self.dir().join("trace-n4096")
    }

    /// The export's launches and the simulator's (the trace's arch, sm_90) of the same runs.
    pub fn hardware_and_simulated(self) -> Result<(Vec<NcuLaunch>, Vec<SimLaunch>), String> {
        self.replayed(false)
    }

    /// As [`Run::hardware_and_simulated`], with `sass` each simulated launch's executed SASS
    /// estimated (`profile --replay … --sass`: ptxas and nvdisasm).
    pub fn replayed(self, sass: bool) -> Result<(Vec<NcuLaunch>, Vec<SimLaunch>), String> {
        let hw = ncu::read(&self.csv()).map_err(|e| e.to_string())?;
        let sim = replay(&self.trace(), sass).map_err(|e| e.to_string())?;
        Ok((hw, sim))
    }
}

/// `linattn ARGS`, the binary of this build.
pub fn linattn(args: &[&str]) -> Output {
    linattn_with(&[], args)
}

/// `linattn ARGS` with the environment variables `env` set.
pub fn linattn_with(env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_linattn"))
        .envs(env.iter().copied())
        .args(args)
        .output()
        .expect("the linattn binary runs")
}

/// (stdout, stderr) of a run, as text.
pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
