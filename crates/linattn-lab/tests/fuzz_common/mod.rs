//! The committed fuzz corpora (`fuzz/corpus/<target>/`), shared by the replay and the
//! mutation tests.

use std::path::{Path, PathBuf};

/// Every file of `target`'s corpus, sorted by name.
pub fn corpus_files(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}
