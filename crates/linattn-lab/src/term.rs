//! The terminal side of long runs: a progress bar that stays out of pipes and logs, and
//! the message of a panic caught from a backend.

use std::io::IsTerminal;

pub(crate) fn panic_message(payload: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".into()
    }
}

/// A bar of `total` steps on stderr; hidden when stderr is not a terminal or `quiet` is set
/// (`--no-progress`), so logs and pipes get only the results.
pub(crate) fn progress_bar(total: u64, quiet: bool) -> indicatif::ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} [{elapsed}] {wide_msg}")
    {
        bar.set_style(style);
    }
    bar
}
