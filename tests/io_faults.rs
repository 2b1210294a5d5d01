//! A failing disk, injected below the file layer (`halite::fault`) under the
//! real WAL, flush and compaction code:
//!
//! - `EIO` on a WAL write or sync: never retried as if the data were safe —
//!   the write fails, the shard takes no more writes, the store reports it,
//!   and a restart recovers every acknowledged write from the WAL;
//! - short WAL writes: finished, nothing lost;
//! - `ENOSPC` at a flush or when the WAL needs a new segment: writes stop
//!   (they wait) with the cause reported, and go on when there is room;
//! - `EIO` on a store file's sync, a manifest write or a compaction: that
//!   flush or compaction fails and leaves nothing behind; a later one
//!   succeeds.
//!
//! In every case nothing acknowledged is lost and `halite verify` finds the
//! directory clean afterwards.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use halite::catalog::{CreateTable, TableName};
use halite::cell::RowMutation;
use halite::clock::{Clock, SystemClock};
use halite::fault::{self, Fault, Site};
use halite::key::FieldValue;
use halite::region::RegionOptions;
use halite::region::read::Scan;
use halite::region::wal::WalOptions;
use halite::region::wal::io::IoBackendChoice;
use halite::store::{Store, StoreOptions};

const ROWS_PER_BATCH: u64 = 200;

fn options(io: IoBackendChoice, flush_on_close: bool) -> StoreOptions {
    StoreOptions {
        shards: 1,
        queue_depth: 8,
        wal: WalOptions {
            segment_size: 256 * 1024,
            io,
            ..WalOptions::default()
        },
        region: RegionOptions {
            flush_size: 96 * 1024,
            blocking_multiplier: 2,
            flush_on_close,
            ..RegionOptions::default()
        },
        block_cache_bytes: 8 << 20,
        flush_threads: 1,
        compaction_threads: 1,
        max_region_size: 10 << 30,
        global_memstore_bytes: 1 << 30,
    }
}

fn name() -> TableName {
    TableName::parse("cpu").expect("name")
}

fn open(dir: &Path, io: IoBackendChoice) -> Store {
    open_with(dir, io, true)
}

fn open_with(dir: &Path, io: IoBackendChoice, flush_on_close: bool) -> Store {
    let store = Store::open(
        dir,
        options(io, flush_on_close),
        Arc::new(SystemClock) as Arc<dyn Clock>,
    )
    .expect("open store");
    if store.catalog().table(&name()).is_err() {
        let spec: CreateTable = serde_json::from_str(
            r#"{"name": "cpu", "families": [{"name": "f", "data_block_encoding": "TIME_SERIES"}],
                "key": {"fields": [{"name": "host", "type": "string", "width": 8},
                                   {"name": "ts", "type": "timestamp"}]}}"#,
        )
        .expect("spec");
        store.create_table(&spec).expect("create");
    }
    store
}

/// Batch `b`: rows `b * ROWS_PER_BATCH ..`, one cell each.
fn batch(store: &Store, b: u64) -> Vec<RowMutation> {
    let desc = store.catalog().table(&name()).expect("table");
    (b * ROWS_PER_BATCH..(b + 1) * ROWS_PER_BATCH)
        .map(|i| {
            let key = desc
                .key
                .encode_ordered(&[FieldValue::Str(format!("h{}", i % 5)), FieldValue::Uint(i)])
                .expect("key");
            RowMutation::new(key).put("f", "v", i, format!("value-{i:08}-padding").into_bytes())
        })
        .collect()
}

/// The row numbers the store holds.
fn rows(store: &Store) -> Vec<u64> {
    let mut out: Vec<u64> = store
        .scan(&name(), &Scan::default())
        .expect("scan")
        .rows
        .iter()
        .map(|r| r.cells[0].timestamp)
        .collect();
    out.sort_unstable();
    out
}

fn assert_holds(store: &Store, acked: &[u64]) {
    let have: std::collections::BTreeSet<u64> = rows(store).into_iter().collect();
    for b in acked {
        for i in b * ROWS_PER_BATCH..(b + 1) * ROWS_PER_BATCH {
            assert!(have.contains(&i), "acknowledged row {i} of batch {b} lost");
        }
    }
}

