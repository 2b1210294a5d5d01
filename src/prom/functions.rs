//! PromQL's functions, as Prometheus 2.42 computes them
//! (`promql/functions.go`): the same sums (Kahan where Prometheus
//! compensates), the same extrapolation, the same edge cases.

use promql_parser::parser::Expr;

use super::value::{
    EvalError, Labels, METRIC_NAME, RangeValue, Series, Value, drop_name, quantile,
    valid_label_name,
};

pub struct CallContext<'a> {
    /// The step times the call is evaluated at.
    pub times: &'a [i64],
    pub args_exprs: &'a [Box<Expr>],
}

type Result<T> = std::result::Result<T, EvalError>;

fn exec(message: impl Into<String>) -> EvalError {
    EvalError::Execution(message.into())
}

const MATH: &[&str] = &[
    "abs", "ceil", "floor", "exp", "ln", "log2", "log10", "sqrt", "sgn", "sin", "cos", "tan",
    "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "deg", "rad",
];

const OVER_TIME: &[&str] = &[
    "avg_over_time",
    "min_over_time",
    "max_over_time",
    "sum_over_time",
    "count_over_time",
    "last_over_time",
    "present_over_time",
    "stddev_over_time",
    "stdvar_over_time",
    "changes",
    "resets",
    "deriv",
    "rate",
    "increase",
    "delta",
    "irate",
    "idelta",
];

const TIME_FNS: &[&str] = &[
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "days_in_month",
    "hour",
    "minute",
    "month",
    "year",
];

const OTHERS: &[&str] = &[
    "absent",
    "absent_over_time",
    "clamp",
    "clamp_max",
    "clamp_min",
    "histogram_quantile",
    "holt_winters",
    "label_join",
    "label_replace",
    "pi",
    "predict_linear",
    "quantile_over_time",
    "round",
    "scalar",
    "sort",
    "sort_desc",
    "time",
    "timestamp",
    "vector",
];

/// Whether Prometheus 2.42 has the function (the parser knows later
/// ones too).
pub fn known(name: &str) -> bool {
    [MATH, OVER_TIME, TIME_FNS, OTHERS]
        .iter()
        .any(|list| list.contains(&name))
}

fn scalar_arg(v: &Value, what: &str) -> Result<Vec<f64>> {
    match v {
        Value::Scalar(s) => Ok(s.clone()),
        _ => Err(exec(format!("{what} must be a scalar"))),
    }
}

fn string_arg(v: &Value, what: &str) -> Result<String> {
    match v {
        Value::Str(s) => Ok(s.clone()),
        _ => Err(exec(format!("{what} must be a string"))),
    }
}

