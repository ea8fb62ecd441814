//! How far a result is from its f64 reference ([`ErrorMetrics`]), and the one verdict rule of
//! every test suite and of `linattn check` ([`Judge`]): the RMS ratio of each tensor within a
//! per-precision tolerance, gradients that cancel by construction judged on the scale of the
//! case's largest gradient.

use crate::problem::Precision;
use crate::tensor::{Grads, Tensor};
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

/// The two RMS figures behind a comparison (non-finite entries of `got` left out of the
/// difference; they fail the comparison on their own).
#[derive(Debug, Clone, Copy)]
struct Measured {
    metrics: ErrorMetrics,
    rms_reference: f64,
    rms_difference: f64,
}

fn measure(reference: &[f64], got: &[f64]) -> Measured {
    assert_eq!(reference.len(), got.len(), "metrics over unequal lengths");
    let rms_reference = rms(reference.iter().copied());
    let floor = 1e-3 * rms_reference + f64::MIN_POSITIVE;
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
    let rms_difference = (diff_sq / reference.len().max(1) as f64).sqrt();
    m.rms_ratio = ratio(rms_difference, rms_reference, m.non_finite);
    Measured {
        metrics: m,
        rms_reference,
        rms_difference,
    }
}

/// `difference / scale`: 0 when both are zero, ∞ when only the scale is or anything is
/// non-finite.
fn ratio(difference: f64, scale: f64, non_finite: usize) -> f64 {
    if non_finite > 0 {
        f64::INFINITY
    } else if scale > 0.0 {
        difference / scale
    } else if difference == 0.0 {
        0.0
    } else {
        f64::INFINITY
    }
}

/// Root mean square (0 for no values).
pub fn rms(values: impl IntoIterator<Item = f64>) -> f64 {
    let (sum, count) = values
        .into_iter()
        .fold((0.0, 0usize), |(s, c), v| (s + v * v, c + 1));
    (sum / count.max(1) as f64).sqrt()
}

impl ErrorMetrics {
    /// Compares two equally long slices (the caller checked the shapes).
    pub fn compare(reference: &[f64], got: &[f64]) -> ErrorMetrics {
        measure(reference, got).metrics
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

/// Below this fraction of the case's largest gradient RMS, a gradient is judged as the
/// residue of a cancellation: against the largest gradient RMS instead of its own.
///
/// Why: a gradient can cancel to ~0 by construction. At N = 1 a normalised O is
/// `v·a/(a+ε)` with `a = φ(q)·φ(k)`, so the exact dQ, dK are of order ε (exactly 0 for
/// efficient attention), and f32 round-off of the cancelling terms, ~1e-7 of their size,
/// is an arbitrarily large fraction of the vanishing result. The same shows at small N when
/// a query meets few keys with non-zero scores (ReLU features that barely overlap): measured
/// at N = 3, D = 10, M = 17, ReLU, dQ's RMS is 7.6e-3 against dK's 1.5, and the recurrent
/// f32 form lands 9.0e-5 off in dQ's own scale (5e-7 of dK's). A gradient of ordinary size
/// is judged on its own RMS, so the largest one cannot hide a loss in a smaller one (dK
/// ~4× under dV in the long f16 chunked case).
pub const CANCELLED: f64 = 1e-2;

/// What a tensor's error is divided by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// The RMS of its own reference.
    Own,
    /// The largest gradient RMS of its case (a cancelled gradient, see [`CANCELLED`]).
    LargestGradient,
}

/// One tensor compared with its reference and judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TensorVerdict {
    /// What was compared (`o`, `dq`, …, or the caller's label).
    pub tensor: String,
    /// Raw metrics against the reference (`rms_ratio` = rms(diff) / rms(ref)).
    #[serde(flatten)]
    pub metrics: ErrorMetrics,
    pub basis: Basis,
    /// The RMS the error is divided by (see [`Basis`]).
    pub scale: f64,
    /// rms(got − ref) / scale; ∞ when anything is non-finite. The verdict's figure.
    pub judged_ratio: f64,
    pub tolerance: f64,
    pub passed: bool,
}

