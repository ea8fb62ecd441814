use crate::error::AttnError;
use crate::problem::{checked_len, Problem, Shape};
use serde::{Deserialize, Serialize};

/// A host tensor `[B, H, N, D]`, row-major and contiguous, in f64: the common currency
/// between backends. Each backend converts to its own storage when it stages inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tensor {
    dims: [usize; 4],
    data: Vec<f64>,
}

/// Which operand a tensor is, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorRole {
    Q,
    K,
    V,
    DOut,
}

impl TensorRole {
    pub fn name(self) -> &'static str {
        match self {
            TensorRole::Q => "q",
            TensorRole::K => "k",
            TensorRole::V => "v",
            TensorRole::DOut => "d_out",
        }
    }
}

impl Tensor {
    /// A tensor of zeros.
    pub fn zeros(dims: [usize; 4]) -> Result<Self, AttnError> {
        let len = checked_len(&dims)?;
        Ok(Tensor {
            dims,
            data: vec![0.0; len],
        })
    }
    /// Wraps `data`; fails when its length is not the product of `dims`.
    pub fn from_vec(dims: [usize; 4], data: Vec<f64>) -> Result<Self, AttnError> {
        let len = checked_len(&dims)?;
        if data.len() != len {
            return Err(AttnError::ShapeMismatch(format!(
                "dims {dims:?} need {len} elements, got {}",
                data.len()
            )));
        }
        Ok(Tensor { dims, data })
    }
    /// From any element type that widens to f64 (f32 output of a backend, say).
    pub fn from_slice<T: Copy + Into<f64>>(
        dims: [usize; 4],
        data: &[T],
    ) -> Result<Self, AttnError> {
        Self::from_vec(dims, data.iter().map(|&x| x.into()).collect())
    }
    pub fn dims(&self) -> [usize; 4] {
        self.dims
    }
    pub fn data(&self) -> &[f64] {
        &self.data
    }
    pub fn data_mut(&mut self) -> &mut [f64] {
        &mut self.data
    }
    pub fn into_vec(self) -> Vec<f64> {
        self.data
    }
    pub fn len(&self) -> usize {
        self.data.len()
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    /// Rows of the last dim belonging to sequence `bh` (flattened batch·head index).
    pub fn head(&self, bh: usize) -> &[f64] {
        let per = self.dims[2] * self.dims[3];
        &self.data[bh * per..(bh + 1) * per]
    }
    pub fn head_mut(&mut self, bh: usize) -> &mut [f64] {
        let per = self.dims[2] * self.dims[3];
        &mut self.data[bh * per..(bh + 1) * per]
    }
    /// Elements converted to f32 (what an f32 backend stages).
    pub fn to_f32(&self) -> Vec<f32> {
        self.data.iter().map(|&x| x as f32).collect()
    }
    /// First non-finite element, as an error naming `role`.
    pub fn check_finite(&self, role: TensorRole) -> Result<(), AttnError> {
        match self.data.iter().position(|x| !x.is_finite()) {
            None => Ok(()),
            Some(index) => Err(AttnError::NonFinite {
                tensor: role.name(),
                index,
                value: self.data[index],
            }),
        }
    }
    fn expect_dims(&self, role: TensorRole, want: [usize; 4]) -> Result<(), AttnError> {
        if self.dims != want {
            return Err(AttnError::ShapeMismatch(format!(
                "{} has dims {:?}, expected {:?} ([B, H, N, {}])",
                role.name(),
                self.dims,
                want,
                if matches!(role, TensorRole::Q | TensorRole::K) {
                    "D"
                } else {
                    "M"
                }
            )));
        }
        Ok(())
    }
    /// Positions `range` of the sequence axis (dim 2) of every (batch, head), as a new tensor.
    pub fn seq_slice(&self, range: std::ops::Range<usize>) -> Result<Tensor, AttnError> {
        let [b, h, n, d] = self.dims;
        if range.start > range.end || range.end > n {
            return Err(AttnError::InvalidArgument(format!(
                "positions {range:?} outside a sequence of {n}"
            )));
        }
        let mut data = Vec::with_capacity(b * h * range.len() * d);
        for bh in 0..b * h {
            data.extend_from_slice(&self.head(bh)[range.start * d..range.end * d]);
        }
        Tensor::from_vec([b, h, range.len(), d], data)
    }
    /// Writes `src` (`[B, H, n, D]`) at positions `start..start + n` of the sequence axis.
    pub fn set_seq(&mut self, start: usize, src: &Tensor) -> Result<(), AttnError> {
        let [b, h, n, d] = src.dims;
        let [sb, sh, sn, sd] = self.dims;
        if (b, h, d) != (sb, sh, sd) || start + n > sn {
            return Err(AttnError::ShapeMismatch(format!(
                "cannot write {:?} at position {start} of {:?}",
                src.dims, self.dims
            )));
        }
        for bh in 0..b * h {
            self.head_mut(bh)[start * d..(start + n) * d].copy_from_slice(src.head(bh));
        }
        Ok(())
    }
    /// Rounds every element through `round` (e.g. to f16 and back) in place.
    pub fn map_in_place(&mut self, round: impl Fn(f64) -> f64) {
        for x in &mut self.data {
            *x = round(*x);
        }
    }
}

/// The operands of one call: q, k `[B,H,N,D]`, v `[B,H,N,M]`, and for gradients
/// `d_out = ∂L/∂O` `[B,H,N,M]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inputs {
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
    pub d_out: Option<Tensor>,
}

