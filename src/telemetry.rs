//! Prometheus metrics. Events are recorded where they happen through the
//! `metrics` facade (Kafka batches, HTTP requests, WAL syncs); state and the
//! counters the store already keeps (MemStore bytes, files, flushes, WAL
//! and cache counters, RSS) are read when `/metrics` is scraped, so the hot
//! paths pay nothing for them. `metrics-exporter-prometheus` renders the
//! text format. Names follow Prometheus conventions: `halite_` prefix, base
//! units, `_total` counters, `_seconds` / `_bytes` suffixes, and labels of
//! low cardinality (table, topic, partition, shard, route).

use std::time::{Duration, Instant};

use metrics::{counter, gauge};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

use crate::store::Store;

/// Log lines on stderr through `tracing`: human-readable or JSON objects
/// (`[log] format`), filtered by `RUST_LOG` or else `[log] level`.
pub fn init_logging(config: &crate::config::LogConfig) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // A log line that cannot be written is dropped: by default the layer
    // reports the failure with `eprintln!`, which panics on the same
    // closed stderr (`make run | tee` after Ctrl-C killed the service).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .log_internal_errors(false);
    // A second call (the demo runs `serve`) keeps the first subscriber.
    let _ = if config.format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Histogram buckets for durations: 50 µs to 10 s.
const SECONDS_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
];

/// Histogram buckets for WAL group commits, in records per batch.
const RECORDS_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// Histogram buckets for salt buckets a query scans.
const BUCKETS_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0];

/// The process's recorder; one per process.
pub struct Telemetry {
    handle: PrometheusHandle,
    started: Instant,
}

impl Telemetry {
    /// Installs the global recorder (fails if one is installed already).
    pub fn install() -> Result<Telemetry, BuildError> {
        let handle = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)?
            .set_buckets_for_metric(
                Matcher::Full("halite_wal_batch_records".into()),
                RECORDS_BUCKETS,
            )?
            .set_buckets_for_metric(
                Matcher::Full("halite_query_buckets".into()),
                BUCKETS_BUCKETS,
            )?
            // Gauges of regions gone (split, dropped) leave the scrape after
            // a while; live ones are set at every scrape.
            .idle_timeout(MetricKindMask::GAUGE, Some(Duration::from_secs(600)))
            .install_recorder()?;
        describe();
        Ok(Telemetry {
            handle,
            started: Instant::now(),
        })
    }

    /// The text exposition, with the scrape-time values refreshed first.
    pub fn render(&self, store: &Store, ready: bool) -> String {
        self.handle.run_upkeep();
        gauge!("halite_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
        gauge!("halite_uptime_seconds").set(self.started.elapsed().as_secs_f64());
        gauge!("halite_ready").set(if ready { 1.0 } else { 0.0 });
        // What /healthz says: the process answers.
        gauge!("halite_healthy").set(1.0);
        gauge!("halite_disk_full").set(if store.disk_full() { 1.0 } else { 0.0 });
        if let Some(rss) = resident_bytes() {
            gauge!("halite_process_resident_memory_bytes").set(rss as f64);
        }
        record_store(store);
        self.handle.render()
    }
}

/// Refused credentials (docs/security.md) and the scrub's work.
fn describe_security_and_scrub() {
    use metrics::{Unit, describe_counter, describe_gauge};
    describe_counter!(
        "halite_auth_failures_total",
        "Requests refused for their credentials: missing, invalid (unknown, revoked, unreadable) or forbidden (a token without the scope or namespace)."
    );
    describe_counter!(
        "halite_scrub_checked_bytes_total",
        Unit::Bytes,
        "Store file bytes the scrub read again from disk and checked."
    );
    describe_counter!(
        "halite_scrub_checked_files_total",
        "Store files the scrub checked."
    );
    describe_counter!(
        "halite_scrub_passes_total",
        "Passes of the scrub over every live store file."
    );
    describe_gauge!(
        "halite_scrub_damaged_files",
        "Live store files the scrub found damaged (/readyz names them)."
    );
}

