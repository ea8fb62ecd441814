//! One chunk of L tokens of one head, every product a GEMM (SPEC §3 chunkwise, §4, §6).
//!
//! The normaliser rides along as an extra value column: `V⁺ = [V, 1]` (M' = M+1 columns
//! when the map is normalised), so `S⁺ = φ(K)ᵀV⁺` carries z in its last column, `φ(Q)S⁺`
//! gives numerator and denominator at once, and in the backward `G⁺ = [gn, gd]` turns
//! `S gn + z gd` into one product. Within a chunk (local t, s; λ^0..λ^L in `pow`):
//! * forward: `O⁺ = (A ⊙ D)V⁺ + diag(λ^{t+1})φ(Q)S⁺`, `A = φ(Q)φ(K)ᵀ`, `D_ts = λ^{t−s}[s≤t]`;
//!   `S⁺ ← λ^L S⁺ + (diag(λ^{L−1−s})φ(K))ᵀV⁺`;
//! * backward, forward direction: `∂φ(Q) = (P ⊙ D)φ(K) + diag(λ^{t+1})G⁺S⁺ᵀ`, `P = G⁺V⁺ᵀ`;
//! * backward, reverse direction, R⁺ the state of the tokens after the chunk:
//!   `∂φ(K) = (P ⊙ D)ᵀφ(Q) + diag(λ^{L−s})V⁺R⁺ᵀ`, `∂V = (A ⊙ D)ᵀgn + diag(λ^{L−s})φ(K)R`,
//!   `R⁺ ← λ^L R⁺ + (diag(λ^t)φ(Q))ᵀG⁺`.

use crate::fast::{kernels, Config};
use crate::gemm::{sgemm, MatRef};
use crate::maps::Featurised;

/// What every chunk of one call shares.
pub(super) struct Ctx<'a> {
    pub cfg: &'a Config,
    /// Chunk length L.
    pub l: usize,
    /// Value columns with the normaliser's column of ones: M+1 when normalised, else M.
    pub mp: usize,
    /// λ^0 ..= λ^L.
    pub pow: Vec<f32>,
}

impl<'a> Ctx<'a> {
    pub fn new(cfg: &'a Config, l: usize) -> Self {
        let pow = (0..=l)
            .map(|e| (cfg.decay as f64).powi(e as i32) as f32)
            .collect();
        Ctx {
            cfg,
            l,
            mp: cfg.m + usize::from(cfg.normalised),
            pow,
        }
    }
}

/// One head's inputs, and φ of them when the map is staged.
#[derive(Clone, Copy)]
pub(super) struct Head<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub staged: Option<&'a Featurised<f32>>,
}

impl Head<'_> {
    fn eps(&self, cfg: &Config, i: usize) -> f32 {
        match self.staged {
            Some(f) => f.row_eps(cfg.eps, i),
            None => cfg.eps as f32,
        }
    }
}

/// Per-task buffers, O(L·(C+M) + L²).
pub(super) struct Scratch {
    pub qf: Vec<f32>,
    pub kf: Vec<f32>,
    pub vaug: Vec<f32>,
    pub gaug: Vec<f32>,
    pub oaug: Vec<f32>,
    a: Vec<f32>,
    p: Vec<f32>,
    /// Row-scaled copies (L × max(C, M')).
    pub scaled: Vec<f32>,
}

impl Scratch {
    pub fn new(ctx: &Ctx) -> Self {
        let (l, c, mp) = (ctx.l, ctx.cfg.c, ctx.mp);
        Scratch {
            qf: vec![0.0; l * c],
            kf: vec![0.0; l * c],
            vaug: vec![0.0; l * mp],
            gaug: vec![0.0; l * mp],
            oaug: vec![0.0; l * mp],
            a: vec![0.0; l * l],
            p: vec![0.0; l * l],
            scaled: vec![0.0; l * c.max(mp)],
        }
    }
}

/// A chunk: tokens `t0 .. t0+len` of a head.
#[derive(Clone, Copy)]
pub(super) struct Span {
    pub t0: usize,
    pub len: usize,
}

pub(super) fn rm(data: &[f32], rows: usize, cols: usize) -> MatRef<'_> {
    MatRef::row_major(data, rows, cols, cols)
}

/// φ rows of the chunk of one operand `x` (head.q or head.k): a view into its staged
/// features, or computed into `buf` (fused maps).
fn side_features<'s>(
    ctx: &Ctx,
    x: &'s [f32],
    staged: Option<&'s [f32]>,
    sp: Span,
    buf: &'s mut [f32],
) -> &'s [f32] {
    let (c, d) = (ctx.cfg.c, ctx.cfg.d);
    if let Some(f) = staged {
        return &f[sp.t0 * c..(sp.t0 + sp.len) * c];
    }
    let out = &mut buf[..sp.len * c];
    let rows = sp.t0 * d..(sp.t0 + sp.len) * d;
    kernels::elementwise_map_detected(ctx.cfg.map.map(), &x[rows], out);
    out
}

