//! InfluxQL's `DELETE` and `DROP SERIES`: the points of the series a
//! condition on tags (and, for `DELETE`, a time range) selects, in every
//! retention policy of the database, as InfluxDB 1.6 deletes them from
//! every shard.
//!
//! Each point row gets a row delete marker at its newest cell's version
//! (`rows::delete`'s rule), then the tables touched are flushed and major
//! compacted before the answer: a marker masks every version at or before
//! its own, also one written later (HBase's rule), and a point written
//! again at a deleted time must be read back, as InfluxDB reads it. A
//! series the statement leaves no point (every one of `DROP SERIES`) is
//! forgotten by the dictionary, so `SHOW SERIES` no longer lists it.

use super::influx_select::{TagFilter, mentions_field, split_time};
use super::influxql::{Expr, FromName};
use super::measurements::{Measurement, SeriesTable, measurements};
use crate::catalog::{PolicyTables, SAMPLES_TABLE, TableName};
use crate::cell::RowMutation;
use crate::series::Dictionary;
use crate::store::Store;

/// Delete markers written at once.
const CHUNK: usize = 1_000;

/// What one statement deletes in one table: the table, and the series
/// (their dictionary keys) it deletes points of.
struct TableWork {
    table: SeriesTable,
    series: Vec<Vec<u8>>,
}

/// Deletes what `DELETE` (`drop` false) or `DROP SERIES` (`drop`) selects
/// in database `db`; an error (InfluxDB's words where it has them)
/// changes nothing.
pub fn delete_series(
    store: &Store,
    dictionary: &Dictionary,
    db: &str,
    sources: &[FromName],
    condition: Option<&Expr>,
    drop: bool,
) -> Result<(), String> {
    let (lo, hi, rest) = split_time(condition)?;
    if drop && (lo.is_some() || hi.is_some()) {
        return Err("DROP SERIES doesn't support time in WHERE clause".into());
    }
    let patterns = sources
        .iter()
        .map(|s| match s {
            FromName::Name(n) => Ok(Pattern::Name(n.clone())),
            FromName::Regex(re) => regex_lite::Regex::new(re)
                .map(Pattern::Regex)
                .map_err(|e| format!("invalid regular expression /{re}/: {e}")),
        })
        .collect::<Result<Vec<_>, String>>()?;
    let chosen = |m: &Measurement| {
        patterns.is_empty()
            || patterns.iter().any(|p| match p {
                Pattern::Name(n) => *n == m.name,
                Pattern::Regex(re) => re.is_match(&m.name),
            })
    };
    // Everything is found and checked before any marker is written.
    let mut work = Vec::new();
    for policy in store.catalog().retention_policies(db).policies {
        let tables = PolicyTables::new(db, &policy.name);
        for m in measurements(store, Some(dictionary), &tables)? {
            // Open tables only, and not the Prometheus samples (which
            // InfluxDB does not hold).
            let open = m.tables().first().is_some_and(|t| {
                t.schema.is_open_tags() && !(tables.is_autogen() && t.name.table == SAMPLES_TABLE)
            });
            if !chosen(&m) || !open {
                continue;
            }
            if rest.as_ref().is_some_and(|e| mentions_field(e, &m.fields)) {
                return Err("fields not supported in WHERE clause during deletion".into());
            }
            let filter = rest.as_ref().map(TagFilter::new).transpose()?;
            let series: Vec<Vec<u8>> = m
                .series
                .iter()
                .filter(|s| filter.as_ref().is_none_or(|f| f.holds(&s.tags)))
                .map(|s| s.key.clone())
                .collect();
            if !series.is_empty() {
                work.push(TableWork {
                    table: m.table_of(0).clone(),
                    series,
                });
            }
        }
    }
    if !work.is_empty() && store.is_cluster() {
        return Err("DELETE and DROP SERIES are not supported in cluster mode yet".into());
    }
    let (lo, hi) = (lo.unwrap_or(0), hi.unwrap_or(i64::MAX));
    let whole = lo <= 0 && hi == i64::MAX;
    for TableWork { table, series } in work {
        let mut emptied = Vec::new();
        for key in &series {
            mark_deleted(store, &table, key, lo, hi)?;
            if whole || !has_points(store, &table, key)? {
                emptied.push(key.clone());
            }
        }
        compact(store, &table.name)?;
        dictionary
            .forget_series(store, &table.name.table, &emptied)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

enum Pattern {
    Name(String),
    Regex(regex_lite::Regex),
}

/// Writes a row delete marker for each of `series`' rows in `[lo, hi]`.
fn mark_deleted(
    store: &Store,
    table: &SeriesTable,
    series: &[u8],
    lo: i64,
    hi: i64,
) -> Result<(), String> {
    let scan = table.scan(series, lo, hi);
    let mut rows = store
        .scanner(&table.name, &scan)
        .map_err(|e| e.to_string())?;
    let mut chunk = Vec::with_capacity(CHUNK);
    while let Some(row) = rows.next_row().map_err(|e| e.to_string())? {
        let newest = row.cells.iter().map(|c| c.timestamp).max().unwrap_or(0);
        chunk.push(RowMutation::new(row.key).delete_row(Some(newest)));
        if chunk.len() == CHUNK {
            let full = std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK));
            store
                .write(&table.name, full, None)
                .map_err(|e| e.to_string())?;
        }
    }
    if !chunk.is_empty() {
        store
            .write(&table.name, chunk, None)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Whether `series` has a point left.
fn has_points(store: &Store, table: &SeriesTable, series: &[u8]) -> Result<bool, String> {
    let scan = table.scan(series, 0, i64::MAX);
    let mut rows = store
        .scanner(&table.name, &scan)
        .map_err(|e| e.to_string())?;
    Ok(rows.next_row().map_err(|e| e.to_string())?.is_some())
}

/// Flushes and major compacts `name`: the markers go with what they mask,
/// so a point written again at a deleted time is not masked.
fn compact(store: &Store, name: &TableName) -> Result<(), String> {
    store.flush_table(name).map_err(|e| e.to_string())?;
    let table = store.table(name).map_err(|e| e.to_string())?;
    for region in table.regions() {
        region.compact(true).map_err(|e| e.to_string())?;
    }
    Ok(())
}
