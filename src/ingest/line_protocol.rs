//! Influx line protocol (1.x), parsed without copying where nothing is
//! escaped:
//!
//! ```text
//! measurement[,tag=value…] field=value[,field=value…] [timestamp]
//! ```
//!
//! Commas, spaces (and, in tags and field keys, `=`) are escaped with `\`.
//! Field values: float (`1`, `-1.5e3`), integer (`12i`), unsigned (`12u`),
//! string (`"…"` with `\"` and `\\`), boolean (`t`, `true`, `F`, `false`, …).
//! Lines starting with `#` and blank lines are skipped.

use std::borrow::Cow;

use crate::value::Value;

/// One point.
#[derive(Debug, Clone, PartialEq)]
pub struct Point<'a> {
    pub measurement: Cow<'a, str>,
    pub tags: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    pub fields: Vec<(Cow<'a, str>, Value)>,
    /// In the request's precision; `None` means "now".
    pub timestamp: Option<i64>,
}

/// A line that could not be parsed: 1-based line number and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct LineError {
    pub line: usize,
    pub reason: String,
}

/// Timestamp precision of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    #[default]
    Nanoseconds,
    Microseconds,
    Milliseconds,
    Seconds,
}

impl Precision {
    pub fn parse(s: &str) -> Option<Precision> {
        Some(match s {
            "ns" | "n" => Precision::Nanoseconds,
            "us" | "u" | "µ" => Precision::Microseconds,
            "ms" => Precision::Milliseconds,
            "s" => Precision::Seconds,
            _ => return None,
        })
    }

    /// Epoch milliseconds of a timestamp in this precision; `None` before
    /// 1970 or past the u64 range.
    pub fn to_ms(self, ts: i64) -> Option<u64> {
        let ms = match self {
            Precision::Nanoseconds => ts.div_euclid(1_000_000),
            Precision::Microseconds => ts.div_euclid(1_000),
            Precision::Milliseconds => ts,
            Precision::Seconds => ts.checked_mul(1000)?,
        };
        u64::try_from(ms).ok()
    }
}

/// Parses a body of lines; good lines and bad ones are both returned, so
/// one bad line never costs the others.
pub fn parse_lines(body: &str) -> (Vec<(usize, Point<'_>)>, Vec<LineError>) {
    // Sized once: a batch holds thousands of points.
    let mut points = Vec::with_capacity(body.bytes().filter(|b| *b == b'\n').count() + 1);
    let mut errors = Vec::new();
    for (i, line) in body.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match parse_line(trimmed) {
            Ok(p) => points.push((i + 1, p)),
            Err(reason) => errors.push(LineError {
                line: i + 1,
                reason,
            }),
        }
    }
    (points, errors)
}

/// Splits off the part of `s` up to the first unescaped byte in `stops`;
/// returns (part, rest starting at the stop byte).
fn take_until<'a>(s: &'a str, stops: &[u8]) -> (&'a str, &'a str) {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            i += 2;
            continue;
        }
        if stops.contains(&b[i]) {
            return (&s[..i], &s[i..]);
        }
        i += 1;
    }
    (s, "")
}

fn unescape(s: &str) -> Cow<'_, str> {
    if !s.contains('\\') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(n @ (',' | ' ' | '=' | '\\' | '"')) => out.push(n),
                Some(n) => {
                    out.push('\\');
                    out.push(n);
                }
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

pub fn parse_line(line: &str) -> Result<Point<'_>, String> {
    let (measurement, mut rest) = take_until(line, b", ");
    if measurement.is_empty() {
        return Err("missing measurement".into());
    }
    let mut tags = Vec::new();
    while let Some(r) = rest.strip_prefix(',') {
        let (pair, r) = take_until(r, b", ");
        let (k, v) = take_until(pair, b"=");
        let v = v
            .strip_prefix('=')
            .ok_or_else(|| format!("tag `{k}` has no value"))?;
        if k.is_empty() || v.is_empty() {
            return Err(format!("empty tag key or value in `{pair}`"));
        }
        tags.push((unescape(k), unescape(v)));
        rest = r;
    }
    let rest = rest
        .strip_prefix(' ')
        .ok_or_else(|| "missing fields after the measurement and tags".to_string())?
        .trim_start_matches(' ');
    // Sized once: fields are most of a line, and every one is pushed.
    let mut fields = Vec::with_capacity(rest.bytes().filter(|b| *b == b',').count() + 1);
    let mut r = rest;
    loop {
        let (k, after_key) = take_until(r, b"=, ");
        let after_eq = after_key
            .strip_prefix('=')
            .ok_or_else(|| format!("field `{k}` has no value"))?;
        if k.is_empty() {
            return Err("empty field key".into());
        }
        let (value, after_value) = if let Some(quoted) = after_eq.strip_prefix('"') {
            let b = quoted.as_bytes();
            let mut i = 0;
            loop {
                match b.get(i) {
                    None => return Err(format!("field `{k}`: string value has no closing quote")),
                    Some(b'\\') => i += 2,
                    Some(b'"') => break,
                    Some(_) => i += 1,
                }
            }
            (
                Value::Str(unescape(&quoted[..i]).into_owned()),
                &quoted[i + 1..],
            )
        } else {
            let (raw, after) = take_until(after_eq, b", ");
            (
                parse_value(raw).map_err(|e| format!("field `{k}`: {e}"))?,
                after,
            )
        };
        fields.push((unescape(k), value));
        match after_value.as_bytes().first() {
            Some(b',') => r = &after_value[1..],
            Some(b' ') => {
                r = after_value.trim_start_matches(' ');
                break;
            }
            None => {
                r = "";
                break;
            }
            Some(_) => return Err(format!("unexpected text after field `{k}`")),
        }
    }
    let timestamp = if r.is_empty() {
        None
    } else {
        Some(
            r.trim_end()
                .parse::<i64>()
                .map_err(|_| format!("timestamp `{}` is not an integer", r.trim_end()))?,
        )
    };
    Ok(Point {
        measurement: unescape(measurement),
        tags,
        fields,
        timestamp,
    })
}

