//! The building blocks of the chunk steps: φ rows, masked scores, row-scaled and
//! transposed copies, views of a state, the update of a state ([`absorb`]), denominators
//! and the output gradients.

use super::ctx::{Ctx, Head, Span, Temps};
use crate::fast::kernels;
use crate::gemm::{sgemm, transpose_into, MatRef};
use crate::maps::Operand;

pub(crate) fn rm(data: &[f32], rows: usize, cols: usize) -> MatRef<'_> {
    MatRef::row_major(data, rows, cols, cols)
}

/// V rows of the chunk, a view into the head (no copy).
pub(crate) fn values<'s>(ctx: &Ctx, head: &Head<'s>, sp: Span) -> MatRef<'s> {
    let m = ctx.cfg.m;
    rm(&head.v[sp.t0 * m..(sp.t0 + sp.len) * m], sp.len, m)
}

/// The value columns of a state: `C × M` inside its `C × M'` rows.
pub(crate) fn state_values<'s>(ctx: &Ctx, s: &'s [f32]) -> MatRef<'s> {
    MatRef::row_major(s, ctx.cfg.c, ctx.cfg.m, ctx.mp)
}

/// The normaliser column of a state into `z` (C), when normalised.
pub(crate) fn state_norm(ctx: &Ctx, s: &[f32], z: &mut [f32]) {
    if ctx.cfg.normalised {
        for (zc, row) in z.iter_mut().zip(s.chunks_exact(ctx.mp)) {
            *zc = row[ctx.cfg.m];
        }
    }
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
    if staged.is_none() {
        let rows = sp.t0 * d..(sp.t0 + sp.len) * d;
        kernels::elementwise_map_detected(ctx.cfg.map.map(), &x[rows], &mut buf[..sp.len * c]);
    }
    made_features(staged, sp, c, buf)
}

/// φ(Q) or φ(K) rows of the chunk (one operand only: a pass that needs no keys maps no
/// keys).
pub(crate) fn features_of<'s>(
    ctx: &Ctx,
    head: &Head<'s>,
    operand: Operand,
    sp: Span,
    buf: &'s mut [f32],
) -> &'s [f32] {
    match operand {
        Operand::Query => side_features(ctx, head.q, head.staged_q(), sp, buf),
        Operand::Key => side_features(ctx, head.k, head.staged_k(), sp, buf),
    }
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
        features_of(ctx, head, Operand::Query, sp, qbuf),
        features_of(ctx, head, Operand::Key, sp, kbuf),
    )
}

/// φ rows of the chunk of one side, already made: its staged features (`staged`, the
/// whole head's), or the fused ones [`features`] left in `computed`.
pub(super) fn made_features<'s>(
    staged: Option<&'s [f32]>,
    sp: Span,
    c: usize,
    computed: &'s [f32],
) -> &'s [f32] {
    match staged {
        Some(f) => &f[sp.t0 * c..(sp.t0 + sp.len) * c],
        None => &computed[..sp.len * c],
    }
}

/// `out = (X Yᵀ + add 1ᵀ) ⊙ D` (`len × len`): the causal mask with the decay inside the
/// chunk; `add` (one per row) is the normaliser's share of P.
pub(super) fn masked_scores(ctx: &Ctx, x: MatRef, y: MatRef, add: Option<&[f32]>, out: &mut [f32]) {
    let len = x.rows();
    let out = &mut out[..len * len];
    sgemm(1.0, x, y.t(), 0.0, out, len);
    for (t, row) in out.chunks_exact_mut(len).enumerate() {
        row[t + 1..].fill(0.0);
        if let Some(add) = add {
            row[..=t].iter_mut().for_each(|x| *x += add[t]);
        }
        if ctx.cfg.has_decay {
            for (s, x) in row[..t].iter_mut().enumerate() {
                *x *= ctx.pow[t - s];
            }
        }
    }
}

