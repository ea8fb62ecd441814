//! `linattn profile --lines N`: per kernel, the N CUDA source lines that issue the most warp
//! instructions, with their classes, the SASS the line executed (estimated per PTX line,
//! `sass_cost`) and ptxas made of it (when ptxas and nvdisasm run), and the line's text:
//! where an issue-bound kernel's slots go.
//! PTX instructions (the model's unit), counted per `.loc` of a `-lineinfo` compile; code
//! inlined from a helper counts at the helper's own line.

use tabled::builder::Builder;
use tabled::settings::Style;

use linattn_cuda::kernel_file_text;
use linattn_cuda::runtime::KernelVariant;

use crate::results::profiles::{KernelProfile, ProfileRecord, SourceLineRecord};

/// Longest source text shown per line (characters; the rest elided).
const TEXT_WIDTH: usize = 72;

/// Every kernel's top `top` lines, kernel by kernel in profile order.
pub(super) fn render_source_lines(profiles: &[ProfileRecord], top: usize) -> String {
    let mut out = String::new();
    let mut texts = FileTexts::default();
    for p in profiles {
        for k in p.kernels.iter().filter(|k| !k.source_lines.is_empty()) {
            out += &kernel_lines(p, k, top, &mut texts);
        }
    }
    out
}

fn kernel_lines(p: &ProfileRecord, k: &KernelProfile, top: usize, texts: &mut FileTexts) -> String {
    let total = k.counters.warp_instructions.max(1) as f64;
    let shown = &k.source_lines[..top.min(k.source_lines.len())];
    let covered: u64 = shown.iter().map(|l| l.warp_instructions).sum();
    let mut b = Builder::new();
    b.push_record([
        "share",
        "instr/token",
        "line",
        "classes",
        "SASS/token, est. (static SASS/PTX)",
        "source",
    ]);
    for l in shown {
        b.push_record([
            format!("{:.1}%", 100.0 * l.warp_instructions as f64 / total),
            format!("{:.2}", l.per_token),
            location(l),
            classes(l),
            sass_column(l),
            texts.line(&l.file, l.line),
        ]);
    }
    let mut table = b.build();
    table.with(Style::sharp());
    let sass = k.sass_per_token_estimate.map_or(String::new(), |est| {
        format!(
            " (SASS, estimated: {est:.2}, {:.2}× the PTX)",
            est / k.per_token.warp_instructions.max(f64::MIN_POSITIVE)
        )
    });
    format!(
        "source lines of {} {} {}: {:.2} PTX warp instr/token{sass} over {} lines; the top {} \
         ({:.1}%):\n{table}\n",
        p.backend,
        k.phase,
        k.kernel,
        k.per_token.warp_instructions,
        k.source_lines.len(),
        shown.len(),
        100.0 * covered as f64 / total,
    )
}

/// The line's executed SASS per token (estimated), then its static SASS over PTX; "–" for
/// what is not known.
fn sass_column(l: &SourceLineRecord) -> String {
    let executed = l.sass_per_token.map_or("–".into(), |s| format!("{s:.2}"));
    match l.sass_static {
        Some(sass) => format!("{executed} ({sass}/{})", l.ptx_static),
        None => executed,
    }
}

fn location(l: &SourceLineRecord) -> String {
    match (l.file.as_str(), l.line) {
        ("", _) => "(no line information)".into(),
        (file, 0) => format!("{file}: no line (compiler-made)"),
        (file, line) => format!("{file}:{line}"),
    }
}

/// The line's classes by share, largest first (those under 5% left out).
fn classes(l: &SourceLineRecord) -> String {
    let total = l.warp_instructions.max(1) as f64;
    let mut by: Vec<(&String, &u64)> = l.by_class.iter().collect();
    by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    by.iter()
        .map(|(name, &n)| (name, n as f64 / total))
        .filter(|(_, share)| *share >= 0.05)
        .map(|(name, share)| format!("{name} {:.0}%", 100.0 * share))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Kernel file texts, each read once.
#[derive(Default)]
struct FileTexts {
    files: std::collections::HashMap<String, Option<Vec<String>>>,
    variants: Option<Vec<KernelVariant>>,
}

impl FileTexts {
    /// Line `line` of `file`, trimmed and elided to [`TEXT_WIDTH`]; empty when unknown.
    fn line(&mut self, file: &str, line: u32) -> String {
        let variants = self
            .variants
            .get_or_insert_with(crate::kernels::all_variants);
        let lines = self.files.entry(file.to_string()).or_insert_with(|| {
            kernel_file_text(file, variants).map(|t| t.lines().map(str::to_string).collect())
        });
        let text = lines
            .as_ref()
            .and_then(|l| l.get((line as usize).checked_sub(1)?))
            .map_or("", |t| t.trim());
        if text.chars().count() > TEXT_WIDTH {
            let cut: String = text.chars().take(TEXT_WIDTH - 1).collect();
            format!("{cut}…")
        } else {
            text.to_string()
        }
    }
}
