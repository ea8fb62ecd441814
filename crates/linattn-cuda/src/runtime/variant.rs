//! What a kernel is compiled from: [`KernelVariant`] (a source, `-D` defines, entry points),
//! the target [`Arch`], and the shared `-D` vocabulary (storage type, fused map, head-dim
//! classes).

use std::fmt;

use linattn_core::{FeatureMap, Precision, Unsupported};

/// A file under `kernels/` that a source `#include`s by `name` (a part of a program too long
/// for one file): NVRTC receives it with the program, so the include needs no path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelHeader {
    /// File name under `kernels/`, as the `#include` spells it.
    pub name: &'static str,
    /// Its text (`include_str!`).
    pub text: &'static str,
}

/// The [`KernelHeader`] of `kernels/<name>`, its text embedded at build time:
/// `kernel_header!("causal_chunked_states.cuh")`.
#[macro_export]
macro_rules! kernel_header {
    ($name:literal) => {
        $crate::runtime::variant::KernelHeader {
            name: $name,
            text: include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../kernels/",
                $name
            )),
        }
    };
}

/// One compilable kernel: a source, its `-D` specialisation and the entry points it exports.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelVariant {
    /// File name under `kernels/`, e.g. `noncausal.cu` (names the program in logs).
    pub source_name: &'static str,
    /// The source text (`include_str!`), without the prelude.
    pub source: &'static str,
    /// The headers the source includes (none for most kernels).
    pub headers: &'static [KernelHeader],
    /// `-DNAME=VALUE` pairs, kept in insertion order (part of the cache key).
    pub defines: Vec<(String, String)>,
    /// `extern "C"` kernels the variant must export; compilation fails if ptxas does not
    /// report one of them.
    pub entry_points: Vec<String>,
    /// Hot kernels (those that carry a form's main loop) must not spill: the compile-all
    /// test fails when ptxas reports spill bytes for them.
    pub hot: bool,
    /// Compiled with `-lineinfo`: `.loc` before the PTX instructions, for a profile by source
    /// line (`SimExecutor::set_source_lines`). The code is the same; the PTX text, its line
    /// numbers and the cache key are not.
    pub line_info: bool,
}

impl KernelVariant {
    pub fn new(source_name: &'static str, source: &'static str) -> Self {
        KernelVariant {
            source_name,
            source,
            headers: &[],
            defines: Vec::new(),
            entry_points: Vec::new(),
            hot: false,
            line_info: false,
        }
    }

    pub fn headers(mut self, headers: &'static [KernelHeader]) -> Self {
        self.headers = headers;
        self
    }

    pub fn define(mut self, name: impl Into<String>, value: impl fmt::Display) -> Self {
        self.defines.push((name.into(), value.to_string()));
        self
    }

    pub fn entry(mut self, name: impl Into<String>) -> Self {
        self.entry_points.push(name.into());
        self
    }

    /// [`entry`](Self::entry) for each of `names`, in order.
    pub fn entries(self, names: &[&str]) -> Self {
        names
            .iter()
            .fold(self, |variant, &name| variant.entry(name))
    }

    pub fn hot(mut self) -> Self {
        self.hot = true;
        self
    }

    /// This variant compiled with `-lineinfo` ([`KernelVariant::line_info`]).
    pub fn with_line_info(mut self) -> Self {
        self.line_info = true;
        self
    }

    /// `noncausal.cu[LA_STORAGE=1,LA_MAP=1]`: for logs and tables.
    pub fn label(&self) -> String {
        let defines: Vec<String> = self
            .defines
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!("{}[{}]", self.source_name, defines.join(","))
    }
}

/// A real GPU architecture `sm_{major}{minor}` (real, so NVRTC runs ptxas).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    pub major: u32,
    pub minor: u32,
}

impl Arch {
    pub const SM80: Arch = Arch { major: 8, minor: 0 };
    pub const SM90: Arch = Arch { major: 9, minor: 0 };
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}{}", self.major, self.minor)
    }
}

/// Smallest and largest head dim (D or M) the kernels take; dims are multiples of 16.
pub const MIN_HEAD_DIM: usize = 16;
pub const MAX_HEAD_DIM: usize = 256;
/// Head-dim classes: kernels size their per-thread arrays by the class (`LA_DK_MAX`,
/// `LA_DV_MAX`) and loop to the runtime dim, so 4 classes cover every supported dim.
pub const HEAD_DIM_CLASSES: [usize; 4] = [32, 64, 128, 256];

/// `Ok` for 16 ≤ dim ≤ 256, dim a multiple of 16; otherwise `Unsupported::Problem` naming the
/// dim (`what` is e.g. "head dim D" or "value dim M").
pub fn check_head_dim(what: &str, dim: usize) -> Result<(), Unsupported> {
    if (MIN_HEAD_DIM..=MAX_HEAD_DIM).contains(&dim) && dim % 16 == 0 {
        Ok(())
    } else {
        Err(Unsupported::Problem(format!(
            "{what} = {dim}: CUDA kernels take {MIN_HEAD_DIM}..={MAX_HEAD_DIM} in multiples of 16"
        )))
    }
}

/// The class (32, 64, 128 or 256) that holds `dim`; `dim` need not be a multiple of 16 (a
/// feature dim C = D+1 for `1+cos`), but must be in 1..=256.
pub fn head_dim_class(what: &str, dim: usize) -> Result<usize, Unsupported> {
    HEAD_DIM_CLASSES
        .iter()
        .copied()
        .find(|&class| dim >= 1 && dim <= class)
        .ok_or_else(|| {
            Unsupported::Problem(format!(
                "{what} = {dim}: CUDA kernels take at most {MAX_HEAD_DIM}"
            ))
        })
}

/// `("LA_STORAGE", "0"|"1"|"2")` for f32, f16, bf16; f64 has no CUDA kernels.
pub fn storage_define(precision: Precision) -> Result<(String, String), Unsupported> {
    let code = match precision {
        Precision::F32 => 0,
        Precision::F16 => 1,
        Precision::BF16 => 2,
        Precision::F64 => {
            return Err(Unsupported::Problem(
                "CUDA kernels store f32, f16 or bf16, not f64".into(),
            ))
        }
    };
    Ok(("LA_STORAGE".into(), code.to_string()))
}

/// `("LA_MAP", code)` for the maps fused in kernels (identity 0, elu+1 1, relu 2). `None` for
/// maps that need the separate φ stage (see `feature_map`); the core then uses identity.
pub fn map_define(map: &FeatureMap) -> Option<(String, String)> {
    let code = match map {
        FeatureMap::Identity => 0,
        FeatureMap::EluPlusOne => 1,
        FeatureMap::Relu => 2,
        _ => return None,
    };
    Some(("LA_MAP".into(), code.to_string()))
}
