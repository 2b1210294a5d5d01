//! InfluxQL's aggregate functions as running reducers: a bucket's values
//! are folded in as they are read, so a statement over millions of points
//! holds one small state per (group, time bucket, function), never the
//! points. Partial states from different series and threads merge; every
//! choice among equal candidates is decided by value and time, never by
//! arrival order, so which point a selector picks does not depend on how
//! reading was split. A float sum (and mean) is added in another order
//! than one pass would, so its last bits may differ (InfluxDB's own
//! shards merge partial sums the same way).

use crate::series::FieldType;
use crate::value::Value;

/// One cell of an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// Nanoseconds since the epoch (the `epoch` parameter decides how it
    /// is written).
    Time(i64),
    Value(Value),
    Null,
}

/// One series of an answer, as InfluxDB's JSON has it.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesOut {
    pub name: String,
    /// Present when the statement groups by tags.
    pub tags: Option<std::collections::BTreeMap<String, String>>,
    pub columns: Vec<String>,
    pub values: Vec<Vec<Cell>>,
}

/// A function a statement calls, with its argument.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Func {
    Mean,
    Max,
    Min,
    Sum,
    Count,
    First,
    Last,
    Spread,
    Percentile(f64),
    Median,
    Mode,
    Stddev,
    /// `count(distinct(x))`.
    CountDistinct,
    /// `integral(x[, unit])`: the unit in nanoseconds.
    Integral(i64),
}

impl Func {
    /// The function InfluxQL names `name`; `None` for one halite does
    /// not answer.
    pub(super) fn parse(name: &str, arg: Option<f64>) -> Result<Func, String> {
        Ok(match name {
            "median" => Func::Median,
            "mode" => Func::Mode,
            "stddev" => Func::Stddev,
            // The unit was checked to be a duration where it was parsed.
            "integral" => Func::Integral(arg.map_or(1_000_000_000, |ns| ns as i64)),
            "mean" => Func::Mean,
            "max" => Func::Max,
            "min" => Func::Min,
            "sum" => Func::Sum,
            "count" => Func::Count,
            "first" => Func::First,
            "last" => Func::Last,
            "spread" => Func::Spread,
            "percentile" => match arg {
                Some(p) => Func::Percentile(p),
                None => {
                    return Err(
                        "invalid number of arguments for percentile, expected 2, got 1".into(),
                    );
                }
            },
            _ => return Err(format!("undefined function {name}()")),
        })
    }

    /// The type of the function's answers over a field of type `ty`,
    /// which InfluxDB gives the buckets `fill(N)` and `fill(linear)` fill
    /// in too (`None`: the field is not known). An unsigned field's
    /// answers are integers here, as halite answers them.
    pub(super) fn answer_type(self, ty: Option<FieldType>) -> Option<AnswerType> {
        let integer_field = matches!(ty, Some(FieldType::Integer | FieldType::Unsigned));
        match self {
            Func::Count | Func::CountDistinct => Some(AnswerType::Integer),
            Func::Mean | Func::Median | Func::Stddev | Func::Integral(_) => Some(AnswerType::Float),
            Func::Max | Func::Min if ty == Some(FieldType::Boolean) => Some(AnswerType::Boolean),
            Func::First | Func::Last | Func::Mode => Some(match ty? {
                FieldType::Integer | FieldType::Unsigned => AnswerType::Integer,
                FieldType::Float => AnswerType::Float,
                FieldType::Boolean => AnswerType::Boolean,
                FieldType::String => AnswerType::String,
            }),
            _ if integer_field => Some(AnswerType::Integer),
            _ => Some(AnswerType::Float),
        }
    }

    /// InfluxDB 1.6's refusal of the function over a field of type `ty`
    /// (its iterators' words), if it refuses it: `mean`, `sum`, `spread`,
    /// `percentile`, `median`, `stddev` and `integral` take numbers only,
    /// `max` and `min` booleans too, `count`, `first`, `last`, `mode` and
    /// `count(distinct())` anything.
    pub(super) fn refusal(self, name: &str, ty: FieldType) -> Option<String> {
        if self.takes(ty) {
            return None;
        }
        let iterator = match ty {
            FieldType::String => "string",
            _ => "boolean",
        };
        Some(format!(
            "unsupported {name} iterator type: *query.{iterator}InterruptIterator"
        ))
    }

