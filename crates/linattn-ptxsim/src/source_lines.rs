//! A launch's warp instructions per CUDA source line: where a kernel's issue slots go, read
//! as a kernel engineer reads Nsight Compute's source view. The simulator counts warp
//! instructions per PTX instruction ([`crate::Device::count_source_lines`]); the `.loc`
//! that precedes each (PTX compiled with `-lineinfo`) names its line. Code inlined from a
//! device function counts at the function's own line, not at its call. The counts are
//! PTX's, not SASS's (see `model`): they rank lines, they do not predict ncu's counts.

use std::collections::{BTreeMap, HashMap};

use crate::instr_class::InstrClass;
use crate::ir::Kernel;

/// The file name under which [`SourceLines::of_ptx`] counts PTX lines: the one `nvdisasm -gp`
/// gives them in a cubin that ptxas assembled with `-lineinfo`, so that the SASS of each
/// PTX line is found under the same (file, line).
pub const PTX_TEXT: &str = ".nv_debug_ptx_txt";

/// Warp instructions of one source line, by class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineCount {
    /// The source's path as the compiler named it (`.file`); empty when the PTX has no line
    /// information for these instructions.
    pub file: String,
    /// 1-based; 0 for instructions the compiler made for no line (and for those without line
    /// information).
    pub line: u32,
    pub warp_instructions: u64,
    /// Warp instructions per class, indexed as [`InstrClass::ALL`].
    pub by_class: [u64; InstrClass::ALL.len()],
    /// PTX instructions of the kernel at this line (executed or not): with the SASS
    /// instructions ptxas made of the line, what one executed PTX instruction costs there.
    pub static_instructions: u64,
}

impl LineCount {
    /// The line's classes with their share of its warp instructions, largest first.
    pub fn classes(&self) -> Vec<(InstrClass, f64)> {
        let total = self.warp_instructions.max(1) as f64;
        let mut out: Vec<(InstrClass, f64)> = InstrClass::ALL
            .iter()
            .zip(&self.by_class)
            .filter(|(_, &n)| n > 0)
            .map(|(&c, &n)| (c, n as f64 / total))
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        out
    }

    /// Adds `other`'s counts (the same line in another launch of the same kernel: its
    /// static count is the same).
    pub fn add(&mut self, other: &LineCount) {
        self.warp_instructions += other.warp_instructions;
        for (a, b) in self.by_class.iter_mut().zip(&other.by_class) {
            *a += b;
        }
    }
}

/// One launch's (or several launches') warp instructions per source line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceLines {
    /// Every line that executed, most warp instructions first (ties by file and line).
    pub lines: Vec<LineCount>,
}

impl SourceLines {
    /// Sums `counts` (warp instructions per instruction of `kernel`) per `.loc` line;
    /// `files` names the `.file` indices.
    pub fn of(kernel: &Kernel, files: &HashMap<u32, String>, counts: &[u64]) -> SourceLines {
        Self::summed(kernel, counts, |i| {
            match kernel.locs.get(i).and_then(Option::as_ref) {
                Some(loc) => (files.get(&loc.file).cloned().unwrap_or_default(), loc.line),
                None => (String::new(), 0),
            }
        })
    }

    /// Sums `counts` per line of the PTX text itself (file [`PTX_TEXT`]), whatever `.loc`
    /// the PTX has: per PTX instruction, which ptxas's own line table (`-lineinfo`) maps to
    /// the SASS it made of each.
    pub fn of_ptx(kernel: &Kernel, counts: &[u64]) -> SourceLines {
        Self::summed(kernel, counts, |i| {
            (PTX_TEXT.to_string(), kernel.instrs[i].line)
        })
    }

    /// `counts` summed per (file, line) that `line_of` gives each instruction index.
    fn summed(
        kernel: &Kernel,
        counts: &[u64],
        line_of: impl Fn(usize) -> (String, u32),
    ) -> SourceLines {
        let mut per_line: BTreeMap<(String, u32), LineCount> = BTreeMap::new();
        for (i, (instr, &n)) in kernel.instrs.iter().zip(counts).enumerate() {
            let (file, line) = line_of(i);
            let entry = per_line
                .entry((file.clone(), line))
                .or_insert_with(|| LineCount {
                    file,
                    line,
                    warp_instructions: 0,
                    by_class: [0; InstrClass::ALL.len()],
                    static_instructions: 0,
                });
            entry.static_instructions += 1;
            entry.warp_instructions += n;
            entry.by_class[instr.class as usize] += n;
        }
        let mut lines: Vec<LineCount> = per_line
            .into_values()
            .filter(|l| l.warp_instructions > 0)
            .collect();
        Self::rank(&mut lines);
        SourceLines { lines }
    }

    /// Adds `other`'s lines (another launch of the same kernel).
    pub fn merge(&mut self, other: &SourceLines) {
        for line in &other.lines {
            match self
                .lines
                .iter_mut()
                .find(|l| l.file == line.file && l.line == line.line)
            {
                Some(l) => l.add(line),
                None => self.lines.push(line.clone()),
            }
        }
        Self::rank(&mut self.lines);
    }

    /// Warp instructions over every line.
    pub fn total(&self) -> u64 {
        self.lines.iter().map(|l| l.warp_instructions).sum()
    }

    fn rank(lines: &mut [LineCount]) {
        lines.sort_by(|a, b| {
            b.warp_instructions
                .cmp(&a.warp_instructions)
                .then_with(|| a.file.cmp(&b.file))
                .then(a.line.cmp(&b.line))
        });
    }
}
