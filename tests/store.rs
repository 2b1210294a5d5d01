//! The store: a salted table pre-split over regions on several writer
//! shards; writes are routed, reads span regions in key order, and data and
//! catalog survive restarts (clean and not).

use std::sync::Arc;

use halite::catalog::{CreateTable, TableName};
use halite::cell::RowMutation;
use halite::clock::{Clock, ManualClock};
use halite::key::FieldValue;
use halite::region::RegionOptions;
use halite::region::read::{Get, Scan};
use halite::region::wal::WalOptions;
use halite::store::chores::CompactionChecker;
use halite::store::{Store, StoreOptions};

fn options() -> StoreOptions {
    StoreOptions {
        shards: 2,
        queue_depth: 8,
        wal: WalOptions {
            segment_size: 256 * 1024,
            ..WalOptions::default()
        },
        region: RegionOptions {
            flush_size: 256 * 1024,
            ..RegionOptions::default()
        },
        block_cache_bytes: 8 << 20,
        flush_threads: 2,
        compaction_threads: 1,
        max_region_size: 10 << 30,
        global_memstore_bytes: 1 << 30,
    }
}

fn open(dir: &std::path::Path) -> Store {
    Store::open(
        dir,
        options(),
        Arc::new(ManualClock::new(1_700_000_000_000)) as Arc<dyn Clock>,
    )
    .expect("open store")
}

fn cpu() -> CreateTable {
    serde_json::from_str(
        r#"{
          "name": "metrics:cpu",
          "families": [{ "name": "f", "compression": "SNAPPY" }],
          "key": {
            "fields": [
              { "name": "metric", "type": "string", "width": 8 },
              { "name": "host", "type": "string", "width": 12 },
              { "name": "ts", "type": "reversed_timestamp" }
            ],
            "salt": { "buckets": 16 }
          }
        }"#,
    )
    .expect("request")
}

fn create(store: &Store) {
    if !store
        .catalog()
        .namespaces()
        .contains(&"metrics".to_string())
    {
        store
            .catalog()
            .create_namespace("metrics")
            .expect("namespace");
    }
    store.create_table(&cpu()).expect("create");
}

fn name() -> TableName {
    TableName::parse("metrics:cpu").expect("name")
}

/// The key of host `h`'s `cpu` row at time step `step`.
fn cpu_key(schema: &halite::key::KeySchema, h: u64, step: u64) -> Vec<u8> {
    schema
        .encode_ordered(&[
            FieldValue::Str("cpu".into()),
            FieldValue::Str(format!("host_{h:02}")),
            FieldValue::Uint(1_000_000 + step * 10_000),
        ])
        .expect("key")
}

/// 40 hosts × 50 points, written in batches; returns every row key sorted.
fn load(store: &Store) -> Vec<Vec<u8>> {
    let table = store.table(&name()).expect("table");
    let schema = table.desc.key.clone();
    let mut keys = Vec::new();
    for step in 0..50u64 {
        let rows: Vec<RowMutation> = (0..40u64)
            .map(|h| {
                let key = cpu_key(&schema, h, step);
                keys.push(key.clone());
                RowMutation::new(key).put(
                    "f",
                    "usage_user",
                    1_000_000 + step * 10_000,
                    (h * 100 + step).to_be_bytes().to_vec(),
                )
            })
            .collect();
        store.write(&name(), rows, None).expect("write");
    }
    keys.sort();
    keys
}

fn all_keys(store: &Store, scan: &Scan) -> Vec<Vec<u8>> {
    store
        .scan(&name(), scan)
        .expect("scan")
        .rows
        .into_iter()
        .map(|r| r.key)
        .collect()
}

