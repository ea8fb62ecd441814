//! The `bench`, `compare` and `report` subcommands end to end, through the binary.

mod cli_common;

use cli_common::{assert_ok, linattn, linattn_in, linattn_ok, read_json};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Output;

fn cell(seq: u64, median: f64, rel_stdev: f64) -> Value {
    json!({
        "backend": "cpu/causal_recurrent/f32",
        "device": "cpu",
        "precision": "f32",
        "algorithm": "linear",
        "form": "recurrent",
        "mode": "forward",
        "shape": {"batch": 1, "heads": 4, "seq": seq, "dk": 32, "dv": 32},
        "causality": "causal",
        "map": "elu+1",
        "eps": 1e-6,
        "decay": 1.0,
        "status": "ok",
        "samples_s": [median * 0.99, median, median * 1.01],
        "median_s": median,
        "min_s": median * 0.99,
        "max_s": median * 1.01,
        "rel_stdev": rel_stdev,
        "peak_bytes": 1024 * seq,
        "peak_bytes_source": "counting-allocator"
    })
}

fn results(cells: Vec<Value>, device: &str) -> Value {
    json!({
        "schema_version": 1,
        "environment": {"device_name": device, "date": "2026-11-22T00:00:00Z"},
        "grid": {},
        "cells": cells
    })
}

/// Four cells, N = 256..2048, time linear in N, 1% noise.
fn base_cells() -> Vec<Value> {
    (8..12)
        .map(|k| cell(1 << k, 1e-6 * f64::from(1u32 << k), 0.01))
        .collect()
}

fn write(dir: &Path, name: &str, v: &Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string_pretty(v).unwrap()).unwrap();
    p
}

fn compare(base: &Path, new: &Path) -> Output {
    linattn(&["compare", base.to_str().unwrap(), new.to_str().unwrap()])
}

/// The base cells (on "cpu X") compared with a copy whose N = 1024 cell is 20% slower with
/// `rel_stdev` noise, measured on `device`.
fn compare_one_slower_cell(rel_stdev: f64, device: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let base = write(dir.path(), "base.json", &results(base_cells(), "cpu X"));
    let mut cells = base_cells();
    cells[2]["median_s"] = json!(1.2e-6 * 1024.0);
    cells[2]["rel_stdev"] = json!(rel_stdev);
    let new = write(dir.path(), "new.json", &results(cells, device));
    compare(&base, &new)
}

#[test]
fn one_cell_twenty_percent_slower_is_the_one_regression() {
    // The base cells' own 1% noise.
    let out = compare_one_slower_cell(0.01, "cpu X");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert_eq!(stdout.matches("REGRESSION").count(), 1, "{stdout}");
    assert!(stdout.contains("N=1024"), "{stdout}");
    assert!(stdout.contains("1 regressed"), "{stdout}");
    // No device warning for the same device.
    assert!(!String::from_utf8_lossy(&out.stderr).contains("different devices"));
}

#[test]
fn a_slowdown_inside_the_noise_is_not_flagged() {
    let out = compare_one_slower_cell(0.25, "cpu Y");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(!stdout.contains("REGRESSION"), "{stdout}");
    assert!(stdout.contains("within noise"), "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("different devices"));
}

#[test]
fn nothing_matched_exits_2_naming_the_axes_that_differ() {
    let dir = tempfile::tempdir().unwrap();
    let base = write(dir.path(), "base.json", &results(base_cells(), "cpu X"));
    // Same backend, other N values: no cell in common.
    let other_n: Vec<Value> = (12..14)
        .map(|k| cell(1 << k, 1e-6 * f64::from(1u32 << k), 0.01))
        .collect();
    let new = write(dir.path(), "new.json", &results(other_n, "cpu X"));
    let out = compare(&base, &new);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no cell of NEW matches"), "{stderr}");
    assert!(
        stderr.contains("N: BASE has {1024, 2048, 256, 512}"),
        "{stderr}"
    );
    assert!(!stderr.contains("backend:"), "{stderr}");
}

#[test]
fn compare_auto_finds_the_baseline_from_a_subdirectory_of_the_checkout() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("Cargo.toml"), "[workspace]\n").unwrap();
    let device_dir = root.join("bench-results").join("cpu-x");
    std::fs::create_dir_all(&device_dir).unwrap();
    write(
        &device_dir,
        "baseline.json",
        &results(base_cells(), "cpu X"),
    );
    let new = write(root, "new.json", &results(base_cells(), "cpu X"));
    let sub = root.join("crates").join("deep");
    std::fs::create_dir_all(&sub).unwrap();
    let out = linattn_in(&sub, &["compare", "auto", new.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("cpu-x/baseline.json"), "{stderr}");
}

