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

use crate::entry::ChunkOut;
use crate::fast::{kernels, Config};
use crate::gemm::{sgemm, transpose_into, MatRef};
use crate::maps::{Featurised, Operand};

/// What every chunk of one call shares.
pub(super) struct Ctx {
    pub cfg: Config,
    /// Chunk length L.
    pub l: usize,
    /// A state's row length: M+1 when normalised (z in the last column), else M.
    pub mp: usize,
    /// λ^0 ..= λ^L.
    pub pow: Vec<f32>,
}

impl Ctx {
    pub fn new(cfg: Config, l: usize) -> Self {
        let pow = (0..=l)
            .map(|e| (cfg.decay as f64).powi(e as i32) as f32)
            .collect();
        Ctx {
            l,
            mp: cfg.m + usize::from(cfg.normalised),
            pow,
            cfg,
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

impl<'a> Head<'a> {
    /// φ(Q) of the whole head, when the map is staged.
    fn staged_q(&self) -> Option<&'a [f32]> {
        self.staged.map(|f| &f.q[..])
    }

    /// φ(K) of the whole head, when the map is staged.
    fn staged_k(&self) -> Option<&'a [f32]> {
        self.staged.map(|f| &f.k[..])
    }

    fn eps(&self, cfg: &Config, i: usize) -> f32 {
        match self.staged {
            Some(f) => f.row_eps(cfg.eps, i),
            None => cfg.eps as f32,
        }
    }
}

/// Buffers of [`scaled`] and [`absorb`].
pub(super) struct Temps {
    /// Row-scaled copies (L × max(C, M)).
    pub scaled: Vec<f32>,
    /// A C-vector of column sums.
    colsum: Vec<f32>,
}

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

/// A chunk: tokens `t0 .. t0+len` of a head.
#[derive(Clone, Copy)]
pub(super) struct Span {
    pub t0: usize,
    pub len: usize,
}

pub(super) fn rm(data: &[f32], rows: usize, cols: usize) -> MatRef<'_> {
    MatRef::row_major(data, rows, cols, cols)
}

/// V rows of the chunk, a view into the head (no copy).
pub(super) fn values<'s>(ctx: &Ctx, head: &Head<'s>, sp: Span) -> MatRef<'s> {
    let m = ctx.cfg.m;
    rm(&head.v[sp.t0 * m..(sp.t0 + sp.len) * m], sp.len, m)
}

/// The value columns of a state: `C × M` inside its `C × M'` rows.
pub(super) fn state_values<'s>(ctx: &Ctx, s: &'s [f32]) -> MatRef<'s> {
    MatRef::row_major(s, ctx.cfg.c, ctx.cfg.m, ctx.mp)
}

/// The normaliser column of a state into `z` (C), when normalised.
pub(super) fn state_norm(ctx: &Ctx, s: &[f32], z: &mut [f32]) {
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
pub(super) fn features_of<'s>(
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
fn features<'s>(
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
fn made_features<'s>(
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
fn masked_scores(ctx: &Ctx, x: MatRef, y: MatRef, add: Option<&[f32]>, out: &mut [f32]) {
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
fn masked_scores_t(ctx: &Ctx, x: MatRef, y: MatRef, out: &mut [f32], sums: &mut [f32]) {
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

/// `src` (`len × cols`) transposed into `buf` (`cols × len`): the layout the engine packs
/// with plain copies for a product contracting over `cols` ([`transpose_into`]); products
/// take it back as a view, `rm(xt, cols, len).t()`. It pays where an operand enters
/// several such products (φ(Q), φ(K), gn); for one product it costs what the engine's
/// gather would (measured on the non-causal blocks, which therefore skip it).
fn transposed<'b>(src: &[f32], len: usize, cols: usize, buf: &'b mut [f32]) -> &'b [f32] {
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
pub(super) fn state_values_t<'b>(ctx: &Ctx, s: &[f32], buf: &'b mut [f32]) -> MatRef<'b> {
    let (c, m) = (ctx.cfg.c, ctx.cfg.m);
    transpose_into(s, c, m, ctx.mp, &mut buf[..m * c], c);
    rm(&buf[..m * c], m, c)
}

/// A transposed chunk operand `xt` (`cols × len`) with column t scaled by `λ^{exp(t)}`;
/// `xt` itself without decay.
fn scaled_t<'b>(
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
pub(super) fn scale_rows(ctx: &Ctx, rows: &mut [f32], c: usize, exp: impl Fn(usize) -> usize) {
    if ctx.cfg.has_decay {
        for (t, row) in rows.chunks_exact_mut(c).enumerate() {
            let w = ctx.pow[exp(t)];
            row.iter_mut().for_each(|x| *x *= w);
        }
    }
}

/// Row t of `rows` (`len × C`) plus `coef(t) · z`: the normaliser column's share of a
/// product with a state (nothing when not normalised).
pub(super) fn add_norm_share(ctx: &Ctx, rows: &mut [f32], coef: impl Fn(usize) -> f32, z: &[f32]) {
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
pub(super) struct Entering<'a> {
    pub values: MatRef<'a>,
    pub norm: Option<&'a [f32]>,
}

/// `state ← carry·state + (diag(λ^{exp(t)}) X)ᵀ [Y, y]` for X `len × C` and the entering
/// rows `[Y, y]`; the y column only when normalised.
pub(super) fn absorb(
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
pub(super) fn denominators(
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
pub(super) fn normalise_rows(ctx: &Ctx, o: &mut [f32], den: &[f32]) {
    if ctx.cfg.normalised {
        for (row, &d) in o.chunks_exact_mut(ctx.cfg.m).zip(den) {
            let inv = 1.0 / d;
            row.iter_mut().for_each(|x| *x *= inv);
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

/// `gn = G/den` and `gd = −(G·O)/den` (G and 0 when not normalised) from the O rows `o`.
pub(super) fn output_gradients(
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

/// `gd` rows when they matter (normalised maps).
pub(super) fn norm_grads<'g>(ctx: &Ctx, gd: &'g [f32]) -> Option<&'g [f32]> {
    ctx.cfg.normalised.then_some(gd)
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
