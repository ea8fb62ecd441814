//! What `linattn check` prints and writes: one row per backend, the worst failing cases,
//! and the `--json` report.

use super::record::{CaseRecord, Outcome};
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

pub(super) fn summary_table(rows: &[BackendSummary]) -> String {
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
            r.verdict.clone(),
        ]);
    }
    let mut table = b.build();
    table.with(Style::sharp());
    table.to_string()
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
