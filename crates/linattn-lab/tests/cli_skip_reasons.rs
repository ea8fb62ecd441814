//! On a machine without NVRTC the tables stay readable: a skipped backend shows a short
//! reason ("skipped: no NVRTC [1]") and the whole reason (the searched directories) appears
//! once, as a footnote below each table; the JSON keeps the whole reason. (Before, the
//! reason filled the verdict column: one ~700-character cell per skipped backend.)
//!
//! NVRTC is hidden with `LINATTN_NVRTC_NO_SEARCH=1` (only `LINATTN_NVRTC_DIR`, unset here,
//! and the user cache, an empty temp dir here, are searched; not even the loader path), and
//! `LINATTN_NO_PROVISION=1` keeps the binary from installing it.

mod cli_common;

use cli_common::{linattn_command, read_json};
use std::path::Path;
use std::process::Output;

/// The widest cell a table may show (skip_reason::FIT): the bench table has 15 columns and
/// is wider than a terminal by design, so the measure is the cell, not the line.
const MAX_CELL: usize = 64;

/// The longest "not run (...): backends" line.
const MAX_LINE: usize = 120;

/// The start of the whole reason probe.rs gives for a missing NVRTC.
const LONG_REASON: &str = "skipped: no NVRTC: libnvrtc.so.13 not found";

/// The binary with `args`, NVRTC hidden and the user cache in `cache` (empty).
fn without_nvrtc(cache: &Path, args: &[&str]) -> Output {
    linattn_command()
        .env("LINATTN_NVRTC_NO_SEARCH", "1")
        .env("XDG_CACHE_HOME", cache)
        .env_remove("LINATTN_NVRTC_DIR")
        .args(args)
        .output()
        .expect("the linattn binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every table cell is at most [`MAX_CELL`] characters, every "not run" line (and its
/// continuations) at most [`MAX_LINE`].
#[track_caller]
fn assert_short_lines(stdout: &str) {
    let mut in_not_run = false;
    for line in stdout.lines() {
        if line.starts_with('│') {
            for cell in line.trim_matches('│').split('│') {
                assert!(
                    cell.trim().chars().count() <= MAX_CELL,
                    "cell of {} characters: {cell}\n\nwhole output:\n{stdout}",
                    cell.trim().chars().count()
                );
            }
        }
        in_not_run = line.starts_with("not run (") || (in_not_run && line.starts_with("    "));
        if in_not_run {
            assert!(
                line.chars().count() <= MAX_LINE,
                "line of {} characters:\n{line}\n\nwhole output:\n{stdout}",
                line.chars().count()
            );
        }
    }
}

#[test]
fn check_shows_the_head_in_the_table_and_the_reason_once_below() {
    let cache = tempfile::tempdir().unwrap();
    let out = without_nvrtc(
        cache.path(),
        &[
            "check",
            "--backends",
            "cpu/causal_recurrent/f32,sim/noncausal/f32,sim/noncausal/f16",
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    // The CPU backend ran and passed; the skipped ones are no failure.
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(!stderr.contains("NVRTC not found: installing"), "{stderr}");
    assert_short_lines(&stdout);
    assert_eq!(stdout.matches(LONG_REASON).count(), 1, "{stdout}");
    assert_eq!(
        stdout.matches("│ skipped: no NVRTC [1]").count(),
        2,
        "{stdout}"
    );
    let footnote = stdout
        .lines()
        .find(|l| l.starts_with("[1] "))
        .unwrap_or_else(|| panic!("no footnote:\n{stdout}"));
    assert!(
        footnote.starts_with(&format!("[1] {LONG_REASON}")),
        "{footnote}"
    );
    // The footnote says where it looked: the (empty) user cache.
    assert!(
        footnote.contains(&cache.path().join("linattn").display().to_string()),
        "{footnote}"
    );
}

#[test]
fn bench_lists_unrun_backends_in_short_lines_and_footnotes_long_cell_messages() {
    let cache = tempfile::tempdir().unwrap();
    let json = cache.path().join("bench.json");
    let json_arg = json.display().to_string();
    let out = without_nvrtc(
        cache.path(),
        &[
            "bench",
            "--backends",
            "cpu/causal_recurrent/f32,sim/*",
            "--n-min",
            "2^6",
            "--n-max",
            "2^7",
            "--cell-seconds",
            "0.05",
            // N = 2^7 is then predicted too slow: a cell whose long message is footnoted too.
            "--max-cell-seconds",
            "0.000001",
            "--no-progress",
            "--out",
            &json_arg,
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_short_lines(&stdout);
    assert_eq!(stdout.matches(LONG_REASON).count(), 1, "{stdout}");
    // Numbered after the two too-slow cells' notes.
    assert!(
        stdout.contains("not run (skipped: no NVRTC [3]): sim/"),
        "{stdout}"
    );
    let too_slow = stdout
        .lines()
        .filter(|l| l.contains("│ too-slow: skipped: predicted "))
        .count();
    assert_eq!(too_slow, 2, "one per mode:\n{stdout}");
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with('[') && l.ends_with("above --max-cell-seconds 0.000001"))
            .count(),
        2,
        "{stdout}"
    );
    // Every sim/* backend is named in the not-run list, wrapped over several lines.
    for name in [
        "sim/causal_chunked/f16",
        "sim/causal_recurrent/f32",
        "sim/softmax/f32",
    ] {
        assert!(stdout.contains(name), "{name} missing:\n{stdout}");
    }
    let file = read_json(&json);
    let sim_messages: Vec<&str> = file["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .filter(|c| c["backend"].as_str().is_some_and(|b| b.starts_with("sim/")))
        .filter_map(|c| c["message"].as_str())
        .collect();
    assert!(
        !sim_messages.is_empty(),
        "no sim/* cell messages in the JSON"
    );
    assert!(
        sim_messages
            .iter()
            .filter(|m| m.contains("NVRTC"))
            .all(|m| m.starts_with(LONG_REASON) && m.contains("LINATTN_NVRTC_DIR")),
        "{sim_messages:?}"
    );
}

#[test]
fn all_keeps_every_table_short_and_the_report_explains_once() {
    let cache = tempfile::tempdir().unwrap();
    let out_dir = cache.path().join("all");
    let out_arg = out_dir.display().to_string();
    let out = without_nvrtc(
        cache.path(),
        &[
            "all",
            "--backends",
            "cpu/causal_recurrent/f32,sim/causal_recurrent/f32,sim/noncausal/f32",
            "--n-max",
            "2^9",
            "--out-dir",
            &out_arg,
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_short_lines(&stdout);
    // Once under the check's table and once under the bench's tables.
    assert_eq!(stdout.matches(LONG_REASON).count(), 2, "{stdout}");
    let report = std::fs::read_to_string(out_dir.join("REPORT.md")).unwrap();
    assert_eq!(report.matches(LONG_REASON).count(), 1, "{report}");
    assert!(report.contains("skipped: no NVRTC [1]"), "{report}");
}