/// Gradients of L with respect to q, k, v.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grads {
    pub dq: Tensor,
    pub dk: Tensor,
    pub dv: Tensor,
}

impl Grads {
    /// Zeroed gradients of inputs of `shape`.
    pub fn zeros(shape: Shape) -> Result<Self, AttnError> {
        Ok(Grads {
            dq: Tensor::zeros(shape.qk_dims())?,
            dk: Tensor::zeros(shape.qk_dims())?,
            dv: Tensor::zeros(shape.v_dims())?,
        })
    }
}

impl Inputs {
    /// Host bytes of q, k, v (and d_out with `with_grad`) of `shape` in f64.
    pub fn f64_bytes(shape: Shape, with_grad: bool) -> Result<u64, AttnError> {
        let per_row = (2 * shape.dk + if with_grad { 2 } else { 1 } * shape.dv) as u64;
        (shape.bh() as u64)
            .checked_mul(shape.seq as u64)
            .and_then(|r| r.checked_mul(per_row * 8))
            .ok_or_else(|| AttnError::SizeOverflow(format!("inputs of {shape}")))
    }

    /// Shape implied by q and v, after checking q, k, v (and d_out) agree and are non-empty.
    pub fn shape(&self) -> Result<Shape, AttnError> {
        let [b, h, n, d] = self.q.dims();
        let m = self.v.dims()[3];
        let shape = Shape::new(b, h, n, d, m);
        shape.validate()?;
        self.q.expect_dims(TensorRole::Q, shape.qk_dims())?;
        self.k.expect_dims(TensorRole::K, shape.qk_dims())?;
        self.v.expect_dims(TensorRole::V, shape.v_dims())?;
        if let Some(g) = &self.d_out {
            g.expect_dims(TensorRole::DOut, shape.v_dims())?;
        }
        Ok(shape)
    }

    /// Everything a backend must know before touching the data: the problem is valid, the
    /// tensors match its shape, and no element is NaN or ±Inf.
    pub fn validate_for(&self, problem: &Problem) -> Result<(), AttnError> {
        problem.validate()?;
        let shape = self.shape()?;
        if shape != problem.shape {
            return Err(AttnError::ShapeMismatch(format!(
                "inputs are {shape}, problem is {}",
                problem.shape
            )));
        }
        self.q.check_finite(TensorRole::Q)?;
        self.k.check_finite(TensorRole::K)?;
        self.v.check_finite(TensorRole::V)?;
        if let Some(g) = &self.d_out {
            g.check_finite(TensorRole::DOut)?;
        }
        Ok(())
    }

    /// Positions `range` of q, k, v (and d_out) along the sequence axis.
    pub fn seq_slice(&self, range: std::ops::Range<usize>) -> Result<Inputs, AttnError> {
        Ok(Inputs {
            q: self.q.seq_slice(range.clone())?,
            k: self.k.seq_slice(range.clone())?,
            v: self.v.seq_slice(range.clone())?,
            d_out: match &self.d_out {
                Some(g) => Some(g.seq_slice(range)?),
                None => None,
            },
        })
    }

    /// d_out, or an error naming what is missing.
    pub fn require_d_out(&self) -> Result<&Tensor, AttnError> {
        self.d_out.as_ref().ok_or_else(|| {
            AttnError::InvalidArgument("backward needs d_out (∂L/∂O), none was given".into())
        })
    }

    /// Same inputs with every element rounded by `round` (e.g. through f16), so a reduced
    /// precision backend and the oracle can see bit-identical operands.
    pub fn rounded(&self, round: impl Fn(f64) -> f64 + Copy) -> Inputs {
        let mut out = self.clone();
        out.q.map_in_place(round);
        out.k.map_in_place(round);
        out.v.map_in_place(round);
        if let Some(g) = &mut out.d_out {
            g.map_in_place(round);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{Causality, FeatureMap};

    #[test]
    fn mismatches_and_non_finite_are_named() {
        let s = Shape::new(1, 2, 3, 4, 5);
        let mut x = Inputs::random(s, 1, true).unwrap();
        x.k = Tensor::zeros([1, 2, 3, 5]).unwrap();
        let e = x.shape().unwrap_err();
        assert!(matches!(e, AttnError::ShapeMismatch(ref m) if m.starts_with("k has dims")));

        let mut x = Inputs::random(s, 1, true).unwrap();
        x.v.data_mut()[7] = f64::NAN;
        let p = Problem::new(s, Causality::Causal, FeatureMap::EluPlusOne);
        let e = x.validate_for(&p).unwrap_err();
        assert!(matches!(
            e,
            AttnError::NonFinite {
                tensor: "v",
                index: 7,
                ..
            }
        ));

        assert!(Tensor::from_vec([1, 1, 2, 2], vec![0.0; 3]).is_err());
    }
}
