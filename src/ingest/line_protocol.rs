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

use crate::codec::quote_prefix;
use crate::key::TimeUnit;
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
    /// InfluxDB's `m` and `h` (its `/write` takes them).
    Minutes,
    Hours,
}

/// The latest time a point may have, in nanoseconds: InfluxDB's
/// (2262-04-11T23:47:16.854775806Z, the last of a signed 64-bit count of
/// nanoseconds but one). Every door refuses a later point, whatever its
/// table's time unit, so one point means the same through each.
pub const MAX_TIME_NS: u64 = i64::MAX as u64 - 1;

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

    /// The unit of the same resolution.
    pub fn unit(self) -> TimeUnit {
        match self {
            Precision::Nanoseconds => TimeUnit::Nanoseconds,
            Precision::Microseconds => TimeUnit::Microseconds,
            Precision::Milliseconds => TimeUnit::Milliseconds,
            Precision::Seconds | Precision::Minutes | Precision::Hours => TimeUnit::Seconds,
        }
    }

    /// A timestamp in this precision as a time in `unit`, and whether it
    /// was exact (no finer digits dropped); `None` before 1970 or past
    /// [`MAX_TIME_NS`], whatever the unit.
    pub fn to_unit(self, ts: i64, unit: TimeUnit) -> Option<(u64, bool)> {
        let ts = u64::try_from(ts).ok()?;
        let ts = match self {
            Precision::Minutes => ts.checked_mul(60)?,
            Precision::Hours => ts.checked_mul(3600)?,
            _ => ts,
        };
        let ns_per = 1_000_000_000 / self.unit().per_second();
        if ts.checked_mul(ns_per)? > MAX_TIME_NS {
            return None;
        }
        let (from, to) = (self.unit().per_second(), unit.per_second());
        if from >= to {
            let step = from / to;
            Some((ts / step, ts % step == 0))
        } else {
            Some((ts.checked_mul(to / from)?, true))
        }
    }
}

/// Parses a body of lines; good lines and bad ones are both returned, so
/// one bad line never costs the others.
pub fn parse_lines(body: &str) -> (Vec<(usize, Point<'_>)>, Vec<LineError>) {
    let mut parser = LineParser::default();
    let mut points = Vec::new();
    let mut errors = Vec::new();
    for (number, line) in lines(body) {
        match parser.parse(line) {
            Ok(p) => points.push((number, p.to_point())),
            Err(reason) => errors.push(LineError {
                line: number,
                reason,
            }),
        }
    }
    (points, errors)
}

/// The lines of a body that hold points, with their 1-based numbers:
/// blank lines and `#` comments are skipped, `\r\n` endings accepted.
pub fn lines(body: &str) -> impl Iterator<Item = (usize, &str)> {
    body.split('\n').enumerate().filter_map(|(i, line)| {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let trimmed = line.trim_start();
        (!trimmed.is_empty() && !trimmed.starts_with('#')).then_some((i + 1, trimmed))
    })
}

/// Parses one line (see [`LineParser`] for the allocation-free form).
pub fn parse_line(line: &str) -> Result<Point<'_>, String> {
    let mut parser = LineParser::default();
    parser.parse(line).map(|p| p.to_point())
}

/// Where a piece of text of the last parsed line is: a range of the line,
/// or of the parser's scratch when the text had escapes.
#[derive(Debug, Clone, Copy, Default)]
struct Span {
    start: u32,
    end: u32,
    unescaped: bool,
}

/// A line protocol parser that keeps its buffers from line to line, so a
/// line without escapes or string fields allocates nothing (this is the
/// ingest hot path: one line per Kafka message).
#[derive(Debug, Default)]
pub struct LineParser {
    measurement: Span,
    tags: Vec<(Span, Span)>,
    fields: Vec<(Span, Value)>,
    timestamp: Option<i64>,
    /// End of the measurement and tags (before the space).
    series_end: u32,
    /// Unescaped copies of the texts that had escapes.
    scratch: String,
}

/// The line a [`LineParser`] parsed last: texts borrow the line (`'l`)
/// or, when they had escapes, the parser (`'p`).
#[derive(Clone, Copy)]
pub struct ParsedLine<'l, 'p> {
    line: &'l str,
    parser: &'p LineParser,
}

