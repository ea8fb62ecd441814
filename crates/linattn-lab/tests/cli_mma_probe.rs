//! `linattn mma-probe` on the simulator: in each numerics mode (and with each `--mma-model`
//! override) the probe must name exactly the simulator's own accumulation model as the one
//! candidate that matches every vector, and every other candidate must miss at least one
//! vector of each input type. Fails if the vectors cannot tell the candidates apart, if the
//! kernel's fragment layout or the host's placement of the vectors is wrong, or if a mode
//! does not use the model it claims. On a GPU the same run is what decides the H100's model:
//! `--rescore` of the committed H100 file must name the as-compiled mode's model as the one
//! candidate that predicts all of its bits.
//!
//! Stamped for the simulator: without NVRTC the trials show as ignored with the reason. The
//! rescore needs no executor and runs everywhere.

use std::process::Command;

use linattn_testkit::Platform;

fn main() {
    let cases: [(&str, Option<&str>, &str); 5] = [
        ("exact", None, "exact RN"),
        ("as-compiled", None, H100),
        ("pessimistic", None, "block 8, 24 bits, RZ"),
        ("exact", Some("h100"), H100),
        ("pessimistic", Some("exact"), "exact RN"),
    ];
    let mut trials = linattn_testkit::stamp_executors!(
        for platform in [Platform::Sim], (numerics, model, expected) in cases =>
            format!(
                "mma_probe_finds_the_model_of::{numerics}{}",
                model.map_or(String::new(), |m| format!("+{m}"))
            ),
            finds_exactly(numerics, model, expected)
    );
    trials.push(linattn_testkit::host(
        "mma_probe_rescore_of_the_h100_run_finds_the_as_compiled_model",
        || {
            if let Err(e) = rescore_finds_the_h100_model() {
                panic!("{e}");
            }
        },
    ));
    linattn_testkit::run(trials)
}

/// The as-compiled mode's model, as the candidates name it.
const H100: &str = "block 16, 26 bits, RZ, operand-aligned";

/// The H100's committed run (2026-11-26), rescored: only the as-compiled model predicts
/// every one of its 359 + 359 results.
fn rescore_finds_the_h100_model() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let json = dir.path().join("rescored.json");
    let committed = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../bench-results/h100/2026-11-26/mma-probe.json"
    );
    let args = [
        "mma-probe",
        "--rescore",
        committed,
        "--json",
        json.to_str().ok_or("temp path is not UTF-8")?,
    ];
    let (stdout, file) = probe(&args, &json)?;
    if file["kind"] != "device" || file["device"] != "NVIDIA H100 80GB HBM3" {
        return Err(format!(
            "the rescored file lost the run's description: kind {}, device {}",
            file["kind"], file["device"]
        ));
    }
    only_candidate(&file, &stdout, H100)
}

/// Runs `linattn ARGS` (which write `json`): its stdout and the file.
fn probe(args: &[&str], json: &std::path::Path) -> Result<(String, serde_json::Value), String> {
    let out = Command::new(env!("CARGO_BIN_EXE_linattn"))
        .env("LINATTN_NO_PROVISION", "1")
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = std::fs::read_to_string(json).map_err(|e| e.to_string())?;
    let file = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    Ok((stdout, file))
}

fn finds_exactly(numerics: &str, model: Option<&str>, expected: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let json = dir.path().join("probe.json");
    let mut args = vec![
        "mma-probe",
        "--platform",
        "sim",
        "--numerics",
        numerics,
        "--json",
        json.to_str().ok_or("temp path is not UTF-8")?,
    ];
    if let Some(m) = model {
        args.extend(["--mma-model", m]);
    }
    let (stdout, file) = probe(&args, &json)?;
    if file["kind"] != "simulator" || file["arch"].as_str().is_none_or(|a| !a.starts_with("sm_")) {
        return Err(format!(
            "not self-describing: kind {}, arch {}",
            file["kind"], file["arch"]
        ));
    }
    only_candidate(&file, &stdout, expected)
}

/// Every input type's only candidate matching all its vectors is `expected`, and the table
/// names it.
fn only_candidate(file: &serde_json::Value, stdout: &str, expected: &str) -> Result<(), String> {
    let inputs = file["inputs"].as_array().ok_or("no inputs")?;
    if inputs.len() != 2 {
        return Err(format!(
            "{} input types, expected f16 and bf16",
            inputs.len()
        ));
    }
    for input in inputs {
        let name = &input["input"];
        let total = input["vectors"].as_array().ok_or("no vectors")?.len();
        let candidates = input["candidates"].as_array().ok_or("no candidates")?;
        let perfect: Vec<&str> = candidates
            .iter()
            .filter(|c| c["matches"].as_u64() == Some(total as u64))
            .filter_map(|c| c["name"].as_str())
            .collect();
        if perfect != [expected] {
            return Err(format!(
                "{name}: candidates matching all {total} vectors: {perfect:?}, expected only \
                 '{expected}'\n{stdout}"
            ));
        }
        if input["best"] != serde_json::json!([expected]) || input["best_matches_all"] != true {
            return Err(format!("{name}: best {} ", input["best"]));
        }
    }
    if !stdout.contains(&format!("best for f16: {expected} (")) {
        return Err(format!(
            "the table does not name the best candidate:\n{stdout}"
        ));
    }
    Ok(())
}