    /// Whether the function takes values of a field of type `ty` (what
    /// `mean(*)` expands to, and what [`Self::refusal`] refuses).
    pub(super) fn takes(self, ty: FieldType) -> bool {
        let anything = matches!(
            self,
            Func::Count | Func::First | Func::Last | Func::Mode | Func::CountDistinct
        );
        match ty {
            FieldType::String => anything,
            FieldType::Boolean => anything || matches!(self, Func::Max | Func::Min),
            _ => true,
        }
    }

    /// Whether the function's state keeps each value it is given (until
    /// its answer is made), rather than a few numbers.
    pub(super) fn keeps_values(self) -> bool {
        matches!(
            self,
            Func::Percentile(_)
                | Func::Median
                | Func::Integral(_)
                | Func::Mode
                | Func::CountDistinct
        )
    }

    /// Whether the function picks one point, whose time an answer
    /// without `GROUP BY time` shows.
    pub(super) fn selects(self) -> bool {
        matches!(
            self,
            Func::First | Func::Last | Func::Max | Func::Min | Func::Percentile(_)
        )
    }
}

/// The type of a function's answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum AnswerType {
    Integer,
    Float,
    Boolean,
    String,
}

/// The running state of one function over one bucket.
#[derive(Debug, Clone, Default)]
pub(super) struct Reducer {
    /// Values of any type (`count`).
    count: i64,
    /// Numeric values, and their sum as a float and as an integer.
    numeric: i64,
    sum: f64,
    int_sum: i64,
    /// max and min: (time, value, origin), the earliest of equal values.
    best: Option<(i64, f64, u32)>,
    /// first and last: (time, value, origin), the larger of equal times.
    pick: Option<(i64, Value, u32)>,
    /// spread: the largest and smallest numeric values.
    high: f64,
    low: f64,
    /// stddev: the sum of squared differences from the mean.
    m2: f64,
    /// percentile, median and integral: every numeric (time, value,
    /// origin).
    all: Vec<(i64, f64, u32)>,
    /// mode and count(distinct()): every (time, value).
    values: Vec<(i64, Value)>,
    /// Which series of the statement this state folds (the caller's
    /// numbering): a selector's answer says whose point it chose, for the
    /// columns beside it (`max(x), host`).
    origin: u32,
}

