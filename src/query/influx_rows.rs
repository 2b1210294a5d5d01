//! The InfluxQL select list's shapes beyond one row of calls per bucket:
//! what a statement's mix of calls and columns makes of it (InfluxDB 1.6's
//! compile checks), calls of every field that matches (`mean(*)`,
//! `max(/^usage/)`), and the functions that answer chosen points or
//! values of a bucket rather than one value: `top`, `bottom`, `distinct`
//! and `sample`.

use std::collections::{BTreeMap, BTreeSet};

use super::influx_reduce::{Func, value_order};
use super::influxql::{Select, SelectExpr, SelectField};
use crate::series::FieldType;
use crate::value::Value;

/// How a statement of fields and calls is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// Fields and tags of each point.
    Raw,
    /// A row of calls per time bucket.
    Aggregate,
    /// One selector's row per bucket, beside the fields and tags of the
    /// point it chose (`max(usage), host`).
    SelectorWithColumns,
    /// The chosen points (or values) of each bucket: `top`, `bottom`,
    /// `distinct`, `sample`.
    Rows,
}

/// InfluxDB 1.6's checks of a select list's mix of calls and columns, in
/// its words, and the shape of its answer.
pub(super) fn shape(s: &Select) -> Result<Shape, String> {
    let calls: Vec<&SelectExpr> = s
        .fields
        .iter()
        .map(|f| &f.expr)
        .filter(|e| e.is_call())
        .collect();
    if calls.is_empty() {
        return Ok(Shape::Raw);
    }
    let mut rows = false;
    for e in &calls {
        match e {
            SelectExpr::Distinct { count: false, .. } => {
                if s.fields.len() > 1 {
                    return Err(
                        "aggregate function distinct() cannot be combined with other functions or fields"
                            .into(),
                    );
                }
                rows = true;
            }
            SelectExpr::Rank { bottom, n, .. } => {
                let name = if *bottom { "bottom" } else { "top" };
                if calls.len() > 1 {
                    return Err(format!(
                        "selector function {name}() cannot be combined with other functions"
                    ));
                }
                if let Some(limit) = s.limit.filter(|l| *l > 0 && n > l) {
                    return Err(format!(
                        "limit ({n}) in {name} function can not be larger than the LIMIT ({limit}) in the select statement"
                    ));
                }
                rows = true;
            }
            SelectExpr::Call { func, arg, .. } | SelectExpr::CallEach { func, arg, .. }
                if func == "sample" =>
            {
                sample_size(*arg)?;
                if matches!(e, SelectExpr::CallEach { .. }) && calls.len() < s.fields.len() {
                    return Err(
                        "mixing aggregate and non-aggregate queries is not supported".into(),
                    );
                }
                if calls.len() > 1 {
                    // InfluxDB answers a sample's rows beside the other
                    // calls' rows, each row holding one of them.
                    return Err(
                        "sample() beside other functions is not answered by halite yet: ask for it in a statement of its own"
                            .into(),
                    );
                }
                rows = true;
            }
            _ => {}
        }
    }
    if rows {
        return Ok(Shape::Rows);
    }
    if calls.len() == s.fields.len() {
        return Ok(Shape::Aggregate);
    }
    if calls.len() > 1 {
        return Err(
            "mixing multiple selector functions with tags or fields is not supported".into(),
        );
    }
    if let SelectExpr::CallEach { .. } = calls[0] {
        // A call of `*` or `/re/` is no selector beside columns, as
        // InfluxDB counts it (`max(*), host`, `sample(/re/, 2), host`).
        return Err("mixing aggregate and non-aggregate queries is not supported".into());
    }
    match calls[0] {
        SelectExpr::Call { func, arg, .. } if Func::parse(func, *arg).is_ok_and(Func::selects) => {
            Ok(Shape::SelectorWithColumns)
        }
        _ => Err("mixing aggregate and non-aggregate queries is not supported".into()),
    }
}

/// `sample(x, n)`'s `n`, checked as InfluxDB checks it.
pub(super) fn sample_size(arg: Option<f64>) -> Result<usize, String> {
    match arg {
        None => Err("invalid number of arguments for sample, expected 2, got 1".into()),
        Some(n) if n.fract() != 0.0 => Err("expected integer argument in sample()".into()),
        Some(n) if n < 1.0 => Err(format!("sample window must be greater than 1, got {n}")),
        Some(n) => Ok(n.min(usize::MAX as f64) as usize),
    }
}

/// Whether the select list names fields by pattern: `*` or `/re/` as a
/// call's argument, or `/re/` as a column.
pub(super) fn names_by_pattern(s: &Select) -> bool {
    s.fields.iter().any(|f| {
        matches!(
            f.expr,
            SelectExpr::CallEach { .. } | SelectExpr::Matching(_)
        )
    })
}

