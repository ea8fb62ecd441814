//! One chunk of L tokens of one head, every product a GEMM (SPEC §3 chunkwise, §4, §6).
//!
//! A state is stored `C × M'` row-major with the normaliser z in column M (M' = M+1 when
//! normalised), so the scans across groups move one block. Every GEMM runs on the M value
//! columns only: a 65th column would cost the engine a whole masked 8-wide panel (12.5%
//! more kernel work plus an edge copy) and a copy of V with a column of ones. z, the
//! denominators and their gradients are vector updates beside the GEMMs. Within a chunk
//! (local t, s; λ^0..λ^L in `pow`; gn = G/den, gd = −(G·O)/den, both 0-free when not
//! normalised):
//! * forward: `O = ((A ⊙ D)V + diag(λ^{t+1})φ(Q)S) / den`, `A = φ(Q)φ(K)ᵀ`,
//!   `D_ts = λ^{t−s}[s≤t]`, `den_t = Σ_s (A ⊙ D)_ts + λ^{t+1}φ(Q)_t·z + ε`;
//!   `S ← λ^L S + (diag(λ^{L−1−s})φ(K))ᵀV`, `z ← λ^L z + Σ_s λ^{L−1−s}φ(K)_s`;
//! * backward, forward direction: `∂φ(Q) = (P ⊙ D)φ(K) + diag(λ^{t+1})(gn Sᵀ + gd zᵀ)`,
//!   `P = gn Vᵀ + gd 1ᵀ`, and the chunk's own share of ∂φ(K), `(P ⊙ D)ᵀφ(Q)` (P is at
//!   hand here; the reverse direction would have to recompute it);
//! * backward, reverse direction, (R, r) the state of the tokens after the chunk:
//!   `∂φ(K) += diag(λ^{L−s})(V Rᵀ + 1 rᵀ)`, `∂V = (A ⊙ D)ᵀgn + diag(λ^{L−s})φ(K)R`,
//!   `R ← λ^L R + (diag(λ^t)φ(Q))ᵀgn`, `r ← λ^L r + Σ_t λ^t gd_t φ(Q)_t`.

mod blocks;
mod ctx;

pub(super) use blocks::{
    absorb, add_norm_share, denominators, features_of, norm_grads, normalise_rows,
    output_gradients, rm, scale_rows, scaled, state_norm, state_values, state_values_t, values,
    Entering,
};
pub(super) use ctx::{Ctx, Head, Span};

use crate::entry::ChunkOut;
use crate::fast::kernels;
use crate::gemm::sgemm;
use crate::maps::Operand;
use blocks::{
    col_major, features, made_features, masked_scores, masked_scores_t, scaled_t, transposed,
};
use ctx::Temps;

/// Per-task buffers, O(L·(C+M) + L²).
pub(super) struct Scratch {
    pub qf: Vec<f32>,
    pub kf: Vec<f32>,
    /// φ(Q)ᵀ, φ(K)ᵀ (`C × L`): see [`transposed`].
    qt: Vec<f32>,
    kt: Vec<f32>,
    /// gnᵀ, Vᵀ (`M × L`) and a state's value columns transposed (`M × C`), for the backward.
    gt: Vec<f32>,
    vt: Vec<f32>,
    pub st: Vec<f32>,
    /// gn rows of the reverse pass (their home, ∂V's buffer, is overwritten by ∂V).
    g: Vec<f32>,
    /// The chunk's denominators.
    pub den: Vec<f32>,
    /// Row sums of the chunk's masked scores.
    rowsum: Vec<f32>,
    /// The normaliser column of the state in use, contiguous.
    pub z: Vec<f32>,
    a: Vec<f32>,
    p: Vec<f32>,
    pub tmp: Temps,
}

