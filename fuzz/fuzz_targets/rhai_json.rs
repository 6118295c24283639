//! Fuzz target: JSON values through Rhai and back. See `khai_fuzz` for the checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| khai_fuzz::rhai_json(data));
