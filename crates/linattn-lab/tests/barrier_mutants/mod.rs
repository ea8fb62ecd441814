//! The barriers of the project's kernels and their deletion mutants: every `__syncthreads()`
//! in code (not in comments) of `kernels/*.cu` and `kernels/*.cuh`, found at run time
//! so the test follows kernel edits; the function that holds it; a copy of `kernels/` with
//! that one barrier replaced by `(void)0` (a statement, so `else __syncthreads();` stays
//! valid), for `LINATTN_KERNEL_DIR`.
#![allow(dead_code)]

pub mod probes;

use std::path::{Path, PathBuf};

/// The call a mutant deletes.
const BARRIER: &str = "__syncthreads()";
/// What replaces it: a no-op expression, so the `;` after it stays a statement.
const DELETED: &str = "(void)0 /* barrier deleted */";

/// One `__syncthreads()` of the kernel sources.
#[derive(Debug, Clone)]
pub struct Barrier {
    /// File name inside `kernels/` (`decode.cu`, `prelude.cuh`).
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// The top-level function whose body holds it (`#define NAME` inside a macro).
    pub function: String,
    /// Byte offset of the call in the file.
    offset: usize,
    /// The source line, trimmed (for exception matching and reports).
    pub text: String,
    /// The lines around it (3 before, the line, 1 after), for exception matching.
    pub context: String,
    /// Its position among the file's barriers (0-based).
    pub ordinal: usize,
}

impl Barrier {
    pub fn label(&self) -> String {
        format!("{}:{} {}", self.file, self.line, self.function)
    }
}

/// The workspace's `kernels/` directory.
pub fn kernel_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../kernels")
}

