//! The column reader (`Region::scan_columns`, folding or reading the
//! first rows) against the row scanner: random series-shaped writes (several
//! versions, per-cell and family TTLs, values of every type, rows cut
//! across blocks), flushes, compactions, clock moves, reopens and now and
//! then a delete, checked after every step on every scan shape a column
//! read takes. Both must give the same rows and values; and the column
//! reader must have been the one reading when no source holds a marker.

mod common;

use std::sync::atomic::Ordering;

use common::{Harness, foreground_options, small_wal};
use halite::cell::RowMutation;
use halite::region::read::columns::{ColumnRead, ColumnSink, rows_by_column};
use halite::region::read::{Columns, Scan, TimeRange};
use halite::region::sst::columns::ColumnRuns;
use halite::region::wal::io::IoBackendChoice;
use halite::schema::{Compression, DataBlockEncoding, Durability, FamilyDescriptor};
use halite::value::Value;
use proptest::prelude::*;

const BASE: u64 = 1_700_000_000_000;
const SERIES: [&[u8]; 3] = [b"cpu\x00h1", b"cpu\x00h2", b"mem\x00h1"];
const QUALS: [&[u8]; 4] = [b"idle", b"system", b"user", b"x"];
const FAMILIES: [&[u8]; 2] = [b"t", b"v"];

fn families() -> Vec<FamilyDescriptor> {
    vec![
        // One version, no TTL: a measurement's fields.
        FamilyDescriptor::new("t")
            .data_block_encoding(DataBlockEncoding::TimeSeries)
            .block_size(1024),
        // Versions, MIN_VERSIONS and a family TTL, standard blocks.
        FamilyDescriptor::new("v")
            .versions(3)
            .min_versions(1)
            .ttl_secs(20)
            .compression(Compression::Snappy)
            .block_size(1024),
    ]
}

/// A series' row at step `t`: newest first, as open tag sets write them.
fn row_key(series: usize, t: u64) -> Vec<u8> {
    let mut k = SERIES[series].to_vec();
    k.extend_from_slice(&(u64::MAX - t).to_be_bytes());
    k
}

#[derive(Debug, Clone)]
enum Op {
    /// One point: every field of the row at one timestamp.
    Point {
        series: usize,
        t: u64,
        fam: usize,
        value: i64,
        kind: u8,
    },
    /// One cell, maybe another version of one written before.
    Cell {
        series: usize,
        t: u64,
        fam: usize,
        qual: usize,
        ts: u64,
        value: i64,
        ttl: Option<u64>,
    },
    /// A run of regular points (what time-series blocks are made of).
    Run {
        series: usize,
        from: u64,
        n: u64,
        fam: usize,
    },
    DeleteColumn {
        series: usize,
        t: u64,
        fam: usize,
        qual: usize,
    },
    Flush,
    MinorCompact,
    MajorCompact,
    Advance(u64),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, 0..40u64, 0..2usize, -50i64..50, 0..4u8)
            .prop_map(|(series, t, fam, value, kind)| Op::Point { series, t, fam, value, kind }),
        4 => (0..3usize, 0..40u64, 0..2usize, 0..4usize, 0..6u64, -50i64..50,
              prop::option::weighted(0.3, 1_000..30_000u64))
            .prop_map(|(series, t, fam, qual, ts, value, ttl)| Op::Cell {
                series, t, fam, qual, ts: BASE + ts * 1000, value, ttl,
            }),
        3 => (0..3usize, 0..40u64, 1..30u64, 0..2usize)
            .prop_map(|(series, from, n, fam)| Op::Run { series, from, n, fam }),
        1 => (0..3usize, 0..40u64, 0..2usize, 0..4usize)
            .prop_map(|(series, t, fam, qual)| Op::DeleteColumn { series, t, fam, qual }),
        2 => Just(Op::Flush),
        1 => Just(Op::MinorCompact),
        1 => Just(Op::MajorCompact),
        1 => (1_000..15_000u64).prop_map(Op::Advance),
        1 => Just(Op::Reopen),
    ]
}

fn value(kind: u8, v: i64) -> Vec<u8> {
    match kind {
        0 => Value::Float(v as f64 / 10.0),
        1 => Value::Int(v),
        2 => Value::Str(format!("s{v}")),
        _ => Value::Bool(v > 0),
    }
    .encode()
}