impl TensorVerdict {
    fn new(tensor: &str, measured: Measured, basis: Basis, scale: f64, tolerance: f64) -> Self {
        let m = measured.metrics;
        let judged_ratio = ratio(measured.rms_difference, scale, m.non_finite);
        TensorVerdict {
            tensor: tensor.to_string(),
            metrics: m,
            basis,
            scale,
            judged_ratio,
            tolerance,
            // NaN compares false: a NaN ratio fails too.
            passed: m.non_finite == 0 && judged_ratio <= tolerance,
        }
    }

    /// Why it failed, in one line; `None` when it passed.
    pub fn failure(&self) -> Option<String> {
        if self.passed {
            return None;
        }
        let m = &self.metrics;
        Some(if m.non_finite > 0 {
            format!("{}: {} non-finite values", self.tensor, m.non_finite)
        } else {
            let basis = match self.basis {
                Basis::Own => "its own RMS",
                Basis::LargestGradient => "the case's largest gradient RMS",
            };
            format!(
                "{}: rms ratio {:.3e} > {:.2e} (against {basis} {:.3e}; max abs {:.3e})",
                self.tensor, self.judged_ratio, self.tolerance, self.scale, m.max_abs
            )
        })
    }
}

/// The tensors of one case, judged.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Verdict {
    pub tensors: Vec<TensorVerdict>,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        self.tensors.iter().all(|t| t.passed)
    }

    /// The largest judged ratio (0 for no tensors).
    pub fn worst_ratio(&self) -> f64 {
        self.tensors
            .iter()
            .map(|t| t.judged_ratio)
            .fold(0.0, f64::max)
    }

    /// The failures, one line each, joined by `separator`; empty when it passed.
    pub fn failures(&self, separator: &str) -> String {
        let lines: Vec<String> = self.tensors.iter().filter_map(|t| t.failure()).collect();
        lines.join(separator)
    }

    /// `Err` with every failure, each line prefixed by `label`.
    pub fn into_result(self, label: &str) -> Result<(), String> {
        if self.passed() {
            Ok(())
        } else {
            Err(format!("{label} {}", self.failures(&format!("\n{label} "))))
        }
    }
}

/// The verdict rule: each tensor's RMS ratio against its reference within a tolerance,
/// nothing non-finite; gradients under [`CANCELLED`] of their case's largest judged against
/// the largest.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judge {
    /// For the output and any tensor judged on its own.
    pub tolerance: f64,
    /// For the gradients of a case.
    pub gradient_tolerance: f64,
}

impl Judge {
    /// The precision's tolerance ([`Precision::rms_tolerance`]) for everything.
    pub fn for_precision(precision: Precision) -> Self {
        Judge::within(precision.rms_tolerance())
    }

    /// `tolerance` for everything.
    pub fn within(tolerance: f64) -> Self {
        Judge {
            tolerance,
            gradient_tolerance: tolerance,
        }
    }

    /// The same judge with another tolerance for the gradients.
    pub fn with_gradient_tolerance(self, gradient_tolerance: f64) -> Self {
        Judge {
            gradient_tolerance,
            ..self
        }
    }

    /// One tensor against its own RMS (an output, a state: anything but a case's gradients).
    pub fn tensor(&self, name: &str, reference: &[f64], got: &[f64]) -> TensorVerdict {
        let measured = measure(reference, got);
        let scale = measured.rms_reference;
        TensorVerdict::new(name, measured, Basis::Own, scale, self.tolerance)
    }

    /// The gradients of one case, `(name, reference, got)` each (see [`CANCELLED`]).
    pub fn gradients(&self, grads: &[(&str, &[f64], &[f64])]) -> Vec<TensorVerdict> {
        let measured: Vec<Measured> = grads.iter().map(|(_, r, g)| measure(r, g)).collect();
        let largest = measured.iter().map(|m| m.rms_reference).fold(0.0, f64::max);
        grads
            .iter()
            .zip(measured)
            .map(|(&(name, _, _), m)| {
                let (basis, scale) = if m.rms_reference < CANCELLED * largest {
                    (Basis::LargestGradient, largest)
                } else {
                    (Basis::Own, m.rms_reference)
                };
                TensorVerdict::new(name, m, basis, scale, self.gradient_tolerance)
            })
            .collect()
    }

