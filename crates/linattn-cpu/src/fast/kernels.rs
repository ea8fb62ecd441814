//! Inner loops of the fast path over one C×M state (row-major, M contiguous).
//!
//! Every function is `#[inline(always)]` and generic over `FMA`, so that the head loops in
//! [`super`] compile once with `avx2,fma` enabled (fused multiply-adds, 8-wide) and once
//! portable, and runtime detection picks one. Without the `fma` feature `mul_add` would be a
//! libm call, hence the switch. The value axis is processed in slices of [`LANES`] whose
//! accumulators stay in registers across the whole C loop.

/// Width of the register-resident slice of the value axis (4 AVX2 registers).
pub const LANES: usize = 32;

#[inline(always)]
pub fn fmadd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// `S ← λS + k vᵀ` and `z ← λz + k`; with `DECAY = false` λ is 1 and skipped.
#[inline(always)]
pub fn update<const FMA: bool, const DECAY: bool>(
    s: &mut [f32],
    z: &mut [f32],
    kf: &[f32],
    v: &[f32],
    decay: f32,
) {
    let m = v.len();
    for ((s_row, za), &ka) in s.chunks_exact_mut(m).zip(z.iter_mut()).zip(kf) {
        for (x, &vb) in s_row.iter_mut().zip(v) {
            let old = if DECAY { *x * decay } else { *x };
            *x = fmadd::<FMA>(ka, vb, old);
        }
        *za = if DECAY { *za * decay + ka } else { *za + ka };
    }
}

/// `num ← qᵀS` (written into `num`, length M) and returns `qᵀz`.
#[inline(always)]
pub fn readout<const FMA: bool>(s: &[f32], z: &[f32], qf: &[f32], num: &mut [f32]) -> f32 {
    let m = num.len();
    let mut start = 0;
    while start + LANES <= m {
        let mut acc = [0f32; LANES];
        for (s_row, &qa) in s.chunks_exact(m).zip(qf) {
            for (x, &sb) in acc.iter_mut().zip(&s_row[start..start + LANES]) {
                *x = fmadd::<FMA>(qa, sb, *x);
            }
        }
        num[start..start + LANES].copy_from_slice(&acc);
        start += LANES;
    }
    if start < m {
        num[start..].fill(0.0);
        for (s_row, &qa) in s.chunks_exact(m).zip(qf) {
            for (x, &sb) in num[start..].iter_mut().zip(&s_row[start..]) {
                *x = fmadd::<FMA>(qa, sb, *x);
            }
        }
    }
    dot::<FMA>(qf, z)
}

/// The causal step fused into one pass over S: `S ← λS + k vᵀ`, `z ← λz + k`, then
/// `num ← qᵀS`; returns `qᵀz`. S is read and written once per token.
#[inline(always)]
pub fn update_readout<const FMA: bool, const DECAY: bool>(
    s: &mut [f32],
    z: &mut [f32],
    kf: &[f32],
    qf: &[f32],
    v: &[f32],
    decay: f32,
    num: &mut [f32],
) -> f32 {
    let m = v.len();
    for (za, &ka) in z.iter_mut().zip(kf) {
        *za = if DECAY { *za * decay + ka } else { *za + ka };
    }
    let den = dot::<FMA>(qf, z);
    let mut start = 0;
    while start + LANES <= m {
        let mut acc = [0f32; LANES];
        let vs = &v[start..start + LANES];
        for ((s_row, &ka), &qa) in s.chunks_exact_mut(m).zip(kf).zip(qf) {
            for ((x, &vb), y) in s_row[start..start + LANES]
                .iter_mut()
                .zip(vs)
                .zip(acc.iter_mut())
            {
                let old = if DECAY { *x * decay } else { *x };
                *x = fmadd::<FMA>(ka, vb, old);
                *y = fmadd::<FMA>(qa, *x, *y);
            }
        }
        num[start..start + LANES].copy_from_slice(&acc);
        start += LANES;
    }
    if start < m {
        num[start..].fill(0.0);
        for ((s_row, &ka), &qa) in s.chunks_exact_mut(m).zip(kf).zip(qf) {
            for ((x, &vb), y) in s_row[start..]
                .iter_mut()
                .zip(&v[start..])
                .zip(num[start..].iter_mut())
            {
                let old = if DECAY { *x * decay } else { *x };
                *x = fmadd::<FMA>(ka, vb, old);
                *y = fmadd::<FMA>(qa, *x, *y);
            }
        }
    }
    den
}

/// `out[a] = S[a]·g + z[a]·gd` (the query gradient `S gn + z gd`).
#[inline(always)]
pub fn state_times<const FMA: bool>(s: &[f32], z: &[f32], g: &[f32], gd: f32, out: &mut [f32]) {
    let m = g.len();
    for ((o, s_row), &za) in out.iter_mut().zip(s.chunks_exact(m)).zip(z) {
        *o = dot::<FMA>(s_row, g) + za * gd;
    }
}

