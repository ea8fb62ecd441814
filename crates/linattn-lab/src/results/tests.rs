//! The results layer's fixtures (a sample cell and file, also used by `compare` and `report`
//! tests) and the tests of a file's round trip through JSON and disk.

use super::cell::{Cell, CellShape, CellStatus, Mode, PeakSource};
use super::host::probe_environment;
use super::output::write_json_atomic;
use super::schema::{CopyBandwidth, GemmRateRecord, GridRecord, ResultsFile, SCHEMA_VERSION};
use linattn_core::{AttnError, Causality, DeviceKind, Precision};
use serde::Serialize;
use std::fs;
use std::path::Path;

pub(crate) fn sample_cell(backend: &str, seq: usize, median: f64) -> Cell {
    let mut c = Cell::empty(
        backend.into(),
        DeviceKind::Cpu,
        Precision::F32,
        "linear".into(),
        "recurrent".into(),
        Mode::Forward,
        CellShape {
            batch: 1,
            heads: 2,
            seq,
            dk: 16,
            dv: 16,
        },
        Causality::Causal,
        "elu+1".into(),
        linattn_core::DEFAULT_EPS,
        1.0,
    );
    c.status = CellStatus::Ok;
    c.samples_s = vec![median * 0.99, median, median * 1.01];
    c.median_s = Some(median);
    c.rel_stdev = Some(0.01);
    c.peak_bytes = Some(4096);
    c.peak_bytes_source = Some(PeakSource::CountingAllocator);
    c
}

fn sample_file() -> ResultsFile {
    let mut oom = sample_cell("cpu/softmax/f32", 8192, 0.0);
    oom.status = CellStatus::Oom;
    oom.message = Some("out of memory on host".into());
    oom.median_s = None;
    oom.samples_s.clear();
    ResultsFile {
        schema_version: SCHEMA_VERSION,
        environment: probe_environment(None),
        grid: GridRecord {
            seq: vec![256, 512],
            mode: vec![Mode::Forward, Mode::ForwardBackward],
            causality: vec![Causality::Causal],
            ..GridRecord::default()
        },
        copy_bandwidth: vec![CopyBandwidth {
            device: DeviceKind::Cpu,
            bytes: 1 << 20,
            samples_gbps: vec![10.0, 11.0],
            median_gbps: 10.5,
        }],
        gemm_rate: Some(GemmRateRecord {
            shape: 1024,
            samples_gflops: vec![60.0, 61.5, 59.0],
            median_gflops: 60.0,
        }),
        sweep: None,
        cells: vec![sample_cell("cpu/recurrent/f32", 256, 1e-3), oom],
        profiles: Vec::new(),
    }
}

#[test]
fn json_round_trip_is_exact() {
    let file = sample_file();
    let text = serde_json::to_string_pretty(&file).unwrap();
    let back: ResultsFile = serde_json::from_str(&text).unwrap();
    assert_eq!(back, file);
    // Field spellings the schema documents.
    assert!(text.contains("\"forward+backward\""));
    assert!(text.contains("\"status\": \"oom\""));
    assert!(text.contains("\"peak_bytes_source\": \"counting-allocator\""));
    assert!(text.contains("\"causality\": \"causal\""));
}

#[test]
fn load_rejects_other_schema_versions_and_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.json");
    let mut file = sample_file();
    file.schema_version = SCHEMA_VERSION + 1;
    write_json_atomic(&path, &file).unwrap();
    assert!(matches!(
        ResultsFile::load(&path),
        Err(AttnError::BadFile { .. })
    ));
    fs::write(&path, "{\"cells\": [").unwrap();
    assert!(matches!(
        ResultsFile::load(&path),
        Err(AttnError::BadFile { .. })
    ));
    let missing = dir.path().join("absent.json");
    assert!(matches!(
        ResultsFile::load(&missing),
        Err(AttnError::BadFile { .. })
    ));
}

#[test]
fn version_one_files_still_load_without_profiles() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.json");
    let mut file = sample_file();
    file.schema_version = 1;
    write_json_atomic(&path, &file).unwrap();
    let back = ResultsFile::load(&path).unwrap();
    assert_eq!((back.schema_version, back.profiles.len()), (1, 0));
    assert!(!fs::read_to_string(&path).unwrap().contains("profiles"));
}

struct FailsToSerialize;
impl Serialize for FailsToSerialize {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("refused on purpose"))
    }
}

fn dir_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn atomic_write_keeps_old_content_when_serialization_fails() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("results.json");
    write_json_atomic(&path, &sample_file()).unwrap();
    let before = fs::read_to_string(&path).unwrap();
    assert!(write_json_atomic(&path, &FailsToSerialize).is_err());
    assert_eq!(fs::read_to_string(&path).unwrap(), before);
    assert_eq!(dir_entries(dir.path()), vec!["results.json".to_string()]);
    // The survivor is a whole, loadable file.
    assert_eq!(ResultsFile::load(&path).unwrap().cells.len(), 2);
}

#[test]
fn atomic_write_leaves_no_temp_file_when_rename_fails() {
    let dir = tempfile::tempdir().unwrap();
    // A directory in the target's place: the temp file is written, the rename fails.
    let target = dir.path().join("taken");
    fs::create_dir(&target).unwrap();
    fs::write(target.join("keep"), "x").unwrap();
    assert!(write_json_atomic(&target, &sample_file()).is_err());
    assert_eq!(dir_entries(dir.path()), vec!["taken".to_string()]);
    assert_eq!(fs::read_to_string(target.join("keep")).unwrap(), "x");
}

#[test]
fn atomic_write_replaces_whole_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.json");
    fs::write(&path, "x".repeat(100_000)).unwrap();
    let file = sample_file();
    write_json_atomic(&path, &file).unwrap();
    assert_eq!(ResultsFile::load(&path).unwrap(), file);
    assert_eq!(dir_entries(dir.path()), vec!["r.json".to_string()]);
}
