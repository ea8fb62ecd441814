//! The counter regression gate of `linattn compare`: profiles matched by backend, shape,
//! causality, map, mode, ε and decay; kernels by phase and entry point. Counters are exact,
//! so there is no noise rule: a per-token counter that moves by more than the threshold
//! (default 0.5%) is reported, direction-aware: more instructions, sectors, wavefronts or
//! DRAM bytes, or lower occupancy, is a regression; the reverse an improvement. Where both
//! sides estimated the SASS a kernel executes (`profile --sass`), that is gated alike. A kernel that
//! appears or disappears within a matched profile is a regression too (the baseline must be
//! updated in the same commit as the change that causes it). A profile of BASE that NEW did
//! not run is a regression only with `complete` (the CI grid); otherwise it is listed as not
//! compared, so one backend at one shape can be checked against the whole baseline.

use std::collections::BTreeMap;

use crate::results::profiles::{KernelProfile, ProfileRecord};

/// One counter that moved.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterChange {
    pub profile: String,
    /// `phase/kernel`.
    pub kernel: String,
    pub counter: &'static str,
    pub base: f64,
    pub new: f64,
    pub regression: bool,
}

/// What the gate found.
#[derive(Debug, Default)]
pub struct GateOutcome {
    pub matched_profiles: usize,
    pub matched_kernels: usize,
    pub changes: Vec<CounterChange>,
    /// Kernels present on one side only of a matched profile, and, with `complete`, profiles
    /// of BASE missing from NEW (each a regression).
    pub structural: Vec<String>,
    /// Profiles on one side only that are not regressions (listed, not gated).
    pub unmatched: Vec<String>,
}

impl GateOutcome {
    pub fn regressions(&self) -> usize {
        self.changes.iter().filter(|c| c.regression).count() + self.structural.len()
    }

    /// Something of BASE that NEW lacks: a regression of the `complete` grid, else listed.
    fn missing(&mut self, line: String, complete: bool) {
        if complete {
            self.structural.push(line);
        } else {
            self.unmatched.push(line);
        }
    }
}

/// (name, value, whether higher is worse) of the gated figures of a kernel: its counters,
/// and the estimate of the SASS it executes where the profile made one (`--sass`: it moves
/// where ptxas's code does and PTX does not, as when an exp became one MUFU.EX2).
fn gated(k: &KernelProfile) -> Vec<(&'static str, Option<f64>, bool)> {
    vec![
        (
            "warp instructions/token",
            Some(k.per_token.warp_instructions),
            true,
        ),
        (
            "thread instructions/token",
            Some(k.per_token.thread_instructions),
            true,
        ),
        (
            "global sectors/token",
            Some(k.per_token.global_sectors),
            true,
        ),
        (
            "shared wavefronts/token",
            Some(k.per_token.shared_wavefronts),
            true,
        ),
        (
            "unique DRAM bytes/token",
            Some(k.per_token.unique_dram_bytes),
            true,
        ),
        ("mma/token", Some(k.per_token.mma), true),
        ("occupancy", Some(k.occupancy.fraction), false),
        (
            "SASS warp instructions/token (estimated)",
            k.sass_per_token_estimate,
            true,
        ),
    ]
}

