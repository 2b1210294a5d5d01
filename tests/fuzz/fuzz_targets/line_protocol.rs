//! Fuzz target: `halite::fuzz::line_protocol`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| halite::fuzz::line_protocol(data));
