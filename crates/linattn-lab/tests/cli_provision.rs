//! The binary installs NVRTC once into the user cache when a command needs kernels and NVRTC
//! is missing. No network here: `LINATTN_PYTHON` points at a fake python whose "pip" logs
//! its arguments and then lays out the wheel's files (or fails like pip without network).
//! `LINATTN_NVRTC_NO_SEARCH=1` hides this machine's NVRTC, so the runs see none.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The fake python: `$FAKE_PIP` = ok | fail. Logs one line per call to `$FAKE_PIP_LOG`, and
/// "final existed" when the cache directory was already in place while "pip" ran.
const FAKE_PYTHON: &str = r#"#!/bin/sh
echo "$@" >> "$FAKE_PIP_LOG"
[ -e "$FAKE_PIP_FINAL" ] && echo "final existed" >> "$FAKE_PIP_LOG"
target=""
prev=""
for arg in "$@"; do
  [ "$prev" = "--target" ] && target="$arg"
  prev="$arg"
done
case "$FAKE_PIP" in
  ok)
    sleep "${FAKE_PIP_SLEEP:-0}"
    mkdir -p "$target/nvidia/cu13/lib" && : > "$target/nvidia/cu13/lib/libnvrtc.so.13"
    ;;
  *)
    echo "WARNING: Retrying (Retry(total=1)) after connection broken by 'NewConnectionError(Temporary failure in name resolution)'" >&2
    echo "ERROR: No matching distribution found for nvidia-cuda-nvrtc==13.0.88" >&2
    exit 1
    ;;
esac
"#;

const BEFORE: &str =
    "NVRTC not found: installing the pinned wheel nvidia-cuda-nvrtc==13.0.88 into ";
const BEFORE_END: &str = " (once; LINATTN_NO_PROVISION=1 turns this off)";

/// A home with an empty cache and the fake python beside it.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        let python = dir.path().join("fake-python3");
        std::fs::write(&python, FAKE_PYTHON).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        Sandbox { dir }
    }

    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    /// The directory the wheel goes into.
    fn target(&self) -> PathBuf {
        self.cache().join("linattn/nvrtc-13.0.88")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("pip.log")
    }

    fn log_lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.log())
            .map(|t| t.lines().map(String::from).collect())
            .unwrap_or_default()
    }

    /// `linattn args` with NVRTC hidden, the cache in the sandbox and the fake pip in mode
    /// `pip` (provisioning on unless the caller's `env` turns it off).
    fn command(&self, pip: &str, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_linattn"));
        command
            .args(args)
            .env("LINATTN_NVRTC_NO_SEARCH", "1")
            .env("XDG_CACHE_HOME", self.cache())
            .env("LINATTN_PYTHON", self.dir.path().join("fake-python3"))
            .env("FAKE_PIP", pip)
            .env("FAKE_PIP_LOG", self.log())
            .env("FAKE_PIP_FINAL", self.target())
            .env_remove("LINATTN_NO_PROVISION")
            .env_remove("LINATTN_NVRTC_DIR");
        command
    }

    /// Entries of the cache's linattn directory other than the install itself.
    fn leftovers(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.cache().join("linattn")) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name != "nvrtc-13.0.88")
            .collect()
    }
}

const CPU_CHECK: [&str; 3] = ["check", "--backends", "cpu/causal_recurrent/f32"];

fn run(command: &mut Command) -> (Output, String) {
    let out = command.output().expect("the linattn binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stderr)
}

fn has_library(dir: &Path) -> bool {
    dir.join("nvidia/cu13/lib/libnvrtc.so.13").is_file()
}

#[test]
fn installs_once_through_a_temp_dir_renamed_into_place() {
    let sandbox = Sandbox::new();
    let (out, stderr) = run(&mut sandbox.command("ok", &CPU_CHECK));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let before = format!("{BEFORE}{}{BEFORE_END}", sandbox.target().display());
    assert_eq!(stderr.lines().next(), Some(before.as_str()), "{stderr}");
    let after = stderr.lines().nth(1).unwrap_or("");
    assert!(
        after.starts_with("NVRTC installed in ") && after.ends_with(" s"),
        "{stderr}"
    );
    assert!(has_library(&sandbox.target()));
    assert!(sandbox.leftovers().is_empty(), "{:?}", sandbox.leftovers());
    // pip wrote into a temp dir beside the target, while the target did not exist yet.
    let log = sandbox.log_lines();
    assert_eq!(log.len(), 1, "{log:?}");
    let partial = format!(
        "--target {}/.nvrtc-13.0.88.partial-",
        sandbox.cache().join("linattn").display()
    );
    assert!(
        log[0].starts_with("-m pip install --quiet --no-deps"),
        "{log:?}"
    );
    assert!(log[0].contains(&partial), "{log:?}");
    assert!(log[0].ends_with(" nvidia-cuda-nvrtc==13.0.88"), "{log:?}");

    // Once: the next run finds the cache and installs nothing.
    let (out, stderr) = run(&mut sandbox.command("ok", &CPU_CHECK));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("NVRTC not found"), "{stderr}");
    assert_eq!(sandbox.log_lines().len(), 1);
}

