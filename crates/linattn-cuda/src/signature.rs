//! Holds every kernel argument struct ([`crate::params`]) against its kernel, two ways:
//! * against the `.cu` source: the struct's field names and kinds are the parameter names
//!   and C types of the `extern "C" __global__` declaration, in order, and every entry point
//!   of the file has a struct (no NVRTC needed);
//! * against the PTX of a compiled variant: the `.entry` parameter list has the struct's
//!   count, sizes and float/integer kinds (what a launch actually passes).
//!
//! `tests/kernel_params.rs` runs both over every form of the registry; a swapped, missing or
//! retyped field fails there instead of at a launch.

use linattn_ptxsim::ir::Ty;

use crate::params::{ParamKind, ParamSpec};
use crate::registry::FormEntry;
use crate::runtime::{compile, Arch};

/// One `extern "C" __global__` declaration: entry name and (parameter name, kind) pairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSignature {
    pub entry: String,
    pub params: Vec<(String, ParamKind)>,
}

/// The kind of a C parameter declaration (`const la_storage_t* __restrict__ q`, `int n`,
/// `long long rows`, `la_index_t stride_a`, `float eps`), or `None` for a type the structs
/// have no kind for.
fn c_kind(declaration: &str) -> Option<ParamKind> {
    if declaration.contains('*') {
        return Some(ParamKind::Ptr);
    }
    let words: Vec<&str> = declaration.split_whitespace().collect();
    let ty = words[..words.len().saturating_sub(1)].join(" ");
    match ty.as_str() {
        "int" => Some(ParamKind::I32),
        "unsigned" | "unsigned int" => Some(ParamKind::U32),
        "long long" | "la_index_t" => Some(ParamKind::I64),
        "float" => Some(ParamKind::F32),
        _ => None,
    }
}

/// The `extern "C" __global__` declarations written out in `text`, in order.
fn declarations(text: &str) -> Result<Vec<SourceSignature>, String> {
    const MARKER: &str = "extern \"C\" __global__ void";
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(MARKER) {
        rest = &rest[at + MARKER.len()..];
        let mut head = rest.trim_start();
        // An optional __launch_bounds__(...) before the name.
        if let Some(after) = head.strip_prefix("__launch_bounds__") {
            let close = after
                .find(')')
                .ok_or("unclosed __launch_bounds__ in a kernel declaration")?;
            head = after[close + 1..].trim_start();
        }
        let open = head.find('(').ok_or("a kernel declaration without '('")?;
        // The name is the last word before '(': a macro standing for the launch bounds
        // (`CC_DV_BOUNDS`, defined per variant) may come before it.
        let entry = head[..open]
            .split_whitespace()
            .last()
            .ok_or("a kernel declaration without a name")?
            .to_string();
        let close = head[open..]
            .find(')')
            .ok_or_else(|| format!("{entry}: unclosed parameter list"))?;
        let mut params = Vec::new();
        for declaration in head[open + 1..open + close].split(',') {
            let declaration = declaration.split_whitespace().collect::<Vec<_>>().join(" ");
            let name = declaration
                .rsplit([' ', '*'])
                .next()
                .unwrap_or_default()
                .to_string();
            let kind = c_kind(&declaration)
                .ok_or_else(|| format!("{entry}: no parameter kind for '{declaration}'"))?;
            params.push((name, kind));
        }
        found.push(SourceSignature { entry, params });
    }
    Ok(found)
}

/// `source` split into its `#define`s (continuation lines joined) and everything else.
fn split_defines(source: &str) -> (Vec<String>, String) {
    let (mut defines, mut rest) = (Vec::new(), String::new());
    let mut open: Option<String> = None;
    for line in source.lines() {
        let continued = line.trim_end().ends_with('\\');
        let text = line.trim_end().trim_end_matches('\\');
        match open.as_mut() {
            Some(define) => define.push_str(text),
            None if line.trim_start().starts_with("#define") => open = Some(text.to_string()),
            None => {
                rest.push_str(line);
                rest.push('\n');
                continue;
            }
        }
        if !continued {
            defines.extend(open.take());
        }
    }
    defines.extend(open);
    (defines, rest)
}

/// Every entry point of a kernel source: the declarations written out, and those a macro
/// declares (`#define X_ENTRY(name, ...) extern "C" __global__ void name(params) { ... }`,
/// then `X_ENTRY(x_entry, ...)`: the entry takes the macro's parameter list).
pub fn source_signatures(source: &str) -> Result<Vec<SourceSignature>, String> {
    let (defines, rest) = split_defines(source);
    let mut found = declarations(&rest)?;
    for define in defines {
        let Some(head) = define.trim_start().strip_prefix("#define") else {
            continue;
        };
        let head = head.trim_start();
        let (Some(open), Some(close)) = (head.find('('), head.find(')')) else {
            continue;
        };
        let macro_name = head[..open].trim();
        let first_arg = head[open + 1..close].split(',').next().unwrap_or("").trim();
        let declared = declarations(&head[close + 1..])?;
        let [template] = declared.as_slice() else {
            continue;
        };
        if template.entry != first_arg {
            continue;
        }
        for line in rest.lines() {
            let Some(call) = line.trim_start().strip_prefix(macro_name) else {
                continue;
            };
            let Some(args) = call.trim_start().strip_prefix('(') else {
                continue;
            };
            let entry = args.split([',', ')']).next().unwrap_or("").trim();
            if !entry.is_empty() {
                found.push(SourceSignature {
                    entry: entry.to_string(),
                    params: template.params.clone(),
                });
            }
        }
    }
    Ok(found)
}

