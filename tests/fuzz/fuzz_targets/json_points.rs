//! Fuzz target: `halite::fuzz::json_points`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| halite::fuzz::json_points(data));