#[test]
fn unreadable_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let base = write(dir.path(), "base.json", &results(base_cells(), "cpu X"));
    let garbage = dir.path().join("garbage.json");
    std::fs::write(&garbage, "{ not json").unwrap();
    assert_eq!(compare(&base, &garbage).status.code(), Some(2));
    assert_eq!(
        compare(&dir.path().join("absent.json"), &base)
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn bench_writes_a_results_file_that_compare_and_report_read() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("sub").join("bench.json");
    let out = small_bench_in(
        dir.path(),
        "16,32",
        "2",
        &["--precision", "f32", "--out", out_path.to_str().unwrap()],
    );
    assert_ok(&out);
    let v = read_json(&out_path);
    assert_eq!(v["schema_version"], 4);
    assert_eq!(v["sweep"]["state"], "complete", "{}", v["sweep"]);
    let cells = v["cells"].as_array().unwrap();
    assert!(!cells.is_empty());
    // The run measured the host's GEMM rate, and every ok CPU cell reads against it.
    assert!(
        v["gemm_rate"]["median_gflops"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    for c in cells
        .iter()
        .filter(|c| c["status"] == "ok" && c["device"] == "cpu")
    {
        assert!(c["pct_of_gemm"].as_f64().unwrap() > 0.0, "{c}");
        // The rate measured around the cell: two samples before, two after.
        let adjacent = c["gemm_adjacent_gflops"].as_array().unwrap();
        assert_eq!(adjacent.len(), 4, "{c}");
        assert!(adjacent.iter().all(|r| r.as_f64().unwrap() > 0.0), "{c}");
        assert!(c["staged_bytes"].as_u64().unwrap() > 0, "{c}");
        assert!(c["harness_bytes"].is_u64(), "{c}");
    }
    for c in cells {
        let status = c["status"].as_str().unwrap();
        assert!(
            [
                "ok",
                "unsupported",
                "unavailable",
                "oom",
                "error",
                "too-slow"
            ]
            .contains(&status),
            "{c}"
        );
        if status == "ok" {
            assert_eq!(c["samples_s"].as_array().unwrap().len(), 2, "{c}");
            assert!(c["median_s"].as_f64().unwrap() > 0.0);
        } else {
            assert!(c["message"].is_string(), "{c}");
        }
    }
    // Only the results file is left in its directory (the write went through a temp file).
    let names: Vec<_> = std::fs::read_dir(dir.path().join("sub"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("bench.json")]);

    // A file compared with itself: nothing regressed.
    assert_eq!(compare(&out_path, &out_path).status.code(), Some(0));

    let report_dir = dir.path().join("report");
    linattn_ok(&[
        "report",
        out_path.to_str().unwrap(),
        "--out-dir",
        report_dir.to_str().unwrap(),
    ]);
    let md = std::fs::read_to_string(report_dir.join("REPORT.md")).unwrap();
    assert!(md.contains("N=16") || md.contains("Not run ("), "{md}");
}

#[test]
fn bench_rejects_bad_flags_with_exit_2() {
    let out = linattn(&["bench", "--n-min", "300", "--n-max", "4096", "--out", "-"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("power of two"));
    let out = linattn(&["bench", "--backends", "no-such-backend", "--out", "-"]);
    assert_eq!(out.status.code(), Some(2));
}

/// A small sweep (B = H = 1, D = 8, no warm-up) over `n` with `repeats` samples a cell, run
/// with `cwd` as working directory; `extra` adds flags.
fn small_bench_in(cwd: &Path, n: &str, repeats: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "bench",
        "--n",
        n,
        "--batch",
        "1",
        "--heads",
        "1",
        "--dk",
        "8",
        "--warmup",
        "0",
        "--repeats",
        repeats,
        "--no-progress",
    ];
    args.extend_from_slice(extra);
    linattn_in(cwd, &args)
}

/// A tiny forward sweep (N = 16, one sample), run with `cwd` as working directory.
fn tiny_bench_in(cwd: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["--mode", "forward"];
    args.extend_from_slice(extra);
    small_bench_in(cwd, "16", "1", &args)
}

#[test]
fn plain_bench_writes_under_the_ignored_latest_dir_of_the_checkout() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("Cargo.toml"), "[workspace]\n").unwrap();
    std::fs::create_dir_all(root.join("bench-results").join("committed-device")).unwrap();
    let sub = root.join("crates");
    std::fs::create_dir_all(&sub).unwrap();
    let out = tiny_bench_in(&sub, &["--backends", "cpu/causal_recurrent/f32"]);
    assert_ok(&out);
    let latest: Vec<_> = std::fs::read_dir(root.join("bench-results").join("latest"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(latest.len(), 1, "{latest:?}");
    assert!(latest[0].ends_with(".json"), "{latest:?}");
    // The committed per-device directories are untouched, and nothing lands in the cwd.
    assert_eq!(
        std::fs::read_dir(root.join("bench-results").join("committed-device"))
            .unwrap()
            .count(),
        0
    );
    assert!(!sub.join("bench-results").exists());
}

#[test]
fn bench_refuses_an_unwritable_output_before_running_anything() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "").unwrap();
    let target = blocker.join("results.json");
    let started = std::time::Instant::now();
    let out = tiny_bench_in(dir.path(), &["--out", target.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot write there"), "{stderr}");
    assert!(started.elapsed().as_secs() < 30);
}

#[test]
fn options_that_do_not_apply_are_errors_or_na() {
    // A backward alone is not a mode.
    let out = linattn(&["bench", "--n", "16", "--mode", "backward", "--out", "-"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("forward+backward"), "{stderr}");
    // Softmax under a map or decay is n/a, not a relabelled elu+1 cell.
    let dir = tempfile::tempdir().unwrap();
    let out = tiny_bench_in(
        dir.path(),
        &[
            "--backends",
            "cpu/softmax/f32",
            "--decay",
            "0.9",
            "--out",
            "-",
        ],
    );
    assert_ok(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let cell = &v["cells"][0];
    assert_eq!(cell["status"], "unsupported", "{cell}");
    assert!(
        cell["message"].as_str().unwrap().contains("no decay"),
        "{cell}"
    );
}

#[test]
fn bench_mode_decode_writes_its_sweep_and_refuses_mixing() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("decode");
    linattn_ok(&[
        "bench",
        "--mode",
        "decode",
        "--n",
        "2^6,2^7",
        "--dk",
        "8",
        "--batch",
        "2",
        "--heads",
        "3",
        "--repeats",
        "1",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let v = read_json(&out_dir.join("decode.json"));
    assert_eq!(
        (v["batch"].as_u64(), v["heads"].as_u64()),
        (Some(2), Some(3)),
        "{v}"
    );
    assert!(v["environment"]["commit"].is_string(), "{v}");
    let cells = v["cells"].as_array().unwrap();
    // cpu/decode/f32 (stream and per-call) and the softmax KV-cache baseline at both
    // context lengths.
    assert_eq!(cells.len(), 6, "{v}");
    let paths: Vec<&str> = cells.iter().map(|c| c["path"].as_str().unwrap()).collect();
    assert_eq!(
        paths,
        ["stream", "per-call", "stream", "per-call", "per-call", "per-call"],
        "{v}"
    );
    assert!(cells.iter().all(|c| c["status"] == "ok"), "{v}");
    assert!(cells
        .iter()
        .all(|c| !c["samples_us"].as_array().unwrap().is_empty()));
    for plot in ["decode-time.svg", "decode-bytes.svg", "decode.md"] {
        assert!(out_dir.join(plot).is_file(), "{plot}");
    }
    let mixed = linattn(&["bench", "--mode", "decode,forward", "--out", "-"]);
    assert_eq!(mixed.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&mixed.stderr).contains("a sweep of its own"));
}

/// Issue 11: the f32 CPU backends make their inputs in f32 (no f64 copy held by the
/// harness), and the memory columns say so; a backend staging from f64 shows that copy.
#[test]
fn bench_stages_inputs_in_the_backend_precision() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("bench.json");
    let (n, d) = (4096u64, 8u64);
    let out = small_bench_in(
        dir.path(),
        "4096",
        "1",
        &[
            "--mode",
            "forward",
            "--backends",
            "cpu/causal_recurrent/f32,cpu-ref/causal_recurrent/f64",
            "--out",
            out_path.to_str().unwrap(),
        ],
    );
    assert_ok(&out);
    let v = read_json(&out_path);
    let cell = |name: &str| {
        v["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["backend"] == name)
            .unwrap_or_else(|| panic!("no {name} cell in {v}"))
            .clone()
    };
    let operands = 3 * n * d; // q, k, v of B = H = 1, D = M = 8
    let f32_cell = cell("cpu/causal_recurrent/f32");
    assert_eq!(f32_cell["status"], "ok", "{f32_cell}");
    assert_eq!(f32_cell["staged_bytes"].as_u64(), Some(4 * operands));
    // A few formatted messages and rayon's bookkeeping, never an f64 copy (8·operands).
    assert!(
        f32_cell["harness_bytes"].as_u64().unwrap() < 64 * 1024,
        "{f32_cell}"
    );
    // The f64 reference keeps the f64 inputs it was given a copy of.
    let ref_cell = cell("cpu-ref/causal_recurrent/f64");
    assert_eq!(ref_cell["status"], "ok", "{ref_cell}");
    assert!(
        ref_cell["staged_bytes"].as_u64().unwrap() >= 8 * operands,
        "{ref_cell}"
    );
    assert!(
        ref_cell["harness_bytes"].as_u64().unwrap() >= 8 * operands,
        "{ref_cell}"
    );
}
