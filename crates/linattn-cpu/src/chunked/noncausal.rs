//! `cpu/noncausal/f32` on GEMMs (SPEC §2 non-causal, §4 with full sums, §6 weights
//! `w_j = λ^{N−1−j}`), over the same tasks and chunk machinery as the causal form, with
//! the normaliser beside the value columns as there ([`super::chunk`]).
//!
//! * forward: `S = (diag(w)φ(K))ᵀV`, `z = φ(K)ᵀw` reduced per task then per head,
//!   `O = φ(Q)S / (φ(Q)z + ε)`;
//! * backward: `∂φ(Q) = gn Sᵀ + gd zᵀ`, `R = φ(Q)ᵀgn`, `r = φ(Q)ᵀgd` (reduced the same way),
//!   `∂φ(K) = diag(w)(V Rᵀ + 1 rᵀ)`, `∂V = diag(w)φ(K)R`.
//!
//! S and R enter the products with Sᵀ and Rᵀ as copies transposed once per task (see
//! [`crate::gemm::transpose_into`]); the block operands, each used once, stay row-major.
//!
//! A task's share of S runs the causal recurrence over its chunks (weights `λ^{e−1−j}`
//! for its last token e−1), and the reduction scales it by `λ^{N−e}`. Within a chunk at
//! `t0` of length `len`, `w_{t0+t} = λ^{N−t0−len}·λ^{len−1−t}`: the backward's row scaling
//! uses `λ^{len−1−t}` and the scalar goes into the GEMM's α.

use super::chunk::{
    self, add_norm_share, denominators, norm_grads, normalise_rows, output_gradients, rm,
    scale_rows, scaled, state_norm, state_values, state_values_t, values, Ctx, Entering, Head,
    Scratch, Span,
};
use super::tasks::{
    dphi_rows, fused_vjp, split, split_out, split_ref, split_staged, staged_vjp, Shared, TaskBufs,
};
use crate::entry::{f32_entry_points, ChunkOut, ForwardOperands, GradsF32, Operands};
use crate::gemm::sgemm;
use crate::maps::Operand;
use linattn_core::Problem;
use rayon::prelude::*;

/// Rows per block: no masked L×L product here, so longer blocks only amortise the packing
/// of S⁺ and R⁺ by the GEMM engine. One run of `examples/chunked_timing.rs` (forward,
/// shared 2-core machine): 64 → 242 ms, 256 → 152 ms, 1024 → 173 ms.
pub const BLOCK: usize = 256;

/// `LINATTN_CPU_BLOCK` overrides [`BLOCK`] (for the block-size measurements only).
fn block_len() -> usize {
    std::env::var("LINATTN_CPU_BLOCK")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&l| l > 0)
        .unwrap_or(BLOCK)
}

/// `λ^{N−t0−len}`: the weight of a chunk's last key.
fn tail_weight(ctx: &Ctx, sp: Span) -> f32 {
    let after = ctx.cfg.n - sp.t0 - sp.len;
    (ctx.cfg.decay as f64).powi(after as i32) as f32
}

/// Sums the tasks' C×M' shares into one per head, group g's scaled by `λ^{N−e_g}` (e_g:
/// the end of its tokens) when `weighted`.
fn reduce_heads(sh: &Shared, parts: Vec<f32>, weighted: bool) -> Vec<f32> {
    let (len, plan, cfg) = (sh.state_len(), sh.plan, &sh.ctx.cfg);
    parts
        .chunks(plan.groups * len)
        .flat_map(|head| {
            let mut total = vec![0f32; len];
            for (g, part) in head.chunks(len).enumerate() {
                let after = plan.n - g * plan.group_len - plan.group_tokens(g);
                let w = if weighted && cfg.has_decay {
                    (cfg.decay as f64).powi(after as i32) as f32
                } else {
                    1.0
                };
                total.iter_mut().zip(part).for_each(|(t, &p)| *t += w * p);
            }
            total
        })
        .collect()
}

/// `S` and z of every head (`B·H × C × M'`).
fn head_states(sh: &Shared) -> Vec<f32> {
    let parts = sh.task_states(|_| true, |ws, h, g, s| sh.own_share(ws, h, g, s));
    reduce_heads(sh, parts, true)
}

