//! The fast f32 path: what a user runs at N = 65 536.
//!
//! * rayon over the B·H independent heads;
//! * one C×M state per head, row-major with M contiguous (16 KiB at C = M = 64: it stays in
//!   L1), touched once per token: the causal step updates a state row and immediately reads
//!   it out into register-resident accumulators ([`kernels::update_readout`]);
//! * elementwise maps (elu+1, relu, identity) are fused: φ of a token's q and k is computed
//!   into a C-long buffer just before its step, and their VJP right after its gradient row;
//!   the other maps run as a φ stage that writes φ(Q), φ(K) for the head first (FAVOR+ with
//!   the max-subtraction of [`crate::maps`]) and a VJP stage at the end;
//! * backward is the memory-efficient one of SPEC §4: the forward scan recomputes S_i, z_i,
//!   a reverse scan builds R_j, r_j; the N×M rows `gn_i = G_i/den_i` are parked in dV's own
//!   buffer until the reverse scan overwrites them, so extra memory is O(C·M + N) per head.
//! * inner loops are compiled twice, with `avx2,fma` and portable, and picked at run time.

pub mod kernels;

pub use crate::entry::{BackwardInto, ForwardInto, GradsF32};

use crate::entry::{f32_entry_points, ForwardOperands, Operands};
use crate::maps::{Featurised, Operand, PreparedMap};
use kernels::{
    accumulate_r, key_value_grads, readout, reverse_step, state_times, update, update_readout,
};
use linattn_core::Problem;
use rayon::prelude::*;

/// Everything a head needs, shared by all heads of one call.
pub(crate) struct Config {
    pub(crate) n: usize,
    pub(crate) d: usize,
    pub(crate) c: usize,
    pub(crate) m: usize,
    pub(crate) eps: f64,
    pub(crate) decay: f32,
    pub(crate) has_decay: bool,
    pub(crate) normalised: bool,
    causal: bool,
    pub(crate) fused: bool,
    pub(crate) map: PreparedMap<f32>,
}

impl Config {
    pub(crate) fn new(problem: &Problem) -> Self {
        let s = problem.shape;
        Config {
            n: s.seq,
            d: s.dk,
            c: problem.feature_dim(),
            m: s.dv,
            eps: problem.eps,
            decay: problem.decay as f32,
            has_decay: problem.has_decay(),
            normalised: problem.map.normalised(),
            causal: problem.causality.is_causal(),
            fused: problem.map.elementwise(),
            map: PreparedMap::stabilised(problem.map, s.dk),
        }
    }
}

f32_entry_points! {
    causal: None,
    /// O (`[B,H,N,M]`) of linear attention in f32 from q, k (`[B,H,N,D]`) and v.
    forward: forward_heads,
    /// O and the gradients (memory-efficient backward) from q, k, v and `d_out = ∂L/∂O`.
    backward: backward_heads,
}

/// Every head's forward, in parallel.
fn forward_heads(problem: &Problem, (q, k, v): ForwardOperands, out: &mut [f32]) {
    let cfg = Config::new(problem);
    let (nd, nm) = (cfg.n * cfg.d, cfg.n * cfg.m);
    out.par_chunks_mut(nm).enumerate().for_each(|(bh, o)| {
        let span = bh * nd..(bh + 1) * nd;
        run_head(
            &cfg,
            ForwardHead {
                q: &q[span.clone()],
                k: &k[span],
                v: &v[bh * nm..(bh + 1) * nm],
                o,
            },
        );
    });
}

