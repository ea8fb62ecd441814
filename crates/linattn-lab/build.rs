//! Embeds the commit the binary is built from, so a results file written anywhere (a GPU
//! machine with no checkout, another directory) names the code that produced it.
//!
//! `LINATTN_BUILD_COMMIT` and `LINATTN_BUILD_DIRTY_SUFFIX` ("-dirty" or "") reach the crate
//! through `env!`. Dirty means a tracked file under the build's inputs (crates/, kernels/,
//! Cargo.toml, Cargo.lock) differs from the commit, or an untracked, not ignored file lies
//! there. A build outside a git checkout says "unknown"; a packager may set
//! `LINATTN_BUILD_COMMIT` in the environment instead.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What decides whether the binary's sources equal the commit.
const SOURCES: [&str; 4] = ["crates", "kernels", "Cargo.toml", "Cargo.lock"];

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn emit(commit: &str, dirty: bool) {
    println!("cargo:rustc-env=LINATTN_BUILD_COMMIT={commit}");
    let suffix = if dirty { "-dirty" } else { "" };
    println!("cargo:rustc-env=LINATTN_BUILD_DIRTY_SUFFIX={suffix}");
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=LINATTN_BUILD_COMMIT");
    if let Ok(given) = std::env::var("LINATTN_BUILD_COMMIT") {
        emit(given.trim(), false);
        return;
    }
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest.join("../..");
    let Some(hash) = git(&root, &["rev-parse", "--verify", "HEAD"]) else {
        emit("unknown", false);
        return;
    };
    // Run again when HEAD moves (commit, checkout, branch ref) or the index changes, and
    // when any source changes (the dirty flag); cargo scans watched directories recursively.
    let mut watched: Vec<String> = ["HEAD", "index", "packed-refs"]
        .iter()
        .filter_map(|p| git(&root, &["rev-parse", "--git-path", p]))
        .collect();
    if let Some(branch) = git(&root, &["symbolic-ref", "-q", "HEAD"]) {
        watched.extend(git(&root, &["rev-parse", "--git-path", &branch]));
    }
    for path in watched {
        println!("cargo:rerun-if-changed={}", root.join(path).display());
    }
    for source in SOURCES {
        println!("cargo:rerun-if-changed={}", root.join(source).display());
    }
    let mut status = vec!["status", "--porcelain", "--untracked-files=normal", "--"];
    status.extend(SOURCES);
    // A failed status (it should not fail where rev-parse worked) counts as dirty: the
    // binary must not claim sources it cannot vouch for.
    let dirty = git(&root, &status).is_none_or(|out| !out.is_empty());
    emit(&hash, dirty);
}
