//! The .npy reader of `linattn attend` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| linattn_lab::fuzz_entry::npy_bytes(data));
