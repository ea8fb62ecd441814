//! `linattn attend` on bad input: every refusal exits with status 2 and a message naming the
//! problem (shape mismatch, malformed or truncated .npy, non-finite values, what a backend
//! does not take), and writes no o.npy.

mod attend_common;
mod cli_common;

use attend_common::*;
use cli_common::{linattn, stderr};

/// Runs attend expecting exit status 2 and every `needles` in stderr; no o.npy written.
fn expect_refusal(case: &Case, q: &str, k: &str, v: &str, extra: &[&str], needles: &[&str]) {
    let out_dir = case.out_dir().display().to_string();
    let mut args = vec![
        "attend",
        "--q",
        q,
        "--k",
        k,
        "--v",
        v,
        "--out-dir",
        &out_dir,
    ];
    args.extend_from_slice(extra);
    let out = linattn(&args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    for needle in needles {
        assert!(
            err.contains(needle),
            "{args:?}: expected '{needle}' in: {err}"
        );
    }
    assert!(
        !case.out_dir().join("o.npy").exists(),
        "{args:?} wrote o.npy"
    );
}

#[test]
fn bad_inputs_exit_2_naming_the_problem() {
    let case = Case::new([1, 2, 5, 4], 3, 4, false);
    let dir = case.dir.path();
    let (q, k, v) = (case.path("q.npy"), case.path("k.npy"), case.path("v.npy"));
    let cpu_ref = ["--backend", "cpu-ref"];

    // k with another head dim than q.
    write_npy(&dir.join("k_wide.npy"), &[1, 2, 5, 6], &[0.5; 60], false);
    // v with another sequence length.
    write_npy(&dir.join("v_short.npy"), &[1, 2, 4, 3], &[0.5; 24], false);
    // A NaN in v.
    let mut with_nan = case.v.clone();
    with_nan[7] = f64::NAN;
    write_npy(&dir.join("v_nan.npy"), &[1, 2, 5, 3], &with_nan, false);
    // An int64 array.
    let ints: Vec<u8> = (0..40i64).flat_map(|x| x.to_le_bytes()).collect();
    write_raw_npy(
        &dir.join("q_int.npy"),
        "{'descr': '<i8', 'fortran_order': False, 'shape': (1, 2, 5, 4), }",
        &ints,
    );
    // Not a .npy file at all.
    std::fs::write(dir.join("garbage.npy"), b"this is not an array").unwrap();
    // A 3-D array.
    write_npy(&dir.join("q_3d.npy"), &[2, 5, 4], &[0.5; 40], false);
    // Mixed dtypes.
    write_npy(&dir.join("v32.npy"), &[1, 2, 5, 3], &case.v, true);
    // A zero-length dimension.
    write_npy(&dir.join("q0.npy"), &[1, 0, 5, 4], &[], false);
    write_npy(&dir.join("k0.npy"), &[1, 0, 5, 4], &[], false);
    write_npy(&dir.join("v0.npy"), &[1, 0, 5, 3], &[], false);

    // The q, k, v files of each run (with cpu-ref) and what stderr must name.
    for ([q_file, k_file, v_file], needles) in [
        (
            ["q.npy", "k_wide.npy", "v.npy"],
            &["shape mismatch", "k has dims"][..],
        ),
        (
            ["q.npy", "k.npy", "v_short.npy"],
            &["shape mismatch", "v has dims"],
        ),
        (
            ["q.npy", "k.npy", "v_nan.npy"],
            &["non-finite", "v", "index 7"],
        ),
        (["q_int.npy", "k.npy", "v.npy"], &["q_int.npy", "'<i8'"]),
        (
            ["q.npy", "garbage.npy", "v.npy"],
            &["garbage.npy", "not a .npy file"],
        ),
        (["q_3d.npy", "k.npy", "v.npy"], &["q_3d.npy", "4-D"]),
        (["q.npy", "k.npy", "v32.npy"], &["v32.npy", "one dtype"]),
        (
            ["q0.npy", "k0.npy", "v0.npy"],
            &["empty dimension", "heads"],
        ),
    ] {
        let (q, k, v) = (case.path(q_file), case.path(k_file), case.path(v_file));
        expect_refusal(&case, &q, &k, &v, &cpu_ref, needles);
    }

    // Options on good inputs, and what stderr must name.
    for (options, needles) in [
        // Options softmax attention does not have are refused, not ignored.
        (
            &["--backend", "cpu/softmax/f32", "--map", "relu"][..],
            &["softmax attention", "feature map (map=relu)"][..],
        ),
        // Unknown names.
        (
            &["--backend", "cpu-ref", "--map", "gelu"],
            &["unknown feature map 'gelu'"],
        ),
        (
            &["--backend", "cpu-ref", "--form", "spiral"],
            &["unknown form 'spiral'"],
        ),
        (&["--backend", "tpu"], &["unknown backend 'tpu'", "cpu-ref"]),
        // A form that cannot compute the requested causality.
        (
            &["--backend", "cpu-ref", "--form", "noncausal", "--causal"],
            &["noncausal"],
        ),
        // Options out of range.
        (&["--backend", "cpu-ref", "--decay", "1.5"], &["decay"]),
    ] {
        expect_refusal(&case, &q, &k, &v, options, needles);
    }
}

#[test]
fn malformed_files_exit_2_naming_the_file_and_the_problem() {
    let case = Case::new([1, 2, 5, 4], 3, 7, false);
    let dir = case.dir.path();
    let q_bytes = std::fs::read(dir.join("q.npy")).unwrap();
    let cut = |name: &str, len: usize| std::fs::write(dir.join(name), &q_bytes[..len]).unwrap();
    // Two whole elements short, and three bytes short (mid-element).
    cut("q_short.npy", q_bytes.len() - 16);
    cut("q_mid.npy", q_bytes.len() - 3);
    // The header cut short.
    cut("q_head.npy", 40);
    // Eight bytes past the data.
    let mut long = q_bytes.clone();
    long.extend_from_slice(&[0; 8]);
    std::fs::write(dir.join("q_long.npy"), long).unwrap();
    // A header not padded to the element size: the data starts at byte 79.
    let dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2, 5, 4), }   ";
    let data: Vec<u8> = case.q.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut raw = b"\x93NUMPY\x01\x00".to_vec();
    raw.extend_from_slice(&((dict.len() + 1) as u16).to_le_bytes());
    raw.extend_from_slice(dict.as_bytes());
    raw.push(b'\n');
    raw.extend_from_slice(&data);
    std::fs::write(dir.join("q_skew.npy"), raw).unwrap();
    // float16, which the reader does not take.
    write_raw_npy(
        &dir.join("q_f2.npy"),
        "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 2, 5, 4), }",
        &[0; 80],
    );
    // An infinity in q (flat index 13 = [0, 0, 3, 1]).
    let mut with_inf = case.q.clone();
    with_inf[13] = f64::INFINITY;
    write_npy(&dir.join("q_inf.npy"), &case.dims, &with_inf, false);

    let (k, v) = (case.path("k.npy"), case.path("v.npy"));
    for (q_file, needles) in [
        (
            "q_short.npy",
            &["q_short.npy", "truncated data", "needs 320 bytes"][..],
        ),
        ("q_mid.npy", &["q_mid.npy", "not a whole number of 8-byte"]),
        ("q_head.npy", &["q_head.npy", "truncated header"]),
        ("q_long.npy", &["q_long.npy", "8 unexpected bytes"]),
        (
            "q_skew.npy",
            &["q_skew.npy", "misaligned data: it starts at byte 79"],
        ),
        ("q_f2.npy", &["q_f2.npy", "unsupported dtype '<f2'"]),
        (
            "q_inf.npy",
            &[
                "q_inf.npy",
                "non-finite",
                "inf",
                "[b, h, n, d] [0, 0, 3, 1]",
            ],
        ),
    ] {
        let q = case.path(q_file);
        expect_refusal(&case, &q, &k, &v, &["--backend", "cpu-ref"], needles);
    }

    // dO of another value dim than v: the refusal lists every file's dims.
    write_npy(&dir.join("do_wide.npy"), &[1, 2, 5, 4], &[0.5; 40], false);
    let d_out = case.path("do_wide.npy");
    let q = case.path("q.npy");
    expect_refusal(
        &case,
        &q,
        &k,
        &v,
        &["--backend", "cpu-ref", "--d-out", &d_out],
        &[
            "shape mismatch",
            "d_out has dims [1, 2, 5, 4]",
            "do_wide.npy [1, 2, 5, 4]",
        ],
    );
}