/// The scans a column read is asked: per series and family, all fields or
/// some (one never written), the whole series or a time slice of it, and
/// one across every series.
fn scans() -> Vec<Scan> {
    let mut out = Vec::new();
    let columns = |fam: &[u8], quals: &[&[u8]]| Columns {
        families: vec![],
        columns: quals.iter().map(|q| (fam.to_vec(), q.to_vec())).collect(),
    };
    for fam in FAMILIES {
        for (series, prefix) in SERIES.iter().enumerate() {
            out.push(Scan {
                prefix: Some(prefix.to_vec()),
                columns: columns(fam, &QUALS),
                ..Scan::new()
            });
            out.push(Scan {
                start: Some(row_key(series, 30)),
                stop: Some(row_key(series, 9)),
                prefix: Some(prefix.to_vec()),
                columns: columns(fam, &[b"user", b"idle", b"nope"]),
                ..Scan::new()
            });
        }
        out.push(Scan {
            columns: columns(fam, &[b"system"]),
            time_range: TimeRange {
                min: BASE + 1000,
                max: BASE + 4000,
            },
            ..Scan::new()
        });
    }
    out
}

type Rows = Vec<(Vec<u8>, Vec<(u32, Value)>)>;

fn read(h: &Harness, scan: &Scan, how: ColumnRead) -> Result<Rows, TestCaseError> {
    let mut rows = Vec::new();
    h.region()
        .scan_columns(scan, how, &mut |key: &[u8], cells: &[(u32, Value)]| {
            rows.push((key.to_vec(), cells.to_vec()));
            true
        })
        .map_err(|e| TestCaseError::fail(format!("scan_columns: {e}")))?;
    Ok(rows)
}

/// A fold's sink that takes blocks by column ([`ColumnRuns`]), keeping
/// every row it is given, and counting the blocks given by column.
#[derive(Default)]
struct RunsSink {
    rows: Rows,
    runs: usize,
}

impl ColumnSink for RunsSink {
    fn row(&mut self, key: &[u8], cells: &[(u32, Value)]) -> bool {
        self.rows.push((key.to_vec(), cells.to_vec()));
        true
    }

    fn takes_runs(&self) -> bool {
        true
    }

    fn runs(&mut self, runs: &ColumnRuns) -> bool {
        self.runs += 1;
        runs.each_row(&mut |key, cells| self.row(key, cells))
    }
}

/// A fold through a sink that takes runs: its rows, with each row's cells
/// by column (a run gives them so), and how many blocks came by column.
fn read_by_runs(h: &Harness, scan: &Scan) -> Result<(Rows, usize), TestCaseError> {
    let mut sink = RunsSink::default();
    h.region()
        .scan_columns(scan, ColumnRead::Fold, &mut sink)
        .map_err(|e| TestCaseError::fail(format!("scan_columns by runs: {e}")))?;
    Ok((by_column(sink.rows), sink.runs))
}

fn by_column(mut rows: Rows) -> Rows {
    for (_, cells) in &mut rows {
        cells.sort_by_key(|(c, _)| *c);
    }
    rows
}

/// The same scan through the row scanner: the reference.
fn read_by_row_scanner(h: &Harness, scan: &Scan) -> Result<Rows, TestCaseError> {
    let mut rows = Vec::new();
    let mut scanner = h
        .region()
        .scanner(scan)
        .map_err(|e| TestCaseError::fail(format!("scanner: {e}")))?;
    rows_by_column(&mut scanner, &scan.columns, &mut |key: &[u8],
                                                      cells: &[(
        u32,
        Value,
    )]| {
        rows.push((key.to_vec(), cells.to_vec()));
        true
    })
    .map_err(|e| TestCaseError::fail(format!("rows_by_column: {e}")))?;
    Ok(rows)
}

