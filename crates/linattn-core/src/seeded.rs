//! Seeded inputs described, not made: every (operand, batch·head) slice has its own
//! generator stream, so a backend fills its own storage head by head, in its own precision,
//! on every core, and sees exactly the values [`Inputs::random`] would give in f64. The
//! harness at large N never holds an f64 copy of the inputs this way (issue 11: 23 GB RSS
//! at N = 2^20 came from f64 inputs kept next to the backend's f32 ones).

use crate::error::AttnError;
use crate::problem::Shape;
use crate::rng::SeededRng;
use crate::tensor::{Inputs, Tensor, TensorRole};
use rayon::prelude::*;

/// The inputs of `shape` drawn from `seed`: q, k, v and, `with_grad`, d_out. Entries are
/// N(0, 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeededInputs {
    shape: Shape,
    seed: u64,
    with_grad: bool,
}

/// SplitMix64's finaliser: decorrelates stream seeds that differ in a few bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl SeededInputs {
    /// Fails on an invalid shape (empty or overflowing dims).
    pub fn new(shape: Shape, seed: u64, with_grad: bool) -> Result<Self, AttnError> {
        shape.validate()?;
        Ok(SeededInputs {
            shape,
            seed,
            with_grad,
        })
    }

    pub fn shape(&self) -> Shape {
        self.shape
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn with_grad(&self) -> bool {
        self.with_grad
    }

    /// The operands drawn, in staging order.
    pub fn roles(&self) -> &'static [TensorRole] {
        if self.with_grad {
            &[
                TensorRole::Q,
                TensorRole::K,
                TensorRole::V,
                TensorRole::DOut,
            ]
        } else {
            &[TensorRole::Q, TensorRole::K, TensorRole::V]
        }
    }

    /// Dims of operand `role`.
    pub fn dims(&self, role: TensorRole) -> [usize; 4] {
        match role {
            TensorRole::Q | TensorRole::K => self.shape.qk_dims(),
            TensorRole::V | TensorRole::DOut => self.shape.v_dims(),
        }
    }

    /// Elements of one (batch, head) slice of `role`: N × its last dim.
    pub fn head_len(&self, role: TensorRole) -> usize {
        let [_, _, n, d] = self.dims(role);
        n * d
    }

    /// Elements of `role`, all heads.
    pub fn len(&self, role: TensorRole) -> usize {
        self.shape.bh() * self.head_len(role)
    }

    /// Host bytes of every operand at `bytes_per_element`.
    pub fn bytes(&self, bytes_per_element: usize) -> u64 {
        self.roles()
            .iter()
            .map(|&r| self.len(r) as u64 * bytes_per_element as u64)
            .sum()
    }

    fn stream(&self, role: TensorRole, bh: usize) -> SeededRng {
        let tag = (role as u64) << 56 | bh as u64;
        SeededRng::new(mix(self.seed ^ mix(tag.wrapping_add(0x9e37_79b9_7f4a_7c15))))
    }

    /// Writes slice `bh` of `role`, each value through `convert` (a rounding to the
    /// backend's precision). `out` must hold [`Self::head_len`] elements.
    pub fn fill_head<T>(
        &self,
        role: TensorRole,
        bh: usize,
        out: &mut [T],
        convert: impl Fn(f64) -> T,
    ) {
        debug_assert_eq!(out.len(), self.head_len(role));
        let mut rng = self.stream(role, bh);
        for x in out.iter_mut() {
            *x = convert(rng.normal());
        }
    }

    /// Writes every slice of `role` into `out` ([`Self::len`] elements), heads in parallel.
    pub fn fill<T: Send>(
        &self,
        role: TensorRole,
        out: &mut [T],
        convert: impl Fn(f64) -> T + Sync,
    ) -> Result<(), AttnError> {
        if out.len() != self.len(role) {
            return Err(AttnError::ShapeMismatch(format!(
                "{} needs {} elements, the buffer has {}",
                role.name(),
                self.len(role),
                out.len()
            )));
        }
        out.par_chunks_mut(self.head_len(role))
            .enumerate()
            .for_each(|(bh, head)| self.fill_head(role, bh, head, &convert));
        Ok(())
    }

    /// Operand `role` as a new vector, after a check that it fits in host memory.
    pub fn make<T: Send + Default + Clone>(
        &self,
        role: TensorRole,
        convert: impl Fn(f64) -> T + Sync,
    ) -> Result<Vec<T>, AttnError> {
        let bytes = self.len(role) as u64 * std::mem::size_of::<T>() as u64;
        crate::alloc::HostMemory::ensure_available(bytes, &format!("input {}", role.name()))?;
        let mut out = vec![T::default(); self.len(role)];
        self.fill(role, &mut out, convert)?;
        Ok(out)
    }

    /// The same inputs as f64 tensors (what [`crate::Backend::stage`] takes). Refuses, with a
    /// typed out-of-memory error, inputs that would not fit in available host memory.
    pub fn materialize(&self) -> Result<Inputs, AttnError> {
        crate::alloc::HostMemory::ensure_available(self.bytes(8), "f64 host inputs")?;
        let tensor = |role| Tensor::from_vec(self.dims(role), self.make(role, |x| x)?);
        Ok(Inputs {
            q: tensor(TensorRole::Q)?,
            k: tensor(TensorRole::K)?,
            v: tensor(TensorRole::V)?,
            d_out: if self.with_grad {
                Some(tensor(TensorRole::DOut)?)
            } else {
                None
            },
        })
    }
}

