//! Fuzz target: config text as `operator.toml`. See `khai_fuzz` for the checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| khai_fuzz::config(khai_fuzz::Format::Toml, data));