pub fn call(name: &str, mut args: Vec<Value>, ctx: &CallContext) -> Result<Value> {
    let steps = ctx.times.len();
    let take_vector = |args: &mut Vec<Value>, i: usize| -> Result<Vec<Series>> {
        match std::mem::replace(&mut args[i], Value::Scalar(Vec::new())) {
            Value::Vector(v) => Ok(v),
            other => Err(exec(format!(
                "expected an instant vector argument to {name}, got a {}",
                match other {
                    Value::Scalar(_) => "scalar",
                    Value::Matrix(_) => "range vector",
                    _ => "string",
                }
            ))),
        }
    };
    let take_matrix = |args: &mut Vec<Value>, i: usize| -> Result<RangeValue> {
        match std::mem::replace(&mut args[i], Value::Scalar(Vec::new())) {
            Value::Matrix(m) => Ok(m),
            _ => Err(exec(format!("expected a range vector argument to {name}"))),
        }
    };
    if MATH.contains(&name) {
        let f: fn(f64) -> f64 = match name {
            "abs" => f64::abs,
            "ceil" => f64::ceil,
            "floor" => f64::floor,
            "exp" => f64::exp,
            "ln" => f64::ln,
            "log2" => f64::log2,
            "log10" => f64::log10,
            "sqrt" => f64::sqrt,
            "sgn" => |v: f64| {
                if v > 0.0 {
                    1.0
                } else if v < 0.0 {
                    -1.0
                } else {
                    v
                }
            },
            "sin" => f64::sin,
            "cos" => f64::cos,
            "tan" => f64::tan,
            "asin" => f64::asin,
            "acos" => f64::acos,
            "atan" => f64::atan,
            "sinh" => f64::sinh,
            "cosh" => f64::cosh,
            "tanh" => f64::tanh,
            "asinh" => f64::asinh,
            "acosh" => f64::acosh,
            "atanh" => f64::atanh,
            "deg" => f64::to_degrees,
            _ => f64::to_radians,
        };
        let v = take_vector(&mut args, 0)?;
        return Ok(Value::Vector(map_values(v, |_, x| Some(f(x)))));
    }
    if TIME_FNS.contains(&name) {
        // With no argument: of `vector(time())`.
        let v = match args.is_empty() {
            true => vec![Series {
                labels: Vec::new(),
                points: ctx.times.iter().map(|t| Some(*t as f64 / 1000.0)).collect(),
            }],
            false => take_vector(&mut args, 0)?,
        };
        let f = |x: f64| -> f64 {
            let Some(d) = civil(x) else { return f64::NAN };
            match name {
                "day_of_month" => d.day as f64,
                "day_of_week" => d.weekday as f64,
                "day_of_year" => d.yday as f64,
                "days_in_month" => days_in_month(d.year, d.month) as f64,
                "hour" => d.hour as f64,
                "minute" => d.minute as f64,
                "month" => d.month as f64,
                _ => d.year as f64,
            }
        };
        return Ok(Value::Vector(map_values(v, |_, x| Some(f(x)))));
    }
    if OVER_TIME.contains(&name) {
        let m = take_matrix(&mut args, 0)?;
        if matches!(name, "rate" | "increase" | "delta") {
            return Ok(Value::Vector(rate_like(name, &m, steps)));
        }
        return Ok(Value::Vector(over_time(name, &m, steps, |_, w, _| {
            range_fn(name, w)
        })));
    }
    match name {
        "quantile_over_time" => {
            let q = scalar_arg(&args[0], "the quantile")?;
            let m = take_matrix(&mut args, 1)?;
            Ok(Value::Vector(over_time(name, &m, steps, |step, w, _| {
                let mut values: Vec<f64> = w.iter().map(|(_, v)| *v).collect();
                Some(quantile(q[step], &mut values))
            })))
        }
        "predict_linear" => {
            let d = scalar_arg(&args[1], "the duration")?;
            let m = take_matrix(&mut args, 0)?;
            Ok(Value::Vector(over_time(name, &m, steps, |step, w, _| {
                if w.len() < 2 {
                    return None;
                }
                let (slope, intercept) = linear_regression(w, ctx.times[step]);
                Some(slope * d[step] + intercept)
            })))
        }
        "holt_winters" => {
            let sf = scalar_arg(&args[1], "the smoothing factor")?;
            let tf = scalar_arg(&args[2], "the trend factor")?;
            if let Some(sf) = sf.iter().find(|v| **v <= 0.0 || **v >= 1.0) {
                return Err(exec(format!(
                    "invalid smoothing factor. Expected: 0 < sf < 1, got: {sf:.6}"
                )));
            }
            if let Some(tf) = tf.iter().find(|v| **v <= 0.0 || **v >= 1.0) {
                return Err(exec(format!(
                    "invalid trend factor. Expected: 0 < tf < 1, got: {tf:.6}"
                )));
            }
            let m = take_matrix(&mut args, 0)?;
            Ok(Value::Vector(over_time(name, &m, steps, |step, w, _| {
                holt_winters(w, sf[step], tf[step])
            })))
        }
        "absent_over_time" => {
            let m = take_matrix(&mut args, 0)?;
            let mut points = vec![Some(1.0); steps];
            for s in 0..m.series.len() {
                for (step, p) in points.iter_mut().enumerate() {
                    if !m.window(s, step).is_empty() {
                        *p = None;
                    }
                }
            }
            Ok(absent_answer(points, &ctx.args_exprs[0]))
        }
        "absent" => {
            let v = take_vector(&mut args, 0)?;
            let mut points = vec![Some(1.0); steps];
            for s in &v {
                for (p, q) in points.iter_mut().zip(&s.points) {
                    if q.is_some() {
                        *p = None;
                    }
                }
            }
            Ok(absent_answer(points, &ctx.args_exprs[0]))
        }
        "clamp" | "clamp_min" | "clamp_max" => {
            let (lo, hi) = match name {
                "clamp" => (scalar_arg(&args[1], "min")?, scalar_arg(&args[2], "max")?),
                "clamp_min" => (scalar_arg(&args[1], "min")?, vec![f64::INFINITY; steps]),
                _ => (vec![f64::NEG_INFINITY; steps], scalar_arg(&args[1], "max")?),
            };
            let v = take_vector(&mut args, 0)?;
            // Go's math.Max and math.Min: NaN wins.
            let go = |a: f64, b: f64, f: fn(f64, f64) -> f64| match a.is_nan() || b.is_nan() {
                true => f64::NAN,
                false => f(a, b),
            };
            Ok(Value::Vector(map_values(v, |step, x| {
                let (lo, hi) = (lo[step], hi[step]);
                // clamp with max < min answers nothing.
                if name == "clamp" && hi < lo {
                    return None;
                }
                Some(go(lo, go(hi, x, f64::min), f64::max))
            })))
        }
        "round" => {
            let to = match args.get(1) {
                Some(v) => scalar_arg(v, "the rounding target")?,
                None => vec![1.0; steps],
            };
            let v = take_vector(&mut args, 0)?;
            Ok(Value::Vector(map_values(v, |step, x| {
                let inverse = 1.0 / to[step];
                Some((x * inverse + 0.5).floor() / inverse)
            })))
        }
        "scalar" => {
            let v = take_vector(&mut args, 0)?;
            Ok(Value::Scalar(
                (0..steps)
                    .map(|step| {
                        let mut present = v.iter().filter_map(|s| s.points[step]);
                        match (present.next(), present.next()) {
                            (Some(x), None) => x,
                            _ => f64::NAN,
                        }
                    })
                    .collect(),
            ))
        }
        "vector" => {
            let s = scalar_arg(&args[0], "the argument")?;
            Ok(Value::Vector(vec![Series {
                labels: Vec::new(),
                points: s.into_iter().map(Some).collect(),
            }]))
        }
        "time" => Ok(Value::Scalar(
            ctx.times.iter().map(|t| *t as f64 / 1000.0).collect(),
        )),
        "pi" => Ok(Value::Scalar(vec![std::f64::consts::PI; steps])),
        "timestamp" => {
            // The engine answers timestamp() of a selector itself (the
            // samples' own times); of anything else, the step's time.
            let v = take_vector(&mut args, 0)?;
            Ok(Value::Vector(map_values(v, |step, _| {
                Some(ctx.times[step] as f64 / 1000.0)
            })))
        }
        "sort" | "sort_desc" => {
            let mut v = take_vector(&mut args, 0)?;
            let last = steps.saturating_sub(1);
            let key = |s: &Series| s.points.get(last).copied().flatten().unwrap_or(f64::NAN);
            v.sort_by(|a, b| {
                let (x, y) = (key(a), key(b));
                match (x.is_nan(), y.is_nan()) {
                    (true, true) => std::cmp::Ordering::Equal,
                    (true, false) => std::cmp::Ordering::Greater,
                    (false, true) => std::cmp::Ordering::Less,
                    _ if name == "sort" => x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal),
                    _ => y.partial_cmp(&x).unwrap_or(std::cmp::Ordering::Equal),
                }
            });
            Ok(Value::Vector(v))
        }
        "label_replace" => {
            let dst = string_arg(&args[1], "the destination label")?;
            let replacement = string_arg(&args[2], "the replacement")?;
            let src = string_arg(&args[3], "the source label")?;
            let pattern = string_arg(&args[4], "the regex")?;
            let re = regex_lite::Regex::new(&format!("^(?:{pattern})$")).map_err(|_| {
                exec(format!(
                    "invalid regular expression in label_replace(): {pattern}"
                ))
            })?;
            if !valid_label_name(&dst) {
                return Err(exec(format!(
                    "invalid destination label name in label_replace(): {dst}"
                )));
            }
            let mut v = take_vector(&mut args, 0)?;
            for s in &mut v {
                let value = get(&s.labels, &src).to_string();
                if let Some(caps) = re.captures(&value) {
                    let mut out = String::new();
                    caps.expand(&replacement, &mut out);
                    set_label(&mut s.labels, &dst, &out);
                }
            }
            super::value::check_unique(&v)?;
            Ok(Value::Vector(v))
        }
        "label_join" => {
            let dst = string_arg(&args[1], "the destination label")?;
            let sep = string_arg(&args[2], "the separator")?;
            let mut srcs = Vec::new();
            for a in &args[3..] {
                let s = string_arg(a, "a source label")?;
                if !valid_label_name(&s) {
                    return Err(exec(format!(
                        "invalid source label name in label_join(): {s}"
                    )));
                }
                srcs.push(s);
            }
            if !valid_label_name(&dst) {
                return Err(exec(format!(
                    "invalid destination label name in label_join(): {dst}"
                )));
            }
            let mut v = take_vector(&mut args, 0)?;
            for s in &mut v {
                let joined = srcs
                    .iter()
                    .map(|l| get(&s.labels, l))
                    .collect::<Vec<_>>()
                    .join(&sep);
                set_label(&mut s.labels, &dst, &joined);
            }
            super::value::check_unique(&v)?;
            Ok(Value::Vector(v))
        }
        "histogram_quantile" => {
            let q = scalar_arg(&args[0], "the quantile")?;
            let v = take_vector(&mut args, 1)?;
            Ok(Value::Vector(histogram_quantile(&q, v, steps)))
        }
        _ => Err(EvalError::BadData(format!(
            "parse error: unknown function with name \"{name}\""
        ))),
    }
}

