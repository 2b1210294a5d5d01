//! Fuzz target: `halite::fuzz::key_codec`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| halite::fuzz::key_codec(data));
