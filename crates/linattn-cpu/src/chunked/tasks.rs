//! How a call of a GEMM form is cut into tasks of (head, group of consecutive chunks), and
//! what its tasks share: the plan, the per-task slices of every buffer, the read-only
//! inputs (φ of staged maps), the per-task states, and the chain through φ at the end.

use super::chunk::{self, Ctx, Head, Scratch, Span};
use crate::entry::GradsF32;
use crate::entry::{ChunkOut, ForwardOperands};
use crate::fast::{kernels, Config};
use crate::maps::{Featurised, Operand};
use linattn_core::Problem;
use rayon::prelude::*;
use std::ops::Range;

/// How a call is cut into tasks.
#[derive(Clone, Copy)]
pub(super) struct Plan {
    pub n: usize,
    pub bh: usize,
    /// Tokens per group (a multiple of the chunk length).
    pub group_len: usize,
    pub groups: usize,
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
    pub fn spans(&self, g: usize, l: usize) -> impl DoubleEndedIterator<Item = Span> {
        let start = g * self.group_len;
        let end = (start + self.group_len).min(self.n);
        (start..end).step_by(l).map(move |t0| Span {
            t0,
            len: l.min(end - t0),
        })
    }

    /// The head and group of task `i` (tasks are in order head, group).
    pub fn task(&self, i: usize) -> (usize, usize) {
        (i / self.groups, i % self.groups)
    }

    /// The chunks of group `g`, in order, each placed within the group's rows.
    pub fn task_chunks(&self, g: usize, l: usize) -> impl DoubleEndedIterator<Item = TaskChunk> {
        let base = g * self.group_len;
        self.spans(g, l).map(move |sp| TaskChunk {
            sp,
            r0: sp.t0 - base,
        })
    }

    pub fn group_tokens(&self, g: usize) -> usize {
        (self.n - g * self.group_len).min(self.group_len)
    }
}

/// Cuts a `[B·H, N, width]` buffer into the per-task pieces, in task order (head, group).
pub(super) fn split<'a, T>(buf: &'a mut [T], plan: &Plan, width: usize) -> Vec<&'a mut [T]> {
    buf.chunks_mut(plan.n * width)
        .flat_map(|head| head.chunks_mut(plan.group_len * width))
        .collect()
}

/// Read-only counterpart of [`split`].
pub(super) fn split_ref<'a, T>(buf: &'a [T], plan: &Plan, width: usize) -> Vec<&'a [T]> {
    buf.chunks(plan.n * width)
        .flat_map(|head| head.chunks(plan.group_len * width))
        .collect()
}

/// [`split`] of the backward's O rows, computed or given.
pub(super) fn split_out<'a>(out: ChunkOut<'a>, plan: &Plan, m: usize) -> Vec<ChunkOut<'a>> {
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
pub(super) fn split_staged<'a>(
    buf: &'a mut [f32],
    plan: &Plan,
    c: usize,
) -> Vec<Option<&'a mut [f32]>> {
    if buf.is_empty() {
        return (0..plan.bh * plan.groups).map(|_| None).collect();
    }
    split(buf, plan, c).into_iter().map(Some).collect()
}

/// Everything that is read-only across tasks.
pub(super) struct Shared<'a> {
    pub ctx: Ctx,
    pub plan: Plan,
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    staged: Vec<Featurised<f32>>,
}

impl<'a> Shared<'a> {
    /// A call of `problem` on `(q, k, v)` cut into chunks of `l` tokens (φ staged first for
    /// maps that are not elementwise).
    pub fn new(problem: &Problem, l: usize, (q, k, v): ForwardOperands<'a>) -> Self {
        let (cfg, bh) = (Config::new(problem), problem.shape.bh());
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

    pub fn head(&self, h: usize) -> Head<'_> {
        let cfg = &self.ctx.cfg;
        let (nd, nm) = (cfg.n * cfg.d, cfg.n * cfg.m);
        Head {
            q: &self.q[h * nd..(h + 1) * nd],
            k: &self.k[h * nd..(h + 1) * nd],
            v: &self.v[h * nm..(h + 1) * nm],
            staged: self.staged.get(h),
        }
    }

