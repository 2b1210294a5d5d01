//! `SELECT … INTO`: an answer's rows written back as points, as InfluxDB
//! 1.6 writes them (`coordinator/statement_executor.go`, `writeInto`):
//! each row a point of the target measurement (or, for `:MEASUREMENT`,
//! of the one it came from) at the row's time, its tags the series' (a
//! `GROUP BY`'s; a raw `SELECT *`'s tags are columns, so they become
//! fields, as there), its fields the row's non-null columns. The points
//! go through `/write`'s path into the target's retention policy, so
//! every rule of a write holds (policies, field types, limits). Continuous
//! queries write the same way (`influx_cq.rs`).

use super::influx::write_body;
use super::state::AppState;
use crate::ingest::line_protocol::Precision;
use crate::ingest::retention;
use crate::query::influx_select::{Cell, SeriesOut};
use crate::query::influxql::IntoTarget;
use crate::value::Value;

/// Writes `answer` into `into` (its database by default `db`), answering
/// InfluxDB's `result` series: the points written.
pub(super) fn write_into(
    s: &AppState,
    db: &str,
    into: &IntoTarget,
    answer: &[SeriesOut],
) -> Result<Vec<SeriesOut>, String> {
    let target_db = into.database.as_deref().unwrap_or(db);
    if !s
        .store
        .catalog()
        .namespaces()
        .iter()
        .any(|n| n == target_db)
    {
        return Err(format!("database not found: {target_db}"));
    }
    let target = retention::write_target(
        &s.store,
        target_db,
        into.retention_policy.as_deref(),
        s.clock.now_ms(),
    )
    .map_err(|e| e.to_string())?;
    let (text, points) = lines(into, answer);
    let written = if points == 0 {
        0
    } else {
        let outcome = write_body(s, &target, text.as_bytes(), Precision::Nanoseconds)
            .map_err(|refused| refused.message)?;
        if let Some((_, message)) = outcome.refusal() {
            return Err(message);
        }
        outcome.written
    };
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

/// The answer's rows as line protocol, and how many points it holds.
fn lines(into: &IntoTarget, answer: &[SeriesOut]) -> (String, usize) {
    let mut text = String::new();
    let mut points = 0;
    for series in answer {
        let measurement = into.measurement.as_deref().unwrap_or(&series.name);
        let mut head = escape(measurement, &[',', ' ']);
        for (k, v) in series.tags.iter().flatten() {
            if v.is_empty() {
                continue;
            }
            head.push(',');
            head.push_str(&escape(k, &[',', '=', ' ']));
            head.push('=');
            head.push_str(&escape(v, &[',', '=', ' ']));
        }
        for row in &series.values {
            let Some(Cell::Time(time)) = row.first() else {
                continue;
            };
            let mut fields = String::new();
            for (column, cell) in series.columns.iter().zip(row).skip(1) {
                let Cell::Value(value) = cell else {
                    continue;
                };
                let Some(v) = field_value(value) else {
                    continue;
                };
                if !fields.is_empty() {
                    fields.push(',');
                }
                fields.push_str(&escape(column, &[',', '=', ' ']));
                fields.push('=');
                fields.push_str(&v);
            }
            if fields.is_empty() {
                continue;
            }
            text.push_str(&format!("{head} {fields} {time}\n"));
            points += 1;
        }
    }
    (text, points)
}

/// A value as line protocol writes it; `None` for one it cannot hold
/// (NaN, infinities).
fn field_value(v: &Value) -> Option<String> {
    Some(match v {
        Value::Float(f) if !f.is_finite() => return None,
        Value::Float(f) => format!("{f:?}"),
        Value::Int(n) => format!("{n}i"),
        Value::Uint(n) => format!("{n}u"),
        Value::Bool(b) => b.to_string(),
        Value::Str(s) => format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"")),
    })
}

fn escape(s: &str, special: &[char]) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if special.contains(&c) || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out
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
        let (text, points) = lines(&into, &answer);
        assert_eq!(points, 2);
        assert_eq!(
            text,
            "down,host=a\\ b mean=1.5,n=2i,s=\"q\\\"x\" 60000000000\n\
             down,host=a\\ b n=3.0 180000000000\n"
        );
        let same = IntoTarget {
            measurement: None,
            ..into
        };
        assert!(lines(&same, &answer).0.starts_with("cpu,host=a\\ b "));
    }
}
