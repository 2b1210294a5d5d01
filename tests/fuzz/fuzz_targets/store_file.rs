//! Fuzz target: `halite::fuzz::store_file`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| halite::fuzz::store_file(data));
