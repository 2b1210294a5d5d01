//! Prometheus remote read: over a samples table of open tag sets, label
//! matchers choose series through the series dictionary (no point is read
//! to choose them); over InfluxDB-style measurements (open tag sets or
//! declared keys), each numeric field is a metric. The time range bounds
//! each series' scan through its key.

use crate::catalog::TableName;
use crate::error::Error;
use crate::key::TagKey;
use crate::series::Dictionary;
use crate::store::Store;
use crate::value::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchOp {
    Equal,
    NotEqual,
    /// Fully anchored, as Prometheus anchors them.
    Regex,
    NotRegex,
}

/// A label matcher of a remote read query.
#[derive(Debug, Clone)]
pub struct Matcher {
    pub op: MatchOp,
    pub name: String,
    pub value: String,
}

/// A series as remote read answers it: labels sorted by name
/// (`__name__` among them), samples (value, ms) oldest first.
pub type PromSeries = (Vec<(String, String)>, Vec<(f64, i64)>);

/// What a read wants of each series.
#[derive(Debug, Clone, Copy)]
pub struct ReadRange {
    pub start_ms: i64,
    pub end_ms: i64,
    /// Only which series have a sample in the range: each comes with its
    /// newest sample in it alone, read without scanning the rest.
    pub labels_only: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("bad regex `{}`: {}", crate::codec::quote_prefix(.0), .1)]
    BadRegex(String, String),
    /// Past the samples the read was allowed (the budget it was given).
    #[error("the read would answer more than {0} samples")]
    TooManySamples(usize),
    /// The database's measurements could not be listed.
    #[error("cannot list the measurements: {0}")]
    Listing(String),
    #[error(transparent)]
    Store(#[from] Error),
}

