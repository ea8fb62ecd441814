//! The one line `linattn bench` writes to stderr as each cell finishes, progress bar or not:
//! a log of a sweep cut off by a timeout still shows how far it got and where time went.

use crate::display::{fmt_seconds, truncate};
use crate::results::{Cell, CellStatus};
use std::time::Duration;

/// Longest reason shown for a cell that did not run (the results file keeps all of it).
const REASON_CHARS: usize = 100;

/// `[ 3/56] ok cpu/recurrent/f32 forward B=1 H=8 N=1024 D=64 M=64 causal elu+1: median
/// 1.234 ms ±2.1% (37 samples); cell 0.84 s (stage 0.50 s, warm-up 0.04 s)`. `None` for a
/// cell that was never attempted because the backend cannot take it here (unsupported,
/// unavailable): those cost nothing, and the table lists them with their reasons once; a
/// sweep of every backend on a machine without a GPU would otherwise log hundreds of them.
pub(super) fn cell_log_line(
    index: usize,
    planned: usize,
    cell: &Cell,
    took: Duration,
) -> Option<String> {
    if matches!(
        cell.status,
        CellStatus::Unsupported | CellStatus::Unavailable
    ) {
        return None;
    }
    let width = planned.to_string().len();
    let s = &cell.shape;
    let head = format!(
        "[{index:>width$}/{planned}] {} {} {} B={} H={} N={} D={} M={} {} {}",
        cell.status.label(),
        cell.backend,
        cell.mode,
        s.batch,
        s.heads,
        s.seq,
        s.dk,
        s.dv,
        cell.causality,
        cell.map
    );
    let took = fmt_seconds(took.as_secs_f64());
    match (cell.status, cell.median_s) {
        (CellStatus::Ok, Some(median)) => {
            let noise = cell
                .rel_stdev
                .map_or(String::new(), |r| format!(" ±{:.1}%", 100.0 * r));
            let phases = cell.wall.map_or(String::new(), |w| {
                format!(
                    " (stage {}, warm-up {})",
                    fmt_seconds(w.stage_s),
                    fmt_seconds(w.warmup_s)
                )
            });
            Some(format!(
                "{head}: median {}{noise} ({} samples); cell {took}{phases}",
                fmt_seconds(median),
                cell.samples_s.len()
            ))
        }
        _ => {
            let reason = cell.message.as_deref().unwrap_or("no reason recorded");
            let first_line = reason.lines().next().unwrap_or_default();
            Some(format!(
                "{head}: {}; cell {took}",
                truncate(first_line, REASON_CHARS)
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{CellShape, CellWall, Mode};
    use linattn_core::{Causality, DeviceKind, Precision};

    fn cell(status: CellStatus) -> Cell {
        let mut c = Cell::empty(
            "cpu/causal_recurrent/f32".into(),
            DeviceKind::Cpu,
            Precision::F32,
            "linear".into(),
            "recurrent".into(),
            Mode::Forward,
            CellShape {
                batch: 1,
                heads: 8,
                seq: 1024,
                dk: 64,
                dv: 64,
            },
            Causality::Causal,
            "elu+1".into(),
            1e-6,
            1.0,
        );
        c.status = status;
        c
    }

    #[test]
    fn a_measured_cell_shows_median_noise_and_phases() {
        let mut c = cell(CellStatus::Ok);
        c.median_s = Some(1.234e-3);
        c.rel_stdev = Some(0.021);
        c.samples_s = vec![1.2e-3; 37];
        c.wall = Some(CellWall {
            total_s: 0.84,
            stage_s: 0.5,
            warmup_s: 0.04,
            sampling_s: 0.3,
        });
        let line = cell_log_line(3, 56, &c, Duration::from_millis(840)).unwrap();
        assert_eq!(
            line,
            "[ 3/56] ok cpu/causal_recurrent/f32 forward B=1 H=8 N=1024 D=64 M=64 causal elu+1: \
             median 1.234 ms ±2.1% (37 samples); cell 840.000 ms (stage 500.000 ms, warm-up \
             40.000 ms)"
        );
    }

    #[test]
    fn a_failed_cell_shows_one_short_line_of_its_reason() {
        let mut c = cell(CellStatus::Oom);
        c.message = Some(format!("out of memory: {}\nsecond line", "x".repeat(300)));
        let line = cell_log_line(12, 12, &c, Duration::from_millis(2)).unwrap();
        assert!(!line.contains('\n') && line.len() < 260, "{line}");
        assert!(line.starts_with("[12/12] oom cpu/"), "{line}");
        assert!(line.contains(": out of memory: xxx") && line.contains("…; cell 2.00"));
    }

    #[test]
    fn cells_never_attempted_here_are_not_logged() {
        for status in [CellStatus::Unsupported, CellStatus::Unavailable] {
            assert_eq!(cell_log_line(1, 1, &cell(status), Duration::ZERO), None);
        }
    }
}
