//! Reading `nvdisasm -g` / `-gp` text: per kernel, the SASS instructions of each source (or
//! PTX) line, and how deep in the SASS's own loops each lies, so that an estimate can tell
//! the copies a loop runs from those ptxas hoisted out of it.
//!
//! Code a converged warp never runs is left out: the divergent fallback a `BRA.DIV` jumps to
//! (a shuffle's `WARPSYNC.COLLECTIVE` loop, from its label to the unconditional `BRA` back)
//! and the out-of-line slow paths of IEEE division and reciprocal (`$__internal_…_slowpath`,
//! called only for operands out of the fast path's range). Both carry the line of the
//! instruction they serve: counted, they made one `shfl.sync` of `cr_forward` 128 SASS
//! instructions.

use std::collections::{HashMap, HashSet};

/// The SASS instructions of one line, by the depth of the SASS loops around them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct LineCopies {
    /// Instructions at loop depth d (0: in no loop).
    pub by_depth: Vec<u64>,
    /// Instructions with a guard predicate (`@P0`, `@!P1`; not `@PT`).
    pub predicated: u64,
}

impl LineCopies {
    pub fn total(&self) -> u64 {
        self.by_depth.iter().sum()
    }

    /// Instructions inside at least `depth` loops.
    pub fn within(&self, depth: usize) -> u64 {
        self.by_depth.iter().skip(depth).sum()
    }

    fn add(&mut self, depth: usize, predicated: bool) {
        if self.by_depth.len() <= depth {
            self.by_depth.resize(depth + 1, 0);
        }
        self.by_depth[depth] += 1;
        self.predicated += u64::from(predicated);
    }
}

/// SASS per (file name, line): the name as the marker gives it without its directory
/// (`.nv_debug_ptx_txt` for PTX lines).
pub(super) type LineSass = HashMap<(String, u32), LineCopies>;
/// [`LineSass`] per kernel (entry point, the `.text.` section's name).
pub(super) type VariantSass = HashMap<String, LineSass>;

/// One instruction of a section: its address, the line of the marker before it, its text.
struct Instr<'a> {
    address: u64,
    at: (String, u32),
    text: &'a str,
}

/// `nvdisasm -g` (or `-gp`) text → per kernel, SASS instructions per (file name, line) of the
/// `//## File "…", line N` marker before them (before any marker: ("", 0)), by loop depth.
pub(super) fn per_line(sass: &str) -> VariantSass {
    let divergent: HashSet<&str> = sass
        .lines()
        .filter_map(|l| l.split_once("BRA.DIV"))
        .filter_map(|(_, rest)| target(rest))
        .collect();
    let mut out = VariantSass::new();
    let mut kernel: Option<String> = None;
    let mut instrs: Vec<Instr> = Vec::new();
    let mut labels: HashMap<&str, usize> = HashMap::new(); // → index of the next instruction
    let mut at = (String::new(), 0u32);
    // In a divergent fallback (until its branch back) or a slow-path subroutine (until the
    // section ends).
    let (mut in_fallback, mut in_slow_path) = (false, false);
    let mut finish =
        |kernel: &Option<String>, instrs: &mut Vec<Instr>, labels: &mut HashMap<&str, usize>| {
            if let Some(k) = kernel {
                out.insert(k.clone(), count(instrs, labels));
            }
            instrs.clear();
            labels.clear();
        };
    for line in sass.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix(".section") {
            finish(&kernel, &mut instrs, &mut labels);
            kernel = rest
                .trim()
                .strip_prefix(".text.")
                .map(|r| r.split(',').next().unwrap_or_default().to_string());
            at = (String::new(), 0);
            (in_fallback, in_slow_path) = (false, false);
        } else if let Some(label) = t.strip_suffix(':').filter(|l| !l.contains(' ')) {
            in_fallback |= divergent.contains(label);
            in_slow_path |= label.starts_with("$__internal_");
            labels.insert(label, instrs.len());
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
        } else if let Some((address, text)) = t.strip_prefix("/*").and_then(|r| r.split_once("*/"))
        {
            // An instruction: `/*0200*/  OPCODE …;` (not a bare address or a comment).
            let (text, address) = (text.trim(), u64::from_str_radix(address.trim(), 16));
            let Ok(address) = address else { continue };
            if text.is_empty() {
                continue;
            }
            if in_fallback {
                in_fallback = opcode(text) != "BRA";
                continue;
            }
            if !in_slow_path {
                instrs.push(Instr {
                    address,
                    at: at.clone(),
                    text,
                });
            }
        }
    }
    finish(&kernel, &mut instrs, &mut labels);
    out
}

