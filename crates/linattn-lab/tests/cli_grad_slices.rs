//! The chunked gradient kernels (`cc_backward_dq`, `_dk`, `_dv`) run their output's 64-wide
//! slices either in one CTA per chunk (grid z = 1, the score tile computed once) or one CTA
//! per slice; the host picks by shape (`GRAD_LOOP_MIN_CTAS`: the check grid's shapes are all
//! below it, fla's above), and `LINATTN_CC_GRAD_SLICES=loop|split` forces either. The slice's
//! arithmetic is the same in both, so `linattn check` of the chunked form on the simulator
//! (every checker on, D and M up to 128: two slices) must give the same error figures to
//! the bit both ways, and pass. A bad value is refused naming the variable.

use std::path::Path;
use std::process::Output;

use linattn_testkit::Platform;
use serde_json::Value;

mod cli_common;

fn main() {
    let mut trials = Vec::new();
    trials.extend(linattn_testkit::stamp_executors!(
        for platform in [Platform::Sim] =>
            "looped_and_split_gradient_slices_agree_to_the_bit",
            looped_and_split_gradient_slices_agree_to_the_bit()
    ));
    trials.push(linattn_testkit::host(
        "a_bad_grad_slices_value_is_refused_naming_the_variable",
        a_bad_grad_slices_value_is_refused_naming_the_variable,
    ));
    linattn_testkit::run(trials)
}

fn check(dir: &Path, slices: &str, json: &str) -> Output {
    cli_common::linattn_command()
        .args([
            "check",
            "--backends",
            "sim/causal_chunked/*",
            "--sim-max-n",
            "130",
            "--json",
            json,
        ])
        .current_dir(dir)
        .env("LINATTN_CC_GRAD_SLICES", slices)
        .output()
        .expect("run linattn")
}

/// (backend, case, tensor) → (rms ratio, max abs) of every error record.
fn figures(path: &Path) -> Vec<(String, u64, String, f64, f64)> {
    let v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let mut out = Vec::new();
    for c in v["cases"].as_array().unwrap() {
        for e in c["errors"].as_array().into_iter().flatten() {
            out.push((
                c["backend"].as_str().unwrap().to_string(),
                c["case"].as_u64().unwrap(),
                e["tensor"].as_str().unwrap().to_string(),
                e["rms_ratio"].as_f64().unwrap(),
                e["max_abs"].as_f64().unwrap(),
            ));
        }
    }
    out
}

fn looped_and_split_gradient_slices_agree_to_the_bit() {
    let dir = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for slices in ["loop", "split"] {
        let json = format!("{slices}.json");
        let out = check(dir.path(), slices, &json);
        cli_common::assert_ok(&out);
        runs.push(figures(&dir.path().join(json)));
    }
    let (looped, split) = (&runs[0], &runs[1]);
    // Cases at D or M = 128 run two slices, so the loop's second trip is exercised.
    let wide = looped.iter().filter(|(_, _, t, _, _)| t == "dk").count();
    assert!(wide >= 10, "too few gradient records: {wide}");
    assert_eq!(looped.len(), split.len());
    for (a, b) in looped.iter().zip(split) {
        assert_eq!(a.0, b.0);
        assert_eq!((a.1, &a.2), (b.1, &b.2));
        assert!(
            a.3.to_bits() == b.3.to_bits() && a.4.to_bits() == b.4.to_bits(),
            "{} case {} {}: looped {:e} / {:e}, split {:e} / {:e}",
            a.0,
            a.1,
            a.2,
            a.3,
            a.4,
            b.3,
            b.4
        );
    }
}

fn a_bad_grad_slices_value_is_refused_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli_common::linattn_command()
        .args([
            "check",
            "--backends",
            "sim/causal_chunked/f16",
            "--sim-max-n",
            "7",
        ])
        .current_dir(dir.path())
        .env("LINATTN_CC_GRAD_SLICES", "sideways")
        .output()
        .expect("run linattn");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Every case the form takes fails with the reason (none is quietly "n/a").
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("LINATTN_CC_GRAD_SLICES=sideways: give auto, loop or split"),
        "{text}"
    );
}
