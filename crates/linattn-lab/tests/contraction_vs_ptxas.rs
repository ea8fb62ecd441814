//! The simulator's rule for which `mul.f32` ptxas folds into `add.f32` / `sub.f32`
//! (`linattn_ptxsim::ptxas::contract`) against ptxas itself, kernel by kernel: every sm_90
//! variant's PTX is assembled by ptxas 13.0.88 with `-lineinfo` (which tags each SASS
//! instruction with its PTX line) and disassembled by nvdisasm (`-gp`); an add or sub whose
//! line became an FFMA was contracted. The rule must name exactly those lines.
//!
//! Needs the tools of the pinned wheels `nvidia-cuda-nvcc==13.0.88` (ptxas) and
//! `nvidia-cuda-nvdisasm==13.2.86`, found through `LINATTN_PTXAS` and `LINATTN_NVDISASM`
//! (`.ci/run` installs them); without them the trial is reported as skipped, with why.
//! `LINATTN_CONTRACTION_ONLY=softmax.cu` keeps the variants whose label contains the text.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;

use linattn_cuda::runtime::{compile, Arch};
use linattn_ptxsim::ir::{BinOp, Op, Ty};
use linattn_ptxsim::{Device, SimArch};
use linattn_testkit::CudaTools as Tools;

const NAME: &str = "the_rule_contracts_exactly_the_adds_ptxas_makes_ffma";

fn main() {
    linattn_testkit::run(vec![linattn_testkit::with_cuda_tools(
        NAME,
        true,
        compare_all,
    )])
}

/// Per kernel, the PTX lines of its SASS FFMAs (from `nvdisasm -gp` of a `-lineinfo` cubin).
fn ffma_lines(
    tools: &Tools,
    ptx: &str,
    dir: &Path,
    tag: &str,
) -> Result<HashMap<String, BTreeSet<u32>>, String> {
    let ptx_path = dir.join(format!("{tag}.ptx"));
    let cubin = dir.join(format!("{tag}.cubin"));
    std::fs::write(&ptx_path, ptx).map_err(|e| e.to_string())?;
    let run = |cmd: &mut Command| -> Result<String, String> {
        let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if !out.status.success() {
            return Err(format!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    run(Command::new(&tools.ptxas)
        .args(["-arch=sm_90", "-lineinfo", "-o"])
        .arg(&cubin)
        .arg(&ptx_path))?;
    let sass = run(Command::new(&tools.nvdisasm)
        .args(["-gp", "-c"])
        .arg(&cubin))?;
    let mut by_kernel: HashMap<String, BTreeSet<u32>> = HashMap::new();
    let (mut kernel, mut line) = (String::new(), None::<u32>);
    for text in sass.lines() {
        let t = text.trim();
        if let Some(name) = t.strip_prefix(".text.").and_then(|n| n.strip_suffix(':')) {
            kernel = name.to_string();
            line = None;
        } else if t.starts_with("//## File") {
            line = t.rsplit("line ").next().and_then(|n| n.trim().parse().ok());
        } else if t.starts_with("/*") {
            // `/*0150*/  @!P0 FFMA R1, ...`: the opcode is the first word after any guard.
            let body = t.split_once("*/").map_or("", |(_, b)| b).trim();
            let opcode = body
                .split_whitespace()
                .find(|w| !w.starts_with('@'))
                .unwrap_or("");
            if opcode.starts_with("FFMA") {
                if let Some(l) = line {
                    by_kernel.entry(kernel.clone()).or_default().insert(l);
                }
            }
        }
    }
    Ok(by_kernel)
}

fn compare_all(tools: &Tools) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let device = Device::new(SimArch::SM90, 1 << 20);
    let mut problems = Vec::new();
    let (mut contracted, mut kernels) = (0usize, 0usize);
    // Every kernel file of the workspace: the linear forms and the softmax baseline's.
    let mut variants = linattn_cuda::kernel_variants();
    variants.extend(linattn_softmax::kernel_variants());
    if let Ok(only) = std::env::var("LINATTN_CONTRACTION_ONLY") {
        variants.retain(|v| v.label().contains(&only));
    }
    for (i, variant) in variants.iter().enumerate() {
        let compiled = compile(variant, Arch::SM90).map_err(|e| e.to_string())?;
        let ptx = compiled.ptx.trim_end_matches('\0');
        let sass = ffma_lines(tools, ptx, dir.path(), &format!("v{i}"))?;
        let module = device
            .load(ptx)
            .map_err(|e| format!("{}: {e}", variant.label()))?;
        for name in module.kernel_names() {
            let kernel = module.kernel(name).map_err(|e| e.to_string())?;
            kernels += 1;
            let candidates: BTreeSet<u32> = kernel
                .instrs
                .iter()
                .filter(|ins| {
                    matches!(
                        ins.op,
                        Op::Bin {
                            op: BinOp::Add | BinOp::Sub,
                            ty: Ty::F32,
                            mode,
                            ..
                        } if mode.contractible && !mode.ftz && !mode.sat
                    )
                })
                .map(|ins| ins.line)
                .collect();
            let rule: BTreeSet<u32> = linattn_ptxsim::ptxas::contract::find(&kernel.instrs)
                .iter()
                .map(|c| kernel.instrs[c.add].line)
                .collect();
            let hardware: BTreeSet<u32> = sass
                .get(name)
                .map(|lines| lines.intersection(&candidates).copied().collect())
                .unwrap_or_default();
            contracted += hardware.len();
            if rule != hardware {
                let missed: Vec<_> = hardware.difference(&rule).collect();
                let extra: Vec<_> = rule.difference(&hardware).collect();
                problems.push(format!(
                    "{} {name}: ptxas contracts lines {missed:?} that the rule does not; \
                     the rule contracts lines {extra:?} that ptxas does not",
                    variant.label()
                ));
            }
        }
    }
    println!("{kernels} kernels, {contracted} adds contracted by ptxas, all named by the rule");
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}
