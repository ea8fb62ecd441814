//! Barrier deletion: every `__syncthreads()` of `kernels/` (found at run time), deleted one at
//! a time, must be caught on the simulator: a checker's fault (racecheck, globalcheck, ...)
//! or a wrong answer against the f64 oracle. Each kernel file has a ladder of probes (runs of
//! the `linattn` binary with `LINATTN_KERNEL_DIR` pointing at the mutant), cheapest first; a
//! mutant is caught when some probe catches it, and that probe must pass on the unmutated
//! kernels. A barrier no probe catches must be listed in `EXCEPTIONS` with why deleting it
//! is harmless, matched by the source text around it.
//!
//! One barrier per kernel file runs by default (the fast subset); the rest are ignored
//! trials: `just barriers` (or `-- --include-ignored`) runs them all. Each mutant prints one
//! line (file:line function, verdict, checker, seconds), also appended to
//! `target/tmp/barrier-deletion.txt`.

mod barrier_mutants;
mod cli_common;

use barrier_mutants::probes::{Dims, Memo, Probe, Verdict, Workspace};
use barrier_mutants::{barriers, barriers_in, kernel_dir, write_mutant, Barrier};
use linattn_testkit::{Platform, Trial};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

/// The probes of each kernel file, cheapest first. A file with barriers and no entry fails.
const LADDERS: &[(&str, &[Probe])] = &[
    // la_block_reduce: cs_contract's block sum (256 threads); then the softmax row kernels'
    // max and sum (the scratch reused), which take more than one warp only past N = 32.
    (
        "prelude.cuh",
        &[
            check("sim/causal_cumsum/f32", 7),
            check("sim/softmax/f32", 65),
        ],
    ),
    // The chunked program's parts. Pass 1 (the walks) and pass 2 (cc_forward, cc_forward_train)
    // first by the inference forward (no d_out: the packed walk and cc_forward), which `check`
    // does not run (it stages d_out for every backend with a backward); D = 128 for
    // cc_forward's loop over the packed state's tiles; then `check` per chunk (the split walk,
    // cc_forward_train and the backward; by default training runs in segments).
    ("causal_chunked_states.cuh", CHUNKED_PASSES),
    ("causal_chunked_outputs.cuh", CHUNKED_PASSES),
    // The segmented forward (cc_seg_sums, cc_seg_scan, cc_forward_seg) in segments of 2 chunks
    // over 5, the last one short (by default N = 300 takes segments of 1); then its training
    // forms (cc_seg_sums_train, cc_forward_seg_train) under the backward.
    (
        "causal_chunked_segments.cuh",
        &[chunked_segmented(false), chunked_segmented(true)],
    ),
    (
        "causal_chunked_seg_sums.cuh",
        &[chunked_segmented(false), chunked_segmented(true)],
    ),
    (
        "causal_chunked_backward.cuh",
        &[
            check("sim/causal_chunked/f16", 65),
            check("sim/causal_chunked/f16", 130),
        ],
    ),
    (
        "causal_cumsum.cu",
        &[
            check("sim/causal_cumsum/f32", 7),
            // cs_outer's grid-stride loop over rows takes a second row per block only past
            // its 4096 blocks: B·H·N = 4097 rows, the one shape where its trailing barrier
            // matters (the check grid reaches it at N = 1100 only, minutes per run).
            Probe::Attend {
                backend: "sim/causal_cumsum/f32",
                reference: "cpu-ref/causal_cumsum/f64",
                dims: Dims(1, 1, 4097, 16, 16),
                map: "elu+1",
                causal: true,
                backward: false,
                env: &[],
            },
        ],
    ),
    (
        "causal_recurrent.cu",
        &[
            check("sim/causal_recurrent/f32", 7),
            // cr_backward_dq_from_states runs on the stored-states path only.
            check("sim/causal_recurrent+storedbwd/f32", 7),
            // More than one tile of tokens: the tile loop's trailing barrier.
            check("sim/causal_recurrent/f32", 65),
        ],
    ),
    (
        "decode.cu",
        &[
            decode("elu+1"),
            // DEC_ROW_MAP's row maps: the barrier before φ of a row, and FAVOR+'s own.
            decode("softmax"),
            decode("favor:32"),
        ],
    ),
    // The φ stages of softmax, 1+cos, FAVOR+ and efficient attention (every map is in the grid).
    ("feature_map.cu", &[check("sim/noncausal/f32", 7)]),
    (
        "latency_probe.cu",
        &[Probe::Latency {
            filter: "shared_chase",
        }],
    ),
    (
        "noncausal.cu",
        &[
            check("sim/noncausal/f32", 7),
            check("sim/noncausal/f32", 65),
        ],
    ),
    (
        "softmax.cu",
        &[check("sim/softmax/f32", 7), check("sim/softmax/f32", 65)],
    ),
];

const PER_CHUNK: &[(&str, &str)] = &[("LINATTN_CC_SEGMENTS", "off")];

