//! The rows of a report: merged cells grouped into one table and plot per problem family,
//! a row per backend, and a row as a plotted line.

use crate::plot::{Point, Quantity, Series};
use crate::results::{self, Cell, CellStatus, Mode, ResultsFile};
use linattn_core::DEFAULT_EPS;
use std::collections::{BTreeMap, BTreeSet};

/// Cells whose rows share a table and a plot: everything but backend, map and N.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct GroupKey {
    mode: Mode,
    batch: usize,
    heads: usize,
    dk: usize,
    dv: usize,
    /// `Causality::label` (a string so that keys sort).
    causality: &'static str,
}

impl GroupKey {
    fn of(c: &Cell) -> GroupKey {
        GroupKey {
            mode: c.mode,
            batch: c.shape.batch,
            heads: c.shape.heads,
            dk: c.shape.dk,
            dv: c.shape.dv,
            causality: c.causality.label(),
        }
    }
    pub(super) fn title(&self) -> String {
        format!(
            "{} — B={} H={} D={} M={}, {}",
            self.mode, self.batch, self.heads, self.dk, self.dv, self.causality
        )
    }
    pub(super) fn slug(&self) -> String {
        results::slug(&format!(
            "{} b{} h{} d{} m{} {}",
            self.mode, self.batch, self.heads, self.dk, self.dv, self.causality
        ))
    }
}

/// One line of a table or plot: a backend (with its map, ε and decay when not default).
pub(super) struct Row<'a> {
    pub(super) label: String,
    pub(super) is_peer: bool,
    pub(super) by_seq: BTreeMap<usize, &'a Cell>,
}

impl Row<'_> {
    /// False for a backend that ran at no N of this group (no driver here, or a problem
    /// it does not handle): it becomes a footnote instead of a row of marks.
    pub(super) fn ran_somewhere(&self) -> bool {
        self.by_seq
            .values()
            .any(|c| !matches!(c.status, CellStatus::Unavailable | CellStatus::Unsupported))
    }
}

fn row_label(c: &Cell, show_map: bool) -> String {
    let mut label = c.backend.clone();
    if show_map {
        label.push_str(&format!(" [{}]", c.map));
    }
    if c.eps != DEFAULT_EPS {
        label.push_str(&format!(" eps={:e}", c.eps));
    }
    if c.decay != 1.0 {
        label.push_str(&format!(" decay={}", c.decay));
    }
    label
}

fn is_peer(backend: &str) -> bool {
    backend.starts_with("peer/")
}

/// Groups the merged cells; a later file's cell replaces an earlier one with the same key.
pub(super) fn group_cells(files: &[ResultsFile]) -> BTreeMap<GroupKey, Vec<Row<'_>>> {
    let mut latest: BTreeMap<results::CellKey, &Cell> = BTreeMap::new();
    for f in files {
        for c in &f.cells {
            latest.insert(c.key(), c);
        }
    }
    let mut groups: BTreeMap<GroupKey, Vec<&Cell>> = BTreeMap::new();
    for c in latest.values() {
        groups.entry(GroupKey::of(c)).or_default().push(c);
    }
    groups
        .into_iter()
        .map(|(key, cells)| {
            // Linear-attention maps differ per row only when the group mixes them.
            let maps: BTreeSet<&str> = cells
                .iter()
                .filter(|c| c.algorithm == "linear")
                .map(|c| c.map.as_str())
                .collect();
            let show_map = maps.len() > 1;
            let mut rows: BTreeMap<(bool, String), Row> = BTreeMap::new();
            for c in cells {
                let label = row_label(c, show_map && c.algorithm == "linear");
                let peer = is_peer(&c.backend);
                rows.entry((peer, label.clone()))
                    .or_insert_with(|| Row {
                        label,
                        is_peer: peer,
                        by_seq: BTreeMap::new(),
                    })
                    .by_seq
                    .insert(c.shape.seq, c);
            }
            (key, rows.into_values().collect())
        })
        .collect()
}

/// The cells of a report row as a series: ok cells as points (time with their min–max), and
/// the first cell after the last ok one that ran out of memory, was predicted too slow or
/// failed as the stop.
pub(super) fn row_series(row: &Row, quantity: Quantity) -> Series {
    let points: Vec<Point> = row
        .by_seq
        .values()
        .filter_map(|c| {
            let value = cell_value(quantity, c)?;
            let range = match quantity {
                Quantity::Time => c
                    .min_s
                    .zip(c.max_s)
                    .filter(|(lo, hi)| *lo > 0.0 && *hi > 0.0),
                Quantity::Memory => None,
            };
            Some(Point {
                n: c.shape.seq as f64,
                value,
                range,
            })
        })
        .collect();
    let after = points.last().map_or(0.0, |p| p.n);
    let stop = row
        .by_seq
        .values()
        .find(|c| {
            c.shape.seq as f64 > after
                && matches!(
                    c.status,
                    CellStatus::Oom | CellStatus::TooSlow | CellStatus::Error
                )
        })
        .map(|c| {
            let label = match c.status {
                CellStatus::Oom => "OOM",
                CellStatus::TooSlow => "too slow",
                _ => "error",
            };
            (c.shape.seq as f64, label)
        });
    Series {
        label: row.label.clone(),
        thin: row.is_peer,
        points,
        stop,
    }
}

/// The plotted value of an ok cell, before the log.
fn cell_value(quantity: Quantity, c: &Cell) -> Option<f64> {
    let v = match quantity {
        Quantity::Time => c.ok_median(),
        Quantity::Memory => c
            .peak_bytes
            .filter(|_| c.status == CellStatus::Ok)
            .map(|b| b as f64),
    };
    v.filter(|v| *v > 0.0 && v.is_finite())
}
