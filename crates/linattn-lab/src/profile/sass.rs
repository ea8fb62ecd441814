//! What ptxas makes of each source line (`linattn profile --lines`): the SASS instructions of
//! the kernel's `-lineinfo` cubin per source line (`nvdisasm -g`), beside the PTX
//! instructions the simulator counted there. One executed PTX instruction of a line is
//! estimated at (SASS of the line) / (PTX of the line) SASS instructions, so a kernel's
//! executed SASS at Σ lines (executed PTX × that ratio): an estimate (ptxas may unroll,
//! hoist or if-convert across lines), but it shows where the model's PTX count and the
//! hardware's instruction stream part (`ex2.approx.f32`: one PTX instruction, four SASS).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use linattn_cuda::runtime::{compile, Arch};

use crate::kernels::all_variants;
use crate::results::profiles::ProfileRecord;

/// SASS instructions per (kernel file name, line).
type LineSass = HashMap<(String, u32), u64>;
/// [`LineSass`] per kernel (entry point) of a compiled variant.
type VariantSass = HashMap<String, LineSass>;

/// The `nvdisasm` to use: `LINATTN_NVDISASM`, else one on `PATH`.
fn nvdisasm() -> PathBuf {
    std::env::var_os("LINATTN_NVDISASM").map_or_else(|| PathBuf::from("nvdisasm"), PathBuf::from)
}

/// Fills each kernel's lines' `sass_static` and the kernel's `sass_per_token_estimate` from
/// the `-lineinfo` cubins of `arch`; the reason when it cannot (no nvdisasm, a variant that
/// does not compile): the profile is complete without it.
pub(super) fn annotate(profiles: &mut [ProfileRecord], arch: Arch) -> Result<(), String> {
    let mut by_variant: HashMap<String, VariantSass> = HashMap::new();
    for p in profiles.iter_mut() {
        for k in p.kernels.iter_mut().filter(|k| !k.source_lines.is_empty()) {
            if !by_variant.contains_key(&k.variant) {
                let sass = variant_sass(&k.variant, arch)?;
                by_variant.insert(k.variant.clone(), sass);
            }
            let Some(lines) = by_variant[&k.variant].get(&k.kernel) else {
                return Err(format!("nvdisasm shows no {} in {}", k.kernel, k.variant));
            };
            let mut estimate = 0.0;
            for l in &mut k.source_lines {
                let sass = lines.get(&(l.file.clone(), l.line)).copied().unwrap_or(0);
                l.sass_static = Some(sass);
                estimate += l.per_token * sass as f64 / l.ptx_static.max(1) as f64;
            }
            k.sass_per_token_estimate = Some(estimate);
        }
    }
    Ok(())
}

/// Per kernel of `label`'s `-lineinfo` compile for `arch`: SASS instructions per (file name,
/// line).
fn variant_sass(label: &str, arch: Arch) -> Result<VariantSass, String> {
    let variant = all_variants()
        .into_iter()
        .find(|v| v.label() == label)
        .ok_or_else(|| format!("no kernel variant {label}"))?
        .with_line_info();
    let compiled = compile(&variant, arch).map_err(|e| e.to_string())?;
    let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
    let cubin = dir.path().join("kernels.cubin");
    std::fs::write(&cubin, &compiled.cubin).map_err(|e| format!("{}: {e}", cubin.display()))?;
    let tool = nvdisasm();
    let out = Command::new(&tool)
        .arg("-g")
        .arg(&cubin)
        .output()
        .map_err(|e| {
            format!(
                "{}: {e} (set LINATTN_NVDISASM; .ci/run installs the pinned wheel)",
                tool.display()
            )
        })?;
    if !out.status.success() {
        return Err(format!(
            "{} -g {label}: {}",
            tool.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(per_line(&String::from_utf8_lossy(&out.stdout)))
}

/// `nvdisasm -g` text → per kernel (its `.text.` section), SASS instructions per (file name,
/// line) of the `//## File "…", line N` marker before them (instructions before any marker:
/// ("", 0)).
fn per_line(sass: &str) -> VariantSass {
    let mut out = VariantSass::new();
    let mut kernel: Option<String> = None;
    let mut at = (String::new(), 0u32);
    for line in sass.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix(".section") {
            kernel = rest
                .trim()
                .strip_prefix(".text.")
                .map(|r| r.split(',').next().unwrap_or_default().to_string());
            at = (String::new(), 0);
        } else if let Some(rest) = t.strip_prefix("//## File \"") {
            let (path, tail) = rest.split_once('"').unwrap_or((rest, ""));
            let number = tail
                .trim_start_matches(',')
                .trim()
                .strip_prefix("line ")
                .and_then(|n| n.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let name = path.rsplit('/').next().unwrap_or_default().to_string();
            at = (name, number);
        } else if t.starts_with("/*") && t.contains("*/") {
            // An instruction: `/*0200*/  OPCODE …;` (not a bare address or a comment).
            let after = t.split_once("*/").map_or("", |(_, a)| a.trim());
            if let (Some(k), false) = (&kernel, after.is_empty()) {
                *out.entry(k.clone())
                    .or_default()
                    .entry(at.clone())
                    .or_default() += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{all_variants, per_line};

    #[test]
    fn the_files_of_every_sim_backend_are_found() {
        let variants = all_variants();
        for name in [
            "prelude.cuh",
            "softmax.cu",
            "causal_chunked.cu",
            "causal_chunked_states.cuh",
            "noncausal.cu",
        ] {
            assert!(
                linattn_cuda::kernel_file_text(name, &variants).is_some(),
                "{name}"
            );
        }
        assert!(linattn_cuda::kernel_file_text("nope.cu", &variants).is_none());
    }

    #[test]
    fn counts_instructions_per_marker_and_kernel() {
        let text = r#"
	.section	.text.k_one,"ax",@progbits
.text.k_one:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
	//## File "/w/a.cu", line 12
        /*0010*/                   FMUL R7, R7, R13 ;
        /*0020*/              @!P1 FMUL R7, R7, 0.5 ;
.L_x_1:
	//## File "/w/b.cuh", line 59 inlined at "/w/a.cu", line 3
        /*0030*/                   MUFU.EX2 R8, R7 ;
	.section	.text.k_two,"ax",@progbits
	//## File "/w/a.cu", line 12
        /*0000*/                   EXIT ;
"#;
        let got = per_line(text);
        let one = &got["k_one"];
        assert_eq!(one[&(String::new(), 0)], 1);
        assert_eq!(one[&("a.cu".to_string(), 12)], 2);
        assert_eq!(one[&("b.cuh".to_string(), 59)], 1);
        assert_eq!(got["k_two"][&("a.cu".to_string(), 12)], 1);
        assert_eq!(got.len(), 2);
    }
}
