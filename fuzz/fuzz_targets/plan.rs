//! Fuzz target: a script's answer → reconcile plan. See `khai_fuzz` for the checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| khai_fuzz::plan(data));
