//! Prometheus' HTTP API: its parameters (times, durations) and its
//! answers (`{"status":"success","data":…}`, the error shape with
//! `errorType`), as `web/api/v1/api.go` of Prometheus 2.42 writes them.

use serde_json::{Value as Json, json};

use super::engine::{EvalError, Labels, QueryRange, RangeValue, Series, Value, format_value};

/// `errorType` and the status code of a refusal.
pub fn error_type(e: &EvalError) -> (&'static str, u16) {
    match e {
        EvalError::BadData(_) => ("bad_data", 400),
        EvalError::Execution(_) | EvalError::TooManySamples => ("execution", 422),
        EvalError::Timeout(_) => ("timeout", 503),
        EvalError::Read(crate::query::prom_read::ReadError::BadRegex(..)) => ("bad_data", 400),
        EvalError::Read(crate::query::prom_read::ReadError::TooManySamples(_)) => {
            ("execution", 422)
        }
        EvalError::Read(crate::query::prom_read::ReadError::Store(e))
            if matches!(
                e.kind(),
                crate::error::ErrorKind::Unavailable | crate::error::ErrorKind::Closed
            ) =>
        {
            ("unavailable", 503)
        }
        EvalError::Read(_) => ("internal", 500),
    }
}

pub fn error_body(e: &EvalError) -> (u16, Json) {
    let (kind, status) = error_type(e);
    (
        status,
        json!({"status": "error", "errorType": kind, "error": e.to_string()}),
    )
}

pub fn bad_data(message: impl Into<String>) -> EvalError {
    EvalError::BadData(message.into())
}

/// A time parameter: seconds since the epoch (a float) or RFC 3339.
pub fn parse_time(text: &str, name: &str) -> Result<i64, EvalError> {
    if let Ok(seconds) = text.parse::<f64>() {
        if !seconds.is_finite() {
            return Err(bad_data(format!(
                "invalid parameter \"{name}\": cannot parse \"{text}\" to a valid timestamp"
            )));
        }
        return Ok((seconds * 1000.0).round() as i64);
    }
    rfc3339_ms(text).ok_or_else(|| {
        bad_data(format!(
            "invalid parameter \"{name}\": cannot parse \"{text}\" to a valid timestamp"
        ))
    })
}

/// A duration parameter: seconds (a float) or Prometheus' `1h30m`.
pub fn parse_duration_param(text: &str, name: &str) -> Result<i64, EvalError> {
    let refuse = || {
        bad_data(format!(
            "invalid parameter \"{name}\": cannot parse \"{text}\" to a valid duration"
        ))
    };
    if let Ok(seconds) = text.parse::<f64>() {
        let ms = seconds * 1000.0;
        if !ms.is_finite() || ms.abs() > i64::MAX as f64 {
            return Err(refuse());
        }
        return Ok(ms.round() as i64);
    }
    prometheus_duration_ms(text).ok_or_else(refuse)
}

/// `[0-9]+(ms|s|m|h|d|w|y)` repeated, largest unit first.
pub fn prometheus_duration_ms(text: &str) -> Option<i64> {
    if text.is_empty() {
        return None;
    }
    let mut total: i64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (1, 2)
        } else {
            match rest.as_bytes().first()? {
                b's' => (1000, 1),
                b'm' => (60_000, 1),
                b'h' => (3_600_000, 1),
                b'd' => (86_400_000, 1),
                b'w' => (604_800_000, 1),
                b'y' => (31_536_000_000, 1),
                _ => return None,
            }
        };
        rest = &rest[len..];
        total = total.checked_add(n.checked_mul(unit)?)?;
    }
    Some(total)
}

/// `2006-01-02T15:04:05.999999999Z07:00` in milliseconds.
fn rfc3339_ms(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { text.get(r)?.parse().ok() };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if b[13] != b':' || b[16] != b':' || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let mut rest = &text[19..];
    let mut millis = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let padded = format!("{:0<3}", &frac[..digits.min(3)]);
        millis = padded.parse().ok()?;
        rest = &frac[digits..];
    }
    let offset_min = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return None;
            }
            sign * (rest[1..3].parse::<i64>().ok()? * 60 + rest[4..6].parse::<i64>().ok()?)
        }
    };
    // Days from the civil date (Howard Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_min * 60;
    Some(seconds * 1000 + millis)
}

fn seconds(ms: i64) -> Json {
    // Prometheus writes times as seconds with up to three decimals.
    let v = ms as f64 / 1000.0;
    serde_json::Number::from_f64(v).map_or(Json::Null, Json::Number)
}

