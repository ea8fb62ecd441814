//! The sweep: defaults, a TOML/JSON grid file and the flags combined into one parsed grid.

use super::args::BenchArgs;
use super::parse::{dedup_sorted, invalid, parse_list, parse_size_list, parse_unique, seq_lengths};
use crate::registry;
use crate::results::{GridRecord, Mode};
use linattn_core::{AttnError, Causality, FeatureMap, Precision, Problem, Shape, DEFAULT_EPS};
use serde::Deserialize;
use std::path::Path;

/// A grid file: every field optional; flags given on the command line win.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GridFile {
    pub(super) n: Option<NumberList>,
    pub(super) n_min: Option<NumberOrPower>,
    pub(super) n_max: Option<NumberOrPower>,
    pub(super) batch: Option<NumberList>,
    pub(super) heads: Option<NumberList>,
    pub(super) dk: Option<NumberList>,
    pub(super) dv: Option<NumberList>,
    pub(super) backends: Option<StringList>,
    pub(super) precision: Option<StringList>,
    pub(super) causality: Option<StringList>,
    pub(super) map: Option<StringList>,
    pub(super) mode: Option<StringList>,
    pub(super) eps: Option<f64>,
    pub(super) decay: Option<f64>,
    pub(super) warmup: Option<usize>,
    pub(super) repeats: Option<usize>,
    pub(super) min_repeats: Option<usize>,
    pub(super) cell_seconds: Option<f64>,
    pub(super) max_cell_seconds: Option<f64>,
    pub(super) flush_l2: Option<bool>,
    pub(super) seed: Option<u64>,
}