const CHUNKED_PASSES: &[Probe] = &[
    chunked_inference(64),
    chunked_inference(128),
    check_with("sim/causal_chunked/f16", 65, PER_CHUNK),
    check_with("sim/causal_chunked/f16", 130, PER_CHUNK),
];

/// `linattn check` as CI's sim pass runs it: every checker, globalcheck included.
const fn check(backends: &'static str, max_n: usize) -> Probe {
    check_with(backends, max_n, &[])
}

/// [`check`] with environment variables (a kernel path the default would not take).
const fn check_with(
    backends: &'static str,
    max_n: usize,
    env: &'static [(&'static str, &'static str)],
) -> Probe {
    Probe::Check {
        backends,
        max_n,
        globalcheck: true,
        env,
    }
}

/// `linattn attend` of the chunked form's per-chunk inference forward (without d_out,
/// `LINATTN_CC_SEGMENTS=off`: by default it runs in segments), against the f64 recurrent
/// reference: N = 130 (two whole chunks and a tail), B·H = 2, D = `d`, M = 64.
const fn chunked_inference(d: usize) -> Probe {
    Probe::Attend {
        backend: "sim/causal_chunked/f16",
        reference: "cpu-ref/causal_recurrent/f64",
        dims: Dims(1, 2, 130, d, 64),
        map: "elu+1",
        causal: true,
        backward: false,
        env: &[("LINATTN_CC_SEGMENTS", "off")],
    }
}

/// `linattn attend` of the chunked form in segments of 2 chunks at N = 300 (5 chunks, the
/// last segment short), B·H = 2, D = 128: `backward`, the training forms under the backward
/// at M = 128 (the D = 128, M = 64 program has none: `trains_in_segments`); else the
/// inference forward at M = 64.
const fn chunked_segmented(backward: bool) -> Probe {
    Probe::Attend {
        backend: "sim/causal_chunked/f16",
        reference: "cpu-ref/causal_recurrent/f64",
        dims: Dims(1, 2, 300, 128, if backward { 128 } else { 64 }),
        map: "elu+1",
        causal: true,
        backward,
        env: &[("LINATTN_CC_SEGMENTS", "2")],
    }
}

const fn decode(map: &'static str) -> Probe {
    Probe::Decode {
        backend: "sim/decode/f32",
        dims: Dims(1, 2, 5, 16, 40),
        map,
        prefill: 3,
    }
}

/// A barrier whose deletion no probe catches, and why that is harmless.
struct Exception {
    file: &'static str,
    /// Text that occurs in the lines around exactly one barrier of the file (3 before, its
    /// own, 1 after).
    around: &'static str,
    reason: &'static str,
}

const EXCEPTIONS: &[Exception] = &[
    Exception {
        file: "decode.cu",
        around: "A row map reads every element of the row",
        reason: "dec_step, before φ of a row map: D <= DEC_THREADS, so before its first block \
                 reduction dec_features reads only the thread's own element of qr/kr (and \
                 writes only its own of xs, qf/kf); the reduction's barriers publish the row \
                 before any thread reads another's element",
    },
    Exception {
        file: "decode.cu",
        around: "dec_features(kr, kf, d, c, favor_w, xs, scratch);",
        reason: "dec_step, after φ: until la_block_sum(qz) each thread reads only its own \
                 qf[tid], kf[tid] (z's update), and that block sum's barriers come before the \
                 S loop reads every qf[a], kf[a] and vs[col]",
    },
];

fn exception_for(barrier: &Barrier) -> Option<&'static Exception> {
    EXCEPTIONS
        .iter()
        .find(|e| e.file == barrier.file && barrier.context.contains(e.around))
}

fn ladder(file: &str) -> Option<&'static [Probe]> {
    LADDERS.iter().find(|(f, _)| *f == file).map(|(_, l)| *l)
}

fn report_path() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("barrier-deletion.txt")
}

fn report(line: &str) {
    println!("{line}");
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(report_path())
    {
        let _ = writeln!(file, "{line}");
    }
}

/// Whether `probe` passes on the unmutated kernels (once per process).
fn baseline_passes(ws: &Workspace, probe: &Probe) -> Result<(), String> {
    static BASELINES: Memo<Result<(), String>> = Memo::new();
    let key = probe.to_string();
    BASELINES.get(&key, || {
        let work = tempfile::tempdir().map_err(|e| e.to_string())?;
        Ok(match ws.run(probe, &kernel_dir(), work.path()) {
            Verdict::Passed => Ok(()),
            other => Err(format!(
                "probe `{key}` fails on the unmutated kernels: {other:?}"
            )),
        })
    })?
}

