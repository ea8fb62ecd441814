//! Replays the committed fuzz corpora (`fuzz/corpus/<target>/`) through the same entry
//! points the libFuzzer targets call, on the stable toolchain: every input the fuzzer kept
//! (including each crash it once found, now fixed) must still parse or be refused without a
//! panic. With `fuzz_mutation.rs` (a seeded mutation run over these corpora) this is CI's
//! fuzz step: a real fuzz build compiles the whole dependency tree with sanitizers (about
//! 30 minutes cold on 2 cores), so coverage-guided fuzzing is `just fuzz` /
//! `just fuzz-smoke`, run by hand.

mod fuzz_common;

use fuzz_common::corpus_files;

fn replay(target: &str, entry: fn(&[u8])) {
    let files = corpus_files(target);
    assert!(
        files.len() > 10,
        "{target}: corpus has {} files",
        files.len()
    );
    let mut panicked = Vec::new();
    for path in &files {
        let bytes = std::fs::read(path).unwrap();
        if std::panic::catch_unwind(|| entry(&bytes)).is_err() {
            panicked.push(path.display().to_string());
        }
    }
    assert!(
        panicked.is_empty(),
        "{target}: {} of {} corpus inputs panicked: {panicked:?}",
        panicked.len(),
        files.len()
    );
}

#[test]
fn npy_reader_corpus_replays_without_a_panic() {
    replay("npy_reader", linattn_lab::fuzz_entry::npy_bytes);
}

#[test]
fn grid_file_corpus_replays_without_a_panic() {
    replay("grid_file", linattn_lab::fuzz_entry::grid_text);
}
