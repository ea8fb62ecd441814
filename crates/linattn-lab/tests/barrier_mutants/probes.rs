//! Probes: one run of the `linattn` binary on the simulator that executes some kernels, read
//! from a kernel directory (`LINATTN_KERNEL_DIR`), and what it showed: passed, caught (a
//! checker's fault or a wrong answer), or broken (anything else: a compile error, a bad
//! argument; a mutant that breaks that way proves nothing about barriers).

use linattn_core::{Inputs, Judge, Precision, Shape};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, OnceLock};

/// B, H, N, D, M of an attend or decode probe.
#[derive(Debug, Clone, Copy)]
pub struct Dims(pub usize, pub usize, pub usize, pub usize, pub usize);

/// One way to run kernels on the simulator.
#[derive(Debug, Clone, Copy)]
pub enum Probe {
    /// `linattn check --backends B --sim-max-n N` (with `--no-globalcheck` unless
    /// `globalcheck`): every case of the default grid up to N, forward and gradients,
    /// against the f64 oracle.
    Check {
        backends: &'static str,
        max_n: usize,
        globalcheck: bool,
        /// Environment variables of the run, as `Attend`'s.
        env: &'static [(&'static str, &'static str)],
    },
    /// `linattn attend` of one f32 backend at one shape (with the backward), against
    /// cpu-ref's f64 result on the same inputs.
    Attend {
        backend: &'static str,
        reference: &'static str,
        dims: Dims,
        map: &'static str,
        causal: bool,
        /// With ∂L/∂O: the backward runs too, and dq, dk, dv are compared.
        backward: bool,
        /// Environment variables of the backend's run (e.g. `LINATTN_CC_SEGMENTS`, to take a
        /// kernel path the shape would not take by default); the reference runs without them.
        env: &'static [(&'static str, &'static str)],
    },
    /// `linattn decode` of an f32 decoder (a prefill of `prefill` tokens in one launch, then
    /// one launch per token), against cpu-ref/decode/f64.
    Decode {
        backend: &'static str,
        dims: Dims,
        map: &'static str,
        prefill: usize,
    },
    /// `linattn latency --platform sim --filter F`: the probe kernels; a fault exits 1.
    Latency { filter: &'static str },
}

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Probe::Check {
                backends,
                max_n,
                globalcheck,
                env,
            } => {
                let off = if *globalcheck {
                    ""
                } else {
                    " --no-globalcheck"
                };
                write!(f, "check {backends} N<={max_n}{off}")?;
                env.iter().try_for_each(|(k, v)| write!(f, " {k}={v}"))
            }
            Probe::Attend {
                backend,
                dims: Dims(b, h, n, d, m),
                map,
                causal,
                backward,
                env,
                ..
            } => {
                let c = if *causal { "causal" } else { "non-causal" };
                let grads = if *backward { " +backward" } else { "" };
                write!(
                    f,
                    "attend {backend} B={b} H={h} N={n} D={d} M={m} {map} {c}{grads}"
                )?;
                env.iter().try_for_each(|(k, v)| write!(f, " {k}={v}"))
            }
            Probe::Decode {
                backend,
                dims: Dims(b, h, n, d, m),
                map,
                prefill,
            } => write!(
                f,
                "decode {backend} B={b} H={h} N={n} D={d} M={m} {map} prefill {prefill}"
            ),
            Probe::Latency { filter } => write!(f, "latency --platform sim --filter {filter}"),
        }
    }
}

/// What a probe run showed.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Passed,
    /// `by`: the checker (racecheck, globalcheck, ...) or "wrong answer" of the first
    /// failing case; `seen`: every such class among the failing cases; `detail`: the first
    /// report and how many cases showed what.
    Caught {
        by: String,
        seen: Vec<String>,
        detail: String,
    },
    Broken(String),
}

/// Where probes keep their files.
pub struct Workspace {
    /// NVRTC's compile cache for these runs: mutants stay out of `target/linattn-nvrtc-cache`,
    /// the cache the GPU pack ships.
    pub cache_dir: PathBuf,
}

impl Workspace {
    pub fn new() -> Self {
        let cache_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("barrier-mutants-nvrtc");
        Workspace { cache_dir }
    }

