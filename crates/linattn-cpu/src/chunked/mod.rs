//! `cpu/causal_chunked/f32`: the chunkwise causal form (SPEC §3), every product a GEMM
//! ([`crate::gemm`]), and its memory-efficient backward (SPEC §4).
//!
//! Work is split into tasks of (head, group of consecutive chunks). When B·H fills the
//! rayon pool a head is one group and runs its chunks in order with one C×M' state. When it
//! does not (B·H = 1 on two cores), each head is cut into as many groups as the pool has
//! threads per head: a first parallel pass computes each group's own state contribution, a
//! short scan over groups gives every group its starting state, and the groups then run in
//! parallel. The backward does the same twice, forward for S and in reverse for R; given
//! the forward's O ([`backward_from_output_into`]) its forward direction skips the output
//! products. Extra memory: one C×M' state per group, gd (N per head), and for staged maps
//! φ(Q), φ(K) and their gradients (N×C per head, as in [`crate::fast`]); gn waits in ∂V's
//! buffer and each chunk's own share of ∂φ(K) in ∂K's (fused maps).

mod chunk;
mod noncausal;

pub use noncausal::{
    backward as noncausal_backward,
    backward_from_output_into as noncausal_backward_from_output_into,
    backward_into as noncausal_backward_into, forward as noncausal_forward,
    forward_into as noncausal_forward_into,
};

use crate::fast::{check_backward_buffers, check_len, check_operands, kernels, Config, GradsF32};
use crate::maps::{Featurised, Operand};
use chunk::{ChunkOut, Ctx, ForwardGrads, Head, ReverseGrads, Scratch, Span};
use linattn_core::{AttnError, Problem};
use rayon::prelude::*;

/// Chunk length, from interleaved runs of `examples/chunked_timing.rs` (forward and
/// backward) at B=1 H=8 N=16 384 elu+1 on the shared 2-core machine
/// (bench-results/cpu-sweep/chunk-length.txt): at D=M=64 L=32 and L=24 tie and lead
/// L=16, 48 and 64; at D=M=32 and 128 L=32 leads L=64, so one length serves every D and M
/// measured. Shorter chunks shrink the masked L×L products (half of which is zeros); longer
/// ones amortise the packing of the C×M state over more rows.
pub const CHUNK: usize = 32;

/// `LINATTN_CPU_CHUNK` overrides [`CHUNK`] (for the chunk-size measurements only).
fn chunk_len() -> usize {
    std::env::var("LINATTN_CPU_CHUNK")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&l| l > 0)
        .unwrap_or(CHUNK)
}

/// How a call is cut into tasks.
#[derive(Clone, Copy)]
struct Plan {
    n: usize,
    bh: usize,
    /// Tokens per group (a multiple of the chunk length).
    group_len: usize,
    groups: usize,
}

impl Plan {
    fn new(n: usize, bh: usize, l: usize) -> Self {
        let chunks = n.div_ceil(l).max(1);
        let threads = rayon::current_num_threads().max(1);
        let wanted = threads.div_ceil(bh.max(1)).clamp(1, chunks);
        let per_group = chunks.div_ceil(wanted);
        Plan {
            n,
            bh,
            group_len: per_group * l,
            groups: chunks.div_ceil(per_group),
        }
    }

    /// The chunks of group `g`, in order.
    fn spans(&self, g: usize, l: usize) -> impl DoubleEndedIterator<Item = Span> {
        let start = g * self.group_len;
        let end = (start + self.group_len).min(self.n);
        (start..end).step_by(l).map(move |t0| Span {
            t0,
            len: l.min(end - t0),
        })
    }

    fn group_tokens(&self, g: usize) -> usize {
        (self.n - g * self.group_len).min(self.group_len)
    }
}

/// Cuts a `[B·H, N, width]` buffer into the per-task pieces, in task order (head, group).
fn split<'a, T>(buf: &'a mut [T], plan: &Plan, width: usize) -> Vec<&'a mut [T]> {
    buf.chunks_mut(plan.n * width)
        .flat_map(|head| head.chunks_mut(plan.group_len * width))
        .collect()
}

/// Read-only counterpart of [`split`].
fn split_ref<'a, T>(buf: &'a [T], plan: &Plan, width: usize) -> Vec<&'a [T]> {
    buf.chunks(plan.n * width)
        .flat_map(|head| head.chunks(plan.group_len * width))
        .collect()
}

