//! `linattn compare BASE NEW`: cell-by-cell timing comparison of two results files.
//!
//! A cell changed only when both hold:
//! * the relative change exceeds `--threshold`: a regression when new/base − 1 > t, an
//!   improvement when base/new − 1 > t (so swapping the files swaps the two verdicts);
//! * the change exceeds the measured noise: |median_new − median_base| > k·√(sd_base² + sd_new²)
//!   with sd = rel_stdev · median of each cell and k = `--noise-k` (default 2), so a change
//!   inside roughly two standard deviations of the difference is never called.
//!
//! A cell that ran in BASE and failed in NEW with oom, error or too-slow is a regression too.
//!
//! Files with `profiles` (`linattn profile --json`) are compared counter by counter instead:
//! exact counts need no noise rule (see `profile::gate`; `--counter-threshold`, default
//! 0.5%).
//! Exit status: 1 when anything regressed, 0 otherwise, 2 when a file cannot be read or
//! nothing matched.

use crate::display::{fmt_seconds, truncate};
use crate::results::{Cell, CellKey, CellStatus, ResultsFile};
use linattn_core::AttnError;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    /// The baseline results JSON, or `auto`: this device's committed baseline,
    /// `bench-results/<device-slug>/baseline.json`, the device read from NEW.
    base: PathBuf,
    /// The new results JSON.
    new: PathBuf,
    /// Relative change that counts (0.05 = 5%).
    #[arg(long, default_value_t = 0.05)]
    threshold: f64,
    /// A change must also exceed this many standard deviations of the difference.
    #[arg(long, default_value_t = 2.0)]
    noise_k: f64,
    /// Relative change of a per-token counter that counts (profiles; 0.005 = 0.5%).
    #[arg(long, default_value_t = 0.005)]
    counter_threshold: f64,
    /// Every profile of BASE must be in NEW (a missing one is a regression); without it,
    /// profiles on one side only are listed and not compared.
    #[arg(long)]
    complete: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Regression,
    Improvement,
    /// Beyond the threshold but within the noise.
    WithinNoise,
    Unchanged,
    /// Status changed without a timing verdict (e.g. unavailable → ok).
    StatusChanged,
}

#[derive(Debug, Clone)]
pub(crate) struct Comparison {
    pub key: CellKey,
    pub base_status: CellStatus,
    pub new_status: CellStatus,
    pub base_median: Option<f64>,
    pub new_median: Option<f64>,
    pub ratio: Option<f64>,
    /// k·√(sd_base² + sd_new²) in seconds.
    pub noise_s: Option<f64>,
    pub verdict: Verdict,
    pub new_message: Option<String>,
}

pub(crate) struct Outcome {
    pub compared: Vec<Comparison>,
    pub only_base: Vec<CellKey>,
    pub only_new: Vec<CellKey>,
}

impl Outcome {
    pub fn regressions(&self) -> usize {
        self.compared
            .iter()
            .filter(|c| c.verdict == Verdict::Regression)
            .count()
    }
}

fn judge(base: &Cell, new: &Cell, threshold: f64, k: f64) -> Comparison {
    let mut c = Comparison {
        key: base.key(),
        base_status: base.status,
        new_status: new.status,
        base_median: base.ok_median(),
        new_median: new.ok_median(),
        ratio: None,
        noise_s: None,
        verdict: Verdict::Unchanged,
        new_message: new.message.clone(),
    };
    match (c.base_median, c.new_median) {
        (Some(b), Some(n)) if b > 0.0 && n > 0.0 => {
            let sd = |cell: &Cell, median: f64| cell.rel_stdev.unwrap_or(0.0).abs() * median;
            let noise = k * (sd(base, b).powi(2) + sd(new, n).powi(2)).sqrt();
            let ratio = n / b;
            let beyond_noise = (n - b).abs() > noise;
            c.ratio = Some(ratio);
            c.noise_s = Some(noise);
            c.verdict = if ratio - 1.0 > threshold {
                if beyond_noise {
                    Verdict::Regression
                } else {
                    Verdict::WithinNoise
                }
            } else if 1.0 / ratio - 1.0 > threshold {
                if beyond_noise {
                    Verdict::Improvement
                } else {
                    Verdict::WithinNoise
                }
            } else {
                Verdict::Unchanged
            };
        }
        _ if base.status == new.status => {}
        _ => {
            let broke = base.status == CellStatus::Ok
                && matches!(
                    new.status,
                    CellStatus::Oom | CellStatus::Error | CellStatus::TooSlow
                );
            c.verdict = if broke {
                Verdict::Regression
            } else {
                Verdict::StatusChanged
            };
        }
    }
    c
}