fn metric(labels: &Labels) -> Json {
    Json::Object(
        labels
            .iter()
            .map(|(k, v)| (k.clone(), Json::String(v.clone())))
            .collect(),
    )
}

fn sorted(mut series: Vec<Series>) -> Vec<Series> {
    series.sort_by(|a, b| a.labels.cmp(&b.labels));
    series
}

/// The `data` of an instant query at `time_ms`.
pub fn instant_data(value: Value, time_ms: i64) -> Json {
    match value {
        Value::Scalar(v) => json!({
            "resultType": "scalar",
            "result": [seconds(time_ms), format_value(v.first().copied().unwrap_or(f64::NAN))],
        }),
        Value::Str(s) => json!({"resultType": "string", "result": [seconds(time_ms), s]}),
        Value::Vector(v) => json!({
            "resultType": "vector",
            "result": v.iter().filter_map(|s| {
                let x = s.points.first().copied().flatten()?;
                Some(json!({"metric": metric(&s.labels), "value": [seconds(time_ms), format_value(x)]}))
            }).collect::<Vec<_>>(),
        }),
        Value::Matrix(m) => matrix_data(&m),
    }
}

/// A range vector answered as it was selected (an instant query of
/// `x[5m]`): each series' samples in the window.
fn matrix_data(m: &RangeValue) -> Json {
    let mut result: Vec<(&Labels, Json)> = Vec::new();
    for (i, (labels, _)) in m.series.iter().enumerate() {
        let values: Vec<Json> = m
            .window(i, 0)
            .iter()
            .map(|(t, v)| json!([seconds(*t), format_value(*v)]))
            .collect();
        if !values.is_empty() {
            result.push((labels, Json::Array(values)));
        }
    }
    result.sort_by(|a, b| a.0.cmp(b.0));
    json!({
        "resultType": "matrix",
        "result": result.into_iter().map(|(l, v)| json!({"metric": metric(l), "values": v})).collect::<Vec<_>>(),
    })
}

/// The `data` of a range query.
pub fn range_data(value: Value, range: QueryRange) -> Result<Json, EvalError> {
    let time = |i: usize| range.start_ms + i as i64 * range.step_ms;
    let series = match value {
        Value::Vector(v) => sorted(v),
        Value::Scalar(v) => vec![Series {
            labels: Vec::new(),
            points: v.into_iter().map(Some).collect(),
        }],
        other => {
            return Err(bad_data(format!(
                "invalid expression type \"{}\" for range query, must be Scalar or instant Vector",
                match other {
                    Value::Matrix(_) => "range vector",
                    _ => "string",
                }
            )));
        }
    };
    let result: Vec<Json> = series
        .iter()
        .filter(|s| s.points.iter().any(Option::is_some))
        .map(|s| {
            let values: Vec<Json> = s
                .points
                .iter()
                .enumerate()
                .filter_map(|(i, p)| p.map(|v| json!([seconds(time(i)), format_value(v)])))
                .collect();
            json!({"metric": metric(&s.labels), "values": values})
        })
        .collect();
    Ok(json!({"resultType": "matrix", "result": result}))
}

pub fn success(data: Json) -> Json {
    json!({"status": "success", "data": data})
}

/// `/api/v1/status/buildinfo`: Grafana reads the version to decide what
/// the server speaks; halite answers as the Prometheus it matches.
pub fn buildinfo() -> Json {
    success(json!({
        "version": "2.42.0",
        "revision": concat!("halite-", env!("CARGO_PKG_VERSION")),
        "branch": "",
        "buildUser": "",
        "buildDate": "",
        "goVersion": "",
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations_read_as_prometheus_reads_them() {
        assert_eq!(
            parse_time("1700000000.123", "time").ok(),
            Some(1_700_000_000_123)
        );
        assert_eq!(
            parse_time("2023-11-14T22:13:20Z", "time").ok(),
            Some(1_700_000_000_000)
        );
        assert_eq!(
            parse_time("2023-11-14T23:13:20.5+01:00", "time").ok(),
            Some(1_700_000_000_500)
        );
        assert!(parse_time("yesterday", "time").is_err());
        assert!(parse_time("NaN", "time").is_err());
        assert_eq!(parse_duration_param("60", "step").ok(), Some(60_000));
        assert_eq!(parse_duration_param("1h30m", "step").ok(), Some(5_400_000));
        assert_eq!(parse_duration_param("250ms", "step").ok(), Some(250));
        assert!(parse_duration_param("5x", "step").is_err());
        assert!(parse_duration_param("", "step").is_err());
        assert_eq!(prometheus_duration_ms("99999999999999999y"), None);
    }
}
