//! What the `linattn attend` tests share: random problems written as .npy (C and Fortran
//! order), the binary run on them, and linear attention computed from its definition (SPEC
//! §2) by plain quadratic loops sharing no code with the crates under test.
#![allow(dead_code)]

use crate::cli_common::{linattn, stderr};
use std::path::{Path, PathBuf};
use std::process::Output;

pub const EPS: f64 = 1e-6;

/// xorshift64*: uniform draws in [-2, 2), enough for test data.
pub struct Draw(u64);

impl Draw {
    pub fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
        bits as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
    }
    pub fn vec(&mut self, len: usize) -> Vec<f64> {
        (0..len).map(|_| self.next()).collect()
    }
}

/// A .npy file from a raw header dict and raw data bytes (version 1.0).
pub fn write_raw_npy(path: &Path, dict: &str, data: &[u8]) {
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

pub fn shape_literal(dims: &[usize]) -> String {
    let parts: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    if parts.len() == 1 {
        format!("({},)", parts[0])
    } else {
        format!("({})", parts.join(", "))
    }
}

/// Writes `data` with `dims` as '<f8' (`f32 == false`) or '<f4'.
pub fn write_npy(path: &Path, dims: &[usize], data: &[f64], f32: bool) {
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
pub fn read_npy(path: &Path) -> (String, Vec<usize>, Vec<f64>) {
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
pub enum Map {
    EluPlusOne,
    Relu,
}

impl Map {
    pub fn name(self) -> &'static str {
        match self {
            Map::EluPlusOne => "elu+1",
            Map::Relu => "relu",
        }
    }
    pub fn apply(self, x: f64) -> f64 {
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
pub fn weights(q: &[f64], k: &[f64], n: usize, d: usize, map: Map, causal: bool) -> Vec<f64> {
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
pub fn head_weights(
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
pub fn relative_error(want: &[f64], got: &[f64]) -> f64 {
    assert_eq!(want.len(), got.len());
    let scale = want.iter().fold(0.0f64, |acc, x| acc.max(x.abs()));
    let diff = want
        .iter()
        .zip(got)
        .fold(0.0f64, |acc, (w, g)| acc.max((w - g).abs()));
    diff / scale
}

/// A temp dir holding q.npy, k.npy, v.npy, do.npy of one random problem.
pub struct Case {
    pub dir: tempfile::TempDir,
    pub dims: [usize; 4],
    pub m: usize,
    pub q: Vec<f64>,
    pub k: Vec<f64>,
    pub v: Vec<f64>,
    pub d_out: Vec<f64>,
}

impl Case {
    pub fn new(dims: [usize; 4], m: usize, seed: u64, f32: bool) -> Case {
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
    pub fn path(&self, file: &str) -> String {
        self.dir.path().join(file).display().to_string()
    }
    pub fn out_dir(&self) -> PathBuf {
        self.dir.path().join("out")
    }
    /// Runs attend on this case's files with `extra` flags.
    pub fn attend(&self, extra: &[&str]) -> Output {
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
    pub fn weights_times(&self, x: &[f64], map: Map, causal: bool, transpose: bool) -> Vec<f64> {
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
    pub fn reference(&self, map: Map, causal: bool) -> Vec<f64> {
        self.weights_times(&self.v, map, causal, false)
    }
    /// Runs attend with `flags`, which must succeed, and checks o.npy: dtype `descr`, dims
    /// [B, H, N, M], relative error against the definition at most `tol`. Returns the run.
    pub fn attend_and_check(
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

pub fn causality_flag(causal: bool) -> &'static str {
    if causal {
        "--causal"
    } else {
        "--non-causal"
    }
}

/// `data` (C order, dims `dims`) written as a Fortran-order '<f8' array: first index fastest.
pub fn write_fortran_npy(path: &Path, dims: [usize; 4], data: &[f64]) {
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
pub fn attend_files(q: &str, k: &str, v: &str, out_dir: &Path, extra: &[&str]) -> Output {
    let out = out_dir.display().to_string();
    let mut args = vec!["attend", "--q", q, "--k", k, "--v", v, "--out-dir", &out];
    args.extend_from_slice(extra);
    linattn(&args)
}
