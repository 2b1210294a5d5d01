//! Logical series queries over salted tables: the merged answer equals what
//! an unsalted table would return (checked against an oracle), pages with
//! continuation tokens cover it exactly once, a query that fixes the salt
//! fields reads one bucket, and pushed-down aggregates equal the oracle's.

use std::collections::BTreeMap;
use std::sync::Arc;

use halite::catalog::{CreateTable, TableName};
use halite::cell::RowMutation;
use halite::clock::{Clock, ManualClock};
use halite::key::{FieldValue, KeySchema};
use halite::query::engine::QueryEngine;
use halite::query::{AggFn, Aggregate, AggregatePage, Query, QueryPage};
use halite::region::RegionOptions;
use halite::region::compaction::CompactionOptions;
use halite::region::read::RowCells;
use halite::region::wal::WalOptions;
use halite::store::{Store, StoreOptions};
use halite::value::{Value, numeric};

const HOSTS: u64 = 30;
const POINTS: u64 = 60;
const FIELDS: [&str; 3] = ["usage_user", "usage_system", "usage_idle"];
const T0: u64 = 1_000_000;

/// The store and the query engine over it, wired as the service wires them.
struct Db {
    queries: QueryEngine,
}

impl std::ops::Deref for Db {
    type Target = Store;

    fn deref(&self) -> &Store {
        self.queries.store()
    }
}

impl Db {
    fn query(&self, name: &TableName, q: &Query) -> halite::Result<QueryPage> {
        self.queries.query(name, q)
    }

    fn aggregate(&self, name: &TableName, q: &Query) -> halite::Result<AggregatePage> {
        self.queries.aggregate(name, q)
    }

    fn close(self) -> halite::Result<()> {
        let store = self.queries.store().clone();
        drop(self);
        match Arc::try_unwrap(store) {
            Ok(store) => store.close(),
            Err(_) => panic!("the store is still shared"),
        }
    }
}

fn open(dir: &std::path::Path) -> Db {
    open_with(dir, CompactionOptions::default())
}

/// [`open`] with `compaction`'s settings (a test that counts the files a
/// read passes by keeps them from being merged under it).
fn open_with(dir: &std::path::Path, compaction: CompactionOptions) -> Db {
    let store = Store::open(
        dir,
        StoreOptions {
            shards: 2,
            queue_depth: 8,
            wal: WalOptions {
                segment_size: 1 << 20,
                ..WalOptions::default()
            },
            region: RegionOptions {
                flush_size: 128 * 1024,
                compaction,
                ..RegionOptions::default()
            },
            block_cache_bytes: 8 << 20,
            flush_threads: 2,
            compaction_threads: 1,
            max_region_size: 10 << 30,
            global_memstore_bytes: 1 << 30,
        },
        Arc::new(ManualClock::new(1_700_000_000_000)) as Arc<dyn Clock>,
    )
    .expect("open store");
    Db {
        queries: QueryEngine::new(Arc::new(store), 4),
    }
}

fn table(name: &str, salt_from: &str) -> CreateTable {
    table_with_time(name, salt_from, "reversed_timestamp")
}

fn table_with_time(name: &str, salt_from: &str, time_type: &str) -> CreateTable {
    serde_json::from_str(&format!(
        r#"{{
          "name": "{name}",
          "families": [{{ "name": "f" }}],
          "key": {{
            "fields": [
              {{ "name": "metric", "type": "string", "width": 8 }},
              {{ "name": "host", "type": "string", "width": 12 }},
              {{ "name": "ts", "type": "{time_type}" }}
            ],
            "salt": {{ "buckets": 16, "from": "{salt_from}" }}
          }}
        }}"#
    ))
    .expect("request")
}

fn value(h: u64, p: u64, f: usize) -> f64 {
    ((h * 7919 + p * 104729 + f as u64 * 31) % 10_000) as f64 / 100.0
}

/// The key of host `h`'s `cpu` row at `ts`.
fn cpu_key(schema: &KeySchema, h: u64, ts: u64) -> Vec<u8> {
    schema
        .encode_ordered(&[
            FieldValue::Str("cpu".into()),
            FieldValue::Str(format!("host_{h:02}")),
            FieldValue::Uint(ts),
        ])
        .expect("key")
}

/// Oracle: unsalted key → (host, ts, field values).
type Oracle = BTreeMap<Vec<u8>, (u64, u64, [f64; 3])>;

fn load(store: &Store, name: &TableName) -> Oracle {
    let schema: KeySchema = store.table(name).expect("table").desc.key.clone();
    let salt = schema.salt.as_ref().map_or(0, |s| s.width);
    let mut oracle = Oracle::new();
    for p in 0..POINTS {
        let ts = T0 + p * 10_000;
        let rows: Vec<RowMutation> = (0..HOSTS)
            .map(|h| {
                let key = cpu_key(&schema, h, ts);
                let vals = [value(h, p, 0), value(h, p, 1), value(h, p, 2)];
                oracle.insert(key[salt..].to_vec(), (h, ts, vals));
                let mut m = RowMutation::new(key);
                for (i, f) in FIELDS.iter().enumerate() {
                    m = m.put("f", *f, ts, Value::Float(vals[i]).encode());
                }
                m
            })
            .collect();
        store.write(name, rows, None).expect("write");
        if p == POINTS / 2 {
            store.flush_all().expect("flush half");
        }
    }
    oracle
}

fn series(host: Option<u64>) -> Vec<(String, FieldValue)> {
    let mut s = vec![("metric".to_string(), FieldValue::Str("cpu".into()))];
    if let Some(h) = host {
        s.push(("host".into(), FieldValue::Str(format!("host_{h:02}"))));
    }
    s
}

