//! Why a backend or cell did not run, in a table: a short head in the cell ("skipped: no
//! NVRTC [1]"), the whole reason once below the table as footnote [1]. A reason's head is its
//! first clause: the machine-lacks-something messages (linattn-cuda's probe) are written as
//! "short reason: details". The JSON results keep the whole reason; only the display is cut.

/// The longest reason a cell shows whole.
pub(crate) const FIT: usize = 64;

/// The longest head shown for a cut reason, so that with its mark (" [99]") it fits too.
pub(crate) const HEAD_MAX: usize = FIT - 5;

/// Prefixes that belong to the head ([`linattn_core::Unsupported`]'s display).
const PREFIXES: [&str; 2] = ["skipped: ", "unsupported: "];

/// Where a first clause ends.
const CLAUSE_ENDS: [&str; 3] = [": ", " (", "; "];

/// `reason` as a cell shows it, and whether it left something out: the whole reason when it
/// fits in [`FIT`] characters on one line, else its first clause (after a "skipped: " /
/// "unsupported: " prefix, which stays) when that fits in [`HEAD_MAX`], else its words up
/// to [`HEAD_MAX`] characters with "…".
pub(crate) fn head(reason: &str) -> (String, bool) {
    let reason = reason.trim();
    if reason.chars().count() <= FIT && !reason.contains('\n') {
        return (reason.to_string(), false);
    }
    let prefix = PREFIXES
        .iter()
        .find(|p| reason.starts_with(*p))
        .map_or("", |p| *p);
    let rest = &reason[prefix.len()..];
    let first_line = rest.lines().next().unwrap_or("");
    let clause_end = CLAUSE_ENDS
        .iter()
        .filter_map(|end| first_line.find(end))
        .filter(|&i| i > 0)
        .min()
        .unwrap_or(first_line.len());
    let head = format!("{prefix}{}", first_line[..clause_end].trim_end());
    if head.chars().count() <= HEAD_MAX {
        return (head, true);
    }
    let cut: String = head.chars().take(HEAD_MAX - 1).collect();
    // At a word boundary when there is one in the second half, else mid-word.
    let cut = match cut.rfind(' ') {
        Some(i) if i >= HEAD_MAX / 2 => &cut[..i],
        _ => cut.as_str(),
    };
    (format!("{}…", cut.trim_end()), true)
}

/// The reasons of one table, numbered in order of first use.
#[derive(Debug, Default)]
pub(crate) struct Footnotes {
    notes: Vec<String>,
}

impl Footnotes {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// What the cell shows for `reason`: the reason itself when short, else its head and
    /// the number of its footnote (the same number for the same reason).
    pub(crate) fn short(&mut self, reason: &str) -> String {
        let (head, cut) = head(reason);
        if !cut {
            return head;
        }
        let reason = reason.trim();
        let number = match self.notes.iter().position(|n| n == reason) {
            Some(i) => i + 1,
            None => {
                self.notes.push(reason.to_string());
                self.notes.len()
            }
        };
        format!("{head} [{number}]")
    }

    /// One line per footnote, "[n] the whole reason"; empty when no reason was cut.
    pub(crate) fn render(&self) -> String {
        self.notes
            .iter()
            .enumerate()
            .map(|(i, note)| format!("[{}] {}\n", i + 1, note.replace('\n', " ")))
            .collect()
    }
}

