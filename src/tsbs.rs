//! TSBS-style "cpu" sensor data (the Time Series Benchmark Suite's devops
//! case): hosts reporting ten CPU usage fields at a fixed interval. The demo
//! and the benchmarks write exactly the same deterministic data through here.

use crate::cell::RowMutation;
use crate::value::Value;

pub mod devops;

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

/// A two-decimal value in [0, 100), deterministic in (host, step, field),
/// that moves like TSBS's cpu fields: a random walk whose steps are about
/// N(0, 1), kept in range (TSBS clamps, this reflects). Consecutive values
/// of a series are close, as a real sensor's are, so the figures of a
/// time-series encoding mean something.
///
/// The walk is a pure function of the step (no state to carry from one
/// call to the next, so any point can be asked for in any order): a
/// Brownian bridge built by midpoint displacement over windows of 2^16
/// steps. Each window starts and ends at values drawn from its index; the
/// value at a midpoint is the mean of its interval's ends plus a normal
/// step scaled to the interval, drawn from its position. Sixteen halvings
/// reach any step.
pub fn cpu_value(host: u64, step: u64, field: usize) -> f64 {
    const LEVELS: u32 = 16;
    let series = mix(host.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (field as u64 + 1));
    let window = step >> LEVELS;
    let at = step & ((1 << LEVELS) - 1);
    // The walk is unbounded; reflecting it into [0, 100] keeps its steps.
    let end_value = |w: u64| uniform(mix(series ^ mix(w.wrapping_add(0xA5A5)))) * 100.0;
    let (mut a, mut b) = (0u64, 1u64 << LEVELS);
    let (mut va, mut vb) = (end_value(window), end_value(window + 1));
    while at != a {
        let mid = (a + b) / 2;
        let spread = ((b - a) as f64 / 4.0).sqrt();
        let draw = mix(series ^ mix(window << 20 | mid));
        let vm = (va + vb) / 2.0 + spread * normal(draw);
        if at < mid {
            (b, vb) = (mid, vm);
        } else {
            (a, va) = (mid, vm);
        }
    }
    let folded = va.rem_euclid(200.0);
    let reflected = if folded > 100.0 {
        200.0 - folded
    } else {
        folded
    };
    // Two decimals, and strictly under 100.
    ((reflected * 100.0).round().min(9_999.0)) / 100.0
}

/// splitmix64's finaliser: a well-mixed 64-bit hash of `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A value in [0, 1) from the high bits of `x`.
fn uniform(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// About N(0, 1): four uniforms (16 bits each) summed (Irwin-Hall),
/// centred and scaled to unit variance.
fn normal(x: u64) -> f64 {
    let sum: f64 = (0..4)
        .map(|i| ((x >> (16 * i)) & 0xFFFF) as f64 / 65_536.0)
        .sum();
    (sum - 2.0) * 3f64.sqrt()
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
    cpu_line_at(host, step, T0_MS + step * INTERVAL_MS, out);
}

/// Like [`cpu_line`], at time `ts_ms`.
pub fn cpu_line_at(host: u64, step: u64, ts_ms: u64, out: &mut String) {
    use std::fmt::Write;
    let _ = write!(out, "cpu,host={}", host_name(host));
    cpu_fields_at(host, step, ts_ms, out);
}

/// The region tag of generated data with open tag sets (four regions).
pub fn region_of(host: u64) -> &'static str {
    ["eu-west", "eu-central", "us-east", "ap-south"][(host % 4) as usize]
}

/// Like [`cpu_line`], with a `region` tag too and the time `ts_ms`: a
/// measurement of two tags, for tables of open tag sets.
pub fn cpu_line_tagged(host: u64, step: u64, ts_ms: u64, out: &mut String) {
    use std::fmt::Write;
    let _ = write!(
        out,
        "cpu,host={},region={}",
        host_name(host),
        region_of(host)
    );
    cpu_fields_at(host, step, ts_ms, out);
}

fn cpu_fields_at(host: u64, step: u64, ts_ms: u64, out: &mut String) {
    use std::fmt::Write;
    for (i, f) in CPU_FIELDS.iter().enumerate() {
        out.push(if i == 0 { ' ' } else { ',' });
        let _ = write!(out, "{f}={}", cpu_value(host, step, i));
    }
    let _ = writeln!(out, " {ts_ms}");
}

/// The same point as a JSON point (`ts` in ms).
pub fn cpu_json(host: u64, step: u64) -> serde_json::Value {
    cpu_json_at(host, step, T0_MS + step * INTERVAL_MS)
}

/// Like [`cpu_json`], at time `ts_ms`.
pub fn cpu_json_at(host: u64, step: u64, ts_ms: u64) -> serde_json::Value {
    let fields: serde_json::Map<String, serde_json::Value> = CPU_FIELDS
        .iter()
        .enumerate()
        .map(|(i, f)| (f.to_string(), serde_json::json!(cpu_value(host, step, i))))
        .collect();
    serde_json::json!({
        "metric": "cpu",
        "tags": {"host": host_name(host)},
        "ts": ts_ms,
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

    #[test]
    fn values_walk_in_range_with_steps_of_about_one() {
        let mut sum_sq = 0.0;
        let mut n = 0.0;
        for host in 0..4 {
            for field in 0..10 {
                let mut prev = cpu_value(host, 0, field);
                for step in 1..5_000 {
                    let v = cpu_value(host, step, field);
                    assert!((0.0..100.0).contains(&v), "{v}");
                    assert_eq!((v * 100.0).round() / 100.0, v, "two decimals");
                    sum_sq += (v - prev) * (v - prev);
                    n += 1.0;
                    prev = v;
                }
            }
        }
        let step_sd = (sum_sq / n).sqrt();
        assert!((0.8..1.2).contains(&step_sd), "step sd {step_sd}");
        // Fields and hosts walk apart.
        assert_ne!(cpu_value(1, 7, 0), cpu_value(1, 7, 1));
        assert_ne!(cpu_value(1, 7, 0), cpu_value(2, 7, 0));
    }
}