fn unsalted(keys: impl Iterator<Item = Vec<u8>>) -> Vec<Vec<u8>> {
    keys.map(|k| k[1..].to_vec()).collect()
}

/// Every page of `q`, each asked with the token the one before gave.
fn all_pages(store: &Db, name: &TableName, q: &Query) -> Vec<QueryPage> {
    let mut q = q.clone();
    let mut pages = Vec::new();
    loop {
        let page = store.query(name, &q).expect("page");
        let next = page.continuation.as_ref().map(|t| t.encode());
        pages.push(page);
        match next {
            Some(t) => q.continuation = Some(t),
            None => return pages,
        }
    }
}

/// The unsalted keys of every row of `pages`, in order.
fn paged_keys(pages: &[QueryPage]) -> Vec<Vec<u8>> {
    unsalted(
        pages
            .iter()
            .flat_map(|p| p.rows.iter().map(|r| r.key().to_vec())),
    )
}

#[test]
fn merged_buckets_equal_an_unsalted_order_and_pages_cover_it_once() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path());
    let name = TableName::parse("cpu").expect("name");
    store.create_table(&table("cpu", "series")).expect("create");
    let oracle = load(&store, &name);

    // One metric across all hosts: fans out over 16 buckets.
    let q = Query {
        series: series(None),
        ..Query::default()
    };
    let page = store.query(&name, &q).expect("query");
    assert_eq!(page.buckets_scanned, 16);
    let want: Vec<Vec<u8>> = oracle.keys().cloned().collect();
    assert_eq!(unsalted(page.rows.iter().map(|r| r.key().to_vec())), want);
    assert!(page.rows.iter().all(|r| r.cell_count() == 3));

    // Reverse.
    let rev = store
        .query(
            &name,
            &Query {
                reverse: true,
                ..q.clone()
            },
        )
        .expect("reverse");
    let mut want_rev = want.clone();
    want_rev.reverse();
    assert_eq!(
        unsalted(rev.rows.into_iter().map(|r| r.key().to_vec())),
        want_rev
    );

    // Offset + limit, then pages of 77 with tokens, both directions.
    let window = store
        .query(
            &name,
            &Query {
                offset: 100,
                limit: Some(50),
                ..q.clone()
            },
        )
        .expect("window");
    assert_eq!(
        unsalted(window.rows.into_iter().map(|r| r.key().to_vec())),
        want[100..150].to_vec()
    );
    for reverse in [false, true] {
        let pages = all_pages(
            &store,
            &name,
            &Query {
                limit: Some(77),
                reverse,
                ..q.clone()
            },
        );
        let all = paged_keys(&pages);
        let expect = if reverse {
            want_rev.clone()
        } else {
            want.clone()
        };
        assert_eq!(all, expect, "reverse={reverse}");
        assert_eq!(pages.len(), expect.len().div_ceil(77));
    }

    // Fan-out with a time range that does not narrow the scan (the host field
    // sits between metric and ts): the old end of every series, paged. Each
    // bucket must not stop after limit rows counted before the filter.
    let old_end = Query {
        start_ms: Some(T0),
        end_ms: Some(T0 + 50_000),
        limit: Some(40),
        ..q.clone()
    };
    let got = paged_keys(&all_pages(&store, &name, &old_end));
    let want_old: Vec<Vec<u8>> = oracle
        .iter()
        .filter(|(_, (_, ts, _))| *ts < T0 + 50_000)
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(got.len(), HOSTS as usize * 5);
    assert!(
        got == want_old,
        "time-filtered fan-out pages differ from the oracle"
    );

    // One series fixes the salt: one bucket. A time range narrows it; the
    // newest points come first (reversed timestamps).
    let one = Query {
        series: series(Some(7)),
        start_ms: Some(T0 + 100_000),
        end_ms: Some(T0 + 200_000),
        fields: vec!["usage_idle".into()],
        ..q.clone()
    };
    let page = store.query(&name, &one).expect("one series");
    assert_eq!(page.buckets_scanned, 1);
    let got: Vec<(u64, f64)> = page
        .rows
        .iter()
        .map(|r| {
            assert_eq!(r.cell_count(), 1);
            assert_eq!(r.cell(0).qualifier, b"usage_idle");
            (
                r.cell(0).timestamp,
                numeric(r.cell(0).value).expect("number"),
            )
        })
        .collect();
    let mut want: Vec<(u64, f64)> = oracle
        .values()
        .filter(|(h, ts, _)| *h == 7 && (T0 + 100_000..T0 + 200_000).contains(ts))
        .map(|(_, ts, v)| (*ts, v[2]))
        .collect();
    want.sort_by_key(|p| std::cmp::Reverse(p.0));
    assert_eq!(got, want);
    assert_eq!(got.len(), 10);

    // Bad queries say what is wrong.
    let err = store
        .query(
            &name,
            &Query {
                series: vec![("host".into(), FieldValue::Str("x".into()))],
                ..q.clone()
            },
        )
        .unwrap_err();
    assert!(err.to_string().contains("leading key fields"), "{err}");
    store.close().expect("close");
}

/// Aggregates over a window in the middle of the data (each series' newest
/// rows come before it in key order, reversed timestamps) and over one
/// reaching the newest point (each series' first row is in it).
fn check_aggregates(store: &Db, name: &TableName, oracle: &Oracle) {
    check_aggregates_over(store, name, oracle, T0 + 50_000, Some(T0 + 450_000));
    check_aggregates_over(store, name, oracle, T0 + 320_000, None);
}