/// [`split`] of the backward's O rows, computed or given.
fn split_out<'a>(out: ChunkOut<'a>, plan: &Plan, m: usize) -> Vec<ChunkOut<'a>> {
    match out {
        ChunkOut::Compute(o) => split(o, plan, m)
            .into_iter()
            .map(ChunkOut::Compute)
            .collect(),
        ChunkOut::Given(o) => split_ref(o, plan, m)
            .into_iter()
            .map(ChunkOut::Given)
            .collect(),
    }
}

/// [`split`] of the whole-head ∂φ buffer of staged maps; `None` per task for fused maps.
fn split_staged<'a>(buf: &'a mut [f32], plan: &Plan, c: usize) -> Vec<Option<&'a mut [f32]>> {
    if buf.is_empty() {
        return (0..plan.bh * plan.groups).map(|_| None).collect();
    }
    split(buf, plan, c).into_iter().map(Some).collect()
}

/// Everything that is read-only across tasks.
struct Shared<'a> {
    ctx: Ctx<'a>,
    plan: Plan,
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    staged: Vec<Featurised<f32>>,
}

impl<'a> Shared<'a> {
    fn new(cfg: &'a Config, bh: usize, l: usize, q: &'a [f32], k: &'a [f32], v: &'a [f32]) -> Self {
        let (n, d) = (cfg.n, cfg.d);
        let staged = if cfg.fused {
            Vec::new()
        } else {
            (0..bh)
                .into_par_iter()
                .map(|h| {
                    cfg.map.featurise(
                        &q[h * n * d..(h + 1) * n * d],
                        &k[h * n * d..(h + 1) * n * d],
                        n,
                    )
                })
                .collect()
        };
        Shared {
            ctx: Ctx::new(cfg, l),
            plan: Plan::new(n, bh, l),
            q,
            k,
            v,
            staged,
        }
    }

    fn head(&self, h: usize) -> Head<'_> {
        let cfg = self.ctx.cfg;
        let (nd, nm) = (cfg.n * cfg.d, cfg.n * cfg.m);
        Head {
            q: &self.q[h * nd..(h + 1) * nd],
            k: &self.k[h * nd..(h + 1) * nd],
            v: &self.v[h * nm..(h + 1) * nm],
            staged: self.staged.get(h),
        }
    }

    fn state_len(&self) -> usize {
        self.ctx.cfg.c * self.ctx.mp
    }

    /// Each group's starting S⁺ (forward direction): its own contribution in parallel, then
    /// a scan over the groups of each head. One zero state per head when a head is one group.
    fn forward_starts(&self) -> Vec<f32> {
        let (plan, len) = (self.plan, self.state_len());
        let mut starts = vec![0f32; plan.bh * plan.groups * len];
        if plan.groups == 1 {
            return starts;
        }
        // Group g's own share lands in slot g+1; slot 0 of each head stays zero.
        starts
            .par_chunks_mut(len)
            .enumerate()
            .filter(|(i, _)| (i % plan.groups) + 1 < plan.groups)
            .for_each_init(
                || Scratch::new(&self.ctx),
                |ws, (i, s)| {
                    let head = self.head(i / plan.groups);
                    for sp in plan.spans(i % plan.groups, self.ctx.l) {
                        chunk::state_only(&self.ctx, &head, sp, s, ws);
                    }
                },
            );
        // Rotate the shares into place: slot g+1 holds group g's share, then prefix-scan.
        for head in starts.chunks_mut(plan.groups * len) {
            head.rotate_right(len);
            head[..len].fill(0.0);
            for g in 1..plan.groups {
                let w = self.ctx.cfg.decay.powi(plan.group_tokens(g - 1) as i32);
                let (done, rest) = head.split_at_mut(g * len);
                for (x, &p) in rest[..len].iter_mut().zip(&done[(g - 1) * len..]) {
                    *x += if self.ctx.cfg.has_decay { w * p } else { p };
                }
            }
        }
        starts
    }
}

/// O (`[B,H,N,M]`) of causal linear attention in f32 by the chunkwise form.
pub fn forward(problem: &Problem, q: &[f32], k: &[f32], v: &[f32]) -> Result<Vec<f32>, AttnError> {
    crate::fast::forward_allocating(forward_into, problem, q, k, v)
}