/// `lead` followed by `items` joined with ", ", broken into lines of at most `width`
/// characters between items (continuation lines indented by four spaces); an item is never
/// split, so one longer than the width makes its line longer.
pub(crate) fn wrap_list(lead: &str, items: &[String], width: usize) -> String {
    let mut out = String::new();
    let mut line = lead.to_string();
    let mut line_has_item = false;
    for (i, item) in items.iter().enumerate() {
        let piece = if i + 1 < items.len() {
            format!("{item},")
        } else {
            item.clone()
        };
        let sep = if line_has_item || !lead.is_empty() {
            " "
        } else {
            ""
        };
        if line_has_item && line.chars().count() + sep.len() + piece.chars().count() > width {
            out.push_str(&line);
            out.push('\n');
            line = format!("    {piece}");
        } else {
            line.push_str(sep);
            line.push_str(&piece);
        }
        line_has_item = true;
    }
    out.push_str(&line);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_NVRTC: &str = "skipped: no NVRTC: libnvrtc.so.13 not found on the loader path \
                            nor in [/a/.nvrtc/nvidia/cu13/lib, /usr/local/cuda/lib64]; run \
                            `just nvrtc`, or set LINATTN_NVRTC_DIR or LD_LIBRARY_PATH";

    #[test]
    fn a_short_reason_is_shown_whole_and_gets_no_footnote() {
        assert_eq!(
            head("skipped: no CUDA driver: libcuda.so.1 not found"),
            (
                "skipped: no CUDA driver: libcuda.so.1 not found".into(),
                false
            )
        );
        let mut notes = Footnotes::new();
        assert_eq!(
            notes.short("unsupported: D = 300 > 256"),
            "unsupported: D = 300 > 256"
        );
        assert_eq!(notes.render(), "");
    }

    #[test]
    fn a_long_reason_keeps_its_prefix_and_first_clause() {
        assert_eq!(head(NO_NVRTC), ("skipped: no NVRTC".into(), true));
        // Without a prefix; the clause may end at " (" or "; " too.
        let paren = format!("no CUDA device (cuInit failed: {})", "x".repeat(80));
        assert_eq!(head(&paren), ("no CUDA device".into(), true));
        let semi = format!("NVRTC unusable; {}", "y".repeat(80));
        assert_eq!(head(&semi), ("NVRTC unusable".into(), true));
    }

    #[test]
    fn a_long_reason_without_a_clause_is_cut_to_the_limit() {
        let long = "z".repeat(200);
        let (h, cut) = head(&long);
        assert!(cut);
        assert_eq!(h.chars().count(), HEAD_MAX);
        assert!(h.ends_with('…'));
        // Between words where it can.
        let words = "unsupported: the noncausal form computes non-causal attention only, and \
                     never a causal one";
        assert_eq!(
            head(words),
            (
                "unsupported: the noncausal form computes non-causal…".into(),
                true
            )
        );
        // A reason that fits is never cut, however close to the limit.
        let edge = "unsupported: noncausal form computes non-causal attention only";
        assert_eq!(head(edge), (edge.into(), false));
        // A colon at the very start is no clause.
        let (h, _) = head(&format!(": {long}"));
        assert_eq!(h.chars().count(), HEAD_MAX);
        // A multi-line reason is never shown whole, however short.
        assert_eq!(head("no GPU\nsecond line"), ("no GPU".into(), true));
    }

    #[test]
    fn each_distinct_reason_is_numbered_once_in_order_of_use() {
        let other = format!("skipped: no CUDA device: {}", "w".repeat(80));
        let mut notes = Footnotes::new();
        assert_eq!(notes.short(NO_NVRTC), "skipped: no NVRTC [1]");
        assert_eq!(notes.short(&other), "skipped: no CUDA device [2]");
        assert_eq!(notes.short(NO_NVRTC), "skipped: no NVRTC [1]");
        assert_eq!(notes.render(), format!("[1] {NO_NVRTC}\n[2] {other}\n"));
        for reason in [NO_NVRTC, other.as_str()] {
            assert!(notes.short(reason).chars().count() <= FIT);
        }
    }

    #[test]
    fn lists_wrap_at_the_width_between_items() {
        let items: Vec<String> = (0..12).map(|i| format!("sim/form{i}/f16")).collect();
        let text = wrap_list("not run (skipped: no NVRTC [1]):", &items, 60);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.len() > 2, "{text}");
        assert!(lines.iter().all(|l| l.chars().count() <= 60), "{text}");
        assert!(
            lines[1..].iter().all(|l| l.starts_with("    sim/")),
            "{text}"
        );
        // Nothing lost or reordered.
        let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(
            joined,
            format!("not run (skipped: no NVRTC [1]): {}", items.join(", "))
        );
        assert_eq!(wrap_list("x:", &["a".into()], 60), "x: a\n");
        let huge = "h".repeat(80);
        assert_eq!(
            wrap_list("x:", std::slice::from_ref(&huge), 60),
            format!("x: {huge}\n")
        );
    }
}
