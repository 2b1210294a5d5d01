//! WAL damage at recovery: a torn or garbage tail is cut at the last whole
//! record; damage in the middle of the log — in records a later sync point
//! says were synced, or before a closed segment's end — refuses to open
//! (`strict`, naming the file and offset) or is where recovery stops
//! (`stop_at_damage`, logged and counted).

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use halite::cell::{CellKind, EntryBatch};
use halite::region::wal::io::IoBackendChoice;
use halite::region::wal::record::{self, Frame, SEGMENT_HEADER_LEN};
use halite::region::wal::{Wal, WalError, WalOptions, WalRecovery};

const RECORDS: u64 = 40;

fn options(recovery: WalRecovery) -> WalOptions {
    WalOptions {
        segment_size: 64 * 1024,
        io: IoBackendChoice::Auto,
        recovery,
        ..WalOptions::default()
    }
}

fn payload(seq: u64) -> Vec<u8> {
    let mut b = EntryBatch::new();
    let row = format!("row{seq:05}");
    b.push(
        row.as_bytes(),
        b"f",
        b"q",
        seq,
        CellKind::Put,
        None,
        format!("value-{seq}").as_bytes(),
    );
    b.end_row();
    record::encode_edits(1, seq, None, &b)
}

/// A WAL of `records` records of region 1 (sequence ids 1..), each synced
/// and acknowledged before the next (so every batch after the first opens
/// with a sync point); `unsynced_tail` more are written without a sync.
/// The segments are copied aside while the writer is still running, as a
/// crash would leave them (no end record on the live segment).
fn crashed_wal(records: u64, unsynced_tail: u64) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tmp");
    let live = tmp.path().join("live");
    let wal = Wal::open(&live, options(WalRecovery::Strict)).expect("open");
    for seq in 1..=records {
        wal.append(1, seq, payload(seq), true)
            .expect("append")
            .wait()
            .expect("durable");
    }
    for seq in records + 1..=records + unsynced_tail {
        wal.append(1, seq, payload(seq), false)
            .expect("append")
            .wait()
            .expect("written");
    }
    let copy = tmp.path().join("crashed");
    std::fs::create_dir_all(&copy).expect("dir");
    for e in std::fs::read_dir(&live).expect("list") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "log") {
            std::fs::copy(&p, copy.join(p.file_name().expect("name"))).expect("copy");
        }
    }
    drop(wal);
    (tmp, copy)
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    v.sort();
    v
}

fn segment_id(path: &Path) -> u64 {
    path.file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .expect("segment id")
}

/// (offset, end) of every edits record of a segment, in order.
fn edit_frames(path: &Path) -> Vec<(usize, usize)> {
    let buf = std::fs::read(path).expect("read");
    let id = segment_id(path);
    let mut out = Vec::new();
    let mut pos = SEGMENT_HEADER_LEN as usize;
    while let Frame::Record { kind, next, .. } = record::read_frame(&buf, pos, id) {
        if kind == record::TYPE_EDITS {
            out.push((pos, next));
        }
        if kind == record::TYPE_SEGMENT_END {
            break;
        }
        pos = next;
    }
    out
}

/// Sequence ids the WAL in `dir` replays for region 1.
fn recovered(dir: &Path, recovery: WalRecovery) -> Result<(Vec<u64>, u64), WalError> {
    let wal = Wal::open(dir, options(recovery))?;
    let mut seqs = Vec::new();
    wal.replay(1, 0, |e| seqs.push(e.first_seq))?;
    let stops = wal.stats().damage_stops.load(Ordering::Relaxed);
    wal.close();
    Ok((seqs, stops))
}

fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).expect("dir");
    for e in std::fs::read_dir(from).expect("list") {
        let p = e.expect("entry").path();
        std::fs::copy(&p, to.join(p.file_name().expect("name"))).expect("copy");
    }
}

fn overwrite(path: &Path, at: usize, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open");
    f.write_all_at(bytes, at as u64).expect("write");
}

#[test]
fn a_last_record_cut_at_any_byte_recovers_every_record_before_it() {
    let (tmp, dir) = crashed_wal(RECORDS, 0);
    let last_seg = segments(&dir).pop().expect("a segment");
    let frames = edit_frames(&last_seg);
    let (start, end) = *frames.last().expect("records");
    let len = std::fs::metadata(&last_seg).expect("stat").len() as usize;
    let work = tmp.path().join("work");
    for cut in start..end {
        for truncate in [false, true] {
            copy_dir(&dir, &work);
            let seg = work.join(last_seg.file_name().expect("name"));
            if truncate {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&seg)
                    .expect("open");
                f.set_len(cut as u64).expect("truncate");
            } else {
                // A torn write over the preallocated zeros.
                overwrite(&seg, cut, &vec![0u8; len - cut]);
            }
            let (seqs, stops) = recovered(&work, WalRecovery::Strict)
                .unwrap_or_else(|e| panic!("cut at {cut} (truncate {truncate}): {e}"));
            assert_eq!(seqs, (1..RECORDS).collect::<Vec<_>>(), "cut at {cut}");
            assert_eq!(stops, 0);
            // The cut tail was closed off: a second recovery agrees.
            assert_eq!(
                recovered(&work, WalRecovery::Strict).expect("again").0,
                seqs
            );
        }
    }
}