fn check_aggregates_over(
    store: &Db,
    name: &TableName,
    oracle: &Oracle,
    start: u64,
    end_ms: Option<u64>,
) {
    let end = end_ms.unwrap_or(u64::MAX);
    let q = Query {
        series: series(None),
        start_ms: Some(start),
        end_ms,
        fields: vec!["usage_user".into()],
        aggregate: Some(Aggregate {
            functions: vec![
                AggFn::Max,
                AggFn::Min,
                AggFn::Count,
                AggFn::Avg,
                AggFn::First,
                AggFn::Last,
                AggFn::Sum,
            ],
            downsample_ms: Some(100_000),
            downsample: None,
            group_by: None,
        }),
        ..Query::default()
    };
    let got = store.aggregate(name, &q).expect("aggregate").aggregates;
    // Oracle: per host and 100 s window over [start, end).
    let mut want: BTreeMap<(u64, u64), Vec<(u64, f64)>> = BTreeMap::new();
    for (h, ts, v) in oracle.values() {
        if (start..end).contains(ts) {
            want.entry((*h, ts - ts % 100_000))
                .or_default()
                .push((*ts, v[0]));
        }
    }
    assert_eq!(got.len(), want.len());
    for (g, ((h, w), pts)) in got.iter().zip(&want) {
        assert_eq!(g.series[1].1, FieldValue::Str(format!("host_{h:02}")));
        assert_eq!(g.window, Some(*w));
        assert_eq!(g.field, "usage_user");
        let vals: Vec<f64> = pts.iter().map(|p| p.1).collect();
        let first = pts.iter().min_by_key(|p| p.0).expect("points").1;
        let last = pts.iter().max_by_key(|p| p.0).expect("points").1;
        let sum: f64 = vals.iter().sum();
        let expect = [
            vals.iter().cloned().fold(f64::MIN, f64::max),
            vals.iter().cloned().fold(f64::MAX, f64::min),
            vals.len() as f64,
            sum / vals.len() as f64,
            first,
            last,
            sum,
        ];
        for ((f, v), e) in g.values.iter().zip(expect) {
            assert!(
                (v - e).abs() < 1e-9,
                "{f:?} of host {h} window {w}: {v} != {e}"
            );
        }
    }
}

#[test]
fn aggregates_pushed_into_buckets_equal_the_oracle() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path());
    // Series salt: a series lives in one bucket.
    let a = TableName::parse("by_series").expect("name");
    store
        .create_table(&table("by_series", "series"))
        .expect("create");
    let oracle = load(&store, &a);
    check_aggregates(&store, &a, &oracle);
    // Timestamp salt: every series spans all buckets; partials combine.
    let b = TableName::parse("by_time").expect("name");
    store
        .create_table(&table("by_time", "timestamp"))
        .expect("create");
    let oracle_b = load(&store, &b);
    assert_eq!(oracle, oracle_b, "same data, other salt");
    check_aggregates(&store, &b, &oracle_b);
    // Ascending time: a series' window starts after its oldest rows.
    let c = TableName::parse("ascending").expect("name");
    store
        .create_table(&table_with_time("ascending", "series", "timestamp"))
        .expect("create");
    let oracle_c = load(&store, &c);
    check_aggregates(&store, &c, &oracle_c);
    store.close().expect("close");
}

#[test]
fn series_queries_skip_files_by_rowprefix_bloom() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path());
    let name = TableName::parse("pfx").expect("name");
    let req: CreateTable = serde_json::from_str(
        r#"{
          "name": "pfx",
          "families": [{ "name": "f", "bloomfilter": "ROWPREFIX" }],
          "key": { "fields": [
            { "name": "metric", "type": "string", "width": 8 },
            { "name": "host", "type": "string", "width": 12 },
            { "name": "ts", "type": "reversed_timestamp" } ] }
        }"#,
    )
    .expect("request");
    store.create_table(&req).expect("create");
    let schema = store.table(&name).expect("table").desc.key.clone();
    // Four files, each with every fourth host: their key ranges overlap,
    // so only the bloom can tell which files hold a host.
    for round in 0..4 {
        let rows: Vec<RowMutation> = (0..HOSTS)
            .filter(|h| h % 4 == round)
            .flat_map(|h| (0..POINTS).map(move |p| (h, p)))
            .map(|(h, p)| {
                let ts = T0 + p * 10_000;
                let key = cpu_key(&schema, h, ts);
                RowMutation::new(key).put("f", "usage_user", ts, Value::Float(h as f64).encode())
            })
            .collect();
        store.write(&name, rows, None).expect("write");
        store.flush_all().expect("flush");
    }
    let table = store.table(&name).expect("table");
    let region = &table.regions()[0];
    assert_eq!(region.file_counts()[&b"f".to_vec()], 4);
    let skipped = || {
        region
            .stats()
            .files_skipped_by_bloom
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    // Hosts 4..26 fall inside every file's key range.
    for h in 4..26 {
        let q = Query {
            series: series(Some(h)),
            ..Query::default()
        };
        let page = store.query(&name, &q).expect("query");
        assert_eq!(page.rows.len(), POINTS as usize);
        assert!(
            page.rows
                .iter()
                .all(|r| numeric(r.cell(0).value) == Some(h as f64))
        );
    }
    let got = skipped();
    assert!(got >= 22 * 3 * 9 / 10, "skipped {got} of {} files", 22 * 3);
    store.close().expect("close");
}

