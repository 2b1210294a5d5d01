//! A database's tables, made on their first point: a table of open tag
//! sets per InfluxDB measurement (`<db>:<measurement>`) and one for
//! Prometheus' samples (`<db>:samples`). Every door that writes into a
//! database rather than into a named table (InfluxDB's `/write`, remote
//! write, a Kafka topic mapped to a database) finds and makes its tables
//! here, with the same settings and the same refusals.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use crate::catalog::{CreateTable, PolicyTables, TableName};
use crate::error::Error;
use crate::key::{KeySchema, OpenTags, Salt, SaltFrom, TimeUnit};
use crate::schema::{Durability, FamilySpec};
use crate::store::Store;
use crate::table::Table;

pub use crate::catalog::SAMPLES_TABLE;

/// How a database's tables are made (the config's `[influx]`).
#[derive(Debug, Clone)]
pub struct TableTemplate {
    /// The one family a measurement's fields live in.
    pub family: FamilySpec,
    /// Salt buckets (and regions) of each table.
    pub buckets: u32,
    /// Most series a table holds; points of new series past it are refused.
    pub series_limit: u64,
    /// Most tables (measurements and samples, not the dictionary's) a
    /// database holds for writes to make a measurement's table: each is a
    /// catalog entry and `buckets` regions, so a small body naming a
    /// million measurements would make millions of regions.
    pub max_measurements: usize,
}

impl TableTemplate {
    /// A measurement's table: nanoseconds, as InfluxDB keeps time, its
    /// points kept `ttl_secs` (its retention policy's duration).
    pub fn measurement_request(&self, name: &TableName, ttl_secs: Option<u64>) -> CreateTable {
        let mut req = self.request(name, TimeUnit::Nanoseconds);
        for f in &mut req.families {
            f.ttl = ttl_secs;
        }
        req
    }

    /// The samples table: milliseconds, as Prometheus keeps time.
    pub fn samples_request(&self, name: &TableName) -> CreateTable {
        self.request(name, TimeUnit::Milliseconds)
    }

    fn request(&self, name: &TableName, time_unit: TimeUnit) -> CreateTable {
        CreateTable {
            name: name.clone(),
            families: vec![self.family.clone()],
            key: KeySchema {
                fields: Vec::new(),
                salt: (self.buckets >= 2).then(|| Salt {
                    buckets: self.buckets,
                    width: if self.buckets > 256 { 2 } else { 1 },
                    from: SaltFrom::Series,
                    epochs: Vec::new(),
                }),
                md5_prefix: 0,
                time_unit,
                tags: Some(OpenTags {
                    series_limit: self.series_limit,
                    ..OpenTags::default()
                }),
            },
            durability: Durability::SyncWal,
            split_points: Vec::new(),
        }
    }
}

/// Table `name` of `store`, made from `request` when there is none yet (a
/// table another writer made meanwhile is the one taken).
pub fn table_or_make(
    store: &Store,
    name: &TableName,
    request: impl FnOnce() -> CreateTable,
) -> Result<Arc<Table>, Error> {
    match existing_table(store, name) {
        Err(Error::NotFound(_)) => {
            match store.create_table(&request()) {
                Ok(_) => {}
                // Another node of a cluster made it first: the catalog
                // was read again, and a refresh opens it here.
                Err(Error::Conflict(_)) if store.is_cluster() => refresh_for(store, name),
                Err(Error::Conflict(_)) => {}
                Err(e) => return Err(e),
            }
            store.table(name)
        }
        got => got,
    }
}

/// Why a measurement got no table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NoTable {
    #[error(
        "max-measurements limit exceeded: the database holds `influx.max_measurements` \
         ({limit}) measurements"
    )]
    OverLimit { limit: usize },
}