fn get<'l>(labels: &'l Labels, name: &str) -> &'l str {
    labels
        .iter()
        .find(|(k, _)| k == name)
        .map_or("", |(_, v)| v.as_str())
}

/// Sets a label, or removes it when `value` is empty (as Prometheus).
fn set_label(labels: &mut Labels, name: &str, value: &str) {
    labels.retain(|(k, _)| k != name);
    if !value.is_empty() {
        labels.push((name.to_string(), value.to_string()));
        labels.sort();
    }
}

fn map_values(mut v: Vec<Series>, f: impl Fn(usize, f64) -> Option<f64>) -> Vec<Series> {
    for s in &mut v {
        drop_name(&mut s.labels);
        for (step, p) in s.points.iter_mut().enumerate() {
            if let Some(x) = *p {
                *p = f(step, x);
            }
        }
    }
    v.retain(|s| s.points.iter().any(Option::is_some));
    v
}

/// A function of each series' window at each step (given the step, the
/// window and its end). `last_over_time` keeps the metric name; the
/// others drop it.
fn over_time(
    name: &str,
    m: &RangeValue,
    steps: usize,
    f: impl Fn(usize, &[(i64, f64)], i64) -> Option<f64>,
) -> Vec<Series> {
    let mut out = Vec::new();
    for (i, (labels, _)) in m.series.iter().enumerate() {
        let points: Vec<Option<f64>> = (0..steps)
            .map(|step| {
                let w = m.window(i, step);
                if w.is_empty() {
                    return None;
                }
                f(step, w, m.ends[step])
            })
            .collect();
        if points.iter().any(Option::is_some) {
            let mut labels = labels.clone();
            if name != "last_over_time" {
                drop_name(&mut labels);
            }
            out.push(Series { labels, points });
        }
    }
    out
}

