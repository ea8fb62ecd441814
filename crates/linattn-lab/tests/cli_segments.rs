//! Which kernels the chunked forward runs: by default the segmented forward (inference:
//! `cc_seg_sums`, `cc_seg_scan`, `cc_forward_seg`; training, under a backward:
//! `cc_seg_sums_train`, `cc_seg_scan`, `cc_forward_seg_train`; at this shape segments of one
//! chunk, the length `auto_seg_chunks` picks), the per-chunk forward (`cc_forward_h`, then
//! `cc_forward` or `cc_forward_train`) with `LINATTN_CC_SEGMENTS=off`, segments of a given
//! length with a number, and a bad value refused naming the variable. Read from `linattn
//! profile`'s launch list on the simulator.
//! And `linattn check --forward-only`, the harness's way to judge that forward (a check with
//! ∂L/∂O runs the training forward instead), passes in segments of 2 with only O judged.
//! And at D = M = 128 the segmented CTAs take both value slices by default (sm_90, the
//! simulator's arch), one each with `LINATTN_CC_SEG_SLICES=1`, with bit-identical outputs.

use linattn_testkit::Platform;
use serde_json::Value;

mod attend_common;
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
    trials.extend(linattn_testkit::stamp_executors!(
        for platform in [Platform::Sim] =>
            "the_slices_variable_pairs_or_splits_the_value_slices_with_the_same_results",
            the_slices_variable_pairs_or_splits_the_value_slices_with_the_same_results()
    ));
    linattn_testkit::run(trials)
}

/// (kernel, CTAs, threads per CTA) of the segmented launches of `linattn profile` at
/// B = 1, H = 2, N = 300, D = M = 128, forward and forward+backward, in segments of 2, with
/// `LINATTN_CC_SEG_SLICES` set to `slices` (unset: None).
fn segmented_ctas(slices: Option<&str>) -> Result<Vec<(String, u64, u64)>, String> {
    let v = profile_json(
        "sim/causal_chunked/bf16",
        "128",
        "forward,forward+backward",
        &[
            ("LINATTN_CC_SEGMENTS", Some("2")),
            ("LINATTN_CC_SEG_SLICES", slices),
        ],
    )?;
    let mut launches = Vec::new();
    for p in v["profiles"].as_array().ok_or("no profiles")? {
        for k in p["kernels"].as_array().ok_or("no kernels")? {
            let name = k["kernel"].as_str().unwrap_or_default();
            if name.starts_with("cc_seg_sums") || name.starts_with("cc_forward_seg") {
                let num = |key: &str| k[key].as_u64().ok_or(format!("{name}: no {key}"));
                launches.push((name.to_string(), num("ctas")?, num("threads_per_cta")?));
            }
        }
    }
    Ok(launches)
}

/// `linattn profile --backend BACKEND` at B = 1, H = 2, N = 300, D = M = `d`, modes `mode`,
/// its JSON; each of `env` set (Some) or removed (None).
fn profile_json(
    backend: &str,
    d: &str,
    mode: &str,
    env: &[(&str, Option<&str>)],
) -> Result<Value, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let json = dir.path().join("profile.json");
    let mut command = cli_common::linattn_command();
    command.args([
        "profile",
        "--backend",
        backend,
        "--batch",
        "1",
        "--heads",
        "2",
        "--n",
        "300",
        "--d",
        d,
        "--mode",
        mode,
        "--quiet",
        "--json",
    ]);
    command.arg(&json);
    for (name, value) in env {
        match value {
            Some(v) => command.env(name, v),
            None => command.env_remove(name),
        };
    }
    let out = command.output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(cli_common::stderr(&out));
    }
    serde_json::from_slice(&std::fs::read(&json).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())
}