/// Every head's backward, in parallel.
fn backward_heads(
    problem: &Problem,
    (q, k, v, d_out): Operands,
    out: &mut [f32],
    grads: &mut GradsF32,
) {
    let cfg = Config::new(problem);
    let (nd, nm) = (cfg.n * cfg.d, cfg.n * cfg.m);
    out.par_chunks_mut(nm)
        .zip(grads.dq.par_chunks_mut(nd))
        .zip(grads.dk.par_chunks_mut(nd))
        .zip(grads.dv.par_chunks_mut(nm))
        .enumerate()
        .for_each(|(bh, (((o, dq), dk), dv))| {
            let (qs, vs) = (bh * nd..(bh + 1) * nd, bh * nm..(bh + 1) * nm);
            let head = HeadIo {
                q: &q[qs.clone()],
                k: &k[qs],
                v: &v[vs.clone()],
                g: &d_out[vs],
            };
            run_head(
                &cfg,
                BackwardHead {
                    io: head,
                    o,
                    dq,
                    dk,
                    dv,
                },
            );
        });
}

/// One head's inputs.
#[derive(Clone, Copy)]
struct HeadIo<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    g: &'a [f32],
}

/// Tokens per block of the fused maps' φ: 64 rows of q and k features stay in L1.
const PHI_BLOCK: usize = 64;

/// φ of a head's tokens: staged for the whole head (non-elementwise maps) or computed a
/// block of [`PHI_BLOCK`] tokens at a time (elementwise maps, fused).
struct HeadFeatures {
    staged: Option<Featurised<f32>>,
    qblk: Vec<f32>,
    kblk: Vec<f32>,
    /// First token of the block in `qblk`/`kblk` (`usize::MAX`: none yet).
    block_start: usize,
    n: usize,
    c: usize,
    d: usize,
    eps: f32,
}

impl HeadFeatures {
    fn new(cfg: &Config, q: &[f32], k: &[f32]) -> Self {
        let fused_rows = if cfg.fused { PHI_BLOCK.min(cfg.n) } else { 0 };
        HeadFeatures {
            staged: (!cfg.fused).then(|| cfg.map.featurise(q, k, cfg.n)),
            qblk: vec![0f32; fused_rows * cfg.c],
            kblk: vec![0f32; fused_rows * cfg.c],
            block_start: usize::MAX,
            n: cfg.n,
            c: cfg.c,
            d: cfg.d,
            eps: cfg.eps as f32,
        }
    }

    /// φ(q_i), φ(k_i).
    #[inline(always)]
    fn rows<const FMA: bool>(
        &mut self,
        cfg: &Config,
        i: usize,
        q: &[f32],
        k: &[f32],
    ) -> (&[f32], &[f32]) {
        let (c, d) = (self.c, self.d);
        if let Some(f) = &self.staged {
            return (&f.q[i * c..(i + 1) * c], &f.k[i * c..(i + 1) * c]);
        }
        if !(self.block_start..self.block_start.saturating_add(PHI_BLOCK)).contains(&i) {
            let start = i / PHI_BLOCK * PHI_BLOCK;
            let len = PHI_BLOCK.min(self.n - start);
            let map = cfg.map.map();
            kernels::elementwise_map::<FMA>(
                map,
                &q[start * d..(start + len) * d],
                &mut self.qblk[..len * c],
            );
            kernels::elementwise_map::<FMA>(
                map,
                &k[start * d..(start + len) * d],
                &mut self.kblk[..len * c],
            );
            self.block_start = start;
        }
        let r = i - self.block_start;
        (
            &self.qblk[r * c..(r + 1) * c],
            &self.kblk[r * c..(r + 1) * c],
        )
    }

    /// ε of query row i (scaled with FAVOR+'s stabiliser shifts).
    fn eps(&self, eps: f64, i: usize) -> f32 {
        match &self.staged {
            Some(f) => f.row_eps(eps, i),
            None => self.eps,
        }
    }
}

/// One head's computation, compiled for every (FMA, DECAY) pair; [`run_head`] picks the
/// instance for this CPU and problem.
trait HeadKernel {
    fn run<const FMA: bool, const DECAY: bool>(self, cfg: &Config);
}

struct ForwardHead<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    o: &'a mut [f32],
}

impl HeadKernel for ForwardHead<'_> {
    #[inline(always)]
    fn run<const FMA: bool, const DECAY: bool>(self, cfg: &Config) {
        forward_body::<FMA, DECAY>(cfg, self.q, self.k, self.v, self.o)
    }
}

