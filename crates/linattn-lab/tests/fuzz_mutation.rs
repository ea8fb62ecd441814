//! CI's short fuzz run, on the stable toolchain: libFuzzer-style mutations (bit flips,
//! interesting bytes and numbers, inserts, erases, duplicated ranges, splices, truncation)
//! of the committed corpora, fed through the same entry points as the cargo-fuzz targets.
//! Not coverage-guided (that is `just fuzz`, on nightly); seeded, so a failure reproduces.
//! Every input that panics is written to `target/fuzz-failures/<target>/` for `just fuzz`.
//! `LINATTN_FUZZ_ITERS` scales the run (default: a few seconds), `LINATTN_FUZZ_SEED` moves it.

mod fuzz_common;

use fuzz_common::corpus_files;
use linattn_core::SeededRng;
use std::path::Path;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    corpus_files(target)
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect()
}

const INTERESTING_BYTES: &[u8] = b"\0\x01\x7f\x80\xff{}[](),:'\"\n\t =-+.eE0123456789^";
const INTERESTING_NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "65535",
    "2147483648",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "2^64",
    "2^0",
    "1e309",
    "-0",
    "nan",
    "1.5",
    "99999999999999999999999",
];

struct Mutator {
    rng: SeededRng,
}

impl Mutator {
    fn below(&mut self, n: usize) -> usize {
        (self.rng.next_u64() % n.max(1) as u64) as usize
    }

    /// One to four stacked mutations of `input`, `other` a splice partner.
    fn mutate(&mut self, input: &[u8], other: &[u8]) -> Vec<u8> {
        let mut x = input.to_vec();
        for _ in 0..1 + self.below(4) {
            let len = x.len();
            match self.below(9) {
                0 if len > 0 => {
                    let i = self.below(len);
                    x[i] ^= 1 << self.below(8);
                }
                1 if len > 0 => {
                    let i = self.below(len);
                    x[i] = INTERESTING_BYTES[self.below(INTERESTING_BYTES.len())];
                }
                2 => {
                    let i = self.below(len + 1);
                    let b = INTERESTING_BYTES[self.below(INTERESTING_BYTES.len())];
                    x.insert(i, b);
                }
                3 if len > 0 => {
                    let start = self.below(len);
                    let end = (start + 1 + self.below(16)).min(len);
                    x.drain(start..end);
                }
                4 if len > 0 => {
                    let start = self.below(len);
                    let end = (start + 1 + self.below(32)).min(len);
                    let chunk = x[start..end].to_vec();
                    let at = self.below(len + 1);
                    x.splice(at..at, chunk);
                }
                5 if !other.is_empty() => {
                    let cut = self.below(len + 1);
                    let from = self.below(other.len());
                    x.truncate(cut);
                    x.extend_from_slice(&other[from..]);
                }
                6 => x.truncate(self.below(len + 1)),
                7 => self.replace_number(&mut x),
                _ if len > 0 => {
                    // Little-endian integers at a random offset (npy header lengths, shapes).
                    let i = self.below(len);
                    let v = [0u64, 1, 0xffff, 0x7fff_ffff, u64::MAX][self.below(5)];
                    for (k, b) in v.to_le_bytes().iter().enumerate().take(len - i) {
                        x[i + k] = *b;
                    }
                }
                _ => x.push(INTERESTING_BYTES[self.below(INTERESTING_BYTES.len())]),
            }
        }
        x
    }

    /// Replaces one run of ASCII digits with an interesting number (shapes, N, repeats).
    fn replace_number(&mut self, x: &mut Vec<u8>) {
        let digits: Vec<usize> = (0..x.len()).filter(|&i| x[i].is_ascii_digit()).collect();
        if digits.is_empty() {
            return;
        }
        let mut start = digits[self.below(digits.len())];
        while start > 0 && x[start - 1].is_ascii_digit() {
            start -= 1;
        }
        let mut end = start;
        while end < x.len() && x[end].is_ascii_digit() {
            end += 1;
        }
        let number = INTERESTING_NUMBERS[self.below(INTERESTING_NUMBERS.len())];
        x.splice(start..end, number.bytes());
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn fuzz(target: &str, entry: fn(&[u8]), default_iters: u64) {
    let inputs = corpus(target);
    assert!(inputs.len() > 10, "{target}: corpus of {}", inputs.len());
    let iters = env_u64("LINATTN_FUZZ_ITERS").unwrap_or(default_iters);
    let seed = env_u64("LINATTN_FUZZ_SEED").unwrap_or(0x5eed_f022);
    let mut m = Mutator {
        rng: SeededRng::new(seed),
    };
    let failures = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/fuzz-failures")
        .join(target);
    let mut panicked = Vec::new();
    for i in 0..iters {
        let a = &inputs[m.below(inputs.len())];
        let b = &inputs[m.below(inputs.len())];
        let x = m.mutate(a, b);
        if std::panic::catch_unwind(|| entry(&x)).is_err() {
            std::fs::create_dir_all(&failures).unwrap();
            let path = failures.join(format!("iter-{i}"));
            std::fs::write(&path, &x).unwrap();
            panicked.push(path.display().to_string());
        }
    }
    assert!(
        panicked.is_empty(),
        "{target}: {} of {iters} mutated inputs panicked (seed {seed}); saved: {panicked:?}",
        panicked.len()
    );
}

#[test]
fn npy_reader_survives_mutated_corpus() {
    fuzz("npy_reader", linattn_lab::fuzz_entry::npy_bytes, 200_000);
}

#[test]
fn grid_file_survives_mutated_corpus() {
    fuzz("grid_file", linattn_lab::fuzz_entry::grid_text, 100_000);
}

/// The mutator must be able to reach the inputs that once crashed the reader: a test of
/// the test. Flips of the header length bytes of a valid .npy are among its mutations.
#[test]
fn mutations_change_inputs_and_reproduce_from_the_seed() {
    let base =
        b"\x93NUMPY\x01\x00\x76\x00{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }";
    let run = |seed| {
        let mut m = Mutator {
            rng: SeededRng::new(seed),
        };
        (0..200)
            .map(|_| m.mutate(base, b"(4294967296,)"))
            .collect::<Vec<_>>()
    };
    let a = run(1);
    assert_eq!(a, run(1));
    assert_ne!(a, run(2));
    assert!(a.iter().filter(|x| x.as_slice() != base).count() > 190);
    assert!(a.iter().any(|x| x.len() < base.len()));
    assert!(a.iter().any(|x| x.len() > base.len()));
}
