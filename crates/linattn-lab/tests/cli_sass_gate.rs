//! The counter gate (`linattn compare` of two `profile --json` files) catches what only the
//! SASS shows: the chunked kernels' exps planted back as `exp2f` (`CC_EX2_FTZ 0`: NVRTC's
//! `ex2.approx.f32`, which ptxas wraps in a range test and two predicated scalings around
//! MUFU.EX2) in a copy of `kernels/`. The PTX count barely moves (one kernel a little less),
//! so the PTX gate alone passes it; with `--sass` the estimated SASS of every kernel with an
//! exp rises 4–9% and the gate exits 1 naming it. The same kernels against themselves pass.
//!
//! Needs NVRTC, ptxas and nvdisasm (`LINATTN_PTXAS`, `LINATTN_NVDISASM`; `.ci/run` installs
//! them): without them the trial is reported as skipped, with why, and fails under
//! `LINATTN_REQUIRE_CUDA_TOOLS=1`.

use std::path::Path;
use std::process::{Command, Output};

const NAME: &str = "an_exp_ptxas_expands_is_a_sass_regression_the_ptx_count_misses";

fn main() {
    linattn_testkit::run(vec![linattn_testkit::with_cuda_tools(NAME, true, |_| {
        planted_exp()
    })])
}

/// `linattn` with the kernels of `kernels` (compiled into `cache`).
fn linattn(kernels: &Path, cache: &Path, args: &[&str]) -> Result<Output, String> {
    Command::new(env!("CARGO_BIN_EXE_linattn"))
        .env("LINATTN_KERNEL_DIR", kernels)
        .env("LINATTN_CACHE_DIR", cache)
        .args(args)
        .output()
        .map_err(|e| format!("the linattn binary: {e}"))
}

/// The chunked bf16 backend's forward+backward at N = 1024, D = 128, with `--sass`.
fn profile(kernels: &Path, cache: &Path, json: &Path) -> Result<(), String> {
    let args = [
        "profile",
        "--backend",
        "sim/causal_chunked/bf16",
        "--n",
        "1024",
        "--d",
        "128",
        "--mode",
        "forward+backward",
        "--quiet",
        "--sass",
        "--json",
        json.to_str().ok_or("a non-UTF-8 path")?,
    ];
    let out = linattn(kernels, cache, &args)?;
    if !out.status.success() {
        return Err(format!("profile: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

fn planted_exp() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (kernels, planted, cache) = (
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../kernels"),
        dir.path().join("kernels"),
        dir.path().join("cache"),
    );
    std::fs::create_dir(&planted).map_err(|e| e.to_string())?;
    for entry in std::fs::read_dir(&kernels).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_file() {
            let name = path.file_name().ok_or("a file without a name")?;
            let mut text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
            if name == "causal_chunked_common.cuh" {
                let from = "#define CC_EX2_FTZ 1";
                if !text.contains(from) {
                    return Err(format!("no `{from}` in causal_chunked_common.cuh to plant"));
                }
                text = text.replace(from, "#define CC_EX2_FTZ 0");
            }
            std::fs::write(planted.join(name), text).map_err(|e| e.to_string())?;
        }
    }
    let (base, new) = (dir.path().join("base.json"), dir.path().join("new.json"));
    profile(&kernels, &cache, &base)?;
    profile(&planted, &cache, &new)?;
    let compare = |b: &Path, n: &Path| {
        linattn(
            &kernels,
            &cache,
            &[
                "compare",
                b.to_str().unwrap_or(""),
                n.to_str().unwrap_or(""),
            ],
        )
    };
    let same = compare(&base, &base)?;
    if !same.status.success() {
        return Err(format!(
            "the kernels against themselves: exit {:?}\n{}",
            same.status.code(),
            String::from_utf8_lossy(&same.stdout)
        ));
    }
    let out = compare(&base, &new)?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{text}");
    let regressions: Vec<&str> = text.lines().filter(|l| l.contains("REGRESSION")).collect();
    let sass = regressions
        .iter()
        .filter(|l| l.contains("SASS warp instructions/token (estimated)"))
        .count();
    let ptx = regressions
        .iter()
        .filter(|l| l.contains("│ warp instructions/token"))
        .count();
    match (out.status.code(), sass, ptx) {
        (Some(1), 3.., 0) => Ok(()),
        (code, _, _) => Err(format!(
            "exit {code:?}, {sass} SASS and {ptx} PTX warp-instruction regressions (want exit 1, \
             at least 3 SASS, no PTX):\n{text}"
        )),
    }
}
