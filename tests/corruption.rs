//! Damaged store files and WAL segments give typed errors naming the file and
//! offset: never a panic, never a wrong answer.

mod common;

use std::fs;
use std::sync::Arc;

use common::{Harness, files_in, foreground_options, small_wal};
use halite::ErrorKind;
use halite::cell::RowMutation;
use halite::clock::{Clock, ManualClock};
use halite::region::read::Scan;
use halite::region::sst::cache::BlockCache;
use halite::region::sst::{SstError, SstReader};
use halite::region::wal::io::IoBackendChoice;
use halite::region::wal::{Wal, WalError};
use halite::region::{Region, RegionDescriptor};
use halite::schema::{BloomType, Compression, Durability, FamilyDescriptor};

fn families() -> Vec<FamilyDescriptor> {
    vec![
        FamilyDescriptor::new("cf")
            .compression(Compression::Snappy)
            .bloom(BloomType::RowCol)
            .block_size(1024),
    ]
}

fn fill(h: &Harness, rows: u32) {
    let batch: Vec<RowMutation> = (0..rows)
        .map(|i| {
            RowMutation::new(format!("row{i:05}"))
                .put("cf", "a", 10, format!("value-{i}"))
                .put("cf", "b", 10, vec![i as u8; 20])
        })
        .collect();
    h.region()
        .mutate(&batch, Durability::SyncWal)
        .expect("write");
}

/// Reads everything in a store file; any damage must surface as an error.
fn read_all(path: &std::path::Path) -> Result<usize, SstError> {
    let cache = BlockCache::new(1 << 20);
    let reader = SstReader::open(path, 1, cache, false, false)?;
    reader.check_all()?;
    let mut it = reader.iter();
    it.seek_to_first()?;
    let mut n = 0;
    while it.valid() {
        n += 1;
        it.advance()?;
    }
    Ok(n)
}

