//! `scripts/check_vs_hardware.py` on small synthetic `check --json` files: the softmax
//! baseline is paired like for like with `cuda/softmax+gemmkernel` where the GPU file has it
//! (cuBLAS apart, informational: in no share or floor, its verdicts still judged), and with
//! cuBLAS, saying so, where it has not (the committed H100 files); exit codes 0, 1 and 2.
//! Needs `python3` (as CI does).

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/check_vs_hardware.py")
}

/// One case of `backend` with the rms ratios of O, dQ, dK, dV.
fn case(backend: &str, case: usize, outcome: &str, rms: [f64; 4]) -> Value {
    let errors: Vec<Value> = ["o", "dq", "dk", "dv"]
        .iter()
        .zip(rms)
        .map(|(tensor, r)| json!({ "tensor": tensor, "rms_ratio": r }))
        .collect();
    json!({ "backend": backend, "case": case, "outcome": outcome, "errors": errors })
}

/// `cases` of `form` (e.g. `softmax/f32`) on `device`, each with `rms` scaled by `scale`.
fn backend(device: &str, form: &str, scale: f64, outcome: &str) -> Vec<Value> {
    (0..2)
        .map(|i| {
            let base = 1e-6 * (i + 1) as f64;
            let rms = [base, 2.0 * base, 3.0 * base, 4.0 * base].map(|r| r * scale);
            case(&format!("{device}/{form}"), i, outcome, rms)
        })
        .collect()
}

/// The simulator's file: noncausal/f32, softmax/f32 and softmax/f16, two cases each.
fn sim_cases() -> Vec<Value> {
    ["noncausal/f32", "softmax/f32", "softmax/f16"]
        .iter()
        .flat_map(|form| backend("sim", form, 1.0, "pass"))
        .collect()
}

/// A GPU file like the H100's of 2026-11: the linear form bit-identical, cuBLAS's softmax
/// figures 3% off the simulator's (its summation order is not the GEMM kernel's).
fn gpu_cases_cublas_only() -> Vec<Value> {
    let mut cases = backend("cuda", "noncausal/f32", 1.0, "pass");
    cases.extend(backend("cuda", "softmax/f32", 1.03, "pass"));
    cases.extend(backend("cuda", "softmax/f16", 1.03, "pass"));
    cases
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn context(&self) -> String {
        format!("stdout:\n{}\nstderr:\n{}", self.stdout, self.stderr)
    }
}

fn run(sim: Vec<Value>, gpu: Vec<Value>, gpu_seed: u64, flags: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, cases: Vec<Value>, seed: u64| {
        let path = dir.path().join(name);
        let file = json!({ "seed": seed, "numerics": "as-compiled", "cases": cases });
        std::fs::write(&path, serde_json::to_string(&file).unwrap()).unwrap();
        path
    };
    let sim = write("sim.json", sim, 42);
    let gpu = write("gpu.json", gpu, gpu_seed);
    let out = Command::new("python3")
        .arg(script())
        .args(flags)
        .arg(&sim)
        .arg(&gpu)
        .output()
        .expect("python3 runs scripts/check_vs_hardware.py (CI has it)");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The table row of `name`, its cells trimmed.
fn row(stdout: &str, name: &str) -> Option<Vec<String>> {
    stdout
        .lines()
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>()
        })
        .find(|cells| cells.first().is_some_and(|c| c == name))
}

#[test]
fn without_gemmkernel_cases_softmax_is_paired_with_cublas_and_says_so() {
    let out = run(sim_cases(), gpu_cases_cublas_only(), 42, &[]);
    let context = out.context();
    assert_eq!(out.code, Some(0), "{context}");
    assert!(
        out.stdout.contains(
            "softmax/f16, softmax/f32: compared against cuBLAS (cuda/softmax), not like for \
             like:"
        ) && out.stdout.contains("lacks cuda/softmax+gemmkernel"),
        "{context}"
    );
    // As before the gemmkernel backends: every figure counted, softmax's against cuBLAS.
    assert!(
        out.stdout
            .contains("6 cases in both, 6 with the same verdict; 24 error figures: 8 bit-identical (33.33%), 24 within"),
        "{context}"
    );
    assert_eq!(row(&out.stdout, "softmax/f32").unwrap()[1..3], ["8", "0"]);
    assert_eq!(row(&out.stdout, "noncausal/f32").unwrap()[1..3], ["8", "8"]);
    assert!(!out.stdout.contains("informational"), "{context}");
    // The floors judge the cuBLAS figures then.
    let floored = run(
        sim_cases(),
        gpu_cases_cublas_only(),
        42,
        &["--min-identical", "0.5"],
    );
    assert_eq!(floored.code, Some(1), "{}", floored.context());
    assert!(floored.stderr.contains("under --min-identical 0.5"));
}

