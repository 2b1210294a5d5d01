//! PromQL evaluation: an expression tree evaluated for every step of a
//! query at once (a node answers one value per step and series), over
//! samples a [`Source`] selects. Memory is bounded by counting every
//! sample loaded and every point held against one budget, as Prometheus'
//! `query.max-samples` does; time by a deadline checked between nodes and
//! series.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use promql_parser::label::MatchOp as ParsedOp;
use promql_parser::parser::token::{self, TokenType};
use promql_parser::parser::{
    AggregateExpr, AtModifier, BinaryExpr, Call, Expr, LabelModifier, MatrixSelector, Offset,
    SubqueryExpr, VectorMatchCardinality, VectorSelector,
};

pub use super::value::{
    EvalError, Labels, METRIC_NAME, RangeValue, Series, Value, check_unique, drop_name, quantile,
    valid_label_name,
};
use crate::query::prom_read::{MatchOp, Matcher, PromSeries, ReadError};

/// Prometheus' default lookback (`query.lookback-delta`).
pub const LOOKBACK_MS: i64 = 5 * 60 * 1000;

/// Prometheus' step for a subquery without one: the global evaluation
/// interval, 1 minute by default.
const SUBQUERY_STEP_MS: i64 = 60 * 1000;

/// What the engine reads samples from.
pub trait Source {
    /// The series every matcher accepts with their samples (value, ms)
    /// in `[start_ms, end_ms]`, oldest first; at most `budget` samples.
    fn select(
        &mut self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        budget: usize,
    ) -> std::result::Result<Vec<PromSeries>, ReadError>;
}

impl Source for crate::query::prom_read::DatabaseReader<'_> {
    fn select(
        &mut self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        budget: usize,
    ) -> std::result::Result<Vec<PromSeries>, ReadError> {
        let range = crate::query::prom_read::ReadRange {
            start_ms,
            end_ms,
            labels_only: false,
        };
        self.read(matchers, range, budget)
    }
}

type Result<T> = std::result::Result<T, EvalError>;

fn exec(message: impl Into<String>) -> EvalError {
    EvalError::Execution(message.into())
}

/// The steps of a query: `start`, `start + step`, … up to `end` (ms).
#[derive(Debug, Clone, Copy)]
pub struct QueryRange {
    pub start_ms: i64,
    pub end_ms: i64,
    pub step_ms: i64,
}

/// Prometheus refuses range queries of more points a series.
pub const MAX_POINTS_PER_SERIES: i64 = 11_000;

/// A stale marker: the NaN Prometheus writes when a series goes away.
pub fn is_stale(v: f64) -> bool {
    v.to_bits() == 0x7ff0_0000_0000_0002
}

pub struct Engine<'s, S: Source> {
    source: &'s mut S,
    query_start: i64,
    query_end: i64,
    lookback_ms: i64,
    max_samples: usize,
    held: usize,
    deadline: Instant,
}