/// The reverse-scan step fused into one pass over R: `R ← λR + q gnᵀ`, `r ← λr + q gd`,
/// then `dk[a] = w (R[a]·v + r[a])` and `dv = w Rᵀk`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn reverse_step<const FMA: bool, const DECAY: bool>(
    r_mat: &mut [f32],
    r_vec: &mut [f32],
    qf: &[f32],
    gn: &[f32],
    gd: f32,
    decay: f32,
    kf: &[f32],
    v: &[f32],
    dkf: &mut [f32],
    dv: &mut [f32],
) {
    let m = v.len();
    for ((ra, &qa), dka) in r_vec.iter_mut().zip(qf).zip(dkf.iter_mut()) {
        *ra = if DECAY { *ra * decay } else { *ra };
        *ra = fmadd::<FMA>(qa, gd, *ra);
        *dka = *ra;
    }
    // Slices of LANES columns: the dv slice accumulates in registers over all rows, and each
    // row's share of `R[a]·v` folds into 8 lanes before one horizontal sum.
    let mut start = 0;
    while start + LANES <= m {
        let (Ok(vs), Ok(gs)) = (
            <&[f32; LANES]>::try_from(&v[start..start + LANES]),
            <&[f32; LANES]>::try_from(&gn[start..start + LANES]),
        ) else {
            unreachable!("slices of LANES elements")
        };
        let (vs, gs) = (*vs, *gs);
        let mut dv_acc = [0f32; LANES];
        for (((r_row, &qa), &ka), dka) in r_mat
            .chunks_exact_mut(m)
            .zip(qf)
            .zip(kf)
            .zip(dkf.iter_mut())
        {
            let Ok(row) = <&mut [f32; LANES]>::try_from(&mut r_row[start..start + LANES]) else {
                unreachable!("slices of LANES elements")
            };
            let mut part = [0f32; 8];
            // Indexed (not zipped) on purpose: 8-wide chunks with a fixed lane map are what
            // LLVM turns into one register per chunk.
            #[allow(clippy::needless_range_loop)]
            for chunk in 0..LANES / 8 {
                for t in 0..8 {
                    let b = chunk * 8 + t;
                    let old = if DECAY { row[b] * decay } else { row[b] };
                    let x = fmadd::<FMA>(qa, gs[b], old);
                    row[b] = x;
                    part[t] = fmadd::<FMA>(x, vs[b], part[t]);
                    dv_acc[b] = fmadd::<FMA>(ka, x, dv_acc[b]);
                }
            }
            *dka += hsum8(part);
        }
        dv[start..start + LANES].copy_from_slice(&dv_acc);
        start += LANES;
    }
    if start < m {
        dv[start..].fill(0.0);
        for (((r_row, &qa), &ka), dka) in r_mat
            .chunks_exact_mut(m)
            .zip(qf)
            .zip(kf)
            .zip(dkf.iter_mut())
        {
            let mut part = 0f32;
            for (((x, &gb), &vb), dvb) in r_row[start..]
                .iter_mut()
                .zip(&gn[start..])
                .zip(&v[start..])
                .zip(dv[start..].iter_mut())
            {
                let old = if DECAY { *x * decay } else { *x };
                *x = fmadd::<FMA>(qa, gb, old);
                part = fmadd::<FMA>(*x, vb, part);
                *dvb = fmadd::<FMA>(ka, *x, *dvb);
            }
            *dka += part;
        }
    }
}

/// Sum of 8 lanes, pairwise (shuffles, not a serial chain).
#[inline(always)]
pub fn hsum8(p: [f32; 8]) -> f32 {
    let a = [p[0] + p[4], p[1] + p[5], p[2] + p[6], p[3] + p[7]];
    let b = [a[0] + a[2], a[1] + a[3]];
    b[0] + b[1]
}

/// VJP of the fused elementwise maps: `gx = g ⊙ φ'(x)` (elu+1: 1 or φ; relu: 1 or 0).
#[inline(always)]
pub fn elementwise_vjp(
    map: linattn_core::FeatureMap,
    x: &[f32],
    phi: &[f32],
    g: &[f32],
    gx: &mut [f32],
) {
    use linattn_core::FeatureMap;
    match map {
        FeatureMap::EluPlusOne => {
            for (((o, &xv), &p), &gv) in gx.iter_mut().zip(x).zip(phi).zip(g) {
                *o = if xv > 0.0 { gv } else { gv * p };
            }
        }
        FeatureMap::Relu => {
            for ((o, &xv), &gv) in gx.iter_mut().zip(x).zip(g) {
                *o = if xv > 0.0 { gv } else { 0.0 };
            }
        }
        _ => gx.copy_from_slice(g),
    }
}

