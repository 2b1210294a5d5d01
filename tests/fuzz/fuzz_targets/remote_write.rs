//! Fuzz target: `halite::fuzz::remote_write`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| halite::fuzz::remote_write(data));
