//! `cpu/noncausal/f32` on GEMMs (SPEC §2 non-causal, §4 with full sums, §6 weights
//! `w_j = λ^{N−1−j}`), over the same tasks and chunk machinery as the causal form.
//!
//! * forward: `S⁺ = (diag(w)φ(K))ᵀV⁺` reduced per task then per head, `O⁺ = φ(Q)S⁺`;
//! * backward: `∂φ(Q) = G⁺S⁺ᵀ`, `R⁺ = φ(Q)ᵀG⁺` (reduced the same way),
//!   `∂φ(K) = diag(w)V⁺R⁺ᵀ`, `∂V = diag(w)φ(K)R`.
//!
//! Within a chunk at `t0` of length `len`, `w_{t0+t} = λ^{N−t0−len}·λ^{len−1−t}`: the
//! chunk's row scaling uses `λ^{len−1−t}` and the scalar goes into the GEMM's α.

use super::chunk::{self, fill_gaug, fill_vaug, rm, scaled, Ctx, ForwardGrads, Scratch, Span};
use super::{dphi_rows, require_causality, split, split_ref, split_staged, Shared, TaskBufs};
use crate::fast::{check_backward_buffers, check_len, check_operands, Config, GradsF32};
use crate::gemm::{sgemm, MatRef};
use linattn_core::{AttnError, Problem};
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

/// Sums one C×M' contribution per task into one per head.
fn reduce_heads(sh: &Shared, parts: Vec<f32>) -> Vec<f32> {
    let len = sh.state_len();
    parts
        .chunks(sh.plan.groups * len)
        .flat_map(|head| {
            let mut total = vec![0f32; len];
            for part in head.chunks(len) {
                total.iter_mut().zip(part).for_each(|(t, &p)| *t += p);
            }
            total
        })
        .collect()
}

/// `S⁺` of every head (`B·H × C × M'`).
fn head_states(sh: &Shared) -> Vec<f32> {
    let (ctx, plan, len) = (&sh.ctx, sh.plan, sh.state_len());
    let (c, mp) = (ctx.cfg.c, ctx.mp);
    let mut parts = vec![0f32; plan.bh * plan.groups * len];
    parts.par_chunks_mut(len).enumerate().for_each_init(
        || Scratch::new(ctx),
        |ws, (i, s)| {
            let head = sh.head(i / plan.groups);
            for sp in plan.spans(i % plan.groups, ctx.l) {
                let kf = chunk::key_features(ctx, &head, sp, &mut ws.kf);
                fill_vaug(ctx, &head, sp, &mut ws.vaug);
                let kw = scaled(ctx, kf, sp.len, c, |t| sp.len - 1 - t, &mut ws.scaled);
                let v = rm(&ws.vaug[..sp.len * mp], sp.len, mp);
                sgemm(tail_weight(ctx, sp), rm(kw, sp.len, c).t(), v, 1.0, s, mp);
            }
        },
    );
    reduce_heads(sh, parts)
}

/// `O⁺ = φ(Q)S⁺` of a chunk into `oaug`.
fn readout(ctx: &Ctx, qf: &[f32], len: usize, s: &[f32], oaug: &mut [f32]) {
    let (c, mp) = (ctx.cfg.c, ctx.mp);
    sgemm(
        1.0,
        rm(qf, len, c),
        rm(s, c, mp),
        0.0,
        &mut oaug[..len * mp],
        mp,
    );
}

/// O (`[B,H,N,M]`) of non-causal linear attention in f32 on GEMMs.
pub fn forward(problem: &Problem, q: &[f32], k: &[f32], v: &[f32]) -> Result<Vec<f32>, AttnError> {
    crate::fast::forward_allocating(forward_into, problem, q, k, v)
}

/// [`forward`] into `out` (`[B,H,N,M]`, every element overwritten).
pub fn forward_into(
    problem: &Problem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
) -> Result<(), AttnError> {
    require_causality(problem, false)?;
    let (_, v_len) = check_operands(problem, q, k, v)?;
    check_len("out", out.len(), v_len)?;
    let cfg = Config::new(problem);
    let sh = Shared::new(&cfg, problem.shape.bh(), block_len(), q, k, v);
    let states = head_states(&sh);
    let (ctx, plan, m) = (&sh.ctx, sh.plan, sh.ctx.cfg.m);
    split(out, &plan, m)
        .into_par_iter()
        .enumerate()
        .for_each_init(
            || Scratch::new(ctx),
            |ws, (i, o)| {
                let h = i / plan.groups;
                let head = sh.head(h);
                let s = &states[h * sh.state_len()..(h + 1) * sh.state_len()];
                let base = (i % plan.groups) * plan.group_len;
                for sp in plan.spans(i % plan.groups, ctx.l) {
                    let qf = chunk::query_features(ctx, &head, sp, &mut ws.qf);
                    readout(ctx, qf, sp.len, s, &mut ws.oaug);
                    let rows = (sp.t0 - base) * m..(sp.t0 - base + sp.len) * m;
                    let oaug = &ws.oaug[..sp.len * ctx.mp];
                    chunk::write_outputs(ctx, &head, sp, oaug, &mut o[rows], None);
                }
            },
        );
    Ok(())
}