/// [`forward`] into `out` (`[B,H,N,M]`, every element overwritten): a caller that runs
/// again reuses its buffer instead of faulting in fresh pages each time.
pub fn forward_into(
    problem: &Problem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
) -> Result<(), AttnError> {
    require_causality(problem, true)?;
    let (_, v_len) = check_operands(problem, q, k, v)?;
    check_len("out", out.len(), v_len)?;
    let cfg = Config::new(problem);
    let sh = Shared::new(&cfg, problem.shape.bh(), chunk_len(), q, k, v);
    let mut starts = sh.forward_starts();
    let tasks = split(out, &sh.plan, cfg.m);
    let len = sh.state_len();
    tasks
        .into_par_iter()
        .zip(starts.par_chunks_mut(len))
        .enumerate()
        .for_each_init(
            || Scratch::new(&sh.ctx),
            |ws, (i, (o, s))| {
                let (head, g) = (sh.head(i / sh.plan.groups), i % sh.plan.groups);
                let base = g * sh.plan.group_len;
                for sp in sh.plan.spans(g, sh.ctx.l) {
                    let rows = (sp.t0 - base) * cfg.m..(sp.t0 - base + sp.len) * cfg.m;
                    chunk::forward(&sh.ctx, &head, sp, s, &mut o[rows], ws);
                }
            },
        );
    Ok(())
}

/// The chunked form is causal and the GEMM non-causal form is not: refuse the other.
fn require_causality(problem: &Problem, causal: bool) -> Result<(), AttnError> {
    if problem.causality.is_causal() != causal {
        let (form, kind) = if causal {
            ("chunked", "causal")
        } else {
            ("non-causal", "non-causal")
        };
        return Err(AttnError::InvalidArgument(format!(
            "the {form} form computes {kind} attention only"
        )));
    }
    Ok(())
}

/// O and the gradients (memory-efficient chunked backward) from q, k, v and `d_out`.
pub fn backward(
    problem: &Problem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d_out: &[f32],
) -> Result<(Vec<f32>, GradsF32), AttnError> {
    crate::fast::backward_allocating(backward_into, problem, q, k, v, d_out)
}

/// [`backward`] into `out` and `grads` (every element overwritten): a caller that runs
/// again reuses its buffers instead of faulting in fresh pages each time.
pub fn backward_into(
    problem: &Problem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d_out: &[f32],
    out: &mut [f32],
    grads: &mut GradsF32,
) -> Result<(), AttnError> {
    let out = ChunkOut::Compute(out);
    checked_backward(problem, true, (q, k, v, d_out), out, grads, backward_chunks)
}

/// The gradients (every element of `grads` overwritten) given `o`, the O of this
/// problem's forward (as a training step has it): the forward direction then skips its
/// three output products per chunk, about a third of its work. `o` must be that forward's
/// output; another O gives wrong gradients.
pub fn backward_from_output_into(
    problem: &Problem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d_out: &[f32],
    o: &[f32],
    grads: &mut GradsF32,
) -> Result<(), AttnError> {
    let out = ChunkOut::Given(o);
    checked_backward(problem, true, (q, k, v, d_out), out, grads, backward_chunks)
}

/// A backward's operands: q, k, v and d_out.
type Operands<'a> = (&'a [f32], &'a [f32], &'a [f32], &'a [f32]);

/// A GEMM form's backward over checked operands.
type BackwardBody = fn(&Problem, Operands, ChunkOut, &mut GradsF32) -> Result<(), AttnError>;

/// The checks every backward entry point of the GEMM forms makes (causality, operand and
/// buffer lengths, O's whether computed or given), then `body`.
fn checked_backward(
    problem: &Problem,
    causal: bool,
    ops: Operands,
    out: ChunkOut,
    grads: &mut GradsF32,
    body: BackwardBody,
) -> Result<(), AttnError> {
    require_causality(problem, causal)?;
    let (q, k, v, d_out) = ops;
    let o: &[f32] = match &out {
        ChunkOut::Compute(o) => o,
        ChunkOut::Given(o) => o,
    };
    check_backward_buffers(problem, q, k, v, d_out, o, grads)?;
    body(problem, ops, out, grads)
}