pub(crate) fn compare_files(
    base: &ResultsFile,
    new: &ResultsFile,
    threshold: f64,
    k: f64,
) -> Outcome {
    let index = |f: &ResultsFile| -> BTreeMap<CellKey, Cell> {
        f.cells.iter().map(|c| (c.key(), c.clone())).collect()
    };
    let base_cells = index(base);
    let new_cells = index(new);
    let mut outcome = Outcome {
        compared: Vec::new(),
        only_base: Vec::new(),
        only_new: Vec::new(),
    };
    for (key, b) in &base_cells {
        match new_cells.get(key) {
            Some(n) => outcome.compared.push(judge(b, n, threshold, k)),
            None => outcome.only_base.push(key.clone()),
        }
    }
    outcome.only_new = new_cells
        .keys()
        .filter(|k| !base_cells.contains_key(k))
        .cloned()
        .collect();
    outcome
}

fn render(outcome: &Outcome) -> String {
    use tabled::builder::Builder;
    use tabled::settings::Style;
    let mut out = String::new();
    let changed: Vec<&Comparison> = outcome
        .compared
        .iter()
        .filter(|c| c.verdict != Verdict::Unchanged)
        .collect();
    if !changed.is_empty() {
        let mut table = Builder::default();
        table.push_record(["verdict", "cell", "base", "new", "new/base", "noise (k·sd)"]);
        for c in &changed {
            let verdict = match c.verdict {
                Verdict::Regression => "REGRESSION",
                Verdict::Improvement => "improvement",
                Verdict::WithinNoise => "within noise",
                Verdict::StatusChanged => "status changed",
                Verdict::Unchanged => "unchanged",
            };
            let side = |median: Option<f64>, status: CellStatus| match median {
                Some(m) => fmt_seconds(m),
                None => status.label().to_string(),
            };
            let mut new_side = side(c.new_median, c.new_status);
            if c.new_median.is_none() {
                if let Some(m) = &c.new_message {
                    new_side = format!("{new_side}: {}", truncate(m, 40));
                }
            }
            table.push_record([
                verdict.to_string(),
                c.key.to_string(),
                side(c.base_median, c.base_status),
                new_side,
                c.ratio.map_or_else(|| "-".into(), |r| format!("{r:.3}")),
                c.noise_s.map_or_else(|| "-".into(), fmt_seconds),
            ]);
        }
        out.push_str(&table.build().with(Style::sharp()).to_string());
        out.push('\n');
    }
    for (label, keys) in [
        ("only in BASE", &outcome.only_base),
        ("only in NEW", &outcome.only_new),
    ] {
        if !keys.is_empty() {
            out.push_str(&format!("{label} ({}):\n", keys.len()));
            for k in keys {
                out.push_str(&format!("  {k}\n"));
            }
        }
    }
    let count = |v: Verdict| outcome.compared.iter().filter(|c| c.verdict == v).count();
    out.push_str(&format!(
        "{} cells matched: {} regressed, {} improved, {} beyond the threshold but within noise, \
         {} changed status, {} unchanged; {} only in BASE, {} only in NEW\n",
        outcome.compared.len(),
        count(Verdict::Regression),
        count(Verdict::Improvement),
        count(Verdict::WithinNoise),
        count(Verdict::StatusChanged),
        count(Verdict::Unchanged),
        outcome.only_base.len(),
        outcome.only_new.len()
    ));
    out
}