impl Scratch {
    pub fn new(ctx: &Ctx) -> Self {
        let (l, c, m) = (ctx.l, ctx.cfg.c, ctx.cfg.m);
        Scratch {
            qf: vec![0.0; l * c],
            kf: vec![0.0; l * c],
            qt: vec![0.0; l * c],
            kt: vec![0.0; l * c],
            gt: vec![0.0; l * m],
            vt: vec![0.0; l * m],
            st: vec![0.0; c * m],
            g: vec![0.0; l * m],
            den: vec![0.0; l],
            rowsum: vec![0.0; l],
            z: vec![0.0; c],
            a: vec![0.0; l * l],
            p: vec![0.0; l * l],
            tmp: Temps {
                scaled: vec![0.0; l * c.max(m)],
                colsum: vec![0.0; c],
            },
        }
    }
}

/// O rows before normalisation into `o` (`len × M`) and, when normalised, the state's z
/// into `ws.z` and the denominators into `ws.den`, from the state S before the chunk;
/// leaves φ (fused maps) in `ws`.
fn chunk_outputs(ctx: &Ctx, head: &Head, sp: Span, s: &[f32], o: &mut [f32], ws: &mut Scratch) {
    let (c, m, len) = (ctx.cfg.c, ctx.cfg.m, sp.len);
    let (qf, kf) = features(ctx, head, sp, &mut ws.qf, &mut ws.kf);
    let (qt, kt) = (
        transposed(qf, len, c, &mut ws.qt),
        transposed(kf, len, c, &mut ws.kt),
    );
    let (qv, kv) = (rm(qt, c, len).t(), rm(kt, c, len).t());
    let a_t = &mut ws.a[..len * len];
    masked_scores_t(ctx, qv, kv, a_t, &mut ws.rowsum);
    let o = &mut o[..len * m];
    sgemm(1.0, rm(a_t, len, len).t(), values(ctx, head, sp), 0.0, o, m);
    let qdec_t = scaled_t(ctx, qt, len, |t| t + 1, &mut ws.tmp.scaled);
    sgemm(1.0, rm(qdec_t, c, len).t(), state_values(ctx, s), 1.0, o, m);
    state_norm(ctx, s, &mut ws.z);
    let w = |t: usize| ctx.pow[t + 1];
    denominators(ctx, head, sp, (qf, w), Some(&ws.rowsum), &ws.z, &mut ws.den);
}

/// Forward of one chunk: O rows (`len × M`) and the state moved past the chunk.
pub(super) fn forward(
    ctx: &Ctx,
    head: &Head,
    sp: Span,
    s: &mut [f32],
    o: &mut [f32],
    ws: &mut Scratch,
) {
    chunk_outputs(ctx, head, sp, s, o, ws);
    normalise_rows(ctx, &mut o[..sp.len * ctx.cfg.m], &ws.den);
    advance_state(ctx, head, sp, s, ws);
}

/// `S ← λ^len S + (diag(λ^{len−1−s})φ(K))ᵀV` (and z) with φ(K) in `ws` or staged.
fn advance_state(ctx: &Ctx, head: &Head, sp: Span, s: &mut [f32], ws: &mut Scratch) {
    let (c, len) = (ctx.cfg.c, sp.len);
    let kf = made_features(head.staged_k(), sp, c, &ws.kf);
    let rows = Entering {
        values: values(ctx, head, sp),
        norm: None,
    };
    absorb(ctx, kf, |t| len - 1 - t, rows, ctx.pow[len], &mut ws.tmp, s);
}

/// The state only (a group's share of S for the scan across groups).
pub(super) fn state_only(ctx: &Ctx, head: &Head, sp: Span, s: &mut [f32], ws: &mut Scratch) {
    features_of(ctx, head, Operand::Key, sp, &mut ws.kf);
    advance_state(ctx, head, sp, s, ws);
}

/// What the backward's forward direction writes for one chunk.
pub(super) struct ForwardGrads<'o> {
    pub o: ChunkOut<'o>,
    /// `G` rows in, `gn = G/den` rows out (parked in ∂V's buffer until the reverse pass).
    pub g: &'o [f32],
    pub gn: &'o mut [f32],
    pub gd: &'o mut [f32],
    /// `∂L/∂φ(Q)` rows, `len × C`.
    pub dqf: &'o mut [f32],
}

