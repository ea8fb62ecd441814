//! Nsight Compute CSV exports (`ncu --csv --metrics ...`): one row per (launch, metric),
//! read back into launches: ID, kernel name, grid, block, and metric → value in base units.
//!
//! What ncu writes: a header row naming the columns (`"ID"`, `"Kernel Name"`, `"Block
//! Size"`, `"Grid Size"`, `"Metric Name"`, `"Metric Unit"`, `"Metric Value"` are the ones read;
//! others are ignored), every field quoted, numbers with thousands separators (`"1,594,624"`),
//! sizes as `"(288, 1, 1)"`, and lines of its own (`==PROF== ...`) before the header. A metric
//! ncu could not collect reads `n/a`; it is absent from its launch, as is one the file never
//! lists: absent is never 0.

use std::collections::BTreeMap;
use std::path::Path;

use linattn_core::AttnError;

/// Kernel names of the first H100 run (main at 588430d) and their names since the renames of
/// issue #19 (one prefix per form file, one backward naming). The CSV keeps the old ones.
pub const RENAMED: &[(&str, &str)] = &[
    ("cr_forward_go", "cr_backward_go"),
    ("cc_state_fwd", "cc_forward_state"),
    ("cc_state_bwd", "cc_backward_state"),
    ("cc_forward_go", "cc_backward_go"),
    ("cc_dq", "cc_backward_dq"),
    ("cc_dk", "cc_backward_dk"),
    ("cc_dv", "cc_backward_dv"),
    ("la_nc_accumulate", "nc_accumulate"),
    ("la_nc_reduce", "nc_reduce"),
    ("la_nc_rowgemm", "nc_rowgemm"),
    ("la_nc_row_terms", "nc_backward_row_terms"),
];

/// Today's name of a kernel an older export names.
pub fn current_name(name: &str) -> &str {
    RENAMED
        .iter()
        .find(|(old, _)| *old == name)
        .map_or(name, |(_, new)| new)
}

/// One metric value in its base unit (`ns` for times, `byte` for sizes).
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub value: f64,
    pub unit: String,
}

/// One profiled launch.
#[derive(Debug, Clone, PartialEq)]
pub struct NcuLaunch {
    pub id: u64,
    /// The kernel name as the file has it.
    pub kernel: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub metrics: BTreeMap<String, Metric>,
}

impl NcuLaunch {
    /// The metric's value, if the file has it for this launch.
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metrics.get(name).map(|m| m.value)
    }
}

/// Reads an export; a malformed file is an error naming the file, the line and the problem.
pub fn read(path: &Path) -> Result<Vec<NcuLaunch>, AttnError> {
    let bad = |reason: String| AttnError::BadFile {
        path: path.display().to_string(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|_| bad("not UTF-8 text".into()))?;
    parse(&text).map_err(bad)
}

/// The launches of an export's text, in file order of their first row.
pub fn parse(text: &str) -> Result<Vec<NcuLaunch>, String> {
    let mut lines = text.lines().enumerate();
    let header = loop {
        let Some((_, line)) = lines.next() else {
            return Err(
                "no header row (a line starting with \"ID\"): not an ncu --csv export".into(),
            );
        };
        if line.starts_with("\"ID\"") || line.starts_with("ID,") {
            break fields(line).map_err(|e| format!("header: {e}"))?;
        }
    };
    let column = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| format!("no column \"{name}\" in the header"))
    };
    let [id, kernel, block, grid, metric, unit, value] = [
        "ID",
        "Kernel Name",
        "Block Size",
        "Grid Size",
        "Metric Name",
        "Metric Unit",
        "Metric Value",
    ]
    .map(column);
    let (id, kernel, block, grid, metric, unit, value) =
        (id?, kernel?, block?, grid?, metric?, unit?, value?);
    let mut launches: Vec<NcuLaunch> = Vec::new();
    let mut index: BTreeMap<u64, usize> = BTreeMap::new();
    for (n, line) in lines {
        let at = |e: String| format!("line {}: {e}", n + 1);
        if line.trim().is_empty() || line.starts_with("==") {
            continue;
        }
        let row = fields(line).map_err(at)?;
        if row.len() != header.len() {
            return Err(at(format!(
                "{} fields, the header has {}",
                row.len(),
                header.len()
            )));
        }
        let launch_id: u64 = row[id]
            .parse()
            .map_err(|_| at(format!("launch ID \"{}\" is not a number", row[id])))?;
        let dims = |col: usize, what: &str| dim3(&row[col]).map_err(|e| at(format!("{what}: {e}")));
        let (g, b) = (dims(grid, "grid size")?, dims(block, "block size")?);
        let slot = *index.entry(launch_id).or_insert_with(|| {
            launches.push(NcuLaunch {
                id: launch_id,
                kernel: row[kernel].clone(),
                grid: g,
                block: b,
                metrics: BTreeMap::new(),
            });
            launches.len() - 1
        });
        let launch = &mut launches[slot];
        if (launch.kernel.as_str(), launch.grid, launch.block) != (row[kernel].as_str(), g, b) {
            return Err(at(format!(
                "launch {launch_id} was {} grid {:?} block {:?}, this row says {} grid {g:?} \
                 block {b:?}",
                launch.kernel, launch.grid, launch.block, row[kernel]
            )));
        }
        let name = row[metric].clone();
        if name.is_empty() {
            return Err(at("empty metric name".into()));
        }
        let Some(m) = number(&row[value], &row[unit]).map_err(|e| at(format!("{name}: {e}")))?
        else {
            continue; // n/a: ncu could not collect it; absent.
        };
        if launch.metrics.insert(name.clone(), m).is_some() {
            return Err(at(format!("launch {launch_id} lists {name} twice")));
        }
    }
    if launches.is_empty() {
        return Err("a header but no launches".into());
    }
    Ok(launches)
}

