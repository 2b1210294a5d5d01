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
}

impl Func {
    /// The function InfluxQL names `name`; `None` for one halite does
    /// not answer.
    pub(super) fn parse(name: &str, arg: Option<f64>) -> Result<Func, String> {
        Ok(match name {
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
            Func::Count => Some(AnswerType::Integer),
            Func::Mean => Some(AnswerType::Float),
            Func::First | Func::Last => Some(match ty? {
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
    /// (its iterators' words), if it refuses it: `mean`, `sum`, `spread`
    /// and `percentile` take numbers only, `max` and `min` booleans too,
    /// `count`, `first` and `last` anything.
    pub(super) fn refusal(self, name: &str, ty: FieldType) -> Option<String> {
        let iterator = match ty {
            FieldType::String if !matches!(self, Func::Count | Func::First | Func::Last) => {
                "string"
            }
            FieldType::Boolean
                if matches!(
                    self,
                    Func::Mean | Func::Sum | Func::Spread | Func::Percentile(_)
                ) =>
            {
                "boolean"
            }
            _ => return None,
        };
        Some(format!(
            "unsupported {name} iterator type: *query.{iterator}InterruptIterator"
        ))
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
    /// max and min: (time, value), the earliest of equal values.
    best: Option<(i64, f64)>,
    /// first and last: (time, value), the larger of equal times.
    pick: Option<(i64, Value)>,
    /// spread: the largest and smallest numeric values.
    high: f64,
    low: f64,
    /// percentile: every numeric (time, value).
    all: Vec<(i64, f64)>,
}

impl Reducer {
    pub(super) fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub(super) fn add(&mut self, func: Func, time: i64, value: &Value) {
        self.count += 1;
        match func {
            Func::Count => {}
            Func::First | Func::Last => {
                if self.replaces_pick(func, time, value) {
                    self.pick = Some((time, value.clone()));
                }
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
            Func::Max | Func::Min => self.offer_best(func, time, x),
            Func::Spread => {
                if self.numeric == 1 {
                    (self.high, self.low) = (x, x);
                } else {
                    self.high = self.high.max(x);
                    self.low = self.low.min(x);
                }
            }
            Func::Percentile(_) => self.all.push((time, x)),
            Func::Count | Func::First | Func::Last => {}
        }
    }

    /// first (last): the earliest (latest) time; of equal times, as
    /// InfluxDB's first and last reducers choose, the larger value
    /// (several series reporting at the same instant, grouped into one).
    fn replaces_pick(&self, func: Func, time: i64, value: &Value) -> bool {
        let Some((t, v)) = &self.pick else {
            return true;
        };
        let further = if func == Func::First {
            time < *t
        } else {
            time > *t
        };
        further || (time == *t && larger(value, v))
    }

    /// max (min): of equal values, the earliest.
    fn offer_best(&mut self, func: Func, time: i64, x: f64) {
        let better = match self.best {
            None => true,
            Some((t, best)) => {
                (if func == Func::Max {
                    x > best
                } else {
                    x < best
                }) || (x == best && time < t)
            }
        };
        if better {
            self.best = Some((time, x));
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
                if let Some((t, v)) = other.pick
                    && self.replaces_pick(func, t, &v)
                {
                    self.pick = Some((t, v));
                }
            }
            Func::Mean => self.sum += other.sum,
            Func::Sum => {
                self.sum += other.sum;
                self.int_sum = self.int_sum.wrapping_add(other.int_sum);
            }
            Func::Max | Func::Min => {
                if let Some((t, x)) = other.best {
                    self.offer_best(func, t, x);
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
            Func::Percentile(_) => self.all.extend(other.all),
        }
    }

    /// The answer's cell, and for a selector the time of the value it
    /// chose.
    pub(super) fn finish(self, func: Func, ty: Option<FieldType>) -> (Cell, Option<i64>) {
        if self.count == 0 {
            return (Cell::Null, None);
        }
        let integer = func.answer_type(ty) == Some(AnswerType::Integer);
        let typed = |x: f64| {
            Cell::Value(if integer {
                Value::Int(x as i64)
            } else {
                Value::Float(x)
            })
        };
        match func {
            Func::Count => (Cell::Value(Value::Int(self.count)), None),
            Func::First | Func::Last => match self.pick {
                Some((t, v)) => (Cell::Value(v), Some(t)),
                None => (Cell::Null, None),
            },
            _ if self.numeric == 0 => (Cell::Null, None),
            Func::Mean => (
                Cell::Value(Value::Float(self.sum / self.numeric as f64)),
                None,
            ),
            Func::Sum if integer => (Cell::Value(Value::Int(self.int_sum)), None),
            Func::Sum => (Cell::Value(Value::Float(self.sum)), None),
            Func::Max | Func::Min => match self.best {
                Some((t, x)) => (typed(x), Some(t)),
                None => (Cell::Null, None),
            },
            Func::Spread => (typed(self.high - self.low), None),
            Func::Percentile(p) => {
                let mut sorted = self.all;
                sorted.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
                // InfluxDB's nearest rank.
                let i = ((sorted.len() as f64) * p / 100.0 + 0.5).floor() as i64 - 1;
                match usize::try_from(i).ok().and_then(|i| sorted.get(i)) {
                    Some(&(t, x)) => (typed(x), Some(t)),
                    None => (Cell::Null, None),
                }
            }
        }
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
            (Cell::Value(Value::Float(7.0)), Some(1))
        );
        assert_eq!(
            fold(Func::Last, &values).finish(Func::Last, None),
            (Cell::Value(Value::Float(7.0)), Some(9))
        );
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
