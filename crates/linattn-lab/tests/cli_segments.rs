//! Which kernels the chunked inference forward runs: the per-chunk forward (`cc_forward_h`,
//! `cc_forward`) where 16-chunk segments would not fill the GPU twice over (`SEG_MIN_CTAS`;
//! every shape the simulator tests at), the segmented forward (`cc_seg_sums`, `cc_seg_scan`,
//! `cc_forward_seg`) where `LINATTN_CC_SEGMENTS` asks for segments (or the shape is large),
//! the per-chunk forward again with `off`, and a bad value refused naming the variable.
//! Read from `linattn profile`'s launch list on the simulator.

use linattn_testkit::Platform;
use serde_json::Value;

mod cli_common;

fn main() {
    let mut trials = Vec::new();
    trials.extend(linattn_testkit::stamp_executors!(
        for platform in [Platform::Sim] =>
            "the_segments_variable_picks_the_forward_kernels",
            the_segments_variable_picks_the_forward_kernels()
    ));
    trials.extend(linattn_testkit::stamp_executors!(
        for platform in [Platform::Sim] =>
            "a_bad_segments_value_is_refused_naming_the_variable",
            a_bad_segments_value_is_refused_naming_the_variable()
    ));
    linattn_testkit::run(trials)
}

/// The kernels `linattn profile --mode forward` ran at B = 1, H = 2, N = 300, D = M = 64,
/// with `LINATTN_CC_SEGMENTS` set to `segments` (unset: None).
fn forward_kernels(segments: Option<&str>) -> Result<Vec<String>, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let json = dir.path().join("profile.json");
    let mut command = cli_common::linattn_command();
    command.args([
        "profile",
        "--backend",
        "sim/causal_chunked/f16",
        "--batch",
        "1",
        "--heads",
        "2",
        "--n",
        "300",
        "--d",
        "64",
        "--mode",
        "forward",
        "--quiet",
        "--json",
    ]);
    command.arg(&json);
    command.env_remove("LINATTN_CC_SEGMENTS");
    if let Some(s) = segments {
        command.env("LINATTN_CC_SEGMENTS", s);
    }
    let out = command.output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(cli_common::stderr(&out));
    }
    let v: Value = serde_json::from_slice(&std::fs::read(&json).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    Ok(v["profiles"][0]["kernels"]
        .as_array()
        .ok_or("no kernels in the profile")?
        .iter()
        .filter_map(|k| k["kernel"].as_str().map(String::from))
        .collect())
}

fn the_segments_variable_picks_the_forward_kernels() -> Result<(), String> {
    let per_chunk = ["cc_forward_h", "cc_forward"];
    let segmented = ["cc_seg_sums", "cc_seg_scan", "cc_forward_seg"];
    for (segments, want) in [
        (None, &per_chunk[..]),
        (Some("off"), &per_chunk[..]),
        (Some("2"), &segmented[..]),
        // One segment of all five chunks: no sums to take.
        (Some("16"), &segmented[1..]),
    ] {
        let got = forward_kernels(segments)?;
        if got != want {
            return Err(format!(
                "LINATTN_CC_SEGMENTS={segments:?}: ran {got:?}, want {want:?}"
            ));
        }
    }
    Ok(())
}

fn a_bad_segments_value_is_refused_naming_the_variable() -> Result<(), String> {
    for bad in ["0", "many", "-3"] {
        match forward_kernels(Some(bad)) {
            Ok(k) => return Err(format!("LINATTN_CC_SEGMENTS={bad} ran {k:?}")),
            Err(e) if e.contains("LINATTN_CC_SEGMENTS") && e.contains(bad) => {}
            Err(e) => return Err(format!("LINATTN_CC_SEGMENTS={bad}: {e}")),
        }
    }
    Ok(())
}