/// What a task of a pass reads of its head: the inputs, the head's full state (S, or R in
/// the second pass) from `states` and its normaliser column apart, contiguous (zeros when
/// not normalised); and its group.
struct TaskHead<'a> {
    head: Head<'a>,
    group: usize,
    s: &'a [f32],
    z: Vec<f32>,
}

impl<'a> TaskHead<'a> {
    fn new(sh: &'a Shared, states: &'a [f32], task: usize) -> Self {
        let ((h, group), len) = (sh.plan.task(task), sh.state_len());
        let s = &states[h * len..(h + 1) * len];
        let mut z = vec![0f32; sh.ctx.cfg.c];
        state_norm(&sh.ctx, s, &mut z);
        TaskHead {
            head: sh.head(h),
            group,
            s,
            z,
        }
    }
}

/// O rows of block `sp` (φ(Q)S, then divided by the denominators `den`) from its φ(Q) rows.
fn block_output(ctx: &Ctx, sp: Span, qf: &[f32], s: &[f32], den: &[f32], o: &mut [f32]) {
    let (c, m) = (ctx.cfg.c, ctx.cfg.m);
    sgemm(1.0, rm(qf, sp.len, c), state_values(ctx, s), 0.0, o, m);
    normalise_rows(ctx, o, den);
}

f32_entry_points! {
    causal: Some(false),
    /// O (`[B,H,N,M]`) of non-causal linear attention in f32 on GEMMs.
    forward: forward_blocks,
    /// O and the gradients (SPEC §4 with full sums) from q, k, v and `d_out`.
    backward: backward_blocks,
    /// The gradients (every element of `grads` overwritten) given `o`, the O of this
    /// problem's forward: the first pass then skips its φ(Q)·S product per block. `o` must be
    /// that forward's output; another O gives wrong gradients.
    from_output,
}

/// The blocks of every head over the checked operands: the head states, then O.
fn forward_blocks(problem: &Problem, ops: ForwardOperands, out: &mut [f32]) {
    let sh = Shared::new(problem, block_len(), ops);
    let cfg = &sh.ctx.cfg;
    let states = head_states(&sh);
    let (ctx, plan, m) = (&sh.ctx, sh.plan, cfg.m);
    split(out, &plan, m)
        .into_par_iter()
        .enumerate()
        .for_each_init(
            || Scratch::new(ctx),
            |ws, (i, o)| {
                let TaskHead { head, group, s, z } = TaskHead::new(&sh, &states, i);
                for ch in plan.task_chunks(group, ctx.l) {
                    let sp = ch.sp;
                    let qf = chunk::features_of(ctx, &head, Operand::Query, sp, &mut ws.qf);
                    denominators(ctx, &head, sp, (qf, |_| 1.0), None, &z, &mut ws.den);
                    block_output(ctx, sp, qf, s, &ws.den, &mut o[ch.rows(m)]);
                }
            },
        );
}