impl<'l: 'p, 'p> ParsedLine<'l, 'p> {
    fn text(&self, s: Span) -> &'p str {
        let from = if s.unescaped {
            &self.parser.scratch
        } else {
            self.line
        };
        // Spans are made by the parser on char boundaries of these strings.
        from.get(s.start as usize..s.end as usize)
            .unwrap_or_default()
    }

    pub fn measurement(&self) -> &'p str {
        self.text(self.parser.measurement)
    }

    pub fn tags(&self) -> impl Iterator<Item = (&'p str, &'p str)> + '_ {
        self.parser
            .tags
            .iter()
            .map(|&(k, v)| (self.text(k), self.text(v)))
    }

    /// Tag `i` (< the number of tags), in line order.
    pub fn tag(&self, i: usize) -> (&'p str, &'p str) {
        self.parser
            .tags
            .get(i)
            .map_or(("", ""), |&(k, v)| (self.text(k), self.text(v)))
    }

    pub fn field_count(&self) -> usize {
        self.parser.fields.len()
    }

    /// Field `i`, in line order.
    pub fn field(&self, i: usize) -> (&'p str, &'p Value) {
        let (name, value) = &self.parser.fields[i];
        (self.text(*name), value)
    }

    pub fn timestamp(&self) -> Option<i64> {
        self.parser.timestamp
    }

    /// The measurement and tags as the line wrote them, escapes and all.
    pub fn series_text(&self) -> &'l str {
        self.line
            .get(..self.parser.series_end as usize)
            .unwrap_or_default()
    }

    /// A copy that borrows only the line, for callers that keep points.
    pub fn to_point(&self) -> Point<'l> {
        let cow = |s: Span| -> Cow<'l, str> {
            if s.unescaped {
                Cow::Owned(self.text(s).to_string())
            } else {
                Cow::Borrowed(
                    self.line
                        .get(s.start as usize..s.end as usize)
                        .unwrap_or_default(),
                )
            }
        };
        Point {
            measurement: cow(self.parser.measurement),
            tags: self
                .parser
                .tags
                .iter()
                .map(|&(k, v)| (cow(k), cow(v)))
                .collect(),
            fields: self
                .parser
                .fields
                .iter()
                .map(|(k, v)| (cow(*k), v.clone()))
                .collect(),
            timestamp: self.parser.timestamp,
        }
    }
}

/// Byte classes for scanning: a stop byte, the escape, anything else.
const PLAIN: u8 = 0;
const STOP: u8 = 1;
const ESCAPE: u8 = 2;

const fn classes(stops: &[u8]) -> [u8; 256] {
    let mut t = [PLAIN; 256];
    let mut i = 0;
    while i < stops.len() {
        t[stops[i] as usize] = STOP;
        i += 1;
    }
    t[b'\\' as usize] = ESCAPE;
    t
}

/// The measurement and tag values end at a comma or a space...
static COMMA_SPACE: [u8; 256] = classes(b", ");
/// ...tag and field keys also at `=`.
static KEY_END: [u8; 256] = classes(b"=, ");

/// Which bytes end a [`scan`]: `,` and space (the measurement, tag
/// values, field values)...
const COMMA_SPACE_STOPS: u8 = 0;
/// ...`=` too (tag and field keys)...
const KEY_STOPS: u8 = 1;
/// ...or space only (the whole series part, [`series_end`]).
const SPACE_STOPS: u8 = 2;
static SPACE: [u8; 256] = classes(b" ");

/// The index of the first unescaped stop byte (of `STOPS`) at or after
/// `from` (or the length), and whether an escape was seen on the way.
fn scan<const STOPS: u8>(b: &[u8], from: usize) -> (usize, bool) {
    let table = match STOPS {
        KEY_STOPS => &KEY_END,
        SPACE_STOPS => &SPACE,
        _ => &COMMA_SPACE,
    };
    let mut i = from;
    let mut escaped = false;
    while i < b.len() {
        // Eight bytes at a time to the next byte that may stop the scan
        // (a line is mostly plain text between stops a few bytes apart).
        if let Some(word) = b.get(i..i + 8) {
            let word = u64::from_le_bytes(word.try_into().unwrap_or_default());
            let mut hits = bytes_equal_to(word, b' ') | bytes_equal_to(word, b'\\');
            if STOPS != SPACE_STOPS {
                hits |= bytes_equal_to(word, b',');
            }
            if STOPS == KEY_STOPS {
                hits |= bytes_equal_to(word, b'=');
            }
            if hits == 0 {
                i += 8;
                continue;
            }
            i += (hits.trailing_zeros() / 8) as usize;
        }
        match table[b[i] as usize] {
            PLAIN => i += 1,
            STOP => return (i, escaped),
            _ => {
                escaped = true;
                i += 2;
            }
        }
    }
    (b.len(), escaped)
}

/// The high bit of each byte of `word` that equals `c`, exact up to the
/// first such byte (after it, a borrow can mark others too): the lowest
/// set bit is the first byte equal to `c`.
fn bytes_equal_to(word: u64, c: u8) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let x = word ^ (ONES * c as u64);
    x.wrapping_sub(ONES) & !x & HIGHS
}

