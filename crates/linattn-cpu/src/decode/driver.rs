//! The one driver of the CPU decoders, [`CpuDecoder`], and the per-token update of a head
//! ([`StateReal`]) that the f64 reference and the f32 path each implement.

use crate::maps::{PreparedMap, Real};
use crate::oracle::head::HeadCore;
use linattn_core::{
    no_decode_state, AttnError, DecodeSpec, DecodeState, Decoder, HostStream, Inputs, Precision,
    Tensor, Unsupported,
};
use rayon::prelude::*;

/// Below this many multiply-adds per call, heads run on the calling thread: a rayon hand-off
/// costs microseconds, more than a small single-token step.
const PARALLEL_MIN_WORK: usize = 1 << 16;

/// The element type a decoder keeps its state in, and its per-token update of one head.
pub trait StateReal: Real {
    const PRECISION: Precision;
    /// One token of one head: updates S and z of `state` with φ(k) and v, and writes
    /// `o = φ(q)ᵀS / (φ(q)ᵀz + ε)` (no division when the map is not normalised).
    fn token(core: &HeadCore, state: HeadState<'_, Self>, x: Token<'_, Self>, o: &mut [Self]);
}

/// The state one head carries: S (C×M, row-major) and z (C).
pub struct HeadState<'a, T> {
    pub s: &'a mut [T],
    pub z: &'a mut [T],
}

/// One token of one head: φ(q), φ(k) (C each) and v (M).
#[derive(Clone, Copy)]
pub struct Token<'a, T> {
    pub qf: &'a [T],
    pub kf: &'a [T],
    pub v: &'a [T],
}

/// A decoder keeping one C×M state and one C-vector per (batch, head) in `T`.
pub struct CpuDecoder<T: StateReal> {
    name: &'static str,
    live: Option<Live<T>>,
    /// A staged stream: the trait's default stream methods step through it on the host.
    stream: Option<HostStream>,
}

/// Head index, its S and z, and its rows of O.
type HeadParts<'a, T> = (usize, ((&'a mut [T], &'a mut [T]), &'a mut [f64]));

/// The state of a decoder that has been reset or loaded.
struct Live<T: StateReal> {
    spec: DecodeSpec,
    core: HeadCore,
    map: PreparedMap<T>,
    tokens: u64,
    s: Vec<T>,
    z: Vec<T>,
}

impl<T: StateReal> CpuDecoder<T> {
    pub fn new(name: &'static str) -> Self {
        CpuDecoder {
            name,
            live: None,
            stream: None,
        }
    }

    fn start(&mut self, spec: &DecodeSpec, state: &DecodeState) -> Result<(), AttnError> {
        self.live = None;
        state.validate()?;
        state.expect(spec, T::PRECISION)?;
        let spec = state.spec;
        self.supports(&spec)?;
        self.live = Some(Live {
            spec,
            core: HeadCore::new(&spec.problem(1)),
            map: PreparedMap::exact(spec.map, spec.dk),
            tokens: state.tokens,
            s: state.s.iter().map(|&x| T::from_f64(x)).collect(),
            z: state.z.iter().map(|&x| T::from_f64(x)).collect(),
        });
        Ok(())
    }

    /// Runs the tokens of `x` through every head; returns O `[B, H, n, M]`.
    fn advance(&mut self, x: &Inputs) -> Result<Tensor, AttnError> {
        let live = self.live.as_mut().ok_or_else(no_decode_state)?;
        let n = live.spec.check_tokens(x)?;
        let (d, c, m) = (live.spec.dk, live.core.c, live.core.m);
        let mut out = Tensor::zeros([live.spec.batch, live.spec.heads, n, m])?;
        let (core, map) = (&live.core, &live.map);
        let head = |(bh, ((s, z), o)): HeadParts<'_, T>| {
            let q: Vec<T> = x.q.head(bh).iter().map(|&a| T::from_f64(a)).collect();
            let k: Vec<T> = x.k.head(bh).iter().map(|&a| T::from_f64(a)).collect();
            let v: Vec<T> = x.v.head(bh).iter().map(|&a| T::from_f64(a)).collect();
            debug_assert_eq!(q.len(), n * d);
            let f = map.featurise(&q, &k, n);
            let mut row = vec![T::ZERO; m];
            for i in 0..n {
                let (fc, vm) = (i * c..(i + 1) * c, i * m..(i + 1) * m);
                let x = Token {
                    qf: &f.q[fc.clone()],
                    kf: &f.k[fc],
                    v: &v[vm],
                };
                T::token(core, HeadState { s, z }, x, &mut row);
                for (dst, &r) in o[i * m..(i + 1) * m].iter_mut().zip(&row) {
                    *dst = r.to_f64();
                }
            }
        };
        let per_head_s = c * m;
        let heads = live
            .s
            .chunks_exact_mut(per_head_s)
            .zip(live.z.chunks_exact_mut(c))
            .zip(out.data_mut().chunks_exact_mut(n * m));
        if live.spec.bh() * n * per_head_s < PARALLEL_MIN_WORK {
            heads.enumerate().for_each(head);
        } else {
            let heads: Vec<_> = heads.enumerate().collect();
            heads.into_par_iter().for_each(head);
        }
        live.tokens += n as u64;
        Ok(out)
    }
}

impl<T: StateReal> Decoder for CpuDecoder<T> {
    fn name(&self) -> &str {
        self.name
    }

    fn input_precision(&self) -> Precision {
        T::PRECISION
    }

    fn state_precision(&self) -> Precision {
        T::PRECISION
    }

    fn supports(&self, spec: &DecodeSpec) -> Result<(), Unsupported> {
        spec.validate()
            .map_err(|e| Unsupported::Problem(e.to_string()))
    }

    fn prefill(&mut self, x: &Inputs) -> Result<Tensor, AttnError> {
        self.advance(x)
    }

    fn host_stream(&mut self) -> Option<&mut Option<HostStream>> {
        Some(&mut self.stream)
    }

    fn export_state(&mut self) -> Result<DecodeState, AttnError> {
        let live = self.live.as_ref().ok_or_else(no_decode_state)?;
        Ok(DecodeState {
            spec: live.spec,
            precision: T::PRECISION,
            tokens: live.tokens,
            s: live.s.iter().map(|x| x.to_f64()).collect(),
            z: live.z.iter().map(|x| x.to_f64()).collect(),
        })
    }

    fn import_state(&mut self, spec: &DecodeSpec, state: &DecodeState) -> Result<(), AttnError> {
        self.start(spec, state)
    }
}
