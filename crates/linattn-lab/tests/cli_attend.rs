//! `linattn attend` end to end: random q, k, v written as .npy, the binary run, and o.npy
//! compared with linear attention computed here from its definition (SPEC §2), by plain
//! quadratic loops sharing no code with the crates under test. Bad inputs must exit with
//! status 2 and a message naming the problem.

mod cli_common;

use cli_common::{assert_ok, linattn, stderr};
use std::path::{Path, PathBuf};
use std::process::Output;

const EPS: f64 = 1e-6;

/// xorshift64*: uniform draws in [-2, 2), enough for test data.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
        bits as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
    }
    fn vec(&mut self, len: usize) -> Vec<f64> {
        (0..len).map(|_| self.next()).collect()
    }
}

/// A .npy file from a raw header dict and raw data bytes (version 1.0).
fn write_raw_npy(path: &Path, dict: &str, data: &[u8]) {
    let mut header = dict.to_string();
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    std::fs::write(path, bytes).unwrap();
}

fn shape_literal(dims: &[usize]) -> String {
    let parts: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    if parts.len() == 1 {
        format!("({},)", parts[0])
    } else {
        format!("({})", parts.join(", "))
    }
}

/// Writes `data` with `dims` as '<f8' (`f32 == false`) or '<f4'.
fn write_npy(path: &Path, dims: &[usize], data: &[f64], f32: bool) {
    let descr = if f32 { "<f4" } else { "<f8" };
    let dict = format!(
        "{{'descr': '{descr}', 'fortran_order': False, 'shape': {}, }}",
        shape_literal(dims)
    );
    let mut bytes = Vec::new();
    for &x in data {
        if f32 {
            bytes.extend_from_slice(&(x as f32).to_le_bytes());
        } else {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
    }
    write_raw_npy(path, &dict, &bytes);
}

/// Reads a .npy file the binary wrote: (descr, dims, values).
fn read_npy(path: &Path) -> (String, Vec<usize>, Vec<f64>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[..6], b"\x93NUMPY");
    let (header_start, header_len) = match bytes[6] {
        1 => (10, u16::from_le_bytes([bytes[8], bytes[9]]) as usize),
        _ => (
            12,
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
        ),
    };
    let header = std::str::from_utf8(&bytes[header_start..header_start + header_len]).unwrap();
    let descr = header.split("'descr': '").nth(1).unwrap()[..3].to_string();
    assert!(header.contains("'fortran_order': False"), "{header}");
    let shape_text = header.split("'shape': (").nth(1).unwrap();
    let shape_text = &shape_text[..shape_text.find(')').unwrap()];
    let dims: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    let data = &bytes[header_start + header_len..];
    let values = match descr.as_str() {
        "<f8" => data
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        "<f4" => data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        other => panic!("unexpected dtype {other}"),
    };
    (descr, dims, values)
}

#[derive(Clone, Copy, PartialEq)]
enum Map {
    EluPlusOne,
    Relu,
}

impl Map {
    fn name(self) -> &'static str {
        match self {
            Map::EluPlusOne => "elu+1",
            Map::Relu => "relu",
        }
    }
    fn apply(self, x: f64) -> f64 {
        match self {
            Map::EluPlusOne => {
                if x > 0.0 {
                    x + 1.0
                } else {
                    x.exp()
                }
            }
            Map::Relu => x.max(0.0),
        }
    }
}

/// Normalised weights `A[i][j] = sim(q_i, k_j) / (Σ_j' sim(q_i, k_j') + ε)` of one head,
/// with `sim = φ(q)ᵀφ(k)`; causal rows stop at j = i.
fn weights(q: &[f64], k: &[f64], n: usize, d: usize, map: Map, causal: bool) -> Vec<f64> {
    let mut a = vec![0.0; n * n];
    for i in 0..n {
        let last = if causal { i + 1 } else { n };
        let mut den = 0.0;
        for j in 0..last {
            let sim: f64 = (0..d)
                .map(|t| map.apply(q[i * d + t]) * map.apply(k[j * d + t]))
                .sum();
            a[i * n + j] = sim;
            den += sim;
        }
        for j in 0..last {
            a[i * n + j] /= den + EPS;
        }
    }
    a
}

/// [`weights`] of head `bh` of q, k with dims [B, H, N, D].
fn head_weights(
    q: &[f64],
    k: &[f64],
    dims: [usize; 4],
    bh: usize,
    map: Map,
    causal: bool,
) -> Vec<f64> {
    let [_, _, n, d] = dims;
    let head = bh * n * d..(bh + 1) * n * d;
    weights(&q[head.clone()], &k[head], n, d, map, causal)
}

