//! Every typed kernel argument struct against its kernel (see `src/signature.rs`): against
//! the `.cu` declaration (names, kinds, order; no NVRTC needed) and against the PTX `.entry`
//! of every compiled variant for sm_80 and sm_90 (NVRTC; ignored with the reason where it is
//! absent, failing under `LINATTN_REQUIRE_NVRTC=1`).

use libtest_mimic::Trial;
use linattn_cuda::registry::FormEntry;
use linattn_cuda::runtime::{compile, Arch};
use linattn_cuda::signature::{check_against_ptx, check_against_source};
use linattn_cuda::{Platform, FORMS};

/// Every variant of `form`, compiled for both archs, against its argument structs.
pub fn ptx_matches(form: &FormEntry) -> Result<(), String> {
    let mut problems = Vec::new();
    for variant in (form.variants)() {
        for arch in [Arch::SM80, Arch::SM90] {
            let compiled = compile(&variant, arch).map_err(|e| e.to_string())?;
            let label = format!("{} for {arch}", compiled.label);
            if let Err(problem) = check_against_ptx(
                form.kernel_params,
                &variant.entry_points,
                &compiled.ptx,
                &label,
            ) {
                problems.push(problem);
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

fn main() {
    let mut trials = Vec::new();
    for form in FORMS {
        trials.push(Trial::test(
            format!(
                "{}.cu: argument structs match the source declarations",
                form.name
            ),
            move || check_against_source(&form).map_err(Into::into),
        ));
        trials.push(linattn_testkit::stamp(
            Platform::Sim,
            format!(
                "{}.cu: argument structs match the PTX of every variant",
                form.name
            ),
            Box::new(move || ptx_matches(&form)),
        ));
    }
    linattn_testkit::run(trials)
}
