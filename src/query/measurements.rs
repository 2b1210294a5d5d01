//! A database's measurements as InfluxQL sees them, whichever kind of
//! table holds them (docs/compatibility.md, "Declared-key tables"):
//!
//! - a table of open tag sets `db:m` is measurement `m`, its series and
//!   field types from the namespace's dictionary ([`crate::series`]);
//! - a table of declared key fields is read as series too. Each identity
//!   key field (those before the time) is a tag, but for `metric` (or
//!   `measurement`), whose value is the measurement: what a Telegraf or
//!   Kafka line wrote as its measurement. A table without such a field is
//!   the one measurement of its own name. Its series are listed from the
//!   table itself, one seek each ([`super::series_list`]), and a field's
//!   type is the one its series' newest point holds.
//!
//! A retention policy other than `autogen` holds open tables only
//! (`catalog::PolicyTables`); declared tables are `autogen`'s.
//!
//! A declared table InfluxQL cannot read newest first (a key that does not
//! end in a `reversed_timestamp` after the series fields) holds no
//! measurement; asked by its own name, it answers why.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::catalog::{PolicyTables, TableDescriptor, TableName};
use crate::key::{FieldEncoding, FieldValue, KeySchema};
use crate::region::read::Scan;
use crate::series::{Dictionary, FieldType, NamedSeries, SeriesList};
use crate::store::Store;

/// A table a measurement's series are read from.
#[derive(Clone)]
pub struct SeriesTable {
    pub name: TableName,
    pub schema: KeySchema,
    /// The family a point's fields are cells of.
    pub family: Vec<u8>,
}

impl SeriesTable {
    fn of(desc: &TableDescriptor) -> Option<SeriesTable> {
        Some(SeriesTable {
            name: desc.name.clone(),
            schema: desc.key.clone(),
            family: desc.families.first()?.name.as_bytes().to_vec(),
        })
    }

    fn open_tags(&self) -> bool {
        self.schema.is_open_tags()
    }

    /// The time (in the key's unit) of `key`, a row of one of the table's
    /// series; `None` when the key is of no series' shape (a row the raw
    /// row API wrote).
    pub fn key_time(&self, key: &[u8]) -> Option<u64> {
        let shaped = if self.open_tags() {
            self.schema.tag_series(key).is_some()
        } else {
            key.len() == self.schema.key_len()
        };
        let at = key.len().checked_sub(8).filter(|_| shaped)?;
        Some(u64::MAX - u64::from_be_bytes(key[at..].try_into().ok()?))
    }

    /// Whether `head` (a key less its last 8 bytes of time) is of a
    /// series' shape.
    pub fn is_series_head(&self, head: &[u8]) -> bool {
        if self.open_tags() {
            self.schema.is_tag_series_head(head)
        } else {
            head.len() + 8 == self.schema.key_len()
        }
    }

    /// A scan of `series`' rows (a [`NamedSeries::key`]: an open tag
    /// set's unsalted, a declared series' whole prefix) with key times in
    /// `[lo, hi]` (the key's unit), newest first.
    pub fn scan(&self, series: &[u8], lo: i64, hi: i64) -> Scan {
        if self.open_tags() {
            return super::series_time_scan(&self.schema, series, lo, hi);
        }
        // A declared table's rows may come from the raw row API, whose
        // cell versions need not be the key's time: they do not bound
        // the read.
        super::newest_first_scan(series.to_vec(), lo, hi)
    }
}

/// One measurement of a database: its field types, its series (sorted by
/// tags) and the tables they are in.
pub struct Measurement {
    pub name: String,
    pub fields: BTreeMap<String, FieldType>,
    pub series: Arc<SeriesList>,
    tables: Vec<SeriesTable>,
    /// Each series' table, by index into `tables` (empty: all in the
    /// first).
    table_of: Vec<u16>,
}

