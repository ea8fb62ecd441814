//! What the CLI tests share: running the `linattn` binary, requiring that a run succeeded,
//! and reading the JSON a run wrote. Each test binary uses a part of it.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// The binary, never provisioning NVRTC (tests download nothing).
pub fn linattn_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_linattn"));
    command.env("LINATTN_NO_PROVISION", "1");
    command
}

/// The binary run with `args` in the test's working directory.
pub fn linattn(args: &[&str]) -> Output {
    linattn_command()
        .args(args)
        .output()
        .expect("the linattn binary runs")
}

/// The binary run with `args` in `cwd`.
pub fn linattn_in(cwd: &Path, args: &[&str]) -> Output {
    linattn_command()
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("the linattn binary runs")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Panics with the run's stderr unless it exited 0.
#[track_caller]
pub fn assert_ok(out: &Output) {
    assert!(out.status.success(), "{}", stderr(out));
}

/// The binary run with `args`, which must succeed.
#[track_caller]
pub fn linattn_ok(args: &[&str]) -> Output {
    let out = linattn(args);
    assert_ok(&out);
    out
}

/// The JSON file at `path`.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