impl Reducer {
    /// An empty state for the points of series `origin`.
    pub(super) fn of(origin: u32) -> Reducer {
        Reducer {
            origin,
            ..Reducer::default()
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// How many values the state keeps ([`Func::keeps_values`]).
    pub(super) fn kept(&self) -> usize {
        self.all.len() + self.values.len()
    }

    pub(super) fn add(&mut self, func: Func, time: i64, value: &Value) {
        self.count += 1;
        match func {
            Func::Count => {}
            Func::First | Func::Last => {
                if self.replaces_pick(func, time, value, self.origin) {
                    self.pick = Some((time, value.clone(), self.origin));
                }
            }
            Func::Mode | Func::CountDistinct => self.values.push((time, value.clone())),
            // max and min take booleans, `true` above `false`.
            Func::Max | Func::Min if matches!(value, Value::Bool(_)) => {
                self.numeric += 1;
                let x = if *value == Value::Bool(true) {
                    1.0
                } else {
                    0.0
                };
                self.offer_best(func, time, x, self.origin);
            }
            _ => {
                let Some(x) = as_f64(value) else { return };
                self.add_numeric(func, time, x, value);
            }
        }
    }

    /// As [`Self::add`] of each of `xs` as a float, in order, value `i`
    /// at `time_of(i)`; a mean or sum adds them without looking at each.
    pub(super) fn add_floats(&mut self, func: Func, xs: &[f64], time_of: impl Fn(usize) -> i64) {
        match func {
            Func::Count => self.count += xs.len() as i64,
            Func::Mean | Func::Sum => {
                self.count += xs.len() as i64;
                self.numeric += xs.len() as i64;
                for x in xs {
                    self.sum += x;
                }
            }
            _ => {
                for (i, &x) in xs.iter().enumerate() {
                    self.add(func, time_of(i), &Value::Float(x));
                }
            }
        }
    }

    fn add_numeric(&mut self, func: Func, time: i64, x: f64, value: &Value) {
        self.numeric += 1;
        match func {
            Func::Mean => self.sum += x,
            Func::Sum => {
                self.sum += x;
                self.int_sum = self.int_sum.wrapping_add(match value {
                    Value::Int(i) => *i,
                    Value::Uint(u) => *u as i64,
                    _ => 0,
                });
            }
            Func::Max | Func::Min => self.offer_best(func, time, x, self.origin),
            Func::Spread => {
                if self.numeric == 1 {
                    (self.high, self.low) = (x, x);
                } else {
                    self.high = self.high.max(x);
                    self.low = self.low.min(x);
                }
            }
            Func::Percentile(_) | Func::Median | Func::Integral(_) => {
                self.all.push((time, x, self.origin))
            }
            Func::Stddev => {
                // Welford's update: the mean before and after `x`.
                let before = if self.numeric > 1 {
                    self.sum / (self.numeric - 1) as f64
                } else {
                    x
                };
                self.sum += x;
                let after = self.sum / self.numeric as f64;
                self.m2 += (x - before) * (x - after);
            }
            Func::Count | Func::First | Func::Last | Func::Mode | Func::CountDistinct => {}
        }
    }

    /// first (last): the earliest (latest) time; of equal times, as
    /// InfluxDB's first and last reducers choose, the larger value
    /// (several series reporting at the same instant, grouped into one);
    /// of equal values too, the first series, so that the columns beside
    /// it do not depend on how the reading was split.
    fn replaces_pick(&self, func: Func, time: i64, value: &Value, origin: u32) -> bool {
        let Some((t, v, o)) = &self.pick else {
            return true;
        };
        let further = if func == Func::First {
            time < *t
        } else {
            time > *t
        };
        further || (time == *t && (larger(value, v) || (!larger(v, value) && origin < *o)))
    }

    /// max (min): of equal values, the earliest; of equal times too, the
    /// first series.
    fn offer_best(&mut self, func: Func, time: i64, x: f64, origin: u32) {
        let better = match self.best {
            None => true,
            Some((t, best, o)) => {
                (if func == Func::Max {
                    x > best
                } else {
                    x < best
                }) || (x == best && (time < t || (time == t && origin < o)))
            }
        };
        if better {
            self.best = Some((time, x, origin));
        }
    }

    /// Folds in another state of the same function.
    pub(super) fn merge(&mut self, func: Func, other: Reducer) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = other;
            return;
        }
        self.count += other.count;
        let numeric_before = self.numeric;
        self.numeric += other.numeric;
        match func {
            Func::Count => {}
            Func::First | Func::Last => {
                if let Some((t, v, o)) = other.pick
                    && self.replaces_pick(func, t, &v, o)
                {
                    self.pick = Some((t, v, o));
                }
            }
            Func::Mode | Func::CountDistinct => self.values.extend(other.values),
            Func::Stddev => {
                // Chan et al.'s merge of two partial variances.
                if numeric_before > 0 && other.numeric > 0 {
                    let (na, nb) = (numeric_before as f64, other.numeric as f64);
                    let delta = other.sum / nb - self.sum / na;
                    self.m2 += other.m2 + delta * delta * na * nb / (na + nb);
                } else {
                    self.m2 += other.m2;
                }
                self.sum += other.sum;
            }
            Func::Mean => self.sum += other.sum,
            Func::Sum => {
                self.sum += other.sum;
                self.int_sum = self.int_sum.wrapping_add(other.int_sum);
            }
            Func::Max | Func::Min => {
                if let Some((t, x, o)) = other.best {
                    self.offer_best(func, t, x, o);
                }
            }
            Func::Spread => {
                if numeric_before == 0 {
                    (self.high, self.low) = (other.high, other.low);
                } else if other.numeric > 0 {
                    self.high = self.high.max(other.high);
                    self.low = self.low.min(other.low);
                }
            }
            Func::Percentile(_) | Func::Median | Func::Integral(_) => self.all.extend(other.all),
        }
    }