/// The fields of one CSV line (quoted or not; `""` inside quotes is a quote).
fn fields(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err("unterminated quoted field".into()),
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                }
            }
            match chars.next() {
                None => {
                    out.push(field);
                    return Ok(out);
                }
                Some(',') => {}
                Some(c) => return Err(format!("'{c}' after a closing quote")),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        out.push(field);
                        return Ok(out);
                    }
                    Some(',') => break,
                    Some(c) => field.push(c),
                }
            }
        }
        out.push(field);
    }
}

/// `"(288, 1, 1)"` → [288, 1, 1].
fn dim3(text: &str) -> Result<[u32; 3], String> {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| format!("\"{text}\" is not of the form (x, y, z)"))?;
    let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
    let parsed: Result<Vec<u32>, _> = parts.iter().map(|p| p.parse::<u32>()).collect();
    match parsed {
        Ok(v) if v.len() == 3 => Ok([v[0], v[1], v[2]]),
        _ => Err(format!("\"{text}\" is not of the form (x, y, z)")),
    }
}

/// A metric value in its base unit; None for `n/a`.
fn number(text: &str, unit: &str) -> Result<Option<Metric>, String> {
    let t = text.trim();
    if t == "n/a" {
        return Ok(None);
    }
    let value: f64 = t
        .replace(',', "")
        .parse()
        .map_err(|_| format!("value \"{text}\" is not a number"))?;
    if !value.is_finite() {
        return Err(format!("value \"{text}\" is not finite"));
    }
    let (scale, base) = base_unit(unit);
    Ok(Some(Metric {
        value: value * scale,
        unit: base.to_string(),
    }))
}

