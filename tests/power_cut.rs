//! Power cuts. A real workload runs against the service while it records
//! every change it makes to its data directory (`HALITE_POWER_TRACE`,
//! `src/fault/power.rs`): HTTP writes from two clients, Kafka ingestion of
//! a topic, flushes, compactions and region splits from small MemStores
//! and regions, WAL segment turnover, a table created, written and dropped.
//! Each acknowledgement (an HTTP answer, a Kafka offset the group
//! committed) is noted with how far the trace had got when the test saw it.
//!
//! Then, in this process, the trace is replayed (`fault::power::replay`) to
//! 1,000 random points, and at each a disk a power cut there could leave
//! is written out: unsynced writes keep a random, possibly torn, prefix,
//! and unsynced directory changes (creations, renames, links, removals)
//! are each kept or lost. The store recovers from it, and then:
//! - it opens (recovery does not fail);
//! - every acknowledged write and every message below a committed offset
//!   is there, with its values;
//! - every row there is one that was sent, whole (no row's cells half
//!   there), with its values;
//! - after a close, `halite verify` finds nothing wrong.
//!
//! `HALITE_POWER_CUTS` sets the number of cuts (default 1,000),
//! `HALITE_POWER_SEED` repeats a run's choices.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::http::{create_table, request};
use common::kafka::{Load, group_committed, read_topic};
use common::metric_sum;
use common::rng::Rng;
use common::scenario::Scenario;
use halite::catalog::TableName;
use halite::clock::SystemClock;
use halite::fault::power::replay::{CutShape, Replay};
use halite::fault::power::{Record, TRACE_MAGIC};
use halite::ingest::line_protocol::Precision;
use halite::ingest::{Format, PointEncoder};
use halite::region::read::Scan;
use halite::store::Store;
use serde_json::json;

const PARTITIONS: i32 = 2;
const KAFKA_POINTS: u64 = 12_000;
const PER_MESSAGE: u64 = 10;
const HTTP_WRITERS: u64 = 2;
const ROWS_PER_BATCH: u64 = 20;

/// Row key → the values of its cells, sorted: what a whole row holds.
type Rows = HashMap<Vec<u8>, Vec<Vec<u8>>>;

fn trace_len(trace: &Path) -> u64 {
    std::fs::metadata(trace).map_or(0, |m| m.len())
}

fn table_spec(name: &str) -> serde_json::Value {
    json!({
        "name": name,
        "families": [{"name": "f", "compression": "SNAPPY"}],
        "key": {
            "fields": [
                {"name": "metric", "type": "string", "width": 8},
                {"name": "host", "type": "string", "width": 8},
                {"name": "ts", "type": "reversed_timestamp"},
            ],
            "salt": {"buckets": 4},
        },
    })
}

fn batch_body(writer: u64, batch: u64) -> Vec<u8> {
    let points: Vec<_> = (0..ROWS_PER_BATCH)
        .map(|i| {
            let n = batch * ROWS_PER_BATCH + i;
            json!({
                "metric": "pw",
                "tags": {"host": format!("w{writer}h{}", n % 7)},
                "ts": 1_700_000_000_000u64 + n,
                "fields": {"a": n as f64, "b": format!("{writer}/{n}"), "c": n as i64 * -3},
            })
        })
        .collect();
    serde_json::to_vec(&points).expect("json")
}

/// The rows `body` becomes in `table` (keys and values as the service
/// encodes them).
fn encode(
    store: &Store,
    table: &str,
    format: Format,
    body: &[u8],
    precision: Option<Precision>,
) -> Rows {
    let name = TableName::parse(table).expect("table name");
    let desc = store.table(&name).expect("table").desc.clone();
    let mut encoder = PointEncoder::new(&desc, usize::MAX).expect("encoder");
    let bad = encoder.add_body(format, body, precision, 0).expect("body");
    assert!(bad.is_empty(), "{bad:?}");
    let mut rows = Rows::new();
    for batch in encoder.finish().batches {
        for (i, entries) in batch.to_rows().into_iter().enumerate() {
            let key = batch.row_key(i).expect("row with entries").to_vec();
            let mut values: Vec<Vec<u8>> = entries.into_iter().map(|e| e.value).collect();
            values.sort();
            rows.insert(key, values);
        }
    }
    rows
}

/// Every row of `table` in the store, with its values sorted; empty when
/// the table is not there.
fn scan_all(store: &Store, table: &str) -> Option<Rows> {
    let name = TableName::parse(table).expect("table name");
    store.table(&name).ok()?;
    let page = store.scan(&name, &Scan::new()).expect("scan");
    assert!(page.continuation.is_none());
    Some(
        page.rows
            .into_iter()
            .map(|r| {
                let mut values: Vec<Vec<u8>> = r.cells.iter().map(|c| c.value.to_vec()).collect();
                values.sort();
                (r.key, values)
            })
            .collect(),
    )
}