impl<'s, S: Source> Engine<'s, S> {
    pub fn new(
        source: &'s mut S,
        range: QueryRange,
        max_samples: usize,
        timeout: Duration,
    ) -> Engine<'s, S> {
        Engine {
            source,
            query_start: range.start_ms,
            query_end: range.end_ms,
            lookback_ms: LOOKBACK_MS,
            max_samples,
            held: 0,
            deadline: Instant::now() + timeout,
        }
    }

    /// `expr` evaluated at every step of `range`.
    pub fn evaluate(&mut self, expr: &Expr, range: QueryRange) -> Result<Value> {
        check_supported(expr)?;
        if range.step_ms <= 0 {
            return Err(EvalError::BadData(
                "zero or negative query resolution step widths are not accepted. Try a \
                 positive integer"
                    .into(),
            ));
        }
        if range.end_ms < range.start_ms {
            return Err(EvalError::BadData(
                "end timestamp must not be before start time".into(),
            ));
        }
        let steps = (range.end_ms - range.start_ms) / range.step_ms + 1;
        if steps > MAX_POINTS_PER_SERIES {
            return Err(EvalError::BadData(
                "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing \
                 the query resolution (?step=XX)"
                    .into(),
            ));
        }
        let times: Vec<i64> = (0..steps)
            .map(|i| range.start_ms + i * range.step_ms)
            .collect();
        self.eval(expr, &times)
    }

    fn check_deadline(&self, what: &'static str) -> Result<()> {
        match Instant::now() > self.deadline {
            true => Err(EvalError::Timeout(what)),
            false => Ok(()),
        }
    }

    fn hold(&mut self, points: usize) -> Result<()> {
        self.held = self.held.saturating_add(points);
        match self.held > self.max_samples {
            true => Err(EvalError::TooManySamples),
            false => Ok(()),
        }
    }

    fn eval(&mut self, expr: &Expr, times: &[i64]) -> Result<Value> {
        self.check_deadline("expression evaluation")?;
        match expr {
            Expr::NumberLiteral(n) => Ok(Value::Scalar(vec![n.val; times.len()])),
            Expr::StringLiteral(s) => Ok(Value::Str(s.val.clone())),
            Expr::Paren(p) => self.eval(&p.expr, times),
            Expr::Unary(u) => match self.eval(&u.expr, times)? {
                Value::Scalar(v) => Ok(Value::Scalar(v.into_iter().map(|x| -x).collect())),
                Value::Vector(mut v) => {
                    for s in &mut v {
                        drop_name(&mut s.labels);
                        for p in s.points.iter_mut().flatten() {
                            *p = -*p;
                        }
                    }
                    check_unique(&v)?;
                    Ok(Value::Vector(v))
                }
                other => Err(exec(format!("unary minus of a {}", other.kind()))),
            },
            Expr::VectorSelector(vs) => Ok(Value::Vector(self.select_vector(vs, times)?)),
            Expr::MatrixSelector(ms) => Ok(Value::Matrix(self.select_matrix(ms, times)?)),
            Expr::Subquery(sq) => Ok(Value::Matrix(self.subquery(sq, times)?)),
            Expr::Call(call) => self.call(call, times),
            Expr::Aggregate(agg) => self.aggregate(agg, times),
            Expr::Binary(bin) => self.binary(bin, times),
            Expr::Extension(_) => Err(EvalError::BadData("this expression is not PromQL".into())),
        }
    }

    fn ref_times(
        &self,
        times: &[i64],
        at: &Option<AtModifier>,
        offset: &Option<Offset>,
    ) -> Vec<i64> {
        let shift = match offset {
            Some(Offset::Pos(d)) => millis(*d),
            Some(Offset::Neg(d)) => -millis(*d),
            None => 0,
        };
        let at = at.as_ref().map(|at| match at {
            AtModifier::Start => self.query_start,
            AtModifier::End => self.query_end,
            AtModifier::At(t) => system_ms(*t),
        });
        times
            .iter()
            .map(|t| at.unwrap_or(*t).saturating_sub(shift))
            .collect()
    }

    fn fetch(&mut self, vs: &VectorSelector, lo: i64, hi: i64) -> Result<Vec<PromSeries>> {
        let matchers = matchers_of(vs);
        let budget = self.max_samples.saturating_sub(self.held);
        let series = match self.source.select(&matchers, lo, hi, budget) {
            Err(ReadError::TooManySamples(_)) => return Err(EvalError::TooManySamples),
            other => other?,
        };
        self.hold(series.iter().map(|(_, s)| s.len()).sum())?;
        Ok(series)
    }

    fn select_vector(&mut self, vs: &VectorSelector, times: &[i64]) -> Result<Vec<Series>> {
        self.select(vs, times, false)
    }

    /// Each series' newest sample in `[t - lookback, t]` at each step:
    /// its value, or its time in seconds with `times_of_samples`.
    fn select(
        &mut self,
        vs: &VectorSelector,
        times: &[i64],
        times_of_samples: bool,
    ) -> Result<Vec<Series>> {
        let refs = self.ref_times(times, &vs.at, &vs.offset);
        let (Some(&lo), Some(&hi)) = (refs.iter().min(), refs.iter().max()) else {
            return Ok(Vec::new());
        };
        let raw = self.fetch(vs, lo - self.lookback_ms, hi)?;
        let mut out = Vec::with_capacity(raw.len());
        for (labels, samples) in raw {
            self.check_deadline("expression evaluation")?;
            let points: Vec<Option<f64>> = refs
                .iter()
                .map(|&r| {
                    let i = samples.partition_point(|(_, t)| *t <= r);
                    let (v, t) = *samples.get(i.checked_sub(1)?)?;
                    let answer = match times_of_samples {
                        true => t as f64 / 1000.0,
                        false => v,
                    };
                    (t >= r - self.lookback_ms && !is_stale(v)).then_some(answer)
                })
                .collect();
            if points.iter().any(Option::is_some) {
                self.hold(points.len())?;
                out.push(Series { labels, points });
            }
        }
        Ok(out)
    }

    fn select_matrix(&mut self, ms: &MatrixSelector, times: &[i64]) -> Result<RangeValue> {
        let range = millis(ms.range);
        let ends = self.ref_times(times, &ms.vs.at, &ms.vs.offset);
        let (Some(&lo), Some(&hi)) = (ends.iter().min(), ends.iter().max()) else {
            return Ok(RangeValue {
                series: Vec::new(),
                range,
                ends,
            });
        };
        let raw = self.fetch(&ms.vs, lo - range, hi)?;
        let series = raw
            .into_iter()
            .map(|(labels, samples)| {
                let samples = samples
                    .into_iter()
                    .filter(|(v, _)| !is_stale(*v))
                    .map(|(v, t)| (t, v))
                    .collect::<Vec<_>>();
                (labels, samples)
            })
            .filter(|(_, samples)| !samples.is_empty())
            .collect();
        Ok(RangeValue {
            series,
            range,
            ends,
        })
    }

    fn subquery(&mut self, sq: &SubqueryExpr, times: &[i64]) -> Result<RangeValue> {
        let range = millis(sq.range);
        let step = sq.step.map(millis).unwrap_or(SUBQUERY_STEP_MS).max(1);
        let ends = self.ref_times(times, &sq.at, &sq.offset);
        let (Some(&lo), Some(&hi)) = (ends.iter().min(), ends.iter().max()) else {
            return Ok(RangeValue {
                series: Vec::new(),
                range,
                ends,
            });
        };
        // The first time at or after `lo - range` that is a multiple of
        // the step, as Prometheus aligns a subquery's steps.
        let first = lo - range;
        let mut start = step * first.div_euclid(step);
        if start < first {
            start += step;
        }
        let count = (hi - start).div_euclid(step) + 1;
        if count > MAX_POINTS_PER_SERIES * 100 {
            return Err(EvalError::TooManySamples);
        }
        let inner_times: Vec<i64> = (0..count.max(0)).map(|i| start + i * step).collect();
        let series = match self.eval(&sq.expr, &inner_times)? {
            Value::Vector(v) => v
                .into_iter()
                .map(|s| {
                    let samples = inner_times
                        .iter()
                        .zip(s.points)
                        .filter_map(|(t, p)| p.map(|v| (*t, v)))
                        .collect::<Vec<_>>();
                    (s.labels, samples)
                })
                .collect(),
            Value::Scalar(v) => vec![(
                Vec::new(),
                inner_times.iter().copied().zip(v).collect::<Vec<_>>(),
            )],
            other => return Err(exec(format!("a subquery of a {}", other.kind()))),
        };
        Ok(RangeValue {
            series,
            range,
            ends,
        })
    }

    fn call(&mut self, call: &Call, times: &[i64]) -> Result<Value> {
        // timestamp() of a selector answers its samples' own times.
        if call.func.name == "timestamp"
            && let Some(Expr::VectorSelector(vs)) = call.args.args.first().map(|a| unparen(a))
        {
            let mut v = self.select(vs, times, true)?;
            for s in &mut v {
                drop_name(&mut s.labels);
            }
            return Ok(Value::Vector(v));
        }
        let mut args = Vec::with_capacity(call.args.args.len());
        for a in &call.args.args {
            args.push(self.eval(a, times)?);
        }
        let ctx = super::functions::CallContext {
            times,
            args_exprs: &call.args.args,
        };
        let out = super::functions::call(call.func.name, args, &ctx)?;
        if let Value::Vector(v) = &out {
            self.hold(v.len() * times.len())?;
        }
        Ok(out)
    }

    fn aggregate(&mut self, agg: &AggregateExpr, times: &[i64]) -> Result<Value> {
        let param = match &agg.param {
            Some(p) => Some(self.eval(p, times)?),
            None => None,
        };
        let Value::Vector(input) = self.eval(&agg.expr, times)? else {
            return Err(exec("an aggregation needs an instant vector"));
        };
        aggregate(agg.op, &agg.modifier, param, input, times.len())
    }

    fn binary(&mut self, bin: &BinaryExpr, times: &[i64]) -> Result<Value> {
        let lhs = self.eval(&bin.lhs, times)?;
        let rhs = self.eval(&bin.rhs, times)?;
        let op = bin.op;
        let modifier = bin.modifier.as_ref();
        let return_bool = modifier.is_some_and(|m| m.return_bool);
        match (lhs, rhs) {
            (Value::Scalar(l), Value::Scalar(r)) => {
                let values = l
                    .iter()
                    .zip(&r)
                    .map(|(a, b)| scalar_op(op, *a, *b, return_bool))
                    .collect::<Result<Vec<_>>>()?;
                Ok(Value::Scalar(
                    values.into_iter().map(|v| v.unwrap_or(0.0)).collect(),
                ))
            }
            (Value::Vector(v), Value::Scalar(s)) => vector_scalar(op, v, &s, false, return_bool),
            (Value::Scalar(s), Value::Vector(v)) => vector_scalar(op, v, &s, true, return_bool),
            (Value::Vector(l), Value::Vector(r)) => {
                vector_vector(op, modifier, l, r, times.len(), return_bool)
            }
            (l, r) => Err(exec(format!(
                "binary expression between a {} and a {}",
                l.kind(),
                r.kind()
            ))),
        }
    }
}

