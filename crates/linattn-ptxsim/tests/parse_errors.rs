//! What the simulator does not model is refused at load time with `SimError::Parse` naming
//! the PTX line, never a panic: an unknown opcode, a device function (`.func`), a `call`.
//! Plus a robustness sweep: every truncation and a set of corruptions of a valid module
//! load or fail cleanly.

mod common;

use common::*;
use linattn_ptxsim::SimError;

fn parse_error(text: &str) -> (u32, String, String) {
    match device().load(text) {
        Err(SimError::Parse {
            line,
            text,
            message,
        }) => (line, text, message),
        Err(other) => panic!("expected a parse error, got: {other}"),
        Ok(module) => panic!(
            "expected a parse error, the module loaded with kernels {:?}",
            module.kernel_names()
        ),
    }
}

/// `out[tid] = in[tid]`: the valid entry the tests break.
fn good() -> String {
    in_out(
        "copy",
        &[("b32", 3), ("b64", 7)],
        r#"	add.s64 	%rd6, %rd3, %rd5;
	ld.global.nc.u32 	%r2, [%rd6];
	add.s64 	%rd6, %rd4, %rd5;
	st.global.u32 	[%rd6], %r2;
	ret;
"#,
    )
}

#[test]
fn the_reference_module_loads() {
    let module = load(&device(), &ptx(&good()));
    assert_eq!(module.kernel_names(), vec!["copy"]);
    assert_eq!(module.target(), "sm_90");
}

#[test]
fn unknown_opcode_names_its_line() {
    let text = ptx(&good().replace(
        "\tmov.u32 \t%r1, %tid.x;",
        "\tmov.u32 \t%r1, %tid.x;\n\tfrobnicate.b32 \t%r2, %r1;",
    ));
    let (line, statement, message) = parse_error(&text);
    assert_eq!(line, line_of(&text, "frobnicate"));
    assert!(statement.starts_with("frobnicate.b32"), "{statement}");
    assert!(
        message.contains("unknown instruction frobnicate"),
        "{message}"
    );
}

#[test]
fn device_function_definition_is_refused_at_its_line() {
    let function = r#".func  (.param .b32 func_retval0) _Z6squarei(
	.param .b32 _Z6squarei_param_0
)
{
	.reg .b32 	%r<3>;


	ld.param.u32 	%r1, [_Z6squarei_param_0];
	mul.lo.s32 	%r2, %r1, %r1;
	st.param.b32 	[func_retval0], %r2;
	ret;

}
"#;
    let text = ptx(&format!("{function}\n{}", good()));
    let (line, _, message) = parse_error(&text);
    assert_eq!(line, line_of(&text, ".func"));
    assert!(message.contains(".func"), "{message}");
}

#[test]
fn call_is_refused_at_its_line() {
    let text = ptx(&good().replace("\tret;", "\tcall.uni \t_Z6helperv, ();\n\tret;"));
    let (line, statement, message) = parse_error(&text);
    assert_eq!(line, line_of(&text, "call.uni"));
    assert!(statement.starts_with("call.uni"), "{statement}");
    assert!(message.contains("call"), "{message}");
}

#[test]
fn nvrtc_call_sequence_is_refused_inside_it() {
    // How NVRTC writes a call that was not inlined.
    let callseq = r#"	{ // callseq 0, 0
	.param .b32 param0;
	st.param.b32 	[param0], %r2;
	.param .b32 retval0;
	call.uni (retval0),
	_Z6squarei,
	(
	param0
	);
	ld.param.b32 	%r2, [retval0];
	} // callseq 0
	ret;"#;
    let text = ptx(&good().replace("\tret;", callseq));
    let (line, _, _) = parse_error(&text);
    let first = line_of(&text, "{ // callseq 0, 0");
    let last = line_of(&text, "} // callseq 0");
    assert!(
        (first..=last).contains(&line),
        "line {line} is not inside the call sequence (lines {first}..={last})"
    );
}

#[test]
fn other_unsupported_forms_are_parse_errors() {
    let cases = [
        ("\tld.local.u32 \t%r2, [%rd6];", "ld.local"),
        ("\tmembar.gl;", "membar"),
        ("\tshfl.bfly.b32 \t%r2, %r1, 1, 31;", "shfl.bfly"),
        ("\tmov.u32 \t%r2, %r9;", "%r9"),
        ("\tbra.uni \t$L__BB0_99;", "$L__BB0_99"),
    ];
    for (statement, needle) in cases {
        let text = ptx(&good().replace("\tret;", &format!("{statement}\n\tret;")));
        let (line, _, message) = parse_error(&text);
        assert_eq!(line, line_of(&text, needle), "{statement}: {message}");
    }
}

#[test]
fn missing_target_is_a_parse_error() {
    let text = good();
    let (_, _, message) = parse_error(&format!(".version 9.0\n.address_size 64\n{text}"));
    assert!(message.contains(".target"), "{message}");
}