/// The metrics of cluster mode (docs/cluster.md), present once a node
/// of a cluster did what they count.
fn describe_cluster() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "halite_cluster_shards_taken_total",
        "Partitions this node took (lease at a new epoch, regions adopted)."
    );
    describe_counter!(
        "halite_cluster_shards_released_total",
        "Partitions this node let go (revoked or fenced)."
    );
    describe_counter!(
        "halite_cluster_fenced_total",
        "Partitions another node took while this one still held them."
    );
    describe_histogram!(
        "halite_cluster_take_seconds",
        Unit::Seconds,
        "Taking a partition: lease, adoption of its regions, downloads."
    );
    describe_gauge!(
        "halite_cluster_partition_epoch",
        "The epoch this node holds a partition at (0: not held)."
    );
    describe_gauge!(
        "halite_cluster_partitions_held",
        "Partitions this node holds."
    );
    describe_counter!(
        "halite_cluster_replay_bytes_total",
        Unit::Bytes,
        "Message bytes replayed after taking partitions, up to where they ended then."
    );
    describe_histogram!(
        "halite_cluster_replay_seconds",
        Unit::Seconds,
        "Replaying a partition taken, up to where it ended then."
    );
    describe_counter!(
        "halite_object_store_requests_total",
        "Object-store requests, by op and outcome (ok, not_found, lost, error)."
    );
    describe_histogram!(
        "halite_object_store_request_seconds",
        Unit::Seconds,
        "Object-store requests, by op, retries included."
    );
    describe_counter!(
        "halite_object_store_uploaded_bytes_total",
        Unit::Bytes,
        "Store file bytes uploaded."
    );
    describe_counter!(
        "halite_object_store_downloaded_bytes_total",
        Unit::Bytes,
        "Store file bytes downloaded."
    );
    describe_histogram!(
        "halite_object_store_upload_seconds",
        Unit::Seconds,
        "Uploading one store file."
    );
    describe_histogram!(
        "halite_object_store_download_seconds",
        Unit::Seconds,
        "Downloading one store file."
    );
    describe_histogram!(
        "halite_manifest_publish_seconds",
        Unit::Seconds,
        "Publishing a region manifest (a conditional write)."
    );
    describe_counter!(
        "halite_file_cache_hits_total",
        "Reads of other nodes' store files the file cache held."
    );
    describe_counter!(
        "halite_file_cache_misses_total",
        "Reads of other nodes' store files the file cache downloaded."
    );
    describe_counter!(
        "halite_file_cache_evictions_total",
        "Files the file cache deleted to stay in its budget."
    );
    describe_gauge!(
        "halite_file_cache_bytes",
        Unit::Bytes,
        "Bytes the file cache holds."
    );
    describe_counter!(
        "halite_kafka_misrouted_points_total",
        "Points that came in a partition not carrying their bucket, sent on to the one that does."
    );
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_gauge!(
        "halite_build_info",
        "Version of the running binary (always 1)."
    );
    describe_gauge!("halite_uptime_seconds", Unit::Seconds, "Time since start.");
    describe_gauge!(
        "halite_ready",
        "1 when /readyz answers ready (WALs healthy, Kafka consumer in its group)."
    );
    describe_gauge!(
        "halite_kafka_assigned_partitions",
        "Partitions assigned to this consumer."
    );
    describe_gauge!(
        "halite_kafka_paused_partitions",
        "Partitions paused because the writers took no batch for a second with the fetch buffer full."
    );
    describe_counter!(
        "halite_kafka_holds_total",
        "Times the consumer stopped taking messages, its fetch buffer full, until a writer took a batch."
    );
    describe_counter!(
        "halite_kafka_fetched_messages_total",
        "Messages librdkafka fetched from the brokers (more than consumed when some were fetched twice)."
    );
    describe_counter!(
        "halite_kafka_fetched_bytes_total",
        Unit::Bytes,
        "Bytes of the messages librdkafka fetched, with framing."
    );
    describe_gauge!("halite_healthy", "1 while the process answers (/healthz).");
    describe_cluster();
    describe_security_and_scrub();
    describe_gauge!(
        "halite_disk_full",
        "1 while writes wait for disk space (a WAL segment or a flush failed with ENOSPC)."
    );
    describe_counter!(
        "halite_flush_failures_total",
        "MemStore flushes that failed (retried; the data stays in the WAL), per table."
    );
    describe_counter!(
        "halite_scan_cells_returned_total",
        "Cells returned by raw scans (pages and streams)."
    );
    describe_gauge!(
        "halite_process_resident_memory_bytes",
        Unit::Bytes,
        "Resident set size of the process."
    );
    describe_counter!(
        "halite_kafka_messages_total",
        "Kafka messages consumed, per topic."
    );
    describe_counter!(
        "halite_kafka_points_total",
        "Points written from Kafka messages, per topic and table."
    );
    describe_counter!(
        "halite_kafka_cells_total",
        "Cells written from Kafka messages, per topic and table."
    );
    describe_counter!(
        "halite_kafka_bad_messages_total",
        "Kafka messages that could not be decoded, per topic and reason \
         (unreadable, bad_point, no_points)."
    );
    describe_counter!(
        "halite_kafka_dead_lettered_total",
        "Bad messages produced to the dead-letter topic, per source topic."
    );
    describe_counter!(
        "halite_kafka_batches_failed_total",
        "Batches that could not be written (their partition's commits stop there)."
    );
    describe_histogram!(
        "halite_kafka_commit_duration_seconds",
        Unit::Seconds,
        "Offset commits, including the WAL sync they may wait for."
    );
    describe_gauge!(
        "halite_kafka_committed_offset",
        "Last committed offset (next to consume) per partition."
    );
    describe_gauge!(
        "halite_kafka_consumer_lag",
        "High watermark minus committed offset, per partition, in messages."
    );
    describe_gauge!(
        "halite_kafka_buffered_bytes",
        Unit::Bytes,
        "Fetched message bytes waiting for a writer."
    );
    describe_counter!(
        "halite_http_requests_total",
        "HTTP requests by route, method and status."
    );
    describe_histogram!(
        "halite_http_request_duration_seconds",
        Unit::Seconds,
        "HTTP request latency by route."
    );
    describe_histogram!(
        "halite_wal_sync_duration_seconds",
        Unit::Seconds,
        "WAL group-commit batches with an fdatasync, submit to completion."
    );
    describe_histogram!(
        "halite_wal_batch_records",
        "Records per WAL group-commit batch."
    );
    describe_counter!(
        "halite_wal_appends_total",
        "WAL records appended, per shard."
    );
    describe_counter!(
        "halite_wal_written_bytes_total",
        Unit::Bytes,
        "WAL bytes written, per shard."
    );
    describe_counter!("halite_wal_syncs_total", "WAL fdatasyncs, per shard.");
    describe_counter!(
        "halite_wal_group_commits_total",
        "Synced WAL batches acknowledged to their writers, per shard."
    );
    describe_counter!(
        "halite_wal_damage_stops_total",
        "Damaged spots in the middle of the WAL that recovery stopped at (wal.recovery = stop_at_damage), per shard."
    );
    describe_gauge!(
        "halite_wal_backend_info",
        "The WAL's I/O backend per shard (io_uring or sync), always 1."
    );
    describe_gauge!(
        "halite_memstore_bytes",
        Unit::Bytes,
        "Bytes in MemStores (active and flushing), per table."
    );
    describe_gauge!("halite_regions", "Regions per table.");
    describe_gauge!("halite_region_store_files", "Store files per region.");
    describe_gauge!(
        "halite_region_store_file_bytes",
        Unit::Bytes,
        "Bytes of live store files per region."
    );
    describe_gauge!(
        "halite_region_memstore_bytes",
        Unit::Bytes,
        "MemStore bytes per region."
    );
    describe_histogram!(
        "halite_query_buckets",
        "Salt buckets a logical query scans (1 when the series fixes the bucket)."
    );
    describe_counter!(
        "halite_query_cells_returned_total",
        "Cells returned by raw logical queries (pages and streams)."
    );
    describe_gauge!("halite_store_files", "Store files per table.");
    describe_gauge!(
        "halite_store_file_bytes",
        Unit::Bytes,
        "Bytes of live store files, per table."
    );
    describe_counter!("halite_flushes_total", "MemStore flushes, per table.");
    describe_counter!(
        "halite_flushed_bytes_total",
        Unit::Bytes,
        "Store file bytes written by flushes, per table."
    );
    describe_histogram!(
        "halite_flush_duration_seconds",
        Unit::Seconds,
        "MemStore flushes, snapshot to manifest."
    );
    describe_counter!(
        "halite_ingested_bytes_total",
        Unit::Bytes,
        "Key and value bytes of the cells written, per table (since its regions opened)."
    );
    describe_gauge!(
        "halite_write_amplification",
        "Store file bytes written by flushes and compactions per byte ingested, per table, since its regions opened."
    );
    describe_counter!("halite_compactions_total", "Compactions, per table.");
    describe_histogram!(
        "halite_compaction_duration_seconds",
        Unit::Seconds,
        "Compactions of one family of one region."
    );
    describe_counter!("halite_region_splits_total", "Region splits, per table.");
    describe_histogram!(
        "halite_write_stall_duration_seconds",
        Unit::Seconds,
        "How long writes waited for a flush (MemStore over its blocking size)."
    );
    describe_counter!(
        "halite_compaction_read_bytes_total",
        Unit::Bytes,
        "Store file bytes compactions read, per table."
    );
    describe_counter!(
        "halite_compaction_blocks_total",
        "Data blocks minor compactions wrote, per table: `how` copied (as \
         their file held them; no other input's key fell inside) or merged \
         (decoded and merged entry by entry)."
    );
    describe_counter!(
        "halite_compaction_written_bytes_total",
        Unit::Bytes,
        "Store file bytes compactions wrote, per table."
    );
    describe_counter!(
        "halite_write_stalls_total",
        "Writes that waited for a flush (MemStore over its blocking size), per table."
    );

    describe_counter!(
        "halite_rows_written_total",
        "Rows handed to a table's regions to write (HTTP and Kafka; WAL replay not counted)."
    );
    describe_counter!(
        "halite_bucket_rows_written_total",
        "Rows written per salt bucket of a table: shows hot-spotting."
    );
    describe_gauge!(
        "halite_bucket_store_file_bytes",
        Unit::Bytes,
        "Store file bytes per salt bucket (regions within one bucket)."
    );
    describe_gauge!(
        "halite_block_cache_bytes",
        Unit::Bytes,
        "Bytes of blocks in the block cache."
    );
    describe_counter!("halite_block_cache_hits_total", "Block cache hits.");
    describe_counter!("halite_block_cache_misses_total", "Block cache misses.");
    describe_counter!(
        "halite_block_cache_evictions_total",
        "Block cache evictions."
    );
}

