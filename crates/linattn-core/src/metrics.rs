use serde::{Deserialize, Serialize};

/// How far `got` is from `reference`. The verdict uses `rms_ratio`, the rule of
/// flash-linear-attention's tests: `rms(got − ref) / rms(ref)`, insensitive to a few
/// tiny reference entries that make relative errors explode.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct ErrorMetrics {
    /// `max |got − ref|`.
    pub max_abs: f64,
    /// `max |got − ref| / (|ref| + floor)`, floor = 1e-3·rms(ref) (guards near-zero entries).
    pub max_rel: f64,
    /// `rms(got − ref) / rms(ref)` (0 when both are exactly zero).
    pub rms_ratio: f64,
    /// Count of non-finite entries in `got`: any makes the comparison fail.
    pub non_finite: usize,
}

impl ErrorMetrics {
    /// Compares two equally long slices (the caller checked the shapes).
    pub fn compare(reference: &[f64], got: &[f64]) -> ErrorMetrics {
        assert_eq!(reference.len(), got.len(), "metrics over unequal lengths");
        let n = reference.len().max(1) as f64;
        let ref_sq: f64 = reference.iter().map(|r| r * r).sum();
        let rms_ref = (ref_sq / n).sqrt();
        let floor = 1e-3 * rms_ref + f64::MIN_POSITIVE;
        let mut m = ErrorMetrics::default();
        let mut diff_sq = 0.0;
        for (&r, &g) in reference.iter().zip(got) {
            if !g.is_finite() {
                m.non_finite += 1;
                continue;
            }
            let d = (g - r).abs();
            diff_sq += d * d;
            m.max_abs = m.max_abs.max(d);
            m.max_rel = m.max_rel.max(d / (r.abs() + floor));
        }
        let rms_diff = (diff_sq / n).sqrt();
        m.rms_ratio = if rms_ref > 0.0 {
            rms_diff / rms_ref
        } else if rms_diff == 0.0 {
            0.0
        } else {
            f64::INFINITY
        };
        if m.non_finite > 0 {
            m.rms_ratio = f64::INFINITY;
        }
        m
    }

    /// Passes when everything is finite and the RMS ratio is within `rms_tolerance`.
    pub fn passes(&self, rms_tolerance: f64) -> bool {
        self.non_finite == 0 && self.rms_ratio <= rms_tolerance
    }

    /// Element-wise worst of two metrics (for "worst over all cases" columns).
    pub fn worst(self, other: ErrorMetrics) -> ErrorMetrics {
        ErrorMetrics {
            max_abs: self.max_abs.max(other.max_abs),
            max_rel: self.max_rel.max(other.max_rel),
            rms_ratio: self.rms_ratio.max(other.rms_ratio),
            non_finite: self.non_finite + other.non_finite,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_is_zero_and_scaled_error_is_measured() {
        let r = vec![1.0, -2.0, 3.0, 0.0];
        assert_eq!(ErrorMetrics::compare(&r, &r).rms_ratio, 0.0);
        let g: Vec<f64> = r.iter().map(|x| x * 1.01).collect();
        let m = ErrorMetrics::compare(&r, &g);
        assert!((m.rms_ratio - 0.01).abs() < 1e-12);
        assert!((m.max_abs - 0.03).abs() < 1e-12);
        assert!(m.passes(0.02) && !m.passes(0.005));
    }

    #[test]
    fn nan_fails_whatever_the_tolerance() {
        let m = ErrorMetrics::compare(&[1.0, 2.0], &[1.0, f64::NAN]);
        assert_eq!(m.non_finite, 1);
        assert!(!m.passes(f64::MAX));
    }
}
