//! `linattn kernels`: compile every kernel variant with NVRTC for real targets and print
//! ptxas' registers / spills / shared memory per kernel. Needs NVRTC, not a GPU.

use linattn_core::AttnError;
use linattn_cuda::runtime::{self, Arch, KernelVariant};
use std::process::ExitCode;
use tabled::{settings::Style, Table, Tabled};

#[derive(clap::Args)]
pub struct KernelsArgs {
    /// Comma-separated real targets, e.g. sm_80,sm_90.
    #[arg(long, default_value = "sm_80,sm_90")]
    arch: String,
    /// Only variants whose label contains this text (e.g. causal_chunked.cu).
    #[arg(long)]
    filter: Option<String>,
}

#[derive(Tabled)]
struct Row {
    variant: String,
    arch: String,
    kernel: String,
    registers: u32,
    #[tabled(rename = "spill st/ld (B)")]
    spills: String,
    #[tabled(rename = "smem (B)")]
    smem: u64,
    hot: &'static str,
}

fn parse_arch(s: &str) -> Result<Arch, AttnError> {
    let digits = s.trim().strip_prefix("sm_").ok_or_else(|| {
        AttnError::InvalidArgument(format!("arch '{s}' is not of the form sm_XY (real target)"))
    })?;
    let bad = || AttnError::InvalidArgument(format!("arch '{s}' is not of the form sm_XY"));
    if digits.len() < 2 || !digits.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let (major, minor) = digits.split_at(digits.len() - 1);
    Ok(Arch {
        major: major.parse().map_err(|_| bad())?,
        minor: minor.parse().map_err(|_| bad())?,
    })
}

/// All variants of every crate that ships kernels.
pub(crate) fn all_variants() -> Vec<KernelVariant> {
    linattn_cuda::registry::variants_of(&crate::registry::device_forms())
}

pub fn run(args: KernelsArgs) -> Result<ExitCode, AttnError> {
    let archs = args
        .arch
        .split(',')
        .map(parse_arch)
        .collect::<Result<Vec<_>, _>>()?;
    runtime::nvrtc_available()?;
    let variants: Vec<KernelVariant> = all_variants()
        .into_iter()
        .filter(|v| args.filter.as_ref().is_none_or(|f| v.label().contains(f)))
        .collect();
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for arch in &archs {
        for variant in &variants {
            match runtime::compile(variant, *arch) {
                Err(e) => failures.push(format!("{} for {arch}: {e}", variant.label())),
                Ok(compiled) => {
                    for r in &compiled.report {
                        if variant.hot && (r.spill_stores_bytes > 0 || r.spill_loads_bytes > 0) {
                            failures.push(format!(
                                "{} for {arch}: hot kernel {} spills ({} B stores, {} B loads)",
                                variant.label(),
                                r.kernel,
                                r.spill_stores_bytes,
                                r.spill_loads_bytes
                            ));
                        }
                        rows.push(Row {
                            variant: variant.label(),
                            arch: arch.to_string(),
                            kernel: r.kernel.clone(),
                            registers: r.registers,
                            spills: format!("{}/{}", r.spill_stores_bytes, r.spill_loads_bytes),
                            smem: r.shared_bytes,
                            hot: if variant.hot { "yes" } else { "" },
                        });
                    }
                }
            }
        }
    }
    println!("{}", Table::new(&rows).with(Style::markdown()));
    println!(
        "\n{} variants x {} archs compiled, {} kernels reported, {} problems",
        variants.len(),
        archs.len(),
        rows.len(),
        failures.len()
    );
    for f in &failures {
        eprintln!("FAIL {f}");
    }
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_names_parse_or_are_refused() {
        assert_eq!(parse_arch("sm_90").unwrap(), Arch::SM90);
        assert_eq!(parse_arch("sm_80").unwrap(), Arch::SM80);
        assert_eq!(
            parse_arch("sm_120").unwrap(),
            Arch {
                major: 12,
                minor: 0
            }
        );
        for bad in ["compute_90", "sm_", "sm_9", "90", "sm_9a"] {
            assert!(parse_arch(bad).is_err(), "{bad}");
        }
    }
}