impl Measurement {
    /// A measurement whose series' points are held in memory (a
    /// subquery's answer), read from there and not from the store: its
    /// one table is named but never opened, and a series' key is its
    /// index into `series`.
    pub fn in_memory(
        name: &str,
        fields: BTreeMap<String, FieldType>,
        series: Vec<NamedSeries>,
    ) -> Measurement {
        let schema = KeySchema {
            fields: Vec::new(),
            salt: None,
            md5_prefix: 0,
            time_unit: crate::key::TimeUnit::Nanoseconds,
            tags: Some(crate::key::OpenTags::default()),
        };
        Measurement {
            name: name.to_string(),
            fields,
            series: Arc::new(SeriesList::new(series)),
            tables: TableName::parse("subquery:rows")
                .ok()
                .map(|name| SeriesTable {
                    name,
                    schema,
                    family: b"f".to_vec(),
                })
                .into_iter()
                .collect(),
            table_of: Vec::new(),
        }
    }

    /// The tables its series are in.
    pub fn tables(&self) -> &[SeriesTable] {
        &self.tables
    }

    /// The table series `i` (of [`Self::series`]) is in.
    pub fn table_of(&self, i: usize) -> &SeriesTable {
        &self.tables[self.table_of.get(i).map_or(0, |&t| usize::from(t))]
    }

    /// The oldest and newest cell versions (ms) of the measurement's
    /// tables; `None` when one's is not known.
    pub fn cell_time_range(&self, store: &Store) -> Option<(u64, u64)> {
        let mut range: Option<(u64, u64)> = None;
        for t in &self.tables {
            let (min, max) = store.table(&t.name).ok()?.cell_time_range()?;
            range = Some(range.map_or((min, max), |(lo, hi)| (lo.min(min), hi.max(max))));
        }
        range
    }
}

/// Why InfluxQL cannot read declared table `desc` as series, if it
/// cannot.
pub fn unreadable(desc: &TableDescriptor) -> Option<String> {
    let schema = &desc.key;
    if schema.is_open_tags() {
        return None;
    }
    let ends_reversed = schema
        .fields
        .last()
        .is_some_and(|f| matches!(f.encoding, FieldEncoding::ReversedTimestamp));
    let why = if desc.families.is_empty() {
        "it has no column family"
    } else if schema.fields.len() < 2 || !schema.is_series_then_time() || !ends_reversed {
        "InfluxQL reads a declared key of series fields followed by a `reversed_timestamp` \
         (salted by the series, no md5_prefix): query this one through /api/v1/query"
    } else {
        return None;
    };
    Some(format!(
        "table `{}` cannot be read as series: {why}",
        desc.name
    ))
}

/// The key field of a declared table whose value is the measurement.
fn measurement_field(schema: &KeySchema) -> Option<usize> {
    let identity = schema.fields.len().saturating_sub(1);
    schema.fields[..identity]
        .iter()
        .position(|f| f.name == "metric")
        .or_else(|| {
            schema.fields[..identity]
                .iter()
                .position(|f| f.name == "measurement")
        })
}

fn tag_text(v: &FieldValue) -> String {
    match v {
        FieldValue::Str(s) => s.clone(),
        FieldValue::Uint(n) => n.to_string(),
    }
}

/// The declared tables of `db` InfluxQL reads, in name order.
fn declared_tables(store: &Store, db: &str) -> Vec<TableDescriptor> {
    let mut tables: Vec<TableDescriptor> = store
        .catalog()
        .tables(Some(db))
        .into_iter()
        .filter(|t| {
            !t.key.is_open_tags() && !t.name.table.starts_with("__") && unreadable(t).is_none()
        })
        .collect();
    tables.sort_by(|a, b| a.name.table.cmp(&b.name.table));
    tables
}