/// Per line, its instructions by the number of loops (a branch back to a label at or above
/// it, the range between them) around each.
fn count(instrs: &[Instr], labels: &HashMap<&str, usize>) -> LineSass {
    let loops: Vec<(u64, u64)> = instrs
        .iter()
        .filter(|i| opcode(i.text).starts_with("BRA") && !i.text.contains("BRA.DIV"))
        .filter_map(|i| {
            let to = instrs.get(*labels.get(target(i.text)?)?)?.address;
            (to <= i.address).then_some((to, i.address))
        })
        .collect();
    let mut out = LineSass::new();
    for i in instrs {
        let depth = loops
            .iter()
            .filter(|(a, b)| (*a..=*b).contains(&i.address))
            .count();
        let guard = i
            .text
            .split_whitespace()
            .next()
            .filter(|w| w.starts_with('@'));
        let predicated = guard.is_some_and(|g| !g.ends_with("PT"));
        out.entry(i.at.clone()).or_default().add(depth, predicated);
    }
    out
}

/// The opcode of an instruction's text, past any guard (`@!P1 BRA …` → `BRA`).
fn opcode(text: &str) -> &str {
    text.split_whitespace()
        .find(|w| !w.starts_with('@'))
        .unwrap_or_default()
}

/// The label of a branch operand: `` `(.L_x_9) `` → `.L_x_9`.
fn target(text: &str) -> Option<&str> {
    text.split_once("`(")?.1.split_once(')').map(|(t, _)| t)
}

#[cfg(test)]
mod tests {
    use super::per_line;

    #[test]
    fn counts_instructions_per_marker_kernel_and_loop_depth() {
        let text = r#"
	.section	.text.k_one,"ax",@progbits
.text.k_one:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
	//## File "/w/a.cu", line 12
        /*0010*/                   FMUL R7, R7, R13 ;
.L_x_1:
        /*0020*/              @!P1 FMUL R7, R7, 0.5 ;
	//## File "/w/b.cuh", line 59 inlined at "/w/a.cu", line 3
        /*0030*/                   MUFU.EX2 R8, R7 ;
        /*0040*/                   BRA.DIV UR4, `(.L_x_9) ;
        /*0050*/                   SHFL.BFLY PT, R26, R25, 0x1, 0x1f ;
.L_x_7:
        /*0060*/               @P0 BRA `(.L_x_1) ;
.L_x_8:
        /*0070*/                   EXIT ;
.L_x_9:
        /*0080*/                   WARPSYNC.COLLECTIVE R27, `(.L_x_10) ;
        /*0090*/                   SHFL.BFLY P1, R26, R22, R28, R29 ;
.L_x_10:
        /*00a0*/                   BRA `(.L_x_7) ;
$__internal_0_$__cuda_sm3x_div_rn_noftz_f32_slowpath:
        /*00b0*/                   FCHK P0, R1, R2 ;
        /*00c0*/                   RET.REL.NODEC R6 `(k_one) ;
	.section	.text.k_two,"ax",@progbits
	//## File "/w/a.cu", line 12
        /*0000*/                   EXIT ;
"#;
        let got = per_line(text);
        let one = &got["k_one"];
        let at = |f: &str, l: u32| one[&(f.to_string(), l)].clone();
        assert_eq!(at("", 0).by_depth, vec![1]);
        // The FMUL before the loop's label, the predicated one in the loop.
        assert_eq!(at("a.cu", 12).by_depth, vec![1, 1]);
        assert_eq!(at("a.cu", 12).predicated, 1);
        // MUFU, BRA.DIV, the converged SHFL and the back branch in the loop, then EXIT; not
        // the fallback (whose branch back makes no loop) nor the slow path.
        let b = at("b.cuh", 59);
        assert_eq!(
            (b.by_depth.clone(), b.total(), b.within(1)),
            (vec![1, 4], 5, 4)
        );
        assert_eq!(got["k_two"][&("a.cu".to_string(), 12)].total(), 1);
        assert_eq!(got.len(), 2);
    }
}
