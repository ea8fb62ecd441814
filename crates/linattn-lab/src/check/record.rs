//! What one case of one backend left: its outcome and the judged error figures, as
//! `--json` writes them and the summary tables read them.

use linattn_core::{Problem, TensorVerdict};
use serde::Serialize;

/// How one case ended for one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Outcome {
    Pass,
    Fail,
    /// The backend or the oracle returned an error (or panicked).
    Error,
    /// The backend does not implement this problem.
    NotApplicable,
}

/// One case of one backend, as written to `--json`.
#[derive(Debug, Clone, Serialize)]
pub(super) struct CaseRecord {
    pub(super) backend: String,
    pub(super) case: usize,
    pub(super) description: String,
    pub(super) problem: Problem,
    pub(super) seed: u64,
    pub(super) outcome: Outcome,
    /// n/a reason or error message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) message: Option<String>,
    pub(super) tolerance: f64,
    /// O and the gradients, judged by linattn-core's [`Judge`] (`judged_ratio` is the
    /// verdict's figure; `rms_ratio` the raw one against the tensor's own RMS).
    pub(super) errors: Vec<TensorVerdict>,
}

impl CaseRecord {
    pub(super) fn worst_rms(&self) -> f64 {
        self.errors
            .iter()
            .map(|e| e.judged_ratio)
            .fold(0.0, f64::max)
    }
    pub(super) fn worst_max_abs(&self) -> f64 {
        self.errors
            .iter()
            .map(|e| e.metrics.max_abs)
            .fold(0.0, f64::max)
    }
    /// What went wrong, in one line.
    pub(super) fn failure_summary(&self) -> String {
        if let Some(m) = &self.message {
            return m.clone();
        }
        self.errors
            .iter()
            .filter_map(TensorVerdict::failure)
            .collect::<Vec<_>>()
            .join("; ")
    }
}