    /// Task `i`'s head and group.
    pub fn task(&self, i: usize) -> (Head<'_>, usize) {
        let (h, g) = self.plan.task(i);
        (self.head(h), g)
    }

    pub fn state_len(&self) -> usize {
        self.ctx.cfg.c * self.ctx.mp
    }

    /// One zeroed C×M' state per task; `fill(ws, h, g, s)` fills, in parallel, the state of
    /// every task whose group `g` is `wanted`.
    pub fn task_states(
        &self,
        wanted: impl Fn(usize) -> bool + Sync,
        fill: impl Fn(&mut Scratch, usize, usize, &mut [f32]) + Sync,
    ) -> Vec<f32> {
        let (plan, len) = (self.plan, self.state_len());
        let mut states = vec![0f32; plan.bh * plan.groups * len];
        states
            .par_chunks_mut(len)
            .enumerate()
            .filter(|(i, _)| wanted(plan.task(*i).1))
            .for_each_init(
                || Scratch::new(&self.ctx),
                |ws, (i, s)| {
                    let (h, g) = plan.task(i);
                    fill(ws, h, g, s)
                },
            );
        states
    }

    /// Group `g` of head `h`'s own share of the head's state: its chunks from a zero state.
    pub fn own_share(&self, ws: &mut Scratch, h: usize, g: usize, s: &mut [f32]) {
        let head = self.head(h);
        for sp in self.plan.spans(g, self.ctx.l) {
            chunk::state_only(&self.ctx, &head, sp, s, ws);
        }
    }
}

/// A chunk of a task: its span in the head, and its first row within the task's slices.
#[derive(Clone, Copy)]
pub(super) struct TaskChunk {
    pub sp: Span,
    pub r0: usize,
}

impl TaskChunk {
    /// Its rows of a task's slice `width` elements wide.
    pub fn rows(&self, width: usize) -> Range<usize> {
        self.r0 * width..(self.r0 + self.sp.len) * width
    }
}

/// `dst += λ^tokens · src` (λ skipped without decay): a state carried past `tokens` tokens.
pub(super) fn add_decayed(cfg: &Config, dst: &mut [f32], src: &[f32], tokens: usize) {
    let w = cfg.decay.powi(tokens as i32);
    for (x, &p) in dst.iter_mut().zip(src) {
        *x += if cfg.has_decay { w * p } else { p };
    }
}

/// ∂Q, ∂K from the whole-head ∂φ(Q), ∂φ(K) of staged maps (nothing for fused maps, whose
/// chain ran chunk by chunk).
pub(super) fn staged_vjp(sh: &Shared, dqf_all: &[f32], dkf_all: &[f32], grads: &mut GradsF32) {
    let cfg = &sh.ctx.cfg;
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
pub(super) struct TaskBufs {
    pub ws: Scratch,
    pub dphi: Vec<f32>,
}

impl TaskBufs {
    pub fn new(ctx: &Ctx) -> Self {
        let rows = ctx.l * ctx.cfg.c;
        TaskBufs {
            ws: Scratch::new(ctx),
            dphi: vec![0f32; rows],
        }
    }
}

/// ∂φ rows `rc` of a task: in the whole-head buffer (staged maps) or the task's own.
pub(super) fn dphi_rows<'a>(
    staged: &'a mut Option<&mut [f32]>,
    own: &'a mut [f32],
    rc: std::ops::Range<usize>,
) -> &'a mut [f32] {
    match staged.as_deref_mut() {
        Some(all) => &mut all[rc],
        None => &mut own[..rc.len()],
    }
}

/// ∂x rows of chunk `ch` from its ∂φ(x) rows (fused elementwise maps) into its rows of the
/// task's slice `dx`. φ' comes from x in the same pass (no φ kept or recomputed).
pub(super) fn fused_vjp(cfg: &Config, x: &[f32], ch: TaskChunk, dphi: &[f32], dx: &mut [f32]) {
    let (d, sp) = (cfg.d, ch.sp);
    kernels::elementwise_vjp_of_x_detected(
        cfg.map.map(),
        &x[sp.t0 * d..(sp.t0 + sp.len) * d],
        dphi,
        &mut dx[ch.rows(d)],
    );
}
