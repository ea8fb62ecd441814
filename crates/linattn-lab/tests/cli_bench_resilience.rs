//! `linattn bench` on a shared or borrowed machine: a sweep killed mid-way keeps every
//! finished cell, `--deadline` ends a sweep cleanly, each finished cell logs one line, and
//! the results name the commit the binary was built from wherever it runs.

mod cli_common;

use cli_common::{assert_ok, linattn_in, read_json, stderr};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A CPU sweep of many cells, each sampled for `cell_seconds`.
fn sweep_args<'a>(out: &'a str, cell_seconds: &'a str) -> Vec<&'a str> {
    vec![
        "bench",
        "--backends",
        "cpu/causal_recurrent/f32,cpu/causal_chunked/f32",
        "--n",
        "64,96,128,160,192,224,256,288",
        "--heads",
        "2",
        "--dk",
        "16",
        "--mode",
        "forward,forward+backward",
        "--cell-seconds",
        cell_seconds,
        "--no-progress",
        "--out",
        out,
    ]
}

fn cells(file: &Value) -> &Vec<Value> {
    file["cells"].as_array().expect("cells is an array")
}

#[test]
fn a_sweep_killed_mid_way_leaves_every_finished_cell_in_a_file_that_parses() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep.json");
    let out_text = out.to_str().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_linattn"))
        .args(sweep_args(out_text, "0.4"))
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("linattn starts");
    // Wait until three cells are on disk (32 are planned, ~0.5 s each), then SIGKILL.
    let started = Instant::now();
    let finished = |path: &Path| -> usize {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .map_or(0, |v| cells(&v).len())
    };
    while finished(&out) < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no 3 cells after 120 s"
        );
        assert!(child.try_wait().unwrap().is_none(), "the sweep ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    child.wait().unwrap();

    let file = read_json(&out);
    let sweep = &file["sweep"];
    assert_eq!(sweep["state"], "running", "{sweep}");
    assert_eq!(sweep["planned_cells"], 32);
    let kept = cells(&file);
    assert!(kept.len() >= 3 && kept.len() < 32, "{} cells", kept.len());
    assert_eq!(sweep["finished_cells"], kept.len());
    for cell in kept {
        assert_eq!(cell["status"], "ok", "{cell}");
        assert!(cell["median_s"].as_f64().unwrap() > 0.0);
        assert!(!cell["samples_s"].as_array().unwrap().is_empty());
        let wall = &cell["wall"];
        assert!(wall["total_s"].as_f64().unwrap() >= wall["sampling_s"].as_f64().unwrap());
    }
    // Nothing half-written is left beside it.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["sweep.json"]);
}

#[test]
fn deadline_ends_the_sweep_cleanly_and_every_cell_logs_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep.json");
    let mut args = sweep_args(out.to_str().unwrap(), "0.3");
    args.extend(["--deadline", "2"]);
    let started = Instant::now();
    let run = linattn_in(dir.path(), &args);
    assert_ok(&run);
    // The deadline, plus at most one cell's sampling and the report.
    assert!(started.elapsed() < Duration::from_secs(30));
    let file = read_json(&out);
    assert_eq!(file["sweep"]["state"], "deadline", "{}", file["sweep"]);
    assert_eq!(file["sweep"]["deadline_s"], 2.0);
    let kept = cells(&file);
    assert!(!kept.is_empty() && kept.len() < 32, "{} cells", kept.len());
    let log = stderr(&run);
    let lines: Vec<&str> = log.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(lines.len(), kept.len(), "{log}");
    assert!(lines[0].starts_with("[ 1/32] ok cpu/"), "{}", lines[0]);
    assert!(
        log.contains(&format!(
            "--deadline 2 s reached: {} of 32 cells ran",
            kept.len()
        )),
        "{log}"
    );
}

#[test]
fn a_bad_deadline_is_refused_before_any_cell() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["--deadline=0", "--deadline=-3", "--deadline=inf"] {
        let run = linattn_in(
            dir.path(),
            &["bench", "--backends", "cpu/causal_recurrent/f32", bad],
        );
        assert_eq!(run.status.code(), Some(2), "{bad}: {}", stderr(&run));
        assert!(stderr(&run).contains("--deadline"), "{}", stderr(&run));
    }
}

/// The source tree's commit as git sees it now, with the build's "-dirty" rule (build.rs).
fn source_commit() -> Option<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .arg("-C")
            .arg(&root)
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let hash = git(&["rev-parse", "--verify", "HEAD"])?;
    let status = git(&[
        "status",
        "--porcelain",
        "--untracked-files=normal",
        "--",
        "crates",
        "kernels",
        "Cargo.toml",
        "Cargo.lock",
    ])?;
    Some(if status.is_empty() {
        hash
    } else {
        format!("{hash}-dirty")
    })
}

#[test]
fn the_binary_names_the_commit_it_was_built_from_wherever_it_runs() {
    // cargo built this test and the binary from the same tree, just now.
    let want = source_commit().unwrap_or_else(|| "unknown".into());
    let elsewhere = tempfile::tempdir().unwrap();
    let version = linattn_in(elsewhere.path(), &["--version"]);
    assert_ok(&version);
    let text = String::from_utf8_lossy(&version.stdout);
    assert_eq!(
        text.trim(),
        format!("linattn {} (commit {want})", env!("CARGO_PKG_VERSION"))
    );

    // A bench run from a directory outside any checkout records the same commit.
    let out = elsewhere.path().join("r.json");
    let run = linattn_in(
        elsewhere.path(),
        &[
            "bench",
            "--backends",
            "cpu/causal_recurrent/f32",
            "--n",
            "16",
            "--repeats",
            "1",
            "--mode",
            "forward",
            "--no-progress",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_ok(&run);
    assert_eq!(read_json(&out)["environment"]["commit"], want);
}