    fn command(&self, kernel_dir: &Path) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_linattn"));
        command
            .env("LINATTN_NO_PROVISION", "1")
            .env("LINATTN_KERNEL_DIR", kernel_dir)
            .env("LINATTN_CACHE_DIR", &self.cache_dir);
        command
    }

    /// Runs `probe` on the kernels of `kernel_dir`, with its files in `work` (a fresh
    /// directory).
    pub fn run(&self, probe: &Probe, kernel_dir: &Path, work: &Path) -> Verdict {
        match self.try_run(probe, kernel_dir, work) {
            Ok(verdict) => verdict,
            Err(e) => Verdict::Broken(e),
        }
    }

    fn try_run(&self, probe: &Probe, kernel_dir: &Path, work: &Path) -> Result<Verdict, String> {
        std::fs::create_dir_all(work).map_err(|e| format!("{}: {e}", work.display()))?;
        match *probe {
            Probe::Check {
                backends,
                max_n,
                globalcheck,
                env,
            } => {
                let json = work.join("check.json");
                let mut command = self.command(kernel_dir);
                command
                    .envs(env.iter().copied())
                    .args(["check", "--backends", backends, "--sim-max-n"])
                    .arg(max_n.to_string())
                    .arg("--json")
                    .arg(&json);
                if !globalcheck {
                    command.arg("--no-globalcheck");
                }
                let out = command
                    .output()
                    .map_err(|e| format!("linattn check: {e}"))?;
                check_verdict(&out, &json)
            }
            Probe::Attend {
                backend,
                reference,
                dims,
                map,
                causal,
                backward,
                env,
            } => {
                let inputs = seeded_inputs(dims)?;
                let args = |backend: &str, out_dir: &Path| -> Vec<String> {
                    let mut args = vec!["attend".to_string()];
                    for name in ["q", "k", "v"] {
                        args.push(format!("--{name}"));
                        args.push(work.join(format!("{name}.npy")).display().to_string());
                    }
                    if backward {
                        args.push("--d-out".into());
                        args.push(work.join("g.npy").display().to_string());
                    }
                    args.extend([
                        "--backend".into(),
                        backend.into(),
                        "--map".into(),
                        map.into(),
                    ]);
                    args.push(if causal { "--causal" } else { "--non-causal" }.into());
                    args.extend(favor_seed(map));
                    args.push("--out-dir".into());
                    args.push(out_dir.display().to_string());
                    args
                };
                let key = format!("{probe}");
                let files: &[&str] = if backward {
                    &["o", "dq", "dk", "dv"]
                } else {
                    &["o"]
                };
                let expected = reference_of(&key, || {
                    let dir = work.join("reference");
                    write_npys(work, &inputs, false)?;
                    let out = self
                        .command(kernel_dir)
                        .args(args(reference, &dir))
                        .output();
                    let out = out.map_err(|e| format!("linattn attend: {e}"))?;
                    if !out.status.success() {
                        return Err(format!("the reference failed: {}", stderr_tail(&out)));
                    }
                    files
                        .iter()
                        .map(|f| read_npy(&dir.join(format!("{f}.npy"))))
                        .collect()
                })?;
                write_npys(work, &inputs, true)?;
                let dir = work.join("got");
                let out = self
                    .command(kernel_dir)
                    .envs(env.iter().copied())
                    .args(args(backend, &dir))
                    .output();
                let out = out.map_err(|e| format!("linattn attend: {e}"))?;
                run_verdict(&out, &dir, files, &expected, precision_of(backend)?)
            }
            Probe::Decode {
                backend,
                dims,
                map,
                prefill,
            } => {
                let inputs = seeded_inputs(dims)?;
                let args = |backend: &str, out: &Path| -> Vec<String> {
                    let mut args = vec!["decode".to_string()];
                    for name in ["q", "k", "v"] {
                        args.push(format!("--{name}"));
                        args.push(work.join(format!("{name}.npy")).display().to_string());
                    }
                    args.extend([
                        "--backend".into(),
                        backend.into(),
                        "--map".into(),
                        map.into(),
                    ]);
                    args.extend(["--prefill".into(), prefill.to_string()]);
                    args.extend(favor_seed(map));
                    args.push("--out".into());
                    args.push(out.display().to_string());
                    args
                };
                let key = format!("{probe}");
                let expected = reference_of(&key, || {
                    write_npys(work, &inputs, false)?;
                    let path = work.join("reference-o.npy");
                    let out = self
                        .command(kernel_dir)
                        .args(args("cpu-ref/decode/f64", &path))
                        .output();
                    let out = out.map_err(|e| format!("linattn decode: {e}"))?;
                    if !out.status.success() {
                        return Err(format!("the reference failed: {}", stderr_tail(&out)));
                    }
                    Ok(vec![read_npy(&path)?])
                })?;
                write_npys(work, &inputs, true)?;
                let out = self
                    .command(kernel_dir)
                    .args(args(backend, &work.join("o.npy")))
                    .output();
                let out = out.map_err(|e| format!("linattn decode: {e}"))?;
                run_verdict(&out, work, &["o"], &expected, precision_of(backend)?)
            }
            Probe::Latency { filter } => {
                let out = self
                    .command(kernel_dir)
                    .args(["latency", "--platform", "sim", "--repeats", "1", "--filter"])
                    .arg(filter)
                    .output()
                    .map_err(|e| format!("linattn latency: {e}"))?;
                if out.status.success() {
                    Ok(Verdict::Passed)
                } else {
                    Ok(fault_in(&stderr_tail(&out)))
                }
            }
        }
    }
}