/// The statement with its patterns expanded as InfluxDB rewrites them:
/// `f(*)` and `f(/re/)` become `f(x) AS f_x` for every field `x` (in name
/// order) that matches and whose type `f` takes, an alias `a` making
/// `a_x`; a column `/re/` becomes every field and tag (but those grouped
/// by) whose name matches, fields and tags in one name order. A pattern
/// that matches nothing names no column; `None` when no column is left
/// (the statement answers nothing).
pub(super) fn expand_patterns(
    s: &Select,
    fields: &BTreeMap<String, FieldType>,
    tag_keys: &BTreeSet<String>,
    group_by: &[String],
) -> Result<Option<Select>, String> {
    let matcher = |pattern: &Option<String>| -> Result<Option<regex_lite::Regex>, String> {
        pattern
            .as_deref()
            .map(|re| {
                regex_lite::Regex::new(re)
                    .map_err(|e| format!("invalid regular expression /{re}/: {e}"))
            })
            .transpose()
    };
    let mut out = Vec::new();
    for f in &s.fields {
        match &f.expr {
            SelectExpr::CallEach { func, pattern, arg } => {
                let re = matcher(pattern)?;
                let parsed = if func == "sample" {
                    None
                } else {
                    Some(Func::parse(func, *arg)?)
                };
                for (name, ty) in fields {
                    if re.as_ref().is_some_and(|re| !re.is_match(name))
                        || parsed.is_some_and(|func| !func.takes(*ty))
                    {
                        continue;
                    }
                    out.push(SelectField {
                        expr: SelectExpr::Call {
                            func: func.clone(),
                            field: name.clone(),
                            arg: *arg,
                        },
                        alias: Some(format!("{}_{name}", f.alias.as_deref().unwrap_or(func))),
                    });
                }
            }
            SelectExpr::Matching(pattern) => {
                let re = matcher(&Some(pattern.clone()))?;
                let names: BTreeSet<&String> = fields
                    .keys()
                    .chain(tag_keys.iter().filter(|t| !group_by.contains(t)))
                    .filter(|name| re.as_ref().is_none_or(|re| re.is_match(name)))
                    .collect();
                out.extend(names.into_iter().map(|name| SelectField {
                    expr: SelectExpr::Column(name.clone()),
                    alias: None,
                }));
            }
            _ => out.push(f.clone()),
        }
    }
    if out.is_empty() {
        return Ok(None);
    }
    Ok(Some(Select {
        fields: out,
        ..s.clone()
    }))
}

/// A function that answers chosen points or values of a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RowsFunc {
    /// The `n` largest values (smallest: `bottom`); where tags are named,
    /// of the best point of each combination of their values.
    Rank { bottom: bool, n: usize },
    /// Each value once.
    Distinct,
    /// At most `n` points, chosen at random.
    Sample(usize),
}

impl RowsFunc {
    /// The function's name, for its errors.
    pub(super) fn name(self) -> &'static str {
        match self {
            RowsFunc::Rank { bottom: true, .. } => "bottom",
            RowsFunc::Rank { .. } => "top",
            RowsFunc::Distinct => "distinct",
            RowsFunc::Sample(_) => "sample",
        }
    }
}

/// A bucket's point with a value for the function's field: its time, the
/// value, and for `top(x, tag, n)` its combination of the tags' values
/// (numbered by the caller in the combinations' order).
pub(super) struct Entry<'v> {
    pub time: i64,
    pub value: &'v Value,
    pub combination: usize,
}

/// What a function chose of a bucket's entries: for `top`, `bottom` and
/// `sample` entries (by index, in time order), for `distinct` values (in
/// value order).
pub(super) enum Chosen {
    Entries(Vec<usize>),
    Values(Vec<Value>),
}

