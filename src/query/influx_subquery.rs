//! InfluxQL subqueries (`SELECT sum(rate) FROM (SELECT
//! non_negative_derivative(mean(bytes), 1s) AS rate … GROUP BY time(1m),
//! host) GROUP BY time(1m)`): the inner statement's answer held as a
//! measurement of its own, whose series are the inner answer's (their
//! `GROUP BY` tags), whose fields are its columns and whose points are its
//! rows, which the outer statement reads as it reads one from the store.

use std::collections::BTreeMap;

use super::influx_reduce::{Cell, SeriesOut};
use super::influxql::{CompareOp, Expr, FieldExpr, Fill, GroupTags, Operand, Select, SelectExpr};
use super::measurements::Measurement;
use crate::series::{FieldType, NamedSeries};
use crate::value::Value;

/// A row of a subquery's answer: its time and values (null cells left
/// out), each by its column's index into [`Subquery::columns`].
type Row = (i64, Vec<(u16, Value)>);

/// One measurement of a subquery's answer.
pub(super) struct Subquery {
    name: String,
    /// Its columns but the time, as the inner statement names them.
    columns: Vec<String>,
    fields: BTreeMap<String, FieldType>,
    series: Vec<NamedSeries>,
    /// Each series' rows, oldest first.
    rows: Vec<Vec<Row>>,
    /// Whether the series' tags are columns of the outer `*`: those the
    /// inner statement grouped by as written, not those kept for a raw
    /// inner statement's points.
    tags_are_columns: bool,
}