/// Syntax the parser takes that Prometheus 2.42 does not (later
/// versions' additions), refused as Prometheus 2.42 would: a parse error.
fn check_supported(expr: &Expr) -> Result<()> {
    let refuse = |what: &str| {
        Err(EvalError::BadData(format!(
            "parse error: {what} is not supported"
        )))
    };
    match expr {
        Expr::Aggregate(a) => {
            if matches!(a.op.id(), token::T_LIMITK | token::T_LIMIT_RATIO) {
                return refuse(&format!("aggregation `{}`", a.op));
            }
            check_supported(&a.expr)?;
            if let Some(p) = &a.param {
                check_supported(p)?;
            }
            Ok(())
        }
        Expr::Unary(u) => check_supported(&u.expr),
        Expr::Binary(b) => {
            if let Some(m) = &b.modifier
                && (m.fill_values.lhs.is_some() || m.fill_values.rhs.is_some())
            {
                return refuse("`fill` in vector matching");
            }
            check_supported(&b.lhs)?;
            check_supported(&b.rhs)
        }
        Expr::Paren(p) => check_supported(&p.expr),
        Expr::Subquery(s) => check_supported(&s.expr),
        Expr::VectorSelector(vs) => match vs.matchers.or_matchers.is_empty() {
            true => Ok(()),
            false => refuse("`or` inside a selector"),
        },
        Expr::MatrixSelector(ms) => check_supported(&Expr::VectorSelector(ms.vs.clone())),
        Expr::Call(c) => {
            if !super::functions::known(c.func.name) {
                return Err(EvalError::BadData(format!(
                    "parse error: unknown function with name \"{}\"",
                    c.func.name
                )));
            }
            c.args.args.iter().try_for_each(|a| check_supported(a))
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => Ok(()),
        Expr::Extension(_) => refuse("an extension expression"),
    }
}

fn unparen(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => unparen(&p.expr),
        other => other,
    }
}

pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn system_ms(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => millis(d),
        Err(e) => -millis(e.duration()),
    }
}

/// A selector's matchers as the reader takes them (its metric name one
/// of them).
pub fn matchers_of(vs: &VectorSelector) -> Vec<Matcher> {
    let mut out: Vec<Matcher> = vs
        .matchers
        .matchers
        .iter()
        .map(|m| {
            let op = match &m.op {
                ParsedOp::Equal => MatchOp::Equal,
                ParsedOp::NotEqual => MatchOp::NotEqual,
                ParsedOp::Re(_) => MatchOp::Regex,
                ParsedOp::NotRe(_) => MatchOp::NotRegex,
            };
            Matcher {
                op,
                name: m.name.clone(),
                value: m.value.clone(),
            }
        })
        .collect();
    if let Some(name) = &vs.name
        && !out
            .iter()
            .any(|m| m.name == METRIC_NAME && m.op == MatchOp::Equal && &m.value == name)
    {
        out.insert(
            0,
            Matcher {
                op: MatchOp::Equal,
                name: METRIC_NAME.into(),
                value: name.clone(),
            },
        );
    }
    out
}

fn is_comparison(op: TokenType) -> bool {
    matches!(
        op.id(),
        token::T_EQLC | token::T_NEQ | token::T_GTR | token::T_LSS | token::T_GTE | token::T_LTE
    )
}