fn kahan_inc(inc: f64, sum: f64, c: f64) -> (f64, f64) {
    let t = sum + inc;
    let c = if t.abs() >= inc.abs() {
        c + ((sum - t) + inc)
    } else {
        c + ((inc - t) + sum)
    };
    (t, c)
}

fn range_fn(name: &str, w: &[(i64, f64)]) -> Option<f64> {
    let values = || w.iter().map(|(_, v)| *v);
    match name {
        "avg_over_time" => {
            let (mut mean, mut count, mut c) = (0.0f64, 0.0, 0.0);
            for v in values() {
                count += 1.0;
                if mean.is_infinite() {
                    if v.is_infinite() && (mean > 0.0) == (v > 0.0) {
                        continue;
                    }
                    if !v.is_infinite() && !v.is_nan() {
                        continue;
                    }
                }
                (mean, c) = kahan_inc(v / count - mean / count, mean, c);
            }
            Some(if mean.is_infinite() { mean } else { mean + c })
        }
        "sum_over_time" => {
            let (mut sum, mut c) = (0.0f64, 0.0);
            for v in values() {
                (sum, c) = kahan_inc(v, sum, c);
            }
            Some(if sum.is_infinite() { sum } else { sum + c })
        }
        "min_over_time" => {
            Some(values().fold(f64::NAN, |m, v| if m.is_nan() || v < m { v } else { m }))
        }
        "max_over_time" => {
            Some(values().fold(f64::NAN, |m, v| if m.is_nan() || v > m { v } else { m }))
        }
        "count_over_time" => Some(w.len() as f64),
        "present_over_time" => Some(1.0),
        "last_over_time" => w.last().map(|(_, v)| *v),
        "stddev_over_time" | "stdvar_over_time" => {
            let (mut count, mut mean, mut c_mean, mut aux, mut c_aux) = (0.0, 0.0, 0.0, 0.0, 0.0);
            for v in values() {
                count += 1.0;
                let delta = v - (mean + c_mean);
                (mean, c_mean) = kahan_inc(delta / count, mean, c_mean);
                (aux, c_aux) = kahan_inc(delta * (v - (mean + c_mean)), aux, c_aux);
            }
            let var = (aux + c_aux) / count;
            Some(if name == "stddev_over_time" {
                var.sqrt()
            } else {
                var
            })
        }
        "changes" => {
            let mut changes = 0;
            let mut prev = w[0].1;
            for v in values().skip(1) {
                if v != prev && !(v.is_nan() && prev.is_nan()) {
                    changes += 1;
                }
                prev = v;
            }
            Some(changes as f64)
        }
        "resets" => {
            let mut resets = 0;
            let mut prev = w[0].1;
            for v in values().skip(1) {
                if v < prev {
                    resets += 1;
                }
                prev = v;
            }
            Some(resets as f64)
        }
        "deriv" => {
            if w.len() < 2 {
                return None;
            }
            Some(linear_regression(w, w[0].0).0)
        }
        "irate" | "idelta" => {
            if w.len() < 2 {
                return None;
            }
            let (t1, v1) = w[w.len() - 1];
            let (t0, v0) = w[w.len() - 2];
            let rate = name == "irate";
            let mut value = if rate && v1 < v0 { v1 } else { v1 - v0 };
            let interval = t1 - t0;
            if interval == 0 {
                return None;
            }
            if rate {
                value /= interval as f64 / 1000.0;
            }
            Some(value)
        }
        _ => None,
    }
}