/// O and the gradients (SPEC §4 with full sums) from q, k, v and `d_out`.
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
    require_causality(problem, false)?;
    check_backward_buffers(problem, q, k, v, d_out, out, grads)?;
    let cfg = Config::new(problem);
    let sh = Shared::new(&cfg, problem.shape.bh(), block_len(), q, k, v);
    let (ctx, plan) = (&sh.ctx, sh.plan);
    let (c, d, m, mp, len) = (ctx.cfg.c, ctx.cfg.d, ctx.cfg.m, ctx.mp, sh.state_len());
    let states = head_states(&sh);
    let mut gd = vec![0f32; plan.bh * plan.n];
    let mut dphi = vec![
        0f32;
        if ctx.cfg.fused {
            0
        } else {
            plan.bh * plan.n * c
        }
    ];

    // O, gn (parked in ∂V), gd, ∂φ(Q) = G⁺S⁺ᵀ → ∂Q, and each task's share of R⁺.
    let mut r_parts = vec![0f32; plan.bh * plan.groups * len];
    split(out, &plan, m)
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
            |TaskBufs { ws, dphi: own }, (i, ((((((o, g), gn), gdp), dq), mut dqf_all), r))| {
                let h = i / plan.groups;
                let head = sh.head(h);
                let s = &states[h * len..(h + 1) * len];
                let base = (i % plan.groups) * plan.group_len;
                for sp in plan.spans(i % plan.groups, ctx.l) {
                    let r0 = sp.t0 - base;
                    let (rm_, rc) = (r0 * m..(r0 + sp.len) * m, r0 * c..(r0 + sp.len) * c);
                    let qf = chunk::query_features(ctx, &head, sp, &mut ws.qf);
                    readout(ctx, qf, sp.len, s, &mut ws.oaug);
                    let mut fg = ForwardGrads {
                        o: &mut o[rm_.clone()],
                        g: &g[rm_.clone()],
                        gn: &mut gn[rm_],
                        gd: &mut gdp[r0..r0 + sp.len],
                        dqf: dphi_rows(&mut dqf_all, own, rc),
                    };
                    chunk::output_gradients(ctx, &head, sp, &ws.oaug[..sp.len * mp], &mut fg);
                    fill_gaug(ctx, fg.gn, fg.gd, sp.len, &mut ws.gaug);
                    let gaug = rm(&ws.gaug[..sp.len * mp], sp.len, mp);
                    let s_t = MatRef::row_major(s, c, mp, mp).t();
                    sgemm(1.0, gaug, s_t, 0.0, &mut fg.dqf[..sp.len * c], c);
                    sgemm(1.0, rm(qf, sp.len, c).t(), gaug, 1.0, r, mp);
                    if ctx.cfg.fused {
                        super::fused_vjp(ctx.cfg, head.q, sp, r0, &own[..sp.len * c], dq);
                    }
                }
            },
        );
    let r_heads = reduce_heads(&sh, r_parts);

    // ∂φ(K) = diag(w)V⁺R⁺ᵀ → ∂K, ∂V = diag(w)φ(K)R (over the parked gn).
    let mut dkf_all = vec![0f32; dphi.len()];
    split(&mut grads.dv, &plan, m)
        .into_par_iter()
        .zip(split(&mut grads.dk, &plan, d))
        .zip(split_staged(&mut dkf_all, &plan, c))
        .enumerate()
        .for_each_init(
            || TaskBufs::new(ctx),
            |TaskBufs { ws, dphi: own }, (i, ((dv, dk), mut dkf_head))| {
                let h = i / plan.groups;
                let head = sh.head(h);
                let r = &r_heads[h * len..(h + 1) * len];
                let base = (i % plan.groups) * plan.group_len;
                for sp in plan.spans(i % plan.groups, ctx.l) {
                    let r0 = sp.t0 - base;
                    let (rm_, rc) = (r0 * m..(r0 + sp.len) * m, r0 * c..(r0 + sp.len) * c);
                    let kf = chunk::key_features(ctx, &head, sp, &mut ws.kf);
                    fill_vaug(ctx, &head, sp, &mut ws.vaug);
                    let w = tail_weight(ctx, sp);
                    let dkf = dphi_rows(&mut dkf_head, own, rc);
                    let vw = scaled(
                        ctx,
                        &ws.vaug,
                        sp.len,
                        mp,
                        |t| sp.len - 1 - t,
                        &mut ws.scaled,
                    );
                    let r_t = MatRef::row_major(r, c, mp, mp).t();
                    sgemm(w, rm(vw, sp.len, mp), r_t, 0.0, dkf, c);
                    let kw = scaled(ctx, kf, sp.len, c, |t| sp.len - 1 - t, &mut ws.scaled);
                    let r_v = MatRef::row_major(r, c, m, mp);
                    sgemm(w, rm(kw, sp.len, c), r_v, 0.0, &mut dv[rm_], m);
                    if ctx.cfg.fused {
                        super::fused_vjp(ctx.cfg, head.k, sp, r0, &own[..sp.len * c], dk);
                    }
                }
            },
        );
    super::staged_vjp(&sh, &dphi, &dkf_all, grads);
    Ok(())
}