    /// O (`o`) and, when given as `(reference, got)`, the gradients (`dq`, `dk`, `dv`) of one
    /// case. `Err` names the first tensor whose dims differ from its reference's.
    pub fn case(
        &self,
        (want_out, got_out): (&Tensor, &Tensor),
        grads: Option<(&Grads, &Grads)>,
    ) -> Result<Verdict, String> {
        let mut pairs = vec![("o", want_out, got_out)];
        if let Some((want, got)) = grads {
            pairs.push(("dq", &want.dq, &got.dq));
            pairs.push(("dk", &want.dk, &got.dk));
            pairs.push(("dv", &want.dv, &got.dv));
        }
        if let Some((name, want, got)) = pairs.iter().find(|(_, w, g)| w.dims() != g.dims()) {
            return Err(format!(
                "{name} has dims {:?}, the oracle's has {:?}",
                got.dims(),
                want.dims()
            ));
        }
        let mut tensors = vec![self.tensor("o", want_out.data(), got_out.data())];
        let gradients: Vec<(&str, &[f64], &[f64])> = pairs[1..]
            .iter()
            .map(|(name, want, got)| (*name, want.data(), got.data()))
            .collect();
        tensors.extend(self.gradients(&gradients));
        Ok(Verdict { tensors })
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

    #[test]
    fn the_judge_holds_each_precision_to_its_tolerance() {
        for (precision, tolerance) in [
            (Precision::F64, 1e-10),
            (Precision::F32, 1e-5),
            (Precision::F16, 2e-3),
            (Precision::BF16, 5e-3),
        ] {
            let judge = Judge::for_precision(precision);
            assert_eq!(
                (judge.tolerance, judge.gradient_tolerance),
                (tolerance, tolerance)
            );
        }
        let relu = Judge::for_precision(Precision::F32).with_gradient_tolerance(1e-3);
        assert_eq!((relu.tolerance, relu.gradient_tolerance), (1e-5, 1e-3));
    }

    #[test]
    fn a_tensor_off_by_more_than_the_tolerance_fails_with_its_reason() {
        let want = [1.0, -2.0, 2.0, -1.0];
        let got = [1.01, -2.02, 2.02, -1.01];
        let judge = Judge::within(0.02);
        let v = judge.tensor("o", &want, &got);
        assert!(v.passed && v.failure().is_none());
        assert_eq!((v.basis, v.scale), (Basis::Own, rms(want)));
        assert!((v.judged_ratio - 0.01).abs() < 1e-12);
        assert_eq!(v.judged_ratio, v.metrics.rms_ratio);
        let strict = Judge::within(0.005).tensor("o", &want, &got);
        assert!(!strict.passed);
        let reason = strict.failure().unwrap();
        assert!(
            reason.starts_with("o: rms ratio 1.000e-2 > 5.00e-3 (against its own RMS"),
            "{reason}"
        );
    }

    #[test]
    fn non_finite_and_vanishing_references_are_judged_strictly() {
        let judge = Judge::within(f64::MAX);
        let nan = judge.tensor("dv", &[1.0, 2.0], &[1.0, f64::NAN]);
        assert_eq!((nan.passed, nan.judged_ratio), (false, f64::INFINITY));
        assert_eq!(nan.failure().unwrap(), "dv: 1 non-finite values");
        assert!(judge.tensor("o", &[0.0; 2], &[0.0; 2]).passed);
        let off_zero = judge.tensor("o", &[0.0; 2], &[1e-30, 0.0]);
        assert_eq!(
            (off_zero.passed, off_zero.judged_ratio),
            (false, f64::INFINITY)
        );
        // All gradients zero: no scale to borrow, so any difference fails.
        let zero: &[f64] = &[0.0; 2];
        let all_zero = judge.gradients(&[("dq", zero, &[1e-30, 0.0]), ("dv", zero, zero)]);
        assert!(!all_zero[0].passed && all_zero[1].passed);
    }

    #[test]
    fn only_cancelled_gradients_are_judged_against_the_largest() {
        let judge = Judge::within(1e-5);
        let dv = [1.0, -2.0, 2.0, -1.0];
        // dq cancels to ~1e-15; f32 round-off leaves ~1e-7: 1e8 of its own RMS.
        let (tiny, noisy) = ([1e-15, -1e-15, 0.0, 0.0], [1e-7, 0.0, -1e-7, 0.0]);
        let v = judge.gradients(&[("dq", &tiny, &noisy), ("dv", &dv, &dv)]);
        assert!(v[0].metrics.rms_ratio > 1e7);
        assert_eq!((v[0].basis, v[0].scale), (Basis::LargestGradient, rms(dv)));
        assert!(v[0].passed && v[1].passed, "{v:?}");
        // dk a quarter of dv with 1e-4 of its own size off: the largest does not hide it.
        let dk: Vec<f64> = dv.iter().map(|x| x / 4.0).collect();
        let dk_off: Vec<f64> = dk.iter().map(|x| x * (1.0 + 1e-4)).collect();
        let v = judge.gradients(&[("dk", &dk, &dk_off), ("dv", &dv, &dv)]);
        assert_eq!(v[0].basis, Basis::Own);
        assert!(!v[0].passed);
        let reason = v[0].failure().unwrap();
        assert!(
            reason.starts_with("dk: rms ratio 1.000e-4 > 1.00e-5"),
            "{reason}"
        );
        // Just under the threshold, the same error is judged on the largest and passes.
        let small: Vec<f64> = dv.iter().map(|x| x * 0.99 * CANCELLED).collect();
        let small_off: Vec<f64> = small.iter().map(|x| x * (1.0 + 1e-4)).collect();
        let v = judge.gradients(&[("dk", &small, &small_off), ("dv", &dv, &dv)]);
        assert_eq!(v[0].basis, Basis::LargestGradient);
        assert!(v[0].passed);
    }

    #[test]
    fn a_case_is_judged_on_o_and_each_gradient_and_fails_on_any() {
        let t = |data: Vec<f64>| Tensor::from_vec([1, 1, 2, 2], data).unwrap();
        let o = t(vec![1.0, 2.0, 3.0, 4.0]);
        let grads = Grads {
            dq: t(vec![1.0, -1.0, 1.0, -1.0]),
            dk: t(vec![2.0, 1.0, 0.5, 1.0]),
            dv: t(vec![0.5, 0.5, -0.5, 1.0]),
        };
        let judge = Judge::for_precision(Precision::F32);
        let verdict = judge.case((&o, &o), Some((&grads, &grads))).unwrap();
        let names: Vec<&str> = verdict.tensors.iter().map(|t| t.tensor.as_str()).collect();
        assert_eq!(names, ["o", "dq", "dk", "dv"]);
        assert!(verdict.passed() && verdict.clone().into_result("x").is_ok());
        assert_eq!(verdict.worst_ratio(), 0.0);

        let mut bad = grads.clone();
        bad.dk.map_in_place(|x| x * (1.0 + 1e-3));
        let verdict = judge.case((&o, &o), Some((&grads, &bad))).unwrap();
        assert!(!verdict.passed());
        assert!((verdict.worst_ratio() - 1e-3).abs() < 1e-12);
        let error = verdict.into_result("case 1").unwrap_err();
        assert!(
            error.starts_with("case 1 dk: rms ratio 1.000e-3"),
            "{error}"
        );
        assert!(!error.contains('\n'), "one failure, one line: {error}");

        let forward_only = judge.case((&o, &o), None).unwrap();
        assert_eq!(forward_only.tensors.len(), 1);
        bad.dv = Tensor::zeros([1, 1, 1, 1]).unwrap();
        let error = judge.case((&o, &o), Some((&grads, &bad))).unwrap_err();
        assert_eq!(
            error,
            "dv has dims [1, 1, 1, 1], the oracle's has [1, 1, 2, 2]"
        );
    }
}