#[test]
fn a_power_cut_at_any_moment_loses_nothing_acknowledged() {
    let cuts: usize = std::env::var("HALITE_POWER_CUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let sc = Scenario::new()
        .topic("cpu", PARTITIONS as u32)
        .set("kafka.commit_interval=\"100ms\"")
        .set("wal.segment_size=\"256KiB\"")
        .set("region.flush_size=\"64KiB\"")
        .set("region.max_size=\"128KiB\"")
        .set("region.split_check_interval=\"200ms\"")
        .set("region.scrub_rate=\"0\"")
        .build();
    let mut rng = Rng::from_env("HALITE_POWER_SEED");
    let trace = sc.dir().join("power.trace");
    let trace_env = trace.display().to_string();
    let srv = {
        let mut cmd = sc.command(&[]);
        cmd.env("HALITE_POWER_TRACE", &trace_env);
        common::server::spawn_ready(cmd, sc.port)
    };
    let addr = srv.addr.clone();
    create_table(&addr, &table_spec("rows"));

    // The workload: Kafka points, two HTTP writers, a table made, written
    // and dropped while they run, and the group's commits watched.
    let started = Instant::now();
    let producer = common::kafka::produce_in_background(
        sc.bootstrap(),
        "cpu",
        Load {
            hosts: 12,
            points: KAFKA_POINTS,
            per_message: PER_MESSAGE,
            rate: 4_000,
        },
    );
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..HTTP_WRITERS)
        .map(|w| {
            let (addr, trace, stop) = (addr.clone(), trace.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut sent = Vec::new();
                let mut batch = 0;
                while !stop.load(Ordering::Relaxed) {
                    let body = batch_body(w, batch);
                    let r = request(
                        &addr,
                        "POST",
                        "/api/v1/write?table=rows",
                        Some("application/json"),
                        &body,
                    )
                    .expect("write");
                    assert_eq!(r.status, 204, "{}", r.text());
                    // The trace length when the 204 came, and the body.
                    sent.push((trace_len(&trace), body));
                    batch += 1;
                    // Paced, so the cuts' checks stay quick: the point is
                    // the moments, not the volume.
                    std::thread::sleep(Duration::from_millis(5));
                }
                sent
            })
        })
        .collect();
    let watcher = {
        let (bootstrap, trace, stop) = (sc.bootstrap().to_string(), trace.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seen: Vec<(Vec<i64>, u64)> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let committed = group_committed(&bootstrap, "halite", "cpu", PARTITIONS);
                seen.push((committed, trace_len(&trace)));
                std::thread::sleep(Duration::from_millis(100));
            }
            seen
        })
    };
    std::thread::sleep(Duration::from_millis(800));
    create_table(&addr, &table_spec("temp"));
    for batch in 0..5 {
        let body = batch_body(9, batch);
        let r = request(
            &addr,
            "POST",
            "/api/v1/write?table=temp",
            Some("application/json"),
            &body,
        )
        .expect("write");
        assert_eq!(r.status, 204, "{}", r.text());
    }
    let r = request(&addr, "DELETE", "/api/v1/tables/default:temp", None, b"").expect("drop");
    assert_eq!(r.status, 204, "{}", r.text());
    let dropped_at = trace_len(&trace);
    producer.join().expect("producer");
    // The HTTP writers go on until every message is committed and the
    // store has flushed, compacted and split (however slow the machine).
    let messages = (KAFKA_POINTS / PER_MESSAGE) as i64;
    let deadline = Instant::now() + Duration::from_secs(120);
    let (flushes, compactions, splits) = loop {
        let metrics = request(&addr, "GET", "/metrics", None, b"")
            .expect("metrics")
            .text();
        let seen = (
            metric_sum(&metrics, "halite_flushes_total"),
            metric_sum(&metrics, "halite_compactions_total"),
            metric_sum(&metrics, "halite_region_splits_total"),
        );
        let committed: i64 = group_committed(sc.bootstrap(), "halite", "cpu", PARTITIONS)
            .iter()
            .sum();
        if committed == messages && seen.0 > 0.0 && seen.1 > 0.0 && seen.2 > 0.0 {
            break seen;
        }
        assert!(
            Instant::now() < deadline,
            "the workload must commit every message ({committed} of {messages}), flush, \
             compact and split: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // A last look at the commits after they are all in.
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let sent: Vec<(u64, Vec<u8>)> = writers
        .into_iter()
        .flat_map(|w| w.join().expect("writer"))
        .collect();
    let commits = watcher.join().expect("watcher");
    let mut srv = srv;
    srv.child.kill().expect("SIGKILL");
    srv.child.wait().expect("wait");
    eprintln!(
        "workload: {:.1} s, {} HTTP batches, {} commit observations, {flushes} flushes, \
         {compactions} compactions, {splits} splits, trace {} bytes",
        started.elapsed().as_secs_f64(),
        sent.len(),
        commits.len(),
        trace_len(&trace)
    );
    let last = commits.last().map(|c| c.0.iter().sum::<i64>()).unwrap_or(0);
    assert_eq!(last, messages, "every message committed at the end");

    // What was sent, as rows, encoded against the tables as the killed
    // service left them (this open is itself a recovery from a kill).
    let config = sc.config_at(sc.data());
    let options = config.store_options();
    let store =
        Store::open(sc.data(), options.clone(), Arc::new(SystemClock)).expect("open after kill");
    let mut http_rows = Rows::new();
    let mut http_acked: Vec<(u64, Rows)> = Vec::new();
    for (acked_at, body) in &sent {
        let rows = encode(&store, "rows", Format::Json, body, None);
        http_rows.extend(rows.iter().map(|(k, v)| (k.clone(), v.clone())));
        http_acked.push((*acked_at, rows));
    }
    let produced = read_topic(sc.bootstrap(), "cpu", PARTITIONS, messages as usize);
    let mut kafka_rows = Rows::new();
    let mut by_offset: BTreeMap<(i32, i64), Vec<Vec<u8>>> = BTreeMap::new();
    for (p, o, payload) in &produced {
        let rows = encode(
            &store,
            "metrics:cpu",
            Format::Line,
            payload,
            Some(Precision::Milliseconds),
        );
        by_offset.insert((*p, *o), rows.keys().cloned().collect());
        kafka_rows.extend(rows);
    }
    let whole = scan_all(&store, "rows").expect("rows");
    assert_eq!(
        whole.len(),
        http_rows.len(),
        "after the kill, every HTTP row"
    );
    store.close().expect("close");
    http_acked.sort_by_key(|(at, _)| *at);

    // The cuts.
    let bytes = std::fs::read(&trace).expect("trace");
    // A third of the cuts at random records, a third just after a change
    // to a directory (a file made, renamed, linked or removed: the moments
    // a flush, a compaction, a split or a manifest is half done), a third
    // just after a sync (data durable, the names around it maybe not).
    let mut total = 0;
    let mut after_dir_change = Vec::new();
    let mut after_sync = Vec::new();
    let mut renames: BTreeMap<String, u64> = BTreeMap::new();
    let mut at = TRACE_MAGIC.len();
    while let Some((record, len)) = Record::decode(&bytes[at..]).expect("trace") {
        at += len;
        total += 1;
        if matches!(
            record,
            Record::Create { .. }
                | Record::Rename { .. }
                | Record::Link { .. }
                | Record::Remove { .. }
                | Record::RemoveTree { .. }
                | Record::MakeDirs { .. }
        ) {
            after_dir_change.push(total);
        }
        if matches!(record, Record::SyncEnd { .. }) {
            after_sync.push(total);
        }
        if let Record::Rename { to, .. } = &record {
            let kind = to.rsplit_once('.').map_or("", |(_, k)| k).to_string();
            *renames.entry(kind).or_insert(0) += 1;
        }
    }
    eprintln!("renames by the new name's extension: {renames:?}");
    let mut points: Vec<u64> = (0..cuts)
        .map(|i| match i % 3 {
            0 => 1 + rng.below(total),
            1 => after_dir_change[rng.below(after_dir_change.len() as u64) as usize],
            _ => after_sync[rng.below(after_sync.len() as u64) as usize],
        })
        .collect();
    points.sort_unstable();
    let expect = Expected {
        http_rows,
        http_acked,
        kafka_rows,
        by_offset,
        commits,
        dropped_at,
        options,
    };

    // This thread rebuilds the disks in trace order; two others recover
    // and check them.
    let mut replay = Replay::new(&bytes).expect("trace");
    let work = tempfile::tempdir().expect("temp dir");
    let mut shapes = CutShape::default();
    let cut_started = Instant::now();
    let checked_rows = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        // One queue per checker, so a checker's panic closes its queue and
        // the next send fails instead of waiting forever.
        let jobs: Vec<_> = (0..2)
            .map(|_| {
                let (jobs, queue) = std::sync::mpsc::sync_channel::<(PathBuf, u64, String)>(1);
                let (expect, checked_rows) = (&expect, &checked_rows);
                scope.spawn(move || {
                    for (dir, position, what) in queue {
                        let rows = expect.check(&dir, position, &what);
                        checked_rows.fetch_add(rows, Ordering::Relaxed);
                        std::fs::remove_dir_all(&dir).expect("remove cut");
                    }
                });
                jobs
            })
            .collect();
        for (n, &at) in points.iter().enumerate() {
            while replay.records() < at {
                assert!(replay.step().expect("replay"), "trace ended early");
            }
            let position = replay.position() as u64;
            let seed = rng.below(u64::MAX);
            let dir = work.path().join(format!("cut-{n}"));
            let shape = replay.materialize(&dir, seed).expect("materialize");
            for (sum, one) in [
                (&mut shapes.writes_lost, shape.writes_lost),
                (&mut shapes.writes_kept, shape.writes_kept),
                (&mut shapes.torn, shape.torn),
                (&mut shapes.dir_changes_lost, shape.dir_changes_lost),
                (&mut shapes.dir_changes_kept, shape.dir_changes_kept),
            ] {
                *sum += one;
            }
            let what = format!(
                "cut {n} at record {at} of {total} (trace byte {position}, seed {seed}): {shape:?}"
            );
            if jobs[n % jobs.len()].send((dir, position, what)).is_err() {
                // A checker failed: its panic is the test's answer.
                break;
            }
        }
        drop(jobs);
    });
    eprintln!(
        "{cuts} cuts survived in {:.1} s over {total} trace records: {} unsynced writes lost, {} kept, \
         {} torn; {} unsynced directory changes lost, {} kept; {} rows checked",
        cut_started.elapsed().as_secs_f64(),
        shapes.writes_lost,
        shapes.writes_kept,
        shapes.torn,
        shapes.dir_changes_lost,
        shapes.dir_changes_kept,
        checked_rows.load(Ordering::Relaxed)
    );
    assert!(
        shapes.writes_lost > 0 && shapes.torn > 0 && shapes.dir_changes_lost > 0,
        "no cut lost anything"
    );
}