/// Store files the reads of table `name` passed by for their time range.
fn files_skipped_by_time(store: &Store, name: &TableName) -> u64 {
    store
        .table(name)
        .expect("table")
        .regions()
        .iter()
        .map(|r| {
            r.stats()
                .files_skipped_by_time
                .load(std::sync::atomic::Ordering::Relaxed)
        })
        .sum()
}

/// A scan whose versions are its rows' key times (as an open-tag table's
/// are) passes store files wholly newer than its time range by; one that
/// holds a delete marker is still read, as its marker may mask a put in
/// range. Its rows are the plain scan's either way.
#[test]
fn scans_whose_versions_are_key_times_pass_newer_files_without_markers_by() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open_with(
        dir.path(),
        CompactionOptions {
            min_files: 1000,
            max_files: 1000,
            tier_files: 1000,
            ..CompactionOptions::default()
        },
    );
    let name = TableName::parse("cpu").expect("name");
    store.create_table(&table("cpu", "series")).expect("create");
    // Two generations of files: the older half of the points, the newer.
    let oracle = load(&store, &name);
    store.flush_all().expect("flush");
    let skipped = || files_skipped_by_time(&store, &name);
    let early = T0 + 10 * 10_000;
    let plain = halite::region::read::Scan {
        time_range: halite::region::read::TimeRange { min: 0, max: early },
        ..halite::region::read::Scan::default()
    };
    let by_key_time = halite::region::read::Scan {
        versions_are_key_times: true,
        ..plain.clone()
    };
    // Row keys without their salt, sorted (the scan gives them by bucket).
    let keys = |scan: &halite::region::read::Scan| {
        let mut keys = unsalted(
            store
                .scan(&name, scan)
                .expect("scan")
                .rows
                .into_iter()
                .map(|r| r.key.to_vec()),
        );
        keys.sort();
        keys
    };
    let want: Vec<Vec<u8>> = oracle
        .iter()
        .filter(|(_, (_, ts, _))| *ts < early)
        .map(|(k, _)| k.clone())
        .collect();
    let before = skipped();
    assert_eq!(keys(&plain), want);
    assert_eq!(skipped(), before, "a plain scan reads newer files");
    assert_eq!(keys(&by_key_time), want);
    let passed = skipped() - before;
    assert!(passed > 0, "no newer file was passed by");
    // A row deleted by a marker in a file of its own, newer than the
    // range: that file is read, and the row stays deleted.
    let schema: KeySchema = store.table(&name).expect("table").desc.key.clone();
    let deleted = cpu_key(&schema, 3, T0 + 2 * 10_000);
    store
        .write(
            &name,
            vec![RowMutation::new(deleted.clone()).delete_row(None)],
            None,
        )
        .expect("delete");
    store.flush_all().expect("flush the marker");
    let want: Vec<Vec<u8>> = want.into_iter().filter(|k| k[..] != deleted[1..]).collect();
    assert_eq!(keys(&plain), want);
    let before = skipped();
    assert_eq!(keys(&by_key_time), want, "the marker's file was passed by");
    assert_eq!(skipped() - before, passed, "the marker's file is read");
    store.close().expect("close");
}

#[test]
fn queries_leave_out_store_files_older_than_their_time_range() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path());
    let name = TableName::parse("cpu").expect("name");
    store.create_table(&table("cpu", "series")).expect("create");
    // `load` flushes half way: older points in one set of files, newer in
    // the MemStores; flush those too, so two generations of files exist.
    let oracle = load(&store, &name);
    store.flush_all().expect("flush");
    let skipped = || files_skipped_by_time(&store, &name);
    let recent = T0 + (POINTS / 2 + 5) * 10_000;
    let before = skipped();
    let q = Query {
        series: series(None),
        start_ms: Some(recent),
        ..Query::default()
    };
    let page = store.query(&name, &q).expect("query");
    let want: Vec<Vec<u8>> = oracle
        .iter()
        .filter(|(_, (_, ts, _))| *ts >= recent)
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(
        unsalted(page.rows.into_iter().map(|r| r.key().to_vec())),
        want
    );
    assert!(skipped() > before, "no older file was left out");
    // Aggregates over the same range agree, and leave files out too.
    let before = skipped();
    let agg = store
        .aggregate(
            &name,
            &Query {
                aggregate: Some(Aggregate {
                    functions: vec![AggFn::Count],
                    downsample_ms: None,
                    downsample: None,
                    group_by: None,
                }),
                ..q
            },
        )
        .expect("aggregate");
    let counted: f64 = agg.aggregates.iter().map(|a| a.values[0].1).sum();
    assert_eq!(counted as usize, want.len() * FIELDS.len());
    assert!(skipped() > before);
    store.close().expect("close");
}

