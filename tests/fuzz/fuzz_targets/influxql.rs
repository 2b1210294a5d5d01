//! Fuzz target: `halite::fuzz::influxql`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| halite::fuzz::influxql(data));