#[test]
fn every_flipped_byte_in_a_store_file_is_detected() {
    let h = Harness::new(
        families(),
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    fill(&h, 120);
    h.region().flush().expect("flush");
    let path = files_in(&h.region_dir(), "sst")
        .pop()
        .expect("a store file");
    let good = fs::read(&path).expect("read");
    assert_eq!(read_all(&path).expect("clean file reads"), 240);
    let damaged = path.with_extension("damaged");
    for i in 0..good.len() {
        let mut bad = good.clone();
        bad[i] ^= 0x10;
        fs::write(&damaged, &bad).expect("write damaged copy");
        match read_all(&damaged) {
            Err(SstError::Corrupt { path, offset, .. }) => {
                assert_eq!(path, damaged);
                assert!(offset < good.len() as u64, "offset {offset} past the file");
            }
            Err(other) => panic!("flip at {i}: expected corruption, got {other}"),
            Ok(n) => panic!("flip at {i} went unnoticed ({n} entries read)"),
        }
    }
    for len in 0..good.len() {
        fs::write(&damaged, &good[..len]).expect("write truncated copy");
        let err = read_all(&damaged).expect_err("truncated file must fail");
        assert_eq!(
            halite::Error::from(err).kind(),
            ErrorKind::Corruption,
            "truncated to {len}"
        );
    }
}

/// A harness whose region was flushed to one store file and then closed,
/// so the file can be damaged before the next open.
fn closed_with_one_store_file(rows: u32) -> (Harness, std::path::PathBuf) {
    let mut h = Harness::new(
        families(),
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    fill(&h, rows);
    h.region().flush().expect("flush");
    let path = files_in(&h.region_dir(), "sst")
        .pop()
        .expect("a store file");
    drop(h.region.take());
    (h, path)
}

#[test]
fn a_damaged_store_file_fails_the_read_with_its_name_not_a_wrong_answer() {
    let (mut h, path) = closed_with_one_store_file(300);
    // Flip a byte in the middle of the first data block: the file opens (its
    // trailer, index and meta are fine) but reading that block fails.
    let mut bytes = fs::read(&path).expect("read");
    bytes[40] ^= 0xff;
    fs::write(&path, &bytes).expect("write");
    h.open();
    let err = h
        .region()
        .scan(&Scan::new())
        .expect_err("scan over a damaged block");
    assert_eq!(err.kind(), ErrorKind::Corruption);
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("offset=`0`"), "{msg}");
}

#[test]
fn a_damaged_trailer_fails_the_open_naming_the_file() {
    let (h, path) = closed_with_one_store_file(10);
    let mut bytes = fs::read(&path).expect("read");
    let n = bytes.len();
    bytes[n - 20] ^= 1;
    fs::write(&path, &bytes).expect("write");
    let wal = Arc::new(Wal::open(h.wal_dir(), small_wal(IoBackendChoice::Auto)).expect("wal"));
    let err = Region::open(
        h.region_dir(),
        RegionDescriptor::new(1, families()),
        foreground_options(),
        wal,
        Arc::new(ManualClock::new(0)) as Arc<dyn Clock>,
        BlockCache::new(1 << 20),
    )
    .expect_err("open with a damaged trailer");
    assert_eq!(err.kind(), ErrorKind::Corruption);
    assert!(err.to_string().contains("trailer"), "{err}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}

fn write_unflushed(h: &Harness, batches: u32) {
    for b in 0..batches {
        let rows: Vec<RowMutation> = (0..4)
            .map(|i| RowMutation::new(format!("b{b:04}-{i}")).put("cf", "q", 1, vec![b as u8; 200]))
            .collect();
        h.region()
            .mutate(&rows, Durability::SyncWal)
            .expect("write");
    }
}

fn count_rows(h: &Harness) -> usize {
    h.region().scan(&Scan::new()).expect("scan").rows.len()
}

#[test]
fn a_torn_wal_tail_recovers_to_the_last_whole_record() {
    let mut h = Harness::new(
        families(),
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    write_unflushed(&h, 20);
    drop(h.region.take());
    h.wal.take().expect("wal").close();
    let seg = files_in(&h.wal_dir(), "log").pop().expect("a segment");
    let bytes = fs::read(&seg).expect("read");
    // Find where the written part ends (the end record the clean close wrote).
    let end = bytes.iter().rposition(|b| *b != 0).expect("data") + 1;
    let original = bytes.clone();
    let mut last_rows = usize::MAX;
    for cut in (16..end).rev().step_by(97) {
        let mut torn = original.clone();
        for b in &mut torn[cut..] {
            *b = 0;
        }
        fs::write(&seg, &torn).expect("tear");
        h.open();
        let rows = count_rows(&h);
        assert_eq!(rows % 4, 0, "a batch of rows must be all there or all gone");
        assert!(rows <= last_rows, "a shorter log recovered more rows");
        last_rows = rows;
        drop(h.region.take());
        h.wal.take().expect("wal").close();
        // Reopening wrote an end record at the tear and started a new
        // segment; put the original back for the next cut.
        for extra in files_in(&h.wal_dir(), "log") {
            if extra != seg {
                fs::remove_file(extra).expect("remove");
            }
        }
    }
    assert!(last_rows < 80);
}

#[test]
fn garbage_in_a_closed_wal_segment_refuses_the_open_with_file_and_offset() {
    let mut h = Harness::new(
        families(),
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    write_unflushed(&h, 10);
    drop(h.region.take());
    h.wal.take().expect("wal").close();
    // Open again: the old segment is now a closed one, followed by a new one.
    h.open();
    write_unflushed(&h, 2);
    drop(h.region.take());
    h.wal.take().expect("wal").close();
    let segs = files_in(&h.wal_dir(), "log");
    assert!(segs.len() >= 2, "{segs:?}");
    let first = &segs[0];
    let mut bytes = fs::read(first).expect("read");
    bytes[100] ^= 0x55;
    fs::write(first, &bytes).expect("write");
    match Wal::open(h.wal_dir(), small_wal(IoBackendChoice::Auto)) {
        Err(WalError::Corrupt { path, offset, .. }) => {
            assert_eq!(&path, first);
            assert!(offset <= 100, "offset {offset}");
        }
        Err(other) => panic!("expected corruption, got {other}"),
        Ok(_) => panic!("damaged closed segment accepted"),
    }
}

/// The scrub's check asks between blocks whether to go on: a stopping
/// server then need not wait for it to read a file of gigabytes to its
/// end (a bench's restart waited 9 s for one). Asked to go on, it checks
/// every entry, as `check_all` does.
#[test]
fn a_store_file_check_stops_between_blocks_when_asked() {
    let (_h, path) = closed_with_one_store_file(400);
    let reader = SstReader::open(&path, 1, BlockCache::new(1 << 20), false, false).expect("open");
    assert!(reader.block_count() > 4, "{} blocks", reader.block_count());

    let asked = std::cell::Cell::new(0usize);
    let stopped = reader
        .check_all_while(&|| {
            asked.set(asked.get() + 1);
            asked.get() <= 3
        })
        .expect("a clean file");
    assert_eq!(stopped, None, "the check went on past its stop");
    assert_eq!(asked.get(), 4, "asked once a block, then stopped");

    let whole = reader.check_all_while(&|| true).expect("a clean file");
    assert_eq!(whole, Some(800));
    assert_eq!(reader.check_all().expect("a clean file"), 800);
}
