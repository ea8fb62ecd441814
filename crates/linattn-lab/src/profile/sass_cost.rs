//! A launch's executed SASS warp instructions, estimated from its PTX warp instructions per
//! PTX line (the simulator's count) and the SASS ptxas made of each line (`ptxas
//! -lineinfo`, `nvdisasm -gp`: [`super::sass_text`]), for `profile --replay … --sass`.
//! Executed PTX × (SASS of the line) would be wrong in three ways:
//! - ptxas unrolls: a PTX loop unrolled U times has U copies of each line's SASS, of which
//!   one execution of the PTX line runs one (`nc_reduce`'s loads: 7 copies, 4.6× the
//!   instructions ncu counted). U is the most common number of copies among the loop's own
//!   memory instructions, which ptxas otherwise maps one to one.
//! - ptxas hoists: SASS of a line in a PTX loop that lies outside every SASS loop as deep runs
//!   once per entry, not per trip (`cs_outer`'s `div.s32`: the divisor's reciprocal, 19 of
//!   its 27 instructions). Where the SASS keeps the loop (some memory line of it has SASS as
//!   deep), a line counts only its copies at that depth.
//! - ptxas if-converts: a forward branch over one block that has no SASS of its own, where
//!   at least half the block's SASS is predicated, became predication: the block's lines
//!   issue (predicated off) whenever the branch does, which ncu counts (`cs_contract`'s
//!   column guards: 0.69× the hardware's instructions without this). (Taking every
//!   forward branch so, if/else diamonds included, made 3 of the 36 launches of the
//!   2026-11-26 calibration worse and none better.)

use std::collections::{BTreeMap, HashMap};

use linattn_cuda::executor::sim::{SourceLines, PTX_TEXT};

use super::sass_text::LineSass;

/// The SASS warp instructions the PTX warp instructions `lines` (per PTX line,
/// `SourceLines::of_ptx`) of `kernel` in `ptx` come to, per PTX line (1-based; lines of no
/// SASS left out), with `sass` the SASS per PTX line of the same kernel.
pub(super) fn per_ptx_line(
    lines: &SourceLines,
    ptx: &str,
    kernel: &str,
    sass: &LineSass,
) -> BTreeMap<u32, f64> {
    let text = KernelText::of(ptx, kernel);
    let per_execution = text
        .as_ref()
        .map(|t| sass_per_execution(t, sass))
        .unwrap_or_default();
    let mut executed: HashMap<u32, f64> = lines
        .lines
        .iter()
        .filter(|l| l.file == PTX_TEXT)
        .map(|l| {
            (
                l.line,
                l.warp_instructions as f64 / l.static_instructions.max(1) as f64,
            )
        })
        .collect();
    if let Some(t) = &text {
        let at = |i: usize| sass.get(&(PTX_TEXT.to_string(), i as u32 + 1));
        for i in t.first..=t.last {
            let Some(&to) = branch_target(t.lines[i].trim()).and_then(|l| t.labels.get(l)) else {
                continue;
            };
            // One block (no label inside), no SASS of the branch, at least half the block's
            // SASS predicated.
            let block = i + 1..to;
            let one_block = to > i && !t.labels.values().any(|l| block.contains(l));
            let (all, guarded) = block
                .clone()
                .filter_map(at)
                .fold((0, 0), |(a, g), c| (a + c.total(), g + c.predicated));
            let no_branch = at(i).is_none_or(|c| c.total() == 0);
            if one_block && no_branch && all > 0 && 2 * guarded >= all {
                let issued = executed.get(&(i as u32 + 1)).copied().unwrap_or(0.0);
                for k in i + 1..to {
                    let e = executed.entry(k as u32 + 1).or_insert(0.0);
                    *e = e.max(issued);
                }
            }
        }
    }
    executed
        .iter()
        .filter_map(|(line, n)| Some((*line, n * per_execution.get(line)?)))
        .filter(|(_, s)| *s > 0.0)
        .collect()
}

/// One kernel of a PTX text, read once for both passes: the text's lines, the 0-based first
/// and last line of the kernel's body (between its braces) and the body's labels.
struct KernelText<'a> {
    lines: Vec<&'a str>,
    first: usize,
    last: usize,
    labels: HashMap<&'a str, usize>,
}

