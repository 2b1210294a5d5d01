//! Prometheus remote read over a table of open tag sets: label matchers
//! choose series through the series dictionary (no point is read to
//! choose them), the time range bounds each series' scan through its key.

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
    let mut compiled = Vec::with_capacity(matchers.len());
    let regexes = matchers
        .iter()
        .filter(|m| matches!(m.op, MatchOp::Regex | MatchOp::NotRegex))
        .count();
    for m in matchers {
        let re = match m.op {
            MatchOp::Regex | MatchOp::NotRegex => Some(
                crate::query::compile_regex(&format!("^(?:{})$", m.value), regexes)
                    .map_err(|e| ReadError::BadRegex(m.value.clone(), e))?,
            ),
            _ => None,
        };
        compiled.push((m, re));
    }
    let schema = store.table(table)?.desc.key.clone();
    let mut answered = 0usize;
    let mut out = Vec::new();
    // An exact metric name (every PromQL selector has one but `{__name__=~…}`)
    // narrows the series before any label is compared.
    let metric = matchers
        .iter()
        .find(|m| m.op == MatchOp::Equal && m.name == "__name__")
        .map(|m| m.value.as_str());
    for s in dictionary.series_of_metric(&table.table, metric) {
        let mut labels: Vec<(String, String)> = std::iter::once(("__name__".to_string(), s.metric))
            .chain(s.tags)
            .collect();
        labels.sort();
        let accepted = compiled.iter().all(|(m, re)| {
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
        });
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
