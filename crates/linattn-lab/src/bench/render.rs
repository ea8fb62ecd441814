//! The tables `linattn bench` prints: one row per cell, one per series with its slopes.

use crate::display::{fmt_bytes, fmt_seconds};
use crate::registry;
use crate::results::{Cell, CellStatus, Mode, ResultsFile};
use crate::skip_reason::{wrap_list, Footnotes};
use crate::stats::log_log_slope;
use linattn_core::DEFAULT_EPS;
use std::collections::BTreeMap;

pub(super) fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

/// Series key for slopes: everything but N.
pub(crate) fn series_of(c: &Cell) -> (String, Mode, String) {
    let s = &c.shape;
    (
        c.backend.clone(),
        c.mode,
        format!(
            "B={} H={} D={} M={} {} {}{}{}",
            s.batch,
            s.heads,
            s.dk,
            s.dv,
            c.causality,
            c.map,
            if c.eps != DEFAULT_EPS {
                format!(" eps={:e}", c.eps)
            } else {
                String::new()
            },
            if c.decay != 1.0 {
                format!(" decay={}", c.decay)
            } else {
                String::new()
            }
        ),
    )
}

/// Slopes of log(time) and log(peak memory) against log(N) of one series' ok cells.
pub(crate) fn series_slopes(cells: &[&Cell]) -> (Option<f64>, Option<f64>) {
    let ok: Vec<&&Cell> = cells
        .iter()
        .filter(|c| c.status == CellStatus::Ok)
        .collect();
    let time: Vec<(f64, f64)> = ok
        .iter()
        .filter_map(|c| Some((c.shape.seq as f64, c.median_s?)))
        .collect();
    let mem: Vec<(f64, f64)> = ok
        .iter()
        .filter_map(|c| Some((c.shape.seq as f64, c.peak_bytes? as f64)))
        .collect();
    (log_log_slope(&time), log_log_slope(&mem))
}

pub(super) fn render_tables(file: &ResultsFile) -> String {
    use tabled::builder::Builder;
    use tabled::settings::Style;
    let mut groups: BTreeMap<(String, Mode, String), Vec<&Cell>> = BTreeMap::new();
    for c in &file.cells {
        groups.entry(series_of(c)).or_default().push(c);
    }
    let mut cells_table = Builder::default();
    cells_table.push_record([
        "backend",
        "mode",
        "axes",
        "N",
        "median",
        "±",
        "staged",
        "peak mem",
        "harness mem",
        "tok/s",
        "TFLOP/s",
        "GB/s",
        "% copy",
        "% GEMM",
        "status",
    ]);
    let mut slope_table = Builder::default();
    slope_table.push_record([
        "backend",
        "mode",
        "axes",
        "ok N",
        "time ~ N^",
        "memory ~ N^",
    ]);
    // Series that ran nowhere (no driver, unsupported problem) get one line each below.
    // Long skip reasons show their head in the tables and once in full below them.
    let mut notes = Footnotes::new();
    let mut not_run: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut any_simulated = false;
    for ((backend, mode, axes), mut cells) in groups {
        cells.sort_by_key(|c| c.shape.seq);
        let never_ran = cells
            .iter()
            .all(|c| matches!(c.status, CellStatus::Unavailable | CellStatus::Unsupported));
        if never_ran {
            let reason = cells
                .iter()
                .find_map(|c| c.message.clone())
                .unwrap_or_else(|| cells[0].status.label().to_string());
            let entry = not_run.entry(reason).or_default();
            if !entry.contains(&backend) {
                entry.push(backend.clone());
            }
            continue;
        }
        let simulated = registry::family(&backend) == "sim";
        any_simulated |= simulated;
        for c in &cells {
            let status = match (&c.status, &c.message) {
                (CellStatus::Ok, _) if simulated => "ok, simulated †".to_string(),
                (CellStatus::Ok, _) => "ok".to_string(),
                // Unsupported's own text already starts with "unsupported:" / "skipped:".
                (CellStatus::Unsupported | CellStatus::Unavailable, Some(m)) => notes.short(m),
                // A too-slow prediction or an error: its head here, the whole text below.
                (s, Some(m)) => format!("{}: {}", s.label(), notes.short(m)),
                (s, None) => s.label().to_string(),
            };
            cells_table.push_record([
                backend.clone(),
                mode.to_string(),
                axes.clone(),
                c.shape.seq.to_string(),
                opt(c.ok_median(), fmt_seconds),
                opt(c.rel_stdev.filter(|_| c.status == CellStatus::Ok), |r| {
                    format!("{:.1}%", 100.0 * r)
                }),
                c.staged_bytes.map_or_else(|| "-".into(), fmt_bytes),
                c.peak_bytes.map_or_else(|| "-".into(), fmt_bytes),
                c.harness_bytes.map_or_else(|| "-".into(), fmt_bytes),
                opt(c.tokens_per_s, |t| format!("{t:.3e}")),
                opt(c.tflops, |t| format!("{t:.3}")),
                opt(c.gbps, |g| format!("{g:.2}")),
                opt(c.pct_of_copy, |p| format!("{p:.1}")),
                opt(c.pct_of_gemm, |p| format!("{p:.1}")),
                status,
            ]);
        }
        let (t, m) = series_slopes(&cells);
        let ok = cells.iter().filter(|c| c.status == CellStatus::Ok).count();
        slope_table.push_record([
            backend.clone(),
            mode.to_string(),
            axes.clone(),
            ok.to_string(),
            opt(t, |s| format!("{s:.2}")),
            opt(m, |s| format!("{s:.2}")),
        ]);
    }
    let mut out = cells_table.build().with(Style::sharp()).to_string();
    out.push_str(
        "\nstaged: host bytes the backend kept after staging its inputs. peak mem: what it \
         held beyond them during a run (host: counting allocator; device: exact). harness \
         mem: host bytes made only to stage (an f64 copy when the backend stages from f64).\n",
    );
    out.push('\n');
    out.push_str(&slope_table.build().with(Style::sharp()).to_string());
    out.push('\n');
    for (reason, backends) in &not_run {
        let lead = format!("not run ({}):", notes.short(reason));
        out.push_str(&wrap_list(&lead, backends, 100));
    }
    out.push_str(&notes.render());
    if any_simulated {
        out.push_str(
            "† sim/*: the CUDA kernels run by the PTX simulator on the host. Their times are \
             host times of the simulation and say nothing about a GPU; their memory is the \
             exact device bytes the kernels allocate.\n",
        );
    }
    if let Some(g) = &file.gemm_rate {
        out.push_str(&format!(
            "fp32 GEMM rate ({0}×{0}, every core): median {1:.1} GFLOP/s over {2} samples at \
             the start; % GEMM = useful FLOPs of the form / time / the rate measured just \
             before and after the cell\n",
            g.shape,
            g.median_gflops,
            g.samples_gflops.len()
        ));
    }
    if !file.copy_bandwidth.is_empty() {
        for c in &file.copy_bandwidth {
            out.push_str(&format!(
                "copy bandwidth ({:?}, {}): median {:.1} GB/s over {} samples\n",
                c.device,
                fmt_bytes(c.bytes),
                c.median_gbps,
                c.samples_gbps.len()
            ));
        }
    }
    out
}