/// The two directions of the backward over the checked operands `(q, k, v, d_out)`.
fn backward_chunks(
    problem: &Problem,
    (q, k, v, d_out): Operands,
    out: ChunkOut,
    grads: &mut GradsF32,
) -> Result<(), AttnError> {
    let cfg = Config::new(problem);
    let bh = problem.shape.bh();
    let sh = Shared::new(&cfg, bh, chunk_len(), q, k, v);
    let (plan, c, d, m, l) = (sh.plan, cfg.c, cfg.d, cfg.m, sh.ctx.l);
    let state = sh.state_len();
    let mut gd = vec![0f32; bh * cfg.n];
    // ∂φ(Q), ∂φ(K) of the whole head for staged maps; a chunk's rows (in Scratch-like
    // per-task buffers) for fused ones.
    let staged_rows = if cfg.fused { 0 } else { bh * cfg.n * c };
    let mut dqf_all = vec![0f32; staged_rows];
    let mut dkf_all = vec![0f32; staged_rows];
    // ∂φ(K) rows, the chunks' own shares from the forward direction, completed in the
    // reverse one: in the whole-head buffer for staged maps, in ∂K's buffer for fused ones
    // (elementwise, so C = D), whose chain then runs chunk by chunk from a copy.
    fn dkf_tasks<'b>(
        fused: bool,
        dk: &'b mut [f32],
        dkf_all: &'b mut [f32],
        plan: &Plan,
        c: usize,
    ) -> Vec<&'b mut [f32]> {
        assert!(
            !fused || dk.len() == plan.bh * plan.n * c,
            "a fused map keeps C = D"
        );
        split(if fused { dk } else { dkf_all }, plan, c)
    }

    // Forward direction: O, gn (into dv), gd, ∂φ(Q) → ∂Q.
    let mut starts = sh.forward_starts();
    {
        let o_t = split_out(out, &plan, m);
        let g_t = split_ref(d_out, &plan, m);
        let gn_t = split(&mut grads.dv, &plan, m);
        let gd_t = split(&mut gd, &plan, 1);
        let dq_t = split(&mut grads.dq, &plan, d);
        let dqf_parts = split_staged(&mut dqf_all, &plan, c);
        let dkf_t = dkf_tasks(cfg.fused, &mut grads.dk, &mut dkf_all, &plan, c);
        o_t.into_par_iter()
            .zip(g_t)
            .zip(gn_t)
            .zip(gd_t)
            .zip(dq_t)
            .zip(dqf_parts)
            .zip(dkf_t)
            .zip(starts.par_chunks_mut(state))
            .enumerate()
            .for_each_init(
                || TaskBufs::new(&sh.ctx),
                |TaskBufs { ws, dphi: dqf_buf },
                 (i, (((((((mut o, g), gn), gdp), dq), dqf_head), dkf), s))| {
                    let (head, grp) = (sh.head(i / plan.groups), i % plan.groups);
                    let base = grp * plan.group_len;
                    let mut dqf_head = dqf_head;
                    for sp in plan.spans(grp, l) {
                        let r0 = sp.t0 - base;
                        let (rm_, rc) = (r0 * m..(r0 + sp.len) * m, r0 * c..(r0 + sp.len) * c);
                        let dqf = dphi_rows(&mut dqf_head, dqf_buf, rc.clone());
                        let fg = ForwardGrads {
                            o: o.rows(rm_.clone()),
                            g: &g[rm_.clone()],
                            gn: &mut gn[rm_],
                            gd: &mut gdp[r0..r0 + sp.len],
                            dqf,
                        };
                        let dkf_own = &mut dkf[rc.clone()];
                        chunk::backward_forward(&sh.ctx, &head, sp, s, fg, dkf_own, ws);
                        if cfg.fused {
                            fused_vjp(&cfg, head.q, sp, r0, &dqf_buf[..sp.len * c], dq);
                        }
                    }
                },
            );
    }
    drop(starts);

    // Reverse direction: R⁺ starts (from the end), then ∂φ(K) → ∂K and ∂V.
    let mut r_starts = reverse_starts(&sh, &grads.dv, &gd);
    {
        let dv_t = split(&mut grads.dv, &plan, m);
        let gd_t = split_ref(&gd, &plan, 1);
        let dkf_t = dkf_tasks(cfg.fused, &mut grads.dk, &mut dkf_all, &plan, c);
        dv_t.into_par_iter()
            .zip(gd_t)
            .zip(dkf_t)
            .zip(r_starts.par_chunks_mut(state))
            .enumerate()
            .for_each_init(
                || TaskBufs::new(&sh.ctx),
                |TaskBufs { ws, dphi: dkf_buf }, (i, (((dv, gdp), dkf), r))| {
                    let (head, grp) = (sh.head(i / plan.groups), i % plan.groups);
                    let base = grp * plan.group_len;
                    for sp in plan.spans(grp, l).rev() {
                        let r0 = sp.t0 - base;
                        let (rm_, rc) = (r0 * m..(r0 + sp.len) * m, r0 * c..(r0 + sp.len) * c);
                        let rg = ReverseGrads {
                            dv: &mut dv[rm_],
                            gd: &gdp[r0..r0 + sp.len],
                            dkf: &mut dkf[rc.clone()],
                        };
                        chunk::backward_reverse(&sh.ctx, &head, sp, r, rg, ws);
                        if cfg.fused {
                            // dkf is ∂K's own buffer here (C = D): the chain reads a copy.
                            let own = &mut dkf_buf[..sp.len * c];
                            own.copy_from_slice(&dkf[rc]);
                            fused_vjp(&cfg, head.k, sp, r0, own, dkf);
                        }
                    }
                },
            );
    }
    drop(r_starts);

    staged_vjp(&sh, &dqf_all, &dkf_all, grads);
    Ok(())
}