/// A raw query naming fewer key fields than stand before the time field
/// ("one host, one hour" on a key of metric, host, dc, ts) seeks to each
/// series' window instead of reading the series' whole history: it looks
/// up about as many blocks as the query naming every field, and answers
/// the same rows, in both directions, paged or not, for both time
/// encodings. The host moved between data centres on day 15, so one host
/// is two series, and the hour across the move reads both.
#[test]
fn raw_queries_seek_to_each_series_time_window() {
    const STEP: u64 = 60_000;
    const POINTS_PER_HOST: u64 = 30 * 1440;
    const HOUR: u64 = 3_600_000;
    let moved_at = T0 + 15 * 1440 * STEP;
    for time_type in ["timestamp", "reversed_timestamp"] {
        let dir = tempfile::tempdir().expect("tmp");
        let store = open(dir.path());
        let name = TableName::parse("wide").expect("name");
        let req: CreateTable = serde_json::from_str(&format!(
            r#"{{ "name": "wide", "families": [{{ "name": "f" }}],
                  "key": {{ "fields": [
                    {{ "name": "metric", "type": "string", "width": 8 }},
                    {{ "name": "host", "type": "string", "width": 12 }},
                    {{ "name": "dc", "type": "string", "width": 8 }},
                    {{ "name": "ts", "type": "{time_type}" }} ],
                  "salt": {{ "buckets": 4, "from": "series" }} }} }}"#
        ))
        .expect("request");
        store.create_table(&req).expect("create");
        let schema = store.table(&name).expect("table").desc.key.clone();
        let dc_of = |h: u64, ts: u64| match (h, ts >= moved_at) {
            (0, false) => "east",
            (0, true) => "west",
            _ => "north",
        };
        // (host, ts) -> value, for the oracle.
        let mut oracle: BTreeMap<(u64, u64), f64> = BTreeMap::new();
        for h in 0..3u64 {
            for chunk in (0..POINTS_PER_HOST).collect::<Vec<_>>().chunks(10_000) {
                let rows: Vec<RowMutation> = chunk
                    .iter()
                    .map(|&p| {
                        let ts = T0 + p * STEP;
                        let key = schema
                            .encode_ordered(&[
                                FieldValue::Str("cpu".into()),
                                FieldValue::Str(format!("host_{h:02}")),
                                FieldValue::Str(dc_of(h, ts).into()),
                                FieldValue::Uint(ts),
                            ])
                            .expect("key");
                        let v = value(h, p, 0);
                        oracle.insert((h, ts), v);
                        RowMutation::new(key).put("f", "usage_user", ts, Value::Float(v).encode())
                    })
                    .collect();
                store.write(&name, rows, None).expect("write");
            }
        }
        store.flush_all().expect("flush");
        let lookups = || {
            let s = store.block_cache().stats();
            s.hits.load(std::sync::atomic::Ordering::Relaxed)
                + s.misses.load(std::sync::atomic::Ordering::Relaxed)
        };
        let named = |dc: Option<&str>| {
            let mut s = series(Some(0));
            if let Some(dc) = dc {
                s.push(("dc".into(), FieldValue::Str(dc.into())));
            }
            s
        };
        // Values of every row of an answer, in its order.
        let points = |rows: &[halite::region::read::ScannedRow]| -> Vec<(u64, f64)> {
            rows.iter()
                .map(|r| {
                    assert_eq!(r.cell_count(), 1);
                    (
                        r.cell(0).timestamp,
                        numeric(r.cell(0).value).expect("number"),
                    )
                })
                .collect()
        };
        let ordered = |mut want: Vec<(u64, f64)>, dcs: &[&str], reverse: bool| {
            // Key order: dc first, then the time field's own order.
            want.sort_by_key(|&(ts, _)| {
                let dc = dcs.iter().position(|d| *d == dc_of(0, ts)).expect("dc");
                let t = if time_type == "timestamp" {
                    ts
                } else {
                    u64::MAX - ts
                };
                (dc, t)
            });
            if reverse {
                want.reverse();
            }
            want
        };
        for (start, dcs) in [
            (T0 + 10 * 1440 * STEP, vec!["east"]),
            (moved_at - HOUR / 2, vec!["east", "west"]),
        ] {
            let want: Vec<(u64, f64)> = oracle
                .range((0, start)..(0, start + HOUR))
                .map(|(&(_, ts), &v)| (ts, v))
                .collect();
            assert_eq!(want.len(), 60);
            for reverse in [false, true] {
                let q = |dc: Option<&str>| Query {
                    series: named(dc),
                    start_ms: Some(start),
                    end_ms: Some(start + HOUR),
                    reverse,
                    ..Query::default()
                };
                let before = lookups();
                let page = store.query(&name, &q(None)).expect("by host");
                let by_host = lookups() - before;
                assert_eq!(
                    points(&page.rows),
                    ordered(want.clone(), &["east", "west"], reverse),
                    "{time_type} reverse={reverse}"
                );
                let before = lookups();
                let mut by_dc_rows = Vec::new();
                for dc in &dcs {
                    by_dc_rows.extend(store.query(&name, &q(Some(dc))).expect("by dc").rows);
                }
                let by_dc = lookups() - before;
                assert_eq!(by_dc_rows.len(), 60);
                assert!(
                    by_host <= 2 * by_dc + 8,
                    "{time_type} reverse={reverse}: naming the host looked up {by_host} blocks, \
                     naming the series {by_dc}"
                );
                // Pages of 7 with tokens give the same rows once, though
                // one bucket holds them all (each series is in one).
                let paged = |dc: Option<&str>| {
                    let q = Query {
                        limit: Some(7),
                        ..q(dc)
                    };
                    let pages = all_pages(&store, &name, &q);
                    pages
                        .iter()
                        .flat_map(|p| points(&p.rows))
                        .collect::<Vec<_>>()
                };
                let by_dc: Vec<(u64, f64)> = dcs.iter().flat_map(|dc| paged(Some(dc))).collect();
                assert_eq!(by_dc.len(), 60, "{time_type} reverse={reverse}");
                assert_eq!(
                    paged(None),
                    ordered(want.clone(), &["east", "west"], reverse)
                );
            }
        }
        store.close().expect("close");
    }
}

