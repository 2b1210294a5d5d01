//! Fuzz target: `halite::fuzz::wal_segment`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| halite::fuzz::wal_segment(data));