/// max |got − want| / max |want|.
fn relative_error(want: &[f64], got: &[f64]) -> f64 {
    assert_eq!(want.len(), got.len());
    let scale = want.iter().fold(0.0f64, |acc, x| acc.max(x.abs()));
    let diff = want
        .iter()
        .zip(got)
        .fold(0.0f64, |acc, (w, g)| acc.max((w - g).abs()));
    diff / scale
}

/// A temp dir holding q.npy, k.npy, v.npy, do.npy of one random problem.
struct Case {
    dir: tempfile::TempDir,
    dims: [usize; 4],
    m: usize,
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    d_out: Vec<f64>,
}

impl Case {
    fn new(dims: [usize; 4], m: usize, seed: u64, f32: bool) -> Case {
        let [b, h, n, d] = dims;
        let mut draw = Draw(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let round = |x: Vec<f64>| -> Vec<f64> {
            // The binary sees f32 values: the reference must start from the same numbers.
            if f32 {
                x.into_iter().map(|v| v as f32 as f64).collect()
            } else {
                x
            }
        };
        let q = round(draw.vec(b * h * n * d));
        let k = round(draw.vec(b * h * n * d));
        let v = round(draw.vec(b * h * n * m));
        let d_out = round(draw.vec(b * h * n * m));
        let dir = tempfile::tempdir().unwrap();
        write_npy(&dir.path().join("q.npy"), &dims, &q, f32);
        write_npy(&dir.path().join("k.npy"), &dims, &k, f32);
        write_npy(&dir.path().join("v.npy"), &[b, h, n, m], &v, f32);
        write_npy(&dir.path().join("do.npy"), &[b, h, n, m], &d_out, f32);
        Case {
            dir,
            dims,
            m,
            q,
            k,
            v,
            d_out,
        }
    }
    fn path(&self, file: &str) -> String {
        self.dir.path().join(file).display().to_string()
    }
    fn out_dir(&self) -> PathBuf {
        self.dir.path().join("out")
    }
    /// Runs attend on this case's files with `extra` flags.
    fn attend(&self, extra: &[&str]) -> Output {
        let (q, k, v, out) = (
            self.path("q.npy"),
            self.path("k.npy"),
            self.path("v.npy"),
            self.out_dir().display().to_string(),
        );
        let mut args = vec!["attend", "--q", &q, "--k", &k, "--v", &v, "--out-dir", &out];
        args.extend_from_slice(extra);
        linattn(&args)
    }
    /// `A X` per head, A the [`weights`] of this case's q, k and X `[B, H, N, M]`; with
    /// `transpose`, `Aᵀ X`.
    fn weights_times(&self, x: &[f64], map: Map, causal: bool, transpose: bool) -> Vec<f64> {
        let [b, h, n, _] = self.dims;
        let m = self.m;
        let mut out = vec![0.0; b * h * n * m];
        for bh in 0..b * h {
            let a = head_weights(&self.q, &self.k, self.dims, bh, map, causal);
            let (xh, oh) = (&x[bh * n * m..][..n * m], &mut out[bh * n * m..][..n * m]);
            for i in 0..n {
                for j in 0..n {
                    let (row, col) = if transpose { (j, i) } else { (i, j) };
                    for c in 0..m {
                        oh[row * m + c] += a[i * n + j] * xh[col * m + c];
                    }
                }
            }
        }
        out
    }
    /// Attention output `O = A V`.
    fn reference(&self, map: Map, causal: bool) -> Vec<f64> {
        self.weights_times(&self.v, map, causal, false)
    }
    /// Runs attend with `flags`, which must succeed, and checks o.npy: dtype `descr`, dims
    /// [B, H, N, M], relative error against the definition at most `tol`. Returns the run.
    fn attend_and_check(
        &self,
        flags: &[&str],
        map: Map,
        causal: bool,
        descr: &str,
        tol: f64,
    ) -> Output {
        let out = self.attend(flags);
        assert!(out.status.success(), "{flags:?}: {}", stderr(&out));
        let (got_descr, dims, o) = read_npy(&self.out_dir().join("o.npy"));
        assert_eq!(got_descr, descr);
        let [b, h, n, _] = self.dims;
        assert_eq!(dims, vec![b, h, n, self.m]);
        let err = relative_error(&self.reference(map, causal), &o);
        assert!(err <= tol, "{flags:?}: relative error {err:e}");
        out
    }
}

fn causality_flag(causal: bool) -> &'static str {
    if causal {
        "--causal"
    } else {
        "--non-causal"
    }
}