#[test]
fn salted_writes_spread_over_regions_and_scans_merge_in_key_order() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path());
    create(&store);
    let keys = load(&store);
    let table = store.table(&name()).expect("table");
    assert_eq!(table.regions().len(), 16);
    let busy = table
        .regions()
        .iter()
        .filter(|r| r.memstore_bytes() > 0 || !r.local().expect("local").file_paths().is_empty())
        .count();
    assert!(
        busy >= 12,
        "40 series should reach most of the 16 buckets, reached {busy}"
    );

    assert_eq!(all_keys(&store, &Scan::new()), keys);
    let mut reversed = keys.clone();
    reversed.reverse();
    assert_eq!(
        all_keys(
            &store,
            &Scan {
                reverse: true,
                ..Scan::new()
            }
        ),
        reversed
    );

    // Offset and limit span regions; continuation tokens page through all.
    assert_eq!(
        all_keys(
            &store,
            &Scan {
                offset: 150,
                limit: Some(300),
                ..Scan::new()
            }
        ),
        keys[150..450].to_vec()
    );
    for reverse in [false, true] {
        let mut paged = Vec::new();
        let mut scan = Scan {
            limit: Some(333),
            reverse,
            ..Scan::new()
        };
        loop {
            let page = store.scan(&name(), &scan).expect("page");
            paged.extend(page.rows.into_iter().map(|r| r.key));
            match page.continuation {
                Some(t) => scan.continuation = Some(t),
                None => break,
            }
        }
        let want = if reverse {
            reversed.clone()
        } else {
            keys.clone()
        };
        assert_eq!(paged, want, "reverse={reverse}");
    }

    let row = store
        .get(&name(), &Get::new(keys[777].clone()))
        .expect("get")
        .expect("row");
    assert_eq!(row.cells.len(), 1);
    store.close().expect("close");
}

#[test]
fn data_and_catalog_survive_clean_and_unclean_restarts() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path());
    create(&store);
    let keys = load(&store);
    store.close().expect("close");

    let store = open(dir.path());
    assert_eq!(
        all_keys(&store, &Scan::new()),
        keys,
        "after a clean restart"
    );
    let more = load(&store); // same keys again: idempotent
    assert_eq!(more, keys);
    // No close: MemStores are lost and must come back from the shard WALs.
    drop(store);
    let store = open(dir.path());
    assert_eq!(
        all_keys(&store, &Scan::new()),
        keys,
        "after an unclean restart"
    );
    store.close().expect("close");
}

#[test]
fn dropping_a_table_removes_its_regions_for_good() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path());
    create(&store);
    load(&store);
    store.flush_all().expect("flush");
    store.drop_table(&name()).expect("drop");
    assert!(store.table(&name()).is_err());
    let regions = std::fs::read_dir(dir.path().join("regions"))
        .expect("regions dir")
        .count();
    assert_eq!(regions, 0);
    store.close().expect("close");
    let store = open(dir.path());
    assert!(store.catalog().tables(None).is_empty());
    // The name can be used again, from scratch.
    create(&store);
    assert!(all_keys(&store, &Scan::new()).is_empty());
    store.close().expect("close");
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

/// Whether this process is the one to run test `name` in: it counts the
/// process's threads, to which tests running beside it add their own
/// under plain `cargo test` (one process, a thread a test). The first call
/// runs the test again alone in a process of its own, waits for it and
/// says no; in that process it says yes.
fn alone_in_a_process(name: &str) -> bool {
    if std::env::var_os("HALITE_TEST_ALONE").is_some() {
        return true;
    }
    let status = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env("HALITE_TEST_ALONE", "1")
        .status()
        .expect("run the test alone");
    assert!(status.success(), "{name}, alone: {status:?}");
    false
}

#[test]
fn regions_share_a_bounded_set_of_flush_and_compaction_threads() {
    if !alone_in_a_process("regions_share_a_bounded_set_of_flush_and_compaction_threads") {
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path());
    store
        .catalog()
        .create_namespace("metrics")
        .expect("namespace");
    let before = threads();
    for i in 0..4 {
        let mut req = cpu();
        req.name = TableName::parse(&format!("metrics:cpu{i}")).expect("name");
        store.create_table(&req).expect("create");
    }
    let added = threads().saturating_sub(before);
    assert!(added <= 2, "64 new regions started {added} threads");

    // Writes past the flush size are flushed (and compacted) by the shared
    // threads, without anyone asking.
    let t = TableName::parse("metrics:cpu0").expect("name");
    let schema = store.table(&t).expect("table").desc.key.clone();
    for batch in 0..40u64 {
        let rows: Vec<RowMutation> = (0..200u64)
            .map(|i| {
                let key = schema
                    .encode_ordered(&[
                        FieldValue::Str("cpu".into()),
                        FieldValue::Str(format!("h{}", i % 4)),
                        FieldValue::Uint(batch * 1000 + i),
                    ])
                    .expect("key");
                RowMutation::new(key).put("f", "v", 1, vec![7u8; 300])
            })
            .collect();
        store.write(&t, rows, None).expect("write");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let flushes = || {
        store
            .table(&t)
            .expect("table")
            .regions()
            .iter()
            .map(|r| r.stats().flushes.load(std::sync::atomic::Ordering::Relaxed))
            .sum::<u64>()
    };
    while flushes() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no background flush happened"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        store.scan(&t, &Scan::new()).expect("scan").rows.len(),
        40 * 200
    );
    store.close().expect("close");
}