#[test]
fn gemmkernel_cases_are_counted_and_cublas_is_informational() {
    let mut gpu = gpu_cases_cublas_only();
    gpu.extend(backend("cuda", "softmax+gemmkernel/f32", 1.0, "pass"));
    gpu.extend(backend("cuda", "softmax+gemmkernel/f16", 1.0, "pass"));
    // Every counted figure is bit-identical, so the strictest floor holds: cuBLAS's 16
    // figures, none identical, count in no share.
    let out = run(sim_cases(), gpu, 42, &["--min-identical", "1.0"]);
    let context = out.context();
    assert_eq!(out.code, Some(0), "{context}");
    assert!(
        out.stdout.contains(
            "softmax/f16, softmax/f32: compared against cuda/softmax+gemmkernel (the same GEMM \
             kernel)"
        ),
        "{context}"
    );
    assert!(!out.stdout.contains("lacks"), "{context}");
    assert!(
        out.stdout.contains(
            "6 cases in both, 6 with the same verdict; 24 error figures: 24 bit-identical (100.00%)"
        ),
        "{context}"
    );
    let like = row(&out.stdout, "softmax/f32 vs softmax+gemmkernel/f32").expect(&context);
    assert_eq!(like[1..4], ["8", "8", "8"]);
    assert!(row(&out.stdout, "softmax/f32").is_none(), "{context}");
    let (counted, informational) = out
        .stdout
        .split_once("informational, in no share or floor")
        .expect(&context);
    assert!(!counted.contains("(cuBLAS)"), "{context}");
    assert!(
        informational.contains(
            "4 cases in both, 4 with the same verdict; 16 error figures: 0 bit-identical, 16 \
             within 0.9-1.1x"
        ),
        "{context}"
    );
    let cublas = row(informational, "softmax/f16 vs softmax/f16 (cuBLAS)").expect(&context);
    assert_eq!(cublas[1..4], ["8", "0", "8"]);
}

#[test]
fn verdicts_must_agree_against_either_engine() {
    // The informational cuBLAS pair fails a case the simulator passes: exit 1, named.
    let mut gpu = backend("cuda", "noncausal/f32", 1.0, "pass");
    gpu.extend(backend("cuda", "softmax/f32", 1.03, "fail"));
    gpu.extend(backend("cuda", "softmax+gemmkernel/f32", 1.0, "pass"));
    let sim: Vec<Value> = sim_cases()
        .into_iter()
        .filter(|c| c["backend"] != "sim/softmax/f16")
        .collect();
    let out = run(sim.clone(), gpu, 42, &[]);
    assert_eq!(out.code, Some(1), "{}", out.context());
    assert!(
        out.stdout.contains(
            "verdicts differ: ('softmax/f32', 0) against cuda/softmax/f32: sim pass, gpu fail"
        ),
        "{}",
        out.context()
    );
    // The counted gemmkernel pair disagreeing fails too.
    let mut gpu = backend("cuda", "noncausal/f32", 1.0, "pass");
    gpu.extend(backend("cuda", "softmax/f32", 1.03, "pass"));
    gpu.extend(backend("cuda", "softmax+gemmkernel/f32", 1.0, "fail"));
    let out = run(sim, gpu, 42, &[]);
    assert_eq!(out.code, Some(1), "{}", out.context());
    assert!(
        out.stdout.contains(
            "verdicts differ: ('softmax/f32', 1) against cuda/softmax+gemmkernel/f32: sim pass, \
             gpu fail"
        ),
        "{}",
        out.context()
    );
}

#[test]
fn a_precision_without_gemmkernel_cases_stays_with_cublas() {
    let mut gpu = gpu_cases_cublas_only();
    gpu.extend(backend("cuda", "softmax+gemmkernel/f32", 1.0, "pass"));
    let out = run(sim_cases(), gpu, 42, &[]);
    let context = out.context();
    assert_eq!(out.code, Some(0), "{context}");
    assert!(
        out.stdout
            .contains("softmax/f16: compared against cuBLAS (cuda/softmax), not like for like"),
        "{context}"
    );
    assert!(
        out.stdout
            .contains("softmax/f32: compared against cuda/softmax+gemmkernel"),
        "{context}"
    );
    assert!(row(&out.stdout, "softmax/f16").is_some(), "{context}");
    assert!(
        row(&out.stdout, "softmax/f32 vs softmax+gemmkernel/f32").is_some(),
        "{context}"
    );
    assert!(
        row(&out.stdout, "softmax/f32 vs softmax/f32 (cuBLAS)").is_some(),
        "{context}"
    );
}

#[test]
fn bad_input_is_exit_two() {
    let out = run(sim_cases(), gpu_cases_cublas_only(), 7, &[]);
    assert_eq!(out.code, Some(2), "{}", out.context());
    assert!(out.stderr.contains("seeds differ"), "{}", out.context());
    let out = run(
        sim_cases(),
        gpu_cases_cublas_only(),
        42,
        &["--only", "nothing/*"],
    );
    assert_eq!(out.code, Some(2), "{}", out.context());
}