/// [`elementwise_vjp`] with φ' computed from x in the same pass (elu+1: `eˣ` for x ≤ 0),
/// for callers that do not keep φ.
#[inline(always)]
fn elementwise_vjp_of_x<const FMA: bool>(
    map: linattn_core::FeatureMap,
    x: &[f32],
    g: &[f32],
    gx: &mut [f32],
) {
    use linattn_core::FeatureMap;
    match map {
        FeatureMap::EluPlusOne => {
            for ((o, &xv), &gv) in gx.iter_mut().zip(x).zip(g) {
                let e = exp_f32::<FMA>(xv.min(0.0));
                *o = if xv > 0.0 { gv } else { gv * e };
            }
        }
        FeatureMap::Relu => {
            for ((o, &xv), &gv) in gx.iter_mut().zip(x).zip(g) {
                *o = if xv > 0.0 { gv } else { 0.0 };
            }
        }
        _ => gx.copy_from_slice(g),
    }
}

/// `elementwise_vjp_of_x` compiled with avx2 and fma when the CPU has them.
pub fn elementwise_vjp_of_x_detected(
    map: linattn_core::FeatureMap,
    x: &[f32],
    g: &[f32],
    gx: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports avx2 and fma, checked just above.
        unsafe { elementwise_vjp_of_x_avx2(map, x, g, gx) };
        return;
    }
    elementwise_vjp_of_x::<false>(map, x, g, gx)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn elementwise_vjp_of_x_avx2(
    map: linattn_core::FeatureMap,
    x: &[f32],
    g: &[f32],
    gx: &mut [f32],
) {
    elementwise_vjp_of_x::<true>(map, x, g, gx)
}

/// `R ← R + q gnᵀ`, `r ← r + q gd` (the non-causal full sum).
#[inline(always)]
pub fn accumulate_r<const FMA: bool>(
    r_mat: &mut [f32],
    r_vec: &mut [f32],
    qf: &[f32],
    gn: &[f32],
    gd: f32,
) {
    let m = gn.len();
    for ((r_row, ra), &qa) in r_mat.chunks_exact_mut(m).zip(r_vec.iter_mut()).zip(qf) {
        for (x, &g) in r_row.iter_mut().zip(gn) {
            *x = fmadd::<FMA>(qa, g, *x);
        }
        *ra = fmadd::<FMA>(qa, gd, *ra);
    }
}

/// `dk[a] = w (R[a]·v + r[a])`, `dv = w Rᵀk` for fixed R (non-causal).
#[inline(always)]
pub fn key_value_grads<const FMA: bool>(
    r_mat: &[f32],
    r_vec: &[f32],
    kf: &[f32],
    v: &[f32],
    weight: f32,
    dkf: &mut [f32],
    dv: &mut [f32],
) {
    let m = v.len();
    dv.fill(0.0);
    for (((r_row, &ka), dka), &ra) in r_mat.chunks_exact(m).zip(kf).zip(dkf.iter_mut()).zip(r_vec) {
        *dka = weight * (dot::<FMA>(r_row, v) + ra);
        let wk = weight * ka;
        for (x, &rb) in dv.iter_mut().zip(r_row) {
            *x = fmadd::<FMA>(wk, rb, *x);
        }
    }
}

/// Dot product with 8 independent partial sums (vectorisable without reassociation).
#[inline(always)]
pub fn dot<const FMA: bool>(x: &[f32], y: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let mut xc = x.chunks_exact(8);
    let mut yc = y.chunks_exact(8);
    for (xa, ya) in (&mut xc).zip(&mut yc) {
        for t in 0..8 {
            acc[t] = fmadd::<FMA>(xa[t], ya[t], acc[t]);
        }
    }
    let mut tail = 0f32;
    for (&a, &b) in xc.remainder().iter().zip(yc.remainder()) {
        tail = fmadd::<FMA>(a, b, tail);
    }
    hsum8(acc) + tail
}

