//! The f32 decoder: the fast path's fused update-and-read-out over one C×M state
//! ([`crate::fast::kernels::update_readout`]), state and sums in fp32 (SPEC §9).

use super::driver::{CpuDecoder, HeadState, StateReal, Token};
use crate::fast::kernels::update_readout;
use crate::oracle::head::HeadCore;
use linattn_core::Precision;

impl StateReal for f32 {
    const PRECISION: Precision = Precision::F32;
    fn token(core: &HeadCore, state: HeadState<'_, f32>, x: Token<'_, f32>, o: &mut [f32]) {
        let (HeadState { s, z }, Token { qf, kf, v }) = (state, x);
        let decay = core.decay as f32;
        // FMA = false: a portable build has no fused multiply-add instruction to call.
        let qz = if core.decay != 1.0 {
            update_readout::<false, true>(s, z, kf, qf, v, decay, o)
        } else {
            update_readout::<false, false>(s, z, kf, qf, v, decay, o)
        };
        if core.normalised {
            let inv = 1.0 / (qz + core.eps as f32);
            o.iter_mut().for_each(|x| *x *= inv);
        }
    }
}

/// `cpu/decode/f32`.
pub fn decoder() -> CpuDecoder<f32> {
    CpuDecoder::new("cpu/decode/f32")
}