    /// The answer's cell, and for a selector the time of the value it
    /// chose and the origin of its series. An integral's answer is worked
    /// out across buckets ([`integrals`]), not here.
    pub(super) fn finish(self, func: Func, ty: Option<FieldType>) -> (Cell, Option<(i64, u32)>) {
        if self.count == 0 {
            return (Cell::Null, None);
        }
        let answer = func.answer_type(ty);
        let integer = answer == Some(AnswerType::Integer);
        let typed = |x: f64| {
            Cell::Value(match answer {
                Some(AnswerType::Integer) => Value::Int(x as i64),
                Some(AnswerType::Boolean) => Value::Bool(x != 0.0),
                _ => Value::Float(x),
            })
        };
        match func {
            Func::Count => (Cell::Value(Value::Int(self.count)), None),
            Func::First | Func::Last => match self.pick {
                Some((t, v, o)) => (Cell::Value(v), Some((t, o))),
                None => (Cell::Null, None),
            },
            Func::CountDistinct => {
                let mut values: Vec<Value> = self.values.into_iter().map(|(_, v)| v).collect();
                values.sort_by(value_order);
                values.dedup_by(|a, b| value_order(a, b).is_eq());
                (Cell::Value(Value::Int(values.len() as i64)), None)
            }
            Func::Mode => (mode(self.values).map_or(Cell::Null, Cell::Value), None),
            _ if self.numeric == 0 => (Cell::Null, None),
            Func::Mean => (
                Cell::Value(Value::Float(self.sum / self.numeric as f64)),
                None,
            ),
            Func::Sum if integer => (Cell::Value(Value::Int(self.int_sum)), None),
            Func::Sum => (Cell::Value(Value::Float(self.sum)), None),
            Func::Max | Func::Min => match self.best {
                Some((t, x, o)) => (typed(x), Some((t, o))),
                None => (Cell::Null, None),
            },
            Func::Spread => (typed(self.high - self.low), None),
            Func::Percentile(p) => {
                let mut sorted = self.all;
                sorted.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)).then(a.2.cmp(&b.2)));
                // InfluxDB's nearest rank.
                let i = ((sorted.len() as f64) * p / 100.0 + 0.5).floor() as i64 - 1;
                match usize::try_from(i).ok().and_then(|i| sorted.get(i)) {
                    Some(&(t, x, o)) => (typed(x), Some((t, o))),
                    None => (Cell::Null, None),
                }
            }
            Func::Median => {
                let mut xs: Vec<f64> = self.all.into_iter().map(|(_, x, _)| x).collect();
                xs.sort_by(f64::total_cmp);
                let n = xs.len();
                // InfluxDB's: the middle value, or between the two middle
                // ones as low + (high - low) / 2.
                let median = if n % 2 == 1 {
                    xs[n / 2]
                } else {
                    xs[n / 2 - 1] + (xs[n / 2] - xs[n / 2 - 1]) / 2.0
                };
                (Cell::Value(Value::Float(median)), None)
            }
            Func::Stddev if self.numeric < 2 => (Cell::Null, None),
            Func::Stddev => (
                Cell::Value(Value::Float((self.m2 / (self.numeric - 1) as f64).sqrt())),
                None,
            ),
            Func::Integral(_) => (Cell::Null, None),
        }
    }

    /// An integral's points, sorted by time (of one time, by value).
    pub(super) fn into_sorted_points(self) -> Vec<(i64, f64)> {
        let mut points: Vec<(i64, f64)> = self.all.into_iter().map(|(t, x, _)| (t, x)).collect();
        points.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        points
    }
}

