//! Model-based property test: random puts, deletes, flushes, compactions,
//! clock moves and reopens, checked after every step against a plain
//! in-memory oracle for Get and for forward and reverse scans with limits,
//! offsets, continuation tokens, time ranges and filters.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{Harness, foreground_options, small_wal};
use halite::cell::{Cell, CellKind, Row, RowMutation};
use halite::region::read::{
    CellSink, Columns, CompareOp, Filter, Get, KeyTimeWindow, Operand, RowsPerSeries, Scan,
    TimeRange,
};
use halite::region::wal::io::IoBackendChoice;
use halite::schema::{BloomType, Compression, Durability, FamilyDescriptor};
use proptest::prelude::*;

const BASE: u64 = 1_700_000_000_000;
/// Short rows, and rows holding a time at byte 1 (series `k` and `m`) for
/// scans with a key time window.
const ROWS: [&[u8]; 11] = [
    b"r0",
    b"r1",
    b"r10",
    b"r2",
    b"s",
    b"s\xff",
    b"k\0\0\0\0\0\0\0\x05",
    b"k\0\0\0\0\0\0\0\x09",
    b"k\0\0\0\0\0\0\0\x09x",
    b"m\0\0\0\0\0\0\0\x02",
    b"m\xff\xff\xff\xff\xff\xff\xff\xfa",
];
const QUALS: [&[u8]; 3] = [b"", b"q1", b"q2"];

