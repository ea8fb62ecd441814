//! Every typed kernel argument struct against its kernel (see `src/signature.rs`): against
//! the `.cu` declaration (names, kinds, order; no NVRTC needed) and against the PTX `.entry`
//! of every compiled variant for sm_80 and sm_90 (NVRTC; ignored with the reason where it is
//! absent, failing under `LINATTN_REQUIRE_NVRTC=1`). linattn-softmax runs the same two
//! checks on its form.

use libtest_mimic::Trial;
use linattn_cuda::signature::{check_against_source, check_form_ptx};
use linattn_cuda::{Platform, FORMS};

fn main() {
    let mut trials: Vec<Trial> = FORMS
        .into_iter()
        .map(|form| {
            Trial::test(
                format!(
                    "{}.cu: argument structs match the source declarations",
                    form.name
                ),
                move || check_against_source(&form).map_err(Into::into),
            )
        })
        .collect();
    // NVRTC is what compiling needs, and what the simulator executor needs: stamped on it.
    trials.extend(linattn_testkit::stamp_executors!(
        for platform in [Platform::Sim], form in FORMS =>
            format!("{}.cu: argument structs match the PTX of every variant", form.name),
            check_form_ptx(&form)
    ));
    linattn_testkit::run(trials)
}