/// A module using most of the syntax the parser handles: module-scope `.global` with an
/// initialiser, `.extern .shared`, `.maxntid`, vector loads, `shfl.sync` with `|p`,
/// `setp` with a combining predicate, `mma`, atomics, packed `mov`, hex floats.
fn rich() -> String {
    let entry = Entry {
        name: "rich",
        params: &[("u64", "%rd1"), ("f32", "%f1"), ("u32", "%r1")],
        directives: ".maxntid 128, 1, 1",
        regs: &[
            ("pred", 4),
            ("b16", 3),
            ("b32", 12),
            ("f32", 16),
            ("b64", 8),
        ],
        decls: ".shared .align 4 .u32 s_max;",
        body: r#"	mov.u32 	%r2, %tid.x;
	mov.u64 	%rd2, cc_smem;
	mul.wide.u32 	%rd3, %r2, 16;
	add.s64 	%rd4, %rd2, %rd3;
	ld.shared.v4.f32 	{%f2, %f3, %f4, %f5}, [%rd4+-16];
	shfl.sync.bfly.b32 	%r3|%p1, %r2, 1, 31, -1;
	setp.lt.and.s32 	%p2|%p3, %r2, %r1, %p1;
	@!%p2 bra 	$L__BB0_2;

	fma.rn.f32 	%f6, %f2, 0f3F800000, %f1;
	cvt.rn.f16x2.f32 	%r4, %f6, %f3;
	mov.b32 	{%rs1, %rs2}, %r4;
	mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f7, %f8, %f9, %f10}, {%r4, %r4, %r4, %r4}, {%r4, %r4}, {%f2, %f3, %f4, %f5};
	atom.shared.max.s32 	%r5, [s_max], %r2;
	bar.sync 	0;

$L__BB0_2:
	cvta.to.global.u64 	%rd5, %rd1;
	st.global.v2.f32 	[%rd5+8], {%f7, %f8};
	ret;
"#,
    };
    ptx(&format!(
        ".global .align 4 .u32 CS_TILE = 64;\n.extern .shared .align 16 .b8 cc_smem[];\n\n{}",
        entry.text()
    ))
}

#[test]
fn the_rich_module_loads() {
    let module = load(&device(), &rich());
    assert_eq!(module.kernel_names(), vec!["rich"]);
}

/// Loads `text` under `catch_unwind`; a panic fails the test with the text that caused it.
fn load_without_panic(text: &str, what: &str) {
    let result = std::panic::catch_unwind(|| {
        let _ = device().load(text);
    });
    assert!(result.is_ok(), "loading panicked ({what}):\n{text}");
}

#[test]
fn truncated_modules_never_panic() {
    for text in [ptx(&good()), rich()] {
        for end in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            load_without_panic(&text[..end], &format!("truncated at byte {end}"));
        }
    }
}

#[test]
fn corrupted_modules_never_panic() {
    let odd = [
        "",
        "[]",
        "[+]",
        "[-4]",
        "[%rd1+]",
        "{}",
        "{,}",
        "{%r1,}",
        "%",
        "%r",
        "%r<>",
        "%r<-1>",
        "0f",
        "0x",
        "0fZZZZZZZZ",
        "-",
        ";",
        "|",
        "%r1|",
        "[rich_param_0+0x]",
        "é",
        "[é]",
        "99999999999999999999999",
        "{%r1",
        "%r1}",
        ".b32",
        "@",
        "@%p9",
        "$L__BB0_9",
    ];
    let victims = [
        "%r1",
        "%r2",
        "%r4",
        "%rd4",
        "%rd5",
        "[%rd4+-16]",
        "%tid.x",
        "16",
        "%r<12>",
        "%f<16>",
        "[rich_param_0]",
        "{%f2, %f3, %f4, %f5}",
        "%r3|%p1",
        "%p1",
        "-1",
        "cc_smem",
        "s_max",
        "0f3F800000",
        "$L__BB0_2",
        "128",
        "64",
        "[s_max]",
        ".u32",
        ".f32",
        ".b32",
        ".f16",
        "(",
        ")",
        "{",
        "}",
        ",",
        ";",
        ".entry",
        ".maxntid",
        "[]",
    ];
    for module in [ptx(&good()), rich()] {
        let lines: Vec<&str> = module.lines().collect();
        // Each line removed.
        for k in 0..lines.len() {
            let mut v = lines.clone();
            v.remove(k);
            load_without_panic(&v.join("\n"), &format!("line {} removed", k + 1));
        }
        // Tokens replaced by odd ones.
        for (k, line) in lines.iter().enumerate() {
            for victim in victims {
                if !line.contains(victim) {
                    continue;
                }
                for token in odd {
                    let mut v = lines.clone();
                    let changed = line.replacen(victim, token, 1);
                    v[k] = &changed;
                    load_without_panic(
                        &v.join("\n"),
                        &format!("line {}: {victim} → {token}", k + 1),
                    );
                }
            }
        }
    }
}