/// The query forms TSBS's devops queries need, on the query API: series
/// chosen by a set of values (`series_in`), each series' newest rows
/// (`series_limit`), and aggregates across series grouped by a key field
/// (`group_by`), each against the oracle, on a table salted by series (a
/// series in one bucket) and one salted by time (a series in every bucket).
#[test]
fn series_sets_last_points_and_groups_across_series() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path());
    for (table_name, salt_from) in [("by_series", "series"), ("by_time", "timestamp")] {
        let name = TableName::parse(table_name).expect("name");
        store
            .create_table(&table(table_name, salt_from))
            .expect("create");
        let oracle = load(&store, &name);

        // series_in: three hosts (one named twice), one window, paged.
        let chosen = [3u64, 7, 12];
        let q = Query {
            series: series(None),
            series_in: vec![(
                "host".into(),
                [3u64, 7, 7, 12]
                    .iter()
                    .map(|h| FieldValue::Str(format!("host_{h:02}")))
                    .collect(),
            )],
            start_ms: Some(T0 + 100_000),
            end_ms: Some(T0 + 300_000),
            ..Query::default()
        };
        let want: Vec<Vec<u8>> = oracle
            .iter()
            .filter(|(_, (h, ts, _))| {
                chosen.contains(h) && (T0 + 100_000..T0 + 300_000).contains(ts)
            })
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(want.len(), 3 * 20);
        let page = store.query(&name, &q).expect("series_in");
        assert_eq!(
            unsalted(page.rows.iter().map(|r| r.key().to_vec())),
            want,
            "{table_name}"
        );
        if salt_from == "series" {
            assert_eq!(page.buckets_scanned, 3, "one bucket per host");
        }
        let pages = all_pages(
            &store,
            &name,
            &Query {
                limit: Some(11),
                ..q.clone()
            },
        );
        assert_eq!(paged_keys(&pages), want, "{table_name} paged");

        // series_limit: each host's newest points (reversed timestamps:
        // its first rows), with a time range, paged across series.
        for (per_series, range) in [(1usize, None), (3, Some((T0 + 100_000, T0 + 400_000)))] {
            let mut want: Vec<Vec<u8>> = Vec::new();
            for h in 0..HOSTS {
                let mut rows: Vec<(&Vec<u8>, u64)> = oracle
                    .iter()
                    .filter(|(_, (oh, ts, _))| {
                        *oh == h && range.is_none_or(|(a, b)| (a..b).contains(ts))
                    })
                    .map(|(k, (_, ts, _))| (k, *ts))
                    .collect();
                rows.sort_by_key(|r| std::cmp::Reverse(r.1));
                want.extend(rows.into_iter().take(per_series).map(|r| r.0.clone()));
            }
            want.sort();
            let q = Query {
                series: series(None),
                series_limit: Some(per_series),
                start_ms: range.map(|r| r.0),
                end_ms: range.map(|r| r.1),
                ..Query::default()
            };
            let page = store.query(&name, &q).expect("series_limit");
            let got = unsalted(page.rows.iter().map(|r| r.key().to_vec()));
            assert_eq!(got.len(), HOSTS as usize * per_series);
            assert_eq!(got, want, "{table_name} series_limit {per_series}");
            if per_series == 1 {
                let newest = T0 + (POINTS - 1) * 10_000;
                assert!(page.rows.iter().all(|r| r.cell(0).timestamp == newest));
            }
            for limit in [2usize, 7] {
                let pages = all_pages(
                    &store,
                    &name,
                    &Query {
                        limit: Some(limit),
                        ..q.clone()
                    },
                );
                assert_eq!(
                    paged_keys(&pages),
                    want,
                    "{table_name} series_limit {per_series} pages of {limit}"
                );
                // No token leads to an empty page.
                assert_eq!(
                    pages.len(),
                    want.len().div_ceil(limit),
                    "{table_name} series_limit {per_series} pages of {limit}"
                );
            }
        }

        // group_by: max, avg and count per 100 s window across all hosts
        // (`[]`) and per metric (one metric: the same), and by host (each
        // series alone).
        let window_of = |ts: u64| ts - ts % 100_000;
        let mut want: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for (_, ts, v) in oracle.values() {
            want.entry(window_of(*ts)).or_default().push(v[0]);
        }
        for group_by in [vec![], vec!["metric".to_string()]] {
            let q = Query {
                series: series(None),
                fields: vec!["usage_user".into()],
                aggregate: Some(Aggregate {
                    functions: vec![AggFn::Max, AggFn::Avg, AggFn::Count],
                    downsample_ms: Some(100_000),
                    downsample: None,
                    group_by: Some(group_by.clone()),
                }),
                ..Query::default()
            };
            let got = store.aggregate(&name, &q).expect("grouped").aggregates;
            assert_eq!(got.len(), want.len(), "{table_name} {group_by:?}");
            for (g, (w, vals)) in got.iter().zip(&want) {
                let names: Vec<&str> = g.series.iter().map(|(n, _)| n.as_str()).collect();
                assert_eq!(
                    names,
                    group_by.iter().map(String::as_str).collect::<Vec<_>>()
                );
                assert_eq!(g.window, Some(*w));
                let max = vals.iter().cloned().fold(f64::MIN, f64::max);
                let avg = vals.iter().sum::<f64>() / vals.len() as f64;
                let expect = [max, avg, vals.len() as f64];
                for ((f, v), e) in g.values.iter().zip(expect) {
                    assert!(
                        (v - e).abs() < 1e-9,
                        "{table_name} {f:?} window {w}: {v} != {e}"
                    );
                }
            }
        }
        let by_host = store
            .aggregate(
                &name,
                &Query {
                    series: series(None),
                    fields: vec!["usage_user".into()],
                    aggregate: Some(Aggregate {
                        functions: vec![AggFn::Count],
                        downsample_ms: None,
                        downsample: None,
                        group_by: Some(vec!["host".into()]),
                    }),
                    ..Query::default()
                },
            )
            .expect("by host")
            .aggregates;
        assert_eq!(by_host.len(), HOSTS as usize);
        assert!(by_host.iter().all(|a| a.values[0].1 == POINTS as f64
            && a.series.len() == 1
            && a.series[0].0 == "host"));

        // Wrong forms say what is wrong.
        let bad = |q: Query| store.query(&name, &q).unwrap_err().to_string();
        let e = bad(Query {
            series_in: vec![("dc".into(), vec![FieldValue::Str("x".into())])],
            ..Query::default()
        });
        assert!(e.contains("leading key fields"), "{e}");
        let e = bad(Query {
            series_in: vec![("metric".into(), vec![])],
            ..Query::default()
        });
        assert!(e.contains("no values"), "{e}");
        let e = bad(Query {
            series_limit: Some(0),
            ..Query::default()
        });
        assert!(e.contains("at least 1"), "{e}");
        let e = store
            .aggregate(
                &name,
                &Query {
                    aggregate: Some(Aggregate {
                        functions: vec![AggFn::Count],
                        downsample_ms: None,
                        downsample: None,
                        group_by: Some(vec!["ts".into()]),
                    }),
                    ..Query::default()
                },
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a series field"), "{e}");
    }
    store.close().expect("close");
}