fn families() -> Vec<FamilyDescriptor> {
    vec![
        FamilyDescriptor::new("a")
            .versions(3)
            .min_versions(1)
            .ttl_secs(10)
            .block_size(1024),
        FamilyDescriptor::new("b")
            .bloom(BloomType::RowCol)
            .compression(Compression::Snappy)
            .block_size(1024),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    Put {
        row: usize,
        fam: usize,
        qual: usize,
        ts: u64,
        value: u8,
        ttl: Option<u64>,
    },
    /// Several puts to one row in one atomic mutation.
    PutRow {
        row: usize,
        ts: u64,
        value: u8,
    },
    DeleteVersion {
        row: usize,
        fam: usize,
        qual: usize,
        ts: u64,
    },
    DeleteColumn {
        row: usize,
        fam: usize,
        qual: usize,
        ts: u64,
    },
    DeleteFamily {
        row: usize,
        fam: usize,
        ts: u64,
    },
    DeleteRow {
        row: usize,
        ts: u64,
    },
    Flush,
    MinorCompact,
    MajorCompact,
    Advance(u64),
    ReopenClean,
    ReopenUnflushed,
}

fn ts() -> impl Strategy<Value = u64> {
    (0u64..12).prop_map(|k| BASE + k * 1000)
}

fn op() -> impl Strategy<Value = Op> {
    let r = 0..ROWS.len();
    let f = 0usize..2;
    let q = 0..QUALS.len();
    prop_oneof![
        8 => (r.clone(), f.clone(), q.clone(), ts(), any::<u8>(), prop_oneof![Just(None), Just(Some(2000u64)), Just(Some(5000u64))])
            .prop_map(|(row, fam, qual, ts, value, ttl)| Op::Put { row, fam, qual, ts, value, ttl }),
        2 => (r.clone(), ts(), any::<u8>()).prop_map(|(row, ts, value)| Op::PutRow { row, ts, value }),
        1 => (r.clone(), f.clone(), q.clone(), ts()).prop_map(|(row, fam, qual, ts)| Op::DeleteVersion { row, fam, qual, ts }),
        1 => (r.clone(), f.clone(), q.clone(), ts()).prop_map(|(row, fam, qual, ts)| Op::DeleteColumn { row, fam, qual, ts }),
        1 => (r.clone(), f.clone(), ts()).prop_map(|(row, fam, ts)| Op::DeleteFamily { row, fam, ts }),
        1 => (r.clone(), ts()).prop_map(|(row, ts)| Op::DeleteRow { row, ts }),
        2 => Just(Op::Flush),
        1 => Just(Op::MinorCompact),
        1 => Just(Op::MajorCompact),
        2 => (0u64..6000).prop_map(Op::Advance),
        1 => Just(Op::ReopenClean),
        1 => Just(Op::ReopenUnflushed),
    ]
}

/// (row, family, qualifier, timestamp, kind) → (cell ttl, value)
type Key = (Vec<u8>, Vec<u8>, Vec<u8>, u64, CellKind);

#[derive(Default)]
struct Oracle {
    cells: BTreeMap<Key, (Option<u64>, Vec<u8>)>,
}

fn fam_desc(name: &[u8]) -> FamilyDescriptor {
    families()
        .into_iter()
        .find(|f| f.name == name)
        .expect("known family")
}

impl Oracle {
    #[allow(clippy::too_many_arguments)]
    fn put(
        &mut self,
        row: &[u8],
        fam: &[u8],
        qual: &[u8],
        ts: u64,
        kind: CellKind,
        ttl: Option<u64>,
        value: Vec<u8>,
    ) {
        self.cells.insert(
            (row.to_vec(), fam.to_vec(), qual.to_vec(), ts, kind),
            (ttl, value),
        );
    }

    /// The versions of a column a read sees, newest first: unmasked puts cut
    /// to VERSIONS, expired ones hidden beyond MIN_VERSIONS.
    fn column(
        &self,
        row: &[u8],
        fam: &[u8],
        qual: &[u8],
        now: u64,
    ) -> Vec<(u64, Option<u64>, Vec<u8>)> {
        let d = fam_desc(fam);
        let in_family = self.cells.iter().filter(|(k, _)| k.0 == row && k.1 == fam);
        let fam_del = in_family
            .clone()
            .filter(|(k, _)| k.4 == CellKind::DeleteFamily)
            .map(|(k, _)| k.3)
            .max();
        let col: Vec<_> = in_family.filter(|(k, _)| k.2 == qual).collect();
        let col_del = col
            .iter()
            .filter(|(k, _)| k.4 == CellKind::DeleteColumn)
            .map(|(k, _)| k.3)
            .max();
        let ver_del: BTreeSet<u64> = col
            .iter()
            .filter(|(k, _)| k.4 == CellKind::DeleteVersion)
            .map(|(k, _)| k.3)
            .collect();
        let mut puts: Vec<_> = col
            .iter()
            .filter(|(k, _)| k.4 == CellKind::Put)
            .filter(|(k, _)| fam_del.is_none_or(|d| k.3 > d) && col_del.is_none_or(|d| k.3 > d))
            .filter(|(k, _)| !ver_del.contains(&k.3))
            .map(|(k, (ttl, v))| (k.3, *ttl, v.clone()))
            .collect();
        puts.sort_by_key(|p| std::cmp::Reverse(p.0));
        puts.truncate(d.versions as usize);
        puts.into_iter()
            .enumerate()
            .filter(|(i, (ts, ttl, _))| {
                let ttl = match (d.ttl_secs.map(|s| s * 1000), *ttl) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                let expired = ttl.is_some_and(|t| ts + t <= now);
                (*i as u32) < d.min_versions || !expired
            })
            .map(|(_, c)| c)
            .collect()
    }

    fn columns_of(&self, row: &[u8]) -> BTreeSet<(Vec<u8>, Vec<u8>)> {
        self.cells
            .keys()
            .filter(|k| k.0 == row)
            .map(|k| (k.1.clone(), k.2.clone()))
            .collect()
    }

    fn read_row(&self, row: &[u8], scan: &Scan, now: u64) -> Option<Row> {
        let mut cells = Vec::new();
        for (fam, qual) in self.columns_of(row) {
            let c = &scan.columns;
            let wanted = (c.families.is_empty() && c.columns.is_empty())
                || c.families.contains(&fam)
                || c.columns.contains(&(fam.clone(), qual.clone()));
            if !wanted {
                continue;
            }
            let mut n = 0;
            for (ts, _, value) in self.column(row, &fam, &qual, now) {
                if !scan.time_range.contains(ts) {
                    continue;
                }
                if n >= scan.max_versions {
                    break;
                }
                let pass = scan.filters.iter().all(|f| match f {
                    Filter::ColumnPrefix(p) => qual.starts_with(p),
                    Filter::Value { op, operand } => operand.passes(*op, &value),
                    _ => true,
                });
                if pass {
                    n += 1;
                    cells.push(Cell {
                        family: fam.clone().into(),
                        qualifier: qual.clone().into(),
                        timestamp: ts,
                        value: value.into(),
                    });
                }
            }
        }
        let row_ok = scan.filters.iter().all(|f| match f {
            Filter::SingleColumnValue {
                family,
                qualifier,
                op,
                operand,
                filter_if_missing,
            } => match cells
                .iter()
                .find(|c| c.family == family && c.qualifier == qualifier)
            {
                Some(c) => operand.passes(*op, &c.value),
                None => !filter_if_missing,
            },
            _ => true,
        });
        (!cells.is_empty() && row_ok).then(|| Row {
            key: row.to_vec(),
            cells,
        })
    }

    fn scan(&self, scan: &Scan, now: u64) -> Vec<Row> {
        let rows: BTreeSet<Vec<u8>> = self.cells.keys().map(|k| k.0.clone()).collect();
        let mut out: Vec<Row> = rows
            .into_iter()
            .filter(|r| scan.start.as_ref().is_none_or(|s| r >= s))
            .filter(|r| scan.stop.as_ref().is_none_or(|s| r < s))
            .filter(|r| scan.prefix.as_ref().is_none_or(|p| r.starts_with(p)))
            .filter(|r| {
                scan.key_window.is_none_or(|w| {
                    w.time_of(r)
                        .is_some_and(|t| t >= w.start && (w.end == u64::MAX || t < w.end))
                })
            })
            .filter_map(|r| self.read_row(&r, scan, now))
            .collect();
        if scan.reverse {
            out.reverse();
        }
        if let Some(limit) = scan.rows_per_series {
            let mut seen: Option<(Vec<u8>, usize)> = None;
            out.retain(|r| {
                let series = r.key.get(..limit.series_len).unwrap_or(&r.key).to_vec();
                let n = match &mut seen {
                    Some((s, n)) if *s == series => {
                        *n += 1;
                        *n
                    }
                    _ => {
                        seen = Some((series, 1));
                        1
                    }
                };
                n <= limit.rows
            });
        }
        let out = out.into_iter().skip(scan.offset);
        match scan.limit {
            Some(l) => out.take(l).collect(),
            None => out.collect(),
        }
    }

    /// What a major compaction leaves: every column's visible versions and
    /// no markers.
    fn major_compact(&mut self, now: u64) {
        let columns: BTreeSet<(Vec<u8>, Vec<u8>, Vec<u8>)> = self
            .cells
            .keys()
            .map(|k| (k.0.clone(), k.1.clone(), k.2.clone()))
            .collect();
        let mut next = BTreeMap::new();
        for (row, fam, qual) in columns {
            for (ts, ttl, value) in self.column(&row, &fam, &qual, now) {
                next.insert(
                    (row.clone(), fam.clone(), qual.clone(), ts, CellKind::Put),
                    (ttl, value),
                );
            }
        }
        self.cells = next;
    }
}

fn queries() -> Vec<Scan> {
    let mut v = vec![
        Scan {
            max_versions: 3,
            ..Scan::new()
        },
        Scan {
            max_versions: 3,
            reverse: true,
            ..Scan::new()
        },
        Scan {
            offset: 1,
            limit: Some(2),
            ..Scan::new()
        },
        Scan {
            offset: 1,
            limit: Some(2),
            reverse: true,
            ..Scan::new()
        },
        Scan {
            prefix: Some(b"r1".to_vec()),
            max_versions: 2,
            ..Scan::new()
        },
        Scan {
            start: Some(b"r1".to_vec()),
            stop: Some(b"s".to_vec()),
            reverse: true,
            ..Scan::new()
        },
        Scan {
            time_range: TimeRange {
                min: BASE + 2000,
                max: BASE + 7000,
            },
            max_versions: 3,
            ..Scan::new()
        },
        Scan {
            columns: Columns {
                families: vec![b"b".to_vec()],
                columns: vec![(b"a".to_vec(), b"q1".to_vec())],
            },
            max_versions: 3,
            ..Scan::new()
        },
        // Skips over unwanted columns to the next wanted one and family.
        Scan {
            columns: Columns {
                families: vec![],
                columns: vec![
                    (b"a".to_vec(), b"q2".to_vec()),
                    (b"b".to_vec(), b"q1".to_vec()),
                ],
            },
            max_versions: 2,
            ..Scan::new()
        },
        Scan {
            filters: vec![Filter::ColumnPrefix(b"q".to_vec())],
            max_versions: 3,
            ..Scan::new()
        },
        Scan {
            filters: vec![Filter::Value {
                op: CompareOp::GreaterOrEqual,
                operand: Operand::Bytes(vec![128]),
            }],
            ..Scan::new()
        },
        Scan {
            filters: vec![Filter::SingleColumnValue {
                family: b"b".to_vec(),
                qualifier: b"q1".to_vec(),
                op: CompareOp::Less,
                operand: Operand::Bytes(vec![100]),
                filter_if_missing: true,
            }],
            ..Scan::new()
        },
    ];
    v.push(Scan {
        limit: Some(1),
        ..Scan::new()
    });
    // Key time windows: rows too short to hold a time are never in one;
    // the rest of a series is skipped by seeks either way.
    for (reversed, start, end) in [
        (false, 3, 9),
        (false, 9, u64::MAX),
        (true, 4, 6),
        (true, 0, 0),
    ] {
        let key_window = Some(KeyTimeWindow {
            at: 1,
            reversed,
            start,
            end,
        });
        for reverse in [false, true] {
            v.push(Scan {
                key_window,
                reverse,
                max_versions: 2,
                ..Scan::new()
            });
        }
        v.push(Scan {
            key_window,
            offset: 1,
            limit: Some(1),
            ..Scan::new()
        });
    }
    // Rows per series (series `k`, `m`, `r`, `s` by their first byte),
    // alone, with a key window, and paged.
    for (reverse, rows) in [(false, 1), (true, 1), (false, 2), (true, 2)] {
        let rows_per_series = Some(RowsPerSeries {
            series_len: 1,
            rows,
        });
        v.push(Scan {
            rows_per_series,
            reverse,
            ..Scan::new()
        });
        v.push(Scan {
            rows_per_series,
            key_window: Some(KeyTimeWindow {
                at: 1,
                reversed: false,
                start: 0,
                end: 9,
            }),
            reverse,
            offset: 1,
            ..Scan::new()
        });
    }
    v
}

fn check(h: &Harness, oracle: &Oracle, step: usize) -> Result<(), TestCaseError> {
    let now = h.clock.now_ms_public();
    let region = h.region();
    for (qi, q) in queries().iter().enumerate() {
        let got = region
            .scan(q)
            .map_err(|e| TestCaseError::fail(format!("scan {qi}: {e}")))?;
        let want = oracle.scan(q, now);
        prop_assert_eq!(&got.rows, &want, "step {} query {} {:?}", step, qi, q);
        // Cells streamed without building rows are the rows' cells.
        let mut streamed = RowsOfCells::default();
        region
            .scanner(q)
            .and_then(|mut s| s.scan_cells(&mut streamed))
            .map_err(|e| TestCaseError::fail(format!("scan_cells {qi}: {e}")))?;
        prop_assert_eq!(
            &streamed.rows(),
            &want,
            "step {} query {} streamed as cells",
            step,
            qi
        );
        // Paging with continuation tokens yields the same rows as one scan.
        let mut paged = Vec::new();
        let mut page_scan = Scan {
            limit: Some(2),
            offset: 0,
            ..q.clone()
        };
        // A scan's token does not carry how many rows of its last series
        // were returned: series queries page rows per series with tokens
        // of their own (tests/query.rs).
        if q.limit.is_none() && q.offset == 0 && q.rows_per_series.is_none() {
            loop {
                let page = region
                    .scan(&page_scan)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                paged.extend(page.rows);
                match page.continuation {
                    Some(t) => page_scan.continuation = Some(t),
                    None => break,
                }
            }
            prop_assert_eq!(&paged, &want, "step {} paged query {}", step, qi);
        }
    }
    for row in ROWS {
        for (max_versions, columns) in [
            (1, Columns::all()),
            (3, Columns::all()),
            (
                2,
                Columns {
                    families: vec![],
                    columns: vec![
                        (b"b".to_vec(), b"q2".to_vec()),
                        (b"a".to_vec(), b"".to_vec()),
                    ],
                },
            ),
        ] {
            let get = Get {
                row: row.to_vec(),
                columns: columns.clone(),
                time_range: TimeRange::default(),
                max_versions,
            };
            let got = region
                .get(&get)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let want = oracle.read_row(
                row,
                &Scan {
                    columns,
                    max_versions,
                    ..Scan::new()
                },
                now,
            );
            prop_assert_eq!(got, want, "step {} get {:?}", step, row);
        }
    }
    Ok(())
}

/// Rebuilds rows from a stream of cells; a row whose cells all resolved
/// away (deleted, expired, filtered) is no row.
#[derive(Default)]
struct RowsOfCells {
    rows: Vec<Row>,
}

impl RowsOfCells {
    fn rows(&self) -> Vec<Row> {
        self.rows
            .iter()
            .filter(|r| !r.cells.is_empty())
            .cloned()
            .collect()
    }
}

impl CellSink for RowsOfCells {
    fn start_row(&mut self, row: &[u8]) -> bool {
        self.rows.push(Row {
            key: row.to_vec(),
            cells: Vec::new(),
        });
        true
    }

    fn cell(&mut self, family: &[u8], qualifier: &[u8], timestamp: u64, value: &[u8]) {
        let row = self.rows.last_mut().expect("a cell comes after its row");
        row.cells.push(Cell {
            family: family.to_vec().into(),
            qualifier: qualifier.to_vec().into(),
            timestamp,
            value: value.to_vec().into(),
        });
    }
}

trait NowMs {
    fn now_ms_public(&self) -> u64;
}
impl NowMs for halite::clock::ManualClock {
    fn now_ms_public(&self) -> u64 {
        use halite::clock::Clock;
        self.now_ms()
    }
}

fn run(ops: Vec<Op>, io: IoBackendChoice) -> Result<(), TestCaseError> {
    let mut h = Harness::new(families(), foreground_options(), small_wal(io));
    h.clock.set(BASE + 3000);
    let mut oracle = Oracle::default();
    let fam = |i: usize| {
        if i == 0 {
            b"a".as_slice()
        } else {
            b"b".as_slice()
        }
    };
    for (step, op) in ops.into_iter().enumerate() {
        let durability = if step % 3 == 0 {
            Durability::AsyncWal
        } else {
            Durability::SyncWal
        };
        let now = h.clock.now_ms_public();
        let write = |h: &Harness, m: RowMutation| {
            h.region()
                .mutate(&[m], durability)
                .map_err(|e| TestCaseError::fail(format!("write: {e}")))
        };
        match op {
            Op::Put {
                row,
                fam: f,
                qual,
                ts,
                value,
                ttl,
            } => {
                let mut m = RowMutation::new(ROWS[row]);
                m = match ttl {
                    Some(t) => m.put_with_ttl(fam(f), QUALS[qual], ts, vec![value], t),
                    None => m.put(fam(f), QUALS[qual], ts, vec![value]),
                };
                write(&h, m)?;
                oracle.put(
                    ROWS[row],
                    fam(f),
                    QUALS[qual],
                    ts,
                    CellKind::Put,
                    ttl,
                    vec![value],
                );
            }
            Op::PutRow { row, ts, value } => {
                let m = RowMutation::new(ROWS[row])
                    .put("a", "q1", ts, vec![value])
                    .put("a", "q2", ts, vec![value.wrapping_add(1)])
                    .put("b", "q1", ts, vec![value.wrapping_add(2)]);
                write(&h, m)?;
                oracle.put(ROWS[row], b"a", b"q1", ts, CellKind::Put, None, vec![value]);
                oracle.put(
                    ROWS[row],
                    b"a",
                    b"q2",
                    ts,
                    CellKind::Put,
                    None,
                    vec![value.wrapping_add(1)],
                );
                oracle.put(
                    ROWS[row],
                    b"b",
                    b"q1",
                    ts,
                    CellKind::Put,
                    None,
                    vec![value.wrapping_add(2)],
                );
            }
            Op::DeleteVersion {
                row,
                fam: f,
                qual,
                ts,
            } => {
                write(
                    &h,
                    RowMutation::new(ROWS[row]).delete_version(fam(f), QUALS[qual], ts),
                )?;
                oracle.put(
                    ROWS[row],
                    fam(f),
                    QUALS[qual],
                    ts,
                    CellKind::DeleteVersion,
                    None,
                    vec![],
                );
            }
            Op::DeleteColumn {
                row,
                fam: f,
                qual,
                ts,
            } => {
                write(
                    &h,
                    RowMutation::new(ROWS[row]).delete_column(fam(f), QUALS[qual], Some(ts)),
                )?;
                oracle.put(
                    ROWS[row],
                    fam(f),
                    QUALS[qual],
                    ts,
                    CellKind::DeleteColumn,
                    None,
                    vec![],
                );
            }
            Op::DeleteFamily { row, fam: f, ts } => {
                write(
                    &h,
                    RowMutation::new(ROWS[row]).delete_family(fam(f), Some(ts)),
                )?;
                oracle.put(
                    ROWS[row],
                    fam(f),
                    b"",
                    ts,
                    CellKind::DeleteFamily,
                    None,
                    vec![],
                );
            }
            Op::DeleteRow { row, ts } => {
                write(&h, RowMutation::new(ROWS[row]).delete_row(Some(ts)))?;
                for f in [b"a", b"b"] {
                    oracle.put(ROWS[row], f, b"", ts, CellKind::DeleteFamily, None, vec![]);
                }
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
                oracle.major_compact(now);
            }
            Op::Advance(ms) => h.clock.advance(ms),
            Op::ReopenClean => h.reopen_clean(),
            Op::ReopenUnflushed => h.reopen_unflushed(),
        }
        check(&h, &oracle, step)?;
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("HALITE_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn region_matches_oracle(ops in proptest::collection::vec(op(), 1..40)) {
        run(ops, IoBackendChoice::Auto)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases() / 4 + 1, ..ProptestConfig::default() })]

    #[test]
    fn region_matches_oracle_on_sync_io_fallback(ops in proptest::collection::vec(op(), 1..30)) {
        run(ops, IoBackendChoice::Sync)?;
    }
}