/// Prometheus 2.42's `shouldDropMetricName`: arithmetic drops the name;
/// comparisons and `atan2` keep it.
fn drops_name(op: TokenType) -> bool {
    matches!(
        op.id(),
        token::T_ADD | token::T_SUB | token::T_DIV | token::T_MUL | token::T_POW | token::T_MOD
    )
}

fn is_set_op(op: TokenType) -> bool {
    matches!(op.id(), token::T_LAND | token::T_LOR | token::T_LUNLESS)
}

/// `a op b` of two numbers: `None` where a comparison filters the pair
/// out (without `bool`).
fn scalar_op(op: TokenType, a: f64, b: f64, return_bool: bool) -> Result<Option<f64>> {
    let cmp = |c: bool| match return_bool {
        true => Some(if c { 1.0 } else { 0.0 }),
        false => c.then_some(a),
    };
    Ok(match op.id() {
        token::T_ADD => Some(a + b),
        token::T_SUB => Some(a - b),
        token::T_MUL => Some(a * b),
        token::T_DIV => Some(a / b),
        token::T_MOD => Some(a % b),
        token::T_POW => Some(a.powf(b)),
        token::T_ATAN2 => Some(a.atan2(b)),
        token::T_EQLC => cmp(a == b),
        token::T_NEQ => cmp(a != b),
        token::T_GTR => cmp(a > b),
        token::T_LSS => cmp(a < b),
        token::T_GTE => cmp(a >= b),
        token::T_LTE => cmp(a <= b),
        _ => return Err(exec(format!("operator `{op}` between numbers"))),
    })
}

fn vector_scalar(
    op: TokenType,
    mut v: Vec<Series>,
    s: &[f64],
    scalar_left: bool,
    return_bool: bool,
) -> Result<Value> {
    if is_set_op(op) {
        return Err(exec(format!(
            "set operator `{op}` needs two instant vectors"
        )));
    }
    let comparison = is_comparison(op);
    for series in &mut v {
        for (p, k) in series.points.iter_mut().zip(s) {
            if let Some(x) = *p {
                let (a, b) = if scalar_left { (*k, x) } else { (x, *k) };
                *p = scalar_op(op, a, b, return_bool)?;
                // A filtering comparison keeps the vector's value.
                if comparison && !return_bool && p.is_some() {
                    *p = Some(x);
                }
            }
        }
        if drops_name(op) || return_bool {
            drop_name(&mut series.labels);
        }
    }
    v.retain(|s| s.points.iter().any(Option::is_some));
    Ok(Value::Vector(v))
}

/// The labels that decide which series of two vectors match: those of
/// `on`/`ignoring` as [`group_labels`] keeps them, all but the name
/// without either.
fn signature(labels: &Labels, matching: Option<&LabelModifier>) -> Vec<(String, String)> {
    match matching {
        Some(_) => group_labels(labels, matching),
        None => labels
            .iter()
            .filter(|(k, _)| k != METRIC_NAME)
            .cloned()
            .collect(),
    }
}

