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
mod tasks;

pub use noncausal::{
    backward as noncausal_backward,
    backward_from_output_into as noncausal_backward_from_output_into,
    backward_into as noncausal_backward_into, forward as noncausal_forward,
    forward_into as noncausal_forward_into,
};

use crate::entry::ChunkOut;
use crate::entry::{f32_entry_points, ForwardOperands, GradsF32, Operands};
use chunk::{ForwardGrads, ReverseGrads, Scratch};
use linattn_core::Problem;
use rayon::prelude::*;
use tasks::{
    add_decayed, dphi_rows, fused_vjp, split, split_out, split_ref, split_staged, staged_vjp, Plan,
    Shared, TaskBufs,
};

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

/// Each group's starting S⁺ (forward direction): its own contribution in parallel, then
/// a scan over the groups of each head. One zero state per head when a head is one group.
fn forward_starts(sh: &Shared) -> Vec<f32> {
    let (plan, len) = (sh.plan, sh.state_len());
    // Group g's own share lands in slot g+1; slot 0 of each head stays zero.
    let mut starts = sh.task_states(
        |g| g + 1 < plan.groups,
        |ws, h, g, s| sh.own_share(ws, h, g, s),
    );
    if plan.groups == 1 {
        return starts;
    }
    // Rotate the shares into place: slot g+1 holds group g's share, then prefix-scan.
    for head in starts.chunks_mut(plan.groups * len) {
        head.rotate_right(len);
        head[..len].fill(0.0);
        for g in 1..plan.groups {
            let (done, rest) = head.split_at_mut(g * len);
            let tokens = plan.group_tokens(g - 1);
            add_decayed(
                &sh.ctx.cfg,
                &mut rest[..len],
                &done[(g - 1) * len..],
                tokens,
            );
        }
    }
    starts
}

f32_entry_points! {
    causal: Some(true),
    /// O (`[B,H,N,M]`) of causal linear attention in f32 by the chunkwise form.
    forward: forward_chunks,
    /// O and the gradients (memory-efficient chunked backward) from q, k, v and `d_out`.
    backward: backward_chunks,
    /// The gradients (every element of `grads` overwritten) given `o`, the O of this
    /// problem's forward (as a training step has it): the forward direction then skips its
    /// three output products per chunk, about a third of its work. `o` must be that forward's
    /// output; another O gives wrong gradients.
    from_output,
}

/// The chunks of every head over the checked operands, in tasks of (head, group).
fn forward_chunks(problem: &Problem, ops: ForwardOperands, out: &mut [f32]) {
    let sh = Shared::new(problem, chunk_len(), ops);
    let cfg = &sh.ctx.cfg;
    let mut starts = forward_starts(&sh);
    let tasks = split(out, &sh.plan, cfg.m);
    let len = sh.state_len();
    tasks
        .into_par_iter()
        .zip(starts.par_chunks_mut(len))
        .enumerate()
        .for_each_init(
            || Scratch::new(&sh.ctx),
            |ws, (i, (o, s))| {
                let (head, g) = sh.task(i);
                for ch in sh.plan.task_chunks(g, sh.ctx.l) {
                    chunk::forward(&sh.ctx, &head, ch.sp, s, &mut o[ch.rows(cfg.m)], ws);
                }
            },
        );
}

/// The two directions of the backward over the checked operands `(q, k, v, d_out)`.
fn backward_chunks(
    problem: &Problem,
    (q, k, v, d_out): Operands,
    out: ChunkOut,
    grads: &mut GradsF32,
) {
    let sh = Shared::new(problem, chunk_len(), (q, k, v));
    let (cfg, bh) = (&sh.ctx.cfg, sh.plan.bh);
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
    let mut starts = forward_starts(&sh);
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
                    let (head, grp) = sh.task(i);
                    let mut dqf_head = dqf_head;
                    for ch in plan.task_chunks(grp, l) {
                        let (rm_, rc) = (ch.rows(m), ch.rows(c));
                        let dqf = dphi_rows(&mut dqf_head, dqf_buf, rc.clone());
                        let fg = ForwardGrads {
                            o: o.rows(rm_.clone()),
                            g: &g[rm_.clone()],
                            gn: &mut gn[rm_],
                            gd: &mut gdp[ch.rows(1)],
                            dqf,
                        };
                        let dkf_own = &mut dkf[rc.clone()];
                        chunk::backward_forward(&sh.ctx, &head, ch.sp, s, fg, dkf_own, ws);
                        if cfg.fused {
                            fused_vjp(cfg, head.q, ch, &dqf_buf[..ch.sp.len * c], dq);
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
                    let (head, grp) = sh.task(i);
                    for ch in plan.task_chunks(grp, l).rev() {
                        let rc = ch.rows(c);
                        let rg = ReverseGrads {
                            dv: &mut dv[ch.rows(m)],
                            gd: &gdp[ch.rows(1)],
                            dkf: &mut dkf[rc.clone()],
                        };
                        chunk::backward_reverse(&sh.ctx, &head, ch.sp, r, rg, ws);
                        if cfg.fused {
                            // dkf is ∂K's own buffer here (C = D): the chain reads a copy.
                            let own = &mut dkf_buf[..ch.sp.len * c];
                            own.copy_from_slice(&dkf[rc]);
                            fused_vjp(cfg, head.k, ch, own, dkf);
                        }
                    }
                },
            );
    }
    drop(r_starts);

    staged_vjp(&sh, &dqf_all, &dkf_all, grads);
}

/// Each group's R⁺ at its end (the state of all later tokens), reverse scan over groups.
fn reverse_starts(sh: &Shared, gn: &[f32], gd: &[f32]) -> Vec<f32> {
    let (plan, len, cfg) = (sh.plan, sh.state_len(), &sh.ctx.cfg);
    // Group g+1's own share (relative to its first token) lands in slot g.
    let mut starts = sh.task_states(
        |g| g + 1 < plan.groups,
        |ws, h, g, r| {
            let head = sh.head(h);
            for sp in plan.spans(g + 1, sh.ctx.l).rev() {
                let t = h * cfg.n + sp.t0;
                let rows = &gn[t * cfg.m..(t + sp.len) * cfg.m];
                chunk::reverse_state_only(&sh.ctx, &head, sp, r, rows, &gd[t..t + sp.len], ws);
            }
        },
    );
    for head in starts.chunks_mut(plan.groups * len) {
        for g in (0..plan.groups - 1).rev() {
            let (lo, hi) = head.split_at_mut((g + 1) * len);
            let tokens = plan.group_tokens(g + 1);
            add_decayed(cfg, &mut lo[g * len..(g + 1) * len], &hi[..len], tokens);
        }
    }
    starts
}
