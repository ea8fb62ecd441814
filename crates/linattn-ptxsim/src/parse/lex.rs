//! Splitting PTX text into statements and statements into operands.
//!
//! A statement ends at `;`, or at a `{`/`}` that opens or closes a body (only when nothing
//! else is pending), or at the end of the line for the directives PTX writes without a
//! semicolon (`.version`, `.target`, `.address_size`, and with `-lineinfo` `.file` and
//! `.loc`). Labels (`$L__BB0_3:`) are their own statements. Comments (`//`, `/* */`) and
//! `.section` blocks (the DWARF data `-lineinfo` appends) are dropped.

/// One statement with the 1-based line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    pub line: u32,
    pub text: String,
    pub kind: StatementKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementKind {
    /// Ended by `;` (or end of line for the semicolon-free directives).
    Plain,
    /// Ended by `{`: an entry header, or a bare scope opener (empty text).
    Open,
    /// A lone `}`.
    Close,
    /// `name:` (text is the name).
    Label,
}

const LINE_DIRECTIVES: [&str; 5] = [".version", ".target", ".address_size", ".file", ".loc"];

/// Splits `source` into statements.
pub fn statements(source: &str) -> Vec<Statement> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut start_line = 1u32;
    let mut line = 1u32;
    let mut chars = source.chars().peekable();
    // Depth of `{ }` inside the current statement (vector operands, initialisers).
    let mut nested = 0usize;
    let push = |out: &mut Vec<Statement>, text: &mut String, line: u32, kind| {
        let trimmed = text.trim().to_string();
        if !trimmed.is_empty() || kind != StatementKind::Plain {
            out.push(Statement {
                line,
                text: trimmed,
                kind,
            });
        }
        text.clear();
    };
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        line += 1;
                        break;
                    }
                }
                if line_directive_done(&current) {
                    push(&mut out, &mut current, start_line, StatementKind::Plain);
                } else if !current.is_empty() {
                    current.push(' ');
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut previous = ' ';
                for c in chars.by_ref() {
                    if c == '\n' {
                        line += 1;
                    }
                    if previous == '*' && c == '/' {
                        break;
                    }
                    previous = c;
                }
                current.push(' ');
            }
            '\n' => {
                if line_directive_done(&current) {
                    push(&mut out, &mut current, start_line, StatementKind::Plain);
                } else if !current.trim().is_empty() {
                    current.push(' ');
                }
                line += 1;
            }
            ';' if nested == 0 => push(&mut out, &mut current, start_line, StatementKind::Plain),
            '{' if nested == 0 && current.trim_start().starts_with(".section") => {
                // A debug section's body: labels and `.b8` rows, nothing to run.
                let mut depth = 1usize;
                for c in chars.by_ref() {
                    match c {
                        '\n' => line += 1,
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    if depth == 0 {
                        break;
                    }
                }
                current.clear();
            }
            '{' => {
                let pending = current.trim();
                let opens_body = pending.is_empty()
                    || (pending.contains(".entry") || pending.contains(".func"))
                        && !pending.contains('=');
                if nested == 0 && opens_body {
                    if pending.is_empty() {
                        start_line = line;
                    }
                    push(&mut out, &mut current, start_line, StatementKind::Open);
                } else {
                    nested += 1;
                    current.push(c);
                }
            }
            '}' => {
                if nested > 0 {
                    nested -= 1;
                    current.push(c);
                } else {
                    if !current.trim().is_empty() {
                        push(&mut out, &mut current, start_line, StatementKind::Plain);
                    }
                    current.clear();
                    out.push(Statement {
                        line,
                        text: String::new(),
                        kind: StatementKind::Close,
                    });
                }
            }
            ':' if nested == 0 && is_label(&current) => {
                let name = current.trim().to_string();
                current.clear();
                out.push(Statement {
                    line: start_line,
                    text: name,
                    kind: StatementKind::Label,
                });
            }
            _ => {
                if current.trim().is_empty() && !c.is_whitespace() {
                    current.clear();
                    start_line = line;
                }
                current.push(c);
            }
        }
    }
    push(&mut out, &mut current, start_line, StatementKind::Plain);
    out
}

fn line_directive_done(current: &str) -> bool {
    let t = current.trim_start();
    LINE_DIRECTIVES
        .iter()
        .any(|d| t.starts_with(d) && !t[d.len()..].trim().is_empty())
}

fn is_label(current: &str) -> bool {
    let t = current.trim();
    !t.is_empty()
        && !t.starts_with('.')
        && !t.starts_with('@')
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '.')
}

/// Splits an operand list on commas outside `{}` and `[]`.
pub fn split_operands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut current = String::new();
    for c in text.chars() {
        match c {
            '{' | '[' => {
                depth += 1;
                current.push(c);
            }
            '}' | ']' => {
                depth -= 1;
                current.push(c);
            }
            ',' if depth == 0 => {
                out.push(current.trim().to_string());
                current.clear();
            }
            _ => current.push(c),
        }
    }
    if !current.trim().is_empty() {
        out.push(current.trim().to_string());
    }
    out
}

