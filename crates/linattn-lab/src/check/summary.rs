//! What `linattn check` prints and writes: one row per backend, the worst failing cases,
//! and the `--json` report.

use super::record::{CaseRecord, Outcome};
use crate::skip_reason::Footnotes;
use linattn_core::{Backend, Judge, Precision};
use serde::Serialize;
use tabled::builder::Builder;
use tabled::settings::Style;

/// Per-backend state while the grid runs: the backend and its running summary.
pub(super) struct Entry {
    pub(super) backend: Box<dyn Backend>,
    pub(super) summary: BackendSummary,
}

/// A backend's row of the table.
#[derive(Debug, Clone, Serialize)]
pub(super) struct BackendSummary {
    pub(super) backend: String,
    pub(super) precision: Precision,
    pub(super) tolerance: f64,
    pub(super) run: usize,
    pub(super) passed: usize,
    pub(super) failed: usize,
    pub(super) not_applicable: usize,
    pub(super) worst_max_abs: f64,
    pub(super) worst_rms_ratio: f64,
    /// Host seconds spent in this backend's cases (oracles excluded).
    pub(super) seconds: f64,
    /// Set when the backend cannot run on this machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) skipped: Option<String>,
    pub(super) verdict: String,
}

impl BackendSummary {
    pub(super) fn new(info: &linattn_core::BackendInfo) -> Self {
        BackendSummary {
            backend: info.name.clone(),
            precision: info.precision,
            tolerance: Judge::for_precision(info.precision).tolerance,
            run: 0,
            passed: 0,
            failed: 0,
            not_applicable: 0,
            worst_max_abs: 0.0,
            worst_rms_ratio: 0.0,
            seconds: 0.0,
            skipped: None,
            verdict: String::new(),
        }
    }

    pub(super) fn add(&mut self, record: &CaseRecord) {
        match record.outcome {
            Outcome::NotApplicable => self.not_applicable += 1,
            Outcome::Pass | Outcome::Fail | Outcome::Error => {
                self.run += 1;
                if record.outcome == Outcome::Pass {
                    self.passed += 1;
                } else {
                    self.failed += 1;
                }
                self.worst_max_abs = self.worst_max_abs.max(record.worst_max_abs());
                self.worst_rms_ratio = self.worst_rms_ratio.max(record.worst_rms());
                if record.outcome == Outcome::Error {
                    // An error has no metrics: make sure the worst column shows it.
                    self.worst_rms_ratio = f64::INFINITY;
                }
            }
        }
    }

    pub(super) fn finish(&mut self) {
        self.verdict = if let Some(reason) = &self.skipped {
            format!("skipped: {reason}")
        } else if self.failed > 0 {
            "FAIL".into()
        } else if self.run == 0 {
            "n/a: no case applies".into()
        } else {
            "PASS".into()
        };
    }
}

/// Everything `--json` writes.
#[derive(Serialize)]
pub(super) struct CheckReport<'a> {
    pub(super) seed: u64,
    pub(super) grid: &'static str,
    pub(super) long: bool,
    /// `--sim-max-n`: the simulated backends left out the cases longer than this.
    pub(super) sim_max_n: Option<usize>,
    /// `--numerics`: how the simulated backends computed `.approx` and `mma` results.
    pub(super) numerics: &'static str,
    /// How the simulated backends' `mma` summed (`--mma-model`, else the mode's own).
    pub(super) mma_model: &'static str,
    /// `--forward-only`: every backend ran its forward alone (no ∂L/∂O staged), O judged.
    pub(super) forward_only: bool,
    pub(super) backends: &'a [BackendSummary],
    pub(super) cases: &'a [CaseRecord],
}

pub(super) fn sci(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2e}")
    } else {
        "inf".into()
    }
}

/// The table, then one footnote per distinct skip reason too long for the verdict column.
pub(super) fn summary_table(rows: &[BackendSummary]) -> String {
    let mut notes = Footnotes::new();
    let mut b = Builder::new();
    b.push_record([
        "backend",
        "cases",
        "n/a",
        "worst max-abs",
        "worst rms ratio",
        "tolerance",
        "seconds",
        "verdict",
    ]);
    for r in rows {
        let ran = r.skipped.is_none() && r.run > 0;
        b.push_record([
            r.backend.clone(),
            format!("{}/{}", r.passed, r.run),
            r.not_applicable.to_string(),
            if ran {
                sci(r.worst_max_abs)
            } else {
                "-".into()
            },
            if ran {
                sci(r.worst_rms_ratio)
            } else {
                "-".into()
            },
            format!("{:.0e}", r.tolerance),
            if ran {
                format!("{:.1}", r.seconds)
            } else {
                "-".into()
            },
            if r.skipped.is_some() {
                notes.short(&r.verdict)
            } else {
                r.verdict.clone()
            },
        ]);
    }
    let mut table = b.build();
    table.with(Style::sharp());
    let mut text = table.to_string();
    let notes = notes.render();
    if !notes.is_empty() {
        text.push('\n');
        text.push_str(notes.trim_end());
    }
    text
}

pub(super) fn failures_table(rows: &[&CaseRecord]) -> String {
    let mut b = Builder::new();
    b.push_record(["backend", "case", "problem", "failure"]);
    for r in rows {
        b.push_record([
            r.backend.clone(),
            r.case.to_string(),
            r.description.clone(),
            r.failure_summary(),
        ]);
    }
    let mut table = b.build();
    table.with(Style::sharp());
    table.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skip_reason::FIT;

    fn row(name: &str, skipped: Option<&str>) -> BackendSummary {
        let mut r = BackendSummary {
            backend: name.into(),
            precision: Precision::F32,
            tolerance: 1e-4,
            run: if skipped.is_some() { 0 } else { 3 },
            passed: if skipped.is_some() { 0 } else { 3 },
            failed: 0,
            not_applicable: 0,
            worst_max_abs: 1e-6,
            worst_rms_ratio: 1e-7,
            seconds: 0.5,
            skipped: skipped.map(String::from),
            verdict: String::new(),
        };
        r.finish();
        r
    }

    #[test]
    fn a_long_skip_reason_is_a_footnote_under_the_table() {
        let long = format!(
            "no NVRTC: libnvrtc.so.13 not found in [{}]",
            "/x".repeat(200)
        );
        let rows = [
            row("cpu/causal_recurrent/f32", None),
            row("sim/noncausal/f32", Some(&long)),
            row("sim/noncausal/f16", Some(&long)),
        ];
        let text = summary_table(&rows);
        assert_eq!(text.matches(&long).count(), 1, "{text}");
        assert!(text.ends_with(&format!("[1] skipped: {long}")), "{text}");
        assert_eq!(text.matches("skipped: no NVRTC [1]").count(), 2, "{text}");
        let cells = text
            .lines()
            .filter(|l| l.starts_with('│'))
            .flat_map(|l| l.trim_matches('│').split('│'));
        assert!(
            cells.clone().all(|c| c.trim().chars().count() <= FIT),
            "{text}"
        );
        assert!(cells.clone().any(|c| c.trim() == "PASS"), "{text}");
        // The JSON side keeps the whole reason.
        assert_eq!(rows[1].verdict, format!("skipped: {long}"));
    }
}