/// The declared measurements of `db`: `only` one, else all. A table
/// without a measurement field is listed only when its name is asked
/// for (or all are).
fn declared(
    store: &Store,
    policy: &PolicyTables,
    only: Option<&str>,
) -> Result<BTreeMap<String, Measurement>, String> {
    if !policy.is_autogen() {
        return Ok(BTreeMap::new());
    }
    let db = policy.db.as_str();
    /// A measurement's series as the tables are walked: the tables it is
    /// in (the one being walked last), each series with its table's index.
    #[derive(Default)]
    struct Gathered {
        tables: Vec<SeriesTable>,
        series: Vec<(NamedSeries, u16)>,
        fields: BTreeMap<String, FieldType>,
    }
    let mut gathered: BTreeMap<String, Gathered> = BTreeMap::new();
    for desc in declared_tables(store, db) {
        let by_field = measurement_field(&desc.key);
        if by_field.is_none() && only.is_some_and(|m| m != desc.name.table) {
            continue;
        }
        let Some(series_table) = SeriesTable::of(&desc) else {
            continue;
        };
        let table = store.table(&desc.name).map_err(|e| e.to_string())?;
        let listing =
            super::series_list::list_series(&table, usize::MAX).map_err(|e| e.to_string())?;
        for entry in listing.series {
            let metric = match by_field {
                Some(i) => entry
                    .key
                    .get(i)
                    .map(|(_, v)| tag_text(v))
                    .unwrap_or_default(),
                None => desc.name.table.clone(),
            };
            if only.is_some_and(|m| m != metric) {
                continue;
            }
            let g = gathered.entry(metric.clone()).or_default();
            if g.tables.last().is_none_or(|t| t.name != desc.name) {
                g.tables.push(series_table.clone());
            }
            let at =
                u16::try_from(g.tables.len() - 1).map_err(|_| "too many tables".to_string())?;
            for (f, t) in entry.fields.iter().zip(&entry.field_types) {
                if let Some(t) = t {
                    g.fields.entry(f.clone()).or_insert(*t);
                }
            }
            let tags: BTreeMap<String, String> = entry
                .key
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != by_field)
                .map(|(_, (k, v))| (k.clone(), tag_text(v)))
                .collect();
            g.series.push((
                NamedSeries {
                    key: entry.prefix,
                    metric,
                    tags,
                },
                at,
            ));
        }
    }
    Ok(gathered
        .into_iter()
        .map(|(name, mut g)| {
            g.series.sort_by(|a, b| a.0.tags.cmp(&b.0.tags));
            let table_of = g.series.iter().map(|(_, t)| *t).collect();
            let series = g.series.into_iter().map(|(s, _)| s).collect();
            let m = Measurement {
                name: name.clone(),
                fields: g.fields,
                series: Arc::new(SeriesList::new(series)),
                tables: g.tables,
                table_of,
            };
            (name, m)
        })
        .collect())
}

/// Measurement `m` of open table `desc`, from `dictionary` (in cluster
/// mode refreshed from the object store first: every node's series);
/// `None` when there is no such table (or no dictionary).
fn open_measurement(
    dictionary: Option<&Dictionary>,
    desc: &TableDescriptor,
    m: &str,
) -> Result<Option<Measurement>, String> {
    let Some(dictionary) = dictionary else {
        return Ok(None);
    };
    let table_name = desc.name.table.as_str();
    dictionary.refresh(table_name).map_err(|e| e.to_string())?;
    let Some(table) = SeriesTable::of(desc) else {
        return Ok(None);
    };
    Ok(Some(Measurement {
        name: m.to_string(),
        fields: dictionary.fields_of(table_name),
        series: dictionary.series_of(table_name),
        tables: vec![table],
        table_of: Vec::new(),
    }))
}

/// Measurement `m` of a database's retention policy (`None`: there is
/// none). Its open table answers it from `dictionary`; otherwise the
/// declared tables holding series of `m`.
pub fn measurement(
    store: &Store,
    dictionary: Option<&Dictionary>,
    policy: &PolicyTables,
    m: &str,
) -> Result<Option<Measurement>, String> {
    if !m.starts_with("__")
        && let Ok(name) = policy.table(m)
        && let Ok(desc) = store.catalog().table(&name)
    {
        if let Some(why) = unreadable(&desc) {
            return Err(why);
        }
        if desc.key.is_open_tags() {
            return open_measurement(dictionary, &desc, m);
        }
    }
    Ok(declared(store, policy, Some(m))?.remove(m))
}