/// φ(Q) rows of the chunk (only: a pass that needs no keys maps no keys).
pub(super) fn query_features<'s>(
    ctx: &Ctx,
    head: &Head<'s>,
    sp: Span,
    buf: &'s mut [f32],
) -> &'s [f32] {
    side_features(ctx, head.q, head.staged.map(|f| &f.q[..]), sp, buf)
}

/// φ(K) rows of the chunk.
pub(super) fn key_features<'s>(
    ctx: &Ctx,
    head: &Head<'s>,
    sp: Span,
    buf: &'s mut [f32],
) -> &'s [f32] {
    side_features(ctx, head.k, head.staged.map(|f| &f.k[..]), sp, buf)
}

/// φ(Q), φ(K) rows of the chunk.
pub(super) fn features<'s>(
    ctx: &Ctx,
    head: &Head<'s>,
    sp: Span,
    qbuf: &'s mut [f32],
    kbuf: &'s mut [f32],
) -> (&'s [f32], &'s [f32]) {
    (
        query_features(ctx, head, sp, qbuf),
        key_features(ctx, head, sp, kbuf),
    )
}

/// φ(K) rows of the chunk: staged, or the fused ones [`features`] left in `computed`.
pub(super) fn staged_keys<'s>(
    head: &Head<'s>,
    sp: Span,
    c: usize,
    computed: &'s [f32],
) -> &'s [f32] {
    match head.staged {
        Some(f) => &f.k[sp.t0 * c..(sp.t0 + sp.len) * c],
        None => &computed[..sp.len * c],
    }
}

/// `V⁺` rows: V with a column of ones when normalised.
pub(super) fn fill_vaug(ctx: &Ctx, head: &Head, sp: Span, vaug: &mut [f32]) {
    let (m, mp) = (ctx.cfg.m, ctx.mp);
    for (t, row) in vaug.chunks_exact_mut(mp).take(sp.len).enumerate() {
        let i = sp.t0 + t;
        row[..m].copy_from_slice(&head.v[i * m..(i + 1) * m]);
        if mp > m {
            row[m] = 1.0;
        }
    }
}

/// `G⁺` rows from gn (parked in `gn`, `len × M`) and gd.
pub(super) fn fill_gaug(ctx: &Ctx, gn: &[f32], gd: &[f32], len: usize, gaug: &mut [f32]) {
    let (m, mp) = (ctx.cfg.m, ctx.mp);
    for (t, row) in gaug.chunks_exact_mut(mp).take(len).enumerate() {
        row[..m].copy_from_slice(&gn[t * m..(t + 1) * m]);
        if mp > m {
            row[m] = gd[t];
        }
    }
}

/// `out = X Yᵀ ⊙ D` (`len × len`): the causal mask with the decay inside the chunk.
fn masked_scores(ctx: &Ctx, x: &[f32], y: &[f32], cols: usize, len: usize, out: &mut [f32]) {
    let out = &mut out[..len * len];
    sgemm(1.0, rm(x, len, cols), rm(y, len, cols).t(), 0.0, out, len);
    for (t, row) in out.chunks_exact_mut(len).enumerate() {
        row[t + 1..].fill(0.0);
        if ctx.cfg.has_decay {
            for (s, x) in row[..t].iter_mut().enumerate() {
                *x *= ctx.pow[t - s];
            }
        }
    }
}

/// `src` (`len × cols`) with row t scaled by `λ^{exp(t)}`; `src` itself without decay.
pub(super) fn scaled<'b>(
    ctx: &Ctx,
    src: &'b [f32],
    len: usize,
    cols: usize,
    exp: impl Fn(usize) -> usize,
    buf: &'b mut [f32],
) -> &'b [f32] {
    if !ctx.cfg.has_decay {
        return &src[..len * cols];
    }
    let out = &mut buf[..len * cols];
    for (t, (o, s)) in out
        .chunks_exact_mut(cols)
        .zip(src.chunks_exact(cols))
        .enumerate()
    {
        let w = ctx.pow[exp(t)];
        o.iter_mut().zip(s).for_each(|(o, &x)| *o = w * x);
    }
    out
}

/// `state ← λ^len state + (diag(λ^{exp(t)}) X)ᵀ Y` for X `len × C`, Y `len × M'`.
fn absorb(
    ctx: &Ctx,
    x: &[f32],
    y: &[f32],
    len: usize,
    exp: impl Fn(usize) -> usize,
    buf: &mut [f32],
    state: &mut [f32],
) {
    let (c, mp) = (ctx.cfg.c, ctx.mp);
    let xs = scaled(ctx, x, len, c, exp, buf);
    sgemm(
        1.0,
        rm(xs, len, c).t(),
        rm(&y[..len * mp], len, mp),
        ctx.pow[len],
        state,
        mp,
    );
}