/// Prometheus' `extrapolatedRate`.
pub fn extrapolated_rate(
    w: &[(i64, f64)],
    range_start: i64,
    range_end: i64,
    range_ms: i64,
    counter: bool,
    rate: bool,
) -> Option<f64> {
    if w.len() < 2 {
        return None;
    }
    let (first_t, first_v) = w[0];
    let (last_t, last_v) = w[w.len() - 1];
    let mut result = last_v - first_v;
    if counter {
        let mut prev = first_v;
        for &(_, v) in &w[1..] {
            if v < prev {
                result += prev;
            }
            prev = v;
        }
    }
    let mut to_start = (first_t - range_start) as f64 / 1000.0;
    let to_end = (range_end - last_t) as f64 / 1000.0;
    let sampled = (last_t - first_t) as f64 / 1000.0;
    let average = sampled / (w.len() - 1) as f64;
    if counter && result > 0.0 && first_v >= 0.0 {
        let to_zero = sampled * (first_v / result);
        if to_zero < to_start {
            to_start = to_zero;
        }
    }
    let threshold = average * 1.1;
    let mut interval = sampled;
    interval += if to_start < threshold {
        to_start
    } else {
        average / 2.0
    };
    interval += if to_end < threshold {
        to_end
    } else {
        average / 2.0
    };
    let mut factor = interval / sampled;
    if rate {
        factor /= range_ms as f64 / 1000.0;
    }
    Some(result * factor)
}