fn events() -> CreateTable {
    serde_json::from_str(
        r#"{
          "name": "events",
          "families": [{ "name": "f" }],
          "key": { "fields": [
            { "name": "host", "type": "string", "width": 12 },
            { "name": "ts", "type": "timestamp" } ] }
        }"#,
    )
    .expect("request")
}

fn event_key(store: &Store, h: u64, t: u64) -> Vec<u8> {
    store
        .table(&TableName::parse("events").expect("name"))
        .expect("table")
        .desc
        .key
        .encode_ordered(&[
            FieldValue::Str(format!("host_{h:03}")),
            FieldValue::Uint(1_000_000 + t),
        ])
        .expect("key")
}

/// Regions tile the key space: the first starts at the beginning, each
/// ends where the next starts, the last runs to the end.
fn assert_tiles(store: &Store, name: &TableName) {
    let t = store.table(name).expect("table");
    let regions = &t.desc.regions;
    assert!(regions[0].start.is_empty());
    assert!(regions.last().expect("regions").end.is_empty());
    for w in regions.windows(2) {
        assert_eq!(w[0].end, w[1].start, "regions must tile the key space");
        assert!(w[0].start < w[0].end);
    }
    assert_eq!(t.regions().len(), regions.len());
    assert_eq!(
        store.catalog().table(name).expect("catalog").regions,
        *regions
    );
}