/// `[1024, "2^12"]` or `"1024,2^12"`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum NumberList {
    One(NumberOrPower),
    Many(Vec<NumberOrPower>),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum NumberOrPower {
    Number(u64),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum StringList {
    One(String),
    Many(Vec<String>),
}

impl NumberOrPower {
    fn to_text(&self) -> String {
        match self {
            NumberOrPower::Number(n) => n.to_string(),
            NumberOrPower::Text(t) => t.clone(),
        }
    }
}

impl NumberList {
    fn to_text(&self) -> String {
        match self {
            NumberList::One(x) => x.to_text(),
            NumberList::Many(v) => v.iter().map(|x| x.to_text()).collect::<Vec<_>>().join(","),
        }
    }
}

impl StringList {
    fn to_text(&self) -> String {
        match self {
            StringList::One(s) => s.clone(),
            StringList::Many(v) => v.join(","),
        }
    }
}

/// The sweep after defaults, file and flags are combined and every value parsed.
#[derive(Debug, Clone)]
pub(crate) struct Grid {
    pub(super) seq: Vec<usize>,
    pub(super) batch: Vec<usize>,
    pub(super) heads: Vec<usize>,
    pub(super) dk: Vec<usize>,
    /// Empty: M = D.
    pub(super) dv: Vec<usize>,
    pub(super) backends: Option<String>,
    pub(super) precision: Vec<Precision>,
    pub(super) causality: Vec<Causality>,
    pub(super) map: Vec<FeatureMap>,
    pub(super) mode: Vec<Mode>,
    pub(super) eps: f64,
    pub(super) decay: f64,
    pub(super) warmup: usize,
    pub(super) repeats: Option<usize>,
    pub(super) min_repeats: usize,
    pub(super) cell_seconds: f64,
    pub(super) max_cell_seconds: f64,
    pub(super) flush_l2: bool,
    pub(super) seed: u64,
}

pub(super) const DEFAULT_SEED: u64 = 0x11_a77e;
pub(super) fn read_grid_file(path: &Path) -> Result<GridFile, AttnError> {
    let bad = |reason: String| AttnError::BadFile {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let named_json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    parse_grid_text(&text, named_json || looks_like_json(&text)).map_err(bad)
}

/// A grid file not named `.json` is still read as JSON when it opens with `{`.
pub(crate) fn looks_like_json(text: &str) -> bool {
    text.trim_start().starts_with('{')
}

/// The text of a grid file, parsed as JSON or TOML; the error is the reason, without the path.
pub(crate) fn parse_grid_text(text: &str, is_json: bool) -> Result<GridFile, String> {
    let empty = if is_json {
        matches!(serde_json::from_str::<serde_json::Value>(text),
                 Ok(serde_json::Value::Object(fields)) if fields.is_empty())
    } else {
        matches!(text.parse::<toml::Table>(), Ok(fields) if fields.is_empty())
    };
    if empty {
        // An empty file would silently run the default sweep under a name that suggests
        // a chosen one.
        return Err("the grid sets no field (name at least one, e.g. n = [\"2^10\"])".into());
    }
    if is_json {
        serde_json::from_str(text).map_err(|e| format!("grid JSON: {e}"))
    } else {
        toml::from_str(text).map_err(|e| format!("grid TOML: {e}"))
    }
}

pub(super) fn resolve_grid(args: &BenchArgs) -> Result<Grid, AttnError> {
    let file = match &args.grid {
        Some(p) => read_grid_file(p)?,
        None => GridFile::default(),
    };
    resolve_grid_with(args, file)
}

/// Defaults, `file` and the flags of `args` (which win) combined into one parsed grid.
pub(crate) fn resolve_grid_with(args: &BenchArgs, file: GridFile) -> Result<Grid, AttnError> {
    // Flag text if given, else the file's, else None.
    let pick_nums = |flag: &Option<String>, f: &Option<NumberList>| {
        flag.clone().or_else(|| f.as_ref().map(NumberList::to_text))
    };
    let pick_strs = |flag: &Option<String>, f: &Option<StringList>| {
        flag.clone().or_else(|| f.as_ref().map(StringList::to_text))
    };

    let explicit_n = pick_nums(&args.n, &file.n);
    let n_min = args
        .n_min
        .clone()
        .or_else(|| file.n_min.as_ref().map(NumberOrPower::to_text));
    let n_max = args
        .n_max
        .clone()
        .or_else(|| file.n_max.as_ref().map(NumberOrPower::to_text));
    let seq = seq_lengths(
        explicit_n.as_deref(),
        n_min.as_deref(),
        n_max.as_deref(),
        ("2^10", "2^16"),
    )?;
    let list_or = |text: Option<String>, default: &str, what: &str| {
        parse_size_list(text.as_deref().unwrap_or(default), what)
    };
    let batch = list_or(pick_nums(&args.batch, &file.batch), "1", "--batch")?;
    let heads = list_or(pick_nums(&args.heads, &file.heads), "8", "--heads")?;
    let dk = list_or(pick_nums(&args.dk, &file.dk), "64", "--dk")?;
    let dv = match pick_nums(&args.dv, &file.dv) {
        Some(t) => parse_size_list(&t, "--dv")?,
        None => Vec::new(),
    };
    let precision = match pick_strs(&args.precision, &file.precision) {
        Some(t) => dedup_sorted(parse_list::<Precision>(&t, "--precision")?),
        None => Vec::new(),
    };
    let strs_or = |flag: &Option<String>, f: &Option<StringList>, default: &str| {
        pick_strs(flag, f).unwrap_or_else(|| default.to_string())
    };
    let causality = parse_unique::<Causality>(
        &strs_or(&args.causality, &file.causality, "causal"),
        "--causality",
    )?;
    let map = parse_unique::<FeatureMap>(&strs_or(&args.map, &file.map, "elu+1"), "--map")?;
    let mode = dedup_sorted(parse_list::<Mode>(
        &strs_or(&args.mode, &file.mode, "forward,forward+backward"),
        "--mode",
    )?);
    let grid = Grid {
        seq,
        batch,
        heads,
        dk,
        dv,
        backends: pick_strs(&args.backends, &file.backends),
        precision,
        causality,
        map,
        mode,
        eps: args.eps.or(file.eps).unwrap_or(DEFAULT_EPS),
        decay: args.decay.or(file.decay).unwrap_or(1.0),
        warmup: args.warmup.or(file.warmup).unwrap_or(2),
        repeats: args.repeats.or(file.repeats),
        min_repeats: args.min_repeats.or(file.min_repeats).unwrap_or(5),
        cell_seconds: args.cell_seconds.or(file.cell_seconds).unwrap_or(1.0),
        max_cell_seconds: args
            .max_cell_seconds
            .or(file.max_cell_seconds)
            .unwrap_or(60.0),
        flush_l2: args.flush_l2 || file.flush_l2.unwrap_or(false),
        seed: args.seed.or(file.seed).unwrap_or(DEFAULT_SEED),
    };
    if grid.repeats == Some(0) || grid.min_repeats == 0 {
        return Err(invalid(
            "--repeats and --min-repeats must be at least 1".into(),
        ));
    }
    for (name, v) in [
        ("--cell-seconds", grid.cell_seconds),
        ("--max-cell-seconds", grid.max_cell_seconds),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(invalid(format!(
                "{name} must be a positive number, got {v}"
            )));
        }
    }
    // The problems are a cartesian product: a short file can ask for billions of them.
    let dvs = grid.dv.len().max(1);
    let problems = [
        grid.seq.len(),
        grid.batch.len(),
        grid.heads.len(),
        grid.dk.len(),
        dvs,
        grid.causality.len(),
        grid.map.len(),
    ]
    .iter()
    .try_fold(1usize, |acc, &n| acc.checked_mul(n))
    .filter(|&n| n <= MAX_PROBLEMS);
    if problems.is_none() {
        return Err(invalid(format!(
            "the sweep asks for more than {MAX_PROBLEMS} problems (the product of the list \
             lengths of n, batch, heads, dk, dv, causality and map); split it into smaller grids"
        )));
    }
    Ok(grid)
}

/// Most problems one sweep may hold (each is then run on every backend and mode).
const MAX_PROBLEMS: usize = 100_000;

impl Grid {
    pub(crate) fn record(&self) -> GridRecord {
        GridRecord {
            seq: self.seq.clone(),
            batch: self.batch.clone(),
            heads: self.heads.clone(),
            dk: self.dk.clone(),
            dv: self.dv.clone(),
            causality: self.causality.clone(),
            map: self.map.iter().map(FeatureMap::label).collect(),
            backends: self
                .backends
                .as_deref()
                .map(|s| {
                    registry::split_patterns(s)
                        .into_iter()
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default(),
            precision: self.precision.clone(),
            mode: self.mode.clone(),
            eps: Some(self.eps),
            decay: Some(self.decay),
            warmup: self.warmup,
            repeats: self.repeats,
            min_repeats: self.min_repeats,
            cell_seconds: self.cell_seconds,
            max_cell_seconds: self.max_cell_seconds,
            flush_l2: self.flush_l2,
            seed: self.seed,
        }
    }

    /// Every problem of the sweep, grouped so that N grows fastest: the too-slow
    /// prediction and the shared inputs rely on that order.
    pub(crate) fn problems(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        for &causality in &self.causality {
            for map in &self.map {
                for &batch in &self.batch {
                    for &heads in &self.heads {
                        for &dk in &self.dk {
                            let dvs = if self.dv.is_empty() {
                                vec![dk]
                            } else {
                                self.dv.clone()
                            };
                            for dv in dvs {
                                for &seq in &self.seq {
                                    out.push(
                                        Problem::new(
                                            Shape::new(batch, heads, seq, dk, dv),
                                            causality,
                                            *map,
                                        )
                                        .with_eps(self.eps)
                                        .with_decay(self.decay),
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_files_parse_in_toml_and_json_and_flags_win() {
        let dir = tempfile::tempdir().unwrap();
        let toml_path = dir.path().join("grid.toml");
        std::fs::write(
            &toml_path,
            "n = [\"2^8\", 1024]\nbatch = 2\nheads = [4]\nmode = \"forward\"\n\
             causality = [\"causal\", \"non-causal\"]\nmap = \"relu\"\n",
        )
        .unwrap();
        let args = BenchArgs {
            grid: Some(toml_path),
            heads: Some("2".into()),
            ..BenchArgs::default()
        };
        let g = resolve_grid(&args).unwrap();
        assert_eq!(g.seq, vec![256, 1024]);
        assert_eq!(g.batch, vec![2]);
        assert_eq!(g.heads, vec![2]);
        assert_eq!(g.mode, vec![Mode::Forward]);
        assert_eq!(g.causality.len(), 2);
        assert_eq!(g.map, vec![FeatureMap::Relu]);
        assert_eq!(g.problems().len(), 4);

        let json_path = dir.path().join("grid.json");
        std::fs::write(
            &json_path,
            r#"{"n_min": "2^8", "n_max": 2048, "dk": [32, 64]}"#,
        )
        .unwrap();
        let g = resolve_grid(&BenchArgs {
            grid: Some(json_path),
            ..BenchArgs::default()
        })
        .unwrap();
        assert_eq!(g.seq, vec![256, 512, 1024, 2048]);
        assert_eq!(g.problems().len(), 8);
        assert!(g.problems().iter().all(|p| p.shape.dk == p.shape.dv));

        let huge = dir.path().join("huge.toml");
        let list = (1..=60)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        std::fs::write(
            &huge,
            format!("n = [{list}]\nbatch = [{list}]\nheads = [{list}]\n"),
        )
        .unwrap();
        let err = resolve_grid(&BenchArgs {
            grid: Some(huge),
            ..BenchArgs::default()
        })
        .unwrap_err();
        assert!(
            err.to_string().contains("more than 100000 problems"),
            "{err}"
        );

        for (name, text) in [("empty.toml", "# nothing\n"), ("empty.json", "{ }")] {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            let err = resolve_grid(&BenchArgs {
                grid: Some(path),
                ..BenchArgs::default()
            })
            .unwrap_err();
            assert!(err.to_string().contains("sets no field"), "{err}");
        }

        let typo = dir.path().join("typo.toml");
        std::fs::write(&typo, "heads_ = 3\n").unwrap();
        let err = resolve_grid(&BenchArgs {
            grid: Some(typo),
            ..BenchArgs::default()
        })
        .unwrap_err();
        assert!(matches!(err, AttnError::BadFile { .. }), "{err}");
    }
}