/// ncu scales units for display unless told not to (`usecond`, `Kbyte`); the factor to its
/// base unit (ns for times) and that unit.
fn base_unit(unit: &str) -> (f64, &str) {
    match unit {
        "nsecond" | "ns" => (1.0, "ns"),
        "usecond" | "us" => (1e3, "ns"),
        "msecond" | "ms" => (1e6, "ns"),
        "second" | "s" => (1e9, "ns"),
        "Kbyte" => (1e3, "byte"),
        "Mbyte" => (1e6, "byte"),
        "Gbyte" => (1e9, "byte"),
        "Tbyte" => (1e12, "byte"),
        other => (1.0, other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "\"ID\",\"Process ID\",\"Kernel Name\",\"Block Size\",\"Grid Size\",\
                          \"Metric Name\",\"Metric Unit\",\"Metric Value\"";

    fn row(id: u32, kernel: &str, block: &str, grid: &str, m: &str, u: &str, v: &str) -> String {
        format!("\"{id}\",\"7\",\"{kernel}\",\"{block}\",\"{grid}\",\"{m}\",\"{u}\",\"{v}\"")
    }

    fn file(rows: &[String]) -> String {
        format!(
            "==PROF== Connected to process 7\n{HEADER}\n{}\n",
            rows.join("\n")
        )
    }

    #[test]
    fn rows_become_launches_with_base_units() {
        let text = file(&[
            row(
                0,
                "cr_forward",
                "(288, 1, 1)",
                "(2, 1, 1)",
                "gpu__time_duration.sum",
                "usecond",
                "1,017.22",
            ),
            row(
                0,
                "cr_forward",
                "(288, 1, 1)",
                "(2, 1, 1)",
                "dram__bytes_read.sum",
                "byte",
                "1,594,624",
            ),
            row(
                1,
                "cc_dq",
                "(128, 1, 1)",
                "(64, 1, 1)",
                "dram__bytes_read.sum",
                "Kbyte",
                "3.5",
            ),
            row(
                1,
                "cc_dq",
                "(128, 1, 1)",
                "(64, 1, 1)",
                "gpu__time_duration.sum",
                "",
                "n/a",
            ),
        ]);
        let launches = parse(&text).unwrap();
        assert_eq!(launches.len(), 2);
        let l = &launches[0];
        assert_eq!(
            (l.id, l.kernel.as_str(), l.grid, l.block),
            (0, "cr_forward", [2, 1, 1], [288, 1, 1])
        );
        assert!((l.metric("gpu__time_duration.sum").unwrap() - 1_017_220.0).abs() < 1e-6);
        assert_eq!(l.metric("dram__bytes_read.sum"), Some(1_594_624.0));
        assert_eq!(launches[1].metric("dram__bytes_read.sum"), Some(3500.0));
        // n/a and never listed are both absent, not 0.
        assert_eq!(launches[1].metric("gpu__time_duration.sum"), None);
        assert_eq!(launches[1].metric("launch__grid_size"), None);
        assert_eq!(current_name(&launches[1].kernel), "cc_backward_dq");
        assert_eq!(current_name("cr_forward"), "cr_forward");
    }

    #[test]
    fn malformed_files_name_the_line_and_the_problem() {
        let ok = |m: &str, v: &str| row(0, "k", "(1, 1, 1)", "(1, 1, 1)", m, "", v);
        let err = |rows: &[String]| parse(&file(rows)).unwrap_err();
        assert!(parse("a,b\n1,2\n").unwrap_err().contains("no header row"));
        assert!(parse(&format!("{HEADER}\n"))
            .unwrap_err()
            .contains("no launches"));
        let no_value =
            "\"ID\",\"Kernel Name\",\"Block Size\",\"Grid Size\",\"Metric Name\",\"Metric Unit\"\n";
        assert!(parse(no_value)
            .unwrap_err()
            .contains("no column \"Metric Value\""));
        assert!(err(&[ok("m", "12x")]).contains("line 3: m: value \"12x\" is not a number"));
        assert!(err(&[ok("m", "1"), ok("m", "2")]).contains("lists m twice"));
        assert!(err(&["\"0\",\"7\",\"k\"".into()]).contains("3 fields, the header has 8"));
        assert!(err(&["\"0,\"7\"".into()]).contains("'7' after a closing quote"));
        assert!(err(&["\"0\",\"7\",\"k".into()]).contains("unterminated"));
        let grid = row(0, "k", "(1, 1, 1)", "(1, 1)", "m", "", "1");
        assert!(err(&[grid]).contains("grid size: \"(1, 1)\" is not of the form (x, y, z)"));
        let other = row(0, "k", "(1, 1, 1)", "(2, 1, 1)", "n", "", "1");
        assert!(err(&[ok("m", "1"), other]).contains("launch 0 was k grid [1, 1, 1]"));
        let id = row(0, "k", "(1, 1, 1)", "(1, 1, 1)", "m", "", "1").replacen("\"0\"", "\"x\"", 1);
        assert!(err(&[id]).contains("launch ID \"x\" is not a number"));
    }

    /// The committed export of the first H100 run reads whole: 27 launches, 17 metrics each.
    #[test]
    fn the_committed_h100_export_reads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../bench-results/h100/2026-11-25/ncu-n4096.csv");
        let launches = read(&path).unwrap();
        assert_eq!(launches.len(), 27);
        assert!(launches.iter().all(|l| l.metrics.len() == 17));
        assert_eq!(
            launches.iter().map(|l| l.id).collect::<Vec<_>>(),
            (0..27).collect::<Vec<_>>()
        );
        let first = &launches[0];
        assert_eq!(
            first.metric("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"),
            Some(704_512.0)
        );
        assert_eq!(first.metric("launch__registers_per_thread"), Some(76.0));
    }
}