#[test]
fn regions_split_while_writers_write_and_keep_every_row() {
    let dir = tempfile::tempdir().expect("tmp");
    let name = TableName::parse("events").expect("name");
    let mut oracle = std::collections::BTreeMap::new();
    {
        let store = Arc::new(
            Store::open(
                dir.path(),
                StoreOptions {
                    max_region_size: 512 * 1024,
                    ..options()
                },
                Arc::new(ManualClock::new(1_700_000_000_000)) as Arc<dyn Clock>,
            )
            .expect("open"),
        );
        store.create_table(&events()).expect("create");
        assert_eq!(store.table(&name).expect("table").regions().len(), 1);
        // A writer keeps writing while regions split under it: at least 120
        // batches, and on until two splits happened under it.
        let split_count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let writer = {
            let store = store.clone();
            let split_count = split_count.clone();
            std::thread::spawn(move || {
                let mut written = Vec::new();
                for t in 0..5_000u64 {
                    if t >= 120 && split_count.load(std::sync::atomic::Ordering::SeqCst) >= 2 {
                        break;
                    }
                    let rows: Vec<RowMutation> = (0..200u64)
                        .map(|h| {
                            let key = event_key(&store, h, t);
                            written.push((key.clone(), h * 1000 + t));
                            RowMutation::new(key).put(
                                "f",
                                "v",
                                1_000_000 + t,
                                vec![(h * 1000 + t) as u8; 100],
                            )
                        })
                        .collect();
                    store
                        .write(&TableName::parse("events").expect("name"), rows, None)
                        .expect("every write is acknowledged, splits or not");
                }
                written
            })
        };
        let mut splits = 0;
        while !writer.is_finished() {
            splits += store.split_oversized().expect("split");
            split_count.store(splits, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(splits >= 2, "the writer stopped before two splits");
        for (k, v) in writer.join().expect("writer") {
            oracle.insert(k, v);
        }
        store.flush_all().expect("flush");
        loop {
            match store.split_oversized().expect("split") {
                0 => break,
                n => splits += n,
            }
        }
        let regions = store.table(&name).expect("table").regions().len();
        assert!(
            splits >= 3 && regions == splits + 1,
            "{splits} splits, {regions} regions"
        );
        assert_tiles(&store, &name);
        let check = |store: &Store| {
            let rows = store
                .scan(
                    &name,
                    &Scan {
                        limit: None,
                        ..Scan::new()
                    },
                )
                .expect("scan")
                .rows;
            assert_eq!(rows.len(), oracle.len());
            for (row, (k, v)) in rows.iter().zip(&oracle) {
                assert_eq!(&row.key, k);
                assert_eq!(row.cells[0].value, vec![*v as u8; 100]);
            }
            for (k, v) in oracle.iter().step_by(97) {
                let got = store
                    .get(&name, &Get::new(k.clone()))
                    .expect("get")
                    .expect("row");
                assert_eq!(got.cells[0].value, vec![*v as u8; 100]);
            }
        };
        check(&store);
        // Daughters were compacted: no file holds another region's rows.
        for r in store.table(&name).expect("table").regions() {
            assert!(
                !r.local().expect("local").has_foreign_rows(),
                "region {} kept foreign rows",
                r.id()
            );
        }
        let store = Arc::try_unwrap(store)
            .map_err(|_| "in use")
            .expect("sole owner");
        store.close().expect("close");
        let store = open(dir.path());
        assert_tiles(&store, &name);
        check(&store);
        store.close().expect("close");
    }
}

/// A store whose MemStores together may hold `limit` bytes (regions alone
/// would hold 64 MiB each before flushing), with the test table.
fn store_with_memory_limit(dir: &std::path::Path, limit: usize) -> Store {
    let mut opts = options();
    opts.region.flush_size = 64 << 20;
    opts.global_memstore_bytes = limit;
    let store = Store::open(
        dir,
        opts,
        Arc::new(ManualClock::new(1_700_000_000_000)) as Arc<dyn Clock>,
    )
    .expect("open");
    create(&store);
    store
}

/// Every row key of the test table, unpaged.
fn every_key(store: &Store) -> Vec<Vec<u8>> {
    all_keys(
        store,
        &Scan {
            limit: None,
            ..Scan::new()
        },
    )
}

/// A row per (host, step) of the test table, each a `usage_user` cell of
/// `value_len` bytes: the global-limit tests fill MemStores with them.
fn usage_rows(
    schema: &halite::key::KeySchema,
    host_steps: impl Iterator<Item = (u64, u64)>,
    value_len: usize,
) -> Vec<RowMutation> {
    host_steps
        .map(|(h, step)| {
            RowMutation::new(cpu_key(schema, h, step)).put(
                "f",
                "usage_user",
                1,
                vec![7u8; value_len],
            )
        })
        .collect()
}

/// Store files of every region of the test table.
fn store_file_count(store: &Store) -> usize {
    store
        .table(&name())
        .expect("table")
        .regions()
        .iter()
        .map(|r| r.file_counts().values().sum::<usize>())
        .sum()
}

#[test]
fn all_memstores_together_stay_under_the_global_limit() {
    let dir = tempfile::tempdir().expect("tmp");
    let limit = 512 * 1024;
    let store = store_with_memory_limit(dir.path(), limit);
    let schema = store.table(&name()).expect("table").desc.key.clone();
    let mut peak = 0;
    // Batches of about 150 KiB: flushes start at 80 % of the limit
    // without a wait, and the write after the one that passed it finds
    // the MemStores over the limit before a flush can end, and waits.
    for step in 0..100u64 {
        let rows = usage_rows(&schema, (0..40u64).map(|h| (h, step)), 3800);
        store.write(&name(), rows, None).expect("write");
        peak = peak.max(store.memstore_bytes());
    }
    // One batch may land on top of the limit.
    assert!(peak <= limit + 192 * 1024, "MemStores held {peak} bytes");
    assert!(store.memory_waits() > 0, "writers never waited");
    assert!(store_file_count(&store) > 0, "nothing was flushed");
    let rows = every_key(&store);
    assert_eq!(rows.len(), 100 * 40);
    store.close().expect("close");
}

/// Past 80 % of the global limit the largest MemStores flush while writers
/// go on, as past HBase's lower limit: flushes that started only at the
/// limit made every one of them a wait for the writers.
#[test]
fn memstores_flush_before_the_global_limit_without_a_wait() {
    let dir = tempfile::tempdir().expect("tmp");
    let limit = 512 * 1024;
    let store = store_with_memory_limit(dir.path(), limit);
    let schema = store.table(&name()).expect("table").desc.key.clone();
    let files = || store_file_count(&store);
    // Batches of 10 rows (about 2.5 KiB) up to 85 % of the limit, and one
    // more: never over it.
    let mut step = 0u64;
    let write = |step: u64| {
        let rows = usage_rows(&schema, (0..10u64).map(|h| (h, step)), 200);
        store.write(&name(), rows, None).expect("write");
    };
    while store.memstore_bytes() < limit / 100 * 85 && files() == 0 && step < 10_000 {
        write(step);
        step += 1;
    }
    write(step);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while files() == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        files() > 0,
        "nothing flushed at {} bytes",
        store.memstore_bytes()
    );
    assert_eq!(store.memory_waits(), 0, "a writer waited under the limit");
    let rows = every_key(&store);
    assert_eq!(rows.len() as u64, (step + 1) * 10);
    store.close().expect("close");
}

/// A flush that failed leaves its MemStore waiting: writers held at the
/// global limit get that region flushed again, rather than waiting on
/// bytes only a flush by age (an hour) would have tried again.
#[test]
fn writers_held_by_a_failed_flush_get_it_flushed_again() {
    use halite::fault::{self, Fault, Site};
    let dir = tempfile::tempdir().expect("tmp");
    let store = Arc::new(store_with_memory_limit(dir.path(), 512 * 1024));
    // The first store file's sync fails, once.
    fault::arm(dir.path(), Site::StoreSync, Fault::Io, 0, 1);
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || {
            let schema = store.table(&name()).expect("table").desc.key.clone();
            // One host, so one region: its failed snapshot is most of
            // the limit.
            for batch in 0..20u64 {
                let rows = usage_rows(&schema, (0..40u64).map(|i| (0, batch * 40 + i)), 3800);
                store.write(&name(), rows, None).expect("write");
            }
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !writer.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        writer.is_finished(),
        "writers still held at {} bytes after a failed flush",
        store.memstore_bytes()
    );
    writer.join().expect("writer");
    assert_eq!(fault::hits(dir.path()), 1, "the flush never failed");
    fault::disarm(dir.path());
    let rows = every_key(&store);
    assert_eq!(rows.len(), 20 * 40);
    Arc::try_unwrap(store)
        .map_err(|_| "in use")
        .expect("sole owner")
        .close()
        .expect("close");
}

/// A position written with no rows (the tail of a Kafka partition whose
/// last messages were dead-lettered) as a region's first record after a
/// flush, or its very first record, survives a restart, clean or not.
/// WAL replay skipped exactly such a record (it took the rows-less record
/// for one that ended at the flushed sequence id), so after a restart the
/// store's position trailed the offset committed to Kafka.
#[test]
fn a_position_without_rows_survives_restarts() {
    use halite::region::wal::record::SourcePosition;
    let at = |durable_below| SourcePosition {
        stream: "cpu".into(),
        shard: 7,
        durable_below,
    };
    for (flush_first, clean) in [(false, true), (false, false), (true, true), (true, false)] {
        let dir = tempfile::tempdir().expect("tmp");
        let store = open(dir.path());
        create(&store);
        if flush_first {
            // Rows (in every region), durable below 1200, then flushed.
            let table = store.table(&name()).expect("table");
            let rows = (0..40u64)
                .map(|h| {
                    RowMutation::new(cpu_key(&table.desc.key, h, 0)).put(
                        "f",
                        "usage_user",
                        1_000_000,
                        vec![1],
                    )
                })
                .collect();
            store.write(&name(), rows, Some(at(1200))).expect("write");
            store.flush_table(&name()).expect("flush");
        }
        let pending = store.submit_position(&name(), at(1201)).expect("position");
        store.wait(pending).expect("durable");
        if clean {
            store.close().expect("close");
        } else {
            drop(store);
        }
        let store = open(dir.path());
        let positions = store.source_positions(&name()).expect("positions");
        assert_eq!(
            positions.get(&("cpu".to_string(), 7)),
            Some(&1201),
            "flush first: {flush_first}, clean: {clean}: {positions:?}"
        );
        store.close().expect("close");
    }
}

/// Retention on a schedule: a table no longer written to still loses its
/// files past the family TTL, on the compaction check's timer. Before the
/// check, a compaction followed only a flush, and an idle region kept
/// expired files on disk for good.
#[test]
fn files_past_their_ttl_go_on_the_compaction_check_without_a_flush() {
    let dir = tempfile::tempdir().expect("tmp");
    let clock = ManualClock::new(1_700_000_000_000);
    let store = Arc::new(
        Store::open(
            dir.path(),
            options(),
            Arc::new(clock.clone()) as Arc<dyn Clock>,
        )
        .expect("open store"),
    );
    store
        .catalog()
        .create_namespace("metrics")
        .expect("namespace");
    let mut request = cpu();
    request.families[0].ttl = Some(60);
    store.create_table(&request).expect("create");
    let schema = store.table(&name()).expect("table").desc.key.clone();
    let written_at = clock.now_ms() - 30_000;
    let rows: Vec<RowMutation> = (0..40u64)
        .map(|h| RowMutation::new(cpu_key(&schema, h, 0)).put("f", "usage_user", written_at, "1"))
        .collect();
    store.write(&name(), rows, None).expect("write");
    store.flush_table(&name()).expect("flush");
    let files = |store: &Store| -> usize {
        store
            .table(&name())
            .expect("table")
            .regions()
            .iter()
            .flat_map(|r| r.file_counts().into_values())
            .sum()
    };
    assert!(files(&store) > 0);
    clock.advance(40_000);
    assert!(
        store
            .scan(&name(), &Scan::new())
            .expect("scan")
            .rows
            .is_empty()
    );

    let checker = CompactionChecker::start(&store, std::time::Duration::from_millis(50))
        .expect("compaction checker");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while files(&store) > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    checker.stop();
    assert_eq!(
        files(&store),
        0,
        "expired files stayed on disk past the compaction check"
    );
}

/// A namespace's dictionary forgets a dropped table's or series' rows
/// under a raised generation: across a restart the forgotten series stay
/// gone, one recorded again after the forgetting is read back (above the
/// delete markers, which mask every version at or before their own), and
/// a writer that looked the series up before it was forgotten cannot
/// remember its text afterwards.
#[test]
fn a_forgotten_series_stays_forgotten_and_one_recorded_again_is_kept() {
    use halite::series::{SeriesOutcome, TagSets};
    let dir = tempfile::tempdir().expect("temp dir");
    let a = [0u8, 0, 0, 1, 0].to_vec();
    let b = [0u8, 0, 0, 2, 0].to_vec();
    {
        let store = open(dir.path());
        store.catalog().create_namespace("db").expect("namespace");
        let tag_sets = TagSets::new();
        let d = tag_sets.dictionary(&store, "db").expect("dictionary");
        for s in [&a, &b] {
            assert_eq!(d.series("cpu", s, 100), SeriesOutcome::Pending);
        }
        d.make_durable(&store).expect("durable");
        assert_eq!(d.series("cpu", &a, 100), SeriesOutcome::Known);
        d.forget_series(&store, "cpu", std::slice::from_ref(&a))
            .expect("forget");
        // A writer that found `a` known before it went.
        d.remember_written("cpu", "cpu,host=a", &a, 1, &[]);
        let mut tags = Vec::new();
        assert_eq!(d.written_series("cpu", "cpu,host=a", &mut tags), None);
        assert_eq!(d.series_count("cpu"), 1);
        // `b` written again after the whole table is forgotten.
        d.forget_table(&store, "cpu").expect("forget table");
        assert_eq!(d.series_count("cpu"), 0);
        assert_eq!(d.series("cpu", &b, 100), SeriesOutcome::Pending);
        d.make_durable(&store).expect("durable");
        store.close().expect("close");
    }
    let store = open(dir.path());
    let d = TagSets::new().dictionary(&store, "db").expect("dictionary");
    assert!(d.has_series("cpu", &b), "recorded again after the markers");
    assert!(!d.has_series("cpu", &a), "forgotten for good");
    assert_eq!(d.series_count("cpu"), 1);
}
