//! The f64 reference decoder: the oracle's own recurrent step (`decay_and_add`, `read_out`).

use super::{CpuDecoder, StateReal};
use crate::oracle::{decay_and_add, read_out, HeadCore};
use linattn_core::Precision;

impl StateReal for f64 {
    const PRECISION: Precision = Precision::F64;
    fn token(
        core: &HeadCore,
        s: &mut [f64],
        z: &mut [f64],
        qf: &[f64],
        kf: &[f64],
        v: &[f64],
        o: &mut [f64],
    ) {
        decay_and_add(core, s, z, kf, v);
        read_out(core, qf, s, z, o);
    }
}

/// `cpu-ref/decode/f64`.
pub fn decoder() -> CpuDecoder<f64> {
    CpuDecoder::new("cpu-ref/decode/f64")
}
