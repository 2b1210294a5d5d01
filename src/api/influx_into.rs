//! `SELECT … INTO`: an answer's rows written back as points, as InfluxDB
//! 1.6 writes them (`coordinator/statement_executor.go`, `writeInto`):
//! each row a point of the target measurement (or, for `:MEASUREMENT`,
//! of the one it came from) at the row's time, its tags the series' (a
//! `GROUP BY`'s; a raw `SELECT *`'s tags are columns, so they become
//! fields, as there), its fields the row's non-null columns. The points
//! go through `/write`'s path into the target's retention policy (the
//! writer `influx.rs` hands in), so every rule of a write holds (policies,
//! field types, limits). Continuous queries write the same way.

use crate::query::influx_select::{Cell, SeriesOut};
use crate::query::influxql::IntoTarget;
use crate::value::Value;

/// Points written in one piece: a large answer goes as several writes,
/// as InfluxDB writes an `INTO`'s points 10,000 at a time.
const POINTS_A_WRITE: usize = 10_000;

/// Writes `answer` into `into` through `write` (line protocol of at
/// most [`POINTS_A_WRITE`] points at a time, answering the points it
/// wrote or the write's error), answering InfluxDB's `result` series: the
/// points written.
pub(super) fn write_into(
    into: &IntoTarget,
    answer: &[SeriesOut],
    mut write: impl FnMut(&str) -> Result<usize, String>,
) -> Result<Vec<SeriesOut>, String> {
    let mut written = 0;
    for text in lines(into, answer)? {
        written += write(&text)?;
    }
    Ok(vec![SeriesOut {
        name: "result".into(),
        tags: None,
        columns: vec!["time".into(), "written".into()],
        values: vec![vec![
            Cell::Time(0),
            Cell::Value(Value::Int(i64::try_from(written).unwrap_or(i64::MAX))),
        ]],
    }])
}

/// The answer's rows as line protocol, [`POINTS_A_WRITE`] points a piece.
/// A row with a NaN or infinite value is no point, as InfluxDB refuses
/// such a point whole; a name or string line protocol cannot carry (a
/// line break, a measurement taken for a comment) is an error.
fn lines(into: &IntoTarget, answer: &[SeriesOut]) -> Result<Vec<String>, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut points = 0;
    for series in answer {
        let measurement = into.measurement.as_deref().unwrap_or(&series.name);
        if measurement.starts_with('#') {
            return Err(format!(
                "SELECT … INTO cannot write measurement {measurement:?}: line protocol reads a \
                 line starting with '#' as a comment"
            ));
        }
        let mut head = escape(measurement, &[',', ' '])?;
        for (k, v) in series.tags.iter().flatten() {
            if v.is_empty() {
                continue;
            }
            head.push(',');
            head.push_str(&escape(k, &[',', '=', ' '])?);
            head.push('=');
            head.push_str(&escape(v, &[',', '=', ' '])?);
        }
        'rows: for row in &series.values {
            let Some(Cell::Time(time)) = row.first() else {
                continue;
            };
            let mut fields = String::new();
            for (column, cell) in series.columns.iter().zip(row).skip(1) {
                let Cell::Value(value) = cell else {
                    continue;
                };
                let Some(v) = field_value(value)? else {
                    continue 'rows;
                };
                if !fields.is_empty() {
                    fields.push(',');
                }
                fields.push_str(&escape(column, &[',', '=', ' '])?);
                fields.push('=');
                fields.push_str(&v);
            }
            if fields.is_empty() {
                continue;
            }
            text.push_str(&format!("{head} {fields} {time}\n"));
            points += 1;
            if points == POINTS_A_WRITE {
                pieces.push(std::mem::take(&mut text));
                points = 0;
            }
        }
    }
    if points > 0 {
        pieces.push(text);
    }
    Ok(pieces)
}

/// A value as line protocol writes it; `None` for one it cannot hold
/// (NaN, infinities).
fn field_value(v: &Value) -> Result<Option<String>, String> {
    Ok(Some(match v {
        Value::Float(f) if !f.is_finite() => return Ok(None),
        Value::Float(f) => format!("{f:?}"),
        Value::Int(n) => format!("{n}i"),
        Value::Uint(n) => format!("{n}u"),
        Value::Bool(b) => b.to_string(),
        Value::Str(s) => {
            refuse_line_breaks(s)?;
            format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
        }
    }))
}

fn refuse_line_breaks(s: &str) -> Result<(), String> {
    if s.contains(['\n', '\r']) {
        return Err(format!(
            "SELECT … INTO cannot write {:?}: line protocol cannot carry a line break",
            crate::codec::quote_prefix(s)
        ));
    }
    Ok(())
}

fn escape(s: &str, special: &[char]) -> Result<String, String> {
    refuse_line_breaks(s)?;
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if special.contains(&c) || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_become_points_with_their_series_tags_and_non_null_columns() {
        let answer = [SeriesOut {
            name: "cpu".into(),
            tags: Some([("host".to_string(), "a b".to_string())].into()),
            columns: vec!["time".into(), "mean".into(), "n".into(), "s".into()],
            values: vec![
                vec![
                    Cell::Time(60_000_000_000),
                    Cell::Value(Value::Float(1.5)),
                    Cell::Value(Value::Int(2)),
                    Cell::Value(Value::Str("q\"x".into())),
                ],
                vec![
                    Cell::Time(120_000_000_000),
                    Cell::Null,
                    Cell::Null,
                    Cell::Null,
                ],
                vec![
                    Cell::Time(180_000_000_000),
                    Cell::Value(Value::Float(f64::NAN)),
                    Cell::Value(Value::Float(3.0)),
                    Cell::Null,
                ],
            ],
        }];
        let into = IntoTarget {
            database: None,
            retention_policy: None,
            measurement: Some("down".into()),
        };
        let text = lines(&into, &answer).expect("lines");
        // The row with a NaN is no point, as InfluxDB refuses it whole.
        assert_eq!(
            text,
            ["down,host=a\\ b mean=1.5,n=2i,s=\"q\\\"x\" 60000000000\n"]
        );
        let same = IntoTarget {
            measurement: None,
            ..into.clone()
        };
        assert!(lines(&same, &answer).expect("lines")[0].starts_with("cpu,host=a\\ b "));
        let broken = [SeriesOut {
            values: vec![vec![
                Cell::Time(1),
                Cell::Value(Value::Str("two\nlines".into())),
            ]],
            columns: vec!["time".into(), "s".into()],
            ..answer[0].clone()
        }];
        assert!(lines(&into, &broken).is_err());
        let comment = IntoTarget {
            measurement: Some("#m".into()),
            ..into
        };
        assert!(lines(&comment, &answer).is_err());
    }
}
