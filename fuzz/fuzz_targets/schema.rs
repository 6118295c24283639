//! Fuzz target: a config's compact schema → CRD manifest, and defaulting an object from it. See `khai_fuzz` for the checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| khai_fuzz::schema(data));