/// `integral(x, unit)` of each bucket, from each bucket's points in time
/// order (buckets in ascending order, `every` wide; one bucket without
/// `GROUP BY time`), as InfluxDB 1.6's integral reducer works it out over
/// the group's points as one stream: the trapezium rule, a later point at
/// the time of the one before it taking its place; at a bucket's end the
/// line to the next point is cut where the bucket ends, and the area from
/// there to the next point (across any empty buckets between) counts for
/// the next point's bucket. The last bucket is answered unless its one
/// point lies at its start (no area); a bucket no point of which begins
/// an area answers nothing.
pub(super) fn integrals(
    buckets: &[(i64, Vec<(i64, f64)>)],
    every: Option<i64>,
    unit: i64,
) -> Vec<Option<f64>> {
    let unit = unit as f64;
    let mut out = vec![None; buckets.len()];
    let mut prev: Option<(i64, f64)> = None;
    // The bucket being summed: its index, start and end.
    let mut window: Option<(usize, i64, i64)> = None;
    let mut sum = 0.0;
    for (i, (start, points)) in buckets.iter().enumerate() {
        for &(t, x) in points {
            let Some((pt, px)) = prev else {
                prev = Some((t, x));
                window = Some((
                    i,
                    *start,
                    every.map_or(i64::MAX, |e| start.saturating_add(e)),
                ));
                continue;
            };
            if pt == t {
                prev = Some((t, x));
                continue;
            }
            if let Some((w, _, end)) = window
                && every.is_some()
                && t >= end
            {
                let (mut pt, mut px) = (pt, px);
                if pt != end {
                    let at = px + (x - px) * ((end - pt) as f64 / (t - pt) as f64);
                    sum += 0.5 * (at + px) * ((end - pt) as f64 / unit);
                    (pt, px) = (end, at);
                }
                out[w] = Some(sum);
                sum = 0.0;
                window = Some((
                    i,
                    *start,
                    every.map_or(i64::MAX, |e| start.saturating_add(e)),
                ));
                prev = Some((pt, px));
            }
            let (pt, px) = prev.unwrap_or((t, x));
            sum += 0.5 * (x + px) * ((t - pt) as f64 / unit);
            prev = Some((t, x));
        }
    }
    if let (Some((w, start, _)), Some((pt, _))) = (window, prev)
        && pt != start
    {
        out[w] = Some(sum);
    }
    out
}

/// The most frequent of `values` (time, value), as InfluxDB 1.6's mode
/// chooses: booleans `true` unless `false` is more frequent; others over
/// the values sorted (of one value, by time), a value that reaches the
/// count of the one chosen so far taking its place when it first came no
/// later than the chosen one's latest point; so of values once each, the
/// least.
fn mode(mut values: Vec<(i64, Value)>) -> Option<Value> {
    if values.iter().all(|(_, v)| matches!(v, Value::Bool(_))) && !values.is_empty() {
        let trues = values
            .iter()
            .filter(|(_, v)| *v == Value::Bool(true))
            .count();
        return Some(Value::Bool(2 * trues >= values.len()));
    }
    values.sort_by(|a, b| value_order(&a.1, &b.1).then(a.0.cmp(&b.0)));
    let first = values.first()?;
    let (mut most_count, mut count) = (0usize, 0usize);
    let (mut chosen, mut current) = (0usize, 0usize);
    let (mut chosen_time, mut current_time) = (first.0, first.0);
    for (i, (time, value)) in values.iter().enumerate() {
        if !value_order(value, &values[current].1).is_eq() {
            (count, current, current_time) = (1, i, *time);
            continue;
        }
        count += 1;
        if most_count > count || (most_count == count && current_time > chosen_time) {
            continue;
        }
        (most_count, chosen, chosen_time) = (count, i, *time);
    }
    Some(values.swap_remove(chosen).1)
}