struct BackwardHead<'a> {
    io: HeadIo<'a>,
    o: &'a mut [f32],
    dq: &'a mut [f32],
    dk: &'a mut [f32],
    dv: &'a mut [f32],
}

impl HeadKernel for BackwardHead<'_> {
    #[inline(always)]
    fn run<const FMA: bool, const DECAY: bool>(self, cfg: &Config) {
        backward_body::<FMA, DECAY>(cfg, self.io, self.o, self.dq, self.dk, self.dv)
    }
}

fn run_head(cfg: &Config, kernel: impl HeadKernel) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports avx2 and fma, checked just above.
        unsafe { run_head_avx2(cfg, kernel) };
        return;
    }
    run_head_with::<false>(cfg, kernel)
}

/// The whole head (its kernels are `inline(always)`) compiled with avx2 and fma.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_head_avx2(cfg: &Config, kernel: impl HeadKernel) {
    run_head_with::<true>(cfg, kernel)
}

#[inline(always)]
fn run_head_with<const FMA: bool>(cfg: &Config, kernel: impl HeadKernel) {
    if cfg.has_decay {
        kernel.run::<FMA, true>(cfg)
    } else {
        kernel.run::<FMA, false>(cfg)
    }
}

/// Divides a numerator row by its denominator (`qᵀz + ε` when normalised); returns the
/// denominator used.
#[inline(always)]
fn normalise(cfg: &Config, eps: f32, qz: f32, o: &mut [f32]) -> f32 {
    if !cfg.normalised {
        return 1.0;
    }
    let den = qz + eps;
    let inv = 1.0 / den;
    o.iter_mut().for_each(|x| *x *= inv);
    den
}

#[inline(always)]
fn forward_body<const FMA: bool, const DECAY: bool>(
    cfg: &Config,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    o: &mut [f32],
) {
    let (n, c, m) = (cfg.n, cfg.c, cfg.m);
    let mut feats = HeadFeatures::new(cfg, q, k);
    let mut s = vec![0f32; c * m];
    let mut z = vec![0f32; c];
    if cfg.causal {
        for i in 0..n {
            let eps = feats.eps(cfg.eps, i);
            let (qf, kf) = feats.rows::<FMA>(cfg, i, q, k);
            let orow = &mut o[i * m..(i + 1) * m];
            let qz = update_readout::<FMA, DECAY>(
                &mut s,
                &mut z,
                kf,
                qf,
                &v[i * m..(i + 1) * m],
                cfg.decay,
                orow,
            );
            normalise(cfg, eps, qz, orow);
        }
    } else {
        for j in 0..n {
            let (_, kf) = feats.rows::<FMA>(cfg, j, q, k);
            update::<FMA, DECAY>(&mut s, &mut z, kf, &v[j * m..(j + 1) * m], cfg.decay);
        }
        for i in 0..n {
            let eps = feats.eps(cfg.eps, i);
            let (qf, _) = feats.rows::<FMA>(cfg, i, q, k);
            let orow = &mut o[i * m..(i + 1) * m];
            let qz = readout::<FMA>(&s, &z, qf, orow);
            normalise(cfg, eps, qz, orow);
        }
    }
}