/// `O⁺` of the chunk into `ws.oaug` from the state S⁺ before it; leaves φ (fused maps), V⁺
/// and A ⊙ D in `ws`.
fn chunk_outputs(ctx: &Ctx, head: &Head, sp: Span, s: &[f32], ws: &mut Scratch) {
    let (c, mp, len) = (ctx.cfg.c, ctx.mp, sp.len);
    let (qf, kf) = features(ctx, head, sp, &mut ws.qf, &mut ws.kf);
    fill_vaug(ctx, head, sp, &mut ws.vaug);
    masked_scores(ctx, qf, kf, c, len, &mut ws.a);
    let oaug = &mut ws.oaug[..len * mp];
    sgemm(
        1.0,
        rm(&ws.a, len, len),
        rm(&ws.vaug, len, mp),
        0.0,
        oaug,
        mp,
    );
    let qdec = scaled(ctx, qf, len, c, |t| t + 1, &mut ws.scaled);
    sgemm(1.0, rm(qdec, len, c), rm(s, c, mp), 1.0, oaug, mp);
}

/// O rows from `O⁺`; the denominators into `den` when asked.
pub(super) fn write_outputs(
    ctx: &Ctx,
    head: &Head,
    sp: Span,
    oaug: &[f32],
    o: &mut [f32],
    mut den: Option<&mut [f32]>,
) {
    let (m, mp) = (ctx.cfg.m, ctx.mp);
    for (t, (orow, arow)) in o.chunks_exact_mut(m).zip(oaug.chunks_exact(mp)).enumerate() {
        let d = if ctx.cfg.normalised {
            arow[m] + head.eps(ctx.cfg, sp.t0 + t)
        } else {
            1.0
        };
        let inv = 1.0 / d;
        orow.iter_mut().zip(arow).for_each(|(x, &y)| *x = y * inv);
        if let Some(den) = den.as_deref_mut() {
            den[t] = d;
        }
    }
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
    chunk_outputs(ctx, head, sp, s, ws);
    write_outputs(ctx, head, sp, &ws.oaug[..sp.len * ctx.mp], o, None);
    advance_state(ctx, head, sp, s, ws);
}

/// `S⁺ ← λ^len S⁺ + (diag(λ^{len−1−s})φ(K))ᵀV⁺` with φ(K), V⁺ already in `ws` (or staged).
fn advance_state(ctx: &Ctx, head: &Head, sp: Span, s: &mut [f32], ws: &mut Scratch) {
    let c = ctx.cfg.c;
    let kf = staged_keys(head, sp, c, &ws.kf);
    let len = sp.len;
    absorb(ctx, kf, &ws.vaug, len, |t| len - 1 - t, &mut ws.scaled, s);
}

/// The state only (a group's share of S⁺ for the scan across groups).
pub(super) fn state_only(ctx: &Ctx, head: &Head, sp: Span, s: &mut [f32], ws: &mut Scratch) {
    key_features(ctx, head, sp, &mut ws.kf);
    fill_vaug(ctx, head, sp, &mut ws.vaug);
    advance_state(ctx, head, sp, s, ws);
}

/// What the backward's forward direction writes for one chunk.
pub(super) struct ForwardGrads<'o> {
    pub o: &'o mut [f32],
    /// `G` rows in, `gn = G/den` rows out (parked in ∂V's buffer until the reverse pass).
    pub g: &'o [f32],
    pub gn: &'o mut [f32],
    pub gd: &'o mut [f32],
    /// `∂L/∂φ(Q)` rows, `len × C`.
    pub dqf: &'o mut [f32],
}

/// O rows from `O⁺`, then `gn = G/den` and `gd = −(G·O)/den` (0 when not normalised).
pub(super) fn output_gradients(
    ctx: &Ctx,
    head: &Head,
    sp: Span,
    oaug: &[f32],
    out: &mut ForwardGrads,
) {
    let (m, len) = (ctx.cfg.m, sp.len);
    // The denominators pass through gd, each read just before its gd overwrites it.
    write_outputs(ctx, head, sp, oaug, out.o, Some(&mut out.gd[..len]));
    for t in 0..len {
        let (orow, grow) = (&out.o[t * m..(t + 1) * m], &out.g[t * m..(t + 1) * m]);
        let inv = 1.0 / out.gd[t];
        for (x, &g) in out.gn[t * m..(t + 1) * m].iter_mut().zip(grow) {
            *x = g * inv;
        }
        out.gd[t] = if ctx.cfg.normalised {
            -kernels::dot::<false>(grow, orow) * inv
        } else {
            0.0
        };
    }
}