/// ∂Q, ∂K from the whole-head ∂φ(Q), ∂φ(K) of staged maps (nothing for fused maps, whose
/// chain ran chunk by chunk).
fn staged_vjp(sh: &Shared, dqf_all: &[f32], dkf_all: &[f32], grads: &mut GradsF32) {
    let cfg = sh.ctx.cfg;
    if cfg.fused {
        return;
    }
    let (nd, nc) = (cfg.n * cfg.d, cfg.n * cfg.c);
    grads
        .dq
        .par_chunks_mut(nd)
        .zip(grads.dk.par_chunks_mut(nd))
        .enumerate()
        .for_each(|(h, (dq, dk))| {
            let (head, f) = (sh.head(h), &sh.staged[h]);
            let span = h * nc..(h + 1) * nc;
            cfg.map.vjp_head(
                Operand::Query,
                head.q,
                &f.q,
                &dqf_all[span.clone()],
                cfg.n,
                dq,
            );
            cfg.map
                .vjp_head(Operand::Key, head.k, &f.k, &dkf_all[span], cfg.n, dk);
        });
}

/// Per-task buffers of the backward passes: a chunk's ∂φ rows (fused maps).
struct TaskBufs {
    ws: Scratch,
    dphi: Vec<f32>,
}

impl TaskBufs {
    fn new(ctx: &Ctx) -> Self {
        let rows = ctx.l * ctx.cfg.c;
        TaskBufs {
            ws: Scratch::new(ctx),
            dphi: vec![0f32; rows],
        }
    }
}

/// ∂φ rows `rc` of a task: in the whole-head buffer (staged maps) or the task's own.
fn dphi_rows<'a>(
    staged: &'a mut Option<&mut [f32]>,
    own: &'a mut [f32],
    rc: std::ops::Range<usize>,
) -> &'a mut [f32] {
    match staged.as_deref_mut() {
        Some(all) => &mut all[rc],
        None => &mut own[..rc.len()],
    }
}

/// ∂x rows of a chunk from ∂φ(x) rows (fused elementwise maps); `r0`: the chunk's first row
/// within the task's slice `dx`. φ' comes from x in the same pass (no φ kept or recomputed).
fn fused_vjp(cfg: &Config, x: &[f32], sp: Span, r0: usize, dphi: &[f32], dx: &mut [f32]) {
    let d = cfg.d;
    kernels::elementwise_vjp_of_x_detected(
        cfg.map.map(),
        &x[sp.t0 * d..(sp.t0 + sp.len) * d],
        dphi,
        &mut dx[r0 * d..(r0 + sp.len) * d],
    );
}

/// Each group's R⁺ at its end (the state of all later tokens), reverse scan over groups.
fn reverse_starts(sh: &Shared, gn: &[f32], gd: &[f32]) -> Vec<f32> {
    let (plan, len, cfg) = (sh.plan, sh.state_len(), sh.ctx.cfg);
    let mut starts = vec![0f32; plan.bh * plan.groups * len];
    if plan.groups == 1 {
        return starts;
    }
    // Group g's own share (relative to its first token) lands in slot g−1.
    starts
        .par_chunks_mut(len)
        .enumerate()
        .filter(|(i, _)| i % plan.groups + 1 < plan.groups)
        .for_each_init(
            || Scratch::new(&sh.ctx),
            |ws, (i, r)| {
                let (h, g) = (i / plan.groups, i % plan.groups + 1);
                let head = sh.head(h);
                for sp in plan.spans(g, sh.ctx.l).rev() {
                    let t = h * cfg.n + sp.t0;
                    let rows = &gn[t * cfg.m..(t + sp.len) * cfg.m];
                    chunk::reverse_state_only(&sh.ctx, &head, sp, r, rows, &gd[t..t + sp.len], ws);
                }
            },
        );
    for head in starts.chunks_mut(plan.groups * len) {
        for g in (0..plan.groups - 1).rev() {
            let w = cfg.decay.powi(plan.group_tokens(g + 1) as i32);
            let (lo, hi) = head.split_at_mut((g + 1) * len);
            for (x, &p) in lo[g * len..].iter_mut().zip(&hi[..len]) {
                *x += if cfg.has_decay { w * p } else { p };
            }
        }
    }
    starts
}
