//! `linattn report FILES... --out-dir DIR`: markdown tables (REPORT.md) and log-log SVG plots
//! of time and memory against N, from one or more results files (a linattn file and a
//! peers.py file from the same device merge into one report).

mod rows;

use crate::bench::series_slopes;
use crate::display::{fmt_bytes, fmt_seconds};
use crate::plot::{log_log_svg, Quantity, Series};
use crate::results::{self, Cell, CellStatus, ResultsFile};
use crate::skip_reason::Footnotes;
use linattn_core::AttnError;
use rows::{group_cells, row_series, GroupKey, Row};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Results JSON files (bench and/or peers.py) to merge.
    #[arg(required = true, num_args = 1..)]
    files: Vec<PathBuf>,
    /// Where REPORT.md and the SVG plots go.
    #[arg(long, default_value = "bench-results/report")]
    out_dir: PathBuf,
}

fn status_mark(c: &Cell) -> String {
    match c.status {
        CellStatus::Ok => String::new(),
        CellStatus::Oom => "OOM".into(),
        CellStatus::Unsupported => "unsupported".into(),
        CellStatus::Unavailable => "unavailable".into(),
        CellStatus::TooSlow => "too slow".into(),
        CellStatus::Error => "error".into(),
    }
}

fn markdown_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

fn render_markdown(files: &[ResultsFile], groups: &BTreeMap<GroupKey, Vec<Row>>) -> String {
    let mut md = String::from("# linattn benchmark report\n\n");
    md.push_str("| source | device | commit | date | build | peers |\n|---|---|---|---|---|---|\n");
    for f in files {
        let e = &f.environment;
        let peers = e
            .peers
            .iter()
            .map(|p| format!("{} {}", p.name, p.version))
            .collect::<Vec<_>>()
            .join(", ");
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            markdown_escape(&e.producer),
            markdown_escape(&e.device_name),
            markdown_escape(&e.commit),
            markdown_escape(&e.date),
            markdown_escape(&e.build_profile),
            markdown_escape(&peers)
        ));
    }
    let devices: BTreeSet<&str> = files
        .iter()
        .map(|f| f.environment.device_name.as_str())
        .collect();
    if devices.len() > 1 {
        md.push_str("\n**Warning:** these files come from different devices; ratios between them mean little.\n");
    }
    for f in files {
        for c in &f.copy_bandwidth {
            md.push_str(&format!(
                "\nCopy bandwidth ({:?}, {} buffer): median {:.1} GB/s.\n",
                c.device,
                fmt_bytes(c.bytes),
                c.median_gbps
            ));
        }
    }
    md.push_str(
        "\nEach cell: median time · peak memory (· time over the fastest peer at that N, when \
         peers ran). Slopes are least-squares fits of log(time) and log(memory) against log(N) \
         over the cells that ran.\n",
    );

    // A long reason (no NVRTC: the searched directories) once at the end, not per section.
    let mut notes = Footnotes::new();
    for (key, rows) in groups {
        let (runnable, unavailable): (Vec<&Row>, Vec<&Row>) =
            rows.iter().partition(|r| r.ran_somewhere());
        md.push_str(&format!("\n## {}\n\n", key.title()));
        let seqs: BTreeSet<usize> = runnable
            .iter()
            .flat_map(|r| r.by_seq.keys().copied())
            .collect();
        if !runnable.is_empty() {
            let fastest_peer: BTreeMap<usize, f64> = seqs
                .iter()
                .filter_map(|&n| {
                    runnable
                        .iter()
                        .filter(|r| r.is_peer)
                        .filter_map(|r| r.by_seq.get(&n)?.ok_median())
                        .min_by(f64::total_cmp)
                        .map(|t| (n, t))
                })
                .collect();
            md.push_str("| backend |");
            for n in &seqs {
                md.push_str(&format!(" N={n} |"));
            }
            md.push_str(" time ~ N^ | memory ~ N^ |\n|---|");
            for _ in &seqs {
                md.push_str("---|");
            }
            md.push_str("---|---|\n");
            for row in &runnable {
                md.push_str(&format!("| {} |", markdown_escape(&row.label)));
                for n in &seqs {
                    let text = match row.by_seq.get(n) {
                        None => String::new(),
                        Some(c) => match c.ok_median() {
                            Some(t) => {
                                let mut s = fmt_seconds(t);
                                if let Some(b) = c.peak_bytes {
                                    s.push_str(&format!(" · {}", fmt_bytes(b)));
                                }
                                if let (false, Some(p)) = (row.is_peer, fastest_peer.get(n)) {
                                    s.push_str(&format!(" · {:.2}×", t / p));
                                }
                                s
                            }
                            None => status_mark(c),
                        },
                    };
                    md.push_str(&format!(" {text} |"));
                }
                let cells: Vec<&Cell> = row.by_seq.values().copied().collect();
                let (t, m) = series_slopes(&cells);
                let fmt = |s: Option<f64>| s.map_or_else(|| "-".into(), |v| format!("{v:.2}"));
                md.push_str(&format!(" {} | {} |\n", fmt(t), fmt(m)));
            }
            md.push_str(&format!(
                "\n![time]({0}-time.svg) ![memory]({0}-memory.svg)\n",
                key.slug()
            ));
        }
        let mut by_reason: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for row in unavailable {
            let reason = row
                .by_seq
                .values()
                .find_map(|c| c.message.clone())
                .unwrap_or_else(|| "not run".into());
            by_reason.entry(reason).or_default().push(&row.label);
        }
        for (reason, names) in by_reason {
            md.push_str(&format!(
                "\nNot run ({}): {}\n",
                markdown_escape(&notes.short(&reason)),
                markdown_escape(&names.join(", "))
            ));
        }
    }
    let notes = notes.render();
    if !notes.is_empty() {
        md.push_str("\n## Why some backends did not run\n\n");
        for line in notes.lines() {
            md.push_str(&format!("{}\n\n", markdown_escape(line)));
        }
    }
    md
}