/// The kernel sources the runtime reads from a kernel directory: `*.cu` and the headers
/// (`prelude.cuh`, the parts a program includes), sorted by name.
pub fn kernel_files(dir: &Path) -> Result<Vec<String>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".cu") || name.ends_with(".cuh") {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Every barrier of every kernel source in `dir`, in file then line order.
pub fn barriers(dir: &Path) -> Result<Vec<Barrier>, String> {
    let mut all = Vec::new();
    for file in kernel_files(dir)? {
        let path = dir.join(&file);
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        all.extend(barriers_in(&file, &text));
    }
    Ok(all)
}

/// The barriers of one source text.
pub fn barriers_in(file: &str, text: &str) -> Vec<Barrier> {
    let code = mask_comments_and_strings(text);
    let functions = function_spans(&code);
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find(BARRIER) {
        let offset = from + at;
        from = offset + BARRIER.len();
        // Not the tail of a longer identifier (`my__syncthreads()`).
        let before = code[..offset].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let line = text[..offset].matches('\n').count() + 1;
        let function = functions
            .iter()
            .find(|f| f.start <= offset && offset < f.end)
            .map_or_else(|| "(file scope)".to_string(), |f| f.name.clone());
        let first = line.saturating_sub(4);
        let last = (line + 1).min(lines.len());
        found.push(Barrier {
            file: file.to_string(),
            line,
            function,
            offset,
            text: lines.get(line - 1).map_or("", |l| l.trim()).to_string(),
            context: lines[first..last].join("\n"),
            ordinal: found.len(),
        });
    }
    found
}

/// A copy of `source_dir`'s kernel sources in a new directory under `parent`, with
/// `barrier` deleted.
pub fn write_mutant(
    source_dir: &Path,
    barrier: &Barrier,
    parent: &Path,
) -> Result<PathBuf, String> {
    let mutate = |name: &str, text: String| -> Result<String, String> {
        if name != barrier.file {
            return Ok(text);
        }
        let at = barrier.offset;
        if text.get(at..at + BARRIER.len()) != Some(BARRIER) {
            return Err(format!(
                "{}: the source changed under the test",
                barrier.label()
            ));
        }
        Ok(format!(
            "{}{DELETED}{}",
            &text[..at],
            &text[at + BARRIER.len()..]
        ))
    };
    copy_kernels(
        source_dir,
        parent,
        &format!("{}-{}", barrier.file, barrier.line),
        mutate,
    )
}

/// A copy of `source_dir`'s kernel sources in a new directory under `parent` named after
/// `tag`, each file passed through `edit(name, text)`.
pub fn copy_kernels(
    source_dir: &Path,
    parent: &Path,
    tag: &str,
    edit: impl Fn(&str, String) -> Result<String, String>,
) -> Result<PathBuf, String> {
    let dir = parent.join(tag.replace(['/', ' ', ':'], "_"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for name in kernel_files(source_dir)? {
        let from = source_dir.join(&name);
        let text =
            std::fs::read_to_string(&from).map_err(|e| format!("{}: {e}", from.display()))?;
        let text = edit(&name, text)?;
        let to = dir.join(&name);
        std::fs::write(&to, text).map_err(|e| format!("{}: {e}", to.display()))?;
    }
    Ok(dir)
}

/// `text` with every comment and string or character literal replaced by spaces (newlines
/// kept), so byte offsets and line numbers are the original's.
fn mask_comments_and_strings(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for b in &mut out[from..to] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    };
    while i < bytes.len() {
        let rest = &bytes[i..];
        let end = if rest.starts_with(b"//") {
            i + rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            i + 2 + find(&rest[2..], b"*/").map_or(rest.len() - 2, |p| p + 2)
        } else if rest[0] == b'"' || rest[0] == b'\'' {
            let quote = rest[0];
            let mut j = 1;
            while j < rest.len() && rest[j] != quote && rest[j] != b'\n' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            i + (j + 1).min(rest.len())
        } else {
            i += 1;
            continue;
        };
        blank(&mut out, i, end);
        i = end;
    }
    // Only ASCII bytes were replaced by ASCII spaces, inside whole comments and literals.
    String::from_utf8(out).unwrap_or_default()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A top-level brace block and the name it defines.
struct Span {
    name: String,
    start: usize,
    end: usize,
}

/// The top-level `{ … }` blocks of masked code with the name of what each defines: the
/// identifier before the last parenthesised group ahead of the `{` (a function's parameter
/// list, after any `__launch_bounds__(…)`), or `#define NAME` for a block inside a macro.
fn function_spans(code: &str) -> Vec<Span> {
    let bytes = code.as_bytes();
    let mut spans = Vec::new();
    let mut depth = 0usize;
    let mut open = 0;
    let mut header_from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'{' => {
                if depth == 0 {
                    open = i;
                }
                depth += 1;
            }
            b'}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    let name = defined_name(code, header_from, open);
                    spans.push(Span {
                        name,
                        start: open,
                        end: i + 1,
                    });
                    header_from = i + 1;
                }
            }
            b';' if depth == 0 => header_from = i + 1,
            _ => {}
        }
    }
    spans
}

fn defined_name(code: &str, from: usize, open: usize) -> String {
    let header = &code[from..open];
    // Inside a `#define`: the block is part of the macro's body.
    if let Some(line) = header
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with("#define"))
    {
        let name: String = line
            .trim_start()
            .trim_start_matches("#define")
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if header.trim_end().ends_with('\\') {
            return format!("#define {name}");
        }
    }
    let Some(close) = header.rfind(')') else {
        return header.split_whitespace().last().unwrap_or("?").to_string();
    };
    let mut level = 0i32;
    let mut paren = None;
    for (j, c) in header[..=close].char_indices().rev() {
        match c {
            ')' => level += 1,
            '(' => {
                level -= 1;
                if level == 0 {
                    paren = Some(j);
                    break;
                }
            }
            _ => {}
        }
    }
    let before = header[..paren.unwrap_or(0)].trim_end();
    let name: String = before
        .chars()
        .rev()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    if name.is_empty() {
        "?".to_string()
    } else {
        name
    }
}