fn vector_vector(
    op: TokenType,
    modifier: Option<&promql_parser::parser::BinModifier>,
    lhs: Vec<Series>,
    rhs: Vec<Series>,
    steps: usize,
    return_bool: bool,
) -> Result<Value> {
    let matching = modifier.and_then(|m| m.matching.as_ref());
    let card = modifier
        .map(|m| m.card.clone())
        .unwrap_or(VectorMatchCardinality::OneToOne);
    if is_set_op(op) {
        return set_op(op, matching, lhs, rhs, steps);
    }
    // With group_right the "many" side is the right one: swap, and swap
    // the operands back when applying the operator.
    let (many, one, swapped, include) = match &card {
        VectorMatchCardinality::OneToMany(include) => (rhs, lhs, true, include.labels.clone()),
        VectorMatchCardinality::ManyToOne(include) => (lhs, rhs, false, include.labels.clone()),
        _ => (lhs, rhs, false, Vec::new()),
    };
    let grouped = matches!(
        card,
        VectorMatchCardinality::OneToMany(_) | VectorMatchCardinality::ManyToOne(_)
    );
    // For each step, the "one" side's series by signature.
    let mut one_by_sig: HashMap<Vec<(String, String)>, Vec<usize>> = HashMap::new();
    for (i, s) in one.iter().enumerate() {
        one_by_sig
            .entry(signature(&s.labels, matching))
            .or_default()
            .push(i);
    }
    let comparison = is_comparison(op);
    let keep_name = !drops_name(op) && !return_bool;
    let mut out: HashMap<Labels, Series> = HashMap::new();
    let mut order: Vec<Labels> = Vec::new();
    // A one-to-one match may pair each series of either side only once
    // at a step.
    let mut many_used: HashMap<(Vec<(String, String)>, usize), ()> = HashMap::new();
    for m in &many {
        let sig = signature(&m.labels, matching);
        let Some(candidates) = one_by_sig.get(&sig) else {
            continue;
        };
        for step in 0..steps {
            let Some(mv) = m.points[step] else { continue };
            let mut found = None;
            for &c in candidates {
                if let Some(ov) = one[c].points[step] {
                    if found.is_some() {
                        return Err(exec(format!(
                            "found duplicate series for the match group {} on the {} hand-side \
                             of the operation: multiple matches for labels: many-to-one \
                             matching must be explicit (group_left/group_right)",
                            format_labels(&sig),
                            if swapped { "left" } else { "right" }
                        )));
                    }
                    found = Some((c, ov));
                }
            }
            let Some((c, ov)) = found else { continue };
            if !grouped && many_used.insert((sig.clone(), step), ()).is_some() {
                return Err(exec(format!(
                    "found duplicate series for the match group {} on the left hand-side of \
                     the operation: multiple matches for labels: many-to-one matching must be \
                     explicit (group_left/group_right)",
                    format_labels(&sig)
                )));
            }
            let (a, b) = if swapped { (ov, mv) } else { (mv, ov) };
            let Some(value) = scalar_op(op, a, b, return_bool)? else {
                continue;
            };
            let value = if comparison && !return_bool {
                // A filtering comparison keeps the left side's value.
                a
            } else {
                value
            };
            let labels = result_labels(
                &m.labels,
                &one[c].labels,
                matching,
                grouped,
                &include,
                keep_name,
            );
            let entry = out.entry(labels.clone()).or_insert_with(|| {
                order.push(labels.clone());
                Series {
                    labels,
                    points: vec![None; steps],
                }
            });
            if entry.points[step].is_some() {
                return Err(exec(
                    "multiple matches for labels: grouping labels must ensure unique matches",
                ));
            }
            entry.points[step] = Some(value);
        }
    }
    Ok(Value::Vector(
        order.into_iter().filter_map(|l| out.remove(&l)).collect(),
    ))
}

fn result_labels(
    many: &Labels,
    one: &Labels,
    matching: Option<&LabelModifier>,
    grouped: bool,
    include: &[String],
    keep_name: bool,
) -> Labels {
    let mut labels: Labels = match (grouped, matching) {
        (true, _) => many.clone(),
        (false, Some(LabelModifier::Include(on))) => many
            .iter()
            .filter(|(k, _)| on.labels.iter().any(|l| l == k))
            .cloned()
            .collect(),
        (false, Some(LabelModifier::Exclude(ignoring))) => many
            .iter()
            .filter(|(k, _)| !ignoring.labels.iter().any(|l| l == k))
            .cloned()
            .collect(),
        (false, None) => many.clone(),
    };
    if !keep_name {
        drop_name(&mut labels);
    }
    for name in include {
        labels.retain(|(k, _)| k != name);
        if let Some(v) = one.iter().find(|(k, _)| k == name) {
            labels.push(v.clone());
        }
    }
    labels.sort();
    labels
}

