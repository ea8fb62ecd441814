//! What trial bodies return, and how several checks become one outcome.

/// What a stamped body may return: nothing (it panics on failure) or the failure message.
pub trait TrialOutcome {
    fn into_result(self) -> Result<(), String>;
}

impl TrialOutcome for () {
    fn into_result(self) -> Result<(), String> {
        Ok(())
    }
}

impl TrialOutcome for Result<(), String> {
    fn into_result(self) -> Result<(), String> {
        self
    }
}

/// Runs every check, collecting all failures into one message.
pub fn all(checks: impl IntoIterator<Item = Result<(), String>>) -> Result<(), String> {
    let failures: Vec<String> = checks.into_iter().filter_map(Result::err).collect();
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}