/// Least squares over the window, x in seconds from `intercept_ms`, with
/// Kahan sums (Prometheus' `linearRegression`).
fn linear_regression(w: &[(i64, f64)], intercept_ms: i64) -> (f64, f64) {
    let init_y = w[0].1;
    let const_y = w.iter().all(|(_, v)| *v == init_y);
    if const_y {
        if init_y.is_infinite() {
            return (f64::NAN, f64::NAN);
        }
        return (0.0, init_y);
    }
    let (mut n, mut sx, mut cx, mut sy, mut cy, mut sxy, mut cxy, mut sx2, mut cx2) =
        (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for &(t, v) in w {
        n += 1.0;
        let x = (t - intercept_ms) as f64 / 1e3;
        (sx, cx) = kahan_inc(x, sx, cx);
        (sy, cy) = kahan_inc(v, sy, cy);
        (sxy, cxy) = kahan_inc(x * v, sxy, cxy);
        (sx2, cx2) = kahan_inc(x * x, sx2, cx2);
    }
    let (sx, sy, sxy, sx2) = (sx + cx, sy + cy, sxy + cxy, sx2 + cx2);
    let cov = sxy - sx * sy / n;
    let var = sx2 - sx * sx / n;
    let slope = cov / var;
    (slope, sy / n - slope * sx / n)
}

fn holt_winters(w: &[(i64, f64)], sf: f64, tf: f64) -> Option<f64> {
    if w.len() < 2 {
        return None;
    }
    let (mut s0, mut s1, mut b) = (0.0, w[0].1, w[1].1 - w[0].1);
    for (i, &(_, v)) in w.iter().enumerate().skip(1) {
        let x = sf * v;
        if i > 1 {
            b = tf * (s1 - s0) + (1.0 - tf) * b;
        }
        let y = (1.0 - sf) * (s1 + b);
        (s0, s1) = (s1, x + y);
    }
    Some(s1)
}

/// absent()'s series: the argument's equality matchers as labels.
fn absent_answer(points: Vec<Option<f64>>, arg: &Expr) -> Value {
    if points.iter().all(Option::is_none) {
        return Value::Vector(Vec::new());
    }
    let vs = match arg {
        Expr::VectorSelector(vs) => Some(vs),
        Expr::MatrixSelector(ms) => Some(&ms.vs),
        _ => None,
    };
    let mut labels: Labels = Vec::new();
    if let Some(vs) = vs {
        let mut seen = std::collections::HashSet::new();
        for m in &vs.matchers.matchers {
            if m.name == METRIC_NAME {
                continue;
            }
            let first = seen.insert(m.name.clone());
            labels.retain(|(k, _)| k != &m.name);
            if matches!(m.op, promql_parser::label::MatchOp::Equal) && first {
                labels.push((m.name.clone(), m.value.clone()));
            }
        }
        labels.sort();
    }
    Value::Vector(vec![Series { labels, points }])
}

fn histogram_quantile(q: &[f64], v: Vec<Series>, steps: usize) -> Vec<Series> {
    use std::collections::HashMap;
    let mut groups: HashMap<Labels, Vec<(f64, usize)>> = HashMap::new();
    let mut order = Vec::new();
    for (i, s) in v.iter().enumerate() {
        let Some(le) = s.labels.iter().find(|(k, _)| k == "le") else {
            continue;
        };
        let Some(upper) = parse_go_float(&le.1) else {
            continue;
        };
        let mut labels = s.labels.clone();
        labels.retain(|(k, _)| k != "le" && k != METRIC_NAME);
        let group = groups.entry(labels.clone()).or_insert_with(|| {
            order.push(labels);
            Vec::new()
        });
        group.push((upper, i));
    }
    let mut out = Vec::new();
    for labels in order {
        let members = &groups[&labels];
        let points: Vec<Option<f64>> = (0..steps)
            .map(|step| {
                let mut buckets: Vec<(f64, f64)> = members
                    .iter()
                    .filter_map(|&(upper, i)| v[i].points[step].map(|c| (upper, c)))
                    .collect();
                if buckets.is_empty() {
                    return None;
                }
                Some(bucket_quantile(q[step], &mut buckets))
            })
            .collect();
        if points.iter().any(Option::is_some) {
            out.push(Series { labels, points });
        }
    }
    out
}

/// Go's `strconv.ParseFloat` as `le` labels use it (`+Inf`, `1e3`, …).
fn parse_go_float(s: &str) -> Option<f64> {
    match s.to_ascii_lowercase().as_str() {
        "+inf" | "inf" | "+infinity" | "infinity" => Some(f64::INFINITY),
        "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
        "nan" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

/// Prometheus' `bucketQuantile` over (upper bound, cumulative count).
fn bucket_quantile(q: f64, buckets: &mut [(f64, f64)]) -> f64 {
    if q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    buckets.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
    if buckets.last().is_none_or(|b| b.0 != f64::INFINITY) {
        return f64::NAN;
    }
    // Coalesce equal bounds.
    let mut merged: Vec<(f64, f64)> = Vec::with_capacity(buckets.len());
    for &(upper, count) in buckets.iter() {
        match merged.last_mut() {
            Some(last) if last.0 == upper => last.1 += count,
            _ => merged.push((upper, count)),
        }
    }
    // Monotonic counts.
    let mut max = merged[0].1;
    for b in merged.iter_mut().skip(1) {
        if b.1 > max {
            max = b.1;
        } else if b.1 < max {
            b.1 = max;
        }
    }
    if merged.len() < 2 {
        return f64::NAN;
    }
    let observations = merged[merged.len() - 1].1;
    if observations == 0.0 {
        return f64::NAN;
    }
    let mut rank = q * observations;
    let b = merged[..merged.len() - 1].partition_point(|(_, c)| *c < rank);
    if b == merged.len() - 1 {
        return merged[merged.len() - 2].0;
    }
    if b == 0 && merged[0].0 <= 0.0 {
        return merged[0].0;
    }
    let (mut start, end, mut count) = (0.0, merged[b].0, merged[b].1);
    if b > 0 {
        start = merged[b - 1].0;
        count -= merged[b - 1].1;
        rank -= merged[b - 1].1;
    }
    start + (end - start) * (rank / count)
}

struct Civil {
    year: i64,
    month: u32,
    day: u32,
    yday: u32,
    weekday: u32,
    hour: u32,
    minute: u32,
}

/// The UTC calendar fields of `seconds` since the epoch.
fn civil(seconds: f64) -> Option<Civil> {
    if !seconds.is_finite() {
        return None;
    }
    let secs = seconds.floor() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let before = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334][month as usize - 1];
    let yday = before + day + u32::from(leap && month > 2);
    Some(Civil {
        year,
        month,
        day,
        yday,
        weekday: (days + 4).rem_euclid(7) as u32,
        hour: (rem / 3600) as u32,
        minute: ((rem % 3600) / 60) as u32,
    })
}

fn days_in_month(year: i64, month: u32) -> u32 {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// rate/increase/delta need each step's window bounds: answered here
/// from the range value itself.
pub fn rate_like(name: &str, m: &RangeValue, steps: usize) -> Vec<Series> {
    let counter = name != "delta";
    let rate = name == "rate";
    over_time(name, m, steps, |_, w, end| {
        extrapolated_rate(w, end - m.range, end, m.range, counter, rate)
    })
}
