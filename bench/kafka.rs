//! Kafka ingestion benchmark (`make bench-kafka`), against a real broker.
//!
//! Starts Tansu on a loopback port, pre-loads 2,000,000 TSBS cpu rows
//! (line protocol, one row per message, keyed by host; HALITE_BENCH_ROWS
//! says otherwise) into an 8-partition topic with `halite produce`, then
//! measures in the same run:
//!
//! a. a bare rdkafka consumer that reads every message and drops it
//!    (partitions assigned directly, so no group join is timed);
//! b. `halite serve` consuming the topic into the SYNC_WAL table of
//!    `configs/halite.toml`, timed from its first consumed message to the
//!    moment every point is durable (the pipeline's own counters, polled
//!    every 10 ms), and on to the commit of the last offset.
//!
//! It prints the two lines, then the server's CPU per row.
//! `HALITE_BENCH_SET` adds `--set` overrides to the server, space-separated.

#[path = "../tests/common/http.rs"]
mod http;
#[path = "../tests/common/kafka.rs"]
mod kafka;
mod kafka_ingest;
#[path = "../tests/common/s3.rs"]
mod s3;
mod support;

fn main() {
    let rows: u64 = std::env::var("HALITE_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    // HALITE_BENCH_SET="kafka.writers=2 kafka.batch_messages=2000" tries settings.
    let extra_settings: Vec<String> = std::env::var("HALITE_BENCH_SET")
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect();
    let f = kafka_ingest::run(rows, &extra_settings);
    println!(
        "kafka bench: {rows} TSBS rows (10 fields, line protocol, one row per message) \
         in {} partitions, pre-loaded in {:.1} s",
        kafka_ingest::PARTITIONS,
        f.preload_secs
    );
    println!(
        "kafka_consume_only rows_per_s={:.0}",
        f.consume_only_rows_per_s
    );
    println!(
        "kafka_ingest rows_per_s={:.0} cells_per_s={:.0} ratio_to_consume_only={:.2}",
        f.rows_per_s,
        f.rows_per_s * 10.0,
        f.rows_per_s / f.consume_only_rows_per_s
    );
    println!(
        "kafka_ingest durable_s={:.2} all_committed_s={:.2} server_cpu_us_per_row={:.2} \
         pauses={} commits={} (server exit: {})",
        f.durable_secs, f.committed_secs, f.server_cpu_us_per_row, f.pauses, f.commits, f.exit
    );
    let per_thread: Vec<String> = f
        .per_thread
        .iter()
        .map(|(name, us)| format!("{name}={us:.2}"))
        .collect();
    println!(
        "kafka_ingest server_cpu_us_per_row_by_thread {}",
        per_thread.join(" ")
    );
}