/// Tables `names` (of one database's measurements), in `names`' order: those missing are
/// made from `request` in one change of the catalog, as many as the
/// database's `max_measurements` leaves room for (the rest answer
/// [`NoTable::OverLimit`]). A write naming many new measurements makes
/// them at once: a table at a time rewrote a growing catalog per table.
pub fn tables_or_make(
    store: &Store,
    names: &[TableName],
    max_measurements: usize,
    request: impl Fn(&TableName) -> CreateTable,
) -> Result<Vec<Result<Arc<Table>, NoTable>>, Error> {
    let missing = |store: &Store| -> Vec<usize> {
        (0..names.len())
            .filter(|&i| matches!(store.table(&names[i]), Err(Error::NotFound(_))))
            .collect()
    };
    let mut absent = missing(store);
    // In a cluster another node may have made them since the last read
    // of the shared catalog.
    if !absent.is_empty() && store.is_cluster() {
        refresh_for(store, &names[absent[0]]);
        absent = missing(store);
    }
    if absent.is_empty() {
        return names.iter().map(|name| store.table(name).map(Ok)).collect();
    }
    let mut wanted: Vec<CreateTable> = Vec::with_capacity(absent.len());
    for &i in &absent {
        if !wanted.iter().any(|w| w.name == names[i]) {
            wanted.push(request(&names[i]));
        }
    }
    // Made (or, being made by another writer, waited for: the store makes
    // tables one change at a time) with the database's tables counted as
    // the catalog holds them then, of every retention policy. The
    // database's own tables (`__tags`) are not measurements.
    let counted = |table: &str| crate::catalog::is_measurement_table(table);
    let limit = crate::catalog::TableLimit {
        most: max_measurements,
        counted: &counted,
    };
    store.create_tables(&wanted, Some(limit))?;
    // Named but not open here: another node of a cluster made it first,
    // and a refresh opens it.
    if store.is_cluster()
        && absent
            .iter()
            .any(|&i| store.table(&names[i]).is_err() && store.catalog().holds(&names[i]))
    {
        refresh_for(store, &names[absent[0]]);
    }
    names
        .iter()
        .map(|name| match store.table(name) {
            Err(Error::NotFound(_)) if !store.catalog().holds(name) => {
                Ok(Err(NoTable::OverLimit {
                    limit: max_measurements,
                }))
            }
            got => got.map(Ok),
        })
        .collect()
}

/// Table `name`; in cluster mode one another node made since the last
/// catalog refresh is opened first.
pub fn existing_table(store: &Store, name: &TableName) -> Result<Arc<Table>, Error> {
    match store.table(name) {
        Err(Error::NotFound(_)) if store.is_cluster() => {
            refresh_for(store, name);
            store.table(name)
        }
        got => got,
    }
}

/// Reads the shared catalog again for `name`; another table's trouble
/// opening is logged, not this one's error (the refresh opens the rest).
fn refresh_for(store: &Store, name: &TableName) {
    if let Err(e) = store.refresh_catalog() {
        tracing::warn!(table = %name, error = %e, "reading the shared catalog again failed");
    }
}

/// Why a measurement names no table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadMeasurement {
    #[error("missing measurement")]
    Missing,
    #[error(
        "halite names a measurement's table after it: use letters, digits, '_', '-' and '.' \
         (not starting with \"__\")"
    )]
    Unnameable,
}

/// The table measurement `measurement` of a database's retention policy
/// lives in.
pub fn measurement_table(
    tables: &PolicyTables,
    measurement: &str,
) -> Result<TableName, BadMeasurement> {
    if measurement.is_empty() {
        return Err(BadMeasurement::Missing);
    }
    match tables.table(measurement) {
        Ok(n) if !measurement.starts_with("__") => Ok(n),
        _ => Err(BadMeasurement::Unnameable),
    }
}

/// The measurement of a line (before its first unescaped `,` or space),
/// borrowed from the line unless it has escapes: a Kafka message is
/// usually one line, and its measurement is looked up, not kept.
pub fn measurement_of(line: &str) -> Cow<'_, str> {
    let end = line.find([',', ' ', '\\']).unwrap_or(line.len());
    if line.as_bytes().get(end) != Some(&b'\\') {
        return Cow::Borrowed(&line[..end]);
    }
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    out.push(n);
                }
            }
            ',' | ' ' => break,
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The lines of one measurement in a body of line protocol: runs of the
/// body's text, each of whole lines (with the blank and comment lines
/// among them), in the body's order.
pub struct MeasurementLines<'t> {
    pub measurement: String,
    body: &'t str,
    runs: Vec<std::ops::Range<usize>>,
}

impl<'t> MeasurementLines<'t> {
    /// The lines as one text: borrowed from the body when they are one
    /// run of it (a body of one measurement, the common case), so neither
    /// a copy of the body nor a list of its lines is made.
    pub fn text(&self) -> Cow<'t, str> {
        if let [run] = self.runs.as_slice() {
            return Cow::Borrowed(&self.body[run.clone()]);
        }
        let mut joined = String::with_capacity(self.runs.iter().map(|r| r.len() + 1).sum());
        for run in &self.runs {
            joined.push_str(&self.body[run.clone()]);
            if !joined.ends_with('\n') {
                joined.push('\n');
            }
        }
        Cow::Owned(joined)
    }
}

