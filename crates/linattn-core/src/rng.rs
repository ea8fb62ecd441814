//! A small, fixed PRNG so that inputs and FAVOR+ projections are identical on every run,
//! machine and dependency version (a `rand` upgrade must not change committed baselines).

/// SplitMix64 seeding a xoshiro256** generator; normals by Box–Muller.
#[derive(Debug, Clone)]
pub struct SeededRng {
    s: [u64; 4],
    spare_normal: Option<f64>,
}

impl SeededRng {
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        SeededRng {
            s: [next(), next(), next(), next()],
            spare_normal: None,
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal.
    pub fn normal(&mut self) -> f64 {
        if let Some(z) = self.spare_normal.take() {
            return z;
        }
        // 1 - u lies in (0, 1], so the log is finite.
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (2.0 * std::f64::consts::PI * u2).sin_cos();
        self.spare_normal = Some(r * s);
        r * c
    }
}

/// The FAVOR+ projection W (`features × dk`, row-major): blocks of `dk` orthogonal rows
/// (Gram–Schmidt on Gaussian blocks), each row rescaled to the norm of an independent
/// Gaussian vector so that rows are marginally N(0, I) (Choromanski et al., "Performers").
/// Deterministic in `(dk, features, seed)`: every backend builds the same W.
pub fn favor_projection(dk: usize, features: usize, seed: u64) -> Vec<f64> {
    let mut rng = SeededRng::new(seed ^ 0xfa70_0000_0000_0000 ^ ((dk as u64) << 32));
    let mut w = vec![0.0; features * dk];
    let mut row = 0;
    while row < features {
        let block = (features - row).min(dk);
        // dk x dk Gaussian block, orthonormalised row by row.
        let mut g: Vec<Vec<f64>> = (0..dk)
            .map(|_| (0..dk).map(|_| rng.normal()).collect())
            .collect();
        for i in 0..dk {
            let (done, rest) = g.split_at_mut(i);
            let row = &mut rest[0];
            for prev in done.iter() {
                let dot: f64 = row.iter().zip(prev).map(|(a, b)| a * b).sum();
                for (x, p) in row.iter_mut().zip(prev) {
                    *x -= dot * p;
                }
            }
            let norm = row.iter().map(|x| x * x).sum::<f64>().sqrt();
            for x in row.iter_mut() {
                *x /= norm;
            }
        }
        for g_row in g.iter().take(block) {
            let chi = (0..dk).map(|_| rng.normal().powi(2)).sum::<f64>().sqrt();
            for t in 0..dk {
                w[row * dk + t] = g_row[t] * chi;
            }
            row += 1;
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normals_have_unit_moments() {
        let mut r = SeededRng::new(42);
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| r.normal()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.01, "var {var}");
    }

    #[test]
    fn favor_blocks_are_orthogonal_and_reproducible() {
        let (d, r) = (8, 20);
        let w = favor_projection(d, r, 3);
        assert_eq!(w, favor_projection(d, r, 3));
        assert_ne!(w, favor_projection(d, r, 4));
        // rows 0..8 form one orthogonal block
        for i in 0..d {
            for j in 0..i {
                let dot: f64 = (0..d).map(|t| w[i * d + t] * w[j * d + t]).sum();
                assert!(dot.abs() < 1e-9, "rows {i},{j} dot {dot}");
            }
        }
        assert!(w.iter().all(|x| x.is_finite()));
    }
}
