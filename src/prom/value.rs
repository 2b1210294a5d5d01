//! What PromQL's evaluation passes around: values, series, labels, the
//! errors, and the helpers the engine and the functions share.

use crate::query::prom_read::ReadError;

/// Labels sorted by name, `__name__` among them.
pub type Labels = Vec<(String, String)>;

pub const METRIC_NAME: &str = "__name__";

/// Why a query was not answered, as Prometheus' API sorts it.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The query or a parameter is wrong (`bad_data`, 400).
    #[error("{0}")]
    BadData(String),
    /// The query is valid but cannot be evaluated (`execution`, 422).
    #[error("{0}")]
    Execution(String),
    /// Past the samples a query may hold (`execution`, 422).
    #[error("query processing would load too many samples into memory in query execution")]
    TooManySamples,
    /// Past the query's timeout (`timeout`, 503).
    #[error("query timed out in {0}")]
    Timeout(&'static str),
    /// The store could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// A series of an instant vector: one point per step, `None` where it
/// has no value.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: Labels,
    pub points: Vec<Option<f64>>,
}

/// A range vector: each series' samples, and for each step the end of
/// its window (`[end - range, end]`).
#[derive(Debug, Clone)]
pub struct RangeValue {
    pub series: Vec<(Labels, Vec<(i64, f64)>)>,
    pub range: i64,
    pub ends: Vec<i64>,
}

impl RangeValue {
    /// The samples of series `s` in the window of step `step`.
    pub fn window(&self, s: usize, step: usize) -> &[(i64, f64)] {
        let samples = &self.series[s].1;
        let end = self.ends[step];
        let lo = samples.partition_point(|(t, _)| *t < end - self.range);
        let hi = samples.partition_point(|(t, _)| *t <= end);
        &samples[lo..hi.max(lo)]
    }
}

#[derive(Debug, Clone)]
pub enum Value {
    Scalar(Vec<f64>),
    Vector(Vec<Series>),
    Matrix(RangeValue),
    Str(String),
}

impl Value {
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Value::Scalar(_) => "scalar",
            Value::Vector(_) => "instant vector",
            Value::Matrix(_) => "range vector",
            Value::Str(_) => "string",
        }
    }
}

pub fn drop_name(labels: &mut Labels) {
    labels.retain(|(k, _)| k != METRIC_NAME);
}

/// Prometheus refuses an answer with two series of the same labels.
pub fn check_unique(series: &[Series]) -> Result<(), EvalError> {
    let mut seen = std::collections::HashSet::with_capacity(series.len());
    for s in series {
        if !seen.insert(&s.labels) {
            return Err(EvalError::Execution(
                "vector cannot contain metrics with the same labelset".into(),
            ));
        }
    }
    Ok(())
}

/// The φ-quantile of `values` with linear interpolation (Prometheus'
/// `quantile`).
pub fn quantile(q: f64, values: &mut [f64]) -> f64 {
    if values.is_empty() || q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let n = values.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (lower + 1.0).min(n - 1.0);
    let weight = rank - rank.floor();
    values[lower as usize] * (1.0 - weight) + values[upper as usize] * weight
}

pub fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