#[test]
fn what_a_backend_does_not_take_exits_2_naming_the_limit() {
    // D = 4, M = 3: below the CUDA kernels' head dims.
    let small = Case::new([1, 2, 5, 4], 3, 8, false);
    let (q, k, v) = (
        small.path("q.npy"),
        small.path("k.npy"),
        small.path("v.npy"),
    );
    for (backend, needles) in [
        (
            "cuda/causal_recurrent/f32",
            &["head dim D = 4", "16..=256 in multiples of 16"][..],
        ),
        (
            "sim/causal_chunked/f16",
            &["D, M in {16, 32, 64, 128, 256}", "D=4, M=3"],
        ),
    ] {
        expect_refusal(&small, &q, &k, &v, &["--backend", backend], needles);
    }

    // B·H = 65536 heads of one token: one past gridDim.y (recurrent) and gridDim.z
    // (non-causal), 4 MiB per f32 file.
    let wide = Case::new([1, 65_536, 1, 16], 16, 9, true);
    let (q, k, v) = (wide.path("q.npy"), wide.path("k.npy"), wide.path("v.npy"));
    for (flags, needles) in [
        (
            &["--backend", "sim/causal_recurrent/f32", "--causal"][..],
            &["B·H = 65536 exceeds gridDim.y's 65535 for cr_forward"][..],
        ),
        (
            &["--backend", "sim/noncausal/f32", "--non-causal"],
            &["B·H = 65536 exceeds gridDim.z's 65535 for nc_accumulate"],
        ),
    ] {
        expect_refusal(&wide, &q, &k, &v, flags, needles);
    }
}
