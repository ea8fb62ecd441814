//! Sample statistics for timings and the log-log slopes that show how time and memory grow
//! with N (1 for linear forms, 2 for softmax).

use serde::{Deserialize, Serialize};

/// Summary of one cell's samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SampleStats {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    /// Sample standard deviation (n − 1) over the mean; 0 with a single sample.
    pub rel_stdev: f64,
}

impl SampleStats {
    /// `None` when there are no finite samples (non-finite ones are ignored).
    pub fn of(samples: &[f64]) -> Option<SampleStats> {
        let mut sorted: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            0.5 * (sorted[n / 2 - 1] + sorted[n / 2])
        };
        let mean = sorted.iter().sum::<f64>() / n as f64;
        let rel_stdev = if n > 1 && mean != 0.0 {
            let var = sorted.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            var.sqrt() / mean.abs()
        } else {
            0.0
        };
        Some(SampleStats {
            median,
            min: sorted[0],
            max: sorted[n - 1],
            mean,
            rel_stdev,
        })
    }
}

/// Least-squares slope of log(y) against log(x) over the points with x > 0 and y > 0
/// (other points, e.g. cells that failed, are ignored). `None` with fewer than two distinct
/// usable x values.
pub fn log_log_slope(points: &[(f64, f64)]) -> Option<f64> {
    let logs: Vec<(f64, f64)> = points
        .iter()
        .filter(|(x, y)| x.is_finite() && y.is_finite() && *x > 0.0 && *y > 0.0)
        .map(|(x, y)| (x.ln(), y.ln()))
        .collect();
    if logs.len() < 2 {
        return None;
    }
    let n = logs.len() as f64;
    let mean_x = logs.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = logs.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = logs.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = logs.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    // All x equal (one N repeated): no slope to speak of.
    if sxx <= f64::EPSILON * n {
        return None;
    }
    Some(sxy / sxx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_samples() {
        let s = SampleStats::of(&[3.0, 1.0, 2.0, 4.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 4.0);
        assert_eq!(s.mean, 2.5);
        // sample variance of 1..4 is 5/3
        assert!((s.rel_stdev - (5.0f64 / 3.0).sqrt() / 2.5).abs() < 1e-12);
        let odd = SampleStats::of(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!(odd.median, 3.0);
        let one = SampleStats::of(&[7.0]).unwrap();
        assert_eq!((one.median, one.rel_stdev), (7.0, 0.0));
        assert!(SampleStats::of(&[]).is_none());
        assert!(SampleStats::of(&[f64::NAN]).is_none());
    }

    #[test]
    fn slope_two_for_quadratic_time() {
        let pts: Vec<(f64, f64)> = (8..14)
            .map(|k| {
                let n = (1u64 << k) as f64;
                (n, 3.5e-9 * n * n)
            })
            .collect();
        assert!((log_log_slope(&pts).unwrap() - 2.0).abs() < 1e-12);
    }

    #[test]
    fn slope_one_for_linear_time_with_a_missing_cell() {
        let mut pts: Vec<(f64, f64)> = (8..14)
            .map(|k| {
                let n = (1u64 << k) as f64;
                (n, 2e-7 * n)
            })
            .collect();
        // A failed cell (no time) is carried as NaN or zero: it must not bend the slope.
        pts[2].1 = f64::NAN;
        pts[4].1 = 0.0;
        assert!((log_log_slope(&pts).unwrap() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn slope_needs_two_distinct_points() {
        assert_eq!(log_log_slope(&[(1024.0, 1.0)]), None);
        assert_eq!(log_log_slope(&[(1024.0, 1.0), (1024.0, 2.0)]), None);
        assert_eq!(log_log_slope(&[(1024.0, 1.0), (2048.0, f64::NAN)]), None);
    }
}
