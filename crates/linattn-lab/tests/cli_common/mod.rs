//! What the CLI tests share: running the `linattn` binary, requiring that a run succeeded,
//! reading the JSON a run wrote and writing the .npy inputs it reads. Each test binary uses a part of it.
#![allow(dead_code)]

use npyz::WriterBuilder;
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

/// Writes `data`, a C-order tensor of shape `dims`, to `path` as a .npy file stored as `<f4`
/// (`f32`) or `<f8`.
pub fn write_npy(path: &Path, dims: &[usize], data: &[f64], f32: bool) -> Result<(), String> {
    let bytes = if f32 {
        npy_bytes(dims, data.iter().map(|&x| x as f32))
    } else {
        npy_bytes(dims, data.iter().copied())
    }?;
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

fn npy_bytes<T: npyz::AutoSerialize>(
    dims: &[usize],
    data: impl Iterator<Item = T>,
) -> Result<Vec<u8>, String> {
    let mut buf = std::io::Cursor::new(Vec::new());
    let shape: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&shape)
        .writer(&mut buf)
        .begin_nd()
        .map_err(|e| e.to_string())?;
    w.extend(data).map_err(|e| e.to_string())?;
    w.finish().map_err(|e| e.to_string())?;
    Ok(buf.into_inner())
}