#[test]
fn garbage_after_the_last_record_is_cut_off() {
    let (tmp, dir) = crashed_wal(RECORDS, 0);
    let seg = segments(&dir).pop().expect("a segment");
    let (_, end) = *edit_frames(&seg).last().expect("records");
    let work = tmp.path().join("work");
    copy_dir(&dir, &work);
    let garbage: Vec<u8> = (0..300u32).map(|i| (i * 37 + 11) as u8).collect();
    overwrite(&work.join(seg.file_name().expect("name")), end, &garbage);
    let (seqs, _) = recovered(&work, WalRecovery::Strict).expect("opens");
    assert_eq!(seqs, (1..=RECORDS).collect::<Vec<_>>());
}

#[test]
fn damage_in_synced_records_refuses_to_open_or_stops_there() {
    let (tmp, dir) = crashed_wal(RECORDS, 0);
    let seg = segments(&dir).pop().expect("a segment");
    let frames = edit_frames(&seg);
    let work = tmp.path().join("work");
    // In the middle, and in the very first record.
    for victim in [frames.len() / 2, 0] {
        let (start, end) = frames[victim];
        copy_dir(&dir, &work);
        let damaged = work.join(seg.file_name().expect("name"));
        overwrite(&damaged, start + (end - start) / 2, b"\xde\xad\xbe\xef");
        match recovered(&work, WalRecovery::Strict) {
            Err(WalError::Corrupt { path, offset, .. }) => {
                assert_eq!(path, damaged);
                assert_eq!(offset, start as u64, "the damaged record's offset");
            }
            other => panic!("record {victim}: strict recovery gave {other:?}"),
        }
        // Refusing changed nothing on disk: the same answer again.
        assert!(recovered(&work, WalRecovery::Strict).is_err());
        let (seqs, stops) = recovered(&work, WalRecovery::StopAtDamage).expect("opens");
        assert_eq!(seqs, (1..=victim as u64).collect::<Vec<_>>());
        assert_eq!(stops, 1);
        // Stopped there for good: strict opens now, with the same records.
        let (again, stops) = recovered(&work, WalRecovery::Strict).expect("opens");
        assert_eq!((again, stops), (seqs, 0));
    }
}

#[test]
fn damage_after_the_last_sync_is_a_torn_tail() {
    // Ten records written without a sync after forty synced ones: nothing
    // says they were durable, so damage among them is a crash's doing.
    let (tmp, dir) = crashed_wal(RECORDS, 10);
    let seg = segments(&dir).pop().expect("a segment");
    let frames = edit_frames(&seg);
    let (start, _) = frames[RECORDS as usize + 3];
    let work = tmp.path().join("work");
    copy_dir(&dir, &work);
    overwrite(
        &work.join(seg.file_name().expect("name")),
        start + 12,
        b"\xff\xff",
    );
    let (seqs, stops) = recovered(&work, WalRecovery::Strict).expect("a torn tail");
    assert_eq!(seqs, (1..=RECORDS + 3).collect::<Vec<_>>());
    assert_eq!(stops, 0);
}

#[test]
fn damage_in_a_closed_segment_refuses_to_open_or_sets_later_segments_aside() {
    // Enough records to roll over several 64 KiB segments.
    let (tmp, dir) = crashed_wal(2500, 0);
    let segs = segments(&dir);
    assert!(segs.len() >= 3, "{} segments", segs.len());
    let first = &segs[0];
    let frames = edit_frames(first);
    let (start, end) = frames[frames.len() / 2];
    let work = tmp.path().join("work");
    copy_dir(&dir, &work);
    let damaged = work.join(first.file_name().expect("name"));
    overwrite(&damaged, (start + end) / 2, b"\x00\x01\x02\x03");
    match recovered(&work, WalRecovery::Strict) {
        Err(WalError::Corrupt { path, offset, .. }) => {
            assert_eq!((path, offset), (damaged.clone(), start as u64));
        }
        other => panic!("strict recovery gave {other:?}"),
    }
    let (seqs, stops) = recovered(&work, WalRecovery::StopAtDamage).expect("opens");
    let before = frames.len() / 2;
    assert_eq!(seqs, (1..=before as u64).collect::<Vec<_>>());
    assert_eq!(stops, 1);
    let set_aside = std::fs::read_dir(&work)
        .expect("list")
        .filter(|e| {
            e.as_ref()
                .expect("entry")
                .path()
                .extension()
                .is_some_and(|x| x == "damaged")
        })
        .count();
    assert_eq!(set_aside, segs.len() - 1, "every later segment kept aside");
}