#[test]
fn f64_reference_backend_matches_the_definition() {
    let case = Case::new([2, 2, 23, 5], 7, 1, false);
    for map in [Map::EluPlusOne, Map::Relu] {
        for causal in [true, false] {
            // The default form for the causality (recurrent / noncausal), then quadratic.
            for form in [None, Some("quadratic")] {
                let mut flags = vec![
                    "--backend",
                    "cpu-ref",
                    "--map",
                    map.name(),
                    causality_flag(causal),
                ];
                if let Some(f) = form {
                    flags.extend_from_slice(&["--form", f]);
                }
                case.attend_and_check(&flags, map, causal, "<f8", 1e-10);
            }
        }
    }
}

#[test]
fn f32_fast_backend_matches_the_definition() {
    let case = Case::new([1, 3, 70, 8], 6, 2, true);
    for map in [Map::EluPlusOne, Map::Relu] {
        for (causal, form) in [(true, "recurrent"), (false, "noncausal")] {
            let flags = [
                "--backend",
                "cpu",
                "--form",
                form,
                "--precision",
                "f32",
                "--map",
                map.name(),
                causality_flag(causal),
            ];
            let out = case.attend_and_check(&flags, map, causal, "<f4", 1e-5);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(stdout.contains("/f32"), "{stdout}");
        }
    }
}

#[test]
fn gradients_are_written_and_dv_matches_the_definition() {
    let case = Case::new([1, 2, 17, 4], 3, 3, false);
    let d_out = case.path("do.npy");
    for causal in [true, false] {
        let out = case.attend(&[
            "--backend",
            "cpu-ref",
            "--d-out",
            &d_out,
            causality_flag(causal),
        ]);
        assert_ok(&out);
        for (file, dims) in [("dq.npy", [1, 2, 17, 4]), ("dk.npy", [1, 2, 17, 4])] {
            let (descr, got_dims, values) = read_npy(&case.out_dir().join(file));
            assert_eq!((descr.as_str(), got_dims), ("<f8", dims.to_vec()));
            assert!(values.iter().all(|x| x.is_finite()) && values.iter().any(|&x| x != 0.0));
        }
        let (_, _, dv) = read_npy(&case.out_dir().join("dv.npy"));
        // `dV = Aᵀ dO`: the gradient of O = A·V with respect to V (A does not depend on V).
        let want = case.weights_times(&case.d_out, Map::EluPlusOne, causal, true);
        let err = relative_error(&want, &dv);
        assert!(err <= 1e-10, "causal={causal}: dv relative error {err:e}");
    }
}

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

/// `data` (C order, dims `dims`) written as a Fortran-order '<f8' array: first index fastest.
fn write_fortran_npy(path: &Path, dims: [usize; 4], data: &[f64]) {
    let [b, h, n, d] = dims;
    let mut bytes = Vec::new();
    for i3 in 0..d {
        for i2 in 0..n {
            for i1 in 0..h {
                for i0 in 0..b {
                    let x = data[((i0 * h + i1) * n + i2) * d + i3];
                    bytes.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
    }
    let dict = format!(
        "{{'descr': '<f8', 'fortran_order': True, 'shape': {}, }}",
        shape_literal(&dims)
    );
    write_raw_npy(path, &dict, &bytes);
}

/// Runs attend on the files `q`, `k`, `v` into `out_dir` with `extra` flags.
fn attend_files(q: &str, k: &str, v: &str, out_dir: &Path, extra: &[&str]) -> Output {
    let out = out_dir.display().to_string();
    let mut args = vec!["attend", "--q", q, "--k", k, "--v", v, "--out-dir", &out];
    args.extend_from_slice(extra);
    linattn(&args)
}

#[test]
fn fortran_order_inputs_give_the_c_order_output() {
    let case = Case::new([2, 3, 9, 4], 5, 6, false);
    let dir = case.dir.path();
    let [b, h, n, _] = case.dims;
    write_fortran_npy(&dir.join("qf.npy"), case.dims, &case.q);
    write_fortran_npy(&dir.join("kf.npy"), case.dims, &case.k);
    write_fortran_npy(&dir.join("vf.npy"), [b, h, n, case.m], &case.v);
    let flags = ["--backend", "cpu-ref", "--causal"];
    case.attend_and_check(&flags, Map::EluPlusOne, true, "<f8", 1e-10);
    let (_, _, want) = read_npy(&case.out_dir().join("o.npy"));
    let fortran_dir = dir.join("out_fortran");
    let (qf, kf, vf) = (
        case.path("qf.npy"),
        case.path("kf.npy"),
        case.path("vf.npy"),
    );
    assert_ok(&attend_files(&qf, &kf, &vf, &fortran_dir, &flags));
    let (descr, dims, got) = read_npy(&fortran_dir.join("o.npy"));
    assert_eq!((descr.as_str(), dims), ("<f8", vec![b, h, n, case.m]));
    // The same values in another layout: the same output, bit for bit.
    assert_eq!(got, want);
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
