//! `linattn profile --lines TOP`: the chunked bf16 backend at a small shape (B = 2, H = 2,
//! N = 256, D = 64, forward+backward), whole and with 2 sampled rows of grid y. Against the
//! same profile without `--lines`: every kernel's counters are equal (the `-lineinfo`
//! compiles are the same code); with it, every kernel's lines sum to its warp instructions,
//! each names a kernel file whose text the lookup finds and a line inside it, and the text
//! output lists each kernel's top lines.
//!
//! Stamped for the simulator: without NVRTC the trial shows as ignored with the reason.

use std::path::Path;
use std::process::Command;

use linattn_cuda::kernel_file_text;
use linattn_testkit::Platform;
use serde_json::Value;

fn main() {
    let mut trials = Vec::new();
    for (name, body) in [
        (
            "source_lines_sum_to_each_kernel_and_change_no_counter",
            (|| lines_against_plain(None)) as fn() -> Result<(), String>,
        ),
        ("sampled_source_lines_scale_with_the_counters", || {
            lines_against_plain(Some(2))
        }),
    ] {
        trials.extend(linattn_testkit::stamp_executors!(
            for platform in [Platform::Sim] => name, body()
        ));
    }
    linattn_testkit::run(trials)
}

/// Runs the profile (with `--lines 5` when `lines`), writing its JSON to `json`; stdout.
fn profile(json: &Path, lines: bool, sample: Option<u32>) -> Result<String, String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_linattn"));
    cmd.args([
        "profile",
        "--backend",
        "sim/causal_chunked/bf16",
        "--n",
        "256",
        "--batch",
        "2",
        "--heads",
        "2",
        "--mode",
        "forward+backward",
        "--quiet",
        "--json",
    ])
    .arg(json);
    if lines {
        cmd.args(["--lines", "5"]);
    }
    if let Some(rows) = sample {
        cmd.args(["--sample", &rows.to_string()]);
    }
    let out = cmd
        .output()
        .map_err(|e| format!("the linattn binary: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "exit {:?}:\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(stdout)
}

/// Every kernel of the file's profiles, in order: (phase, kernel, its record).
fn read(json: &Path) -> Result<Vec<(String, String, Value)>, String> {
    let text = std::fs::read_to_string(json).map_err(|e| format!("{}: {e}", json.display()))?;
    let file: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", json.display()))?;
    let profiles = file["profiles"].as_array().cloned().unwrap_or_default();
    Ok(profiles
        .iter()
        .flat_map(|p| p["kernels"].as_array().cloned().unwrap_or_default())
        .map(|k| {
            let name = |f: &str| k[f].as_str().unwrap_or_default().to_string();
            (name("phase"), name("kernel"), k)
        })
        .collect())
}

fn lines_against_plain(sample: Option<u32>) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (plain_json, lines_json) = (dir.path().join("plain.json"), dir.path().join("lines.json"));
    profile(&plain_json, false, sample)?;
    let stdout = profile(&lines_json, true, sample)?;
    let (plain, lined) = (read(&plain_json)?, read(&lines_json)?);
    let names = |p: &[(String, String, Value)]| -> Vec<String> {
        p.iter()
            .map(|(phase, k, _)| format!("{phase} {k}"))
            .collect()
    };
    if plain.is_empty() || names(&plain) != names(&lined) {
        return Err(format!(
            "other kernels: {:?} against {:?}",
            names(&plain),
            names(&lined)
        ));
    }
    for ((_, _, a), (phase, kernel, b)) in plain.iter().zip(&lined) {
        let what = format!("{phase} {kernel}");
        if a["counters"] != b["counters"] {
            return Err(format!("{what}: the counters moved with -lineinfo"));
        }
        if a.get("source_lines").is_some() {
            return Err(format!("{what}: source lines without --lines"));
        }
        let lines = b["source_lines"].as_array().cloned().unwrap_or_default();
        let sum: u64 = lines
            .iter()
            .map(|l| l["warp_instructions"].as_u64().unwrap_or(0))
            .sum();
        let ran = b["counters"]["warp_instructions"].as_u64().unwrap_or(0);
        if sum != ran || ran == 0 {
            return Err(format!("{what}: lines sum to {sum}, the kernel ran {ran}"));
        }
        for l in &lines {
            let (file, line) = (
                l["file"].as_str().unwrap_or_default(),
                l["line"].as_u64().unwrap_or(0),
            );
            let text =
                kernel_file_text(file).ok_or_else(|| format!("{what}: no kernel file {file:?}"))?;
            if line as usize > text.lines().count() {
                return Err(format!("{what}: {file}:{line} is past the file's end"));
            }
        }
        let heading = format!("source lines of sim/causal_chunked/bf16 {what}:");
        if !stdout.contains(&heading) {
            return Err(format!("no {heading:?} in:\n{stdout}"));
        }
    }
    Ok(())
}