/// Seeded inputs made in f64 belong here, beside the streams they draw from: tensor.rs
/// knows nothing of seeding, so the dependency runs one way (seeded → tensor).
impl Inputs {
    /// Seeded inputs: every backend, on every run and machine, sees the same numbers for the
    /// same `(shape, seed)`. Entries are N(0, 1); d_out is drawn too when `with_grad`. Each
    /// (operand, head) has its own stream ([`SeededInputs`]), so a backend can make the same
    /// values in its own precision without this f64 copy. Refuses, with a typed out-of-memory
    /// error, inputs that would not fit in available host memory (an allocation failure
    /// would abort the process).
    pub fn random(shape: Shape, seed: u64, with_grad: bool) -> Result<Self, AttnError> {
        SeededInputs::new(shape, seed, with_grad)?.materialize()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_and_operands_draw_distinct_reproducible_streams() {
        let s = Shape::new(2, 3, 5, 4, 6);
        let src = SeededInputs::new(s, 7, true).unwrap();
        let a = Inputs::random(s, 7, true).unwrap();
        assert_eq!(a, src.materialize().unwrap());
        assert_eq!(a, Inputs::random(s, 7, true).unwrap());
        assert_eq!(a.shape().unwrap(), s);
        assert_ne!(a.q.head(0), a.q.head(1));
        assert_ne!(&a.q.data()[..20], &a.k.data()[..20]);
        let other = SeededInputs::new(s, 8, true)
            .unwrap()
            .materialize()
            .unwrap();
        assert_ne!(a.q, other.q);
        // Slice by slice, in f32: the f64 values rounded, nothing else.
        let mut head = vec![0f32; src.head_len(TensorRole::V)];
        src.fill_head(TensorRole::V, 4, &mut head, |x| x as f32);
        let want: Vec<f32> = a.v.head(4).iter().map(|&x| x as f32).collect();
        assert_eq!(head, want);
        // d_out's stream does not depend on whether it is drawn at all.
        let no_grad = SeededInputs::new(s, 7, false)
            .unwrap()
            .materialize()
            .unwrap();
        assert_eq!((&no_grad.q, &no_grad.v), (&a.q, &a.v));
        assert!(no_grad.d_out.is_none());
    }

    #[test]
    fn values_are_standard_normal() {
        let s = Shape::new(1, 4, 4096, 16, 16);
        let q = SeededInputs::new(s, 1, false)
            .unwrap()
            .make(TensorRole::Q, |x| x)
            .unwrap();
        let n = q.len() as f64;
        let mean = q.iter().sum::<f64>() / n;
        let var = q.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        assert!(
            mean.abs() < 0.01 && (var - 1.0).abs() < 0.01,
            "{mean} {var}"
        );
    }

    #[test]
    fn a_wrong_buffer_is_refused() {
        let src = SeededInputs::new(Shape::new(1, 1, 3, 2, 2), 0, false).unwrap();
        let mut short = vec![0f32; 5];
        assert!(matches!(
            src.fill(TensorRole::Q, &mut short, |x| x as f32),
            Err(AttnError::ShapeMismatch(_))
        ));
        assert!(SeededInputs::new(Shape::new(1, 0, 3, 2, 2), 0, false).is_err());
    }
}