/// A cell value of the filter test: the model knows it as a number (every
/// integer here is below 2^53, so f64 holds it exactly), a string or a bool.
#[derive(Debug, Clone)]
enum Typed {
    Num(Value),
    Str(String),
    Bool(bool),
}

impl Typed {
    fn encode(&self) -> Vec<u8> {
        match self {
            Typed::Num(v) => v.encode(),
            Typed::Str(s) => Value::Str(s.clone()).encode(),
            Typed::Bool(b) => Value::Bool(*b).encode(),
        }
    }
}

fn arb_typed() -> impl proptest::strategy::Strategy<Value = Typed> {
    use proptest::prelude::*;
    prop_oneof![
        prop::sample::select(vec![
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -5.0,
            -0.0,
            0.0,
            5.0,
            50.0,
            99.5
        ])
        .prop_map(|f| Typed::Num(Value::Float(f))),
        (-100.0f64..100.0).prop_map(|f| Typed::Num(Value::Float(f))),
        (-100i64..100).prop_map(|i| Typed::Num(Value::Int(i))),
        (0u64..100).prop_map(|u| Typed::Num(Value::Uint(u))),
        "[a-c]{0,2}".prop_map(Typed::Str),
        any::<bool>().prop_map(Typed::Bool),
    ]
}

fn arb_operand() -> impl proptest::strategy::Strategy<Value = halite::region::read::Operand> {
    use halite::region::read::Operand;
    use proptest::prelude::*;
    prop_oneof![
        prop::sample::select(vec![-5.0, 0.0, 5.0, 50.0]).prop_map(Operand::Float),
        (-100.0f64..100.0).prop_map(Operand::Float),
        (-100i64..100).prop_map(Operand::Int),
        (0u64..100).prop_map(Operand::Uint),
        "[a-c]{0,2}".prop_map(Operand::Str),
        any::<bool>().prop_map(Operand::Bool),
    ]
}

