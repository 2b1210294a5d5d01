//! `DATA_BLOCK_ENCODING => TIME_SERIES`: store files written by column with
//! time-series codecs read back exactly what PREFIX files do — TSBS rows,
//! versions, deletes, TTLs, every value type — at a fraction of the size,
//! and an alter takes effect on new files and at the next major compaction.

mod common;

use common::{Harness, files_in, foreground_options, small_wal};
use halite::cell::RowMutation;
use halite::region::read::{Get, Scan};
use halite::region::wal::io::IoBackendChoice;
use halite::schema::{Compression, DataBlockEncoding, Durability, FamilyDescriptor};
use halite::tsbs::{self, CPU_FIELDS};
use halite::value::Value;

const HOSTS: u64 = 20;
const STEPS: u64 = 500;

fn family(encoding: DataBlockEncoding) -> FamilyDescriptor {
    FamilyDescriptor::new("cpu")
        .compression(Compression::Snappy)
        .versions(3)
        .data_block_encoding(encoding)
}

fn tsbs_rows(steps: std::ops::Range<u64>) -> Vec<RowMutation> {
    let mut rows = Vec::new();
    for host in 0..HOSTS {
        for step in steps.clone() {
            let ts = tsbs::T0_MS + step * tsbs::INTERVAL_MS;
            rows.push(tsbs::cpu_row("cpu", host, step, ts));
        }
    }
    rows
}

/// What a real table also holds: versions of one cell, deletes of every
/// kind, cells with a TTL, and values of every type (and untyped bytes).
fn odd_rows() -> Vec<RowMutation> {
    let t = tsbs::T0_MS;
    vec![
        RowMutation::new("odd-a")
            .put("cpu", "v", t, Value::Float(1.5).encode())
            .put("cpu", "v", t + 1, Value::Float(f64::MIN_POSITIVE).encode())
            .put(
                "cpu",
                "v",
                t + 2,
                Value::Float(std::f64::consts::PI).encode(),
            ),
        RowMutation::new("odd-b")
            .put("cpu", "i", t, Value::Int(i64::MIN).encode())
            .put("cpu", "u", t, Value::Uint(u64::MAX).encode())
            .put("cpu", "s", t, Value::Str("idle".into()).encode())
            .put("cpu", "b", t, Value::Bool(true).encode())
            .put("cpu", "raw", t, b"\x00\xffbytes".to_vec())
            .put_with_ttl("cpu", "short", t, Value::Float(2.0).encode(), 3_600_000),
        RowMutation::new("odd-c")
            .put("cpu", "x", t, Value::Float(-0.0).encode())
            .put("cpu", "y", t, Value::Float(1e300).encode()),
        RowMutation::new("odd-c").delete_column("cpu", "x", Some(t + 5)),
        RowMutation::new("odd-d")
            .put("cpu", "x", t, Value::Float(1.0).encode())
            .put("cpu", "y", t, Value::Float(2.0).encode()),
        RowMutation::new("odd-d").delete_version("cpu", "y", t),
        RowMutation::new("odd-e").put("cpu", "x", t, Value::Float(1.0).encode()),
        RowMutation::new("odd-e").delete_family("cpu", Some(t + 1)),
    ]
}

fn harness(encoding: DataBlockEncoding) -> Harness {
    Harness::new(
        vec![family(encoding)],
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    )
}

fn write(h: &Harness, rows: &[RowMutation]) {
    for chunk in rows.chunks(1000) {
        h.region()
            .mutate(chunk, Durability::SyncWal)
            .expect("write");
    }
}

fn scan_all(h: &Harness, reverse: bool) -> Vec<halite::Row> {
    h.region()
        .scan(&Scan {
            max_versions: 3,
            reverse,
            ..Scan::default()
        })
        .expect("scan")
        .rows
}

fn store_bytes(h: &Harness) -> u64 {
    files_in(&h.region_dir(), "sst")
        .iter()
        .map(|p| std::fs::metadata(p).expect("stat").len())
        .sum()
}

