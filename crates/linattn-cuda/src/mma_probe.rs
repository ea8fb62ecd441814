//! The tensor-core accumulation probe (`kernels/mma_probe.cu`): `mma.sync m16n8k16` with f32
//! accumulation on test vectors ([`vectors`]) that tell accumulation models apart, and the
//! models themselves ([`Candidate`]), each predicting a vector's result on the host with
//! `linattn_ptxsim::exec::mma_accumulate`.
//!
//! On a GPU the candidate that predicts every vector's bits is how its tensor cores sum
//! (issue #23 part 6: the simulator's default `mma` model follows from it). On the simulator
//! the probe must find exactly the model the numerics mode uses (`tests/cli_mma_probe.rs`).

pub mod vectors;

use linattn_core::AttnError;
pub use linattn_ptxsim::exec::mma_accumulate::Alignment;
use linattn_ptxsim::exec::mma_accumulate::{self, FinalRounding, Product, TensorCoreModel};
use linattn_ptxsim::MmaModel;

use crate::executor::{Executor, Launch};
use crate::latency_probe::Buffer;
use crate::params::launch;
use crate::runtime::KernelVariant;

pub use vectors::{all_vectors, Input, Vector};

/// `kernels/mma_probe.cu`.
pub const SOURCE: &str = include_str!("../../../kernels/mma_probe.cu");

crate::kernel_params! {
    /// The argument structs of mma_probe.cu.
    pub mod params;
    /// `mp_f16`: one m16n8k16 f32.f16.f16.f32 mma per tile.
    pub struct F16 => "mp_f16" { a: Ptr, b: Ptr, c: Ptr, d: Ptr, tiles: i32 }
    /// `mp_bf16`: the same with bf16 inputs.
    pub struct Bf16 => "mp_bf16" = F16;
}

pub use params::SPECS as KERNEL_PARAMS;
use params::{Bf16, F16};

/// The one variant (no `-D` specialisation).
pub fn kernel_variants() -> Vec<KernelVariant> {
    vec![KernelVariant::new("mma_probe.cu", SOURCE).entries(&params::ENTRIES)]
}

/// Vectors per tile: vector j of a tile is A's row j, B's column j and C's (j, j).
pub const PER_TILE: usize = 8;
/// 16-bit elements of A (16 × 16) and of Bᵀ (8 × 16) per tile; f32 of C and D (16 × 8).
const A_HALVES: usize = 256;
const B_HALVES: usize = 128;
const C_FLOATS: usize = 128;

/// One candidate accumulation model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Candidate {
    /// The exact sum, rounded once (to nearest: the simulator's `dot_exact`, an f64 sum).
    Exact(FinalRounding),
    /// Blocks of products, aligned and truncated, each block's sum rounded.
    Truncating(TensorCoreModel),
}

/// The blocks, widths, roundings and alignments the candidates span.
pub const BLOCKS: [usize; 3] = [4, 8, 16];
pub const KEPT_BITS: [u32; 4] = [24, 25, 26, 27];
pub const ROUNDINGS: [FinalRounding; 2] = [FinalRounding::TowardZero, FinalRounding::Nearest];
pub const ALIGNMENTS: [Alignment; 2] = [Alignment::Value, Alignment::Operands];

impl Candidate {
    /// Every candidate: exact (RN, RZ), then alignment × block × kept bits × rounding.
    pub fn all() -> Vec<Candidate> {
        let mut all: Vec<Candidate> = ROUNDINGS
            .iter()
            .rev()
            .map(|&r| Candidate::Exact(r))
            .collect();
        for alignment in ALIGNMENTS {
            for block in BLOCKS {
                for kept_bits in KEPT_BITS {
                    for rounding in ROUNDINGS {
                        all.push(Candidate::Truncating(TensorCoreModel {
                            block,
                            kept_bits,
                            rounding,
                            alignment,
                        }));
                    }
                }
            }
        }
        all
    }

    /// The candidate the simulator's `model` is.
    pub fn of(model: MmaModel) -> Candidate {
        match model.tensor_core() {
            None => Candidate::Exact(FinalRounding::Nearest),
            Some(m) => Candidate::Truncating(m),
        }
    }

    /// "exact RN", "block 8, 24 bits, RZ", "block 16, 26 bits, RZ, operand-aligned".
    pub fn name(&self) -> String {
        match self {
            Candidate::Exact(r) => format!("exact {}", r.name()),
            Candidate::Truncating(m) => {
                format!(
                    "block {}, {} bits, {}{}",
                    m.block,
                    m.kept_bits,
                    m.rounding.name(),
                    m.alignment.suffix()
                )
            }
        }
    }

    /// The result it predicts for `c + Σ products`.
    pub fn predict(&self, c: f32, products: &[Product; 16]) -> f32 {
        match *self {
            Candidate::Exact(FinalRounding::Nearest) => mma_accumulate::dot_exact(c, products),
            Candidate::Exact(r) => mma_accumulate::dot_exact_rounded(c, products, r),
            Candidate::Truncating(m) => mma_accumulate::dot_truncating(c, products, m),
        }
    }
}