/// Forward scan with `gn`, `gd`, `∂φ(q)`; reverse scan (or, non-causal, one full R) for
/// `∂φ(k)`, `∂v`; the chain through φ per token (fused maps) or per head (staged maps).
#[inline(always)]
fn backward_body<const FMA: bool, const DECAY: bool>(
    cfg: &Config,
    io: HeadIo,
    o: &mut [f32],
    dq: &mut [f32],
    dk: &mut [f32],
    dv: &mut [f32],
) {
    let (n, c, d, m) = (cfg.n, cfg.c, cfg.d, cfg.m);
    let HeadIo { q, k, v, g } = io;
    let mut feats = HeadFeatures::new(cfg, q, k);
    let staged = feats.staged.is_some();
    // Staged maps collect ∂φ(Q), ∂φ(K) for the whole head; fused ones use one row.
    let head_rows = if staged { n } else { 1 };
    let mut dqf = vec![0f32; head_rows * c];
    let mut dkf = vec![0f32; head_rows * c];
    let mut gd = vec![0f32; n];
    let mut gn = vec![0f32; m];
    let mut s = vec![0f32; c * m];
    let mut z = vec![0f32; c];
    let mut r_mat = vec![0f32; c * m];
    let mut r_vec = vec![0f32; c];

    if !cfg.causal {
        for j in 0..n {
            let (_, kf) = feats.rows::<FMA>(cfg, j, q, k);
            update::<FMA, DECAY>(&mut s, &mut z, kf, &v[j * m..(j + 1) * m], cfg.decay);
        }
    }
    // Forward scan: O, gn (parked in dv), gd, ∂φ(q).
    for i in 0..n {
        let rows = i * m..(i + 1) * m;
        let eps = feats.eps(cfg.eps, i);
        let (qf, kf) = feats.rows::<FMA>(cfg, i, q, k);
        let orow = &mut o[rows.clone()];
        let qz = if cfg.causal {
            update_readout::<FMA, DECAY>(&mut s, &mut z, kf, qf, &v[rows.clone()], cfg.decay, orow)
        } else {
            readout::<FMA>(&s, &z, qf, orow)
        };
        let den = normalise(cfg, eps, qz, orow);
        let inv = 1.0 / den;
        let grow = &g[rows.clone()];
        let gn_row = &mut dv[rows];
        for (x, &gg) in gn_row.iter_mut().zip(grow) {
            *x = gg * inv;
        }
        gd[i] = if cfg.normalised {
            -kernels::dot::<FMA>(grow, orow) * inv
        } else {
            0.0
        };
        let dqf_row = if staged {
            &mut dqf[i * c..(i + 1) * c]
        } else {
            &mut dqf[..]
        };
        state_times::<FMA>(&s, &z, gn_row, gd[i], dqf_row);
        if !cfg.causal {
            accumulate_r::<FMA>(&mut r_mat, &mut r_vec, qf, gn_row, gd[i]);
        }
        if !staged {
            let qr = &q[i * d..(i + 1) * d];
            kernels::elementwise_vjp(cfg.map.map(), qr, qf, &dqf, &mut dq[i * d..(i + 1) * d]);
        }
    }
    // Reverse scan (causal) or the fixed full R (non-causal): ∂φ(k), ∂v.
    let mut weight = 1f64;
    for j in (0..n).rev() {
        let rows = j * m..(j + 1) * m;
        let (qf, kf) = feats.rows::<FMA>(cfg, j, q, k);
        let dkf_row = if staged {
            &mut dkf[j * c..(j + 1) * c]
        } else {
            &mut dkf[..]
        };
        if cfg.causal {
            gn.copy_from_slice(&dv[rows.clone()]);
            reverse_step::<FMA, DECAY>(
                &mut r_mat,
                &mut r_vec,
                qf,
                &gn,
                gd[j],
                cfg.decay,
                kf,
                &v[rows.clone()],
                dkf_row,
                &mut dv[rows],
            );
        } else {
            key_value_grads::<FMA>(
                &r_mat,
                &r_vec,
                kf,
                &v[rows.clone()],
                weight as f32,
                dkf_row,
                &mut dv[rows],
            );
            weight *= cfg.decay as f64;
        }
        if !staged {
            let kr = &k[j * d..(j + 1) * d];
            kernels::elementwise_vjp(cfg.map.map(), kr, kf, &dkf, &mut dk[j * d..(j + 1) * d]);
        }
    }
    if let Some(f) = &feats.staged {
        cfg.map.vjp_head(Operand::Query, q, &f.q, &dqf, n, dq);
        cfg.map.vjp_head(Operand::Key, k, &f.k, &dkf, n, dk);
    }
}
