//! `linattn profile --lines TOP`: the chunked bf16 backend at a small shape (B = 2, H = 2,
//! N = 256, D = 64, forward+backward), whole and with 2 sampled rows of grid y. Against the
//! same profile without `--lines`: every kernel's counters are equal (the `-lineinfo`
//! compiles are the same code); with it, every kernel's lines sum to its warp instructions,
//! each names a kernel file whose text the lookup finds and a line inside it, and the text
//! output lists each kernel's top lines.
//!
//! With ptxas and nvdisasm (`LINATTN_PTXAS`, `LINATTN_NVDISASM`, which .ci/run installs;
//! required under `LINATTN_REQUIRE_CUDA_TOOLS=1`), each line also carries the SASS ptxas
//! made of it and the SASS it executed, and each kernel the SASS it executed, estimated per
//! PTX line: present for every line and kernel, the lines summing to the kernel (but for the
//! predicated-off SASS of lines no warp executed, under 2%), the kernel
//! within 0.3–3× its PTX, and the same as `--sass` alone estimates
//! from the plain compiles (within 1%: the same instructions, the same ptxas), which also
//! prints them. (sass_vs_h100 holds the estimate to the hardware's counts.)
//!
//! Stamped for the simulator: without NVRTC the trials show as ignored with the reason.

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
    const SASS: &str = "sass_beside_every_line_and_its_estimate";
    // NVRTC's absence is the stamp's to report; the tools' is the testkit's.
    match linattn_testkit::cuda_tools(false) {
        Ok(_) => trials.extend(linattn_testkit::stamp_executors!(
            for platform in [Platform::Sim] => SASS, sass_beside_every_line()
        )),
        Err(why) => trials.push(linattn_testkit::without_cuda_tools(SASS, why)),
    }
    linattn_testkit::run(trials)
}

/// Runs the profile (`--quiet` unless `--sass` alone, whose table it checks) with the `extra`
/// arguments, writing its JSON to `json`; stdout.
fn profile(json: &Path, extra: &[&str], sample: Option<u32>) -> Result<String, String> {
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
        "--json",
    ])
    .arg(json);
    if extra != ["--sass"] {
        cmd.arg("--quiet");
    }
    cmd.args(extra);
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
    profile(&plain_json, &[], sample)?;
    let stdout = profile(&lines_json, &["--lines", "5"], sample)?;
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
            let text = kernel_file_text(file, &linattn_cuda::kernel_variants())
                .ok_or_else(|| format!("{what}: no kernel file {file:?}"))?;
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

fn sass_beside_every_line() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (json, alone) = (dir.path().join("lines.json"), dir.path().join("sass.json"));
    profile(&json, &["--lines", "5"], None)?;
    let stdout = profile(&alone, &["--sass"], None)?;
    if !stdout.contains("executed SASS per token, estimated") {
        return Err(format!("--sass printed no estimates:\n{stdout}"));
    }
    let kernels = read(&json)?;
    let by_sass_alone = read(&alone)?;
    if kernels.is_empty() || kernels.len() != by_sass_alone.len() {
        return Err(format!(
            "{} kernels with --lines, {} with --sass",
            kernels.len(),
            by_sass_alone.len()
        ));
    }
    for ((phase, kernel, k), (_, kernel_alone, a)) in kernels.iter().zip(&by_sass_alone) {
        let what = format!("{phase} {kernel}");
        let estimate = k["sass_per_token_estimate"]
            .as_f64()
            .ok_or_else(|| format!("{what}: no SASS estimate"))?;
        let mut sum = 0.0;
        for l in k["source_lines"].as_array().cloned().unwrap_or_default() {
            l["sass_static"]
                .as_u64()
                .ok_or_else(|| format!("{what}: a line without its SASS: {l}"))?;
            sum += l["sass_per_token"]
                .as_f64()
                .ok_or_else(|| format!("{what}: a line without its executed SASS: {l}"))?;
            if l["ptx_static"].as_u64().unwrap_or(0) == 0 {
                return Err(format!("{what}: an executed line of no PTX: {l}"));
            }
        }
        // The kernel's estimate also counts the predicated-off SASS of lines no simulated
        // warp executed (if-converted blocks), which have no line record.
        if !(0.98 * estimate..=estimate * (1.0 + 1e-9)).contains(&sum) {
            return Err(format!(
                "{what}: the lines' SASS sum to {sum}, the kernel's to {estimate}"
            ));
        }
        let ptx = k["per_token"]["warp_instructions"].as_f64().unwrap_or(0.0);
        if !(0.3 * ptx..3.0 * ptx).contains(&estimate) {
            return Err(format!(
                "{what}: {estimate} SASS against {ptx} PTX per token"
            ));
        }
        let alone = a["sass_per_token_estimate"]
            .as_f64()
            .ok_or_else(|| format!("{what}: no SASS estimate with --sass"))?;
        if kernel != kernel_alone || (alone / estimate - 1.0).abs() > 0.01 {
            return Err(format!(
                "{what}: {estimate} SASS per token with --lines, {kernel_alone} {alone} with --sass"
            ));
        }
    }
    Ok(())
}
