//! Fuzz target: ConversionReview bodies, as the webhook server receives them. See `khai_fuzz` for the checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| khai_fuzz::conversion(data));
