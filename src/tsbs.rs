//! TSBS-style "cpu" sensor data (the Time Series Benchmark Suite's devops
//! case): hosts reporting ten CPU usage fields at a fixed interval. The demo
//! and the benchmarks write exactly the same deterministic data through here.

use crate::cell::RowMutation;
use crate::value::Value;

pub const CPU_FIELDS: [&str; 10] = [
    "usage_user",
    "usage_system",
    "usage_idle",
    "usage_nice",
    "usage_iowait",
    "usage_irq",
    "usage_softirq",
    "usage_steal",
    "usage_guest",
    "usage_guest_nice",
];

/// Width of the host field in [`cpu_row_key`].
pub const HOST_WIDTH: usize = 12;

/// A two-decimal value in [0, 100), deterministic in (host, step, field):
/// sensor-like data with few significant digits.
pub fn cpu_value(host: u64, step: u64, field: usize) -> f64 {
    // The field is spread over the high bits too: `^ field` alone vanished
    // in the shift below and gave every field of a row the same value.
    let x = host.wrapping_mul(6364136223846793005)
        ^ step.wrapping_mul(1442695040888963407)
        ^ (field as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((x >> 33) % 10_000) as f64 / 100.0
}

/// The host field: `host_NNNN` padded with spaces to [`HOST_WIDTH`] bytes, so
/// byte order equals name order.
pub fn host_prefix(host: u64) -> Vec<u8> {
    let mut k = format!("host_{host:04}").into_bytes();
    k.resize(HOST_WIDTH, b' ');
    k
}

/// Tall-layout row key: host field, then the reversed timestamp
/// (`u64::MAX - ts`, big-endian) so one host's points are contiguous and
/// newest first.
pub fn cpu_row_key(host: u64, ts: u64) -> Vec<u8> {
    let mut k = host_prefix(host);
    k.extend_from_slice(&(u64::MAX - ts).to_be_bytes());
    k
}

/// The timestamp back out of a [`cpu_row_key`].
pub fn cpu_row_ts(key: &[u8]) -> Option<u64> {
    let tail: [u8; 8] = key.get(HOST_WIDTH..HOST_WIDTH + 8)?.try_into().ok()?;
    Some(u64::MAX - u64::from_be_bytes(tail))
}

/// One host's row at one step: a cell per field, typed float values.
pub fn cpu_row(family: &str, host: u64, step: u64, ts: u64) -> RowMutation {
    let mut m = RowMutation::new(cpu_row_key(host, ts));
    m.mutations.reserve(CPU_FIELDS.len());
    for (i, f) in CPU_FIELDS.iter().enumerate() {
        m = m.put(
            family,
            *f,
            ts,
            Value::Float(cpu_value(host, step, i)).encode(),
        );
    }
    m
}

/// Epoch ms of step 0 in generated data.
pub const T0_MS: u64 = 1_700_000_000_000;
/// Time between two points of one host in generated data.
pub const INTERVAL_MS: u64 = 10_000;

/// The host tag of generated data.
pub fn host_name(host: u64) -> String {
    format!("host_{host:04}")
}

/// Appends host `host`'s point at `step` as one line of Influx line
/// protocol (measurement `cpu`, millisecond timestamp).
pub fn cpu_line(host: u64, step: u64, out: &mut String) {
    use std::fmt::Write;
    let _ = write!(out, "cpu,host={}", host_name(host));
    for (i, f) in CPU_FIELDS.iter().enumerate() {
        out.push(if i == 0 { ' ' } else { ',' });
        let _ = write!(out, "{f}={}", cpu_value(host, step, i));
    }
    let _ = writeln!(out, " {}", T0_MS + step * INTERVAL_MS);
}

/// The same point as a JSON point (`ts` in ms).
pub fn cpu_json(host: u64, step: u64) -> serde_json::Value {
    let fields: serde_json::Map<String, serde_json::Value> = CPU_FIELDS
        .iter()
        .enumerate()
        .map(|(i, f)| (f.to_string(), serde_json::json!(cpu_value(host, step, i))))
        .collect();
    serde_json::json!({
        "metric": "cpu",
        "tags": {"host": host_name(host)},
        "ts": T0_MS + step * INTERVAL_MS,
        "fields": fields,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_host_then_newest_first_and_decode() {
        let a = cpu_row_key(1, 2_000);
        let b = cpu_row_key(1, 1_000);
        let c = cpu_row_key(10, 5_000);
        assert!(a < b && b < c);
        assert_eq!(cpu_row_ts(&a), Some(2_000));
        assert!((0.0..100.0).contains(&cpu_value(3, 4, 5)));
        assert_eq!(cpu_row("cpu", 1, 2, 3).mutations.len(), 10);
    }
}