/// The plain model: numbers by value, strings by text, bools false < true;
/// NaN is unordered (only `!=` holds); another kind never passes.
fn model_passes(
    op: halite::region::read::CompareOp,
    cell: &Typed,
    operand: &halite::region::read::Operand,
) -> bool {
    use halite::region::read::{CompareOp, Operand};
    use std::cmp::Ordering;
    let number = |v: &Value| v.as_f64();
    let order = match (cell, operand) {
        (Typed::Num(v), Operand::Float(x)) => number(v).map(|a| a.partial_cmp(x)),
        (Typed::Num(v), Operand::Int(x)) => number(v).map(|a| a.partial_cmp(&(*x as f64))),
        (Typed::Num(v), Operand::Uint(x)) => number(v).map(|a| a.partial_cmp(&(*x as f64))),
        (Typed::Str(s), Operand::Str(x)) => Some(Some(s.cmp(x))),
        (Typed::Bool(b), Operand::Bool(x)) => Some(Some(b.cmp(x))),
        _ => None,
    };
    match order {
        None => false,
        Some(None) => op == CompareOp::NotEqual,
        Some(Some(o)) => match op {
            CompareOp::Less => o == Ordering::Less,
            CompareOp::LessOrEqual => o != Ordering::Greater,
            CompareOp::Equal => o == Ordering::Equal,
            CompareOp::NotEqual => o != Ordering::Equal,
            CompareOp::GreaterOrEqual => o != Ordering::Less,
            CompareOp::Greater => o == Ordering::Greater,
        },
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(12))]

    /// Value filters compare typed values, in raw scans (cell and row
    /// filters) and in series queries (raw rows, rows by one field, and
    /// aggregates), from MemStores and store files alike.
    #[test]
    fn value_filters_agree_with_a_model_in_scans_and_queries(
        values in proptest::collection::vec((arb_typed(), arb_typed()), 24),
        operands in proptest::collection::vec(arb_operand(), 3),
    ) {
        use halite::query::ValueFilter;
        use halite::region::read::{CompareOp, Filter, Scan};
        let dir = tempfile::tempdir().expect("tmp");
        let store = open(dir.path());
        let name = TableName::parse("vf").expect("name");
        store.create_table(&table("vf", "series")).expect("create");
        let schema: KeySchema = store.table(&name).expect("table").desc.key.clone();
        // Rows: 3 hosts x 8 times; fields `a` and `b`.
        let mut model: BTreeMap<Vec<u8>, (u64, [Typed; 2])> = BTreeMap::new();
        for (i, (a, b)) in values.iter().enumerate() {
            let (h, ts) = (i as u64 % 3, T0 + (i as u64 / 3) * 1000);
            let key = cpu_key(&schema, h, ts);
            let m = RowMutation::new(key.clone())
                .put("f", "a", ts, a.encode())
                .put("f", "b", ts, b.encode());
            store.write(&name, vec![m], None).expect("write");
            model.insert(key[1..].to_vec(), (h, [a.clone(), b.clone()]));
            if i == values.len() / 2 {
                store.flush_all().expect("flush");
            }
        }
        let ops = [
            CompareOp::Less,
            CompareOp::LessOrEqual,
            CompareOp::Equal,
            CompareOp::NotEqual,
            CompareOp::GreaterOrEqual,
            CompareOp::Greater,
        ];
        for operand in &operands {
            for op in ops {
                // Cells that pass, as (unsalted row, qualifier).
                let want_cells: Vec<(Vec<u8>, Vec<u8>)> = model
                    .iter()
                    .flat_map(|(k, (_, v))| {
                        [("a", &v[0]), ("b", &v[1])]
                            .into_iter()
                            .filter(|(_, t)| model_passes(op, t, operand))
                            .map(|(q, _)| (k.clone(), q.as_bytes().to_vec()))
                    })
                    .collect();
                let cells_of = |rows: Vec<(Vec<u8>, Vec<Vec<u8>>)>| -> Vec<(Vec<u8>, Vec<u8>)> {
                    let mut out: Vec<_> = rows
                        .into_iter()
                        .flat_map(|(k, qs)| qs.into_iter().map(move |q| (k[1..].to_vec(), q)))
                        .collect();
                    out.sort();
                    out
                };
                let scan = store
                    .scan(&name, &Scan {
                        filters: vec![Filter::Value { op, operand: operand.clone() }],
                        ..Scan::new()
                    })
                    .expect("scan");
                let got = cells_of(
                    scan.rows
                        .iter()
                        .map(|r| (r.key.clone(), r.cells.iter().map(|c| c.qualifier.to_vec()).collect()))
                        .collect(),
                );
                proptest::prop_assert_eq!(&got, &want_cells, "scan cells {} {:?}", op.as_str(), operand);

                let q = Query {
                    series: series(None),
                    value_filter: Some(ValueFilter { op, value: operand.clone(), field: None }),
                    ..Query::default()
                };
                let page = store.query(&name, &q).expect("query");
                let got = cells_of(
                    page.rows
                        .iter()
                        .map(|r| {
                            (r.key().to_vec(), (0..r.cell_count()).map(|i| r.cell(i).qualifier.to_vec()).collect())
                        })
                        .collect(),
                );
                proptest::prop_assert_eq!(&got, &want_cells, "query cells {} {:?}", op.as_str(), operand);

                // Rows by field `a`: the whole row when `a` passes.
                let want_rows: Vec<Vec<u8>> = model
                    .iter()
                    .filter(|(_, (_, v))| model_passes(op, &v[0], operand))
                    .map(|(k, _)| k.clone())
                    .collect();
                let by_field = Query {
                    value_filter: Some(ValueFilter { op, value: operand.clone(), field: Some("a".into()) }),
                    ..q.clone()
                };
                let page = store.query(&name, &by_field).expect("query rows");
                proptest::prop_assert!(page.rows.iter().all(|r| r.cell_count() == 2));
                let got: Vec<Vec<u8>> = page.rows.iter().map(|r| r.key()[1..].to_vec()).collect();
                proptest::prop_assert_eq!(&got, &want_rows, "query rows {} {:?}", op.as_str(), operand);
                let scan_rows = store
                    .scan(&name, &Scan {
                        filters: vec![Filter::SingleColumnValue {
                            family: b"f".to_vec(),
                            qualifier: b"a".to_vec(),
                            op,
                            operand: operand.clone(),
                            filter_if_missing: true,
                        }],
                        ..Scan::new()
                    })
                    .expect("scan rows");
                let mut got: Vec<Vec<u8>> = scan_rows.rows.iter().map(|r| r.key[1..].to_vec()).collect();
                got.sort();
                proptest::prop_assert_eq!(&got, &want_rows, "scan rows {} {:?}", op.as_str(), operand);

                // Aggregates count the numeric values that pass, per host.
                let agg = store
                    .aggregate(&name, &Query {
                        aggregate: Some(Aggregate { functions: vec![AggFn::Count], downsample_ms: None, downsample: None, group_by: None }),
                        ..q.clone()
                    })
                    .expect("aggregate");
                let mut got: BTreeMap<(String, String), u64> = BTreeMap::new();
                for a in &agg.aggregates {
                    let host = match &a.series[1].1 { FieldValue::Str(s) => s.clone(), other => panic!("{other:?}") };
                    got.insert((host, a.field.clone()), a.values[0].1 as u64);
                }
                let mut want: BTreeMap<(String, String), u64> = BTreeMap::new();
                for (h, v) in model.values() {
                    for (q, t) in [("a", &v[0]), ("b", &v[1])] {
                        if matches!(t, Typed::Num(_)) && model_passes(op, t, operand) {
                            *want.entry((format!("host_{h:02}"), q.to_string())).or_default() += 1;
                        }
                    }
                }
                proptest::prop_assert_eq!(&got, &want, "aggregate {} {:?}", op.as_str(), operand);
            }
        }
    }
}