/// The series of `table` that every matcher accepts (a missing label
/// compares as ""), with their samples in `[start_ms, end_ms]`, sorted by
/// labels. A series with no sample in the range is left out. More than
/// `max_samples` samples in all is [`ReadError::TooManySamples`].
pub fn read(
    store: &Store,
    dictionary: &Dictionary,
    table: &TableName,
    matchers: &[Matcher],
    range: ReadRange,
    max_samples: usize,
) -> Result<Vec<PromSeries>, ReadError> {
    let ReadRange {
        start_ms, end_ms, ..
    } = range;
    let compiled = compile(matchers)?;
    let schema = store.table(table)?.desc.key.clone();
    let mut answered = 0usize;
    let mut out = Vec::new();
    // An exact metric name (every PromQL selector has one but `{__name__=~…}`)
    // narrows the series before any label is compared.
    let metric = matchers
        .iter()
        .find(|m| m.op == MatchOp::Equal && m.name == "__name__")
        .map(|m| m.value.as_str());
    // In cluster mode: every node's series of the table.
    dictionary.refresh(&table.table)?;
    for s in dictionary.series_of_metric(&table.table, metric) {
        let mut labels: Vec<(String, String)> = std::iter::once(("__name__".to_string(), s.metric))
            .chain(s.tags)
            .collect();
        labels.sort();
        let accepted = accepts(&compiled, &labels);
        if !accepted || end_ms < start_ms || end_ms < 0 {
            continue;
        }
        let scan = super::series_time_scan(&schema, &s.key, start_ms, end_ms);
        let mut scanner = store.scanner(table, &scan)?;
        let mut samples = Vec::new();
        while let Some(row) = scanner.next_row()? {
            let Some(TagKey { time, .. }) = schema.decode_tag_key(&row.key) else {
                continue;
            };
            let value = row
                .cells
                .iter()
                .find(|c| &c.qualifier[..] == b"value")
                .and_then(|c| Value::decode(&c.value));
            if let Some(Value::Float(v)) = value {
                answered += 1;
                if answered > max_samples {
                    return Err(ReadError::TooManySamples(max_samples));
                }
                samples.push((v, time as i64));
                if range.labels_only {
                    break;
                }
            }
        }
        if samples.is_empty() {
            continue;
        }
        samples.reverse();
        out.push((labels, samples));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Matchers with their regexes compiled (anchored, as Prometheus').
type Compiled<'m> = Vec<(&'m Matcher, Option<regex_lite::Regex>)>;

fn compile(matchers: &[Matcher]) -> Result<Compiled<'_>, ReadError> {
    let regexes = matchers
        .iter()
        .filter(|m| matches!(m.op, MatchOp::Regex | MatchOp::NotRegex))
        .count();
    matchers
        .iter()
        .map(|m| {
            let re = match m.op {
                MatchOp::Regex | MatchOp::NotRegex => Some(
                    crate::query::compile_regex(&format!("^(?:{})$", m.value), regexes)
                        .map_err(|e| ReadError::BadRegex(m.value.clone(), e))?,
                ),
                _ => None,
            };
            Ok((m, re))
        })
        .collect()
}

/// Whether every matcher accepts `labels` (a missing label is "").
fn accepts(compiled: &Compiled<'_>, labels: &[(String, String)]) -> bool {
    compiled.iter().all(|(m, re)| {
        let v = labels
            .iter()
            .find(|(k, _)| *k == m.name)
            .map_or("", |(_, v)| v.as_str());
        match (m.op, re) {
            (MatchOp::Equal, _) => v == m.value,
            (MatchOp::NotEqual, _) => v != m.value,
            (MatchOp::Regex, Some(re)) => re.is_match(v),
            (MatchOp::NotRegex, Some(re)) => !re.is_match(v),
            _ => false,
        }
    })
}

/// The metric name a measurement's field reads as through remote read:
/// `<measurement>_<field>`, as VictoriaMetrics names InfluxDB data.
pub fn measurement_metric(measurement: &str, field: &str) -> String {
    format!("{measurement}_{field}")
}

/// The series of InfluxDB-style `measurements` (of open tag sets or
/// declared keys, [`super::measurements`]) as remote read answers them:
/// each numeric or boolean field of a measurement is a metric
/// ([`measurement_metric`]), its tags the labels; a boolean reads 1 or 0
/// and a string field is left out (as VictoriaMetrics reads them). Times
/// are cut to milliseconds; of two points of a series in one millisecond
/// the newer stands. Samples count against `max_samples` as [`read`]'s.
pub fn read_measurements(
    store: &Store,
    measurements: &[super::measurements::Measurement],
    matchers: &[Matcher],
    range: ReadRange,
    max_samples: usize,
) -> Result<Vec<PromSeries>, ReadError> {
    use crate::series::FieldType;
    let compiled = compile(matchers)?;
    let exact = matchers
        .iter()
        .find(|m| m.op == MatchOp::Equal && m.name == "__name__")
        .map(|m| m.value.as_str());
    let mut answered = 0usize;
    let mut out = Vec::new();
    if range.end_ms < range.start_ms || range.end_ms < 0 {
        return Ok(out);
    }
    for m in measurements {
        let measurement = m.name.as_str();
        // An exact metric name (every PromQL selector has one but
        // `{__name__=~…}`) chooses the measurement and field before any
        // series is looked at.
        let fields: Vec<&String> = m
            .fields
            .iter()
            .filter(|(_, ty)| **ty != FieldType::String)
            .map(|(name, _)| name)
            .filter(|field| exact.is_none_or(|n| n == measurement_metric(measurement, field)))
            .collect();
        if fields.is_empty() {
            continue;
        }
        for (at, s) in m.series.iter().enumerate() {
            let table = m.table_of(at);
            let unit = table.schema.time_unit;
            let lo = unit.from_ms_floor(range.start_ms.max(0) as u64);
            // The last unit of the end's millisecond.
            let hi = unit
                .from_ms_floor((range.end_ms as u64).saturating_add(1))
                .saturating_sub(1);
            let (Ok(lo), Ok(hi)) = (i64::try_from(lo), i64::try_from(hi)) else {
                continue;
            };
            // The fields whose metric the matchers take for this series.
            let mut wanted: Vec<(usize, Vec<(String, String)>)> = Vec::new();
            for (i, field) in fields.iter().enumerate() {
                let mut labels: Vec<(String, String)> = std::iter::once((
                    "__name__".to_string(),
                    measurement_metric(measurement, field),
                ))
                .chain(s.tags.iter().map(|(k, v)| (k.clone(), v.clone())))
                .collect();
                labels.sort();
                if accepts(&compiled, &labels) {
                    wanted.push((i, labels));
                }
            }
            if wanted.is_empty() {
                continue;
            }
            let mut scan = table.scan(&s.key, lo, hi);
            scan.columns.columns = wanted
                .iter()
                .map(|(i, _)| (table.family.clone(), fields[*i].as_bytes().to_vec()))
                .collect();
            let mut samples: Vec<Vec<(f64, i64)>> = vec![Vec::new(); wanted.len()];
            let mut scanner = store.scanner(&table.name, &scan)?;
            while let Some(row) = scanner.next_row()? {
                let Some(time) = table.key_time(&row.key) else {
                    continue;
                };
                let Some(ms) = unit.to_ms_floor(time).and_then(|ms| i64::try_from(ms).ok()) else {
                    continue;
                };
                for (slot, (i, _)) in wanted.iter().enumerate() {
                    let value = row
                        .cells
                        .iter()
                        .find(|c| c.qualifier[..] == *fields[*i].as_bytes())
                        .and_then(|c| Value::decode(&c.value))
                        .and_then(|v| match v {
                            Value::Float(x) => Some(x),
                            Value::Int(x) => Some(x as f64),
                            Value::Uint(x) => Some(x as f64),
                            Value::Bool(b) => Some(f64::from(u8::from(b))),
                            Value::Str(_) => None,
                        });
                    let Some(v) = value else { continue };
                    // Rows come newest first: one already in this
                    // millisecond is the newer.
                    let got = &mut samples[slot];
                    if got.last().is_some_and(|&(_, t)| t == ms)
                        || (range.labels_only && !got.is_empty())
                    {
                        continue;
                    }
                    answered += 1;
                    if answered > max_samples {
                        return Err(ReadError::TooManySamples(max_samples));
                    }
                    got.push((v, ms));
                }
                if range.labels_only && samples.iter().all(|s| !s.is_empty()) {
                    break;
                }
            }
            for ((_, labels), mut got) in wanted.into_iter().zip(samples) {
                if got.is_empty() {
                    continue;
                }
                got.reverse();
                out.push((labels, got));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// A database read as Prometheus reads it: its samples table as written
/// and every other measurement as `<measurement>_<field>` metrics. The
/// measurements are listed once, on the first read that needs them, so
/// the several selectors of one PromQL query or remote read request
/// share the listing.
pub struct DatabaseReader<'s> {
    store: &'s Store,
    tag_sets: &'s crate::series::TagSets,
    samples: TableName,
    measurements: Option<Vec<super::measurements::Measurement>>,
}

impl<'s> DatabaseReader<'s> {
    pub fn new(
        store: &'s Store,
        tag_sets: &'s crate::series::TagSets,
        samples: TableName,
    ) -> DatabaseReader<'s> {
        DatabaseReader {
            store,
            tag_sets,
            samples,
            measurements: None,
        }
    }

    /// The database's series every matcher accepts with their samples in
    /// the range, sorted by labels; at most `max_samples` samples in all.
    pub fn read(
        &mut self,
        matchers: &[Matcher],
        range: ReadRange,
        max_samples: usize,
    ) -> Result<Vec<PromSeries>, ReadError> {
        let mut series = match self.store.table(&self.samples) {
            Ok(_) => {
                let dictionary = self
                    .tag_sets
                    .dictionary(self.store, &self.samples.namespace)?;
                read(
                    self.store,
                    &dictionary,
                    &self.samples,
                    matchers,
                    range,
                    max_samples,
                )?
            }
            Err(Error::NotFound(_)) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        let read_so_far: usize = series.iter().map(|(_, s)| s.len()).sum();
        if self.measurements.is_none() {
            self.measurements = Some(self.list_measurements()?);
        }
        let measurements = self.measurements.as_deref().unwrap_or_default();
        if !measurements.is_empty() {
            let more = read_measurements(
                self.store,
                measurements,
                matchers,
                range,
                max_samples - read_so_far,
            )?;
            series.extend(more);
            series.sort_by(|a, b| a.0.cmp(&b.0));
        }
        Ok(series)
    }

    /// The database's measurements other than the samples table itself.
    fn list_measurements(&self) -> Result<Vec<super::measurements::Measurement>, ReadError> {
        let namespace = &self.samples.namespace;
        // A dictionary is made on first use: a read of a database with no
        // open table makes none.
        let open_tables = self
            .store
            .catalog()
            .tables(Some(namespace))
            .iter()
            .any(|t| t.key.is_open_tags() && crate::catalog::is_measurement_table(&t.name.table));
        let dictionary = match open_tables {
            false => None,
            true => Some(self.tag_sets.dictionary(self.store, namespace)?),
        };
        // The default retention policy's, as InfluxQL reads without one.
        let policies = self.store.catalog().retention_policies(namespace);
        let policy = policies
            .resolve(None)
            .map_or(crate::catalog::AUTOGEN, |p| p.name.as_str());
        Ok(super::measurements::measurements(
            self.store,
            dictionary.as_deref(),
            &crate::catalog::PolicyTables::new(namespace, policy),
        )
        .map_err(ReadError::Listing)?
        .into_iter()
        .filter(|m| !m.tables().iter().any(|t| t.name == self.samples))
        .collect())
    }
}
