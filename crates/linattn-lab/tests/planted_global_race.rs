//! A cross-CTA race planted in a project kernel: `cs_contract` (kernels/causal_cumsum.cu, a
//! CTA per token) stores its output row with the CTA's token term dropped, so every CTA of a
//! head writes its own (different) row into token 0's. `linattn check` must report it as
//! globalcheck's race between different CTAs; with `--no-globalcheck` no other checker
//! reports anything (the case fails only as a wrong answer), so the global checker is what
//! names the race.

mod barrier_mutants;
mod cli_common;

use barrier_mutants::probes::{Probe, Verdict, Workspace};
use barrier_mutants::{copy_kernels, kernel_dir};
use linattn_testkit::Platform;

const FILE: &str = "causal_cumsum.cu";
/// The output store of cs_contract; `tok` = blockIdx.y·n + blockIdx.x.
const STORE: &str = "la_store(out, tok * m_dim + m, num / den);";
/// The same store with blockIdx.x dropped from the index.
const RACY: &str = "la_store(out, (tok - blockIdx.x) * m_dim + m, num / den);";

/// fp16 storage: the backward then takes G·O from its own scan (cr_backward_go) instead of
/// reading the forward's O, so no later kernel reads the rows the race left unwritten (in
/// fp32, cr_backward_prep would, and initcheck would report that too).
const fn probe(globalcheck: bool) -> Probe {
    Probe::Check {
        backends: "sim/causal_cumsum/f16",
        max_n: 7,
        globalcheck,
        env: &[],
    }
}

fn planted_race_is_caught_by_globalcheck_only() -> Result<(), String> {
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mutant = copy_kernels(&kernel_dir(), scratch.path(), "cross-cta", |name, text| {
        if name != FILE {
            return Ok(text);
        }
        match text.matches(STORE).count() {
            1 => Ok(text.replace(STORE, RACY)),
            n => Err(format!(
                "kernels/{FILE} holds `{STORE}` {n} times (the test plants its race there): \
                 update STORE to the kernel's output store"
            )),
        }
    })?;
    let ws = Workspace::new();
    // The unmutated kernels pass both ways: any report below is the planted race's.
    for globalcheck in [true, false] {
        let work = scratch.path().join(format!("baseline-{globalcheck}"));
        let verdict = ws.run(&probe(globalcheck), &kernel_dir(), &work);
        if verdict != Verdict::Passed {
            return Err(format!(
                "`{}` on the unmutated kernels: {verdict:?}",
                probe(globalcheck)
            ));
        }
    }
    match ws.run(&probe(true), &mutant, &scratch.path().join("with")) {
        Verdict::Caught { by, detail, .. }
            if by == "globalcheck" && detail.contains("different CTAs of one launch") =>
        {
            println!("planted race, with globalcheck: {detail}");
        }
        other => {
            return Err(format!(
                "with globalcheck, expected its cross-CTA race: {other:?}"
            ))
        }
    }
    match ws.run(&probe(false), &mutant, &scratch.path().join("without")) {
        Verdict::Caught { seen, detail, .. } if seen == ["wrong answer"] => {
            println!("planted race, --no-globalcheck: no checker fault; {detail}");
            Ok(())
        }
        other => Err(format!(
            "with --no-globalcheck, expected a wrong answer and no checker's fault: {other:?}"
        )),
    }
}

fn main() {
    let trials = vec![linattn_testkit::stamp(
        Platform::Sim,
        "a_cross_cta_race_planted_in_cs_contract_is_caught_by_globalcheck_only",
        Box::new(planted_race_is_caught_by_globalcheck_only),
    )];
    linattn_testkit::run(trials)
}