/// Parses an integer literal: decimal (optionally negative), `0x` hex, `0b` binary, with an
/// optional `U` suffix. Returns the two's-complement bits.
pub fn parse_int(text: &str) -> Option<u64> {
    let t = text.trim().trim_end_matches('U');
    let (negative, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t),
    };
    let value = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        u64::from_str_radix(hex, 16).ok()?
    } else if let Some(bin) = digits.strip_prefix("0b") {
        u64::from_str_radix(bin, 2).ok()?
    } else if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) {
        digits.parse::<u64>().ok()?
    } else {
        return None;
    };
    Some(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

/// Parses a float literal: `0fXXXXXXXX` (f32 bits), `0dXXXXXXXXXXXXXXXX` (f64 bits) or a
/// decimal number. Returns the value as f64.
pub fn parse_float(text: &str) -> Option<f64> {
    let t = text.trim();
    let (negative, body) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t),
    };
    let value = if let Some(hex) = body.strip_prefix("0f").or_else(|| body.strip_prefix("0F")) {
        if hex.len() != 8 {
            return None;
        }
        f64::from(f32::from_bits(u32::from_str_radix(hex, 16).ok()?))
    } else if let Some(hex) = body.strip_prefix("0d").or_else(|| body.strip_prefix("0D")) {
        if hex.len() != 16 {
            return None;
        }
        f64::from_bits(u64::from_str_radix(hex, 16).ok()?)
    } else if body.contains('.') || body.contains('e') || body.contains('E') {
        body.parse::<f64>().ok()?
    } else {
        return None;
    };
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_statements_labels_and_bodies() {
        let text = ".version 9.0\n.target sm_90\n.address_size 64\n// c\n.visible .entry k(\n.param .u64 k_param_0\n)\n.maxntid 32, 1, 1\n{\n.reg .b32 %r<3>;\n$L__BB0_1:\n@%p1 bra $L__BB0_1; /* x */\nmma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1,%f2}, {%r1};\nret;\n}\n";
        let s = statements(text);
        let kinds: Vec<_> = s
            .iter()
            .map(|s| (s.kind, s.text.as_str(), s.line))
            .collect();
        assert_eq!(kinds[0], (StatementKind::Plain, ".version 9.0", 1));
        assert_eq!(kinds[1], (StatementKind::Plain, ".target sm_90", 2));
        assert_eq!(kinds[2], (StatementKind::Plain, ".address_size 64", 3));
        assert_eq!(kinds[3].0, StatementKind::Open);
        assert!(kinds[3].1.starts_with(".visible .entry k("));
        assert!(kinds[3].1.contains(".maxntid 32, 1, 1"));
        assert_eq!(kinds[4], (StatementKind::Plain, ".reg .b32 %r<3>", 10));
        assert_eq!(kinds[5], (StatementKind::Label, "$L__BB0_1", 11));
        assert_eq!(kinds[6], (StatementKind::Plain, "@%p1 bra $L__BB0_1", 12));
        assert!(kinds[7].1.ends_with("{%f1,%f2}, {%r1}"));
        assert_eq!(kinds[8], (StatementKind::Plain, "ret", 14));
        assert_eq!(kinds[9].0, StatementKind::Close);
    }

    #[test]
    fn line_info_directives_end_at_the_line_and_debug_sections_drop() {
        let text = ".version 9.0\n.entry k()\n{\n.loc\t1 12 5, function_name $L__info_string0, inlined_at 1 30 9\nadd.s32 %r1, %r2, 1;\n.loc\t1 0 5\nret;\n}\n.file\t1 \"/w/a.cuh\"\n.section\t.debug_str\n{\n$L__info_string0:\n.b8 95,90,0\n}\n";
        let s = statements(text);
        let plain: Vec<(&str, u32)> = s
            .iter()
            .filter(|s| s.kind == StatementKind::Plain)
            .map(|s| (s.text.as_str(), s.line))
            .collect();
        assert_eq!(
            plain,
            vec![
                (".version 9.0", 1),
                (
                    ".loc\t1 12 5, function_name $L__info_string0, inlined_at 1 30 9",
                    4
                ),
                ("add.s32 %r1, %r2, 1", 5),
                (".loc\t1 0 5", 6),
                ("ret", 7),
                (".file\t1 \"/w/a.cuh\"", 9),
            ]
        );
        // Nothing of the section: no label, no open or close.
        assert!(!s.iter().any(|s| s.kind == StatementKind::Label));
        let closes = s.iter().filter(|s| s.kind == StatementKind::Close).count();
        assert_eq!(closes, 1, "only the entry's body closes");
    }

    #[test]
    fn operands_split_outside_brackets() {
        assert_eq!(
            split_operands("{%f1, %f2}, [%rd1+16], %r1|%p2"),
            vec!["{%f1, %f2}", "[%rd1+16]", "%r1|%p2"]
        );
    }

    #[test]
    fn literals() {
        assert_eq!(parse_int("-1"), Some(u64::MAX));
        assert_eq!(parse_int("0x1f"), Some(31));
        assert_eq!(parse_int("27"), Some(27));
        assert_eq!(parse_int("%r1"), None);
        assert_eq!(parse_float("0f3F800000"), Some(1.0));
        assert_eq!(parse_float("0dBFF0000000000000"), Some(-1.0));
        assert_eq!(parse_float("0f3F80000"), None);
        assert_eq!(parse_float("2.5"), Some(2.5));
    }
}