fn check(h: &Harness, step: usize, markers: bool) -> Result<(), TestCaseError> {
    let stats = h.region().stats();
    for (i, scan) in scans().iter().enumerate() {
        let by_rows = read_by_row_scanner(h, scan)?;
        // A fold, and reads of the first rows that go on past them (each
        // block walked again from its start for the next row or three).
        for how in [
            ColumnRead::Fold,
            ColumnRead::FirstRows(1),
            ColumnRead::FirstRows(3),
        ] {
            let before = stats.column_reads.load(Ordering::Relaxed);
            let by_columns = read(h, scan, how)?;
            let column_reader = stats.column_reads.load(Ordering::Relaxed) > before;
            prop_assert_eq!(
                &by_columns,
                &by_rows,
                "step {} scan {} {:?} {:?}",
                step,
                i,
                how,
                scan
            );
            if !markers {
                prop_assert!(
                    column_reader,
                    "step {} scan {}: not read by columns",
                    step,
                    i
                );
            }
        }
        // A fold whose sink takes runs gives the same rows.
        let (by_runs, _) = read_by_runs(h, scan)?;
        prop_assert_eq!(
            &by_runs,
            &by_column(by_rows.clone()),
            "step {} scan {} by runs {:?}",
            step,
            i,
            scan
        );
    }
    // Stopping early stops at the same row.
    let scan = &scans()[0];
    for how in [ColumnRead::Fold, ColumnRead::FirstRows(1)] {
        let mut seen = 0;
        h.region()
            .scan_columns(scan, how, &mut |_: &[u8], _: &[(u32, Value)]| {
                seen += 1;
                seen < 2
            })
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(seen <= 2);
    }
    Ok(())
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut h = Harness::new(
        families(),
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    h.clock.set(BASE + 5000);
    let mut markers = false;
    for (step, op) in ops.into_iter().enumerate() {
        let write = |h: &Harness, m: RowMutation| {
            h.region()
                .mutate(&[m], Durability::SyncWal)
                .map_err(|e| TestCaseError::fail(format!("write: {e}")))
        };
        match op {
            Op::Point {
                series,
                t,
                fam,
                value: v,
                kind,
            } => {
                let mut m = RowMutation::new(row_key(series, t));
                for (i, q) in QUALS[..3].iter().enumerate() {
                    m = m.put(FAMILIES[fam], *q, BASE + t * 100, value(kind, v + i as i64));
                }
                write(&h, m)?;
            }
            Op::Cell {
                series,
                t,
                fam,
                qual,
                ts,
                value: v,
                ttl,
            } => {
                let m = RowMutation::new(row_key(series, t));
                let bytes = value((v & 3) as u8, v);
                let m = match ttl {
                    Some(ttl) => m.put_with_ttl(FAMILIES[fam], QUALS[qual], ts, bytes, ttl),
                    None => m.put(FAMILIES[fam], QUALS[qual], ts, bytes),
                };
                write(&h, m)?;
            }
            Op::Run {
                series,
                from,
                n,
                fam,
            } => {
                let mut batch = Vec::new();
                for t in from..from + n {
                    let mut m = RowMutation::new(row_key(series, t));
                    for (i, q) in QUALS[..3].iter().enumerate() {
                        let v = (t as i64 * 7 + i as i64) % 23;
                        m = m.put(FAMILIES[fam], *q, BASE + t * 100, value(0, v));
                    }
                    batch.push(m);
                }
                h.region()
                    .mutate(&batch, Durability::SyncWal)
                    .map_err(|e| TestCaseError::fail(format!("write: {e}")))?;
            }
            Op::DeleteColumn {
                series,
                t,
                fam,
                qual,
            } => {
                markers = true;
                write(
                    &h,
                    RowMutation::new(row_key(series, t)).delete_column(
                        FAMILIES[fam],
                        QUALS[qual],
                        None,
                    ),
                )?;
            }
            Op::Flush => h
                .region()
                .flush()
                .map_err(|e| TestCaseError::fail(e.to_string()))?,
            Op::MinorCompact => h
                .region()
                .compact(false)
                .map_err(|e| TestCaseError::fail(e.to_string()))?,
            Op::MajorCompact => {
                h.region()
                    .flush()
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                h.region()
                    .compact(true)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            Op::Advance(ms) => h.clock.advance(ms),
            Op::Reopen => h.reopen_clean(),
        }
        // A major compaction keeps markers of columns it could not drop
        // all of; only a read that saw none must have been by columns.
        check(&h, step, markers)?;
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("HALITE_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn column_reads_answer_as_the_row_scanner(ops in proptest::collection::vec(op(), 1..40)) {
        run(ops)?;
    }
}

/// The column reader reads time-series blocks: many regular points of
/// one series, flushed, come back exactly, and a read that names two of
/// three fields gets only those.
#[test]
fn a_flushed_series_reads_back_by_columns() {
    let h = Harness::new(
        families(),
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    let mut batch = Vec::new();
    for t in 0..500u64 {
        let mut m = RowMutation::new(row_key(0, t));
        for (i, q) in QUALS[..3].iter().enumerate() {
            m = m.put(
                "t",
                *q,
                BASE + t * 10_000,
                Value::Float((t * 3 + i as u64) as f64 / 100.0).encode(),
            );
        }
        batch.push(m);
    }
    h.region().mutate(&batch, Durability::SyncWal).unwrap();
    h.region().flush().unwrap();
    let scan = Scan {
        prefix: Some(SERIES[0].to_vec()),
        columns: Columns {
            families: vec![],
            columns: vec![
                (b"t".to_vec(), b"user".to_vec()),
                (b"t".to_vec(), b"idle".to_vec()),
            ],
        },
        ..Scan::new()
    };
    let mut got = Vec::new();
    h.region()
        .scan_columns(
            &scan,
            ColumnRead::Fold,
            &mut |key: &[u8], cells: &[(u32, Value)]| {
                got.push((key.to_vec(), cells.to_vec()));
                true
            },
        )
        .unwrap();
    assert_eq!(
        h.region().stats().column_reads.load(Ordering::Relaxed),
        1,
        "read by the column reader"
    );
    assert_eq!(got.len(), 500);
    // Through a sink that takes runs: the same rows, most of the blocks
    // by column (the file's first block, read before the reader knew the
    // file held the rest, as rows).
    let (by_runs, runs) = read_by_runs(&h, &scan).unwrap();
    assert_eq!(by_runs, by_column(got.clone()));
    assert!(runs > 3, "blocks given by column: {runs}");
    for (n, (key, cells)) in got.iter().enumerate() {
        let t = 499 - n as u64;
        assert_eq!(key, &row_key(0, t));
        // Qualifier order: idle (column 1), then user (column 0).
        assert_eq!(
            cells,
            &vec![
                (1, Value::Float((t * 3) as f64 / 100.0)),
                (0, Value::Float((t * 3 + 2) as f64 / 100.0)),
            ]
        );
    }
}

/// A row a block boundary cuts in two is one row (the first version of
/// the reader's block decode gave its two halves as two rows).
#[test]
fn a_row_cut_by_a_block_boundary_is_one_row() {
    let ops = vec![
        Op::Point {
            series: 0,
            t: 0,
            fam: 0,
            value: 0,
            kind: 0,
        },
        Op::Run {
            series: 1,
            from: 0,
            n: 11,
            fam: 0,
        },
        Op::Point {
            series: 0,
            t: 1,
            fam: 0,
            value: 0,
            kind: 2,
        },
        Op::Flush,
    ];
    run(ops).unwrap();
}

/// A fold by column ends a series' run at a row of another series even
/// when that row holds none of the read's columns (the first version of
/// the block decode by column went on with the run there, and gave the
/// next series' point under the first series' key).
#[test]
fn a_row_without_the_read_columns_still_ends_a_run() {
    let ops = vec![
        Op::Point {
            series: 2,
            t: 10,
            fam: 0,
            value: 0,
            kind: 0,
        },
        Op::Cell {
            series: 2,
            t: 11,
            fam: 0,
            qual: 0,
            ts: BASE,
            value: 0,
            ttl: None,
        },
        Op::Point {
            series: 0,
            t: 10,
            fam: 0,
            value: 0,
            kind: 0,
        },
        Op::Flush,
    ];
    run(ops).unwrap();
}

/// A fold that reads a file by column once the MemStore's rows are
/// behind it goes on inside the block where its decode into rows stopped
/// (a row of versions cut by a block boundary): the cut row's rest is not
/// given again (a version of this change started the block over).
#[test]
fn a_fold_by_column_goes_on_where_the_rows_stopped() {
    let ops = vec![
        Op::Cell {
            series: 0,
            t: 26,
            fam: 1,
            qual: 1,
            ts: BASE,
            value: 0,
            ttl: None,
        },
        Op::Run {
            series: 0,
            from: 0,
            n: 13,
            fam: 1,
        },
        Op::MajorCompact,
        Op::Point {
            series: 0,
            t: 2,
            fam: 1,
            value: 0,
            kind: 0,
        },
    ];
    run(ops).unwrap();
}

/// A scan the row scanner refuses (an empty time range) the column
/// reader refuses too (the first version answered it with no rows).
#[test]
fn a_scan_the_row_scanner_refuses_is_refused_by_columns() {
    let h = Harness::new(
        families(),
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    let scan = Scan {
        columns: Columns {
            families: vec![],
            columns: vec![(b"t".to_vec(), b"user".to_vec())],
        },
        time_range: TimeRange { min: 10, max: 5 },
        ..Scan::new()
    };
    assert!(h.region().scanner(&scan).is_err());
    for how in [ColumnRead::Fold, ColumnRead::FirstRows(1)] {
        let err = h
            .region()
            .scan_columns(&scan, how, &mut |_: &[u8], _: &[(u32, Value)]| true)
            .expect_err("an empty time range is refused");
        assert!(err.to_string().contains("time range is empty"), "{err}");
    }
}
