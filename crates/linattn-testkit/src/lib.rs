//! What the linattn test suites share.
//!
//! * Stamping: [`stamp_executors!`] stamps one test body for every executor (`cuda`, `sim`)
//!   as libtest-mimic trials (test targets with `harness = false`), so an executor that is
//!   absent shows as `ignored` with its reason in the runner's own summary, never as a pass.
//!   `LINATTN_REQUIRE_NVRTC=1` (CI) makes the simulator's trials run, and fail, when NVRTC is
//!   missing; `LINATTN_REQUIRE_GPU=1` does the same for the GPU's trials.
//! * Comparison with the f64 oracle of linattn-cpu through linattn-core's one verdict rule
//!   ([`linattn_core::Judge`]): inputs rounded to the backend's storage, RMS ratio within the
//!   precision's tolerance, cancelled gradients judged against the case's largest (as
//!   `linattn check` does).
//! * The simulator's counters per kernel, and how they grow with N.
//! * The CUDA tools the SASS tests need ([`with_cuda_tools`]): skipped with why where they
//!   are missing, failing under `LINATTN_REQUIRE_CUDA_TOOLS=1`.

mod counters;
mod cuda_tools;
mod oracle;
mod outcome;

pub use counters::{counters_scale, kernel_counters};
pub use cuda_tools::{cuda_tools, with_cuda_tools, without_cuda_tools, CudaTools};
pub use linattn_cuda::Platform;
pub use oracle::{against_oracle, close, forward_against_oracle, oracle, rounder, run_judged};
pub use outcome::{all, TrialOutcome};

pub use libtest_mimic::Trial;

use libtest_mimic::{Arguments, Failed};
use linattn_core::Backend;

/// A trial body: Ok, or the failure message.
pub type Body = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// Runs the trials with the command line's filters and exits with libtest's status.
pub fn run(trials: Vec<Trial>) -> ! {
    let args = Arguments::from_args();
    libtest_mimic::run(&args, trials).exit()
}

/// Whether trials on `platform` can run here; `Err(reason)` if not (and not required).
pub fn platform_status(platform: Platform) -> Result<(), String> {
    let required = match platform {
        Platform::Cuda => "LINATTN_REQUIRE_GPU",
        Platform::Sim => "LINATTN_REQUIRE_NVRTC",
    };
    match platform.available() {
        Ok(()) => Ok(()),
        Err(_) if std::env::var(required).as_deref() == Ok("1") => Ok(()),
        // Unsupported::Unavailable displays as "skipped: <reason>".
        Err(reason) => Err(reason
            .to_string()
            .trim_start_matches("skipped: ")
            .to_string()),
    }
}

/// A trial named `name` running `body` when `platform` is usable, else ignored with the
/// reason as its kind; required but absent, it fails. A panic in `body` fails the trial
/// (libtest-mimic catches it). [`stamp_executors!`] is how test files call it.
pub fn stamp(platform: Platform, name: impl Into<String>, body: Body) -> Trial {
    let status = platform_status(platform);
    let trial = Trial::test(name, move || {
        if let Err(reason) = platform.available() {
            return Err(Failed::from(format!(
                "{platform} required but unavailable: {reason}"
            )));
        }
        body().map_err(Failed::from)
    });
    match status {
        Ok(()) => trial,
        Err(reason) => trial
            .with_ignored_flag(true)
            .with_kind(format!("skipped: {reason}")),
    }
}

/// One test body stamped for every executor of a list, as libtest-mimic trials (a
/// `Vec<Trial>`): each runs where its executor is present, and is reported `ignored` with
/// the reason where it is absent (failing instead under `LINATTN_REQUIRE_NVRTC=1` /
/// `LINATTN_REQUIRE_GPU=1`). A body panics on failure or returns `Result<(), String>`.
///
/// * `stamp_executors![a, b]`: the functions `a(Platform)`, `b(Platform)` on every executor,
///   as the trials `a::cuda`, `a::sim`, `b::cuda`, `b::sim`.
/// * `stamp_executors!(for platform in PLATFORMS => NAME, BODY)`: for each platform, the
///   trial NAME (a `String` or `&str`, may use `platform`) running the expression BODY.
/// * `stamp_executors!(for platform in PLATFORMS, item in ITEMS => NAME, BODY)`: the same for
///   each item of ITEMS (an iterator expression that may use `platform`, e.g. the backends on
///   it); NAME and BODY may use both; BODY owns the item.
#[macro_export]
macro_rules! stamp_executors {
    ($($body:ident),+ $(,)?) => {{
        let mut trials = ::std::vec::Vec::new();
        $(
            trials.extend($crate::stamp_executors!(
                for platform in $crate::Platform::ALL =>
                    format!("{}::{}", stringify!($body), platform),
                    $body(platform)
            ));
        )+
        trials
    }};
    (for $platform:ident in $platforms:expr => $name:expr, $body:expr $(,)?) => {
        $crate::stamp_executors!(for $platform in $platforms, () in [()] => $name, $body)
    };
    (for $platform:ident in $platforms:expr, $item:pat in $items:expr =>
        $name:expr, $body:expr $(,)?) => {{
        let mut trials: ::std::vec::Vec<$crate::Trial> = ::std::vec::Vec::new();
        for $platform in $platforms {
            for $item in $items {
                let name = ::std::string::String::from($name);
                trials.push($crate::stamp(
                    $platform,
                    name,
                    ::std::boxed::Box::new(move || $crate::TrialOutcome::into_result($body)),
                ));
            }
        }
        trials
    }};
}

/// A trial that checks the behaviour *without* some platform (typed refusals, no panic):
/// it runs where any of `platforms` is absent and is ignored, with the reason, where all
/// are present, so a machine with everything never reports it as passed.
pub fn without_platform(name: &str, platforms: &[Platform], body: fn()) -> Trial {
    let any_absent = platforms.iter().any(|p| p.available().is_err());
    let trial = host(name, body);
    if any_absent {
        trial
    } else {
        trial
            .with_ignored_flag(true)
            .with_kind("skipped: every platform is present; this checks the path without one")
    }
}

/// A test that needs no executor (so it runs everywhere), as a trial.
pub fn host(name: &str, body: fn()) -> Trial {
    Trial::test(name, move || {
        body();
        Ok(())
    })
}

/// A CUDA backend (either platform) by name.
pub fn backend(name: &str) -> Result<Box<dyn Backend>, String> {
    backend_named(name, linattn_cuda::backends())
}

/// The backend of `all` named `name`.
pub fn backend_named(name: &str, all: Vec<Box<dyn Backend>>) -> Result<Box<dyn Backend>, String> {
    all.into_iter()
        .find(|b| b.name() == name)
        .ok_or_else(|| format!("no backend named {name}"))
}
