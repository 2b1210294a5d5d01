//! The WAL on both I/O backends: group commit, sync counting, replay across
//! segment rolls, and segment deletion once flushed.

mod common;

use std::sync::Arc;

use common::files_in;
use halite::cell::{CellKind, Entry, EntryBatch, encode_key};
use halite::region::wal::io::{IoBackendChoice, IoBackendKind};
use halite::region::wal::record::encode_edits;
use halite::region::wal::{Wal, WalOptions};

fn options(io: IoBackendChoice) -> WalOptions {
    WalOptions {
        segment_size: 64 * 1024,
        io,
        ..WalOptions::default()
    }
}

fn record(region: u64, seq: u64, size: usize) -> Vec<u8> {
    let entry = Entry {
        key: encode_key(
            format!("row{seq}").as_bytes(),
            b"f",
            b"q",
            seq,
            CellKind::Put,
            false,
        ),
        ttl_ms: None,
        value: vec![(seq % 251) as u8; size],
    };
    encode_edits(region, seq, None, &EntryBatch::from_rows(&[vec![entry]]))
}

fn uring_expected() -> bool {
    // The kernel may forbid io_uring (kernel.io_uring_disabled = 2, or a
    // seccomp policy); then Auto must fall back.
    std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").map_or(true, |v| v.trim() != "2")
}

#[test]
fn auto_uses_io_uring_where_the_kernel_allows_and_sync_is_the_fallback() {
    let dir = tempfile::tempdir().expect("tmp");
    let auto = Wal::open(dir.path().join("a"), options(IoBackendChoice::Auto)).expect("open");
    if uring_expected() {
        assert_eq!(auto.backend(), IoBackendKind::IoUring);
    }
    let sync = Wal::open(dir.path().join("s"), options(IoBackendChoice::Sync)).expect("open");
    assert_eq!(sync.backend(), IoBackendKind::Sync);
}

fn concurrent_group_commit(io: IoBackendChoice) {
    let dir = tempfile::tempdir().expect("tmp");
    let wal = Arc::new(Wal::open(dir.path(), options(io)).expect("open"));
    let threads = 8u64;
    let per_thread = 150u64;
    std::thread::scope(|s| {
        for t in 0..threads {
            let wal = wal.clone();
            s.spawn(move || {
                for i in 0..per_thread {
                    let seq = t * per_thread + i + 1;
                    wal.append(t, seq, record(t, seq, 300), true)
                        .expect("append")
                        .wait()
                        .expect("durable");
                }
            });
        }
    });
    let stats = wal.stats();
    let appends = stats.appends.load(std::sync::atomic::Ordering::Relaxed);
    let batches = stats.batches.load(std::sync::atomic::Ordering::Relaxed);
    let syncs = stats.syncs.get();
    assert_eq!(appends, threads * per_thread);
    assert!(
        batches < appends,
        "no group commit: {batches} batches for {appends} appends"
    );
    // Every batch asked for a sync; count that each one got it.
    assert!(
        syncs >= batches,
        "{syncs} data syncs for {batches} synced batches"
    );
    if io == IoBackendChoice::Auto && uring_expected() {
        assert!(
            stats
                .max_in_flight
                .load(std::sync::atomic::Ordering::Relaxed)
                > 1,
            "io_uring never had two batches in flight"
        );
    }
    // Segments rolled at 64 KiB; all records come back in order per region.
    assert!(
        stats
            .segments_rolled
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );
    wal.close();
    let reopened = Wal::open(dir.path(), options(io)).expect("reopen");
    for t in 0..threads {
        let mut seqs = Vec::new();
        reopened
            .replay(t, 0, |e| {
                assert_eq!(e.region_id, t);
                seqs.push(e.first_seq);
            })
            .expect("replay");
        let want: Vec<u64> = (0..per_thread).map(|i| t * per_thread + i + 1).collect();
        assert_eq!(seqs, want, "region {t}");
    }
}

#[test]
fn group_commit_on_io_uring() {
    concurrent_group_commit(IoBackendChoice::Auto);
}

#[test]
fn group_commit_on_sync_fallback() {
    concurrent_group_commit(IoBackendChoice::Sync);
}

fn segments_go_once_flushed(io: IoBackendChoice) {
    let dir = tempfile::tempdir().expect("tmp");
    let opts = WalOptions {
        spare_segments: 1,
        ..options(io)
    };
    let wal = Wal::open(dir.path(), opts.clone()).expect("open");
    for seq in 1..=400u64 {
        let region = seq % 2;
        wal.append(region, seq, record(region, seq, 500), true)
            .expect("append")
            .wait()
            .expect("durable");
    }
    let before = wal.live_segments();
    assert!(before > 3, "expected several segments, got {before}");
    // Only region 0 flushed: segments still hold region 1's edits.
    wal.mark_flushed(0, 400);
    assert_eq!(wal.live_segments(), before);
    wal.mark_flushed(1, 200);
    let mid = wal.live_segments();
    assert!(mid < before && mid > 1, "{before} -> {mid}");
    wal.mark_flushed(1, 400);
    assert_eq!(wal.live_segments(), 1, "only the active segment is left");
    let logs = files_in(dir.path(), "log");
    assert_eq!(logs.len(), 1, "{logs:?}");
    // Kept ready beside the live one: at most `spare_segments`, the
    // prepared next segment included.
    let ready = files_in(dir.path(), "free").len() + files_in(dir.path(), "spare").len();
    let bound = opts.spare_segments;
    assert!(ready <= bound, "{ready} segments kept ready, over {bound}");
    wal.close();
    // Recycled segments hold stale records of other segment ids: nothing of
    // them may be replayed.
    let reopened = Wal::open(dir.path(), opts).expect("reopen");
    let mut seen = Vec::new();
    for region in [0, 1] {
        reopened
            .replay(region, 0, |e| seen.push(e.first_seq))
            .expect("replay");
    }
    seen.sort_unstable();
    let distinct = seen.len();
    seen.dedup();
    assert_eq!(
        seen.len(),
        distinct,
        "an edit came back twice: stale recycled data replayed"
    );
    assert!(seen.iter().all(|s| (1..=400).contains(s)));
    let mut after_flush = 0;
    for region in [0, 1] {
        reopened
            .replay(region, 400, |_| after_flush += 1)
            .expect("replay");
    }
    assert_eq!(
        after_flush, 0,
        "edits at or below the flushed sequence id were replayed"
    );
}

