//! One case on one backend: run it, compare O and the gradients with the oracle, judge.

use super::grid::Case;
use super::oracle::{run_oracle, OracleKey, Reference};
use super::record::{CaseRecord, Outcome};
use super::summary::Entry;
use crate::term::panic_message;
use linattn_core::{AttnError, Grads, Inputs, Judge, Tensor, Unsupported};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs one case on one backend (`forward_only`: its forward alone, O judged, whatever its
/// backward). `None` when the backend turned out to be unavailable on this machine (its
/// summary is marked skipped instead).
pub(super) fn check_case(
    entry: &mut Entry,
    case: &Case,
    seed: u64,
    inputs: &Inputs,
    forward_only: bool,
    oracle_cache: &mut HashMap<OracleKey, Result<Reference, String>>,
) -> Option<CaseRecord> {
    let info = entry.backend.info().clone();
    let judge = Judge::for_precision(info.precision);
    let tolerance = judge.tolerance;
    let record = |outcome, message: Option<String>, errors| CaseRecord {
        backend: info.name.clone(),
        case: case.index,
        description: case.problem.to_string(),
        problem: case.problem,
        seed,
        outcome,
        message,
        tolerance,
        errors,
    };

    let supported = catch_unwind(AssertUnwindSafe(|| entry.backend.supports(&case.problem)));
    match supported {
        Ok(Ok(())) => {}
        Ok(Err(Unsupported::Unavailable(reason))) => {
            entry.summary.skipped = Some(reason);
            return None;
        }
        Ok(Err(Unsupported::Problem(reason))) => {
            return Some(record(Outcome::NotApplicable, Some(reason), Vec::new()));
        }
        Err(panic) => {
            let msg = format!("supports() panicked: {}", panic_message(&panic));
            return Some(record(Outcome::Error, Some(msg), Vec::new()));
        }
    }

    let with_grads = info.backward.is_some() && !forward_only;
    let key = OracleKey::for_backend(&info);
    let cached = oracle_cache
        .get(&key)
        .filter(|r| !with_grads || r.as_ref().map_or(true, |r| r.grads.is_some()));
    let reference = match cached {
        Some(r) => r.clone(),
        None => {
            let r = run_oracle(key, &case.problem, inputs, with_grads);
            oracle_cache.insert(key, r.clone());
            r
        }
    };
    let reference = match reference {
        Ok(r) => r,
        Err(msg) => return Some(record(Outcome::Error, Some(msg), Vec::new())),
    };

    let backend = &mut entry.backend;
    let ran = catch_unwind(AssertUnwindSafe(
        || -> Result<(Tensor, Option<Grads>), AttnError> {
            let result = if with_grads {
                backend
                    .forward_backward(&case.problem, inputs)
                    .map(|(o, g)| (o, Some(g)))
            } else {
                backend.forward(&case.problem, inputs).map(|o| (o, None))
            };
            backend.release();
            result
        },
    ));
    let (output, grads) = match ran {
        Ok(Ok(got)) => got,
        Ok(Err(AttnError::Unsupported(Unsupported::Problem(reason)))) => {
            // Some limits only show once the data is staged (e.g. device memory).
            return Some(record(Outcome::NotApplicable, Some(reason), Vec::new()));
        }
        Ok(Err(e)) => return Some(record(Outcome::Error, Some(e.to_string()), Vec::new())),
        Err(panic) => {
            let msg = format!("backend panicked: {}", panic_message(&panic));
            return Some(record(Outcome::Error, Some(msg), Vec::new()));
        }
    };

    let verdict = judge.case(
        (&reference.output, &output),
        reference.grads.as_ref().zip(grads.as_ref()),
    );
    let verdict = match verdict {
        Ok(verdict) => verdict,
        Err(msg) => return Some(record(Outcome::Error, Some(msg), Vec::new())),
    };
    let outcome = if verdict.passed() {
        Outcome::Pass
    } else {
        Outcome::Fail
    };
    let errors = verdict.tensors;
    Some(record(outcome, None, errors))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::summary::BackendSummary;
    use linattn_core::{
        Algorithm, Backend, Causality, DeviceKind, FeatureMap, Precision, Problem, Shape,
    };

    /// What a test double does wrong.
    #[derive(Clone, Copy, PartialEq)]
    enum Fault {
        None,
        /// Gradient dk scaled by 1 + 1e-3: far beyond the f32 tolerance.
        ScaledDk,
        OutOfMemory,
        Panic,
        WrongDims,
        Unavailable,
    }

    /// A backend that answers with the linear oracle, then applies its fault.
    struct Double {
        info: linattn_core::BackendInfo,
        fault: Fault,
        staged: Option<(Problem, Inputs)>,
        result: Option<(Tensor, Grads)>,
    }

    impl Double {
        fn boxed(fault: Fault) -> Box<dyn Backend> {
            Box::new(Double {
                info: linattn_core::BackendInfo {
                    name: "test/causal_recurrent/f32".into(),
                    device: DeviceKind::Cpu,
                    precision: Precision::F32,
                    algorithm: Algorithm::Linear(linattn_core::Form::Recurrent),
                    backward: Some(linattn_core::BackwardKind::Efficient),
                },
                fault,
                staged: None,
                result: None,
            })
        }
    }

    impl Backend for Double {
        fn info(&self) -> &linattn_core::BackendInfo {
            &self.info
        }
        fn supports(&self, problem: &Problem) -> Result<(), Unsupported> {
            if self.fault == Fault::Unavailable {
                return Err(Unsupported::Unavailable("no test device".into()));
            }
            linattn_core::check_linear_form(&self.info, problem)
        }
        fn stage(&mut self, problem: &Problem, inputs: &Inputs) -> Result<(), AttnError> {
            self.staged = Some((*problem, inputs.clone()));
            Ok(())
        }
        fn run_forward(&mut self) -> Result<linattn_core::RunStats, AttnError> {
            match self.fault {
                Fault::OutOfMemory => Err(AttnError::OutOfMemory {
                    device: "test".into(),
                    requested_bytes: 1 << 40,
                    detail: "test double".into(),
                }),
                Fault::Panic => panic!("test double panics on purpose"),
                _ => Ok(Default::default()),
            }
        }
        fn run_backward(&mut self) -> Result<linattn_core::RunStats, AttnError> {
            let (problem, inputs) = self.staged.as_ref().expect("staged");
            let (o, mut g) = linattn_cpu::oracle::backward(problem, inputs)?;
            if self.fault == Fault::ScaledDk {
                g.dk.map_in_place(|x| x * (1.0 + 1e-3));
            }
            if self.fault == Fault::WrongDims {
                g.dv = Tensor::zeros([1, 1, 1, 1])?;
            }
            self.result = Some((o, g));
            Ok(Default::default())
        }
        fn output(&mut self) -> Result<Tensor, AttnError> {
            Ok(self.result.as_ref().expect("ran").0.clone())
        }
        fn grads(&mut self) -> Result<Grads, AttnError> {
            Ok(self.result.as_ref().expect("ran").1.clone())
        }
    }

    fn check_one(fault: Fault, causality: Causality) -> (Option<CaseRecord>, BackendSummary) {
        let backend = Double::boxed(fault);
        let summary = BackendSummary::new(backend.info());
        let mut entry = Entry { backend, summary };
        let shape = Shape::new(1, 2, 9, 4, 3);
        let case = Case {
            index: 0,
            problem: Problem::new(shape, causality, FeatureMap::EluPlusOne),
            long: false,
        };
        let inputs = Inputs::random(shape, 5, true).unwrap();
        let record = check_case(&mut entry, &case, 5, &inputs, false, &mut HashMap::new());
        if let Some(r) = &record {
            entry.summary.add(r);
        }
        entry.summary.finish();
        (record, entry.summary)
    }

    #[test]
    fn a_faithful_backend_passes_on_output_and_gradients() {
        let (record, summary) = check_one(Fault::None, Causality::Causal);
        let record = record.unwrap();
        assert_eq!(record.outcome, Outcome::Pass);
        let tensors: Vec<&str> = record.errors.iter().map(|e| e.tensor.as_str()).collect();
        assert_eq!(tensors, ["o", "dq", "dk", "dv"]);
        assert_eq!(summary.verdict, "PASS");
    }

    #[test]
    fn faults_fail_the_case_with_their_message() {
        let (record, summary) = check_one(Fault::ScaledDk, Causality::Causal);
        let record = record.unwrap();
        assert_eq!(record.outcome, Outcome::Fail);
        assert!(
            record.failure_summary().starts_with("dk: rms ratio"),
            "{}",
            record.failure_summary()
        );
        assert_eq!(summary.verdict, "FAIL");

        for (fault, needle) in [
            (Fault::OutOfMemory, "out of memory on test"),
            (
                Fault::Panic,
                "backend panicked: test double panics on purpose",
            ),
            (Fault::WrongDims, "dv has dims [1, 1, 1, 1]"),
        ] {
            let (record, summary) = check_one(fault, Causality::Causal);
            let record = record.unwrap();
            assert_eq!(record.outcome, Outcome::Error);
            assert!(
                record.failure_summary().contains(needle),
                "{}",
                record.failure_summary()
            );
            assert_eq!((summary.failed, summary.verdict.as_str()), (1, "FAIL"));
        }
    }

    #[test]
    fn unsupported_problems_are_na_and_unavailable_backends_skipped() {
        let (record, summary) = check_one(Fault::None, Causality::NonCausal);
        assert_eq!(record.unwrap().outcome, Outcome::NotApplicable);
        assert_eq!((summary.run, summary.not_applicable), (0, 1));
        assert_eq!(summary.verdict, "n/a: no case applies");

        let (record, summary) = check_one(Fault::Unavailable, Causality::Causal);
        assert!(record.is_none());
        assert_eq!(summary.verdict, "skipped: no test device");
        assert_eq!(summary.failed, 0);
    }
}