impl<'a> KernelText<'a> {
    /// None when `ptx` has no entry `kernel`.
    fn of(ptx: &'a str, kernel: &str) -> Option<KernelText<'a>> {
        let lines: Vec<&str> = ptx.lines().collect();
        let (first, last) = body(&lines, kernel)?;
        let labels = (first..=last)
            .filter_map(|i| lines[i].trim().strip_suffix(':').map(|name| (name, i)))
            .collect();
        Some(KernelText {
            lines,
            first,
            last,
            labels,
        })
    }
}

/// The CUDA source line (file name without its directory, line) of each PTX line of `ptx`
/// that follows a `.loc` (a `-lineinfo` compile); empty without them.
pub(super) fn source_line_of_ptx_lines(ptx: &str) -> HashMap<u32, (String, u32)> {
    let mut files: HashMap<&str, String> = HashMap::new();
    for line in ptx.lines() {
        let mut words = line.split_whitespace();
        if words.next() == Some(".file") {
            if let (Some(index), Some(path)) = (words.next(), line.split('"').nth(1)) {
                files.insert(
                    index,
                    path.rsplit('/').next().unwrap_or_default().to_string(),
                );
            }
        }
    }
    let mut out = HashMap::new();
    let mut at: Option<(&str, u32)> = None;
    for (i, line) in ptx.lines().enumerate() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some(".loc") => {
                at = words.next().zip(
                    words
                        .next()
                        .and_then(|l| l.trim_end_matches(',').parse().ok()),
                );
            }
            Some(w) if w.starts_with(".visible") || w.starts_with(".entry") => at = None,
            _ => {
                if let Some((file, l)) = at {
                    out.insert(
                        i as u32 + 1,
                        (files.get(file).cloned().unwrap_or_default(), l),
                    );
                }
            }
        }
    }
    out
}

/// Per PTX line of the kernel `text` that has SASS: the SASS instructions one execution of
/// it runs (lines of a loop nested in another count for the innermost).
fn sass_per_execution(text: &KernelText<'_>, sass: &LineSass) -> HashMap<u32, f64> {
    let copies = |line: usize| sass.get(&(PTX_TEXT.to_string(), line as u32 + 1));
    let (lines, first, last) = (&text.lines, text.first, text.last);
    let mut out: HashMap<u32, f64> = HashMap::new();
    // Loops: a branch back to a label above it, as 0-based line ranges.
    let mut loops: Vec<(usize, usize)> = (first..=last)
        .filter_map(|i| {
            let &at = branch_target(lines[i].trim()).and_then(|t| text.labels.get(t))?;
            (at < i).then_some((at, i))
        })
        .collect();
    // Each line's innermost loop (the shortest range around it) and its depth.
    loops.sort_by_key(|(a, b)| b - a);
    let depth = |i: usize| loops.iter().filter(|(a, b)| (*a..=*b).contains(&i)).count();
    let innermost = |i: usize| loops.iter().position(|(a, b)| (*a..=*b).contains(&i));
    let mut own: HashMap<Option<usize>, Vec<usize>> = HashMap::new();
    for i in first..=last {
        own.entry(innermost(i)).or_default().push(i);
    }
    for (owner, members) in own {
        let d = owner.map_or(0, |n| depth(loops[n].0));
        let memory: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&i| is_memory(lines[i]))
            .collect();
        let kept = d > 0
            && memory
                .iter()
                .any(|&i| copies(i).is_some_and(|c| c.within(d) > 0));
        let count = |i: usize| copies(i).map_or(0, |c| if kept { c.within(d) } else { c.total() });
        // The most common count among the memory lines (ties: the smaller).
        let mut tally: HashMap<u64, usize> = HashMap::new();
        for &i in &memory {
            if owner.is_some() && count(i) > 0 {
                *tally.entry(count(i)).or_default() += 1;
            }
        }
        let unrolled = tally
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
            .map_or(1, |(c, _)| c);
        for &i in &members {
            if copies(i).is_some() {
                out.insert(i as u32 + 1, count(i) as f64 / unrolled as f64);
            }
        }
    }
    out
}