#[test]
fn time_series_files_read_back_what_prefix_files_do_at_a_fraction_of_the_size() {
    let plain = harness(DataBlockEncoding::Prefix);
    let ts = harness(DataBlockEncoding::TimeSeries);
    let rows: Vec<RowMutation> = tsbs_rows(0..STEPS).into_iter().chain(odd_rows()).collect();
    for h in [&plain, &ts] {
        write(h, &rows);
        h.region().flush().expect("flush");
    }
    let expected = scan_all(&plain, false);
    assert_eq!(expected.len() as u64, HOSTS * STEPS + 4, "odd-e is deleted");
    assert_eq!(scan_all(&ts, false), expected);
    assert_eq!(scan_all(&ts, true), scan_all(&plain, true));
    for (host, step) in [(0, 0), (7, 123), (19, STEPS - 1)] {
        let ts_ms = tsbs::T0_MS + step * tsbs::INTERVAL_MS;
        let get = Get::new(tsbs::cpu_row_key(host, ts_ms));
        let row = ts.region().get(&get).expect("get").expect("row");
        assert_eq!(Some(row.clone()), plain.region().get(&get).expect("get"));
        assert_eq!(row.cells.len(), CPU_FIELDS.len());
        let first = CPU_FIELDS
            .iter()
            .position(|f| f.as_bytes() == &row.cells[0].qualifier[..])
            .expect("a cpu field");
        assert_eq!(
            Value::decode(&row.cells[0].value),
            Some(Value::Float(tsbs::cpu_value(host, step, first)))
        );
    }
    // And again after a reopen, from disk rather than the block cache.
    let mut ts = ts;
    ts.reopen_clean();
    assert_eq!(scan_all(&ts, false), expected);

    let (plain_bytes, ts_bytes) = (store_bytes(&plain), store_bytes(&ts));
    let values = HOSTS * STEPS * CPU_FIELDS.len() as u64;
    let per_value = ts_bytes as f64 / values as f64;
    assert!(
        ts_bytes * 5 < plain_bytes,
        "TIME_SERIES {ts_bytes} bytes against PREFIX+SNAPPY {plain_bytes}"
    );
    assert!(per_value < 1.8, "{per_value:.2} bytes per value");
}

#[test]
fn an_alter_to_time_series_applies_to_new_files_and_the_next_major_compaction() {
    let mut h = harness(DataBlockEncoding::Prefix);
    write(&h, &tsbs_rows(0..STEPS / 2));
    h.region().flush().expect("flush");
    let before = store_bytes(&h);

    // The alter: new files use it; the old file stays as it was.
    h.families = vec![family(DataBlockEncoding::TimeSeries)];
    h.reopen_clean();
    write(&h, &tsbs_rows(STEPS / 2..STEPS));
    h.region().flush().expect("flush");
    let new_file = store_bytes(&h) - before;
    assert!(new_file * 5 < before, "new file {new_file}, old {before}");

    let expected = scan_all(&h, false);
    assert_eq!(expected.len() as u64, HOSTS * STEPS);
    h.region().compact(true).expect("major compaction");
    assert_eq!(h.region().file_counts()[&b"cpu".to_vec()], 1);
    assert!(store_bytes(&h) * 4 < before + new_file);
    assert_eq!(scan_all(&h, false), expected);
}

#[test]
fn scans_of_some_columns_read_only_those_and_answer_as_prefix_files_do() {
    let plain = harness(DataBlockEncoding::Prefix);
    let ts = harness(DataBlockEncoding::TimeSeries);
    let rows: Vec<RowMutation> = tsbs_rows(0..STEPS).into_iter().chain(odd_rows()).collect();
    for h in [&plain, &ts] {
        write(h, &rows);
        h.region().flush().expect("flush");
        // Deletes after the flush, in a second file: they must still mask.
        h.region()
            .mutate(
                &[
                    RowMutation::new("odd-a").delete_column("cpu", "v", None),
                    RowMutation::new(tsbs::cpu_row_key(3, tsbs::T0_MS)).delete_family("cpu", None),
                ],
                Durability::SyncWal,
            )
            .expect("deletes");
        h.region().flush().expect("flush");
    }
    let selections: [&[&str]; 4] = [
        &["usage_user"],
        &["usage_idle", "usage_user"],
        &["v", "x", "i"],
        &["no_such_field"],
    ];
    for sel in selections {
        let columns = halite::region::read::Columns {
            families: Vec::new(),
            columns: sel
                .iter()
                .map(|q| (b"cpu".to_vec(), q.as_bytes().to_vec()))
                .collect(),
        };
        for reverse in [false, true] {
            let scan = Scan {
                columns: columns.clone(),
                max_versions: 3,
                reverse,
                ..Scan::default()
            };
            // Twice: the second answer comes from the cached projected blocks.
            for _ in 0..2 {
                let want = plain.region().scan(&scan).expect("scan").rows;
                let got = ts.region().scan(&scan).expect("scan").rows;
                assert_eq!(got, want, "columns {sel:?}, reverse {reverse}");
            }
        }
        // And a whole-row read in between changes nothing.
        assert_eq!(scan_all(&ts, false), scan_all(&plain, false));
    }
    let user_rows = ts
        .region()
        .scan(&Scan {
            columns: halite::region::read::Columns {
                families: Vec::new(),
                columns: vec![(b"cpu".to_vec(), b"usage_user".to_vec())],
            },
            ..Scan::default()
        })
        .expect("scan")
        .rows;
    // Every host's rows but the one whose family was deleted.
    assert_eq!(user_rows.len() as u64, HOSTS * STEPS - 1);
    assert!(user_rows.iter().all(|r| r.cells.len() == 1));
}