/// Where the measurement and tags of `line` end: its first space not
/// escaped by a backslash (a valid line's series part ends there).
pub fn series_end(line: &str) -> Option<usize> {
    let (end, _) = scan::<SPACE_STOPS>(line.as_bytes(), 0);
    (end < line.len()).then_some(end)
}

/// Appends `s` unescaped: a backslash before `,`, space, `=`, `\` or `"`
/// stands for that character; before anything else it is kept.
fn unescape_into(s: &str, out: &mut String) {
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
}

impl LineParser {
    /// The text `line[from..to]`, unescaped into the scratch when it had escapes.
    fn span(&mut self, line: &str, from: usize, to: usize, escaped: bool) -> Span {
        if !escaped {
            return Span {
                start: from as u32,
                end: to as u32,
                unescaped: false,
            };
        }
        let start = self.scratch.len();
        unescape_into(&line[from..to], &mut self.scratch);
        Span {
            start: start as u32,
            end: self.scratch.len() as u32,
            unescaped: true,
        }
    }

    /// Parses one line (no line break in it); the answer borrows the line
    /// and this parser until the next call.
    pub fn parse<'l: 'p, 'p>(&'p mut self, line: &'l str) -> Result<ParsedLine<'l, 'p>, String> {
        self.parse_into(line)?;
        Ok(ParsedLine { line, parser: self })
    }

    /// Parses the fields and time of a line whose measurement and tags,
    /// `line[..series_end]` (a [`series_end`]), are known to the caller:
    /// the answer has no measurement or tags, only its series text.
    pub fn parse_after_series<'l: 'p, 'p>(
        &'p mut self,
        line: &'l str,
        series_end: usize,
    ) -> Result<ParsedLine<'l, 'p>, String> {
        self.clear(line)?;
        self.measurement = Span::default();
        self.parse_fields(line, series_end)?;
        Ok(ParsedLine { line, parser: self })
    }

    fn clear(&mut self, line: &str) -> Result<(), String> {
        self.tags.clear();
        self.fields.clear();
        self.scratch.clear();
        self.timestamp = None;
        if line.len() > u32::MAX as usize {
            return Err("line is longer than 4 GiB".into());
        }
        Ok(())
    }

    fn parse_into(&mut self, line: &str) -> Result<(), String> {
        self.clear(line)?;
        // Every stop byte is ASCII, so every index below is a char boundary.
        let b = line.as_bytes();
        let (end, escaped) = scan::<COMMA_SPACE_STOPS>(b, 0);
        if end == 0 {
            return Err("missing measurement".into());
        }
        self.measurement = self.span(line, 0, end, escaped);
        let mut at = end;
        while b.get(at) == Some(&b',') {
            let key_from = at + 1;
            let (key_end, key_escaped) = scan::<KEY_STOPS>(b, key_from);
            let key = &line[key_from..key_end];
            if b.get(key_end) != Some(&b'=') {
                return Err(format!("tag `{}` has no value", quote_prefix(key)));
            }
            let (value_end, value_escaped) = scan::<COMMA_SPACE_STOPS>(b, key_end + 1);
            if key.is_empty() || value_end == key_end + 1 {
                return Err(format!(
                    "empty tag key or value in `{}`",
                    quote_prefix(&line[key_from..value_end])
                ));
            }
            let k = self.span(line, key_from, key_end, key_escaped);
            let v = self.span(line, key_end + 1, value_end, value_escaped);
            self.tags.push((k, v));
            at = value_end;
        }
        self.parse_fields(line, at)
    }

    /// The fields and time of `line`, from `at`, the end of its series.
    fn parse_fields(&mut self, line: &str, mut at: usize) -> Result<(), String> {
        let b = line.as_bytes();
        if b.get(at) != Some(&b' ') {
            return Err("missing fields after the measurement and tags".into());
        }
        self.series_end = at as u32;
        while b.get(at) == Some(&b' ') {
            at += 1;
        }
        loop {
            let key_from = at;
            let (key_end, key_escaped) = scan::<KEY_STOPS>(b, key_from);
            let key = &line[key_from..key_end];
            if b.get(key_end) != Some(&b'=') {
                return Err(format!("field `{}` has no value", quote_prefix(key)));
            }
            if key.is_empty() {
                return Err("empty field key".into());
            }
            let value_from = key_end + 1;
            let (value, value_end) = if b.get(value_from) == Some(&b'"') {
                let mut i = value_from + 1;
                loop {
                    match b.get(i) {
                        None => {
                            return Err(format!(
                                "field `{}`: string value has no closing quote",
                                quote_prefix(key)
                            ));
                        }
                        Some(b'\\') => i += 2,
                        Some(b'"') => break,
                        Some(_) => i += 1,
                    }
                }
                let mut text = String::with_capacity(i - value_from - 1);
                unescape_into(&line[value_from + 1..i], &mut text);
                (Value::Str(text), i + 1)
            } else {
                let (value_end, _) = scan::<COMMA_SPACE_STOPS>(b, value_from);
                let value = parse_value(&line[value_from..value_end])
                    .map_err(|e| format!("field `{}`: {e}", quote_prefix(key)))?;
                (value, value_end)
            };
            let k = self.span(line, key_from, key_end, key_escaped);
            self.fields.push((k, value));
            match b.get(value_end) {
                Some(b',') => at = value_end + 1,
                Some(b' ') => {
                    at = value_end;
                    while b.get(at) == Some(&b' ') {
                        at += 1;
                    }
                    break;
                }
                None => {
                    at = value_end;
                    break;
                }
                Some(_) => {
                    return Err(format!(
                        "unexpected text after field `{}`",
                        quote_prefix(key)
                    ));
                }
            }
        }
        let rest = line[at..].trim_end();
        if !rest.is_empty() {
            self.timestamp = Some(
                parse_i64(rest).ok_or_else(|| format!("timestamp `{rest}` is not an integer"))?,
            );
        }
        Ok(())
    }
}