pub fn compare_profiles(
    base: &[ProfileRecord],
    new: &[ProfileRecord],
    threshold: f64,
    complete: bool,
) -> GateOutcome {
    let index = |ps: &[ProfileRecord]| -> BTreeMap<String, ProfileRecord> {
        ps.iter().map(|p| (p.key(), p.clone())).collect()
    };
    let (base, new) = (index(base), index(new));
    let mut out = GateOutcome::default();
    for (key, b) in &base {
        let Some(n) = new.get(key) else {
            out.missing(format!("profile only in BASE: {key}"), complete);
            continue;
        };
        out.matched_profiles += 1;
        let kernels = |p: &ProfileRecord| -> BTreeMap<String, KernelProfile> {
            p.kernels
                .iter()
                .map(|k| (format!("{}/{}", k.phase, k.kernel), k.clone()))
                .collect()
        };
        let (bk, nk) = (kernels(b), kernels(n));
        for (name, kb) in &bk {
            let Some(kn) = nk.get(name) else {
                out.structural
                    .push(format!("{key}: kernel {name} only in BASE"));
                continue;
            };
            out.matched_kernels += 1;
            for ((counter, vb, higher_worse), (_, vn, _)) in gated(kb).into_iter().zip(gated(kn)) {
                // A figure BASE has and NEW lacks (an estimate made without ptxas): a gap
                // in the gate, a regression of the complete grid.
                let (vb, vn) = match (vb, vn) {
                    (Some(b), Some(n)) => (b, n),
                    (Some(_), None) => {
                        out.missing(format!("{key}: {name}: {counter} only in BASE"), complete);
                        continue;
                    }
                    _ => continue,
                };
                let moved = if vb == 0.0 {
                    vn != 0.0
                } else {
                    ((vn - vb) / vb).abs() > threshold
                };
                if moved {
                    out.changes.push(CounterChange {
                        profile: key.clone(),
                        kernel: name.clone(),
                        counter,
                        base: vb,
                        new: vn,
                        regression: (vn > vb) == higher_worse,
                    });
                }
            }
        }
        for name in nk.keys().filter(|k| !bk.contains_key(*k)) {
            out.structural
                .push(format!("{key}: kernel {name} only in NEW"));
        }
    }
    for key in new.keys().filter(|k| !base.contains_key(*k)) {
        out.unmatched
            .push(format!("profile only in NEW (not gated): {key}"));
    }
    out
}