fn write_file(path: &Path, text: &str) -> Result<(), AttnError> {
    results::write_bytes_atomic(path, text.as_bytes())
}

/// The profiles of the files (`linattn profile --json`): per kernel and per phase, with the
/// model labelled as such.
fn render_profile_markdown(files: &[ResultsFile]) -> String {
    let mut md = String::new();
    for p in files.iter().flat_map(|f| &f.profiles) {
        md.push_str(&format!(
            "\n## Profile: {}\n\n{} tokens (B·H·N). Counters are exact counts of what the PTX \
             simulator executed; \"model µs\" is a roofline lower bound on {} ({}), not a \
             measurement.\n\n",
            markdown_escape(&p.key()),
            p.tokens,
            p.arch.part,
            p.arch.arch
        ));
        md.push_str(&crate::profile::kernel_table(p, true));
        md.push_str("\n\n");
        md.push_str(&crate::profile::phase_table(p, true));
        md.push('\n');
    }
    md
}

pub fn run(args: ReportArgs) -> Result<ExitCode, AttnError> {
    let files: Vec<ResultsFile> = args
        .files
        .iter()
        .map(|p| ResultsFile::load(p))
        .collect::<Result<_, _>>()?;
    std::fs::create_dir_all(&args.out_dir)
        .map_err(|e| AttnError::Io(format!("cannot create {}: {e}", args.out_dir.display())))?;
    let groups = group_cells(&files);
    let mut written = Vec::new();
    for (key, rows) in &groups {
        let runnable: Vec<&Row> = rows.iter().filter(|r| r.ran_somewhere()).collect();
        for (quantity, name) in [(Quantity::Time, "time"), (Quantity::Memory, "memory")] {
            let title = format!("{} vs N — {}", name, key.title());
            let series: Vec<Series> = runnable.iter().map(|r| row_series(r, quantity)).collect();
            let x_desc = "N (log scale; ticks at the N that ran)";
            if let Some(svg) = log_log_svg(&title, x_desc, quantity, &series)? {
                let path = args.out_dir.join(format!("{}-{name}.svg", key.slug()));
                write_file(&path, &svg)?;
                written.push(path);
            }
        }
    }
    let md_path = args.out_dir.join("REPORT.md");
    let mut markdown = render_markdown(&files, &groups);
    markdown.push_str(&render_profile_markdown(&files));
    write_file(&md_path, &markdown)?;
    written.push(md_path);
    for p in &written {
        eprintln!("wrote {}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::tests::sample_cell;
    use crate::results::{probe_environment, GridRecord, SCHEMA_VERSION};

    fn file(cells: Vec<Cell>, producer: &str) -> ResultsFile {
        let mut environment = probe_environment(None);
        environment.producer = producer.into();
        ResultsFile {
            schema_version: SCHEMA_VERSION,
            environment,
            grid: GridRecord::default(),
            copy_bandwidth: Vec::new(),
            gemm_rate: None,
            sweep: None,
            cells,
            profiles: Vec::new(),
        }
    }

    #[test]
    fn merged_report_has_peer_ratios_oom_marks_and_plots() {
        let mut ours: Vec<Cell> = (8..11)
            .map(|k| sample_cell("cpu/recurrent/f32", 1 << k, 1e-6 * (1u64 << k) as f64))
            .collect();
        let mut oom = sample_cell("cpu/softmax/f32", 1 << 10, 1.0);
        oom.status = CellStatus::Oom;
        oom.median_s = None;
        ours.push(sample_cell("cpu/softmax/f32", 1 << 8, 1e-3));
        ours.push(oom);
        let peers: Vec<Cell> = (8..11)
            .map(|k| {
                sample_cell(
                    "peer/torch-linear-cumsum/f32",
                    1 << k,
                    2e-6 * (1u64 << k) as f64,
                )
            })
            .collect();
        let files = vec![file(ours, "linattn"), file(peers, "peers.py")];
        let groups = group_cells(&files);
        assert_eq!(groups.len(), 1);
        let md = render_markdown(&files, &groups);
        assert!(md.contains("| N=256 | N=512 | N=1024 |"), "{md}");
        assert!(md.contains("OOM"));
        // ours takes half the peer's time at every N
        assert!(md.contains("0.50×"), "{md}");
        // slope of time against N for the linear row is exactly 1
        assert!(md.contains("| 1.00 |"), "{md}");

        let rows: Vec<&Row> = groups.values().next().unwrap().iter().collect();
        let series: Vec<Series> = rows.iter().map(|r| row_series(r, Quantity::Time)).collect();
        let svg = log_log_svg("t", "N", Quantity::Time, &series)
            .unwrap()
            .unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("peer/torch-linear-cumsum/f32"));
    }
}