/// `out = (X Yᵀ ⊙ D)ᵀ` (`len × len`, row s holds column s of the masked scores) and
/// `sums` its column sums (the masked scores' row sums): the layout the product with V
/// packs with plain copies, for the forward's A.
pub(super) fn masked_scores_t(ctx: &Ctx, x: MatRef, y: MatRef, out: &mut [f32], sums: &mut [f32]) {
    let len = x.rows();
    let (out, sums) = (&mut out[..len * len], &mut sums[..len]);
    sgemm(1.0, y, x.t(), 0.0, out, len);
    sums.fill(0.0);
    for (s, row) in out.chunks_exact_mut(len).enumerate() {
        row[..s].fill(0.0);
        if ctx.cfg.has_decay {
            for (x, &w) in row[s..].iter_mut().zip(&ctx.pow) {
                *x *= w;
            }
        }
        sums.iter_mut().zip(row.iter()).for_each(|(a, &x)| *a += x);
    }
}

/// `src` (`len × cols`) with row t scaled by `λ^{exp(t)}`; `src` itself without decay.
pub(crate) fn scaled<'b>(
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

/// `src` (`len × cols`) transposed into `buf` (`cols × len`): the layout the engine packs
/// with plain copies for a product contracting over `cols` ([`transpose_into`]); products
/// take it back as a view, `rm(xt, cols, len).t()`. It pays where an operand enters
/// several such products (φ(Q), φ(K), gn); for one product it costs what the engine's
/// gather would (measured on the non-causal blocks, which therefore skip it).
pub(super) fn transposed<'b>(
    src: &[f32],
    len: usize,
    cols: usize,
    buf: &'b mut [f32],
) -> &'b [f32] {
    let out = &mut buf[..cols * len];
    transpose_into(src, len, cols, cols, out, len);
    out
}

/// `src` (`len × cols`) as a column-major view of its [`transposed`] copy in `buf`.
pub(super) fn col_major<'b>(
    src: &[f32],
    len: usize,
    cols: usize,
    buf: &'b mut [f32],
) -> MatRef<'b> {
    rm(transposed(src, len, cols, buf), cols, len).t()
}

/// A state's value columns transposed (`M × C`) into `buf`, for a product with Sᵀ.
pub(crate) fn state_values_t<'b>(ctx: &Ctx, s: &[f32], buf: &'b mut [f32]) -> MatRef<'b> {
    let (c, m) = (ctx.cfg.c, ctx.cfg.m);
    transpose_into(s, c, m, ctx.mp, &mut buf[..m * c], c);
    rm(&buf[..m * c], m, c)
}

/// A transposed chunk operand `xt` (`cols × len`) with column t scaled by `λ^{exp(t)}`;
/// `xt` itself without decay.
pub(super) fn scaled_t<'b>(
    ctx: &Ctx,
    xt: &'b [f32],
    len: usize,
    exp: impl Fn(usize) -> usize,
    buf: &'b mut [f32],
) -> &'b [f32] {
    if !ctx.cfg.has_decay {
        return xt;
    }
    let out = &mut buf[..xt.len()];
    for (o, x) in out.chunks_exact_mut(len).zip(xt.chunks_exact(len)) {
        for (t, (o, &x)) in o.iter_mut().zip(x).enumerate() {
            *o = ctx.pow[exp(t)] * x;
        }
    }
    out
}

/// Rows `t` of `rows` (`len × C`) times `λ^{exp(t)}`, in place (nothing without decay).
pub(crate) fn scale_rows(ctx: &Ctx, rows: &mut [f32], c: usize, exp: impl Fn(usize) -> usize) {
    if ctx.cfg.has_decay {
        for (t, row) in rows.chunks_exact_mut(c).enumerate() {
            let w = ctx.pow[exp(t)];
            row.iter_mut().for_each(|x| *x *= w);
        }
    }
}

/// Row t of `rows` (`len × C`) plus `coef(t) · z`: the normaliser column's share of a
/// product with a state (nothing when not normalised).
pub(crate) fn add_norm_share(ctx: &Ctx, rows: &mut [f32], coef: impl Fn(usize) -> f32, z: &[f32]) {
    if !ctx.cfg.normalised {
        return;
    }
    let c = ctx.cfg.c;
    for (t, row) in rows.chunks_exact_mut(c).enumerate() {
        let w = coef(t);
        row.iter_mut().zip(z).for_each(|(x, &zc)| *x += w * zc);
    }
}

