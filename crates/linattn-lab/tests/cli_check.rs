//! `linattn check` end to end: the reference backends pass the default grid, CUDA backends
//! are skipped visibly on a machine without a GPU, bad selections are refused, and the JSON
//! report agrees with the table.

mod cli_common;

use cli_common::{linattn, read_json};

/// Data rows of the summary table: lines whose first cell is a backend name.
fn table_rows(stdout: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .take_while(|l| !l.contains("failing case"))
        .filter(|l| l.starts_with('│'))
        .map(|l| {
            l.trim_matches('│')
                .split('│')
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>()
        })
        .filter(|cells| cells.first().is_some_and(|c| c.contains('/')))
        .collect()
}

/// True when this machine could run CUDA backends (then "skipped" is not expected).
fn has_nvidia_device() -> bool {
    std::path::Path::new("/dev/nvidiactl").exists()
}

#[test]
fn reference_backends_pass_the_default_grid() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("check.json");
    let json_arg = json.display().to_string();
    let out = linattn(&["check", "--backends", "cpu-ref/*", "--json", &json_arg]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );

    let header = stdout
        .lines()
        .find(|l| l.contains("backend"))
        .expect("a header row");
    for column in [
        "cases",
        "n/a",
        "worst max-abs",
        "worst rms ratio",
        "tolerance",
        "verdict",
    ] {
        assert!(header.contains(column), "missing column {column}: {header}");
    }
    let rows = table_rows(&stdout);
    assert!(!rows.is_empty(), "no backend rows:\n{stdout}");
    for row in &rows {
        assert_eq!(row.len(), 8, "{row:?}");
        assert!(row[0].starts_with("cpu-ref/"), "{row:?}");
        assert_eq!(row[7], "PASS", "{row:?}");
        let (passed, run) = row[1].split_once('/').expect("cases as passed/run");
        assert_eq!(passed, run, "{row:?}");
        assert!(run.parse::<usize>().unwrap() > 0, "{row:?}");
        assert_eq!(row[5], "1e-10", "f64 tolerance: {row:?}");
    }

    // The JSON report holds the same backends and one record per case run or n/a.
    let report = read_json(&json);
    let backends = report["backends"].as_array().unwrap();
    assert_eq!(backends.len(), rows.len());
    let cases = report["cases"].as_array().unwrap();
    for summary in backends {
        let name = summary["backend"].as_str().unwrap();
        let recorded = cases.iter().filter(|c| c["backend"] == name).count() as u64;
        let counted =
            summary["run"].as_u64().unwrap() + summary["not_applicable"].as_u64().unwrap();
        assert_eq!(recorded, counted, "{name}");
    }
    assert!(cases
        .iter()
        .all(|c| c["outcome"] == "pass" || c["outcome"] == "not_applicable"));
    // Gradients are compared where the backend has a backward.
    assert!(cases.iter().any(|c| c["errors"]
        .as_array()
        .is_some_and(|e| e.iter().any(|t| t["tensor"] == "dk"))));
    // Written atomically: nothing but the report is left in the directory.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn cuda_backends_are_skipped_without_a_gpu() {
    let out = linattn(&["check", "--backends", "cuda/*"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let context = format!(
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = table_rows(&stdout);
    assert!(!rows.is_empty(), "no cuda rows:\n{stdout}");
    if has_nvidia_device() {
        // With a GPU nothing may be skipped, and the exit code is the verdict (0 or 1).
        assert!(
            rows.iter().all(|row| !row[7].starts_with("skipped")),
            "{context}"
        );
        assert_ne!(out.status.code(), Some(3), "{context}");
        return;
    }
    // Nothing could run: its own exit code (3), not a pass and not "bad input".
    assert_eq!(out.status.code(), Some(3), "{context}");
    assert!(
        context.contains("hint:") && context.contains("sim/*"),
        "{context}"
    );
    for row in &rows {
        assert!(row[0].starts_with("cuda/"), "{row:?}");
        // Nothing ran: skipped once the backend reported its absence, or n/a when no case
        // of the grid is one it implements (it is never asked about the machine then).
        assert_eq!(row[1], "0/0", "{row:?}");
        let skipped = row[7].starts_with("skipped: ") && row[7].len() > "skipped: ".len();
        assert!(skipped || row[7] == "n/a: no case applies", "{row:?}");
    }
    assert!(
        rows.iter().any(|row| row[7].starts_with("skipped: ")),
        "{stdout}"
    );
}

#[test]
fn unknown_backend_patterns_exit_2_with_the_known_names() {
    let out = linattn(&["check", "--backends", "cpu-ref/*,nope/*"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unknown backend 'nope/*'"), "{stderr}");
    assert!(
        stderr.contains("known: ") && stderr.contains("cpu-ref/"),
        "{stderr}"
    );
}

#[test]
fn an_unwritable_json_path_is_refused_before_running() {
    let out = linattn(&[
        "check",
        "--backends",
        "cpu-ref/*",
        "--json",
        "/nonexistent-linattn-dir/check.json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("nonexistent-linattn-dir"), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing ran");
}

#[test]
fn all_validates_every_argument_and_its_output_dir_before_the_first_case() {
    let started = std::time::Instant::now();
    // A bad sweep bound: refused before the check (which alone takes seconds) starts.
    let out = linattn(&["all", "--n-max", "300"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("power of two"), "{stderr}");
    assert!(!stderr.contains("== linattn check"), "{stderr}");
    // An output directory that cannot be created (its parent is a file).
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, "").unwrap();
    let out = linattn(&["all", "--out-dir", blocker.join("out").to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot write there"), "{stderr}");
    assert!(!stderr.contains("== linattn check"), "{stderr}");
    assert!(started.elapsed().as_secs() < 20);
}