/// A decimal integer with an optional sign.
fn parse_i64(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let (negative, digits) = match b.first()? {
        b'-' => (true, &b[1..]),
        b'+' => (false, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = match n
            .checked_mul(10)
            .and_then(|n| n.checked_add(i64::from(d - b'0')))
        {
            Some(n) => n,
            // Out of range, or i64::MIN: the standard parser decides.
            None => return s.parse().ok(),
        };
    }
    Some(if negative { -n } else { n })
}

/// Powers of ten that are exact as f64.
const POW10: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// `[+-]digits[.digits]` with at most 15 digits, as sensors write values:
/// the mantissa (< 2^53) and the power of ten are both exact as f64, so
/// one IEEE division gives the correctly rounded value (Clinger's fast
/// path), what the standard parser returns. `None` for anything else.
fn parse_short_decimal(raw: &[u8]) -> Option<f64> {
    let (negative, digits) = match raw.first()? {
        b'-' => (true, &raw[1..]),
        b'+' => (false, &raw[1..]),
        _ => (false, raw),
    };
    let mut mantissa: u64 = 0;
    let mut count = 0usize;
    let mut fraction: Option<usize> = None;
    for &d in digits {
        match d {
            b'0'..=b'9' => {
                mantissa = mantissa * 10 + u64::from(d - b'0');
                count += 1;
                if let Some(f) = fraction.as_mut() {
                    *f += 1;
                }
                if count > 15 {
                    return None;
                }
            }
            b'.' if fraction.is_none() => fraction = Some(0),
            _ => return None,
        }
    }
    if count == 0 {
        return None;
    }
    let v = mantissa as f64 / POW10[fraction.unwrap_or(0)];
    Some(if negative { -v } else { v })
}

fn parse_value(raw: &str) -> Result<Value, String> {
    if raw.is_empty() {
        return Err("empty value".into());
    }
    if let Some(v) = parse_short_decimal(raw.as_bytes()) {
        return Ok(Value::Float(v));
    }
    if let Some(i) = raw.strip_suffix('i') {
        return i
            .parse::<i64>()
            .map(Value::Int)
            .map_err(|_| format!("`{}` is not an integer", quote_prefix(raw)));
    }
    if let Some(u) = raw.strip_suffix('u') {
        return u
            .parse::<u64>()
            .map(Value::Uint)
            .map_err(|_| format!("`{}` is not an unsigned integer", quote_prefix(raw)));
    }
    match raw {
        "t" | "T" | "true" | "True" | "TRUE" => return Ok(Value::Bool(true)),
        "f" | "F" | "false" | "False" | "FALSE" => return Ok(Value::Bool(false)),
        _ => {}
    }
    let v: f64 = raw
        .parse()
        .map_err(|_| format!("`{}` is not a number, string or boolean", quote_prefix(raw)))?;
    if !v.is_finite() {
        return Err(format!("`{}` is not a finite number", quote_prefix(raw)));
    }
    Ok(Value::Float(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scan that takes eight bytes at a time stops where a scan of
    /// one byte at a time does, for stops at every place in a word and
    /// escapes across word ends.
    #[test]
    fn word_scans_stop_where_byte_scans_do() {
        fn byte_scan(b: &[u8], from: usize, stops: &[u8]) -> (usize, bool) {
            let (mut i, mut escaped) = (from, false);
            while i < b.len() {
                if b[i] == b'\\' {
                    escaped = true;
                    i += 2;
                } else if stops.contains(&b[i]) {
                    return (i, escaped);
                } else {
                    i += 1;
                }
            }
            (b.len(), escaped)
        }
        let alphabet: &[u8] = b"aaaaaaaaz09.,, ==\\\xc3\xa9\xff\x80\x81";
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        for _ in 0..20_000 {
            let len = next(40);
            let line: Vec<u8> = (0..len).map(|_| alphabet[next(alphabet.len())]).collect();
            let from = next(len + 1);
            assert_eq!(
                scan::<COMMA_SPACE_STOPS>(&line, from),
                byte_scan(&line, from, b", "),
                "{line:?} from {from}"
            );
            assert_eq!(
                scan::<KEY_STOPS>(&line, from),
                byte_scan(&line, from, b", ="),
                "{line:?} from {from}"
            );
            assert_eq!(
                scan::<SPACE_STOPS>(&line, from),
                byte_scan(&line, from, b" "),
                "{line:?} from {from}"
            );
        }
    }

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
    fn the_decimal_fast_path_gives_what_the_standard_parser_gives() {
        // Digits on both sides of the point, signs, up to and past the
        // fast path's 15 digits, and shapes it must leave alone.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut cases: Vec<String> = vec![
            "0".into(),
            "-0".into(),
            "+1.5".into(),
            "1.".into(),
            ".5".into(),
            "0.1".into(),
            "123456789012345".into(),
            "1234567890123456".into(),
            "0.000000000000001".into(),
            "99.99".into(),
        ];
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let digits = (x % 17) as usize + 1;
            let point = (x >> 8) as usize % (digits + 1);
            let mut v = format!("{}", (x >> 12) % 10u64.pow(digits.min(19) as u32));
            while v.len() < digits {
                v.insert(0, '0');
            }
            v.insert(point, '.');
            if x & 1 == 1 {
                v.insert(0, '-');
            }
            cases.push(v);
        }
        for c in &cases {
            let std: Result<f64, _> = c.parse();
            match (parse_short_decimal(c.as_bytes()), std.clone()) {
                (Some(fast), Ok(slow)) => {
                    assert_eq!(fast.to_bits(), slow.to_bits(), "{c}")
                }
                (Some(fast), Err(_)) => panic!("{c} parsed as {fast}, std refuses it"),
                (None, _) => {}
            }
            assert_eq!(parse_value(c).ok(), std.ok().map(Value::Float), "{c}");
        }
    }

    #[test]
    fn precisions_convert_to_table_units() {
        let ms = TimeUnit::Milliseconds;
        assert_eq!(
            Precision::Nanoseconds.to_unit(1_700_000_000_123_456_789, ms),
            Some((1_700_000_000_123, false))
        );
        assert_eq!(
            Precision::Nanoseconds.to_unit(1_700_000_000_123_000_000, ms),
            Some((1_700_000_000_123, true))
        );
        assert_eq!(
            Precision::Nanoseconds.to_unit(1_700_000_000_123_456_789, TimeUnit::Nanoseconds),
            Some((1_700_000_000_123_456_789, true))
        );
        assert_eq!(Precision::Seconds.to_unit(2, ms), Some((2000, true)));
        assert_eq!(
            Precision::Seconds.to_unit(2, TimeUnit::Nanoseconds),
            Some((2_000_000_000, true))
        );
        assert_eq!(
            Precision::Seconds.to_unit(i64::MAX, TimeUnit::Nanoseconds),
            None
        );
        assert_eq!(Precision::Milliseconds.to_unit(-1, ms), None);
        // Past 2262 in nanoseconds: refused in a table of milliseconds too
        // (the year 292,278,994 was stored).
        assert_eq!(Precision::Milliseconds.to_unit(i64::MAX, ms), None);
        assert_eq!(
            Precision::Milliseconds.to_unit(9_223_372_036_854, ms),
            Some((9_223_372_036_854, true))
        );
        assert_eq!(Precision::Milliseconds.to_unit(9_223_372_036_855, ms), None);
        assert_eq!(
            Precision::Nanoseconds.to_unit(i64::MAX - 1, TimeUnit::Nanoseconds),
            Some((i64::MAX as u64 - 1, true))
        );
        assert_eq!(
            Precision::Nanoseconds.to_unit(i64::MAX, TimeUnit::Nanoseconds),
            None
        );
    }
}
