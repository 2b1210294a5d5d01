//! `make bench`: halite beside the disk and its peers, on one machine in
//! one go, written to `bench/RESULTS.md`.
//!
//! 1. disk limit: fio appending with fdatasync against the WAL, at the same
//!    batch sizes (`suite/disk.rs`);
//! 2. storage engine: the region store against RocksDB's db_bench
//!    (`suite/engine.rs`);
//! 3. service ingest: halite (its own HTTP API, its InfluxDB 1.x protocol
//!    into open tag sets, and Kafka), InfluxDB 1.x and
//!    VictoriaMetrics over HTTP line protocol, same bodies and connections;
//!    rows/s, server CPU, peak RSS, syncs, bytes on disk (`suite/service.rs`,
//!    `kafka_ingest.rs`);
//! 4. queries q1/q2/q3 on each service, p50/p99, answers cross-checked
//!    (halite also answering InfluxDB's own InfluxQL statements).
//!
//! Plus what each storage layer saves (`suite/layers.rs`). All on the same
//! TSBS-style data: 100 hosts, 10 cpu fields, 10 s interval, deterministic
//! (`halite::tsbs`); `HALITE_BENCH_ROWS` rows (default 1,000,000).
//! Peers come from Debian (`make bench` installs them) and run on loopback
//! with data under a temporary directory (`HALITE_BENCH_DIR` picks where),
//! and are stopped at the end of their section.

#[path = "suite/disk.rs"]
mod disk;
#[path = "suite/engine.rs"]
mod engine;
#[path = "../tests/common/http.rs"]
mod http;
#[path = "../tests/common/kafka.rs"]
mod kafka;
mod kafka_ingest;
#[path = "suite/layers.rs"]
mod layers;
#[path = "suite/report.rs"]
mod report;
#[path = "../tests/common/s3.rs"]
mod s3;
#[path = "suite/service.rs"]
mod service;
mod support;

use std::time::Instant;

use report::Report;
use service::Kind;

fn main() {
    let rows: u64 = std::env::var("HALITE_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let root = std::env::var_os("HALITE_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let temp = tempfile::tempdir_in(&root).expect("bench dir");
    let dir = temp.path();
    let started = Instant::now();
    let mut report = Report::new(rows, dir);
    println!("bench suite: {rows} rows, data under {}", dir.display());
    // For working on one comparison: HALITE_BENCH_ONLY=halite,victoria runs
    // just those services' ingest and queries, prints them and writes no
    // RESULTS.md.
    if let Ok(only) = std::env::var("HALITE_BENCH_ONLY") {
        let bodies = service::bodies(rows);
        let window = service::Window::new(rows);
        let mut servers = Vec::new();
        for kind in [
            Kind::Halite,
            Kind::HaliteInflux,
            Kind::Influx,
            Kind::Victoria,
        ] {
            if !only
                .split(',')
                .any(|k| kind.name().eq_ignore_ascii_case(k.trim()))
            {
                continue;
            }
            let (mut server, ingest) = service::ingest_measured(kind, dir, &bodies, rows);
            print_ingest(kind, &ingest);
            server.restart_untraced();
            server.settle();
            server.halt();
            servers.push(server);
        }
        // Queries as in the whole suite: the systems up together, in turns.
        for server in &mut servers {
            server.restart_untraced();
        }
        let figures = service::queries(&servers.iter().collect::<Vec<_>>(), &window);
        for (server, q) in servers.into_iter().zip(figures) {
            print_queries(server.kind, &q);
            server.stop();
        }
        return;
    }

    // 1. Disk limit.
    let disk_rows = disk::run(dir, 3);
    report
        .commands
        .push(disk::fio_command(dir, 65536, 3).join(" "));
    report.disk(&disk_rows);

    // 2. Storage engine, entry for entry.
    let entries = 2_000_000;
    let rocks = engine::rocksdb(dir, entries);
    let ours = engine::halite(dir, entries);
    println!(
        "engine fillseq halite={:.0} rocksdb={:.0} entries/s",
        ours.fillseq, rocks.figures.fillseq
    );
    report.commands.extend(rocks.commands.iter().cloned());
    report.engine(entries, &rocks.figures, &ours);

    // 3. Services: ingest, settle, measure; one at a time.
    let bodies = service::bodies(rows);
    let window = service::Window::new(rows);
    let mut servers = Vec::new();
    let mut measured = Vec::new();
    for kind in [
        Kind::Halite,
        Kind::HaliteInflux,
        Kind::Influx,
        Kind::Victoria,
    ] {
        let (mut server, ingest) = service::ingest_measured(kind, dir, &bodies, rows);
        report.commands.push(server.command());
        print_ingest(kind, &ingest);
        server.restart_untraced();
        let settle = Instant::now();
        server.settle();
        let (data, wal) = server.disk();
        println!(
            "disk {} data_mib={:.1} wal_mib={:.1} (settled in {:.0} s)",
            kind.name(),
            data as f64 / 1048576.0,
            wal as f64 / 1048576.0,
            settle.elapsed().as_secs_f64()
        );
        // Stopped while the next system ingests, which runs alone.
        server.halt();
        servers.push(server);
        measured.push((kind, ingest, data, wal));
    }
    // 4. Queries, the systems up together and taking turns (see
    // `service::queries`).
    for server in &mut servers {
        server.restart_untraced();
    }
    let figures = service::queries(&servers.iter().collect::<Vec<_>>(), &window);
    for server in servers {
        server.stop();
    }
    let mut services = Vec::new();
    for ((kind, ingest, data_bytes, wal_bytes), queries) in measured.into_iter().zip(figures) {
        print_queries(kind, &queries);
        report.commands.extend(queries.commands.iter().cloned());
        services.push(report::ServiceRun {
            kind,
            ingest,
            data_bytes,
            wal_bytes,
            queries,
        });
    }
    // Every system holds the same data: q3's answers must agree.
    for s in &services[1..] {
        assert_eq!(
            s.queries.q3_answer,
            services[0].queries.q3_answer,
            "{} and halite disagree on q3",
            s.kind.name()
        );
    }
    drop(bodies);

    // halite fed by Kafka instead of HTTP.
    let kafka = kafka_ingest::run(rows, &[]);
    println!(
        "ingest halite-kafka rows_per_s={:.0} consume_only={:.0}",
        kafka.rows_per_s, kafka.consume_only_rows_per_s
    );
    report.services(rows, &services, &kafka);

    // What each layer of the store file saves.
    let layers = layers::run(dir, service::HOSTS, 1000);
    report.layers(&layers);

    report.finish(started.elapsed());
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/RESULTS.md");
    std::fs::write(&path, report.render()).expect("write RESULTS.md");
    println!("\n{}", report.summary());
    println!("written: {}", path.display());
}

fn print_ingest(kind: Kind, ingest: &service::IngestFigures) {
    println!(
        "ingest {} rows_per_s={:.0} traced_rows_per_s={:.0} server_cpu_us_per_row={:.2} peak_rss_mib={:.0}",
        kind.name(),
        ingest.rows_per_s,
        ingest.traced_rows_per_s,
        ingest.server_cpu_us_per_row,
        ingest.peak_rss_mib
    );
}

fn print_queries(kind: Kind, q: &service::QueryFigures) {
    println!(
        "query {} q1_p50_us={:.0} q2_p50_us={:.0} q3_p50_us={:.0}",
        kind.name(),
        q.q1.0,
        q.q2.0,
        q.q3.0
    );
}