/// A minor compaction writes a data block that no other input's key falls
/// inside as its file holds it, and merges only blocks whose keys
/// interleave with another file's: files of in-order points (one flush's
/// points of a series before the flush before's) interleave only at the
/// seams between series. Late points and points written again land among
/// earlier ones and are merged (the newer value wins); a file that spans
/// two time windows is merged too, so each output stays in its window.
/// Throughout, the answers are those of the files before, and every file
/// passes its own check (entries, time range, first and last key, index).
#[test]
fn a_minor_compaction_copies_the_blocks_no_other_file_falls_inside() {
    use halite::region::sst::SstReader;
    use halite::region::sst::cache::BlockCache;
    use halite::schema::BloomType;
    use std::sync::atomic::Ordering::Relaxed;

    const HOUR: u64 = 3_600_000;
    let h = Harness::new(
        vec![
            FamilyDescriptor::new("cpu")
                .compression(Compression::Snappy)
                .data_block_encoding(DataBlockEncoding::TimeSeries)
                .bloom(BloomType::None)
                .block_size(4096)
                .time_window(3_600),
        ],
        {
            // Three flushes of about one size make a tier of the window
            // still filling, merged at once.
            let mut options = foreground_options();
            options.compaction.tier_files = 3;
            options
        },
        small_wal(IoBackendChoice::Auto),
    );
    let window_of = |ts: u64| ts / HOUR;
    // The hour boundary after the first point: steps past it are the
    // next window's.
    let boundary_step = (window_of(tsbs::T0_MS) + 1) * HOUR;
    let boundary_step = (boundary_step - tsbs::T0_MS).div_ceil(tsbs::INTERVAL_MS);
    assert!((200..300).contains(&boundary_step), "{boundary_step}");
    let flush = |rows: Vec<RowMutation>| {
        write(&h, &rows);
        h.region().flush().expect("flush");
    };
    let check_files = || {
        for path in h.region().file_paths() {
            let reader =
                SstReader::open(&path, 1, BlockCache::new(1 << 20), false, false).expect("open");
            reader.check_all().expect("a compacted file checks out");
        }
        for (lo, hi) in h.region().file_time_ranges(b"cpu") {
            assert_eq!(window_of(lo), window_of(hi), "a file spans windows");
        }
    };
    let blocks = || {
        let s = h.region().stats();
        (
            s.compaction_blocks_copied.load(Relaxed),
            s.compaction_blocks_merged.load(Relaxed),
        )
    };

    // Two flushes of in-order points, then as many points again among
    // those of both, written again with new values: one window, merged
    // once.
    flush(tsbs_rows(0..100));
    flush(tsbs_rows(100..200));
    let mut late = Vec::new();
    for host in 0..HOSTS {
        for step in (50..100).chain(150..200) {
            let ts = tsbs::T0_MS + step * tsbs::INTERVAL_MS;
            late.push(tsbs::cpu_row("cpu", host, step + 1_000, ts));
        }
    }
    flush(late);
    let before = scan_all(&h, false);
    h.region().compact(false).expect("minor");
    assert_eq!(h.region().file_paths().len(), 1);
    let (copied, merged) = blocks();
    assert!(copied > 0 && merged > 0, "{copied} copied, {merged} merged");
    assert_eq!(scan_all(&h, false), before);
    check_files();
    let rewritten = Get::new(tsbs::cpu_row_key(3, tsbs::T0_MS + 155 * tsbs::INTERVAL_MS));
    let row = h.region().get(&rewritten).expect("get").expect("row");
    assert_eq!(row.cells.len(), CPU_FIELDS.len());
    for cell in &row.cells {
        let field = CPU_FIELDS
            .iter()
            .position(|f| f.as_bytes() == &cell.qualifier[..])
            .expect("a cpu field");
        assert_eq!(
            Value::decode(&cell.value),
            Some(Value::Float(tsbs::cpu_value(3, 1_155, field))),
            "the value written last"
        );
    }

    // In-order flushes across the hour's end: the one that spans it is
    // merged and split at it; the others are copied.
    flush(tsbs_rows(200..300));
    flush(tsbs_rows(300..400));
    flush(tsbs_rows(400..500));
    let before = scan_all(&h, false);
    h.region().compact(false).expect("minor");
    assert_eq!(scan_all(&h, false), before);
    check_files();
    let (copied, merged) = blocks();

    // In-order flushes within one window: a block is merged only where a
    // series' points end in it (at most one a series a file), and the
    // rest are copied.
    flush(tsbs_rows(500..545));
    flush(tsbs_rows(545..590));
    flush(tsbs_rows(590..635));
    let before = scan_all(&h, false);
    h.region().compact(false).expect("minor");
    let (copied_now, merged_now) = (blocks().0 - copied, blocks().1 - merged);
    assert!(
        merged_now <= 3 * HOSTS && copied_now > 2 * merged_now,
        "{copied_now} copied, {merged_now} merged"
    );
    assert_eq!(scan_all(&h, false), before);
    check_files();
}
