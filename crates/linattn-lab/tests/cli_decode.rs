//! `linattn decode` end to end: q, k, v written as .npy, the binary run, o.npy compared with the
//! f64 causal forward of linattn-cpu's oracle over the whole sequence (f64 within 1e-10,
//! f32 within 1e-5 RMS ratio); a stream split across two runs through --save-state and
//! --load-state equals one run; bad input exits with status 2 naming the problem. `--stream`
//! (the staged stream: T = 37 tokens at B = 2, H = 3 after a prefill of 4) equals the oracle
//! on every executor present.

mod cli_common;

use linattn_core::{Causality, FeatureMap, Inputs, Judge, Precision, Problem, Shape};
use linattn_testkit::Platform;
use std::path::Path;
use std::process::{Command, Output};

const N: usize = 12;

fn main() {
    let mut trials = vec![
        linattn_testkit::host(
            "decode_equals_the_causal_forward_for_every_map_and_decay",
            decode_equals_the_causal_forward_for_every_map_and_decay,
        ),
        linattn_testkit::host(
            "a_stream_split_across_runs_equals_one_run",
            a_stream_split_across_runs_equals_one_run,
        ),
        linattn_testkit::host(
            "bad_arguments_exit_2_naming_the_problem",
            bad_arguments_exit_2_naming_the_problem,
        ),
    ];
    trials.extend(linattn_testkit::stamp_executors!(
        for platform in [Platform::Sim] =>
            "decode_on_the_simulator_equals_the_causal_forward",
            decode_on_the_simulator_equals_the_causal_forward()
    ));
    trials.extend(linattn_testkit::stamp_executors!(
        for platform in Platform::ALL =>
            format!("{platform}: decode --stream of 37 tokens at B = 2, H = 3 equals the causal forward"),
            streamed_decode_equals_the_causal_forward(platform)
    ));
    linattn_testkit::run(trials)
}

fn read_npy(path: &Path) -> Vec<f64> {
    let bytes = std::fs::read(path).unwrap();
    let file = npyz::NpyFile::new(&bytes[..]).unwrap();
    if file.header().dtype().descr().contains("f4") {
        let v: Vec<f32> = file.into_vec().unwrap();
        v.into_iter().map(f64::from).collect()
    } else {
        file.into_vec::<f64>().unwrap()
    }
}

/// Writes q.npy, k.npy, v.npy of seeded inputs into `dir`.
fn write_inputs(dir: &Path, x: &Inputs, f32: bool) {
    for (name, t) in [("q", &x.q), ("k", &x.k), ("v", &x.v)] {
        cli_common::write_npy(&dir.join(format!("{name}.npy")), &t.dims(), t.data(), f32).unwrap();
    }
}

/// Runs `linattn decode` on dir's q, k, v with the whitespace-separated `args` (temporary
/// paths hold no spaces).
fn linattn(dir: &Path, args: &str) -> Output {
    let q = dir.join("q.npy");
    let k = dir.join("k.npy");
    let v = dir.join("v.npy");
    Command::new(env!("CARGO_BIN_EXE_linattn"))
        // Tests download nothing: no NVRTC provisioning.
        .env("LINATTN_NO_PROVISION", "1")
        .arg("decode")
        .args(["--q", q.to_str().unwrap(), "--k", k.to_str().unwrap()])
        .args(["--v", v.to_str().unwrap()])
        .args(args.split_whitespace())
        .output()
        .unwrap()
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "status {:?}\nstdout {}\nstderr {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn fails_with(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr {err}");
    assert!(err.contains(needle), "expected '{needle}' in: {err}");
}

/// `got` against the oracle's `reference` by linattn-core's verdict rule at `precision`.
fn assert_judged(what: &str, precision: Precision, reference: &[f64], got: &[f64]) {
    let verdict = Judge::for_precision(precision).tensor(what, reference, got);
    if let Some(failure) = verdict.failure() {
        panic!("{failure}");
    }
}

fn problem(map: FeatureMap, decay: f64) -> Problem {
    Problem::new(Shape::new(1, 2, N, 6, 4), Causality::Causal, map).with_decay(decay)
}

fn decode_equals_the_causal_forward_for_every_map_and_decay() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let x = Inputs::random(problem(FeatureMap::Relu, 1.0).shape, 21, false).unwrap();
    let out = d.join("o.npy");
    for (f32, backend) in [(false, "cpu-ref"), (true, "cpu")] {
        let precision = if f32 { Precision::F32 } else { Precision::F64 };
        // f32 files: the reference sees the same rounded inputs.
        let x = x.rounded(|a| if f32 { a as f32 as f64 } else { a });
        write_inputs(d, &x, f32);
        for (map, map_name) in [
            (FeatureMap::EluPlusOne, "elu+1"),
            (FeatureMap::Relu, "relu"),
            (FeatureMap::Softmax, "softmax"),
            (FeatureMap::OnePlusCos, "1+cos"),
            ("favor:8".parse().unwrap(), "favor:8"),
            (FeatureMap::Identity, "identity"),
        ] {
            for (decay, prefill) in [(1.0, 0), (0.9, 5), (0.9, N)] {
                let reference = linattn_cpu::oracle::forward(&problem(map, decay), &x).unwrap();
                let run = linattn(
                    d,
                    &format!(
                        "--backend {backend} --map {map_name} --decay {decay} --prefill {prefill} \
                         --out {}",
                        out.display()
                    ),
                );
                ok(&run);
                let stdout = String::from_utf8_lossy(&run.stdout);
                assert!(stdout.contains(&format!("{N} tokens")), "{stdout}");
                let case = format!("{backend} {map_name} decay {decay} prefill {prefill} O");
                assert_judged(&case, precision, reference.data(), &read_npy(&out));
            }
        }
    }
}