/// The denominators of a chunk without its L×L scores, for the backward given O:
/// `den_t = λ^{t+1} φ(Q)_t·z + φ(Q)_t·k̄_t + ε_t`, `k̄_t = Σ_{s≤t} λ^{t−s} φ(K)_s` (a
/// running sum in `acc`); z, the state's, in `ws_z`.
fn running_denominators(
    ctx: &Ctx,
    head: &Head,
    sp: Span,
    (qf, kf): (&[f32], &[f32]),
    z: &[f32],
    acc: &mut [f32],
    den: &mut [f32],
) {
    if !ctx.cfg.normalised {
        return;
    }
    let c = ctx.cfg.c;
    let acc = &mut acc[..c];
    acc.fill(0.0);
    let rows = qf.chunks_exact(c).zip(kf.chunks_exact(c)).take(sp.len);
    for (t, (q, k)) in rows.enumerate() {
        let decay = ctx.cfg.decay;
        acc.iter_mut()
            .zip(k)
            .for_each(|(a, &x)| *a = decay * *a + x);
        let inter = ctx.pow[t + 1] * kernels::dot::<false>(q, &z[..c]);
        den[t] = inter + kernels::dot::<false>(q, acc) + head.eps(&ctx.cfg, sp.t0 + t);
    }
}
/// Backward, forward direction: O (unless given), gn, gd and ∂φ(Q) of a chunk, and the
/// chunk's own share of ∂φ(K) into `dkf_own` (`len × C`); advances S. Given O, the chunk
/// skips its three output products (scores, scores·V, φ(Q)·S): the denominators come from
/// a running sum of φ(K).
pub(super) fn backward_forward(
    ctx: &Ctx,
    head: &Head,
    sp: Span,
    s: &mut [f32],
    out: ForwardGrads,
    dkf_own: &mut [f32],
    ws: &mut Scratch,
) {
    let (c, m, len) = (ctx.cfg.c, ctx.cfg.m, sp.len);
    let o: &[f32] = match out.o {
        ChunkOut::Compute(o) => {
            chunk_outputs(ctx, head, sp, s, o, ws);
            normalise_rows(ctx, &mut o[..len * m], &ws.den);
            o
        }
        ChunkOut::Given(o) => {
            let (qf, kf) = features(ctx, head, sp, &mut ws.qf, &mut ws.kf);
            state_norm(ctx, s, &mut ws.z);
            let acc = &mut ws.tmp.colsum;
            running_denominators(ctx, head, sp, (qf, kf), &ws.z, acc, &mut ws.den);
            o
        }
    };
    output_gradients(ctx, len, &ws.den, o, out.g, out.gn, out.gd);
    let gd = norm_grads(ctx, &out.gd[..len]);
    // gn and V enter products over M only: as column-major views.
    let gn = col_major(&out.gn[..len * m], len, m, &mut ws.gt);
    let v = col_major(&head.v[sp.t0 * m..(sp.t0 + len) * m], len, m, &mut ws.vt);
    // ∂φ(Q) = diag(λ^{t+1})(gn Sᵀ + gd zᵀ) + (P ⊙ D)φ(K); ws.z holds the z before the chunk.
    let dqf = &mut out.dqf[..len * c];
    sgemm(1.0, gn, state_values_t(ctx, s, &mut ws.st), 0.0, dqf, c);
    add_norm_share(ctx, dqf, |t| out.gd[t], &ws.z);
    scale_rows(ctx, dqf, c, |t| t + 1);
    masked_scores(ctx, gn, v, gd, &mut ws.p);
    let (kf, qf) = (
        made_features(head.staged_k(), sp, c, &ws.kf),
        made_features(head.staged_q(), sp, c, &ws.qf),
    );
    let p = rm(&ws.p, len, len);
    sgemm(1.0, p, rm(kf, len, c), 1.0, dqf, c);
    sgemm(1.0, p.t(), rm(qf, len, c), 0.0, &mut dkf_own[..len * c], c);
    advance_state(ctx, head, sp, s, ws);
}