/// O, dQ, dK, dV of `linattn attend` on the simulator (bf16, λ = 0.97, segments of 2) at
/// B = 1, H = 2, N = 200, D = M = 128, with `LINATTN_CC_SEG_SLICES` set to `slices`: the
/// four files' bytes, or the run's stderr.
fn attend_outputs(dir: &std::path::Path, slices: Option<&str>) -> Result<Vec<Vec<u8>>, String> {
    let dims = [1, 2, 200, 128];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut draw = |len: usize| -> Vec<f64> {
        (0..len)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
            })
            .collect()
    };
    for name in ["q", "k", "v", "do"] {
        let path = dir.join(format!("{name}.npy"));
        if !path.exists() {
            attend_common::write_npy(&path, &dims, &draw(dims.iter().product()), true);
        }
    }
    let out_dir = dir.join(format!("out-{}", slices.unwrap_or("default")));
    let mut command = cli_common::linattn_command();
    command
        .args([
            "attend",
            "--backend",
            "sim/causal_chunked/bf16",
            "--decay",
            "0.97",
        ])
        .arg("--q")
        .arg(dir.join("q.npy"))
        .arg("--k")
        .arg(dir.join("k.npy"))
        .arg("--v")
        .arg(dir.join("v.npy"))
        .arg("--d-out")
        .arg(dir.join("do.npy"))
        .arg("--out-dir")
        .arg(&out_dir)
        .env("LINATTN_CC_SEGMENTS", "2")
        .env_remove("LINATTN_CC_SEG_SLICES");
    if let Some(s) = slices {
        command.env("LINATTN_CC_SEG_SLICES", s);
    }
    let out = command.output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(cli_common::stderr(&out));
    }
    ["o", "dq", "dk", "dv"]
        .iter()
        .map(|t| std::fs::read(out_dir.join(format!("{t}.npy"))).map_err(|e| e.to_string()))
        .collect()
}

fn the_slices_variable_pairs_or_splits_the_value_slices_with_the_same_results() -> Result<(), String>
{
    let paired = segmented_ctas(None)?;
    let single = segmented_ctas(Some("1"))?;
    // Both modes' sums and forwards: 3 segments (2 of sums), B·H = 2, M/64 = 2 slices.
    let want_paired = [
        ("cc_seg_sums", 4, 512),
        ("cc_forward_seg", 6, 512),
        ("cc_seg_sums_train", 4, 512),
        ("cc_forward_seg_train", 6, 512),
    ];
    let shown = |v: &[(String, u64, u64)]| format!("{v:?}");
    let as_owned = |w: &[(&str, u64, u64)]| -> Vec<(String, u64, u64)> {
        w.iter().map(|(k, c, t)| (k.to_string(), *c, *t)).collect()
    };
    if paired != as_owned(&want_paired) {
        return Err(format!(
            "by default: {}, want {want_paired:?}",
            shown(&paired)
        ));
    }
    let want_single: Vec<(String, u64, u64)> = want_paired
        .iter()
        .map(|(k, c, _)| (k.to_string(), 2 * c, 256))
        .collect();
    if single != want_single {
        return Err(format!(
            "LINATTN_CC_SEG_SLICES=1: {}, want {}",
            shown(&single),
            shown(&want_single)
        ));
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    if attend_outputs(dir.path(), None)? != attend_outputs(dir.path(), Some("1"))? {
        return Err("O, dQ, dK or dV differ between paired and single slices".into());
    }
    for bad in ["2", "pair"] {
        match attend_outputs(dir.path(), Some(bad)) {
            Ok(_) => return Err(format!("LINATTN_CC_SEG_SLICES={bad} ran")),
            Err(e) if e.contains(&format!("LINATTN_CC_SEG_SLICES={bad}")) => {}
            Err(e) => return Err(format!("LINATTN_CC_SEG_SLICES={bad}: {e}")),
        }
    }
    Ok(())
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
    let v = profile_json(
        "sim/causal_chunked/f16",
        "64",
        if train { "forward+backward" } else { "forward" },
        &[("LINATTN_CC_SEGMENTS", segments)],
    )?;
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