/// The CUDA step kernel on the PTX simulator through the CLI (f32 files, fused maps); needs
/// NVRTC (an ignored trial, with the reason, without it).
fn decode_on_the_simulator_equals_the_causal_forward() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let p = Problem::new(
        Shape::new(1, 2, N, 16, 8),
        Causality::Causal,
        FeatureMap::EluPlusOne,
    )
    .with_decay(0.9);
    let x = Inputs::random(p.shape, 8, false)
        .unwrap()
        .rounded(|a| a as f32 as f64);
    write_inputs(d, &x, true);
    let reference = linattn_cpu::oracle::forward(&p, &x).unwrap();
    let out = d.join("o.npy");
    ok(&linattn(
        d,
        &format!(
            "--backend sim --decay 0.9 --prefill 4 --out {}",
            out.display()
        ),
    ));
    assert_judged("sim O", Precision::F32, reference.data(), &read_npy(&out));
}

/// `--stream`: after a prefill of 4, the other 37 tokens staged on the executor and decoded
/// one launch each; needs NVRTC (and a GPU for cuda).
fn streamed_decode_equals_the_causal_forward(platform: Platform) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let p = Problem::new(
        Shape::new(2, 3, 41, 16, 8),
        Causality::Causal,
        FeatureMap::EluPlusOne,
    )
    .with_decay(0.9);
    let x = Inputs::random(p.shape, 9, false)
        .unwrap()
        .rounded(|a| a as f32 as f64);
    write_inputs(d, &x, true);
    let reference = linattn_cpu::oracle::forward(&p, &x).unwrap();
    let out = d.join("o.npy");
    let run = linattn(
        d,
        &format!(
            "--backend {platform}/decode/f32 --stream --decay 0.9 --prefill 4 --out {}",
            out.display()
        ),
    );
    ok(&run);
    assert!(
        String::from_utf8_lossy(&run.stdout).contains("stream    37 tokens"),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
    assert_judged(
        "streamed O",
        Precision::F32,
        reference.data(),
        &read_npy(&out),
    );
}

fn a_stream_split_across_runs_equals_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let p = problem(FeatureMap::EluPlusOne, 0.95);
    let x = Inputs::random(p.shape, 4, false).unwrap();
    let whole = d.join("whole.npy");
    write_inputs(d, &x, false);
    let common = "--prefill 3 --decay 0.95";
    ok(&linattn(
        d,
        &format!(
            "--backend cpu-ref/decode/f64 {common} --out {}",
            whole.display()
        ),
    ));
    let whole = read_npy(&whole);

    let split = 7;
    let (state, head, tail) = (d.join("s.state"), d.join("head.npy"), d.join("tail.npy"));
    write_inputs(d, &x.seq_slice(0..split).unwrap(), false);
    ok(&linattn(
        d,
        &format!(
            "--backend cpu-ref {common} --out {} --save-state {}",
            head.display(),
            state.display()
        ),
    ));
    write_inputs(d, &x.seq_slice(split..N).unwrap(), false);
    ok(&linattn(
        d,
        &format!(
            "--backend cpu-ref --decay 0.95 --out {} --load-state {}",
            tail.display(),
            state.display()
        ),
    ));

    // Reassemble [B, H, N, M] from the two runs, head by head.
    let m = p.shape.dv;
    let (head, tail) = (read_npy(&head), read_npy(&tail));
    for bh in 0..p.shape.bh() {
        let got: Vec<f64> = head[bh * split * m..(bh + 1) * split * m]
            .iter()
            .chain(&tail[bh * (N - split) * m..(bh + 1) * (N - split) * m])
            .copied()
            .collect();
        assert_eq!(got, whole[bh * N * m..(bh + 1) * N * m], "head {bh}");
    }

    let bytes = std::fs::read(&state).unwrap();
    let cut = d.join("cut.state");
    std::fs::write(&cut, &bytes[..bytes.len() - 5]).unwrap();
    let s = state.display();
    for (args, needle) in [
        // The state belongs to elu+1 with decay 0.95: another map or decay is refused.
        (
            format!("--backend cpu-ref --decay 0.95 --map relu --load-state {s}"),
            "map elu+1",
        ),
        (format!("--backend cpu-ref --load-state {s}"), "decay 0.95"),
        // An f64 state does not continue in the f32 decoder.
        (
            format!("--backend cpu/decode/f32 --decay 0.95 --load-state {s}"),
            "f64",
        ),
        // A truncated state file.
        (
            format!(
                "--backend cpu-ref --decay 0.95 --load-state {}",
                cut.display()
            ),
            "truncated",
        ),
    ] {
        fails_with(&linattn(d, &args), needle);
    }
}

fn bad_arguments_exit_2_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut x = Inputs::random(problem(FeatureMap::Relu, 1.0).shape, 2, false).unwrap();
    write_inputs(d, &x, false);
    let out = d.join("o.npy");
    let o = out.display();
    for (args, needle) in [
        ("--backend cpu-ref --prefill 13", "exceeds the sequence"),
        ("--backend gpu-ish", "no decoder 'gpu-ish'"),
        ("--backend cpu-ref --map efficient", "non-causal"),
        ("--backend cpu-ref --decay 1.5", "decay"),
    ] {
        fails_with(&linattn(d, &format!("{args} --out {o}")), needle);
    }
    x.k.data_mut()[5] = f64::NAN;
    write_inputs(d, &x, false);
    fails_with(
        &linattn(d, &format!("--backend cpu-ref --out {o}")),
        "non-finite input: k",
    );
    assert!(!out.exists(), "nothing is written on bad input");
}