fn assert_verifies(dir: &Path) {
    let report = halite::verify::verify(dir).expect("a data directory");
    assert_eq!(report.problems(), 0, "{report:?}");
    let leftovers: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.what.contains("does not name"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

fn wal_failure_is_never_acknowledged(site: Site, io: IoBackendChoice) {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = open(tmp.path(), io);
    let mut acked = Vec::new();
    for b in 0..10 {
        store.write(&name(), batch(&store, b), None).expect("write");
        acked.push(b);
    }
    fault::arm(tmp.path(), site, Fault::Io, 0, 1);
    let failed = store.write(&name(), batch(&store, 10), None);
    assert!(
        failed.is_err(),
        "a write whose WAL {site:?} failed was acknowledged"
    );
    // Never retried: the shard takes nothing more until a restart.
    assert!(store.write(&name(), batch(&store, 11), None).is_err());
    let trouble = store.trouble().expect("the store reports it");
    assert!(trouble.contains("restart"), "{trouble}");
    let _ = store.close();
    fault::disarm(tmp.path());

    let store = open(tmp.path(), io);
    assert!(store.trouble().is_none());
    assert_holds(&store, &acked);
    store
        .write(&name(), batch(&store, 12), None)
        .expect("writes go on");
    acked.push(12);
    assert_holds(&store, &acked);
    store.close().expect("close");
    assert_verifies(tmp.path());
}

#[test]
fn an_eio_on_a_wal_sync_is_never_acknowledged_io_uring() {
    wal_failure_is_never_acknowledged(Site::WalSync, IoBackendChoice::Auto);
}

#[test]
fn an_eio_on_a_wal_sync_is_never_acknowledged_sync_io() {
    wal_failure_is_never_acknowledged(Site::WalSync, IoBackendChoice::Sync);
}

#[test]
fn an_eio_on_a_wal_write_is_never_acknowledged_io_uring() {
    wal_failure_is_never_acknowledged(Site::WalWrite, IoBackendChoice::Auto);
}

#[test]
fn an_eio_on_a_wal_write_is_never_acknowledged_sync_io() {
    wal_failure_is_never_acknowledged(Site::WalWrite, IoBackendChoice::Sync);
}

#[test]
fn short_wal_writes_are_finished() {
    for io in [IoBackendChoice::Auto, IoBackendChoice::Sync] {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = open_with(tmp.path(), io, false);
        fault::arm(tmp.path(), Site::WalWrite, Fault::Short, 0, 30);
        for b in 0..40 {
            store.write(&name(), batch(&store, b), None).expect("write");
        }
        assert!(fault::hits(tmp.path()) > 0);
        fault::disarm(tmp.path());
        // Closed without a flush: what is not in store files comes back
        // from the WAL the short writes went to.
        store.close().expect("close");
        let store = open(tmp.path(), io);
        assert_holds(&store, &(0..40).collect::<Vec<_>>());
        store.close().expect("close");
    }
}

/// Writes batches from another thread until `stop`; counts the
/// acknowledged ones.
fn writer(store: Arc<Store>, acked: Arc<AtomicU64>, until: u64) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for b in 0..until {
            store
                .write(&name(), batch(&store, b), None)
                .expect("writes wait, they do not fail");
            acked.store(b + 1, Ordering::SeqCst);
        }
    })
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn a_full_disk_stops_writes_until_there_is_room(site: Site) {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = Arc::new(open(tmp.path(), IoBackendChoice::Auto));
    fault::arm(tmp.path(), site, Fault::NoSpace, 0, u64::MAX);
    let acked = Arc::new(AtomicU64::new(0));
    let total = 300;
    let w = writer(store.clone(), acked.clone(), total);
    wait_until("writes to stop on the full disk", || store.disk_full());
    // Writes go on until the MemStores reach their blocking size (on a
    // loaded machine that can take a while after the first failed flush)...
    let mut at = acked.load(Ordering::SeqCst);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        std::thread::sleep(Duration::from_millis(250));
        let now = acked.load(Ordering::SeqCst);
        if now == at || std::time::Instant::now() > deadline {
            break;
        }
        at = now;
    }
    // ...and then make no progress while the disk stays full.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        acked.load(Ordering::SeqCst) <= at + 1,
        "writes went on with no room"
    );
    assert!(at < total, "the disk never filled");
    let trouble = store.trouble().expect("reported");
    assert!(trouble.contains("disk is full"), "{trouble}");
    // Room again: the writes that waited go through, and the rest.
    fault::disarm(tmp.path());
    w.join().expect("writer");
    assert_eq!(acked.load(Ordering::SeqCst), total);
    wait_until("the trouble to clear", || store.trouble().is_none());
    assert!(!store.disk_full());
    assert_holds(&store, &(0..total).collect::<Vec<_>>());
    let store = Arc::try_unwrap(store).ok().expect("only reference");
    store.close().expect("close");
    assert_verifies(tmp.path());
    let store = open(tmp.path(), IoBackendChoice::Auto);
    assert_holds(&store, &(0..total).collect::<Vec<_>>());
    store.close().expect("close");
}

#[test]
fn a_full_disk_at_flush_stops_writes_until_there_is_room() {
    a_full_disk_stops_writes_until_there_is_room(Site::StoreWrite);
}