/// Every measurement of a database's retention policy, in name order:
/// the open tables with series in `dictionary`, and the declared tables'
/// measurements.
pub fn measurements(
    store: &Store,
    dictionary: Option<&Dictionary>,
    policy: &PolicyTables,
) -> Result<Vec<Measurement>, String> {
    let db = policy.db.as_str();
    let mut all = declared(store, policy, None)?;
    // An open table answers its measurement over declared ones, as
    // [`measurement`] does.
    // In cluster mode another node may have written any open table of
    // the database: each is asked (those with no series yet answer none).
    let open_tables = match dictionary {
        Some(d) if d.is_shared() => store
            .catalog()
            .tables(Some(db))
            .into_iter()
            .filter(|desc| desc.key.is_open_tags())
            .map(|desc| desc.name.table)
            .collect(),
        Some(d) => d.tables(),
        None => Default::default(),
    };
    for t in open_tables {
        let Some(m) = policy.measurement_of(&t) else {
            continue;
        };
        let open = TableName::parse(&format!("{db}:{t}"))
            .ok()
            .and_then(|name| store.catalog().table(&name).ok())
            .filter(|desc| desc.key.is_open_tags());
        let Some(desc) = open else {
            continue;
        };
        if let Some(found) = open_measurement(dictionary, &desc, m)?
            && !found.series.is_empty()
        {
            all.insert(m.to_string(), found);
        }
    }
    Ok(all.into_values().collect())
}

/// The measurements of every retention policy of `db` (`only` one when
/// given), in name order, each with the series and fields of any policy
/// (series of the same tags once): InfluxDB 1.6 keeps one index of a
/// database, which its `SHOW` statements but `SHOW FIELD KEYS` list. A
/// measurement of several policies is for listing: its points are read
/// through the one of its policy ([`measurement`]).
pub fn of_every_policy(
    store: &Store,
    dictionary: Option<&Dictionary>,
    db: &str,
    only: Option<&str>,
) -> Result<Vec<Measurement>, String> {
    let mut policies: Vec<PolicyTables> = store
        .catalog()
        .retention_policies(db)
        .policies
        .iter()
        .map(|p| PolicyTables::new(db, &p.name))
        .collect();
    // Declared tables are autogen's, there whatever became of it.
    if !policies.iter().any(PolicyTables::is_autogen) {
        policies.insert(0, PolicyTables::autogen(db));
    }
    let mut by_name: BTreeMap<String, Vec<Measurement>> = BTreeMap::new();
    for policy in &policies {
        let found = match only {
            Some(m) => measurement(store, dictionary, policy, m)?
                .into_iter()
                .collect(),
            None => measurements(store, dictionary, policy)?,
        };
        for m in found {
            by_name.entry(m.name.clone()).or_default().push(m);
        }
    }
    Ok(by_name
        .into_values()
        .filter_map(|mut of_name| {
            if of_name.len() == 1 {
                return of_name.pop();
            }
            let mut all = of_name.into_iter();
            let mut first = all.next()?;
            let mut series: Vec<NamedSeries> = first.series.to_vec();
            for other in all {
                for (field, ty) in other.fields {
                    first.fields.entry(field).or_insert(ty);
                }
                series.extend(other.series.iter().cloned());
            }
            series.sort_by(|a, b| (&a.metric, &a.tags).cmp(&(&b.metric, &b.tags)));
            series.dedup_by(|a, b| a.metric == b.metric && a.tags == b.tags);
            first.series = Arc::new(SeriesList::new(series));
            first.table_of = Vec::new();
            first.tables.truncate(1);
            Some(first)
        })
        .collect())
}

/// Whether InfluxQL reads something of namespace `db`: a table of open
/// tag sets or a declared table it reads as series.
pub fn holds_series_tables(tables: &[TableDescriptor], db: &str) -> bool {
    tables.iter().any(|t| {
        t.name.namespace == db
            && (t.key.is_open_tags() && is_measurement_table(&t.name.table)
                || !t.name.table.starts_with("__") && unreadable(t).is_none())
    })
}

pub use crate::catalog::is_measurement_table;
