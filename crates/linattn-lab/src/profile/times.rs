//! The model's time beside the measured one, launch by launch and per backend
//! (`linattn profile --against`): the latency model, which of its terms won, and the roofline
//! alone, each as a ratio to the export's `gpu__time_duration.sum`.

use tabled::builder::Builder;
use tabled::settings::Style;

use super::against::Pair;

const MEASURED: &str = "gpu__time_duration.sum";

/// One compared launch's times (ns).
#[derive(Debug, Clone)]
pub struct TimeRow {
    pub id: u64,
    pub kernel: String,
    pub backend: String,
    pub bound: &'static str,
    pub measured_ns: f64,
    pub model_ns: f64,
    pub roofline_ns: f64,
}

impl TimeRow {
    pub fn ratio(&self) -> f64 {
        self.model_ns / self.measured_ns
    }
}

/// Per backend: (backend, measured, model, roofline), summed over its launches (ns).
pub type Total = (String, f64, f64, f64);

/// The like-for-like pairs whose measured time is in the file and not zero.
pub fn rows(pairs: &[Pair<'_>]) -> Vec<TimeRow> {
    pairs
        .iter()
        .filter_map(|p| {
            let (Some(h), Some(s), None) = (p.hw, p.sim, &p.problem) else {
                return None;
            };
            let measured_ns = h.metric(MEASURED).filter(|t| *t > 0.0)?;
            Some(TimeRow {
                id: h.id,
                kernel: s.entry.clone(),
                backend: s.backend.clone(),
                bound: s.bound,
                measured_ns,
                model_ns: s.model_ns,
                roofline_ns: s.roofline_ns,
            })
        })
        .collect()
}

/// The rows whose model/measured lies outside [1/`factor`, `factor`], one line each.
pub fn outside(rows: &[TimeRow], factor: f64) -> Vec<String> {
    rows.iter()
        .filter(|r| !(1.0 / factor..=factor).contains(&r.ratio()))
        .map(|r| {
            format!(
                "#{} {}: model {:.1} µs, measured {:.1} µs ({:.3}x)",
                r.id,
                r.kernel,
                r.model_ns / 1e3,
                r.measured_ns / 1e3,
                r.ratio()
            )
        })
        .collect()
}

/// Sums per backend, in order of first appearance.
pub fn totals(rows: &[TimeRow]) -> Vec<Total> {
    let mut out: Vec<Total> = Vec::new();
    for r in rows {
        let i = match out.iter().position(|t| t.0 == r.backend) {
            Some(i) => i,
            None => {
                out.push((r.backend.clone(), 0.0, 0.0, 0.0));
                out.len() - 1
            }
        };
        out[i].1 += r.measured_ns;
        out[i].2 += r.model_ns;
        out[i].3 += r.roofline_ns;
    }
    out
}

/// The per-launch table, then the per-backend totals.
pub fn render(rows: &[TimeRow]) -> String {
    let us = |ns: f64| format!("{:.1}", ns / 1e3);
    let mut b = Builder::new();
    b.push_record([
        "launch",
        "kernel",
        "bound",
        "measured µs",
        "model µs",
        "model/measured",
        "roofline/measured",
    ]);
    for r in rows {
        b.push_record([
            format!("#{}", r.id),
            r.kernel.clone(),
            r.bound.to_string(),
            us(r.measured_ns),
            us(r.model_ns),
            format!("{:.3}", r.ratio()),
            format!("{:.3}", r.roofline_ns / r.measured_ns),
        ]);
    }
    for (backend, measured, model, roofline) in totals(rows) {
        b.push_record([
            "total".into(),
            backend,
            String::new(),
            us(measured),
            us(model),
            format!("{:.3}", model / measured),
            format!("{:.3}", roofline / measured),
        ]);
    }
    let mut t = b.build();
    t.with(Style::sharp());
    t.to_string()
}