/// Backward, forward direction: O, gn, gd and ∂φ(Q) of a chunk; advances S⁺.
pub(super) fn backward_forward(
    ctx: &Ctx,
    head: &Head,
    sp: Span,
    s: &mut [f32],
    mut out: ForwardGrads,
    ws: &mut Scratch,
) {
    let (c, mp, len) = (ctx.cfg.c, ctx.mp, sp.len);
    chunk_outputs(ctx, head, sp, s, ws);
    output_gradients(ctx, head, sp, &ws.oaug[..len * mp], &mut out);
    fill_gaug(ctx, out.gn, out.gd, len, &mut ws.gaug);
    let gaug = rm(&ws.gaug[..len * mp], len, mp);
    // ∂φ(Q) = diag(λ^{t+1}) G⁺S⁺ᵀ + (P ⊙ D)φ(K).
    let dqf = &mut out.dqf[..len * c];
    sgemm(1.0, gaug, MatRef::row_major(s, c, mp, mp).t(), 0.0, dqf, c);
    if ctx.cfg.has_decay {
        for (t, row) in dqf.chunks_exact_mut(c).enumerate() {
            let w = ctx.pow[t + 1];
            row.iter_mut().for_each(|x| *x *= w);
        }
    }
    masked_scores(ctx, &ws.gaug, &ws.vaug, mp, len, &mut ws.p);
    let kf = staged_keys(head, sp, c, &ws.kf);
    sgemm(1.0, rm(&ws.p, len, len), rm(kf, len, c), 1.0, dqf, c);
    advance_state(ctx, head, sp, s, ws);
}

/// What the backward's reverse direction writes for one chunk.
pub(super) struct ReverseGrads<'o> {
    /// gn rows in (parked by [`backward_forward`]), ∂V rows out.
    pub dv: &'o mut [f32],
    pub gd: &'o [f32],
    /// `∂L/∂φ(K)` rows, `len × C`.
    pub dkf: &'o mut [f32],
}

/// Backward, reverse direction: ∂φ(K), ∂V of a chunk from R⁺ of the tokens after it;
/// moves R⁺ to the chunk's first token.
pub(super) fn backward_reverse(
    ctx: &Ctx,
    head: &Head,
    sp: Span,
    r: &mut [f32],
    out: ReverseGrads,
    ws: &mut Scratch,
) {
    let (c, m, mp, len) = (ctx.cfg.c, ctx.cfg.m, ctx.mp, sp.len);
    let (qf, kf) = features(ctx, head, sp, &mut ws.qf, &mut ws.kf);
    fill_vaug(ctx, head, sp, &mut ws.vaug);
    fill_gaug(ctx, out.dv, out.gd, len, &mut ws.gaug);
    masked_scores(ctx, qf, kf, c, len, &mut ws.a);
    masked_scores(ctx, &ws.gaug, &ws.vaug, mp, len, &mut ws.p);
    let r_view = MatRef::row_major(r, c, mp, mp);
    // ∂φ(K) = diag(λ^{L−s})V⁺R⁺ᵀ + (P ⊙ D)ᵀφ(Q).
    let dkf = &mut out.dkf[..len * c];
    let vdec = scaled(ctx, &ws.vaug, len, mp, |t| len - t, &mut ws.scaled);
    sgemm(1.0, rm(vdec, len, mp), r_view.t(), 0.0, dkf, c);
    sgemm(1.0, rm(&ws.p, len, len).t(), rm(qf, len, c), 1.0, dkf, c);
    // ∂V = diag(λ^{L−s})φ(K)R + (A ⊙ D)ᵀgn.
    let dv = &mut out.dv[..len * m];
    let kdec = scaled(ctx, kf, len, c, |t| len - t, &mut ws.scaled);
    sgemm(
        1.0,
        rm(kdec, len, c),
        MatRef::row_major(r, c, m, mp),
        0.0,
        dv,
        m,
    );
    let gn = MatRef::row_major(&ws.gaug, len, m, mp);
    sgemm(1.0, rm(&ws.a, len, len).t(), gn, 1.0, dv, m);
    absorb(ctx, qf, &ws.gaug, len, |t| t, &mut ws.scaled, r);
}

/// R⁺ only (a group's share for the reverse scan across groups).
pub(super) fn reverse_state_only(
    ctx: &Ctx,
    head: &Head,
    sp: Span,
    r: &mut [f32],
    gn: &[f32],
    gd: &[f32],
    ws: &mut Scratch,
) {
    let len = sp.len;
    let qf = query_features(ctx, head, sp, &mut ws.qf);
    fill_gaug(ctx, gn, gd, len, &mut ws.gaug);
    absorb(ctx, qf, &ws.gaug, len, |t| t, &mut ws.scaled, r);
}
