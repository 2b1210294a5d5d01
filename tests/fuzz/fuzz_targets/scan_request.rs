//! Fuzz target: `halite::fuzz::scan_request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| halite::fuzz::scan_request(data));