/// What the backward's reverse direction writes for one chunk.
pub(super) struct ReverseGrads<'o> {
    /// gn rows in (parked by [`backward_forward`]), ∂V rows out.
    pub dv: &'o mut [f32],
    pub gd: &'o [f32],
    /// `∂L/∂φ(K)` rows, `len × C`: the chunk's own share in (from [`backward_forward`]),
    /// the whole out.
    pub dkf: &'o mut [f32],
}

/// Backward, reverse direction: ∂φ(K), ∂V of a chunk from the state (R, r) of the tokens
/// after it; moves the state to the chunk's first token.
pub(super) fn backward_reverse(
    ctx: &Ctx,
    head: &Head,
    sp: Span,
    r: &mut [f32],
    out: ReverseGrads,
    ws: &mut Scratch,
) {
    let (c, m, len) = (ctx.cfg.c, ctx.cfg.m, sp.len);
    let (qf, kf) = features(ctx, head, sp, &mut ws.qf, &mut ws.kf);
    ws.g[..len * m].copy_from_slice(&out.dv[..len * m]);
    let gn = rm(&ws.g[..len * m], len, m);
    let gd = norm_grads(ctx, &out.gd[..len]);
    let (qt, kt) = (
        transposed(qf, len, c, &mut ws.qt),
        transposed(kf, len, c, &mut ws.kt),
    );
    masked_scores(ctx, rm(qt, c, len).t(), rm(kt, c, len).t(), None, &mut ws.a);
    // ∂φ(K) += diag(λ^{L−s})(V Rᵀ + 1 rᵀ).
    let dkf = &mut out.dkf[..len * c];
    let vt = transposed(&head.v[sp.t0 * m..(sp.t0 + len) * m], len, m, &mut ws.vt);
    let vdec_t = scaled_t(ctx, vt, len, |t| len - t, &mut ws.tmp.scaled);
    let r_t = state_values_t(ctx, r, &mut ws.st);
    sgemm(1.0, rm(vdec_t, m, len).t(), r_t, 1.0, dkf, c);
    state_norm(ctx, r, &mut ws.z);
    add_norm_share(ctx, dkf, |t| ctx.pow[len - t], &ws.z);
    // ∂V = diag(λ^{L−s})φ(K)R + (A ⊙ D)ᵀgn.
    let dv = &mut out.dv[..len * m];
    let kdec_t = scaled_t(ctx, kt, len, |t| len - t, &mut ws.tmp.scaled);
    sgemm(
        1.0,
        rm(kdec_t, c, len).t(),
        state_values(ctx, r),
        0.0,
        dv,
        m,
    );
    sgemm(1.0, rm(&ws.a, len, len).t(), gn, 1.0, dv, m);
    let rows = Entering {
        values: gn,
        norm: gd,
    };
    absorb(ctx, qf, |t| t, rows, ctx.pow[len], &mut ws.tmp, r);
}

/// (R, r) only (a group's share for the reverse scan across groups), from gn rows `gn`
/// (`len × M`) and `gd`.
pub(super) fn reverse_state_only(
    ctx: &Ctx,
    head: &Head,
    sp: Span,
    r: &mut [f32],
    gn: &[f32],
    gd: &[f32],
    ws: &mut Scratch,
) {
    let (m, len) = (ctx.cfg.m, sp.len);
    let qf = features_of(ctx, head, Operand::Query, sp, &mut ws.qf);
    let rows = Entering {
        values: rm(&gn[..len * m], len, m),
        norm: norm_grads(ctx, &gd[..len]),
    };
    absorb(ctx, qf, |t| t, rows, ctx.pow[len], &mut ws.tmp, r);
}