#[test]
fn a_full_disk_for_the_next_wal_segment_stops_writes_until_there_is_room() {
    a_full_disk_stops_writes_until_there_is_room(Site::WalPrepare);
}

#[test]
fn failed_store_syncs_and_manifest_writes_fail_the_flush_which_is_retried() {
    for site in [Site::StoreSync, Site::MetaWrite] {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = open(tmp.path(), IoBackendChoice::Auto);
        for b in 0..4 {
            store.write(&name(), batch(&store, b), None).expect("write");
        }
        // Flushed now, so no flush the writes set off in the background can
        // take the last batch before the fault is armed: it stays in the
        // MemStore (a fifth of the flush size) for the flushes below.
        store.flush_table(&name()).expect("flush");
        store.write(&name(), batch(&store, 4), None).expect("write");
        fault::arm(tmp.path(), site, Fault::Io, 0, u64::MAX);
        assert!(store.flush_table(&name()).is_err(), "{site:?}");
        assert!(store.trouble().is_some());
        assert!(
            store.flush_table(&name()).is_err(),
            "tried again, failed again"
        );
        fault::disarm(tmp.path());
        store.flush_table(&name()).expect("a later flush succeeds");
        assert!(store.trouble().is_none());
        assert_holds(&store, &(0..5).collect::<Vec<_>>());
        store.close().expect("close");
        assert_verifies(tmp.path());
    }
}

#[test]
fn a_failed_compaction_leaves_its_inputs_and_a_later_one_succeeds() {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = open(tmp.path(), IoBackendChoice::Auto);
    for b in 0..6 {
        store.write(&name(), batch(&store, b), None).expect("write");
        store.flush_table(&name()).expect("flush");
    }
    let files = |store: &Store| -> usize {
        store.table(&name()).expect("table").regions()[0]
            .file_counts()
            .values()
            .sum()
    };
    let before = files(&store);
    assert!(before >= 2);
    let region = store.table(&name()).expect("table").regions()[0].clone();
    for (site, fault_kind) in [
        (Site::StoreWrite, Fault::Io),
        (Site::StoreSync, Fault::NoSpace),
    ] {
        fault::arm(tmp.path(), site, fault_kind, 0, 1);
        assert!(region.compact(true).is_err(), "{site:?}");
        fault::disarm(tmp.path());
        assert_eq!(files(&store), before, "the inputs stay live");
        assert_holds(&store, &(0..6).collect::<Vec<_>>());
    }
    region.compact(true).expect("compaction");
    assert_eq!(files(&store), 1);
    drop(region);
    assert_holds(&store, &(0..6).collect::<Vec<_>>());
    store.close().expect("close");
    assert_verifies(tmp.path());
}

/// A write submitted and not yet waited for must not hold up the flush
/// that a later write to the same region waits for (the Kafka pipeline
/// submits many batches before it waits for the first). Found by the crash
/// torture as a hang: the flush waited for the first write's MVCC
/// completion, which only came when its writer waited for it, after the
/// shard had finished the later write — which waited for the flush.
#[test]
fn an_unfinished_write_does_not_hold_up_the_flush_a_later_write_waits_for() {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = open(tmp.path(), IoBackendChoice::Auto);
    let desc = store.catalog().table(&name()).expect("table");
    let encode = |b: u64| {
        let mut enc = halite::ingest::PointEncoder::new(&desc, 1 << 20).expect("encoder");
        let mut body = String::new();
        for i in b * ROWS_PER_BATCH..(b + 1) * ROWS_PER_BATCH {
            body.push_str(&format!(
                "m,host=h{} v=\"value-{i:08}-padding\" {i}\n",
                i % 5
            ));
        }
        enc.add_body(
            halite::ingest::Format::Line,
            body.as_bytes(),
            Some(halite::ingest::line_protocol::Precision::Milliseconds),
            1,
        )
        .expect("encode");
        enc.finish()
    };
    let first = store
        .submit_encoded(&name(), encode(0), None)
        .expect("submit");
    // Far past the blocking limit (2 × 96 KiB) while `first` is pending.
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            for b in 1..40 {
                let p = store
                    .submit_encoded(&name(), encode(b), None)
                    .expect("submit");
                store.wait(p).expect("later write");
            }
            done_tx.send(()).expect("send");
        });
        let outcome = done_rx.recv_timeout(Duration::from_secs(30));
        store.wait(first).expect("first write");
        assert!(outcome.is_ok(), "later writes hung behind a pending one");
    });
    let store_files = walk(tmp.path())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "sst"))
        .count();
    assert!(store_files > 0, "no flush happened: the test did not test");
    store.close().expect("close");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
