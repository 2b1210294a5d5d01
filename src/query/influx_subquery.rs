//! InfluxQL subqueries (`SELECT sum(rate) FROM (SELECT
//! non_negative_derivative(mean(bytes), 1s) AS rate … GROUP BY time(1m),
//! host) GROUP BY time(1m)`): the inner statement's answer held as a
//! measurement of its own, whose series are the inner answer's (their
//! `GROUP BY` tags), whose fields are its columns and whose points are its
//! rows, which the outer statement reads as it reads one from the store.

use std::collections::BTreeMap;

use super::influx_reduce::{Cell, SeriesOut};
use super::influxql::{CompareOp, Expr, FieldExpr, GroupTags, Operand, Select, SelectExpr};
use super::measurements::Measurement;
use crate::series::{FieldType, NamedSeries};
use crate::value::Value;

/// A row of a subquery's answer: its time and values (null cells left
/// out), by column name.
type Row = (i64, Vec<(String, Value)>);

/// One measurement of a subquery's answer.
pub(super) struct Subquery {
    name: String,
    fields: BTreeMap<String, FieldType>,
    series: Vec<NamedSeries>,
    /// Each series' rows, oldest first.
    rows: Vec<Vec<Row>>,
}

impl Subquery {
    /// The inner answer as measurements, one per name it answers, in
    /// name order. A column's type is that of its first value; a column
    /// of nulls only is no field.
    pub(super) fn of_answer(answer: Vec<SeriesOut>) -> Vec<Subquery> {
        let mut by_name: BTreeMap<String, Subquery> = BTreeMap::new();
        for out in answer {
            let sub = by_name.entry(out.name.clone()).or_insert_with(|| Subquery {
                name: out.name.clone(),
                fields: BTreeMap::new(),
                series: Vec::new(),
                rows: Vec::new(),
            });
            let index = u32::try_from(sub.series.len()).unwrap_or(u32::MAX);
            sub.series.push(NamedSeries {
                key: index.to_be_bytes().to_vec(),
                metric: out.name.clone(),
                tags: out.tags.unwrap_or_default(),
            });
            let columns = &out.columns;
            let mut rows = Vec::with_capacity(out.values.len());
            for row in out.values {
                let mut cells = row.into_iter();
                let Some(Cell::Time(time)) = cells.next() else {
                    continue;
                };
                let values: Vec<(String, Value)> = cells
                    .zip(columns.iter().skip(1))
                    .filter_map(|(cell, name)| match cell {
                        Cell::Value(v) => Some((name.clone(), v)),
                        Cell::Time(t) => Some((name.clone(), Value::Int(t))),
                        Cell::Null => None,
                    })
                    .collect();
                for (name, v) in &values {
                    sub.fields.entry(name.clone()).or_insert(match v {
                        Value::Float(_) => FieldType::Float,
                        Value::Int(_) => FieldType::Integer,
                        Value::Uint(_) => FieldType::Unsigned,
                        Value::Bool(_) => FieldType::Boolean,
                        Value::Str(_) => FieldType::String,
                    });
                }
                rows.push((time, values));
            }
            // An answer under ORDER BY time DESC comes newest first.
            rows.sort_by_key(|(time, _)| *time);
            sub.rows.push(rows);
        }
        by_name.into_values().collect()
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// The measurement the outer statement reads: these series and fields.
    pub(super) fn measurement(&self) -> Measurement {
        Measurement::in_memory(&self.name, self.fields.clone(), self.series.clone())
    }

    /// The rows of the series whose key is `key`, oldest first.
    pub(super) fn rows_of(&self, key: &[u8]) -> &[Row] {
        <[u8; 4]>::try_from(key)
            .ok()
            .and_then(|index| self.rows.get(u32::from_be_bytes(index) as usize))
            .map_or(&[], Vec::as_slice)
    }
}

/// Whether a select-list expression holds a call (an aggregate or a
/// transformation, which merge the series they read).
fn calls_anything(e: &FieldExpr) -> bool {
    match e {
        FieldExpr::Call { .. } => true,
        FieldExpr::Binary { lhs, rhs, .. } => calls_anything(lhs) || calls_anything(rhs),
        _ => false,
    }
}

/// The inner statement with the outer one's time range (`lower` and
/// `upper`, inclusive) ANDed into its condition, as InfluxDB bounds a
/// subquery by the statement around it: an inner `GROUP BY time` then
/// starts where the outer range does.
///
/// A raw inner statement answers each series apart (`GROUP BY *`), so
/// that its points keep their tags for the outer statement to group by,
/// as InfluxDB's do; not where it limits its answer (`LIMIT` counts the
/// points of all its series together there).
pub(super) fn bounded_by(inner: &Select, lower: Option<i64>, upper: Option<i64>) -> Select {
    let raw = !inner.fields.iter().any(|f| match &f.expr {
        SelectExpr::Expr(e) => calls_anything(e),
        e => e.is_call(),
    }) && inner.limit.is_none_or(|n| n == 0)
        && inner.offset == 0
        && inner.group_tags == GroupTags::None;
    let inner = &Select {
        group_tags: if raw {
            GroupTags::All
        } else {
            inner.group_tags.clone()
        },
        ..inner.clone()
    };
    let time = |op, t| Expr::Compare {
        lhs: "time".into(),
        op,
        rhs: Operand::Time(t),
    };
    let mut terms: Vec<Expr> = lower
        .map(|l| time(CompareOp::GtEq, l))
        .into_iter()
        .chain(upper.map(|u| time(CompareOp::LtEq, u)))
        .collect();
    if terms.is_empty() {
        return inner.clone();
    }
    terms.extend(inner.condition.clone());
    Select {
        condition: Some(if terms.len() == 1 {
            terms.remove(0)
        } else {
            Expr::And(terms)
        }),
        ..inner.clone()
    }
}