/// One FAVOR+ projection for the run and its reference (the option is refused for other
/// maps).
fn favor_seed(map: &str) -> Vec<String> {
    if map.starts_with("favor") {
        vec!["--favor-seed".into(), "7".into()]
    } else {
        Vec::new()
    }
}

/// The checker a failure message names (`kernel fault: racecheck: …`), as a verdict; any
/// other error is broken.
fn fault_in(message: &str) -> Verdict {
    match message.find("kernel fault: ") {
        Some(at) => {
            let rest = &message[at + "kernel fault: ".len()..];
            let checker = rest.split(':').next().unwrap_or("").trim().to_string();
            Verdict::Caught {
                seen: vec![checker.clone()],
                by: checker,
                detail: first_line(rest),
            }
        }
        None => Verdict::Broken(message.to_string()),
    }
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    line.chars().take(300).collect()
}

fn stderr_tail(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stderr);
    let start = text.len().saturating_sub(4000);
    let start = (start..=text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    text[start..].to_string()
}

/// `linattn check`'s exit status and JSON: every failing case classified.
fn check_verdict(out: &Output, json: &Path) -> Result<Verdict, String> {
    match out.status.code() {
        Some(0) | Some(1) => {}
        _ => {
            return Ok(Verdict::Broken(format!(
                "status {:?}: {}",
                out.status,
                stderr_tail(out)
            )))
        }
    }
    let text = std::fs::read_to_string(json)
        .map_err(|e| format!("{}: {e}; stderr: {}", json.display(), stderr_tail(out)))?;
    let report: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", json.display()))?;
    let cases = report["cases"].as_array().ok_or("check JSON: no 'cases'")?;
    let mut run = 0;
    let mut counts: Vec<(String, usize)> = Vec::new();
    let mut first: Option<(String, String)> = None;
    for case in cases {
        let outcome = case["outcome"].as_str().unwrap_or("");
        if outcome == "not_applicable" {
            continue;
        }
        run += 1;
        let what = match outcome {
            "pass" => continue,
            "fail" => {
                let worst = case["errors"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|e| e["passed"] != true)
                    .map(|e| {
                        let ratio = e["judged_ratio"]
                            .as_f64()
                            .map_or("inf".into(), |r| format!("{r:.2e}"));
                        format!("{} {ratio}", e["tensor"].as_str().unwrap_or("?"))
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                (
                    "wrong answer".to_string(),
                    format!("judged rms ratio {worst}"),
                )
            }
            _ => match fault_in(case["message"].as_str().unwrap_or("")) {
                Verdict::Caught { by, detail, .. } => (by, detail),
                _ => {
                    return Ok(Verdict::Broken(format!(
                        "case {}: {}",
                        case["description"],
                        case["message"].as_str().unwrap_or("(no message)")
                    )))
                }
            },
        };
        let detail = format!(
            "case {} ({}): {}",
            case["case"],
            case["description"].as_str().unwrap_or(""),
            what.1
        );
        first.get_or_insert((what.0.clone(), detail));
        match counts.iter_mut().find(|(k, _)| *k == what.0) {
            Some((_, n)) => *n += 1,
            None => counts.push((what.0, 1)),
        }
    }
    if run == 0 {
        return Ok(Verdict::Broken(format!(
            "no case ran: {}",
            stderr_tail(out)
        )));
    }
    Ok(match first {
        None if out.status.code() == Some(0) => Verdict::Passed,
        None => Verdict::Broken(format!("exit 1 with no failing case: {}", stderr_tail(out))),
        Some((by, detail)) => {
            let tally = counts
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ");
            Verdict::Caught {
                by,
                seen: counts.into_iter().map(|(k, _)| k).collect(),
                detail: format!("{tally} of {run} cases; first: {detail}"),
            }
        }
    })
}

/// The storage precision a backend name ends with (`sim/causal_chunked/f16` → f16).
fn precision_of(backend: &str) -> Result<Precision, String> {
    let last = backend.rsplit('/').next().unwrap_or(backend);
    last.parse()
        .map_err(|e| format!("{backend}: no precision in the name: {e:?}"))
}

/// An attend or decode run: a fault on stderr, or each output against the reference by
/// linattn-core's verdict rule at the backend's precision (the reference's inputs are not
/// rounded to its storage; the precision's tolerance covers that rounding).
fn run_verdict(
    out: &Output,
    dir: &Path,
    files: &[&str],
    expected: &[Vec<f64>],
    precision: Precision,
) -> Result<Verdict, String> {
    if !out.status.success() {
        return Ok(fault_in(&stderr_tail(out)));
    }
    let judge = Judge::for_precision(precision);
    for (name, reference) in files.iter().zip(expected) {
        let got = read_npy(&dir.join(format!("{name}.npy")))?;
        let verdict = judge.tensor(name, reference, &got);
        if let Some(failure) = verdict.failure() {
            return Ok(Verdict::Caught {
                by: "wrong answer".into(),
                seen: vec!["wrong answer".into()],
                detail: failure,
            });
        }
    }
    Ok(Verdict::Passed)
}

/// The reference outputs of a probe, computed once per test process.
fn reference_of(
    key: &str,
    compute: impl FnOnce() -> Result<Vec<Vec<f64>>, String>,
) -> Result<Arc<Vec<Vec<f64>>>, String> {
    static MEMO: Memo<Arc<Vec<Vec<f64>>>> = Memo::new();
    MEMO.get(key, || compute().map(Arc::new))
}

/// Values computed once per key and test process, whichever trial thread asks first (the
/// others wait for it).
pub struct Memo<T>(OnceLock<Mutex<HashMap<String, Slot<T>>>>);

/// One key's value, locked while the first asker computes it.
type Slot<T> = Arc<Mutex<Option<T>>>;

impl<T: Clone> Memo<T> {
    pub const fn new() -> Self {
        Memo(OnceLock::new())
    }

    pub fn get(&self, key: &str, compute: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
        let slot = {
            let mut map = self
                .0
                .get_or_init(Default::default)
                .lock()
                .map_err(|e| e.to_string())?;
            map.entry(key.to_string()).or_default().clone()
        };
        let mut held = slot.lock().map_err(|e| e.to_string())?;
        if let Some(done) = held.as_ref() {
            return Ok(done.clone());
        }
        let done = compute()?;
        *held = Some(done.clone());
        Ok(done)
    }
}

/// A tensor to write: its file name (without `.npy`), dims and data.
type Named = (String, [usize; 4], Vec<f64>);

/// Seeded inputs of `dims` (and ∂L/∂O), rounded to f32 so the f64 reference sees the
/// values the f32 run reads.
fn seeded_inputs(dims: Dims) -> Result<Vec<Named>, String> {
    let Dims(b, h, n, d, m) = dims;
    let shape = Shape::new(b, h, n, d, m);
    let x = Inputs::random(shape, 23, true).map_err(|e| e.to_string())?;
    let x = x.rounded(|a| a as f32 as f64);
    let mut tensors = vec![
        ("q".to_string(), x.q.dims(), x.q.data().to_vec()),
        ("k".to_string(), x.k.dims(), x.k.data().to_vec()),
        ("v".to_string(), x.v.dims(), x.v.data().to_vec()),
    ];
    if let Some(g) = &x.d_out {
        tensors.push(("g".to_string(), g.dims(), g.data().to_vec()));
    }
    Ok(tensors)
}

/// Writes the tensors as `<name>.npy` into `work`, as f32 or f64.
fn write_npys(work: &Path, tensors: &[Named], f32: bool) -> Result<(), String> {
    for (name, dims, data) in tensors {
        crate::cli_common::write_npy(&work.join(format!("{name}.npy")), dims, data, f32)?;
    }
    Ok(())
}

fn read_npy(path: &Path) -> Result<Vec<f64>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file = npyz::NpyFile::new(&bytes[..]).map_err(|e| format!("{}: {e}", path.display()))?;
    if file.header().dtype().descr().contains("f4") {
        let v: Vec<f32> = file
            .into_vec()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(v.into_iter().map(f64::from).collect())
    } else {
        file.into_vec::<f64>()
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}
