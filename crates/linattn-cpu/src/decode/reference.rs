//! The f64 reference decoder: the oracle's own recurrent step (`decay_and_add`, `read_out`).

use super::driver::{CpuDecoder, HeadState, StateReal, Token};
use crate::oracle::head::{decay_and_add, read_out, HeadCore};
use linattn_core::Precision;

impl StateReal for f64 {
    const PRECISION: Precision = Precision::F64;
    fn token(core: &HeadCore, state: HeadState<'_, f64>, x: Token<'_, f64>, o: &mut [f64]) {
        let HeadState { s, z } = state;
        decay_and_add(core, s, z, x.kf, x.v);
        read_out(core, x.qf, s, z, o);
    }
}

/// `cpu-ref/decode/f64`.
pub fn decoder() -> CpuDecoder<f64> {
    CpuDecoder::new("cpu-ref/decode/f64")
}