/// Deletes `barrier` and runs its file's probes until one catches the mutant.
fn mutant_is_caught(barrier: Barrier) -> Result<(), String> {
    let label = barrier.label();
    let probes = ladder(&barrier.file)
        .ok_or_else(|| format!("{label}: no probes for {} in LADDERS", barrier.file))?;
    let ws = Workspace::new();
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mutant = write_mutant(&kernel_dir(), &barrier, scratch.path())?;
    let start = Instant::now();
    let exception = exception_for(&barrier);
    for (i, probe) in probes.iter().enumerate() {
        let work = scratch.path().join(format!("probe-{i}"));
        match ws.run(probe, &mutant, &work) {
            Verdict::Passed => continue,
            Verdict::Broken(why) => {
                return Err(format!(
                    "{label}: probe `{probe}` broke, not a barrier verdict: {why}"
                ))
            }
            Verdict::Caught { by, detail, .. } => {
                baseline_passes(&ws, probe)?;
                let secs = start.elapsed().as_secs_f64();
                if let Some(e) = exception {
                    return Err(format!(
                        "{label}: listed as harmless ({}), but `{probe}` catches it by {by}: \
                         {detail}; remove the exception",
                        e.reason
                    ));
                }
                report(&format!(
                    "BARRIER {label}: caught by {by} ({probe}) in {secs:.1} s | {detail}"
                ));
                return Ok(());
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    match exception {
        Some(e) => {
            report(&format!(
                "BARRIER {label}: not caught, harmless: {} ({secs:.1} s)",
                e.reason
            ));
            Ok(())
        }
        None => Err(format!(
            "{label}: deleting `{}` passes every probe ({}) in {secs:.1} s: a simulator miss, \
             or a redundant barrier (then list it in EXCEPTIONS with the reason)",
            barrier.text,
            probes
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The fast subset: the first barrier of each file that is not an exception.
fn is_fast(barrier: &Barrier, all: &[Barrier]) -> bool {
    all.iter()
        .find(|b| b.file == barrier.file && exception_for(b).is_none())
        .is_some_and(|b| b.line == barrier.line)
}

/// Every file with barriers has a ladder; every exception matches exactly one barrier.
fn ladders_and_exceptions_match_the_kernels() {
    let all = barriers(&kernel_dir()).unwrap();
    assert!(all.len() >= 10, "only {} barriers found", all.len());
    for b in &all {
        assert!(
            ladder(&b.file).is_some(),
            "{}: no ladder for {}",
            b.label(),
            b.file
        );
    }
    for e in EXCEPTIONS {
        let hits: Vec<String> = all
            .iter()
            .filter(|b| b.file == e.file && b.context.contains(e.around))
            .map(Barrier::label)
            .collect();
        assert_eq!(
            hits.len(),
            1,
            "exception {:?} in {} must match one barrier, matches {hits:?}",
            e.around,
            e.file
        );
    }
}

/// The scanner: code barriers only, in their functions (after `__launch_bounds__`, in
/// templates, lambdas and `else` branches), none in comments or strings.
fn scanner_finds_code_barriers_and_their_functions() {
    let source = r#"
// __syncthreads(); in a comment
/* __syncthreads(); */
template <bool MAX>
__device__ float reduce(float x, float* s) {
    s[0] = x;
    __syncthreads();
    auto f = [&](int i) { if (i) __syncthreads(); };
    return s[1];
}
#define BAR(x) x
extern "C" __global__ void __launch_bounds__(256, 1)
kern(const char* msg = "__syncthreads()") {
    if (threadIdx.x) {} else __syncthreads();
}
"#;
    let found = barriers_in("t.cu", source);
    let got: Vec<(usize, &str)> = found
        .iter()
        .map(|b| (b.line, b.function.as_str()))
        .collect();
    assert_eq!(got, vec![(7, "reduce"), (8, "reduce"), (14, "kern")]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.cu"), source).unwrap();
    let out = tempfile::tempdir().unwrap();
    let mutant = write_mutant(dir.path(), &found[2], out.path()).unwrap();
    let text = std::fs::read_to_string(mutant.join("t.cu")).unwrap();
    assert!(
        text.contains("else (void)0 /* barrier deleted */;"),
        "{text}"
    );
    assert_eq!(barriers_in("t.cu", &text).len(), 2);
}

fn main() {
    let _ = std::fs::remove_file(report_path());
    let mut trials = vec![
        linattn_testkit::host(
            "scanner_finds_code_barriers_and_their_functions",
            scanner_finds_code_barriers_and_their_functions,
        ),
        linattn_testkit::host(
            "ladders_and_exceptions_match_the_kernels",
            ladders_and_exceptions_match_the_kernels,
        ),
    ];
    match barriers(&kernel_dir()) {
        Ok(all) => {
            for barrier in &all {
                let fast = is_fast(barrier, &all);
                let name = format!("delete {}", barrier.label());
                let b = barrier.clone();
                let trial = linattn_testkit::stamp(
                    Platform::Sim,
                    name,
                    Box::new(move || mutant_is_caught(b)),
                );
                let runnable = linattn_testkit::platform_status(Platform::Sim).is_ok();
                trials.push(if fast || !runnable {
                    trial
                } else {
                    trial
                        .with_ignored_flag(true)
                        .with_kind("full run: just barriers")
                });
            }
        }
        Err(e) => trials.push(Trial::test(
            "kernel sources readable",
            move || Err(e.into()),
        )),
    }
    linattn_testkit::run(trials)
}