#[test]
fn a_failed_install_says_why_in_one_line_and_the_cpu_backends_still_run() {
    let sandbox = Sandbox::new();
    // Under $HOME (no XDG_CACHE_HOME) the target is shown as ~/.cache/...
    let home = sandbox.dir.path().join("home");
    let mut command = sandbox.command("fail", &CPU_CHECK);
    command.env_remove("XDG_CACHE_HOME").env("HOME", &home);
    let (out, stderr) = run(&mut command);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines[0],
        format!("{BEFORE}~/.cache/linattn/nvrtc-13.0.88{BEFORE_END}"),
        "{stderr}"
    );
    assert_eq!(
        lines[1],
        "NVRTC unavailable: could not install nvidia-cuda-nvrtc==13.0.88 (pip: no network? \
         ERROR: No matching distribution found for nvidia-cuda-nvrtc==13.0.88); run `just \
         nvrtc` or set LINATTN_NVRTC_DIR",
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("PASS"), "{stdout}");
    // Nothing half-installed is left behind.
    let cache = home.join(".cache/linattn");
    assert!(!cache.join("nvrtc-13.0.88").exists());
    let left: Vec<_> = std::fs::read_dir(&cache).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_missing_python_is_named() {
    let sandbox = Sandbox::new();
    let missing = sandbox.dir.path().join("no-such-python3");
    let mut command = sandbox.command("ok", &CPU_CHECK);
    command.env("LINATTN_PYTHON", &missing);
    let (out, stderr) = run(&mut command);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let expected = format!(
        "NVRTC unavailable: could not install nvidia-cuda-nvrtc==13.0.88 ({} not found); run \
         `just nvrtc` or set LINATTN_NVRTC_DIR",
        missing.display()
    );
    assert_eq!(stderr.lines().nth(1), Some(expected.as_str()), "{stderr}");
    assert!(!sandbox.target().exists());
}

#[test]
fn switched_off_or_not_needed_it_never_runs_pip() {
    let sandbox = Sandbox::new();
    let empty = sandbox.dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let mut off = sandbox.command("ok", &CPU_CHECK);
    off.env("LINATTN_NO_PROVISION", "1");
    let mut chosen_dir = sandbox.command("ok", &CPU_CHECK);
    chosen_dir.env("LINATTN_NVRTC_DIR", &empty);
    // `report` compiles no kernel (and fails here on the missing file, after the decision).
    let no_kernels = sandbox.command("ok", &["report", "/nonexistent/bench.json"]);
    for (what, mut command) in [
        ("LINATTN_NO_PROVISION=1", off),
        ("LINATTN_NVRTC_DIR set", chosen_dir),
        ("report", no_kernels),
    ] {
        let (_, stderr) = run(&mut command);
        assert!(!stderr.contains("NVRTC not found"), "{what}: {stderr}");
        assert!(sandbox.log_lines().is_empty(), "{what}: pip ran");
        assert!(!sandbox.target().exists(), "{what}");
    }
}

#[test]
fn two_processes_installing_at_once_leave_one_complete_install() {
    let sandbox = Sandbox::new();
    let spawn = || {
        sandbox
            .command("ok", &CPU_CHECK)
            .env("FAKE_PIP_SLEEP", "2")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the linattn binary starts")
    };
    let (first, second) = (spawn(), spawn());
    for child in [first, second] {
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(stderr.contains("NVRTC installed in "), "{stderr}");
    }
    assert!(has_library(&sandbox.target()));
    assert!(sandbox.leftovers().is_empty(), "{:?}", sandbox.leftovers());
    // Both installed (each into its own temp dir); neither saw the other's half-done copy.
    let log = sandbox.log_lines();
    assert!(log.iter().all(|l| l != "final existed"), "{log:?}");
}