fn set_op(
    op: TokenType,
    matching: Option<&LabelModifier>,
    lhs: Vec<Series>,
    rhs: Vec<Series>,
    steps: usize,
) -> Result<Value> {
    // Per step, which signatures each side has.
    let sigs = |side: &[Series]| -> Vec<HashMap<Vec<(String, String)>, ()>> {
        let mut per_step = vec![HashMap::new(); steps];
        for s in side {
            let sig = signature(&s.labels, matching);
            for (step, p) in s.points.iter().enumerate() {
                if p.is_some() {
                    per_step[step].insert(sig.clone(), ());
                }
            }
        }
        per_step
    };
    let mut out = Vec::new();
    match op.id() {
        token::T_LAND | token::T_LUNLESS => {
            let right = sigs(&rhs);
            let keep_matched = op.id() == token::T_LAND;
            for mut s in lhs {
                let sig = signature(&s.labels, matching);
                for (step, p) in s.points.iter_mut().enumerate() {
                    if p.is_some() && right[step].contains_key(&sig) != keep_matched {
                        *p = None;
                    }
                }
                if s.points.iter().any(Option::is_some) {
                    out.push(s);
                }
            }
        }
        _ => {
            let left = sigs(&lhs);
            out.extend(lhs);
            for mut s in rhs {
                let sig = signature(&s.labels, matching);
                for (step, p) in s.points.iter_mut().enumerate() {
                    if p.is_some() && left[step].contains_key(&sig) {
                        *p = None;
                    }
                }
                if s.points.iter().any(Option::is_some) {
                    match out.iter_mut().find(|o: &&mut Series| o.labels == s.labels) {
                        // The same labels on both sides: one series.
                        Some(o) => {
                            for (a, b) in o.points.iter_mut().zip(s.points) {
                                if a.is_none() {
                                    *a = b;
                                }
                            }
                        }
                        None => out.push(s),
                    }
                }
            }
        }
    }
    Ok(Value::Vector(out))
}

pub fn format_labels(labels: &[(String, String)]) -> String {
    let inner = labels
        .iter()
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!("{{{inner}}}")
}

/// The labels a series keeps in its group under `by`/`without`.
fn group_labels(labels: &Labels, modifier: Option<&LabelModifier>) -> Labels {
    match modifier {
        Some(LabelModifier::Include(by)) => labels
            .iter()
            .filter(|(k, _)| by.labels.iter().any(|l| l == k))
            .cloned()
            .collect(),
        Some(LabelModifier::Exclude(without)) => labels
            .iter()
            .filter(|(k, _)| k != METRIC_NAME && !without.labels.iter().any(|l| l == k))
            .cloned()
            .collect(),
        None => Vec::new(),
    }
}

fn aggregate(
    op: TokenType,
    modifier: &Option<LabelModifier>,
    param: Option<Value>,
    input: Vec<Series>,
    steps: usize,
) -> Result<Value> {
    let scalar_param = |p: &Option<Value>| -> Result<Vec<f64>> {
        match p {
            Some(Value::Scalar(v)) => Ok(v.clone()),
            _ => Err(exec(format!("`{op}` needs a scalar parameter"))),
        }
    };
    match op.id() {
        token::T_TOPK | token::T_BOTTOMK => {
            let k = scalar_param(&param)?;
            return Ok(Value::Vector(topk(
                op.id() == token::T_TOPK,
                &k,
                modifier,
                input,
                steps,
            )));
        }
        token::T_COUNT_VALUES => {
            let Some(Value::Str(label)) = &param else {
                return Err(exec("count_values needs a string parameter"));
            };
            if !valid_label_name(label) {
                return Err(exec(format!("invalid label name {label:?}")));
            }
            return Ok(Value::Vector(count_values(label, modifier, input, steps)));
        }
        _ => {}
    }
    let q = match op.id() {
        token::T_QUANTILE => Some(scalar_param(&param)?),
        _ => None,
    };
    let mut groups: HashMap<Labels, usize> = HashMap::new();
    let mut members: Vec<(Labels, Vec<usize>)> = Vec::new();
    for (i, s) in input.iter().enumerate() {
        let g = group_labels(&s.labels, modifier.as_ref());
        let at = *groups.entry(g.clone()).or_insert_with(|| {
            members.push((g, Vec::new()));
            members.len() - 1
        });
        members[at].1.push(i);
    }
    let mut out = Vec::with_capacity(members.len());
    let mut values = Vec::new();
    for (labels, idx) in members {
        let mut points = vec![None; steps];
        for (step, point) in points.iter_mut().enumerate() {
            values.clear();
            values.extend(idx.iter().filter_map(|&i| input[i].points[step]));
            if values.is_empty() {
                continue;
            }
            *point = Some(match op.id() {
                // Prometheus 2.42 sums plainly (no compensation): so do we, so
                // that answers agree to the last bit.
                token::T_SUM => values.iter().sum(),
                token::T_AVG => avg(&values),
                token::T_COUNT => values.len() as f64,
                token::T_GROUP => 1.0,
                token::T_MIN => values
                    .iter()
                    .copied()
                    .fold(f64::NAN, |m, v| if m.is_nan() || v < m { v } else { m }),
                token::T_MAX => values
                    .iter()
                    .copied()
                    .fold(f64::NAN, |m, v| if m.is_nan() || v > m { v } else { m }),
                token::T_STDDEV => stdvar(&values).sqrt(),
                token::T_STDVAR => stdvar(&values),
                token::T_QUANTILE => {
                    let q = q.as_ref().map_or(f64::NAN, |q| q[step]);
                    quantile(q, &mut values)
                }
                _ => return Err(exec(format!("aggregation `{op}` is not supported"))),
            });
        }
        if points.iter().any(Option::is_some) {
            out.push(Series { labels, points });
        }
    }
    Ok(Value::Vector(out))
}

