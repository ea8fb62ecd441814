//! The grid-file parser of `linattn bench --grid FILE` (TOML and JSON) on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| linattn_lab::fuzz_entry::grid_text(data));
