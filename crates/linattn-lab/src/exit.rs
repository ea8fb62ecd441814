//! The exit status of a run that could not start here, and the hint that goes with it: one
//! place for `run_cli` and the subcommands that find nothing runnable.

use std::process::ExitCode;

/// Exit status when nothing could run because the machine lacks what it needs (GPU, CUDA
/// driver, NVRTC): distinct from bad input (2) and failures (1), so scripts can tell "not
/// here" from "wrong".
pub const EXIT_UNAVAILABLE: u8 = 3;

/// Prints how to get what is missing and returns [`EXIT_UNAVAILABLE`].
pub(crate) fn exit_unavailable(reason: &str) -> ExitCode {
    if reason.contains("NVRTC") {
        eprintln!(
            "hint: linattn installs the pinned NVRTC wheel into ~/.cache/linattn by itself \
             unless LINATTN_NO_PROVISION=1 or LINATTN_NVRTC_DIR is set, when python3 -m pip \
             can reach PyPI; else `just nvrtc` installs it into .nvrtc/ (found there without \
             LD_LIBRARY_PATH). The sim/* backends need only that, no GPU."
        );
    } else {
        eprintln!(
            "hint: cuda/* backends need an NVIDIA GPU and its driver; on this machine use \
             sim/* (the PTX simulator, which needs only NVRTC) or cpu/*."
        );
    }
    ExitCode::from(EXIT_UNAVAILABLE)
}