/// The axes on which two sets of cells share no value, each with both sides' values: why
/// nothing matched (a different backend set, N range, map...).
pub(crate) fn disjoint_axes(base: &[Cell], new: &[Cell]) -> Vec<String> {
    type Axis = (&'static str, fn(&CellKey) -> String);
    let axes: [Axis; 11] = [
        ("backend", |k| k.backend.clone()),
        ("mode", |k| k.mode.to_string()),
        ("B", |k| k.shape.batch.to_string()),
        ("H", |k| k.shape.heads.to_string()),
        ("N", |k| k.shape.seq.to_string()),
        ("D", |k| k.shape.dk.to_string()),
        ("M", |k| k.shape.dv.to_string()),
        ("causality", |k| k.causality.to_string()),
        ("map", |k| k.map.clone()),
        ("eps", |k| format!("{:e}", f64::from_bits(k.eps_bits))),
        ("decay", |k| f64::from_bits(k.decay_bits).to_string()),
    ];
    let values = |cells: &[Cell], f: fn(&CellKey) -> String| -> BTreeSet<String> {
        cells.iter().map(|c| f(&c.key())).collect()
    };
    let shown = |set: &BTreeSet<String>| {
        let v: Vec<&str> = set.iter().map(String::as_str).collect();
        if v.len() > 6 {
            format!("{}, … ({} values)", v[..6].join(", "), v.len())
        } else {
            v.join(", ")
        }
    };
    axes.iter()
        .filter_map(|(name, f)| {
            let (b, n) = (values(base, *f), values(new, *f));
            b.is_disjoint(&n).then(|| {
                format!(
                    "{name}: BASE has {{{}}}, NEW has {{{}}}",
                    shown(&b),
                    shown(&n)
                )
            })
        })
        .collect()
}

/// Where a device's committed baseline lives: one per device, so `just regress` compares
/// like with like. Relative to the checkout's root (found from the working directory), so
/// `compare auto` works from any directory of the checkout.
pub(crate) fn baseline_path(device_name: &str) -> PathBuf {
    let relative = PathBuf::from("bench-results")
        .join(crate::results::slug(device_name))
        .join("baseline.json");
    match crate::results::checkout_root() {
        Some(root) => root.join(relative),
        None => relative,
    }
}

pub fn run(args: CompareArgs) -> Result<ExitCode, AttnError> {
    if !(args.threshold.is_finite() && args.threshold >= 0.0) {
        return Err(AttnError::InvalidArgument(format!(
            "--threshold must be a finite number >= 0, got {}",
            args.threshold
        )));
    }
    if !(args.noise_k.is_finite() && args.noise_k >= 0.0) {
        return Err(AttnError::InvalidArgument(format!(
            "--noise-k must be a finite number >= 0, got {}",
            args.noise_k
        )));
    }
    let new = ResultsFile::load(&args.new)?;
    let base_path = if args.base.as_os_str() == "auto" {
        baseline_path(&new.environment.device_name)
    } else {
        args.base.clone()
    };
    eprintln!("baseline: {}", base_path.display());
    let base = ResultsFile::load(&base_path)?;
    if base.environment.device_name != new.environment.device_name {
        eprintln!(
            "warning: the files come from different devices ('{}' vs '{}'): timings may not be comparable",
            base.environment.device_name, new.environment.device_name
        );
    }
    // Counters of profiles: exact, so no noise rule.
    let mut regressions = 0;
    if !base.profiles.is_empty() || !new.profiles.is_empty() {
        if !(args.counter_threshold.is_finite() && args.counter_threshold >= 0.0) {
            return Err(AttnError::InvalidArgument(format!(
                "--counter-threshold must be a finite number >= 0, got {}",
                args.counter_threshold
            )));
        }
        let gate = crate::profile::compare_profiles(
            &base.profiles,
            &new.profiles,
            args.counter_threshold,
            args.complete,
        );
        print!("{}", crate::profile::render_gate(&gate));
        if gate.matched_profiles == 0 {
            return Err(AttnError::InvalidArgument(
                "no profile of NEW matches one of BASE (backend, shape, causality, map, mode)"
                    .into(),
            ));
        }
        regressions += gate.regressions();
    }
    // Timed cells: the threshold and noise rule.
    if !base.cells.is_empty() || !new.cells.is_empty() {
        let outcome = compare_files(&base, &new, args.threshold, args.noise_k);
        print!("{}", render(&outcome));
        if outcome.compared.is_empty() {
            let axes = disjoint_axes(&base.cells, &new.cells);
            return Err(AttnError::InvalidArgument(format!(
                "no cell of NEW matches one of BASE, so nothing was compared{}",
                if axes.is_empty() {
                    " (every axis shares values, but no combination is in both files)".to_string()
                } else {
                    format!(": {}", axes.join("; "))
                }
            )));
        }
        regressions += outcome.regressions();
    }
    Ok(if regressions > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::tests::sample_cell;
    use crate::results::{probe_environment, GridRecord, SCHEMA_VERSION};

    fn file(cells: Vec<Cell>) -> ResultsFile {
        ResultsFile {
            schema_version: SCHEMA_VERSION,
            environment: probe_environment(None),
            grid: GridRecord::default(),
            copy_bandwidth: Vec::new(),
            gemm_rate: None,
            sweep: None,
            cells,
            profiles: Vec::new(),
        }
    }

    fn base_cells() -> Vec<Cell> {
        (8..12)
            .map(|k| sample_cell("cpu/recurrent/f32", 1 << k, 1e-6 * (1u64 << k) as f64))
            .collect()
    }

    /// A copy of `base` whose cell `index` has its median multiplied by `factor`.
    fn scaled(base: &ResultsFile, index: usize, factor: f64) -> ResultsFile {
        let mut new = base.clone();
        let m = new.cells[index].median_s.unwrap();
        new.cells[index].median_s = Some(m * factor);
        new
    }

    #[test]
    fn baselines_are_per_device() {
        // Under the checkout's root (the test runs inside the checkout).
        let path = baseline_path("NVIDIA H100 80GB HBM3");
        assert!(path.is_absolute(), "{}", path.display());
        assert!(
            path.ends_with("bench-results/nvidia-h100-80gb-hbm3/baseline.json"),
            "{}",
            path.display()
        );
    }

    #[test]
    fn a_twenty_percent_slowdown_is_the_only_regression() {
        let base = file(base_cells());
        let new = scaled(&base, 2, 1.2);
        let out = compare_files(&base, &new, 0.05, 2.0);
        let flagged: Vec<usize> = out
            .compared
            .iter()
            .filter(|c| c.verdict == Verdict::Regression)
            .map(|c| c.key.shape.seq)
            .collect();
        assert_eq!(flagged, vec![1 << 10]);
        // Swapping the files turns it into the one improvement.
        let back = compare_files(&new, &base, 0.05, 2.0);
        assert_eq!(back.regressions(), 0);
        assert_eq!(
            back.compared
                .iter()
                .filter(|c| c.verdict == Verdict::Improvement)
                .count(),
            1
        );
    }

    #[test]
    fn noise_hides_a_change_of_its_own_size() {
        let base = file(base_cells());
        let mut new = scaled(&base, 2, 1.2);
        new.cells[2].rel_stdev = Some(0.25);
        let out = compare_files(&base, &new, 0.05, 2.0);
        assert_eq!(out.regressions(), 0);
        assert_eq!(out.compared[2].verdict, Verdict::WithinNoise);
    }

    #[test]
    fn below_threshold_is_unchanged_and_unmatched_cells_are_listed() {
        let base = file(base_cells());
        let mut new = scaled(&base, 0, 1.04);
        new.cells[0].rel_stdev = Some(0.0);
        new.cells.pop();
        new.cells.push(sample_cell("cpu/cumsum/f32", 1 << 8, 1e-3));
        let out = compare_files(&base, &new, 0.05, 2.0);
        assert_eq!(out.regressions(), 0);
        assert!(out.compared.iter().all(|c| c.verdict == Verdict::Unchanged));
        assert_eq!(out.only_base.len(), 1);
        assert_eq!(out.only_new.len(), 1);
        assert_eq!(out.only_new[0].backend, "cpu/cumsum/f32");
    }

    #[test]
    fn a_cell_that_now_runs_out_of_memory_regressed() {
        let base = file(base_cells());
        let mut new = base.clone();
        new.cells[3].status = CellStatus::Oom;
        new.cells[3].median_s = None;
        let out = compare_files(&base, &new, 0.05, 2.0);
        assert_eq!(out.regressions(), 1);
        let mut gone = base.clone();
        gone.cells[3].status = CellStatus::Unavailable;
        gone.cells[3].median_s = None;
        let out = compare_files(&base, &gone, 0.05, 2.0);
        assert_eq!(out.regressions(), 0);
        assert_eq!(out.compared[3].verdict, Verdict::StatusChanged);
    }
}