/// An order of the values of one field: numbers by value (-0 as 0),
/// strings by their bytes, `false` before `true`.
pub(super) fn value_order(a: &Value, b: &Value) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a, b) {
        (Value::Str(a), Value::Str(b)) => a.cmp(b),
        (Value::Bool(a), Value::Bool(b)) => a.cmp(b),
        (Value::Int(a), Value::Int(b)) => a.cmp(b),
        (Value::Uint(a), Value::Uint(b)) => a.cmp(b),
        _ => match (as_f64(a), as_f64(b)) {
            (Some(a), Some(b)) if a == b => Ordering::Equal,
            (Some(a), Some(b)) => a.total_cmp(&b),
            _ => Ordering::Equal,
        },
    }
}

pub(super) fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Float(f) => Some(*f),
        Value::Int(i) => Some(*i as f64),
        Value::Uint(u) => Some(*u as f64),
        _ => None,
    }
}

/// Whether `a` is larger than `b`, two values of one field: numbers by
/// value, strings by their bytes, `true` above `false`.
fn larger(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Str(a), Value::Str(b)) => a > b,
        (Value::Bool(a), Value::Bool(b)) => a & !b,
        _ => match (as_f64(a), as_f64(b)) {
            (Some(a), Some(b)) => a > b,
            _ => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold(func: Func, values: &[(i64, Value)]) -> Reducer {
        let mut r = Reducer::default();
        for (t, v) in values {
            r.add(func, *t, v);
        }
        r
    }

    /// Split anywhere and merged in either order, a state answers as
    /// the whole read in one pass.
    #[test]
    fn merged_partials_answer_as_one_pass() {
        let values: Vec<(i64, Value)> =
            [(5, 3.0), (1, 7.0), (9, 7.0), (3, -2.0), (5, 7.0), (2, 0.5)]
                .into_iter()
                .map(|(t, x)| (t, Value::Float(x)))
                .collect();
        let funcs = [
            Func::Mean,
            Func::Max,
            Func::Min,
            Func::Sum,
            Func::Count,
            Func::First,
            Func::Last,
            Func::Spread,
            Func::Percentile(50.0),
            Func::Median,
            Func::Mode,
            Func::CountDistinct,
        ];
        for func in funcs {
            let whole = fold(func, &values).finish(func, Some(FieldType::Float));
            for cut in 0..=values.len() {
                let (a, b) = values.split_at(cut);
                let mut left = fold(func, a);
                left.merge(func, fold(func, b));
                assert_eq!(
                    left.finish(func, Some(FieldType::Float)),
                    whole,
                    "{func:?} at {cut}"
                );
                let mut right = fold(func, b);
                right.merge(func, fold(func, a));
                assert_eq!(
                    right.finish(func, Some(FieldType::Float)),
                    whole,
                    "{func:?} at {cut}"
                );
            }
        }
        // The choices among equals: max keeps the earliest of the two 7s,
        // last the larger value at the latest time.
        assert_eq!(
            fold(Func::Max, &values).finish(Func::Max, None),
            (Cell::Value(Value::Float(7.0)), Some((1, 0)))
        );
        assert_eq!(
            fold(Func::Last, &values).finish(Func::Last, None),
            (Cell::Value(Value::Float(7.0)), Some((9, 0)))
        );
    }

    /// A standard deviation merged from parts is the whole's, to rounding.
    #[test]
    fn stddev_merges_its_parts_and_is_null_of_one_value() {
        let values: Vec<(i64, Value)> = [3.0, 7.0, 7.5, -2.0, 11.0, 0.25]
            .into_iter()
            .enumerate()
            .map(|(t, x)| (t as i64, Value::Float(x)))
            .collect();
        let value = |r: Reducer| match r.finish(Func::Stddev, Some(FieldType::Float)).0 {
            Cell::Value(Value::Float(x)) => x,
            other => panic!("{other:?}"),
        };
        // The sample standard deviation (n - 1), as InfluxDB's.
        let n = values.len() as f64;
        let xs: Vec<f64> = values.iter().filter_map(|(_, v)| as_f64(v)).collect();
        let mean = xs.iter().sum::<f64>() / n;
        let expected = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        for cut in 0..=values.len() {
            let (a, b) = values.split_at(cut);
            let mut r = fold(Func::Stddev, a);
            r.merge(Func::Stddev, fold(Func::Stddev, b));
            assert!((value(r) - expected).abs() < 1e-12 * expected, "at {cut}");
        }
        assert_eq!(
            fold(Func::Stddev, &values[..1])
                .finish(Func::Stddev, Some(FieldType::Float))
                .0,
            Cell::Null
        );
    }

    /// InfluxDB 1.6's mode: of values once each the least; a later value
    /// as frequent as the chosen one wins when it first came no later
    /// than the chosen one's last point; booleans `true` on a tie.
    #[test]
    fn mode_chooses_among_equally_frequent_values_as_influxdb_does() {
        let mode_of = |points: &[(i64, i64)]| {
            let values: Vec<(i64, Value)> =
                points.iter().map(|&(t, v)| (t, Value::Int(v))).collect();
            fold(Func::Mode, &values)
                .finish(Func::Mode, Some(FieldType::Integer))
                .0
        };
        assert_eq!(
            mode_of(&[(1, 70), (2, 90), (3, 5)]),
            Cell::Value(Value::Int(5))
        );
        assert_eq!(
            mode_of(&[(1, 3), (2, 5), (3, 5), (4, 3)]),
            Cell::Value(Value::Int(5))
        );
        assert_eq!(
            mode_of(&[(1, 3), (2, 3), (3, 5), (4, 5)]),
            Cell::Value(Value::Int(3))
        );
        assert_eq!(
            mode_of(&[(1, 9), (2, 4), (3, 9)]),
            Cell::Value(Value::Int(9))
        );
        let bools: Vec<(i64, Value)> = vec![(1, Value::Bool(false)), (2, Value::Bool(true))];
        assert_eq!(
            fold(Func::Mode, &bools)
                .finish(Func::Mode, Some(FieldType::Boolean))
                .0,
            Cell::Value(Value::Bool(true))
        );
    }

    /// InfluxDB's own cases of its integral: a line cut where a bucket
    /// ends, points of one time, and the last bucket's lone point at its
    /// start answering nothing.
    #[test]
    fn integrals_cut_at_bucket_edges_as_influxdb_does() {
        let s = 1_000_000_000;
        let bucket = |start: i64, points: &[(i64, f64)]| {
            (
                start * s,
                points.iter().map(|&(t, x)| (t * s, x)).collect::<Vec<_>>(),
            )
        };
        let buckets = [
            bucket(0, &[(10, 20.0), (15, 10.0)]),
            bucket(20, &[(25, 0.0), (30, -10.0)]),
        ];
        assert_eq!(
            integrals(&buckets, Some(20 * s), s),
            vec![Some(112.5), Some(-12.5)]
        );
        let one = [bucket(0, &[(0, 20.0), (5, 10.0), (5, 30.0), (10, 40.0)])];
        assert_eq!(integrals(&one, None, s), vec![Some(250.0)]);
        // 0–10 and 10–20 (to the next point) are the first bucket's.
        let lone = [bucket(0, &[(0, 1.0), (10, 2.0)]), bucket(20, &[(20, 3.0)])];
        assert_eq!(integrals(&lone, Some(20 * s), s), vec![Some(40.0), None]);
    }

    #[test]
    fn strings_count_and_select_but_do_not_sum() {
        let values = vec![(1, Value::Str("b".into())), (1, Value::Str("c".into()))];
        assert_eq!(
            fold(Func::Count, &values).finish(Func::Count, None).0,
            Cell::Value(Value::Int(2))
        );
        assert_eq!(
            fold(Func::First, &values).finish(Func::First, None).0,
            Cell::Value(Value::Str("c".into()))
        );
        assert_eq!(
            fold(Func::Sum, &values).finish(Func::Sum, None).0,
            Cell::Null
        );
        let ints = vec![(1, Value::Int(i64::MAX)), (2, Value::Int(2))];
        assert_eq!(
            fold(Func::Sum, &ints)
                .finish(Func::Sum, Some(FieldType::Integer))
                .0,
            Cell::Value(Value::Int(i64::MAX.wrapping_add(2)))
        );
    }
}