/// The store's state and its own counters, as metrics.
fn record_store(store: &Store) {
    use std::sync::atomic::Ordering::Relaxed;
    for table in store.open_tables() {
        let name = table.desc.name.to_string();
        let (mut memstore, mut files, mut file_bytes) = (0usize, 0usize, 0u64);
        let (mut ingested, mut flushes, mut flushed) = (0u64, 0u64, 0u64);
        let (mut compactions, mut read, mut written) = (0u64, 0u64, 0u64);
        let (mut stalls, mut flush_failures) = (0u64, 0u64);
        let (mut blocks_copied, mut blocks_merged) = (0u64, 0u64);
        for r in table.regions() {
            let region_files = r.file_counts().values().sum::<usize>();
            let region_bytes = r.store_bytes();
            let region = [("table", name.clone()), ("region", r.id().to_string())];
            gauge!("halite_region_store_files", &region).set(region_files as f64);
            gauge!("halite_region_store_file_bytes", &region).set(region_bytes as f64);
            gauge!("halite_region_memstore_bytes", &region).set(r.memstore_bytes() as f64);
            memstore += r.memstore_bytes();
            files += region_files;
            file_bytes += region_bytes;
            let s = r.stats();
            ingested += s.ingested_bytes.load(Relaxed);
            flushes += s.flushes.load(Relaxed);
            flushed += s.flushed_bytes.load(Relaxed);
            compactions += s.compactions.load(Relaxed);
            read += s.compacted_bytes_in.load(Relaxed);
            written += s.compacted_bytes_out.load(Relaxed);
            blocks_copied += s.compaction_blocks_copied.load(Relaxed);
            blocks_merged += s.compaction_blocks_merged.load(Relaxed);
            stalls += s.writer_stalls.load(Relaxed);
            flush_failures += s.flush_failures.load(Relaxed);
        }
        if let Some(salt) = &table.desc.key.salt {
            record_bucket_bytes(&name, salt, table.regions());
        }
        let t = || [("table", name.clone())];
        gauge!("halite_memstore_bytes", &t()).set(memstore as f64);
        gauge!("halite_regions", &t()).set(table.regions().len() as f64);
        gauge!("halite_store_files", &t()).set(files as f64);
        gauge!("halite_store_file_bytes", &t()).set(file_bytes as f64);
        counter!("halite_ingested_bytes_total", &t()).absolute(ingested);
        if ingested > 0 {
            gauge!("halite_write_amplification", &t())
                .set((flushed + written) as f64 / ingested as f64);
        }
        counter!("halite_flushes_total", &t()).absolute(flushes);
        counter!("halite_flushed_bytes_total", &t()).absolute(flushed);
        counter!("halite_compactions_total", &t()).absolute(compactions);
        counter!("halite_compaction_read_bytes_total", &t()).absolute(read);
        counter!("halite_compaction_written_bytes_total", &t()).absolute(written);
        for (how, n) in [("copied", blocks_copied), ("merged", blocks_merged)] {
            counter!("halite_compaction_blocks_total", "table" => name.clone(), "how" => how)
                .absolute(n);
        }
        counter!("halite_write_stalls_total", &t()).absolute(stalls);
        counter!("halite_flush_failures_total", &t()).absolute(flush_failures);
    }
    for (shard, wal) in store.wals().iter().enumerate() {
        let shard = || [("shard", shard.to_string())];
        let s = wal.stats();
        counter!("halite_wal_appends_total", &shard()).absolute(s.appends.load(Relaxed));
        counter!("halite_wal_written_bytes_total", &shard()).absolute(s.bytes.load(Relaxed));
        counter!("halite_wal_syncs_total", &shard()).absolute(s.syncs.get());
        counter!("halite_wal_group_commits_total", &shard())
            .absolute(s.group_commits.load(Relaxed));
        counter!("halite_wal_damage_stops_total", &shard()).absolute(s.damage_stops.load(Relaxed));
        gauge!(
            "halite_wal_backend_info",
            "shard" => shard()[0].1.clone(),
            "backend" => wal.backend().as_str()
        )
        .set(1.0);
    }
    let cache = store.block_cache();
    let c = cache.stats();
    gauge!("halite_block_cache_bytes").set(cache.bytes() as f64);
    counter!("halite_block_cache_hits_total").absolute(c.hits.load(Relaxed));
    counter!("halite_block_cache_misses_total").absolute(c.misses.load(Relaxed));
    counter!("halite_block_cache_evictions_total").absolute(c.evictions.load(Relaxed));
}

