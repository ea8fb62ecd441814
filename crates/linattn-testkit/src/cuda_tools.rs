//! The CUDA command-line tools the SASS tests read kernels with: `ptxas` and `nvdisasm`, the
//! pinned wheels `.ci/run` installs, found through `LINATTN_PTXAS` and `LINATTN_NVDISASM`.
//! Where they are missing, a trial that needs them is reported as skipped with why, and
//! fails instead when `LINATTN_REQUIRE_CUDA_TOOLS=1` (as CI sets it).

use std::path::PathBuf;

use libtest_mimic::Trial;

/// The variable that makes missing tools a failure.
pub const REQUIRE_CUDA_TOOLS: &str = "LINATTN_REQUIRE_CUDA_TOOLS";

/// Where the tools are.
#[derive(Debug, Clone)]
pub struct CudaTools {
    pub ptxas: PathBuf,
    pub nvdisasm: PathBuf,
}

/// The tools, or why they cannot be used here. `nvrtc`: also require NVRTC (the tests that
/// compile their own kernels; the stamped ones get NVRTC's skip from the simulator's).
pub fn cuda_tools(nvrtc: bool) -> Result<CudaTools, String> {
    if nvrtc {
        linattn_cuda::runtime::nvrtc_available().map_err(|e| format!("no NVRTC: {e}"))?;
    }
    let find = |var: &str| -> Result<PathBuf, String> {
        let path = std::env::var_os(var)
            .map(PathBuf::from)
            .ok_or_else(|| format!("{var} is not set (.ci/run installs the tool)"))?;
        if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{var}={} is not a file", path.display()))
        }
    };
    Ok(CudaTools {
        ptxas: find("LINATTN_PTXAS")?,
        nvdisasm: find("LINATTN_NVDISASM")?,
    })
}

/// The trial `name` stands for where the tools are missing (`why`): skipped with the reason,
/// or failing with it under `LINATTN_REQUIRE_CUDA_TOOLS=1`.
pub fn without_cuda_tools(name: impl Into<String>, why: String) -> Trial {
    if std::env::var(REQUIRE_CUDA_TOOLS).as_deref() == Ok("1") {
        Trial::test(name, move || Err(why.into()))
    } else {
        Trial::test(name, || Ok(()))
            .with_ignored_flag(true)
            .with_kind(format!("skipped: {why}"))
    }
}

/// A trial that needs the tools (and NVRTC with `nvrtc`): `body` with them where they are,
/// else [`without_cuda_tools`].
pub fn with_cuda_tools(
    name: impl Into<String>,
    nvrtc: bool,
    body: impl FnOnce(&CudaTools) -> Result<(), String> + Send + 'static,
) -> Trial {
    match cuda_tools(nvrtc) {
        Ok(tools) => Trial::test(name, move || body(&tools).map_err(Into::into)),
        Err(why) => without_cuda_tools(name, why),
    }
}