/// The function's choice among one bucket's `entries`, which come in time
/// order (of one time, in series order). `seed` makes a sample's choice
/// the same each time the bucket is asked for.
pub(super) fn choose(func: RowsFunc, entries: &[Entry<'_>], seed: u64) -> Chosen {
    match func {
        RowsFunc::Distinct => {
            // Each value's first point; answered by its time, then value.
            let mut firsts: Vec<&Entry<'_>> = entries.iter().collect();
            firsts.sort_by(|a, b| value_order(a.value, b.value).then(a.time.cmp(&b.time)));
            firsts.dedup_by(|later, first| value_order(later.value, first.value).is_eq());
            firsts.sort_by(|a, b| a.time.cmp(&b.time).then(value_order(a.value, b.value)));
            Chosen::Values(firsts.into_iter().map(|e| e.value.clone()).collect())
        }
        RowsFunc::Rank { bottom, n } => {
            // Better first: the larger value (smaller for bottom), then
            // the earlier point, then the first combination of the tags'
            // values in their order, as InfluxDB's top and bottom choose
            // (its heap keeps the first of equals it was given, and it is
            // given each combination's best in that order).
            let better = |a: usize, b: usize| {
                let by_value = value_order(entries[a].value, entries[b].value);
                let by_value = if bottom { by_value } else { by_value.reverse() };
                by_value
                    .then(entries[a].time.cmp(&entries[b].time))
                    .then(entries[a].combination.cmp(&entries[b].combination))
                    .then(a.cmp(&b))
            };
            // The best point of each combination of the tags' values.
            let mut best: BTreeMap<usize, usize> = BTreeMap::new();
            for (i, e) in entries.iter().enumerate() {
                best.entry(e.combination)
                    .and_modify(|b| {
                        if better(i, *b).is_lt() {
                            *b = i;
                        }
                    })
                    .or_insert(i);
            }
            let mut chosen: Vec<usize> = best.into_values().collect();
            chosen.sort_by(|&a, &b| better(a, b));
            chosen.truncate(n);
            // In time order; of one time, better first.
            chosen.sort_by(|&a, &b| entries[a].time.cmp(&entries[b].time).then(better(a, b)));
            Chosen::Entries(chosen)
        }
        RowsFunc::Sample(n) => {
            if entries.len() <= n {
                return Chosen::Entries((0..entries.len()).collect());
            }
            // Reservoir sampling (Algorithm R) with a generator seeded by
            // the bucket: InfluxDB seeds its own by the clock, so which
            // points it answers differs from run to run. The seed is
            // mixed (splitmix64) so that no bucket seeds xorshift with 0.
            let mut state = {
                let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                (z ^ (z >> 31)) | 1
            };
            let mut next = || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state
            };
            let mut reservoir: Vec<usize> = (0..n).collect();
            for i in n..entries.len() {
                let j = (next() % (i as u64 + 1)) as usize;
                if j < n {
                    reservoir[j] = i;
                }
            }
            // In time order; of one time, by value, as InfluxDB's.
            reservoir.sort_by(|&a, &b| {
                entries[a]
                    .time
                    .cmp(&entries[b].time)
                    .then(value_order(entries[a].value, entries[b].value))
            });
            Chosen::Entries(reservoir)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(values: &[(i64, Value, usize)]) -> Vec<Entry<'_>> {
        values
            .iter()
            .map(|(time, value, combination)| Entry {
                time: *time,
                value,
                combination: *combination,
            })
            .collect()
    }

    #[test]
    fn top_takes_the_earliest_of_equal_values_and_one_point_per_combination() {
        let values = vec![
            (1, Value::Int(4), 0),
            (2, Value::Int(9), 1),
            (3, Value::Int(4), 1),
            (4, Value::Int(9), 0),
            (5, Value::Int(7), 2),
        ];
        let e = entries(&values);
        let top = |n, combinations: bool| {
            let e: Vec<Entry<'_>> = if combinations {
                entries(&values)
            } else {
                e.iter()
                    .enumerate()
                    .map(|(i, x)| Entry {
                        time: x.time,
                        value: x.value,
                        combination: i,
                    })
                    .collect()
            };
            match choose(RowsFunc::Rank { bottom: false, n }, &e, 0) {
                Chosen::Entries(chosen) => chosen,
                Chosen::Values(_) => panic!("top chooses points"),
            }
        };
        assert_eq!(top(2, false), vec![1, 3]);
        assert_eq!(top(3, false), vec![1, 3, 4]);
        // Per combination: 0's best is the 9 at 4, 1's the 9 at 2, 2's
        // the 7; the two best are both 9s.
        assert_eq!(top(2, true), vec![1, 3]);
        match choose(RowsFunc::Rank { bottom: true, n: 2 }, &e, 0) {
            Chosen::Entries(chosen) => assert_eq!(chosen, vec![0, 2]),
            Chosen::Values(_) => panic!("bottom chooses points"),
        }
    }

    #[test]
    fn a_sample_is_every_point_when_there_are_few_and_the_same_each_time() {
        let values: Vec<(i64, Value, usize)> = (0..50).map(|i| (i, Value::Int(i * 3), 0)).collect();
        let e = entries(&values);
        let pick = |n, seed| match choose(RowsFunc::Sample(n), &e, seed) {
            Chosen::Entries(chosen) => chosen,
            Chosen::Values(_) => panic!("sample chooses points"),
        };
        assert_eq!(pick(60, 1), (0..50).collect::<Vec<_>>());
        let some = pick(5, 7);
        assert_eq!(some.len(), 5);
        assert!(some.windows(2).all(|w| w[0] < w[1]), "{some:?}");
        assert_eq!(some, pick(5, 7));
    }

    /// Each value once, in the order of its first point (of one time, by
    /// value), as InfluxDB's distinct answers them.
    #[test]
    fn distinct_values_come_once_each_in_order_of_their_first_point() {
        let values = vec![
            (1, Value::Float(2.5), 0),
            (2, Value::Float(-0.0), 0),
            (3, Value::Float(2.5), 0),
            (4, Value::Float(0.0), 0),
            (4, Value::Float(1.0), 0),
        ];
        match choose(RowsFunc::Distinct, &entries(&values), 0) {
            Chosen::Values(v) => assert_eq!(
                v,
                vec![Value::Float(2.5), Value::Float(-0.0), Value::Float(1.0)]
            ),
            Chosen::Entries(_) => panic!("distinct chooses values"),
        }
    }
}