/// Prometheus' running mean, which avoids overflowing the sum.
fn avg(values: &[f64]) -> f64 {
    let mut mean = values[0];
    let mut count = 1.0;
    for &v in &values[1..] {
        count += 1.0;
        if mean.is_infinite() {
            if v.is_infinite() && (mean > 0.0) == (v > 0.0) {
                continue;
            }
            if !v.is_infinite() && !v.is_nan() {
                continue;
            }
        }
        mean += v / count - mean / count;
    }
    mean
}

/// Welford's population variance, as Prometheus computes it.
pub fn stdvar(values: &[f64]) -> f64 {
    let (mut count, mut mean, mut m2) = (0.0, 0.0, 0.0);
    for &v in values {
        count += 1.0;
        let delta = v - mean;
        mean += delta / count;
        m2 += delta * (v - mean);
    }
    m2 / count
}

fn topk(
    top: bool,
    k: &[f64],
    modifier: &Option<LabelModifier>,
    input: Vec<Series>,
    steps: usize,
) -> Vec<Series> {
    let mut groups: HashMap<Labels, Vec<usize>> = HashMap::new();
    for (i, s) in input.iter().enumerate() {
        groups
            .entry(group_labels(&s.labels, modifier.as_ref()))
            .or_default()
            .push(i);
    }
    let mut keep = vec![vec![false; steps]; input.len()];
    for idx in groups.values() {
        for step in 0..steps {
            let kk = k[step];
            if kk.is_nan() || kk < 1.0 {
                continue;
            }
            let kk = kk.min(idx.len() as f64) as usize;
            let mut present: Vec<(f64, usize)> = idx
                .iter()
                .filter_map(|&i| input[i].points[step].map(|v| (v, i)))
                .collect();
            // NaN sorts last for both.
            present.sort_by(|a, b| {
                let ord = match (a.0.is_nan(), b.0.is_nan()) {
                    (true, true) => std::cmp::Ordering::Equal,
                    (true, false) => std::cmp::Ordering::Greater,
                    (false, true) => std::cmp::Ordering::Less,
                    _ if top => b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal),
                    _ => a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal),
                };
                ord.then(a.1.cmp(&b.1))
            });
            for (_, i) in present.into_iter().take(kk) {
                keep[i][step] = true;
            }
        }
    }
    input
        .into_iter()
        .zip(keep)
        .filter_map(|(mut s, keep)| {
            for (p, k) in s.points.iter_mut().zip(keep) {
                if !k {
                    *p = None;
                }
            }
            s.points.iter().any(Option::is_some).then_some(s)
        })
        .collect()
}

fn count_values(
    label: &str,
    modifier: &Option<LabelModifier>,
    input: Vec<Series>,
    steps: usize,
) -> Vec<Series> {
    let mut out: HashMap<Labels, Vec<Option<f64>>> = HashMap::new();
    let mut order = Vec::new();
    for s in &input {
        let mut g = group_labels(&s.labels, modifier.as_ref());
        g.retain(|(k, _)| k != label);
        for (step, p) in s.points.iter().enumerate() {
            let Some(v) = p else { continue };
            let mut labels = g.clone();
            labels.push((label.to_string(), format_value(*v)));
            labels.sort();
            let points = out.entry(labels.clone()).or_insert_with(|| {
                order.push(labels);
                vec![None; steps]
            });
            *points[step].get_or_insert(0.0) += 1.0;
        }
    }
    order
        .into_iter()
        .filter_map(|labels| {
            let points = out.remove(&labels)?;
            Some(Series { labels, points })
        })
        .collect()
}

/// A number as Prometheus writes it in answers and labels (Go's
/// `strconv.FormatFloat(v, 'f', -1, 64)`: the shortest text that reads
/// back the same, without an exponent).
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    // Rust's Display is the shortest round-trip text without an
    // exponent, as Go's 'f' with precision -1.
    format!("{v}")
}