/// A chunk's rows entering a state: the value rows and the normaliser column's entries
/// (ones when `None`).
#[derive(Clone, Copy)]
pub(crate) struct Entering<'a> {
    pub values: MatRef<'a>,
    pub norm: Option<&'a [f32]>,
}

/// `state ← carry·state + (diag(λ^{exp(t)}) X)ᵀ [Y, y]` for X `len × C` and the entering
/// rows `[Y, y]`; the y column only when normalised.
pub(crate) fn absorb(
    ctx: &Ctx,
    x: &[f32],
    exp: impl Fn(usize) -> usize,
    rows: Entering,
    carry: f32,
    tmp: &mut Temps,
    state: &mut [f32],
) {
    let (c, m, mp, len) = (ctx.cfg.c, ctx.cfg.m, ctx.mp, rows.values.rows());
    let xs = scaled(ctx, x, len, c, exp, &mut tmp.scaled);
    sgemm(1.0, rm(xs, len, c).t(), rows.values, carry, state, mp);
    if !ctx.cfg.normalised {
        return;
    }
    let sum = &mut tmp.colsum[..c];
    sum.fill(0.0);
    for (t, row) in xs.chunks_exact(c).enumerate() {
        let w = rows.norm.map_or(1.0, |y| y[t]);
        sum.iter_mut().zip(row).for_each(|(a, &x)| *a += w * x);
    }
    for (row, &a) in state.chunks_exact_mut(mp).zip(sum.iter()) {
        row[m] = carry * row[m] + a;
    }
}

/// `den_t = intra_t + w(t)·φ(Q)_t·z + ε_t` from the φ(Q) rows `qf` and the state's `z`,
/// when normalised; `intra`: the row sums of the masked scores, when they join in.
pub(crate) fn denominators(
    ctx: &Ctx,
    head: &Head,
    sp: Span,
    (qf, w): (&[f32], impl Fn(usize) -> f32),
    intra: Option<&[f32]>,
    z: &[f32],
    den: &mut [f32],
) {
    if !ctx.cfg.normalised {
        return;
    }
    let (c, len) = (ctx.cfg.c, sp.len);
    for (t, (d, q)) in den[..len].iter_mut().zip(qf.chunks_exact(c)).enumerate() {
        let own = intra.map_or(0.0, |a| a[t]);
        *d = own + w(t) * kernels::dot::<false>(q, &z[..c]) + head.eps(&ctx.cfg, sp.t0 + t);
    }
}

/// O rows divided by their denominators (nothing when not normalised).
pub(crate) fn normalise_rows(ctx: &Ctx, o: &mut [f32], den: &[f32]) {
    if ctx.cfg.normalised {
        for (row, &d) in o.chunks_exact_mut(ctx.cfg.m).zip(den) {
            let inv = 1.0 / d;
            row.iter_mut().for_each(|x| *x *= inv);
        }
    }
}

/// `gn = G/den` and `gd = −(G·O)/den` (G and 0 when not normalised) from the O rows `o`.
pub(crate) fn output_gradients(
    ctx: &Ctx,
    len: usize,
    den: &[f32],
    o: &[f32],
    g: &[f32],
    gn: &mut [f32],
    gd: &mut [f32],
) {
    let m = ctx.cfg.m;
    let g = &g[..len * m];
    if !ctx.cfg.normalised {
        gn[..len * m].copy_from_slice(g);
        gd[..len].fill(0.0);
        return;
    }
    for t in 0..len {
        let (orow, grow) = (&o[t * m..(t + 1) * m], &g[t * m..(t + 1) * m]);
        let inv = 1.0 / den[t];
        for (x, &g) in gn[t * m..(t + 1) * m].iter_mut().zip(grow) {
            *x = g * inv;
        }
        gd[t] = -kernels::dot::<false>(grow, orow) * inv;
    }
}

/// `gd` rows when they matter (normalised maps).
pub(crate) fn norm_grads<'g>(ctx: &Ctx, gd: &'g [f32]) -> Option<&'g [f32]> {
    ctx.cfg.normalised.then_some(gd)
}
