//! Which kernels the chunked forward runs: by default the segmented forward (inference:
//! `cc_seg_sums`, `cc_seg_scan`, `cc_forward_seg`; training, under a backward:
//! `cc_seg_sums_train`, `cc_seg_scan`, `cc_forward_seg_train`; at this shape segments of one
//! chunk, the length `auto_seg_chunks` picks), the per-chunk forward (`cc_forward_h`, then
//! `cc_forward` or `cc_forward_train`) with `LINATTN_CC_SEGMENTS=off`, segments of a given
//! length with a number, and a bad value refused naming the variable. Read from `linattn
//! profile`'s launch list on the simulator.
//! And `linattn check --forward-only`, the harness's way to judge that forward (a check with
//! ∂L/∂O runs the training forward instead), passes in segments of 2 with only O judged.

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
    trials.extend(linattn_testkit::stamp_executors!(
        for platform in [Platform::Sim] =>
            "check_forward_only_judges_the_segmented_forward",
            check_forward_only_judges_the_segmented_forward()
    ));
    linattn_testkit::run(trials)
}

fn check_forward_only_judges_the_segmented_forward() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let json = dir.path().join("check.json");
    let out = cli_common::linattn_command()
        .args([
            "check",
            "--forward-only",
            "--backends",
            "sim/causal_chunked/f16",
            "--sim-max-n",
            "130",
            "--json",
        ])
        .arg(&json)
        .env("LINATTN_CC_SEGMENTS", "2")
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("check failed: {}", cli_common::stderr(&out)));
    }
    let v: Value = serde_json::from_slice(&std::fs::read(&json).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    if v["forward_only"] != Value::Bool(true) {
        return Err(format!("forward_only is {}", v["forward_only"]));
    }
    let cases = v["cases"].as_array().ok_or("no cases")?;
    let mut judged = 0;
    for c in cases.iter().filter(|c| c["outcome"] == "pass") {
        let tensors: Vec<&str> = c["errors"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["tensor"].as_str())
            .collect();
        if tensors != ["o"] {
            return Err(format!(
                "case {}: judged {tensors:?}, want O only",
                c["case"]
            ));
        }
        judged += 1;
    }
    // N = 65 and 130 are two and three chunks: every such case ran in segments of 2.
    if judged < 10 {
        return Err(format!("only {judged} passing cases"));
    }
    Ok(())
}

/// The forward's kernels `linattn profile --mode forward` (or, `train`, `forward+backward`)
/// ran at B = 1, H = 2, N = 300, D = M = 64, with `LINATTN_CC_SEGMENTS` set to `segments`
/// (unset: None).
fn forward_kernels(segments: Option<&str>, train: bool) -> Result<Vec<String>, String> {
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
        if train { "forward+backward" } else { "forward" },
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
        .filter(|k| k["phase"] == "forward")
        .filter_map(|k| k["kernel"].as_str().map(String::from))
        .collect())
}

fn the_segments_variable_picks_the_forward_kernels() -> Result<(), String> {
    for (train, per_chunk, segmented) in [
        (
            false,
            ["cc_forward_h", "cc_forward"],
            ["cc_seg_sums", "cc_seg_scan", "cc_forward_seg"],
        ),
        (
            true,
            ["cc_forward_h", "cc_forward_train"],
            ["cc_seg_sums_train", "cc_seg_scan", "cc_forward_seg_train"],
        ),
    ] {
        for (segments, want) in [
            (None, &segmented[..]),
            (Some("off"), &per_chunk[..]),
            (Some("2"), &segmented[..]),
            // One segment of all five chunks: no sums to take, no scan (it starts from zero).
            (Some("16"), &segmented[2..]),
        ] {
            let got = forward_kernels(segments, train)?;
            if got != want {
                return Err(format!(
                    "LINATTN_CC_SEGMENTS={segments:?}, training {train}: ran {got:?}, want \
                     {want:?}"
                ));
            }
        }
    }
    Ok(())
}

fn a_bad_segments_value_is_refused_naming_the_variable() -> Result<(), String> {
    for bad in ["0", "many", "-3"] {
        match forward_kernels(Some(bad), false) {
            Ok(k) => return Err(format!("LINATTN_CC_SEGMENTS={bad} ran {k:?}")),
            Err(e) if e.contains("LINATTN_CC_SEGMENTS") && e.contains(bad) => {}
            Err(e) => return Err(format!("LINATTN_CC_SEGMENTS={bad}: {e}")),
        }
    }
    Ok(())
}