fn parse_value(raw: &str) -> Result<Value, String> {
    if raw.is_empty() {
        return Err("empty value".into());
    }
    if let Some(i) = raw.strip_suffix('i') {
        return i
            .parse::<i64>()
            .map(Value::Int)
            .map_err(|_| format!("`{raw}` is not an integer"));
    }
    if let Some(u) = raw.strip_suffix('u') {
        return u
            .parse::<u64>()
            .map(Value::Uint)
            .map_err(|_| format!("`{raw}` is not an unsigned integer"));
    }
    match raw {
        "t" | "T" | "true" | "True" | "TRUE" => return Ok(Value::Bool(true)),
        "f" | "F" | "false" | "False" | "FALSE" => return Ok(Value::Bool(false)),
        _ => {}
    }
    let v: f64 = raw
        .parse()
        .map_err(|_| format!("`{raw}` is not a number, string or boolean"))?;
    if !v.is_finite() {
        return Err(format!("`{raw}` is not a finite number"));
    }
    Ok(Value::Float(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_value_type_and_escape() {
        let p = parse_line(r#"cpu\ load,host=a\,b,dc=x\=y usage=1.5,n=-3i,u=7u,ok=t,s="say \"hi\"" 1700000000000000000"#)
            .unwrap();
        assert_eq!(p.measurement, "cpu load");
        assert_eq!(
            p.tags,
            vec![("host".into(), "a,b".into()), ("dc".into(), "x=y".into())]
        );
        assert_eq!(
            p.fields,
            vec![
                ("usage".into(), Value::Float(1.5)),
                ("n".into(), Value::Int(-3)),
                ("u".into(), Value::Uint(7)),
                ("ok".into(), Value::Bool(true)),
                ("s".into(), Value::Str("say \"hi\"".into())),
            ]
        );
        assert_eq!(p.timestamp, Some(1_700_000_000_000_000_000));
        assert!(matches!(p.measurement, Cow::Owned(_)));
        let plain = parse_line("m,h=1 v=2").unwrap();
        assert!(
            matches!(plain.measurement, Cow::Borrowed(_)),
            "no copy without escapes"
        );
        assert_eq!(plain.timestamp, None);
    }

    #[test]
    fn bad_lines_are_reported_with_their_numbers_and_good_ones_kept() {
        let body = "m v=1 1\n\n# comment\nm v= 2\nm,h v=1\nm v=1 x\nm v=nan\nm v=\"open\nm v=2 2\n";
        let (points, errors) = parse_lines(body);
        assert_eq!(
            points.iter().map(|(l, _)| *l).collect::<Vec<_>>(),
            vec![1, 9]
        );
        assert_eq!(
            errors.iter().map(|e| e.line).collect::<Vec<_>>(),
            vec![4, 5, 6, 7, 8]
        );
        assert!(errors[0].reason.contains("empty value"), "{}", errors[0]);
        assert!(errors[1].reason.contains("no value"), "{}", errors[1]);
        assert!(errors[2].reason.contains("timestamp"), "{}", errors[2]);
        assert!(errors[4].reason.contains("closing quote"), "{}", errors[4]);
    }

    #[test]
    fn precisions_convert_to_milliseconds() {
        assert_eq!(
            Precision::Nanoseconds.to_ms(1_700_000_000_123_456_789),
            Some(1_700_000_000_123)
        );
        assert_eq!(Precision::Seconds.to_ms(2), Some(2000));
        assert_eq!(Precision::Milliseconds.to_ms(-1), None);
    }
}