pub fn render_gate(out: &GateOutcome) -> String {
    use tabled::builder::Builder;
    use tabled::settings::Style;
    let mut text = String::new();
    if !out.changes.is_empty() {
        let mut b = Builder::new();
        b.push_record([
            "verdict", "profile", "kernel", "counter", "base", "new", "new/base",
        ]);
        for c in &out.changes {
            b.push_record([
                if c.regression {
                    "REGRESSION"
                } else {
                    "improvement"
                }
                .to_string(),
                c.profile.clone(),
                c.kernel.clone(),
                c.counter.to_string(),
                format!("{:.4}", c.base),
                format!("{:.4}", c.new),
                if c.base == 0.0 {
                    "-".into()
                } else {
                    format!("{:.4}", c.new / c.base)
                },
            ]);
        }
        text.push_str(&b.build().with(Style::sharp()).to_string());
        text.push('\n');
    }
    for s in &out.structural {
        text.push_str(&format!("REGRESSION: {s}\n"));
    }
    if out.unmatched.len() > 6 {
        text.push_str(&format!(
            "{} profiles on one side only, not compared (first: {})\n",
            out.unmatched.len(),
            out.unmatched[0]
        ));
    } else {
        for s in &out.unmatched {
            text.push_str(&format!("not compared: {s}\n"));
        }
    }
    let improvements = out.changes.iter().filter(|c| !c.regression).count();
    text.push_str(&format!(
        "{} profiles and {} kernels matched: {} counter regressions, {} improvements, {} \
         structural changes\n",
        out.matched_profiles,
        out.matched_kernels,
        out.changes.len() - improvements,
        improvements,
        out.structural.len()
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::profiles::{ModelParams, ModelTime, OccupancyRecord, PerToken};
    use crate::results::{CellShape, Mode};

    fn kernel(name: &str, warp: f64, occupancy: f64) -> KernelProfile {
        KernelProfile {
            phase: "forward".into(),
            kernel: name.into(),
            variant: String::new(),
            launches: 1,
            ctas: 1,
            threads_per_cta: 128,
            registers: 32,
            shared_bytes: 0,
            counters: Default::default(),
            per_token: PerToken {
                warp_instructions: warp,
                ..PerToken::default()
            },
            lane_utilisation: 1.0,
            global_sectors_per_request: 4.0,
            sector_efficiency: 1.0,
            shared_wavefronts_per_request: 1.0,
            bank_conflict_factor: 1.0,
            occupancy: OccupancyRecord {
                ctas_per_sm: 1,
                warps_per_sm: 4,
                fraction: occupancy,
                limiter: "threads".into(),
            },
            model: ModelTime {
                total_s: 0.0,
                roofline_s: 0.0,
                sm_s: 0.0,
                dram_s: 0.0,
                tensor_s: 0.0,
                fp32_s: 0.0,
                issue_s: 0.0,
                launch_s: 0.0,
                bound: "dram".into(),
            },
            critical_path: Default::default(),
            sampled: Vec::new(),
            source_lines: Vec::new(),
            sass_per_token_estimate: None,
        }
    }

    fn profile(kernels: Vec<KernelProfile>) -> ProfileRecord {
        ProfileRecord {
            backend: "sim/x/f16".into(),
            shape: CellShape {
                batch: 1,
                heads: 1,
                seq: 1024,
                dk: 64,
                dv: 64,
            },
            causality: linattn_core::Causality::Causal,
            map: "elu+1".into(),
            eps: 1e-6,
            decay: 1.0,
            mode: Mode::Forward,
            tokens: 1024,
            arch: ModelParams::from(&linattn_cuda::executor::sim::SimArch::SM90),
            kernels,
            phases: Vec::new(),
        }
    }

    #[test]
    fn half_a_percent_more_instructions_is_a_regression_and_less_occupancy_too() {
        let base = [profile(vec![
            kernel("a", 100.0, 0.5),
            kernel("b", 10.0, 0.5),
        ])];
        let same = compare_profiles(&base, &base, 0.005, false);
        assert_eq!((same.regressions(), same.matched_kernels), (0, 2));
        let new = [profile(vec![
            kernel("a", 100.4, 0.5),
            kernel("b", 10.06, 0.25),
        ])];
        let out = compare_profiles(&base, &new, 0.005, false);
        // a: +0.4% is below the threshold; b: +0.6% instructions and half the occupancy.
        assert_eq!(out.regressions(), 2, "{out:?}");
        let better = [profile(vec![
            kernel("a", 90.0, 0.5),
            kernel("b", 10.0, 0.75),
        ])];
        let out = compare_profiles(&base, &better, 0.005, false);
        assert_eq!((out.regressions(), out.changes.len()), (0, 2));
    }

    #[test]
    fn the_sass_estimate_is_gated_where_both_sides_have_one() {
        let with = |warp: f64, sass: Option<f64>| {
            let mut k = kernel("a", warp, 0.5);
            k.sass_per_token_estimate = sass;
            [profile(vec![k])]
        };
        // The PTX the same, the SASS 2% more (an exp ptxas expands): a regression.
        let out = compare_profiles(
            &with(100.0, Some(80.0)),
            &with(100.0, Some(81.6)),
            0.005,
            false,
        );
        assert_eq!(out.regressions(), 1, "{out:?}");
        assert_eq!(
            out.changes[0].counter,
            "SASS warp instructions/token (estimated)"
        );
        // Less SASS: an improvement.
        let out = compare_profiles(
            &with(100.0, Some(80.0)),
            &with(100.0, Some(70.0)),
            0.005,
            false,
        );
        assert_eq!((out.regressions(), out.changes.len()), (0, 1));
        // No estimate on either side, or only in NEW: nothing to gate.
        assert!(
            compare_profiles(&with(100.0, None), &with(100.0, None), 0.005, true)
                .changes
                .is_empty()
        );
        assert_eq!(
            compare_profiles(&with(100.0, None), &with(100.0, Some(1.0)), 0.005, true)
                .regressions(),
            0
        );
        // Only in BASE (the run could not estimate): a regression of the complete grid,
        // listed otherwise.
        assert_eq!(
            compare_profiles(&with(100.0, Some(80.0)), &with(100.0, None), 0.005, true)
                .regressions(),
            1
        );
        let partial = compare_profiles(&with(100.0, Some(80.0)), &with(100.0, None), 0.005, false);
        assert_eq!((partial.regressions(), partial.unmatched.len()), (0, 1));
    }

    #[test]
    fn kernels_that_come_or_go_are_regressions_and_missing_profiles_with_complete() {
        let base = [profile(vec![kernel("a", 1.0, 0.5)])];
        let new = [profile(vec![kernel("a", 1.0, 0.5), kernel("c", 1.0, 0.5)])];
        assert_eq!(compare_profiles(&base, &new, 0.005, false).regressions(), 1);
        let subset = compare_profiles(&base, &[], 0.005, false);
        assert_eq!((subset.regressions(), subset.unmatched.len()), (0, 1));
        assert_eq!(compare_profiles(&base, &[], 0.005, true).regressions(), 1);
    }
}
