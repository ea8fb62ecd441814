//! Every backend the binary knows, and choosing among them by name.
//!
//! Names are `device/form[+variant]/precision` (e.g. `cpu-ref/causal_recurrent/f64`,
//! `cuda/causal_cumsum/f16`). A selection is a comma-separated list of patterns; each
//! pattern is an exact name or a glob where `*` matches any run of characters (slashes
//! included) and `?` one character: `cpu/*`, `*f16`, `cuda/causal_*/f32`, `*`. Matching is
//! case-sensitive, like the names. Every pattern must match something: a typo is an error
//! that lists the known names, never an empty run.

use linattn_core::{AttnError, Backend};
use linattn_cuda::executor::Platform;
use linattn_cuda::registry::{backends_of, FormEntry};

/// Every CUDA form of every crate that ships kernels, in one list: the binary's backends,
/// decoders and kernel variants all read it.
pub(crate) fn device_forms() -> Vec<FormEntry> {
    let mut forms = vec![linattn_softmax::cuda::FORM];
    forms.extend(linattn_cuda::FORMS);
    forms
}

/// Every backend, in a stable order: CPU linear attention, the CPU softmax baseline, then the
/// CUDA forms on a GPU and on the simulator. Backends whose hardware is absent are listed
/// too; their `supports` says why they cannot run (`Unsupported::Unavailable`).
///
/// A form lists its own variants per platform, one name per concept:
/// `causal_recurrent+storedbwd` is another backward on both platforms; `softmax+gemmkernel`
/// (the GEMM kernel instead of cuBLAS) exists on `cuda` only, because on `sim` the GEMM
/// kernel is what `sim/softmax` already runs.
pub(crate) fn all_backends() -> Vec<Box<dyn Backend>> {
    let mut all = linattn_cpu::backends();
    all.extend(linattn_softmax::cpu_backends());
    all.extend(backends_of(&device_forms()));
    all
}