#[test]
fn segments_are_deleted_or_recycled_once_flushed_io_uring() {
    segments_go_once_flushed(IoBackendChoice::Auto);
}

#[test]
fn segments_are_deleted_or_recycled_once_flushed_sync() {
    segments_go_once_flushed(IoBackendChoice::Sync);
}

#[test]
fn async_writes_are_synced_on_the_interval() {
    let dir = tempfile::tempdir().expect("tmp");
    let wal = Wal::open(
        dir.path(),
        WalOptions {
            async_sync_interval: std::time::Duration::from_millis(20),
            ..options(IoBackendChoice::Auto)
        },
    )
    .expect("open");
    let syncs_before = wal.stats().syncs.get();
    wal.append(1, 1, record(1, 1, 100), false)
        .expect("append")
        .wait()
        .expect("written");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        wal.stats().syncs.get() > syncs_before,
        "the async write was never synced"
    );
}

/// Bytes the directory's files take on disk (allocated blocks).
fn disk_bytes(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.metadata().map_or(0, |m| m.blocks() * 512))
        .sum()
}

/// Waits (at most 5 s) until an idle WAL has given its space back: the
/// directory holds at most 16 KiB.
fn wait_until_released(dir: &std::path::Path, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while disk_bytes(dir) > 16 * 1024 {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: {} bytes still held: {:?}",
            disk_bytes(dir),
            std::fs::read_dir(dir)
                .expect("dir")
                .flatten()
                .map(|e| e.path())
                .collect::<Vec<_>>()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Writes after an idle release go to a small segment and ask for a
/// preallocated spare; when the log goes quiet before it takes the spare
/// (on a slow disk the zero-fill ends after the last write), the spare and
/// the small segment's flushed records must go too. Both stayed until the
/// next write (found by `api_answers` under CI load).
#[test]
fn a_spare_asked_for_after_a_release_goes_when_the_log_is_quiet_again() {
    let dir = tempfile::tempdir().expect("tmp");
    let opts = WalOptions {
        release_after_idle: std::time::Duration::from_millis(200),
        // A spare this big is still being zero-filled when the writes end.
        segment_size: 32 << 20,
        ..options(IoBackendChoice::Auto)
    };
    let wal = Wal::open(dir.path(), opts).expect("open");
    let small = |what: &str| {
        wait_until_released(dir.path(), what);
        assert!(
            files_in(dir.path(), "spare").is_empty(),
            "{what}: a spare is left"
        );
    };
    for seq in 1..=400 {
        wal.append(1, seq, record(1, seq, 500), true)
            .expect("append")
            .wait()
            .expect("durable");
    }
    wal.mark_flushed(1, 400);
    small("after the release");
    // Writes after the release go to the small segment while the log
    // prepares a spare; nothing more comes to roll into it. Once flushed,
    // the records and the spare go.
    let tickets: Vec<_> = (401..=500)
        .map(|seq| {
            wal.append(1, seq, record(1, seq, 500), true)
                .expect("append")
        })
        .collect();
    for t in tickets {
        t.wait().expect("durable");
    }
    wal.mark_flushed(1, 500);
    small("quiet and flushed after more writes");
    wal.close();
}

#[test]
fn an_idle_flushed_wal_gives_back_its_space_and_preallocates_again_when_written() {
    let dir = tempfile::tempdir().expect("tmp");
    let opts = WalOptions {
        release_after_idle: std::time::Duration::from_millis(200),
        ..options(IoBackendChoice::Auto)
    };
    let wal = Wal::open(dir.path(), opts.clone()).expect("open");
    let write = |wal: &Wal, seqs: std::ops::RangeInclusive<u64>| {
        for seq in seqs {
            wal.append(1, seq, record(1, seq, 500), true)
                .expect("append")
                .wait()
                .expect("durable");
        }
    };
    write(&wal, 1..=400);
    // Not flushed: idle or not, the space stays (it holds the only copy).
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(files_in(dir.path(), "log").len() > 1);
    wal.mark_flushed(1, 400);
    wait_until_released(dir.path(), "after the release");
    assert_eq!(files_in(dir.path(), "log").len(), 1);
    assert!(files_in(dir.path(), "free").is_empty() && files_in(dir.path(), "spare").is_empty());
    // Written again: it goes on, preallocates again, and everything after
    // the release replays after a reopen, once each.
    write(&wal, 401..=600);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while disk_bytes(dir.path()) < 64 * 1024 {
        assert!(
            std::time::Instant::now() < deadline,
            "never preallocated again"
        );
        write(&wal, 0..=0);
    }
    wal.close();
    let reopened = Wal::open(dir.path(), opts).expect("reopen");
    let mut seen = Vec::new();
    reopened
        .replay(1, 400, |e| seen.push(e.first_seq))
        .expect("replay");
    seen.retain(|s| *s > 400);
    assert_eq!(seen, (401..=600).collect::<Vec<_>>());
}