impl Subquery {
    /// The inner answer as measurements, one per name it answers, in
    /// name order. A column's type is that of its values (integers and
    /// floats together: float); a column of nulls only is no field. Rows
    /// of one series at one time (a raw inner statement's series merged,
    /// `top`'s points) go to series of their own with the same tags, so
    /// that a time and a series name one row.
    pub(super) fn of_answer(answer: Vec<SeriesOut>, tags_are_columns: bool) -> Vec<Subquery> {
        let mut by_name: BTreeMap<String, Subquery> = BTreeMap::new();
        for out in answer {
            let sub = by_name.entry(out.name.clone()).or_insert_with(|| Subquery {
                name: out.name.clone(),
                columns: Vec::new(),
                fields: BTreeMap::new(),
                series: Vec::new(),
                rows: Vec::new(),
                tags_are_columns,
            });
            let at: Vec<u16> = out
                .columns
                .iter()
                .skip(1)
                .map(|c| match sub.columns.iter().position(|k| k == c) {
                    Some(i) => i as u16,
                    None => {
                        sub.columns.push(c.clone());
                        (sub.columns.len() - 1) as u16
                    }
                })
                .collect();
            let tags = out.tags.unwrap_or_default();
            // The series this answer's rows go to: the k-th row at a time
            // to the k-th.
            let first = sub.series.len();
            let mut repeats: BTreeMap<i64, usize> = BTreeMap::new();
            for row in out.values {
                let mut cells = row.into_iter();
                let Some(Cell::Time(time)) = cells.next() else {
                    continue;
                };
                let values: Vec<(u16, Value)> = cells
                    .zip(&at)
                    .filter_map(|(cell, &column)| match cell {
                        Cell::Value(v) => Some((column, v)),
                        Cell::Time(t) => Some((column, Value::Int(t))),
                        Cell::Null => None,
                    })
                    .collect();
                for (column, v) in &values {
                    let ty = match v {
                        Value::Float(_) => FieldType::Float,
                        Value::Int(_) => FieldType::Integer,
                        Value::Uint(_) => FieldType::Unsigned,
                        Value::Bool(_) => FieldType::Boolean,
                        Value::Str(_) => FieldType::String,
                    };
                    let field = sub
                        .fields
                        .entry(sub.columns[*column as usize].clone())
                        .or_insert(ty);
                    if *field == FieldType::Integer && ty == FieldType::Float {
                        *field = FieldType::Float;
                    }
                }
                let k = repeats.entry(time).or_insert(0);
                let series = first + *k;
                *k += 1;
                while sub.series.len() <= series {
                    let index = u32::try_from(sub.series.len()).unwrap_or(u32::MAX);
                    sub.series.push(NamedSeries {
                        key: index.to_be_bytes().to_vec(),
                        metric: out.name.clone(),
                        tags: tags.clone(),
                    });
                    sub.rows.push(Vec::new());
                }
                sub.rows[series].push((time, values));
            }
            // An answer under ORDER BY time DESC comes newest first.
            for rows in &mut sub.rows[first..] {
                rows.sort_by_key(|(time, _)| *time);
            }
        }
        by_name.into_values().collect()
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn tags_are_columns(&self) -> bool {
        self.tags_are_columns
    }

    /// The index of column `name`, if the answer has it.
    pub(super) fn column(&self, name: &str) -> Option<u16> {
        self.columns
            .iter()
            .position(|c| c == name)
            .map(|i| i as u16)
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

/// The inner statement as the outer one runs it, as InfluxDB 1.6 builds
/// a subquery's iterators (`query/iterator.go`): bounded by the outer
/// time range (`lower`, `upper`: reached back as far as the outer
/// statement's transformations reach), in the outer's direction. An
/// inner statement of calls groups by the outer's `GROUP BY` tags too,
/// takes the outer's `GROUP BY time` where it has none, and leaves out
/// empty buckets (`fill(null)` is `fill(none)` there). A raw inner
/// statement answers each series apart (`GROUP BY *`), so that its points
/// keep their tags for the outer statement to group by; not where it
/// limits its answer or lists its own columns by pattern.
///
/// Also whether the inner answer's tags are columns of the outer `*`
/// (they are the inner's `GROUP BY` tags as written).
pub(super) fn inner_as_run(
    inner: &Select,
    outer: &Select,
    lower: Option<i64>,
    upper: Option<i64>,
) -> (Select, bool) {
    let calls = inner.fields.iter().any(|f| match &f.expr {
        SelectExpr::Expr(e) => calls_anything(e),
        e => e.is_call(),
    });
    let patterns = inner
        .fields
        .iter()
        .any(|f| matches!(f.expr, SelectExpr::Wildcard | SelectExpr::Matching(_)));
    let limited = inner.limit.is_some_and(|n| n > 0)
        || inner.offset > 0
        || inner.slimit.is_some_and(|n| n > 0)
        || inner.soffset > 0;
    let mut run = inner.clone();
    run.descending = outer.descending;
    let tags_are_columns = inner.group_tags != GroupTags::None;
    if calls {
        run.group_tags = match (&inner.group_tags, &outer.group_tags) {
            (GroupTags::All, _) | (_, GroupTags::All) => GroupTags::All,
            (GroupTags::None, GroupTags::None) => GroupTags::None,
            (GroupTags::List(a), GroupTags::None) | (GroupTags::None, GroupTags::List(a)) => {
                GroupTags::List(a.clone())
            }
            (GroupTags::List(a), GroupTags::List(b)) => {
                let mut all = a.clone();
                all.extend(b.iter().filter(|t| !a.contains(t)).cloned());
                GroupTags::List(all)
            }
        };
        if run.group_time.is_none() {
            run.group_time = outer.group_time;
        }
        if run.group_time.is_some() && run.fill == Fill::Null {
            run.fill = Fill::None;
        }
    } else if !patterns && !limited && inner.group_tags == GroupTags::None {
        run.group_tags = GroupTags::All;
    }
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
    if !terms.is_empty() {
        terms.extend(inner.condition.clone());
        run.condition = Some(if terms.len() == 1 {
            terms.remove(0)
        } else {
            Expr::And(terms)
        });
    }
    (run, tags_are_columns)
}