/// Splits a comma-separated selection into trimmed, non-empty patterns.
pub(crate) fn split_patterns(selection: &str) -> Vec<&str> {
    selection
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

/// Whether `name` matches the glob `pattern` (`*`: any run of characters, `?`: one).
pub(crate) fn pattern_matches(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    // Iterative wildcard matching with backtracking to the last `*`: linear in practice.
    let (mut p, mut n) = (0, 0);
    let mut last_star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some('*') => {
                last_star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == '?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match last_star {
                Some((star_p, star_n)) => {
                    // Let the last `*` swallow one more character and retry.
                    p = star_p + 1;
                    n = star_n + 1;
                    last_star = Some((star_p, star_n + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// The error for a pattern that matched nothing, listing every known name.
pub(crate) fn unknown_backend(pattern: &str, known: &[&str]) -> AttnError {
    AttnError::InvalidArgument(format!(
        "unknown backend '{pattern}' (known: {})",
        known.join(", ")
    ))
}

/// Keeps the backends matching any pattern of `selection` (comma-separated globs), in
/// registry order and each once. `None` keeps everything. Fails on an empty selection and
/// on a pattern that matches no backend.
pub(crate) fn select(
    backends: Vec<Box<dyn Backend>>,
    selection: Option<&str>,
) -> Result<Vec<Box<dyn Backend>>, AttnError> {
    let Some(selection) = selection else {
        return Ok(backends);
    };
    let patterns = split_patterns(selection);
    if patterns.is_empty() {
        return Err(AttnError::InvalidArgument(format!(
            "empty backend selection '{selection}'"
        )));
    }
    let names: Vec<String> = backends.iter().map(|b| b.name().to_string()).collect();
    let known: Vec<&str> = names.iter().map(String::as_str).collect();
    for pattern in &patterns {
        if !known.iter().any(|name| pattern_matches(pattern, name)) {
            return Err(unknown_backend(pattern, &known));
        }
    }
    Ok(backends
        .into_iter()
        .filter(|b| patterns.iter().any(|p| pattern_matches(p, b.name())))
        .collect())
}

/// Every backend matching `selection` (see [`select`]); `None` means all of them.
pub(crate) fn selected_backends(
    selection: Option<&str>,
) -> Result<Vec<Box<dyn Backend>>, AttnError> {
    select(all_backends(), selection)
}

/// Name of the family a backend belongs to: the text before its first `/` (`cpu-ref`,
/// `cpu`, `cuda`, ...).
pub(crate) fn family(name: &str) -> &str {
    name.split_once('/').map_or(name, |(head, _)| head)
}

/// The platform a probe command (`latency`, `mma-probe`, `mufu`) runs on: `--platform cuda`
/// or `sim`; unset, the GPU when one is present, else the simulator.
pub(crate) fn probe_platform(text: Option<&str>) -> Result<Platform, AttnError> {
    match text {
        None if linattn_cuda::gpu_available().is_ok() => Ok(Platform::Cuda),
        None => Ok(Platform::Sim),
        Some("cuda") => Ok(Platform::Cuda),
        Some("sim") => Ok(Platform::Sim),
        Some(other) => Err(AttnError::InvalidArgument(format!(
            "--platform '{other}': expected cuda or sim"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linattn_core::{
        Algorithm, BackendInfo, DeviceKind, Form, Grads, Inputs, Precision, Problem, RunStats,
        Tensor, Unsupported,
    };

    /// A backend that only has a name: enough to test selection.
    struct Named(BackendInfo);

    impl Backend for Named {
        fn info(&self) -> &BackendInfo {
            &self.0
        }
        fn supports(&self, _: &Problem) -> Result<(), Unsupported> {
            Err(Unsupported::Unavailable("test double".into()))
        }
        fn stage(&mut self, _: &Problem, _: &Inputs) -> Result<(), AttnError> {
            Err(AttnError::State("test double".into()))
        }
        fn run_forward(&mut self) -> Result<RunStats, AttnError> {
            Err(AttnError::State("test double".into()))
        }
        fn run_backward(&mut self) -> Result<RunStats, AttnError> {
            Err(AttnError::State("test double".into()))
        }
        fn output(&mut self) -> Result<Tensor, AttnError> {
            Err(AttnError::State("test double".into()))
        }
        fn grads(&mut self) -> Result<Grads, AttnError> {
            Err(AttnError::State("test double".into()))
        }
    }

    fn named(names: &[&str]) -> Vec<Box<dyn Backend>> {
        names
            .iter()
            .map(|n| {
                Box::new(Named(BackendInfo {
                    name: n.to_string(),
                    device: DeviceKind::Cpu,
                    precision: Precision::F64,
                    algorithm: Algorithm::Linear(Form::Recurrent),
                    backward: None,
                })) as Box<dyn Backend>
            })
            .collect()
    }

    const NAMES: &[&str] = &[
        "cpu-ref/causal_recurrent/f64",
        "cpu-ref/noncausal/f64",
        "cpu/causal_recurrent/f32",
        "softmax/cpu/f32",
        "cuda/causal_cumsum/f16",
        "cuda/causal_cumsum/bf16",
        "cuda/causal_chunked/f16+tc",
    ];

    fn pick(selection: &str) -> Result<Vec<String>, AttnError> {
        select(named(NAMES), Some(selection))
            .map(|v| v.iter().map(|b| b.name().to_string()).collect())
    }

    #[test]
    fn globs_match_like_a_shell() {
        assert!(pattern_matches("cpu/*", "cpu/causal_recurrent/f32"));
        assert!(!pattern_matches("cpu/*", "cpu-ref/causal_recurrent/f64"));
        assert!(pattern_matches("*f16", "cuda/causal_cumsum/f16"));
        assert!(!pattern_matches("*f16", "cuda/causal_cumsum/bf16+x"));
        assert!(pattern_matches("*f16*", "cuda/causal_chunked/f16+tc"));
        assert!(pattern_matches(
            "cuda/causal_*/f1?",
            "cuda/causal_cumsum/f16"
        ));
        assert!(pattern_matches("*", ""));
        assert!(pattern_matches("a*b*c", "axxbyybzc"));
        assert!(!pattern_matches("a*b*c", "axxbyyb"));
        assert!(pattern_matches("exact", "exact"));
        assert!(!pattern_matches("exact", "exactly"));
        assert!(!pattern_matches("", "x"));
    }

    #[test]
    fn selection_keeps_registry_order_and_dedups() {
        // `*f16` also matches `bf16`: a glob is a glob.
        assert_eq!(
            pick("*f16, cpu/*").unwrap(),
            vec![
                "cpu/causal_recurrent/f32",
                "cuda/causal_cumsum/f16",
                "cuda/causal_cumsum/bf16"
            ]
        );
        assert_eq!(pick("*/f16").unwrap(), vec!["cuda/causal_cumsum/f16"]);
        assert_eq!(pick("cuda/*,*cumsum*").unwrap().len(), 3);
        assert_eq!(pick("cpu-ref/causal_recurrent/f64").unwrap().len(), 1);
        assert_eq!(pick("*").unwrap().len(), NAMES.len());
        assert_eq!(select(named(NAMES), None).unwrap().len(), NAMES.len());
    }

    #[test]
    fn unknown_patterns_are_named_with_the_known_list() {
        let err = pick("cpu/*,cdua/*").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("unknown backend 'cdua/*'"), "{msg}");
        assert!(
            msg.contains("(known: cpu-ref/causal_recurrent/f64, "),
            "{msg}"
        );
        assert!(err.is_user_error());
        assert!(pick(" , ").is_err());
    }

    /// The real registry: every name once; the softmax baseline's GEMM-kernel variant on
    /// `cuda` beside cuBLAS (what `check --backends 'cuda/*'` runs on a GPU), none on `sim`,
    /// whose `sim/softmax` is the GEMM kernel already.
    #[test]
    fn registry_names_are_unique_and_gemmkernel_is_cuda_only() {
        let names: Vec<String> = all_backends()
            .iter()
            .map(|b| b.name().to_string())
            .collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "a name twice: {names:?}");
        let softmax_on = |platform: &str| {
            names
                .iter()
                .filter(|n| n.starts_with(&format!("{platform}/softmax")))
                .map(String::as_str)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            softmax_on("cuda"),
            [
                "cuda/softmax/f32",
                "cuda/softmax/f16",
                "cuda/softmax+gemmkernel/f32",
                "cuda/softmax+gemmkernel/f16"
            ]
        );
        assert_eq!(softmax_on("sim"), ["sim/softmax/f32", "sim/softmax/f16"]);
        let cuda_glob = select(all_backends(), Some("cuda/*")).unwrap();
        assert!(cuda_glob
            .iter()
            .any(|b| b.name() == "cuda/softmax+gemmkernel/f16"));
        // Every variant a form has on both platforms is listed on both (storedbwd).
        for name in names.iter().filter(|n| n.starts_with("cuda/")) {
            let on_sim = name.replacen("cuda/", "sim/", 1);
            assert_eq!(
                names.contains(&on_sim),
                !name.contains("+gemmkernel"),
                "{name} vs {on_sim}"
            );
        }
    }

    #[test]
    fn families_are_the_first_segment() {
        assert_eq!(family("cpu-ref/causal_recurrent/f64"), "cpu-ref");
        assert_eq!(family("bare"), "bare");
    }
}