/// `eˣ` for the fused maps, vectorisable: `x = n·ln2 + r`, |r| ≤ ln2/2, a degree-7 Taylor
/// polynomial in r (relative error < 1e-8 before rounding), times `2ⁿ` built from its bits.
/// x is clamped to [−87, 88]: below, the true value is subnormal (< 1.2e-38) and 1.6e-38 is
/// returned instead, an absolute error no f32 sum can see.
#[inline(always)]
pub fn exp_f32<const FMA: bool>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Adding 1.5·2²³ rounds to an integer in the low mantissa bits.
    const SHIFTER: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let t = fmadd::<FMA>(x, LOG2E, SHIFTER);
    let n = t - SHIFTER;
    let r = fmadd::<FMA>(-n, LN2_LO, fmadd::<FMA>(-n, LN2_HI, x));
    let mut p = 1.0 / 5040.0;
    p = fmadd::<FMA>(p, r, 1.0 / 720.0);
    p = fmadd::<FMA>(p, r, 1.0 / 120.0);
    p = fmadd::<FMA>(p, r, 1.0 / 24.0);
    p = fmadd::<FMA>(p, r, 1.0 / 6.0);
    p = fmadd::<FMA>(p, r, 0.5);
    p = fmadd::<FMA>(p, r, 1.0);
    p = fmadd::<FMA>(p, r, 1.0);
    // n as an integer straight from t's low mantissa bits (t = 1.5·2²³ + n exactly): a
    // float-to-int cast would be a saturating, NaN-checked conversion that LLVM
    // scalarises lane by lane.
    let n_int = (t.to_bits() as i32).wrapping_sub(SHIFTER.to_bits() as i32);
    let scale = f32::from_bits((n_int.wrapping_add(127) as u32) << 23);
    p * scale
}

/// The fused elementwise maps over a block of rows: `elu(x)+1`, `max(x,0)` or `x`.
#[inline(always)]
pub fn elementwise_map<const FMA: bool>(map: linattn_core::FeatureMap, x: &[f32], out: &mut [f32]) {
    use linattn_core::FeatureMap;
    match map {
        FeatureMap::EluPlusOne => {
            for (o, &v) in out.iter_mut().zip(x) {
                let e = exp_f32::<FMA>(v.min(0.0));
                *o = if v > 0.0 { v + 1.0 } else { e };
            }
        }
        FeatureMap::Relu => {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = v.max(0.0);
            }
        }
        _ => out.copy_from_slice(x),
    }
}

/// [`elementwise_map`] compiled with avx2 and fma when the CPU has them (callers outside
/// the head loops of [`super`], which carry no target features of their own).
pub fn elementwise_map_detected(map: linattn_core::FeatureMap, x: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports avx2 and fma, checked just above.
        unsafe { elementwise_map_avx2(map, x, out) };
        return;
    }
    elementwise_map::<false>(map, x, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn elementwise_map_avx2(map: linattn_core::FeatureMap, x: &[f32], out: &mut [f32]) {
    elementwise_map::<true>(map, x, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_two_ulp_over_the_range() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x <= 88.0 {
            for got in [exp_f32::<true>(x), exp_f32::<false>(x)] {
                let exact = (x as f64).exp();
                worst = worst.max(((got as f64) - exact).abs() / exact);
            }
            x += 0.001_37;
        }
        assert!(worst < 2.5e-7, "worst relative error {worst:e}");
        assert_eq!(exp_f32::<false>(0.0), 1.0);
        assert!(exp_f32::<false>(-1000.0) < 2e-38);
    }

    #[test]
    fn vjp_from_x_equals_vjp_from_the_mapped_values() {
        use linattn_core::FeatureMap;
        let x: Vec<f32> = (0..203).map(|i| (i as f32 * 0.731).sin() * 4.0).collect();
        let g: Vec<f32> = (0..203).map(|i| (i as f32 * 0.19).cos()).collect();
        for map in [
            FeatureMap::EluPlusOne,
            FeatureMap::Relu,
            FeatureMap::Identity,
        ] {
            let mut phi = vec![0f32; x.len()];
            elementwise_map_detected(map, &x, &mut phi);
            let (mut want, mut got) = (vec![0f32; x.len()], vec![f32::NAN; x.len()]);
            elementwise_vjp(map, &x, &phi, &g, &mut want);
            elementwise_vjp_of_x_detected(map, &x, &g, &mut got);
            assert_eq!(got, want, "{map:?}");
        }
    }

    #[test]
    fn dot_and_readout_match_plain_loops() {
        let x: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin()).collect();
        let y: Vec<f32> = (0..37).map(|i| (i as f32 * 0.11).cos()).collect();
        let plain: f32 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
        assert!((dot::<false>(&x, &y) - plain).abs() < 1e-5);
        // S is 3 × 37, q of length 3.
        let s: Vec<f32> = (0..3 * 37).map(|i| (i as f32 * 0.05).cos()).collect();
        let q = [0.5f32, -1.0, 2.0];
        let z = [1.0f32, 2.0, 3.0];
        let mut num = vec![0f32; 37];
        let qz = readout::<false>(&s, &z, &q, &mut num);
        assert!((qz - 4.5).abs() < 1e-6);
        for b in 0..37 {
            let want: f32 = (0..3).map(|a| q[a] * s[a * 37 + b]).sum();
            assert!((num[b] - want).abs() < 1e-5);
        }
    }
}