/// The form's argument structs against its source: same entries, names, kinds and order.
pub fn check_against_source(form: &FormEntry) -> Result<(), String> {
    let mut declared = source_signatures(form.source)?;
    for header in form.headers {
        declared.extend(source_signatures(header.text)?);
    }
    let mut problems = Vec::new();
    for signature in &declared {
        match form
            .kernel_params
            .iter()
            .find(|s| s.entry == signature.entry)
        {
            None => problems.push(format!("{}: no argument struct", signature.entry)),
            Some(spec) => {
                let spec_params: Vec<(String, ParamKind)> = spec
                    .names
                    .iter()
                    .zip(spec.kinds)
                    .map(|(n, k)| (n.to_string(), *k))
                    .collect();
                if spec_params != signature.params {
                    problems.push(format!(
                        "{}: the struct has {spec_params:?}, the source {:?}",
                        signature.entry, signature.params
                    ));
                }
            }
        }
    }
    for spec in form.kernel_params {
        if !declared.iter().any(|s| s.entry == spec.entry) {
            problems.push(format!(
                "{}: not declared in {}.cu or its headers",
                spec.entry, form.name
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{}.cu:\n  {}", form.name, problems.join("\n  ")))
    }
}

/// Whether a PTX parameter of type `ty` and `bytes` takes an argument of `kind`.
fn ptx_takes(ty: Ty, bytes: u32, kind: ParamKind) -> bool {
    let float = matches!(ty, Ty::F32 | Ty::F64 | Ty::F16 | Ty::Bf16);
    bytes == kind.bytes() && float == kind.is_float()
}

/// The argument struct of every entry `variant_entries` lists against the PTX `.entry`
/// declarations of one compiled variant (`label` names it in errors).
pub fn check_against_ptx(
    specs: &[ParamSpec],
    variant_entries: &[String],
    ptx: &str,
    label: &str,
) -> Result<(), String> {
    let program = linattn_ptxsim::parse::parse_program(ptx, &mut |_| Ok(0))
        .map_err(|e| format!("{label}: PTX does not parse: {e}"))?;
    let mut problems = Vec::new();
    for entry in variant_entries {
        let Some(spec) = specs.iter().find(|s| s.entry == entry) else {
            problems.push(format!("{entry}: no argument struct"));
            continue;
        };
        let Some(kernel) = program.kernels.get(entry) else {
            problems.push(format!("{entry}: no .entry in the PTX"));
            continue;
        };
        if kernel.params.len() != spec.kinds.len() {
            problems.push(format!(
                "{entry}: the PTX takes {} parameters, the struct has {}",
                kernel.params.len(),
                spec.kinds.len()
            ));
            continue;
        }
        for ((param, kind), name) in kernel.params.iter().zip(spec.kinds).zip(spec.names) {
            if !ptx_takes(param.ty, param.bytes, *kind) {
                problems.push(format!(
                    "{entry}.{name}: the struct passes {kind:?}, the PTX declares {:?} ({} bytes)",
                    param.ty, param.bytes
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{label}:\n  {}", problems.join("\n  ")))
    }
}

/// Every variant of `form`, compiled for sm_80 and sm_90 (NVRTC), against its argument
/// structs.
pub fn check_form_ptx(form: &FormEntry) -> Result<(), String> {
    let mut problems = Vec::new();
    for variant in (form.variants)() {
        for arch in [Arch::SM80, Arch::SM90] {
            let compiled = compile(&variant, arch).map_err(|e| e.to_string())?;
            let label = format!("{} for {arch}", compiled.label);
            let entries = &variant.entry_points;
            if let Err(problem) =
                check_against_ptx(form.kernel_params, entries, &compiled.ptx, &label)
            {
                problems.push(problem);
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = r#"
extern "C" __global__ void __launch_bounds__(CC_THREADS)
xx_scan(float* __restrict__ states, int num_chunks,
        float chunk_decay, long long rows, la_index_t stride) {}
extern "C" __global__ void xx_flag(const la_storage_t* q, unsigned count) {}
"#;

    /// A form of `SOURCE` whose argument structs are `specs`.
    fn form_with(specs: &[ParamSpec]) -> FormEntry {
        FormEntry {
            name: "xx",
            source: SOURCE,
            headers: &[],
            backends: |_| Vec::new(),
            decoders: |_| Vec::new(),
            variants: Vec::new,
            kernel_params: Box::leak(specs.to_vec().into_boxed_slice()),
        }
    }

    #[test]
    fn macro_declared_entries_take_the_macro_parameters() {
        const MACROS: &str = "#define XX_QK_ENTRY(name, ROLE)                 \\\n\
            extern \"C\" __global__ void __launch_bounds__(256, 1)             \\\n\
            name(const float* __restrict__ q, float* __restrict__ out, int n) { \\\n\
                xx_body<ROLE>(q, out, n);                                     \\\n\
            }\n\
            \n\
            XX_QK_ENTRY(xx_dq, XX_DQ)\n\
            XX_QK_ENTRY(xx_dk, XX_DK)\n";
        let found = source_signatures(MACROS).unwrap();
        let entries: Vec<&str> = found.iter().map(|s| s.entry.as_str()).collect();
        assert_eq!(entries, ["xx_dq", "xx_dk"]);
        for signature in &found {
            assert_eq!(
                signature.params,
                vec![
                    ("q".into(), ParamKind::Ptr),
                    ("out".into(), ParamKind::Ptr),
                    ("n".into(), ParamKind::I32)
                ]
            );
        }
    }

    #[test]
    fn a_launch_bounds_macro_before_the_name_is_not_part_of_it() {
        const BOUNDS_MACRO: &str = "#define XX_BOUNDS __launch_bounds__(128, 1)\n\
            extern \"C\" __global__ void XX_BOUNDS\n\
            xx_dv(const float* __restrict__ q, int n) {}\n";
        let found = source_signatures(BOUNDS_MACRO).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].entry, "xx_dv");
        assert_eq!(
            found[0].params,
            vec![("q".into(), ParamKind::Ptr), ("n".into(), ParamKind::I32)]
        );
    }

    #[test]
    fn declarations_parse_with_and_without_launch_bounds() {
        let found = source_signatures(SOURCE).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].entry, "xx_scan");
        assert_eq!(
            found[0].params,
            vec![
                ("states".into(), ParamKind::Ptr),
                ("num_chunks".into(), ParamKind::I32),
                ("chunk_decay".into(), ParamKind::F32),
                ("rows".into(), ParamKind::I64),
                ("stride".into(), ParamKind::I64),
            ]
        );
        assert_eq!(
            found[1].params,
            vec![
                ("q".into(), ParamKind::Ptr),
                ("count".into(), ParamKind::U32)
            ]
        );
    }

    #[test]
    fn a_swapped_field_is_reported() {
        const SPECS: [ParamSpec; 2] = [
            ParamSpec {
                entry: "xx_scan",
                // chunk_decay and num_chunks swapped.
                names: &["states", "chunk_decay", "num_chunks", "rows", "stride"],
                kinds: &[
                    ParamKind::Ptr,
                    ParamKind::F32,
                    ParamKind::I32,
                    ParamKind::I64,
                    ParamKind::I64,
                ],
            },
            ParamSpec {
                entry: "xx_flag",
                names: &["q", "count"],
                kinds: &[ParamKind::Ptr, ParamKind::U32],
            },
        ];
        let form = form_with(&SPECS);
        let error = check_against_source(&form).unwrap_err();
        assert!(
            error.contains("xx_scan") && !error.contains("xx_flag"),
            "{error}"
        );
        let fixed = [
            ParamSpec {
                entry: "xx_scan",
                names: &["states", "num_chunks", "chunk_decay", "rows", "stride"],
                kinds: &[
                    ParamKind::Ptr,
                    ParamKind::I32,
                    ParamKind::F32,
                    ParamKind::I64,
                    ParamKind::I64,
                ],
            },
            SPECS[1],
        ];
        assert_eq!(check_against_source(&form_with(&fixed)), Ok(()));
    }

    #[test]
    fn a_missing_struct_is_reported() {
        let error = check_against_source(&form_with(&[])).unwrap_err();
        assert!(error.contains("xx_scan: no argument struct"), "{error}");
        assert!(error.contains("xx_flag: no argument struct"), "{error}");
    }

    const PTX: &str = ".version 8.0\n.target sm_90\n.address_size 64\n\n\
        .visible .entry xx_flag(\n.param .u64 xx_flag_param_0,\n.param .f32 xx_flag_param_1\n)\n\
        {\nret;\n}\n";

    #[test]
    fn ptx_kinds_and_counts_are_checked() {
        let entries = ["xx_flag".to_string()];
        let spec = |kinds: &'static [ParamKind]| ParamSpec {
            entry: "xx_flag",
            names: &["q", "count"],
            kinds,
        };
        let right = [spec(&[ParamKind::Ptr, ParamKind::F32])];
        assert_eq!(check_against_ptx(&right, &entries, PTX, "probe"), Ok(()));
        let retyped = [spec(&[ParamKind::Ptr, ParamKind::U32])];
        let error = check_against_ptx(&retyped, &entries, PTX, "probe").unwrap_err();
        assert!(error.contains("xx_flag.count"), "{error}");
        let short = [ParamSpec {
            entry: "xx_flag",
            names: &["q"],
            kinds: &[ParamKind::Ptr],
        }];
        let error = check_against_ptx(&short, &entries, PTX, "probe").unwrap_err();
        assert!(error.contains("takes 2 parameters"), "{error}");
        let error = check_against_ptx(&right, &["xx_gone".into()], PTX, "probe").unwrap_err();
        assert!(error.contains("xx_gone: no argument struct"), "{error}");
    }
}