/// 0-based indices of the first and last line of `kernel`'s body (between its braces).
fn body(lines: &[&str], kernel: &str) -> Option<(usize, usize)> {
    let start = lines.iter().position(|l| {
        let t = l.trim_start();
        (t.starts_with(".visible .entry") || t.starts_with(".entry"))
            && t.split_whitespace()
                .find_map(|w| w.split('(').next().filter(|n| *n == kernel))
                .is_some()
    })?;
    let mut depth = 0i64;
    let mut opened = None;
    for (i, l) in lines.iter().enumerate().skip(start) {
        let code = l.split("//").next().unwrap_or_default();
        for c in code.chars() {
            match c {
                '{' => {
                    depth += 1;
                    opened.get_or_insert(i);
                }
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return opened.map(|o| (o, i));
                    }
                }
                _ => {}
            }
        }
    }
    None
}

/// The label a `bra` statement jumps to (`@%p1 bra $L__BB0_3;`, `bra.uni $L__BB0_1;`).
fn branch_target(statement: &str) -> Option<&str> {
    let mut words = statement.split_whitespace();
    let mut op = words.next()?;
    if op.starts_with('@') {
        op = words.next()?;
    }
    if op != "bra" && !op.starts_with("bra.") {
        return None;
    }
    words.next().map(|t| t.trim_end_matches(';'))
}