/// What every cut is checked against.
struct Expected {
    /// Every row sent over HTTP, and the rows of each acknowledged write
    /// with the trace length when the test saw its answer, in that order.
    http_rows: Rows,
    http_acked: Vec<(u64, Rows)>,
    /// Every row of every Kafka message, and each message's row keys.
    kafka_rows: Rows,
    by_offset: BTreeMap<(i32, i64), Vec<Vec<u8>>>,
    /// The group's committed offsets, with the trace length after each look.
    commits: Vec<(Vec<i64>, u64)>,
    /// The trace length when the drop of the table `temp` was answered.
    dropped_at: u64,
    options: halite::store::StoreOptions,
}

impl Expected {
    /// Recovers the store in `dir` (a cut at trace byte `position`) and
    /// checks it; returns the rows it holds.
    fn check(&self, dir: &Path, position: u64, what: &str) -> usize {
        let store = Store::open(dir, self.options.clone(), Arc::new(SystemClock))
            .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
        let mut checked = 0;
        if position >= self.dropped_at {
            let temp = TableName::parse("temp").expect("table name");
            assert!(
                store.table(&temp).is_err(),
                "{what}: a dropped table is back"
            );
        }
        let mut present: HashMap<&str, Rows> = HashMap::new();
        for (table, sent) in [("rows", &self.http_rows), ("metrics:cpu", &self.kafka_rows)] {
            let Some(rows) = scan_all(&store, table) else {
                continue;
            };
            for (key, values) in &rows {
                match sent.get(key) {
                    Some(want) => assert_eq!(
                        values, want,
                        "{what}: a row of {table} is not whole or not as written"
                    ),
                    None => panic!("{what}: {table} holds a row nobody wrote: {key:02x?}"),
                }
            }
            checked += rows.len();
            present.insert(table, rows);
        }
        let holds =
            |table: &str, key: &Vec<u8>| present.get(table).is_some_and(|r| r.contains_key(key));
        for (_, rows) in self.http_acked.iter().take_while(|(a, _)| *a <= position) {
            for key in rows.keys() {
                assert!(
                    holds("rows", key),
                    "{what}: an acknowledged HTTP write is missing"
                );
            }
        }
        let committed = self
            .commits
            .iter()
            .take_while(|(_, a)| *a <= position)
            .last()
            .map_or_else(|| vec![0; PARTITIONS as usize], |(c, _)| c.clone());
        for ((p, o), keys) in &self.by_offset {
            if *o < committed[*p as usize] {
                for key in keys {
                    assert!(
                        holds("metrics:cpu", key),
                        "{what}: a point of partition {p} offset {o}, below the committed {}, is missing",
                        committed[*p as usize]
                    );
                }
            }
        }
        store
            .close()
            .unwrap_or_else(|e| panic!("{what}: close failed: {e}"));
        let report = halite::verify::verify(dir).unwrap_or_else(|e| panic!("{what}: verify: {e}"));
        assert_eq!(report.problems(), 0, "{what}: verify: {report:?}");
        checked
    }
}