/// The lines of line protocol `text` by measurement, in first-seen order,
/// in the text's order within each; a line's number in its measurement's
/// [`MeasurementLines::text`] is as [`super::line_protocol::lines`] counts.
pub fn lines_by_measurement(text: &str) -> Vec<MeasurementLines<'_>> {
    let mut groups: Vec<MeasurementLines<'_>> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    // The group whose run the text's current line extends.
    let mut current: Option<usize> = None;
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        let at = start;
        start += line.len();
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            if let Some(g) = current {
                extend_run(&mut groups[g], at, start);
            }
            continue;
        }
        let m = measurement_of(trimmed);
        let g = match index.get(m.as_ref()) {
            Some(&g) => g,
            None => {
                let m = m.into_owned();
                index.insert(m.clone(), groups.len());
                groups.push(MeasurementLines {
                    measurement: m,
                    body: text,
                    runs: Vec::new(),
                });
                groups.len() - 1
            }
        };
        if current == Some(g) {
            extend_run(&mut groups[g], at, start);
        } else {
            groups[g].runs.push(at..start);
            current = Some(g);
        }
    }
    groups
}

fn extend_run(group: &mut MeasurementLines<'_>, at: usize, end: usize) {
    match group.runs.last_mut() {
        Some(run) if run.end == at => run.end = end,
        _ => group.runs.push(at..end),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_group_by_their_measurement() {
        let text = "cpu,host=a v=1 1\n\n# note\nmem v=2 2\ncpu\\,x,host=b v=3 3\ncpu v=4 4\n";
        let groups = lines_by_measurement(text);
        let names: Vec<&str> = groups.iter().map(|g| g.measurement.as_str()).collect();
        assert_eq!(names, ["cpu", "mem", "cpu,x"]);
        let lines = |g: &MeasurementLines<'_>| -> Vec<String> {
            super::super::line_protocol::lines(&g.text())
                .map(|(_, l)| l.to_string())
                .collect()
        };
        assert_eq!(lines(&groups[0]), ["cpu,host=a v=1 1", "cpu v=4 4"]);
        assert_eq!(lines(&groups[1]), ["mem v=2 2"]);
        assert_eq!(lines(&groups[2]), ["cpu\\,x,host=b v=3 3"]);
        // One measurement's lines are the body itself, not a copy.
        let one = "cpu v=1 1\n\ncpu v=2 2";
        assert!(matches!(lines_by_measurement(one)[0].text(), Cow::Borrowed(t) if t == one));
        assert!(matches!(
            measurement_of("cpu,host=a v=1"),
            Cow::Borrowed("cpu")
        ));
        assert!(matches!(measurement_of("mem v=1"), Cow::Borrowed("mem")));
        assert_eq!(measurement_of("a\\ b,c=d v=1"), "a b");
    }

    #[test]
    fn measurements_name_tables_or_say_why_not() {
        let autogen = PolicyTables::autogen("telegraf");
        assert_eq!(
            measurement_table(&autogen, "cpu").unwrap().to_string(),
            "telegraf:cpu"
        );
        let month = PolicyTables::new("telegraf", "30d");
        let table = measurement_table(&month, "cpu").unwrap();
        assert_eq!(table.to_string(), "telegraf:__rp.30d.cpu");
        assert_eq!(month.measurement_of(&table.table), Some("cpu"));
        assert_eq!(autogen.measurement_of(&table.table), None);
        assert_eq!(
            PolicyTables::new("telegraf", "30").measurement_of(&table.table),
            None
        );
        assert_eq!(autogen.measurement_of("cpu"), Some("cpu"));
        assert_eq!(month.measurement_of("cpu"), None);
        assert_eq!(
            measurement_table(&autogen, ""),
            Err(BadMeasurement::Missing)
        );
        assert_eq!(
            measurement_table(&autogen, "__tags"),
            Err(BadMeasurement::Unnameable)
        );
        assert_eq!(
            measurement_table(&month, "__tags"),
            Err(BadMeasurement::Unnameable)
        );
        assert_eq!(
            measurement_table(&autogen, "a b/c"),
            Err(BadMeasurement::Unnameable)
        );
    }
}