/// A global or shared load or store (not a parameter load): one SASS instruction per PTX
/// one where ptxas does not unroll.
fn is_memory(statement: &str) -> bool {
    let t = statement.trim();
    let op = match t.strip_prefix('@') {
        Some(rest) => rest.split_whitespace().nth(1).unwrap_or_default(),
        None => t.split_whitespace().next().unwrap_or_default(),
    };
    (op.starts_with("ld.") && !op.starts_with("ld.param")) || op.starts_with("st.")
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = "\
.visible .entry k(
\t.param .u64 k_param_0
)
{
\t.reg .b32 %r<9>;
\tld.param.u64 %rd1, [k_param_0];
$L__BB0_1:
\tld.global.f32 %f1, [%rd1];
\tadd.f32 %f2, %f2, %f1;
\tst.shared.f32 [%r1], %f2;
$L__BB0_2:
\tld.shared.f32 %f3, [%r2];
\t@%p1 bra $L__BB0_2;
\tadd.s32 %r3, %r3, 1;
\t@%p2 bra \t$L__BB0_1;
\tret;
}
.visible .entry other()
{
$L__BB1_1:
\tld.global.f32 %f1, [%rd1];
\tbra.uni $L__BB1_1;
}
";

    /// SASS per PTX line: (line, copies in no loop, copies in one loop, in two).
    fn sass(counts: &[(u32, [u64; 3])]) -> LineSass {
        counts
            .iter()
            .map(|&(l, c)| {
                let copies = super::super::sass_text::LineCopies {
                    by_depth: c.to_vec(),
                    predicated: 0,
                };
                (
                    (linattn_cuda::executor::sim::PTX_TEXT.to_string(), l),
                    copies,
                )
            })
            .collect()
    }

    #[test]
    fn unrolled_copies_are_shared_and_hoisted_ones_left_out() {
        // Outer loop (lines 7..15), kept by the SASS: its load and store 4 copies each in the
        // loop (the load one more hoisted), the add 8 (an expansion does not count: U = 4);
        // the inner loop (11..13) not unrolled, its load once, two deep.
        let table = sass(&[
            (6, [1, 0, 0]),
            (8, [1, 4, 0]),
            (9, [0, 8, 0]),
            (10, [0, 4, 0]),
            (12, [0, 0, 1]),
            (13, [0, 0, 1]),
            (14, [3, 4, 0]),
        ]);
        let got = per_execution(PTX, "k", &table);
        let expect = [
            (6, 1.0),
            (8, 1.0),
            (9, 2.0),
            (10, 1.0),
            (12, 1.0),
            (13, 1.0),
            (14, 1.0),
        ];
        for (line, per) in expect {
            assert_eq!(got.get(&line), Some(&per), "line {line}");
        }
        assert_eq!(got.len(), expect.len());
        // A loop the SASS does not keep (fully unrolled: every copy outside loops): its
        // copies over the memory lines' common count.
        let flat = sass(&[
            (8, [6, 0, 0]),
            (9, [6, 0, 0]),
            (10, [6, 0, 0]),
            (12, [2, 0, 0]),
        ]);
        let got = per_execution(PTX, "k", &flat);
        assert_eq!((got[&8], got[&9], got[&12]), (1.0, 1.0, 1.0));
        // The other kernel's loop is its own; an unknown kernel has nothing.
        let other = sass(&[(21, [0, 3, 0]), (22, [0, 3, 0])]);
        assert_eq!(per_execution(PTX, "other", &other).get(&22), Some(&1.0));
        assert!(KernelText::of(PTX, "nope").is_none());
    }

    fn per_execution(ptx: &str, kernel: &str, sass: &LineSass) -> HashMap<u32, f64> {
        sass_per_execution(&KernelText::of(ptx, kernel).unwrap(), sass)
    }

    fn estimate(lines: &SourceLines, ptx: &str, kernel: &str, sass: &LineSass) -> f64 {
        per_ptx_line(lines, ptx, kernel, sass).values().sum()
    }

    #[test]
    fn a_predicated_block_issues_as_often_as_its_branch() {
        let ptx = "\
.visible .entry g()
{
\tld.global.f32 %f1, [%rd1];
\t@%p1 bra $L__BB2_2;
\tadd.f32 %f2, %f1, %f1;
\tst.global.f32 [%rd1], %f2;
$L__BB2_2:
\tret;
}
";
        // Executed warp instructions per PTX line: the block (lines 5, 6) by 2 of 10 warps.
        let lines = SourceLines {
            lines: [(3, 10), (4, 10), (5, 2), (6, 2), (8, 10)]
                .into_iter()
                .map(|(line, n)| linattn_cuda::executor::sim::LineCount {
                    file: PTX_TEXT.to_string(),
                    line,
                    warp_instructions: n,
                    by_class: Default::default(),
                    static_instructions: 1,
                })
                .collect(),
        };
        let table = |branch: u64, guarded: u64| -> LineSass {
            [
                (3, 1, 0),
                (4, branch, 0),
                (5, 1, guarded),
                (6, 1, guarded),
                (8, 1, 0),
            ]
            .into_iter()
            .filter(|&(_, n, _)| n > 0)
            .map(|(l, n, p)| {
                let copies = super::super::sass_text::LineCopies {
                    by_depth: vec![n],
                    predicated: p,
                };
                ((PTX_TEXT.to_string(), l), copies)
            })
            .collect()
        };
        // If-converted (no BRA, the block predicated): every warp issues the block.
        assert_eq!(estimate(&lines, ptx, "g", &table(0, 1)), 40.0);
        // A branch ptxas kept: the block as often as it ran.
        assert_eq!(estimate(&lines, ptx, "g", &table(1, 1)), 34.0);
        // No BRA but nothing predicated (the branch's SASS attributed elsewhere): as it ran.
        assert_eq!(estimate(&lines, ptx, "g", &table(0, 0)), 24.0);
    }

    #[test]
    fn ptx_lines_map_to_the_loc_before_them() {
        let ptx = ".visible .entry k()\n{\n\t.loc\t1 12 5\n\tadd.s32 %r1, %r2, 1;\n\
                   \t.loc\t2 30 9, function_name $L__info_string0, inlined_at 1 12 5\n\
                   \tmul.lo.s32 %r3, %r1, 2;\n\tret;\n}\n\t.file\t1 \"/w/a.cu\"\n\
                   \t.file\t2 \"/w/b.cuh\", 1700000000, 512\n";
        let got = source_line_of_ptx_lines(ptx);
        assert_eq!(got.get(&4), Some(&("a.cu".to_string(), 12)));
        assert_eq!(got.get(&6), Some(&("b.cuh".to_string(), 30)));
        assert_eq!(got.get(&7), Some(&("b.cuh".to_string(), 30)));
        assert_eq!(got.get(&2), None);
        assert!(source_line_of_ptx_lines("ld.param.u64 %rd1, [p];\n").is_empty());
    }

    #[test]
    fn statements_are_read_as_ptx_writes_them() {
        assert_eq!(branch_target("@%p1 bra \t$L__BB0_2;"), Some("$L__BB0_2"));
        assert_eq!(branch_target("bra.uni $L__BB1_1;"), Some("$L__BB1_1"));
        assert_eq!(branch_target("brev.b32 %r1, %r2;"), None);
        assert!(is_memory("@!%p3 st.global.v2.f32 [%rd4], {%f1, %f2};"));
        assert!(is_memory("ld.shared.u32 %r1, [%r2];"));
        assert!(!is_memory("ld.param.u64 %rd1, [k_param_0];"));
        assert!(!is_memory("add.f32 %f1, %f2, %f3;"));
    }
}