/// Runs `vectors` through the `input` mma on `exec`: the f32 bits of each result, in order.
pub fn run(exec: &dyn Executor, input: Input, vectors: &[Vector]) -> Result<Vec<u32>, AttnError> {
    if vectors.is_empty() {
        return Ok(Vec::new());
    }
    let tiles = vectors.len().div_ceil(PER_TILE);
    let mut a = vec![0u16; tiles * A_HALVES];
    let mut b = vec![0u16; tiles * B_HALVES];
    let mut c = vec![0f32; tiles * C_FLOATS];
    for (i, v) in vectors.iter().enumerate() {
        let (tile, j) = (i / PER_TILE, i % PER_TILE);
        let row_a = tile * A_HALVES + j * 16;
        let row_b = tile * B_HALVES + j * 16;
        a[row_a..row_a + 16].copy_from_slice(&v.a);
        b[row_b..row_b + 16].copy_from_slice(&v.b);
        c[tile * C_FLOATS + j * 8 + j] = v.c;
    }
    let bytes_a: Vec<u8> = a.iter().flat_map(|h| h.to_le_bytes()).collect();
    let bytes_b: Vec<u8> = b.iter().flat_map(|h| h.to_le_bytes()).collect();
    let bytes_c: Vec<u8> = c.iter().flat_map(|x| x.to_le_bytes()).collect();
    let buf_a = Buffer::new(exec, bytes_a.len() as u64, false)?;
    let buf_b = Buffer::new(exec, bytes_b.len() as u64, false)?;
    let buf_c = Buffer::new(exec, bytes_c.len() as u64, false)?;
    let buf_d = Buffer::new(exec, bytes_c.len() as u64, true)?;
    exec.upload(buf_a.ptr().0, &bytes_a)?;
    exec.upload(buf_b.ptr().0, &bytes_b)?;
    exec.upload(buf_c.ptr().0, &bytes_c)?;
    let tile_count = i32::try_from(tiles)
        .map_err(|_| AttnError::InvalidArgument(format!("{tiles} probe tiles: too many")))?;
    let args = F16 {
        a: buf_a.ptr(),
        b: buf_b.ptr(),
        c: buf_c.ptr(),
        d: buf_d.ptr(),
        tiles: tile_count,
    };
    let variant = kernel_variants().remove(0);
    let shape = Launch::new((tiles as u32, 1, 1), 32);
    match input {
        Input::F16 => launch(exec, &variant, &shape, &args)?,
        Input::Bf16 => launch(exec, &variant, &shape, &Bf16(args))?,
    }
    exec.synchronize()?;
    let mut out = vec![0u8; bytes_c.len()];
    exec.download(buf_d.ptr().0, &mut out)?;
    Ok((0..vectors.len())
        .map(|i| {
            let at = 4 * ((i / PER_TILE) * C_FLOATS + (i % PER_TILE) * 9);
            u32::from_le_bytes([out[at], out[at + 1], out[at + 2], out[at + 3]])
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_distinct_and_name_themselves() {
        let all = Candidate::all();
        assert_eq!(
            all.len(),
            2 + ALIGNMENTS.len() * BLOCKS.len() * KEPT_BITS.len() * ROUNDINGS.len()
        );
        let names: std::collections::HashSet<String> = all.iter().map(Candidate::name).collect();
        assert_eq!(names.len(), all.len());
        assert_eq!(Candidate::of(MmaModel::A100).name(), "block 8, 24 bits, RZ");
        assert_eq!(
            Candidate::of(MmaModel::H100).name(),
            "block 16, 26 bits, RZ, operand-aligned"
        );
        assert_eq!(Candidate::of(MmaModel::Exact).name(), "exact RN");
        for m in MmaModel::ALL {
            assert!(all.contains(&Candidate::of(m)), "{m} is no candidate");
        }
    }

    /// The probe's point: for every two candidates, some vector of each input type gives
    /// them different bits (else the probe could not tell them apart on any device).
    #[test]
    fn every_two_candidates_disagree_on_some_vector() {
        let candidates = Candidate::all();
        for input in Input::ALL {
            let vectors = all_vectors(input, 42).unwrap();
            let predictions: Vec<Vec<u32>> = candidates
                .iter()
                .map(|cand| {
                    vectors
                        .iter()
                        .map(|v| cand.predict(v.c, &v.products(input)).to_bits())
                        .collect()
                })
                .collect();
            for i in 0..candidates.len() {
                for j in i + 1..candidates.len() {
                    assert_ne!(
                        predictions[i],
                        predictions[j],
                        "{}: {} and {} agree on every vector",
                        input.name(),
                        candidates[i].name(),
                        candidates[j].name()
                    );
                }
            }
        }
    }
}