/// Store file bytes per salt bucket, from the regions that lie within one
/// bucket (pre-split salted tables start with a region per bucket; a
/// region spanning several buckets is left out).
fn record_bucket_bytes(
    table: &str,
    salt: &crate::key::Salt,
    regions: &[crate::table::RegionHandle],
) {
    let w = salt.width;
    let prefix = |key: &[u8]| -> Option<u64> {
        let b = key.get(..w)?;
        Some(b.iter().fold(0u64, |acc, x| acc << 8 | u64::from(*x)))
    };
    let mut bytes = std::collections::BTreeMap::new();
    for r in regions {
        let (start, end) = r.row_range();
        let first = if start.is_empty() {
            Some(0)
        } else {
            prefix(start)
        };
        let past = if end.is_empty() {
            Some(u64::from(salt.max_buckets()))
        } else if end.len() == w {
            prefix(end)
        } else {
            prefix(end).map(|b| b + 1)
        };
        if let (Some(first), Some(past)) = (first, past)
            && past == first + 1
        {
            *bytes.entry(first).or_insert(0u64) += r.store_bytes();
        }
    }
    for (bucket, b) in bytes {
        gauge!(
            "halite_bucket_store_file_bytes",
            "table" => table.to_string(),
            "bucket" => bucket.to_string()
        )
        .set(b as f64);
    }
}

/// VmRSS of this process (Linux), in bytes.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kb * 1024)
}