/// The two passes of the backward over the checked operands `(q, k, v, d_out)`.
fn backward_blocks(
    problem: &Problem,
    (q, k, v, d_out): Operands,
    out: ChunkOut,
    grads: &mut GradsF32,
) {
    let sh = Shared::new(problem, block_len(), (q, k, v));
    let cfg = &sh.ctx.cfg;
    let (ctx, plan) = (&sh.ctx, sh.plan);
    let (c, d, m, len) = (cfg.c, cfg.d, cfg.m, sh.state_len());
    let states = head_states(&sh);
    let mut gd = vec![0f32; plan.bh * plan.n];
    let mut dphi = vec![0f32; if cfg.fused { 0 } else { plan.bh * plan.n * c }];

    // O, gn (parked in ∂V), gd, ∂φ(Q) = gn Sᵀ + gd zᵀ → ∂Q, and each task's share of (R, r).
    let mut r_parts = vec![0f32; plan.bh * plan.groups * len];
    split_out(out, &plan, m)
        .into_par_iter()
        .zip(split_ref(d_out, &plan, m))
        .zip(split(&mut grads.dv, &plan, m))
        .zip(split(&mut gd, &plan, 1))
        .zip(split(&mut grads.dq, &plan, d))
        .zip(split_staged(&mut dphi, &plan, c))
        .zip(r_parts.par_chunks_mut(len))
        .enumerate()
        .for_each_init(
            || TaskBufs::new(ctx),
            |TaskBufs { ws, dphi: own }, (i, ((((((mut o, g), gn), gdp), dq), mut dqf_all), r))| {
                let TaskHead { head, group, s, z } = TaskHead::new(&sh, &states, i);
                let s_t = state_values_t(ctx, s, &mut ws.st);
                for ch in plan.task_chunks(group, ctx.l) {
                    let (sp, rm_, rc) = (ch.sp, ch.rows(m), ch.rows(c));
                    let qf = chunk::features_of(ctx, &head, Operand::Query, sp, &mut ws.qf);
                    denominators(ctx, &head, sp, (qf, |_| 1.0), None, &z, &mut ws.den);
                    let o: &[f32] = match o.rows(rm_.clone()) {
                        ChunkOut::Compute(o) => {
                            block_output(ctx, sp, qf, s, &ws.den, o);
                            o
                        }
                        ChunkOut::Given(o) => o,
                    };
                    let (gn, gd) = (&mut gn[rm_.clone()], &mut gdp[ch.rows(1)]);
                    output_gradients(ctx, sp.len, &ws.den, o, &g[rm_], gn, gd);
                    let dqf = &mut dphi_rows(&mut dqf_all, own, rc)[..sp.len * c];
                    let (gn, gd_rows) = (rm(gn, sp.len, m), &*gd);
                    let gd = norm_grads(ctx, gd_rows);
                    sgemm(1.0, gn, s_t, 0.0, dqf, c);
                    add_norm_share(ctx, dqf, |t| gd_rows[t], &z);
                    let rows = Entering {
                        values: gn,
                        norm: gd,
                    };
                    chunk::absorb(ctx, qf, |_| 0, rows, 1.0, &mut ws.tmp, r);
                    if cfg.fused {
                        fused_vjp(cfg, head.q, ch, &own[..sp.len * c], dq);
                    }
                }
            },
        );
    let r_heads = reduce_heads(&sh, r_parts, false);

    // ∂φ(K) = diag(w)(V Rᵀ + 1 rᵀ) → ∂K, ∂V = diag(w)φ(K)R (over the parked gn).
    let mut dkf_all = vec![0f32; dphi.len()];
    split(&mut grads.dv, &plan, m)
        .into_par_iter()
        .zip(split(&mut grads.dk, &plan, d))
        .zip(split_staged(&mut dkf_all, &plan, c))
        .enumerate()
        .for_each_init(
            || TaskBufs::new(ctx),
            |TaskBufs { ws, dphi: own }, (i, ((dv, dk), mut dkf_head))| {
                let TaskHead {
                    head,
                    group,
                    s: r,
                    z: rz,
                } = TaskHead::new(&sh, &r_heads, i);
                let r_t = state_values_t(ctx, r, &mut ws.st);
                for ch in plan.task_chunks(group, ctx.l) {
                    let (sp, rc) = (ch.sp, ch.rows(c));
                    let w = tail_weight(ctx, sp);
                    let dkf = &mut dphi_rows(&mut dkf_head, own, rc)[..sp.len * c];
                    sgemm(w, values(ctx, &head, sp), r_t, 0.0, dkf, c);
                    add_norm_share(ctx, dkf, |_| w, &rz);
                    scale_rows(ctx, dkf, c, |t| sp.len - 1 - t);
                    let kf = chunk::features_of(ctx, &head, Operand::Key, sp, &mut ws.kf);
                    let kw = scaled(ctx, kf, sp.len, c, |t| sp.len - 1 - t, &mut ws.tmp.scaled);
                    let kw = rm(kw, sp.len, c);
                    sgemm(w, kw, state_values(ctx, r), 0.0, &mut dv[ch.rows(m)], m);
                    if cfg.fused {
                        fused_vjp(cfg, head.k, ch, &own[..sp.len * c], dk);
                    }
                }
            },
        );
    staged_vjp(&sh, &dphi, &dkf_all, grads);
}
