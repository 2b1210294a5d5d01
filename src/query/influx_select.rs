//! InfluxQL `SELECT` over a measurement ([`super::measurements`]: a table
//! of open tag sets, or declared-key tables read as series): the series
//! chosen by their tags, each series' points read by key range (one
//! bucket, its times only), grouped and aggregated as InfluxDB 1.x does
//! (docs/compatibility.md lists what is answered).

use std::collections::{BTreeMap, BTreeSet};

use super::influx_expr::{Plan, Span};
use super::influx_reduce::{AnswerType, Func, Reducer, as_f64, integrals};
use super::influx_rows::{Chosen, Entry, RowsFunc, Shape};
use super::influx_subquery::Subquery;
use super::influxql::{CompareOp, Expr, Fill, GroupTags, Operand, Select, SelectExpr};
use super::measurements::SeriesTable;
use crate::catalog::PolicyTables;
use crate::error::Error;
use crate::key::KeySchema;
use crate::region::read::columns::{ColumnRead, ColumnSink};
use crate::region::sst::columns::{ColumnRuns, RunValueSlice};
use crate::series::Dictionary;
use crate::store::Store;
use crate::value::Value;

pub use super::influx_reduce::{Cell, SeriesOut};

/// A point of a series: its time and fields.
#[derive(Clone, Default)]
struct Point<'n> {
    time: i64,
    fields: PointFields<'n>,
}

impl<'n> Point<'n> {
    /// Becomes the row at `time` with `cells`, a cell's column its index
    /// into `names`.
    fn set(&mut self, time: i64, cells: &[(u32, Value)], names: &[&'n str]) {
        self.time = time;
        self.fields.0.clear();
        self.fields.0.extend(
            cells
                .iter()
                .map(|(column, value)| (names[*column as usize], value.clone())),
        );
    }
}

/// A point's fields, few: (name, value), the names borrowed from the
/// statement's list of the measurement's fields rather than allocated or
/// counted per point (a shared reference count, touched twice a cell by
/// both query threads, kept their cores fighting over one cache line).
#[derive(Clone, Default)]
struct PointFields<'n>(Vec<(&'n str, Value)>);

impl PointFields<'_> {
    fn get(&self, name: &str) -> Option<&Value> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
}

/// A raw select's points of one series, oldest first.
struct SeriesData<'n> {
    /// The series' tags, borrowed from the statement's series list.
    tags: &'n BTreeMap<String, String>,
    group: usize,
    points: Vec<Point<'n>>,
}

/// What a group gathered before its answer is made.
enum Gathered<'d> {
    /// A raw select's series with points, in group order.
    Raw(Vec<&'d SeriesData<'d>>),
    /// An aggregate select's reducers by time bucket.
    Aggregate(BTreeMap<i64, Vec<Reducer>>),
}

/// A series a statement reads, and the index of its `GROUP BY` group.
struct Member<'a> {
    series: &'a crate::series::NamedSeries,
    table: &'a SeriesTable,
    group: usize,
    /// Its place among the statement's members: a selector's state says
    /// by it whose point it chose.
    origin: u32,
}

/// The tags `GROUP BY` names (`*`: every one of `tag_keys`), in name
/// order whatever order the statement lists them in: InfluxDB orders
/// series (and so what SLIMIT keeps) by their tag set, whose keys are
/// sorted.
fn grouped_tags(group_tags: &GroupTags, tag_keys: &BTreeSet<String>) -> Vec<String> {
    match group_tags {
        GroupTags::None => Vec::new(),
        GroupTags::All => tag_keys.iter().cloned().collect(),
        GroupTags::List(l) => {
            let mut l = l.clone();
            l.sort();
            l.dedup();
            l
        }
    }
}

/// The values of the `GROUP BY` tags of a series (a missing tag is "").
fn group_key(group_by: &[String], tags: &BTreeMap<String, String>) -> Vec<String> {
    group_by
        .iter()
        .map(|k| tags.get(k).cloned().unwrap_or_default())
        .collect()
}

fn invalid(e: Error) -> String {
    e.to_string()
}

/// Where a statement's points come from.
#[derive(Clone, Copy)]
enum Source<'a> {
    Store(&'a Store),
    /// The answer of the subquery the statement reads.
    Rows(&'a Subquery),
}

impl<'a> Source<'a> {
    fn store(self) -> Option<&'a Store> {
        match self {
            Source::Store(store) => Some(store),
            Source::Rows(_) => None,
        }
    }
}

/// The tables of retention policy `rp` of `db` (its default when `None`),
/// or InfluxDB's error.
pub fn policy_of(store: &Store, db: &str, rp: Option<&str>) -> Result<PolicyTables, String> {
    let policies = store.catalog().retention_policies(db);
    let policy = policies
        .resolve(rp)
        .map_err(|name| format!("retention policy not found: {name}"))?;
    Ok(PolicyTables::new(db, &policy.name))
}

/// Runs `select` on database `db`; an error is the statement's error text.
/// `dictionary`: the database's, where it has one.
pub fn select(
    store: &Store,
    dictionary: Option<&Dictionary>,
    db: &str,
    s: &Select,
    now_ns: i64,
) -> Result<Vec<SeriesOut>, String> {
    select_from(Source::Store(store), dictionary, db, s, now_ns, false)
}

/// [`select`] of the points of `source`; `inner` for a subquery's
/// statement, whose raw answer is held whole and so bounded.
fn select_from(
    source: Source<'_>,
    dictionary: Option<&Dictionary>,
    db: &str,
    s: &Select,
    now_ns: i64,
    inner: bool,
) -> Result<Vec<SeriesOut>, String> {
    if let Some(sub) = &s.subquery {
        return select_subquery(source, dictionary, db, s, sub, now_ns);
    }
    if !s.sources.is_empty() {
        let Some(store) = source.store() else {
            return Err("a subquery's answer is one measurement".into());
        };
        return select_sources(store, dictionary, db, s, now_ns);
    }
    if !super::influx_expr::needs_plan(s) {
        return select_fields(
            source,
            dictionary,
            db,
            s,
            now_ns,
            None,
            (0, 0),
            MAX_ANSWER_CELLS,
            inner,
        );
    }
    let plan = Plan::new(s)?;
    let mut queries = plan.queries();
    if inner {
        // A subquery's transformations read nothing before its range (the
        // outer statement's, which bounds it): its first bucket is the
        // range's part of it, as InfluxDB's subquery iterators read it.
        for query in &mut queries {
            query.reach = (0, 0);
        }
    }
    // Where the leaves reached beyond the range, the answer is cut to the
    // range's buckets.
    let span = match s.group_time {
        Some((every, offset)) if queries.iter().any(|q| q.reach != (0, 0)) => {
            let (lower, upper, _) = split_time(s.condition.as_ref())?;
            Span {
                first: lower.and_then(|l| checked_bucket_of(l, every, offset)),
                last: checked_bucket_of(upper.unwrap_or(now_ns), every, offset),
            }
        }
        _ => Span::default(),
    };
    // The statement's leaves share one budget, whatever queries hold them.
    let max_cells = MAX_PLAN_CELLS / queries.len().max(1);
    let mut answers = Vec::new();
    for query in queries {
        let answer = select_fields(
            source,
            dictionary,
            db,
            &query.select,
            now_ns,
            Some(&plan),
            query.reach,
            max_cells,
            inner,
        )?;
        answers.push((query, answer));
    }
    Ok(plan.answer(answers, span))
}

/// [`select`] of a statement that reads a subquery: the inner statement
/// (bounded by this one's time range) answered first, and each
/// measurement of its answer read as this statement's measurement.
fn select_subquery(
    source: Source<'_>,
    dictionary: Option<&Dictionary>,
    db: &str,
    s: &Select,
    inner: &Select,
    now_ns: i64,
) -> Result<Vec<SeriesOut>, String> {
    // An inner statement without `ORDER BY` takes the outer's direction.
    if inner.descending && !s.descending {
        return Err("subqueries must be ordered in the same direction as the query itself".into());
    }
    if inner.database.as_deref().is_some_and(|named| named != db) {
        return Err("a subquery of another database is not answered by halite yet".into());
    }
    let (mut lower, mut upper, _) = split_time(s.condition.as_ref())?;
    // The outer statement's transformations reach beyond its range: so
    // does the inner's.
    if super::influx_expr::needs_plan(s) {
        let (before, after) = Plan::new(s)?
            .queries()
            .iter()
            .fold((0, 0), |(b, a), q| (q.reach.0.max(b), q.reach.1.max(a)));
        lower = lower.map(|l| l.saturating_sub(before));
        upper = upper.map(|u| u.saturating_add(after));
    }
    let (inner, tags_are_columns) = super::influx_subquery::inner_as_run(inner, s, lower, upper);
    let answer = select_from(source, dictionary, db, &inner, now_ns, true)?;
    let mut out = Vec::new();
    for sub in Subquery::of_answer(answer, tags_are_columns) {
        let outer = Select {
            from: sub.name().to_string(),
            subquery: None,
            database: None,
            retention_policy: None,
            ..s.clone()
        };
        out.extend(select_from(
            Source::Rows(&sub),
            dictionary,
            db,
            &outer,
            now_ns,
            false,
        )?);
    }
    if s.descending {
        out.reverse();
    }
    Ok(out)
}

/// [`select`] of a statement whose `FROM` names several measurements or a
/// pattern: each measurement (in name order) answered as if named alone,
/// with the columns the measurements have together (`*`, `/re/` and
/// `f(*)` over every field and tag of any of them); `SLIMIT` and
/// `SOFFSET` choose among each measurement's series, as InfluxDB's.
fn select_sources(
    store: &Store,
    dictionary: Option<&Dictionary>,
    db: &str,
    s: &Select,
    now_ns: i64,
) -> Result<Vec<SeriesOut>, String> {
    use super::influxql::FromName;
    // By retention policy: the names and patterns of each.
    let mut wanted: BTreeMap<String, (BTreeSet<String>, Vec<regex_lite::Regex>)> = BTreeMap::new();
    for source in &s.sources {
        if source.database.as_deref().is_some_and(|named| named != db) {
            return Err(
                "measurements of another database than the statement's in one FROM are not \
                 answered by halite yet"
                    .into(),
            );
        }
        let policy = policy_of(store, db, source.retention_policy.as_deref())?.policy;
        let (named, patterns) = wanted.entry(policy).or_default();
        match &source.measurement {
            FromName::Name(name) => {
                named.insert(name.clone());
            }
            FromName::Regex(re) => patterns.push(
                regex_lite::Regex::new(re)
                    .map_err(|e| format!("invalid regular expression /{re}/: {e}"))?,
            ),
        }
    }
    // Named measurements are looked up; only a pattern lists them all.
    let mut all: Vec<(String, super::measurements::Measurement)> = Vec::new();
    for (policy_name, (named, patterns)) in &wanted {
        let policy = PolicyTables::new(db, policy_name);
        let found = if patterns.is_empty() {
            let mut found = Vec::new();
            for name in named {
                found.extend(super::measurements::measurement(
                    store, dictionary, &policy, name,
                )?);
            }
            found
        } else {
            super::measurements::measurements(store, dictionary, &policy)?
        };
        all.extend(
            found
                .into_iter()
                .filter(|m| {
                    named.contains(&m.name) || patterns.iter().any(|re| re.is_match(&m.name))
                })
                .map(|m| (policy_name.clone(), m)),
        );
    }
    all.sort_by(|a, b| (&a.1.name, &a.0).cmp(&(&b.1.name, &b.0)));
    let chosen: Vec<&(String, super::measurements::Measurement)> = all.iter().collect();
    let mut fields: BTreeMap<String, crate::series::FieldType> = BTreeMap::new();
    let mut tag_keys: BTreeSet<String> = BTreeSet::new();
    // A field of several types across the measurements takes InfluxDB's
    // first of float, integer, unsigned, string, boolean.
    let rank = |ty: &crate::series::FieldType| {
        use crate::series::FieldType::*;
        match ty {
            Float => 0,
            Integer => 1,
            Unsigned => 2,
            String => 3,
            Boolean => 4,
        }
    };
    for (_, m) in &chosen {
        for (name, ty) in &m.fields {
            let entry = fields.entry(name.clone()).or_insert(*ty);
            if rank(ty) < rank(entry) {
                *entry = *ty;
            }
        }
        tag_keys.extend(m.series.tag_keys().iter().cloned());
    }
    let group_by = grouped_tags(&s.group_tags, &tag_keys);
    // `*` names the columns of every measurement, the same for each.
    let mut one = Select {
        fields: s
            .fields
            .iter()
            .map(|f| match f.expr {
                SelectExpr::Wildcard => super::influxql::SelectField {
                    expr: SelectExpr::Matching(String::new()),
                    alias: None,
                },
                _ => f.clone(),
            })
            .collect(),
        sources: Vec::new(),
        ..s.clone()
    };
    if super::influx_rows::names_by_pattern(&one) {
        match super::influx_rows::expand_patterns(&one, &fields, &tag_keys, &group_by)? {
            Some(expanded) => one = expanded,
            None => return Ok(Vec::new()),
        }
    }
    let mut series = Vec::new();
    for (policy, m) in chosen {
        let mut answer = select(
            store,
            dictionary,
            db,
            &Select {
                from: m.name.clone(),
                retention_policy: Some(policy.clone()),
                ..one.clone()
            },
            now_ns,
        )?;
        if s.descending {
            answer.reverse();
        }
        series.extend(answer);
    }
    if s.descending {
        series.reverse();
    }
    Ok(series)
}

/// [`select`] of a statement of fields and calls of fields only; `plan`
/// is the statement of expressions whose types to check, if any,
/// `reach` how far (ns) the range reaches before its lower bound and after
/// its upper (a transformation's leaves: [`Plan::queries`]), and
/// `max_cells` the most values its aggregates answer.
#[allow(clippy::too_many_arguments)]
fn select_fields(
    source: Source<'_>,
    dictionary: Option<&Dictionary>,
    db: &str,
    s: &Select,
    now_ns: i64,
    plan: Option<&Plan>,
    reach: (i64, i64),
    max_cells: usize,
    inner: bool,
) -> Result<Vec<SeriesOut>, String> {
    let shape = super::influx_rows::shape(s)?;
    if s.fields.is_empty() {
        return Err("at least 1 non-time field must be queried".into());
    }
    if shape == Shape::Raw && s.group_time.is_some() {
        return Err("GROUP BY requires at least one aggregate function".into());
    }
    if s.descending && calls_integral(s) {
        // InfluxDB 1.6 sums a descending integral's areas backwards: every
        // answer negated, at shifted times.
        return Err(
            "integral() under ORDER BY time DESC is not answered by halite: ask for it in ascending order"
                .into(),
        );
    }
    // After the statement's own checks, as InfluxDB finds the retention
    // policy only when it looks for the statement's shards.
    let found = match source {
        Source::Store(store) => {
            let policy = policy_of(store, db, s.retention_policy.as_deref())?;
            super::measurements::measurement(store, dictionary, &policy, &s.from)?
        }
        Source::Rows(sub) => Some(sub.measurement()),
    };
    let Some(mut measurement) = found else {
        return Ok(Vec::new());
    };
    let (lower, hi, rest) = split_time(s.condition.as_ref())?;
    // A transformation's leaves reach beyond the range's first bucket (its
    // last, descending), so that one has a value beside it to work from.
    let lower = lower.map(|l| l.saturating_sub(reach.0));
    let lo = lower.unwrap_or(0).max(0);
    let hi = hi
        .unwrap_or(if s.group_time.is_some() {
            now_ns
        } else {
            i64::MAX
        })
        .saturating_add(reach.1);
    if lo > hi {
        return Ok(Vec::new());
    }
    let fields = std::mem::take(&mut measurement.fields);
    let series = measurement.series.clone();
    if let Some(plan) = plan {
        plan.check_types(&fields, &|name| series.tag_keys().contains(name))?;
    }
    let expanded;
    let s = if super::influx_rows::names_by_pattern(s) {
        let grouped = grouped_tags(&s.group_tags, series.tag_keys());
        match super::influx_rows::expand_patterns(s, &fields, series.tag_keys(), &grouped)? {
            Some(e) => expanded = e,
            None => return Ok(Vec::new()),
        }
        if shape == Shape::Rows && expanded.fields.iter().filter(|f| f.expr.is_call()).count() > 1 {
            return Err(
                "sample() of several fields is not answered by halite yet: name a field".into(),
            );
        }
        &expanded
    } else {
        s
    };
    let rows_call = rows_call(s)?;
    // Only a wildcard and `GROUP BY *` name every tag key of the
    // measurement: the list gathers them once, but a list is made anew
    // after each series added, and gathering them from thousands of
    // series costs more than a one-host statement's read.
    let names_tag_keys = matches!(s.group_tags, GroupTags::All)
        || s.fields
            .iter()
            .any(|f| matches!(f.expr, SelectExpr::Wildcard));
    let no_tag_keys = BTreeSet::new();
    let tag_keys = if names_tag_keys {
        series.tag_keys()
    } else {
        &no_tag_keys
    };
    let on_fields = rest.as_ref().is_some_and(|e| mentions_field(e, &fields));
    let mut regexes = Regexes::new();
    if let Some(e) = &rest {
        compile_regexes(e, &mut regexes)?;
    }
    // Only the fields the statement names are read (all for `*`).
    let selected = selected_fields(s, &fields);
    let mut needed = selected.clone();
    if let (Some(n), Some(e)) = (needed.as_mut(), &rest) {
        field_refs(e, &fields, n);
    }
    // A raw `ORDER BY time DESC LIMIT n` needs at most OFFSET + n points
    // of each series: its keys run newest first, so reading stops there.
    let per_series = (shape == Shape::Raw && s.descending)
        .then_some(s.limit.filter(|n| *n > 0))
        .flatten()
        .map(|n| n.saturating_add(s.offset));
    let names: Vec<&str> = fields.keys().map(String::as_str).collect();
    // A condition that names tag values (`hostname = 'a' OR hostname =
    // 'b'`) looks its series up; any other reads the list.
    let confined: Option<Vec<usize>> = rest
        .as_ref()
        .and_then(|e| required_tag_values(e, &fields))
        .map(|(key, values)| {
            let mut at: Vec<usize> = values
                .into_iter()
                .flat_map(|v| series.with_tag(key, v))
                .map(|&i| i as usize)
                .collect();
            at.sort_unstable();
            at.dedup();
            at
        });
    let candidates: Vec<usize> = match confined {
        Some(at) => at,
        None => (0..series.len()).collect(),
    }
    .into_iter()
    .filter(|&i| {
        rest.as_ref()
            .is_none_or(|e| may_hold(e, &series[i].tags, &fields, &regexes))
    })
    .collect();
    // Groups by the GROUP BY tags' values (a missing tag is "").
    let group_by = grouped_tags(&s.group_tags, tag_keys);
    let group_keys: BTreeSet<Vec<String>> = candidates
        .iter()
        .map(|&i| group_key(&group_by, &series[i].tags))
        .collect();
    let group_keys: Vec<Vec<String>> = group_keys.into_iter().collect();
    let members: Vec<Member> = candidates
        .iter()
        .map(|&i| Member {
            series: &series[i],
            table: measurement.table_of(i),
            group: group_keys
                .binary_search(&group_key(&group_by, &series[i].tags))
                .unwrap_or_default(),
            origin: 0,
        })
        .collect();
    // SLIMIT and SOFFSET choose among the groups of every series the tag
    // condition lets through, before a point is read, as InfluxDB limits
    // its index's tag sets: a group chosen whose points all miss the time
    // range or a field condition answers nothing.
    let mut members: Vec<Member> = match chosen_groups(&group_by, &group_keys, s.slimit, s.soffset)
    {
        Some(chosen) => members.into_iter().filter(|m| chosen[m.group]).collect(),
        None => members,
    };
    for (i, m) in members.iter_mut().enumerate() {
        m.origin = u32::try_from(i).unwrap_or(u32::MAX);
    }
    let keep = |tags: &BTreeMap<String, String>, p: &Point<'_>| {
        let meets = match &rest {
            Some(e) if on_fields => eval(e, tags, Some(&p.fields), &fields, &regexes),
            _ => true,
        };
        // A raw row with none of its selected fields is left out.
        meets
            && (shape != Shape::Raw
                || selected
                    .as_ref()
                    .is_none_or(|f| f.iter().any(|f| p.fields.contains_key(f))))
    };
    let range = SeriesRange {
        lo,
        hi,
        fields: needed.as_ref(),
        names: &names,
        points: per_series,
    };
    let agg_calls = if matches!(shape, Shape::Aggregate | Shape::SelectorWithColumns) {
        aggregate_calls(s, &fields)?
    } else {
        Vec::new()
    };
    if let Some(refusal) = rows_call.as_ref().and_then(|c| rows_refusal(c, &fields)) {
        return Err(refusal);
    }
    let mut data = Vec::new();
    // Each group with a point that met the condition, in group order; its
    // answer is made only if SOFFSET and SLIMIT keep it.
    let gathered: Vec<(usize, Gathered)> = if matches!(shape, Shape::Raw | Shape::Rows) {
        // Each series' newest points (lastpoint) lie in the last hour for
        // most series, which the newest files hold: the last hour is read
        // first, and the time before only for a series with too few in
        // it (where the older files are read).
        let recent_from = per_series
            .and_then(|_| {
                source
                    .store()
                    .and_then(|store| measurement.cell_time_range(store))
            })
            .map(|(_, newest)| ns_of_ms(newest.saturating_sub(RECENT_MS)))
            .filter(|&from| from > lo && from <= hi);
        let parts = match recent_from {
            Some(from) => vec![(from, hi), (lo, from - 1)],
            None => vec![(lo, hi)],
        };
        // A raw answer holds what was stored; the points top, distinct
        // and sample choose among are held to answer a few rows, and are
        // bounded.
        let chosen_from = std::sync::atomic::AtomicUsize::new(0);
        let bounded = shape == Shape::Rows || inner;
        for d in in_parallel(&members, |m| {
            let mut points = Vec::new();
            for &(lo, hi) in &parts {
                if per_series.is_some_and(|n| points.len() >= n) {
                    break;
                }
                let part = SeriesRange { lo, hi, ..range };
                let mut over = false;
                scan_series(source, m.table, &m.series.key, &part, &mut |p| {
                    if keep(&m.series.tags, p) {
                        points.push(p.clone());
                        if bounded {
                            let held =
                                chosen_from.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            over = held >= MAX_CHOSEN_FROM;
                        }
                    }
                    !over && per_series.is_none_or(|n| points.len() < n)
                })?;
                if over {
                    return Err(match &rows_call {
                        Some(call) => format!(
                            "{}() would choose among more than {MAX_CHOSEN_FROM} points: narrow \
                             the time range, or group by a shorter time",
                            call.func.name()
                        ),
                        None => format!(
                            "the subquery's raw answer would hold more than {MAX_CHOSEN_FROM} \
                             points: narrow its time range, or aggregate it"
                        ),
                    });
                }
            }
            points.reverse();
            Ok::<_, String>((!points.is_empty()).then_some(SeriesData {
                tags: &m.series.tags,
                group: m.group,
                points,
            }))
        }) {
            data.extend(d?);
        }
        let mut groups: BTreeMap<usize, Vec<&SeriesData<'_>>> = BTreeMap::new();
        for d in &data {
            groups.entry(d.group).or_default().push(d);
        }
        groups
            .into_iter()
            .map(|(g, members)| (g, Gathered::Raw(members)))
            .collect()
    } else {
        let calls = &agg_calls;
        let columns = range.columns();
        // Each call's column of the read: a fold finds a call's value in
        // a row's cells by it, with no point made (unless the condition
        // names fields).
        let call_columns: Vec<Option<u32>> = calls
            .iter()
            .map(|(call, _)| {
                columns
                    .iter()
                    .position(|n| *n == call.field)
                    .map(|i| i as u32)
            })
            .collect();
        let mut groups: Vec<GroupState> = (0..group_keys.len())
            .map(|_| GroupState::default())
            .collect();
        // An integral reaches from a bucket to the next one's first point:
        // it reads the whole range.
        let windowed = !agg_calls
            .iter()
            .any(|(call, _)| matches!(call.func, Func::Integral(_)));
        let newest_from = newest_buckets_from(s, lo, hi).filter(|_| windowed);
        let oldest_to = match newest_from {
            Some(_) => None,
            None => {
                let oldest = source
                    .store()
                    .and_then(|store| measurement.cell_time_range(store))
                    .map(|(oldest, _)| ns_of_ms(oldest));
                oldest_buckets_to(s, lower.is_some(), lo, hi, oldest).filter(|_| windowed)
            }
        };
        let window = SeriesRange {
            lo: newest_from.unwrap_or(lo),
            hi: oldest_to.unwrap_or(hi),
            ..range
        };
        // Reducers the folds of every thread hold (a call's state in a
        // bucket a group has a value in, until the answer is made).
        let held = std::sync::atomic::AtomicUsize::new(0);
        let kept = std::sync::atomic::AtomicUsize::new(0);
        let keeps = calls.iter().any(|(call, _)| call.func.keeps_values());
        // One series' rows in `range` folded into its group's state.
        let fold_series = |states: &mut Vec<GroupState>, m: &Member, range: &SeriesRange| {
            let mut fold = SeriesFold {
                calls,
                origin: m.origin,
                call_columns: &call_columns,
                group_time: s.group_time,
                lo,
                group: &mut states[m.group],
                open: None,
                held: &held,
                over: false,
                kept: &kept,
                keeps,
                kept_over: false,
            };
            if on_fields {
                let mut point = Point::default();
                scan_series_cells(
                    source,
                    m.table,
                    &m.series.key,
                    range,
                    &columns,
                    &mut |time: i64, cells: &[(u32, Value)]| {
                        point.set(time, cells, &columns);
                        !keep(&m.series.tags, &point) || fold.row(time, cells)
                    },
                )?;
            } else {
                scan_series_cells(source, m.table, &m.series.key, range, &columns, &mut fold)?;
            }
            match fold.finish() {
                Some(error) => Err(error),
                None => Ok(()),
            }
        };
        let merge = |groups: &mut Vec<GroupState>, parts: Vec<Vec<GroupState>>| {
            for part in parts {
                for (whole, part) in groups.iter_mut().zip(part) {
                    whole.any_point |= part.any_point;
                    for (b, reducers) in part.buckets {
                        if !whole.fold(calls, b, reducers) {
                            held.fetch_sub(calls.len(), std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                }
            }
        };
        let new_states = || vec![GroupState::default(); group_keys.len()];
        merge(
            &mut groups,
            fold_in_parallel(&members, new_states, |states, m| {
                fold_series(states, m, &window)
            })?,
        );
        // For each member of a group `lacking`, whether a row in `range`
        // met the condition and whether one held a value: a read that
        // stops at the first value.
        let look_for_values = |lacking: &[bool], range: &SeriesRange| {
            let looked: Vec<&Member> = members.iter().filter(|m| lacking[m.group]).collect();
            let found = in_parallel(&looked, |m| {
                let mut reducers = vec![Reducer::default(); calls.len()];
                let mut point = Point::default();
                let mut met = false;
                scan_series_cells(
                    source,
                    m.table,
                    &m.series.key,
                    &SeriesRange {
                        points: Some(1),
                        ..*range
                    },
                    &columns,
                    &mut |time: i64, cells: &[(u32, Value)]| {
                        if on_fields {
                            point.set(time, cells, &columns);
                            if !keep(&m.series.tags, &point) {
                                return true;
                            }
                        }
                        met = true;
                        add_cells(&mut reducers, calls, &call_columns, time, cells);
                        reducers.iter().all(Reducer::is_empty)
                    },
                )?;
                Ok::<_, String>((met, !reducers.iter().all(Reducer::is_empty)))
            });
            looked
                .into_iter()
                .zip(found)
                .map(|(m, found)| Ok((m.group, found?)))
                .collect::<Result<Vec<_>, String>>()
        };
        // Marks what a read outside the window found: a group whose row
        // met the condition counts for SOFFSET (as read whole), and one
        // with a value answers the window's buckets, empty or not.
        let found_outside =
            |groups: &mut Vec<GroupState>, found: Vec<(usize, (bool, bool))>, bucket: i64| {
                for (g, (met, valued)) in found {
                    let group = &mut groups[g];
                    group.any_point |= met;
                    if valued {
                        group
                            .buckets
                            .entry(bucket)
                            .or_insert_with(|| vec![Reducer::default(); calls.len()]);
                    }
                }
            };
        if let Some(from) = newest_from {
            // Read whole, a group with a value below the window would
            // answer the window's every bucket, empty ones too; one whose
            // values all lie inside starts at its first. Only a group
            // without a value in the window's first bucket can tell them
            // apart, by a read below the window that stops at one value.
            let lacking: Vec<bool> = groups
                .iter()
                .map(|g| !g.buckets.contains_key(&from))
                .collect();
            let below = SeriesRange {
                lo,
                hi: from - 1,
                ..range
            };
            found_outside(&mut groups, look_for_values(&lacking, &below)?, from);
        }
        if let (Some(to), Some((every, offset))) = (oldest_to, s.group_time) {
            // The window held everything up to `to`. A group's answer
            // starts at the lower bound's bucket, or without one at its
            // first value's; its OFFSET + n buckets from there may reach
            // above the window (the window began at the table's oldest
            // time, and a group's first value may come later).
            let wanted = window_buckets(s).unwrap_or(i64::MAX);
            let above = |first: i64| {
                first
                    .checked_add(every.saturating_mul(wanted))
                    .map_or(hi, |end| (end - 1).min(hi))
            };
            if lower.is_some() {
                // The answer starts at the lower bound whatever a group
                // holds: only a group without a value in the window needs
                // to know whether it has one above.
                let lacking: Vec<bool> = groups.iter().map(|g| g.buckets.is_empty()).collect();
                let rest = SeriesRange {
                    lo: to + 1,
                    hi,
                    ..range
                };
                let found = look_for_values(&lacking, &rest)?;
                // A bound too early to bucket is refused when the answer
                // is made; the clamped one marks the group meanwhile.
                let bucket = lower
                    .and_then(|l| checked_bucket_of(l, every, offset))
                    .unwrap_or_else(|| bucket_of(lo, every, offset));
                found_outside(&mut groups, found, bucket);
            } else {
                // A group with no value in the window has its first one
                // somewhere above: it is read whole.
                let ends: Vec<i64> = groups
                    .iter()
                    .map(|g| g.buckets.keys().next().map_or(hi, |&first| above(first)))
                    .collect();
                let more: Vec<&Member> = members.iter().filter(|m| ends[m.group] > to).collect();
                merge(
                    &mut groups,
                    fold_in_parallel(&more, new_states, |states, m| {
                        fold_series(
                            states,
                            m,
                            &SeriesRange {
                                lo: to + 1,
                                hi: ends[m.group],
                                ..range
                            },
                        )
                    })?,
                );
            }
        }
        groups
            .into_iter()
            .enumerate()
            .filter(|(_, group)| group.any_point)
            .map(|(g, group)| (g, Gathered::Aggregate(group.buckets)))
            .collect()
    };
    // Worked out once, not per group: a raw statement grouped by host
    // has a group per series.
    // A subquery's `*` is its columns: the tags its rows keep are for
    // grouping and conditions, as InfluxDB's.
    let column_tags = match source {
        Source::Rows(sub) if !sub.tags_are_columns() => &no_tag_keys,
        _ => tag_keys,
    };
    let (raw_fields, raw_names) = raw_columns(s, &fields, column_tags, &group_by);
    // Where a call answers beside columns, how many of them come before it.
    let columns_before_call = s
        .fields
        .iter()
        .position(|f| f.expr.is_call())
        .filter(|_| matches!(shape, Shape::Rows | Shape::SelectorWithColumns))
        .map_or(0, |at| {
            let before = Select {
                fields: s.fields[..at].to_vec(),
                ..s.clone()
            };
            raw_columns(&before, &fields, column_tags, &group_by)
                .0
                .len()
        });
    let call_width = 1 + rows_call.as_ref().map_or(0, |c| c.tags.len());
    // A raw answer holds what was stored, but a column named twice (`*, *`)
    // or one the measurement lacks is a cell more a point: a statement
    // of thousands of them over a large measurement asks for far more
    // than is stored, and is bounded as an aggregate's answer is.
    let repeats = {
        let stored: BTreeSet<&String> = raw_fields
            .iter()
            .filter(|c| fields.contains_key(*c) || tag_keys.contains(*c))
            .collect();
        // Without a field the statement answers no row at all.
        let answers = raw_fields.iter().any(|c| fields.contains_key(c));
        answers && raw_fields.len() > stored.len()
    };
    if repeats {
        let points: usize = gathered
            .iter()
            .map(|(_, g)| match g {
                Gathered::Raw(members) => members.iter().map(|m| m.points.len()).sum(),
                Gathered::Aggregate(_) => 0,
            })
            .sum();
        let cells = points.saturating_mul(raw_fields.len() + 1);
        if cells > MAX_ANSWER_CELLS {
            return Err(format!(
                "the statement's answer would hold {cells} values, over {MAX_ANSWER_CELLS}, \
                 and it names a column twice or one the measurement lacks: name each column \
                 once, or narrow the time range"
            ));
        }
    }
    let mut out = Vec::new();
    let mut answered = 0usize;
    for (g, gathered) in gathered {
        let key = &group_keys[g];
        // A raw answer holds what was stored; an aggregate's can be far
        // more (every bucket, filled), and is what the bound is for.
        let aggregated = matches!(gathered, Gathered::Aggregate(_));
        let (columns, mut rows) = match gathered {
            Gathered::Raw(group) => match &rows_call {
                Some(call) => chosen_rows(s, call, &group, &fields, &raw_fields, &raw_names, lower),
                None => (raw_names.clone(), raw_rows(&group, &fields, &raw_fields)),
            },
            Gathered::Aggregate(buckets) => {
                let aux = AuxColumns {
                    names: &raw_names[1..],
                    read: &|points: &[(i64, u32)]| {
                        aux_cells(source, &members, points, &names, &fields, &raw_fields)
                    },
                };
                // The bound as written: before 1970 the answer starts
                // there, though nothing is stored before 1970 to read.
                aggregate_rows(
                    s,
                    &agg_calls,
                    buckets,
                    &fields,
                    lower,
                    hi,
                    max_cells,
                    (shape == Shape::SelectorWithColumns).then_some(&aux),
                )?
            }
        };
        let tags = (!matches!(s.group_tags, GroupTags::None)).then(|| {
            group_by
                .iter()
                .cloned()
                .zip(key.iter().cloned())
                .collect::<BTreeMap<_, _>>()
        });
        if rows.is_empty() {
            continue;
        }
        let columns = if matches!(shape, Shape::Rows | Shape::SelectorWithColumns) {
            place_call_columns(columns, &mut rows, call_width, columns_before_call)
        } else {
            columns
        };
        // Chosen rows come in descending buckets already, each bucket's
        // in time order, as InfluxDB answers them.
        if s.descending && shape != Shape::Rows {
            rows.reverse();
        }
        let rows: Vec<Vec<Cell>> = rows
            .into_iter()
            .skip(s.offset)
            .take(s.limit.filter(|n| *n > 0).unwrap_or(usize::MAX))
            .collect();
        if rows.is_empty() {
            continue;
        }
        if aggregated {
            answered = answered.saturating_add(rows.len().saturating_mul(columns.len()));
            if answered > max_cells {
                return Err(too_many_values(max_cells));
            }
        }
        out.push(SeriesOut {
            name: s.from.clone(),
            tags,
            columns,
            values: rows,
        });
    }
    // InfluxDB answers ORDER BY time DESC with the series in reverse order
    // too (SLIMIT and SOFFSET having counted them in ascending order).
    if s.descending {
        out.reverse();
    }
    Ok(out)
}

/// Which groups (by index into `keys`, their values of the `group_by`
/// tags, "" for a tag a series lacks) `SLIMIT` and `SOFFSET` keep, or
/// `None` when neither is given. As InfluxDB 1.6's `LimitTagSets` over its
/// tag sets sorted by `tsdb.MakeTagsKey`: the tags a group has, their keys
/// then their values, joined by `|`. That order differs from the answer's
/// (by values, tag by tag) where a value runs into the separator (`ab`
/// before `a`) or a tag is missing; `SOFFSET` without `SLIMIT` keeps
/// nothing, as there.
fn chosen_groups(
    group_by: &[String],
    keys: &[Vec<String>],
    slimit: Option<usize>,
    soffset: usize,
) -> Option<Vec<bool>> {
    let limit = slimit.unwrap_or(0);
    if limit == 0 && soffset == 0 {
        return None;
    }
    let tags_key = |values: &[String]| -> Vec<u8> {
        let present: Vec<(&String, &String)> = group_by
            .iter()
            .zip(values)
            .filter(|(_, v)| !v.is_empty())
            .collect();
        let mut key = Vec::new();
        for (k, _) in &present {
            key.extend_from_slice(k.as_bytes());
            key.push(b'|');
        }
        for (i, (_, v)) in present.iter().enumerate() {
            if i > 0 {
                key.push(b'|');
            }
            key.extend_from_slice(v.as_bytes());
        }
        key
    };
    let mut order: Vec<(Vec<u8>, usize)> = keys
        .iter()
        .enumerate()
        .map(|(g, values)| (tags_key(values), g))
        .collect();
    order.sort();
    let mut chosen = vec![false; keys.len()];
    if soffset <= order.len() {
        let end = soffset.saturating_add(limit).min(order.len());
        for (_, g) in &order[soffset..end] {
            chosen[*g] = true;
        }
    }
    Some(chosen)
}

/// `f` over `items`, in order, on up to one thread per core when there
/// are enough items to share (a statement over many series reads them in
/// parallel, as halite's own query path scans its buckets).
fn in_parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = parallel_chunks(items.len());
    if threads == 1 {
        return items.iter().map(f).collect();
    }
    let f = &f;
    std::thread::scope(|scope| {
        let readers: Vec<_> = items
            .chunks(items.len().div_ceil(threads))
            .map(|chunk| scope.spawn(move || chunk.iter().map(f).collect::<Vec<R>>()))
            .collect();
        readers
            .into_iter()
            .flat_map(|r| r.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// `f` folded over `items` into one state per thread (made by `init`),
/// on up to one thread per core when there are enough items to share;
/// the states in the order of the items they saw.
fn fold_in_parallel<T: Sync, A: Send>(
    items: &[T],
    init: impl Fn() -> A + Sync,
    f: impl Fn(&mut A, &T) -> Result<(), String> + Sync,
) -> Result<Vec<A>, String> {
    let chunks = parallel_chunks(items.len());
    if chunks == 1 {
        let mut state = init();
        for item in items {
            f(&mut state, item)?;
        }
        return Ok(vec![state]);
    }
    let (f, init) = (&f, &init);
    std::thread::scope(|scope| {
        let readers: Vec<_> = items
            .chunks(items.len().div_ceil(chunks))
            .map(|chunk| {
                scope.spawn(move || {
                    let mut state = init();
                    for item in chunk {
                        f(&mut state, item)?;
                    }
                    Ok(state)
                })
            })
            .collect();
        readers
            .into_iter()
            .map(|r| r.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// How many threads share `n` items: one per core, each with at least a
/// few items.
fn parallel_chunks(n: usize) -> usize {
    const PER_THREAD: usize = 8;
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(n / PER_THREAD)
        .max(1)
}

/// What of a series to read: times in `[lo, hi]`, the named fields (all
/// when `None`).
struct SeriesRange<'a> {
    lo: i64,
    hi: i64,
    fields: Option<&'a BTreeSet<String>>,
    /// The measurement's field names (when the statement began), which
    /// the points read borrow.
    names: &'a [&'a str],
    /// At most about this many points of a series are wanted (newest
    /// first), which are read differently (see [`ColumnRead`]).
    points: Option<usize>,
}

impl<'n> SeriesRange<'n> {
    /// The fields a read of a series takes, by the names the points
    /// borrow, in the order of the read's columns: a field first written
    /// after the statement began is not among them (as a statement run a
    /// moment earlier).
    fn columns(&self) -> Vec<&'n str> {
        match self.fields.filter(|f| !f.is_empty()) {
            Some(fields) => self
                .names
                .iter()
                .copied()
                .filter(|n| fields.contains(*n))
                .collect(),
            None => self.names.to_vec(),
        }
    }
}

/// Reads one series' points in range, newest first, each shown to
/// `visit` until it answers false. The point passed is reused from row to
/// row (a statement over millions of points allocates per row only what
/// its answer keeps).
fn scan_series<'n>(
    source: Source<'_>,
    table: &SeriesTable,
    series: &[u8],
    range: &SeriesRange<'n>,
    visit: &mut dyn FnMut(&Point<'n>) -> bool,
) -> Result<(), String> {
    let names = range.columns();
    let mut point = Point::default();
    let mut each_row = |time: i64, cells: &[(u32, Value)]| {
        point.set(time, cells, &names);
        visit(&point)
    };
    scan_series_cells(source, table, series, range, &names, &mut each_row)
}

/// What sees a series' rows: each row's time and cells (column, value),
/// until it answers false. A closure over (time, cells) is one.
trait SeriesVisit {
    fn row(&mut self, time: i64, cells: &[(u32, Value)]) -> bool;

    /// Whether the visit takes rows by column ([`Self::run`]).
    fn takes_runs(&self) -> bool {
        false
    }

    /// Rows `rows` of `runs`, one series' points newest first, a row's
    /// time `u64::MAX` less its key's tail (as [`SeriesTable::key_time`]).
    /// `scale`: nanoseconds a unit of the key's time is.
    fn run(&mut self, runs: &ColumnRuns, rows: std::ops::Range<usize>, scale: i64) -> bool {
        let mut cells = Vec::new();
        rows.into_iter().all(|row| {
            cells.clear();
            runs.row_cells(row, &mut cells);
            self.row(run_time(runs, row, scale), &cells)
        })
    }
}

impl<F: FnMut(i64, &[(u32, Value)]) -> bool> SeriesVisit for F {
    fn row(&mut self, time: i64, cells: &[(u32, Value)]) -> bool {
        self(time, cells)
    }
}

/// The time of row `row` of `runs` in nanoseconds (as [`SeriesTable::key_time`] of
/// its key), a unit of the key's time being `scale` of them.
fn run_time(runs: &ColumnRuns, row: usize, scale: i64) -> i64 {
    tail_time(runs.tails()[row], scale)
}

/// The time in nanoseconds of a row whose key ends in `tail` (newest
/// first), a unit of the key's time being `scale` of them.
fn tail_time(tail: u64, scale: i64) -> i64 {
    ((u64::MAX - tail) as i64).saturating_mul(scale)
}

/// Nanoseconds a unit of the key's time is: InfluxQL's times are
/// nanoseconds whatever the table keeps (a Prometheus samples table keeps
/// milliseconds, which were read as nanoseconds: its points answered as
/// of January 1970, and no time condition met them).
fn ns_per_key_unit(schema: &KeySchema) -> i64 {
    (1_000_000_000 / schema.time_unit.per_second().max(1)) as i64
}

/// A column read's rows as a series' times: what [`SeriesVisit`] sees.
struct ByTime<'a> {
    table: &'a SeriesTable,
    visit: &'a mut dyn SeriesVisit,
    /// Nanoseconds a unit of the key's time is.
    scale: i64,
}

impl ColumnSink for ByTime<'_> {
    fn row(&mut self, key: &[u8], cells: &[(u32, Value)]) -> bool {
        let Some(time) = self.table.key_time(key) else {
            return true;
        };
        self.visit
            .row((time as i64).saturating_mul(self.scale), cells)
    }

    fn takes_runs(&self) -> bool {
        self.visit.takes_runs()
    }

    fn runs(&mut self, runs: &ColumnRuns) -> bool {
        for (head, rows) in runs.runs() {
            // A run's keys are its head and 8 bytes of time: a series'
            // key's shape is the head's.
            if !self.table.is_series_head(head) {
                continue;
            }
            if !self.visit.run(runs, rows, self.scale) {
                return false;
            }
        }
        true
    }
}

/// [`scan_series`] without making points: `visit` gets each row's time
/// and cells, a cell's column its index into `names` (which is
/// `range.columns()`). For folds, which look at a call's column directly.
fn scan_series_cells(
    source: Source<'_>,
    table: &SeriesTable,
    series: &[u8],
    range: &SeriesRange<'_>,
    names: &[&str],
    visit: &mut dyn SeriesVisit,
) -> Result<(), String> {
    if names.is_empty() {
        return Ok(());
    }
    let store = match source {
        Source::Store(store) => store,
        Source::Rows(sub) => {
            // Newest first, as the store's reads come; a row with none
            // of the names is no row of this read. The statement's lower
            // bound bounded the subquery already, and a row of its
            // `GROUP BY time` starts at its bucket, before that bound: as
            // InfluxDB, it is read.
            let mut cells: Vec<(u32, Value)> = Vec::new();
            let columns: Vec<Option<u16>> = names.iter().map(|n| sub.column(n)).collect();
            for (time, values) in sub.rows_of(series).iter().rev() {
                if *time > range.hi {
                    continue;
                }
                cells.clear();
                cells.extend(columns.iter().enumerate().filter_map(|(i, column)| {
                    let column = (*column)?;
                    values
                        .iter()
                        .find(|(c, _)| *c == column)
                        .map(|(_, v)| (i as u32, v.clone()))
                }));
                if !cells.is_empty() && !visit.row(*time, &cells) {
                    break;
                }
            }
            return Ok(());
        }
    };
    // The statement's nanoseconds in the key's unit: the first unit at or
    // after the lower bound, the last at or before the upper.
    let scale = ns_per_key_unit(&table.schema);
    let lo = range.lo / scale + i64::from(range.lo % scale != 0);
    let hi = range.hi / scale;
    if lo > hi {
        return Ok(());
    }
    let mut scan = table.scan(series, lo, hi);
    let read = match range.points {
        Some(n) => ColumnRead::FirstRows(n),
        None => ColumnRead::Fold,
    };
    scan.columns.columns = names
        .iter()
        .map(|f| (table.family.clone(), f.as_bytes().to_vec()))
        .collect();
    let mut sink = ByTime {
        table,
        visit,
        scale,
    };
    store
        .scan_columns(&table.name, &scan, read, &mut sink)
        .map_err(invalid)
}

/// A series' fold into its group: each row's values of the calls'
/// columns go to the reducers of the time bucket the row falls in.
struct SeriesFold<'a> {
    calls: &'a [(Call, String)],
    /// The series' [`Member::origin`].
    origin: u32,
    /// Each call's column of the read (`None`: not read).
    call_columns: &'a [Option<u32>],
    group_time: Option<(i64, i64)>,
    /// The bucket of a statement without `GROUP BY time`.
    lo: i64,
    group: &'a mut GroupState,
    /// The bucket being folded and its reducers.
    open: Option<(i64, Vec<Reducer>)>,
    /// Reducers every fold of the statement holds; past [`MAX_FOLDED`]
    /// the fold stops (`over`), and the statement is an error.
    held: &'a std::sync::atomic::AtomicUsize,
    over: bool,
    /// Values the closed buckets' reducers of every fold keep (a median's,
    /// a mode's…); past [`MAX_KEPT_VALUES`] the fold stops too.
    kept: &'a std::sync::atomic::AtomicUsize,
    /// Whether a call keeps its values, so that they are counted.
    keeps: bool,
    kept_over: bool,
}

impl SeriesFold<'_> {
    fn in_bucket(&self, t: i64, bucket: i64) -> bool {
        match self.group_time {
            Some((every, _)) => t
                .checked_sub(bucket)
                .is_some_and(|d| (0..every).contains(&d)),
            None => true,
        }
    }

    /// The bucket `time` falls in, opened if it is not the one open: a
    /// series' points come newest first, so a bucket once left is done
    /// for this series.
    fn open_at(&mut self, time: i64) -> i64 {
        match &self.open {
            Some((b, _)) if self.in_bucket(time, *b) => *b,
            _ => {
                self.close_open();
                let b = match self.group_time {
                    Some((every, offset)) => bucket_of(time, every, offset),
                    None => self.lo,
                };
                let n = self.calls.len();
                let now = self
                    .held
                    .fetch_add(n, std::sync::atomic::Ordering::Relaxed)
                    .saturating_add(n);
                self.over |= now > MAX_FOLDED;
                self.open = Some((b, vec![Reducer::of(self.origin); n]));
                b
            }
        }
    }

    /// Folds the open bucket into the group; its reducers are no longer
    /// held when they merged into a bucket the group had.
    fn close_open(&mut self) {
        if self.keeps {
            self.kept
                .fetch_add(self.kept_open(), std::sync::atomic::Ordering::Relaxed);
        }
        if let Some((b, reducers)) = self.open.take()
            && !self.group.fold(self.calls, b, reducers)
        {
            self.held
                .fetch_sub(self.calls.len(), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The values the open bucket's reducers keep.
    fn kept_open(&self) -> usize {
        self.open
            .as_ref()
            .map_or(0, |(_, reducers)| reducers.iter().map(Reducer::kept).sum())
    }

    /// Whether the values kept reach past [`MAX_KEPT_VALUES`] (`kept_over`
    /// then), checked after each row or run folded.
    fn check_kept(&mut self) {
        if self.keeps {
            let kept = self.kept.load(std::sync::atomic::Ordering::Relaxed) + self.kept_open();
            self.kept_over |= kept > MAX_KEPT_VALUES;
        }
    }

    /// Folds in the bucket left open; the statement's error when the fold
    /// stopped past [`MAX_FOLDED`] or [`MAX_KEPT_VALUES`].
    fn finish(mut self) -> Option<String> {
        self.close_open();
        if self.over {
            return Some(too_many_values(MAX_FOLDED));
        }
        self.kept_over.then(|| {
            format!(
                "the statement's functions would keep more than {MAX_KEPT_VALUES} values to \
                 answer (median, mode, percentile, count(distinct()) and integral keep each \
                 value of a bucket until it is answered): narrow the time range, or group by \
                 a shorter time"
            )
        })
    }
}

/// Adds a row's cells to the reducers of its bucket, each call's from its
/// column.
fn add_cells(
    reducers: &mut [Reducer],
    calls: &[(Call, String)],
    call_columns: &[Option<u32>],
    time: i64,
    cells: &[(u32, Value)],
) {
    for ((r, (call, _)), column) in reducers.iter_mut().zip(calls).zip(call_columns) {
        // Cells come by column: where a row has every column, a column's
        // cell is at its index.
        let value = column.and_then(|column| {
            cells
                .get(column as usize)
                .filter(|(c, _)| *c == column)
                .or_else(|| cells.iter().find(|(c, _)| *c == column))
        });
        if let Some((_, v)) = value {
            r.add(call.func, time, v);
        }
    }
}

/// The start of the window a `GROUP BY time(…) ORDER BY time DESC LIMIT
/// n` statement's answer lies in, when it is above the statement's lower
/// bound: the newest OFFSET + n buckets up to the upper bound, each
/// answered (with fill(null) or fill(N)) whether it holds a value or not.
/// Without it, a statement with no lower bound read every series back to
/// its first point, in time proportional to the data kept (the ascending
/// form has its own window, [`oldest_buckets_to`]). fill(previous) and
/// fill(linear) take values from below the window, so they read it all.
fn newest_buckets_from(s: &Select, lo: i64, hi: i64) -> Option<i64> {
    let (every, offset) = s.group_time?;
    if !s.descending || !matches!(s.fill, Fill::Null | Fill::Value(_)) {
        return None;
    }
    let buckets = window_buckets(s)?;
    let from = bucket_of(hi, every, offset).checked_sub(every.checked_mul(buckets - 1)?)?;
    (from > lo).then_some(from)
}

/// The end of the window an ascending `GROUP BY time(…) LIMIT n`
/// statement's answer starts in, when it is below the upper bound: the
/// OFFSET + n buckets from the lower bound's, or without one (`bounded`
/// false) from the bucket of `oldest`, a lower bound of the table's
/// times. Without it, TSBS's groupby-orderby-limit (`WHERE time < X GROUP
/// BY time(1m) LIMIT 5`) read every series' whole history for its first
/// five minutes. The answer of a group whose first value comes later
/// reaches above the window, and is read on from there; `oldest` is only
/// where the reading starts, so a wrong one costs time, not answers.
/// fill(linear) takes values from above the answer's last bucket, and
/// fill(none) answers only buckets with values, so they read it all.
fn oldest_buckets_to(
    s: &Select,
    bounded: bool,
    lo: i64,
    hi: i64,
    oldest: Option<i64>,
) -> Option<i64> {
    let (every, offset) = s.group_time?;
    if s.descending || !matches!(s.fill, Fill::Null | Fill::Value(_) | Fill::Previous) {
        return None;
    }
    let buckets = window_buckets(s)?;
    let from = if bounded { lo } else { oldest?.max(lo) };
    let to = bucket_of(from, every, offset).checked_add(every.checked_mul(buckets)?)? - 1;
    (to < hi).then_some(to)
}

/// OFFSET + n of a statement with `LIMIT n`: the buckets its answer
/// shows and skips.
fn window_buckets(s: &Select) -> Option<i64> {
    let n = s.limit.filter(|n| *n > 0)?;
    i64::try_from(n.checked_add(s.offset)?).ok()
}

impl SeriesVisit for SeriesFold<'_> {
    fn row(&mut self, time: i64, cells: &[(u32, Value)]) -> bool {
        self.group.any_point = true;
        self.open_at(time);
        let (calls, call_columns) = (self.calls, self.call_columns);
        if let Some((_, reducers)) = self.open.as_mut() {
            add_cells(reducers, calls, call_columns, time, cells);
        }
        self.check_kept();
        !self.over && !self.kept_over
    }

    fn takes_runs(&self) -> bool {
        true
    }

    fn run(&mut self, runs: &ColumnRuns, rows: std::ops::Range<usize>, scale: i64) -> bool {
        if rows.is_empty() {
            return true;
        }
        self.group.any_point = true;
        let (calls, call_columns) = (self.calls, self.call_columns);
        let mut at = rows.start;
        while at < rows.end {
            let bucket = self.open_at(run_time(runs, at, scale));
            // A run's rows rise by key, so its times fall: where they
            // fall as i64 too (no time past i64::MAX among them), the
            // rows in the bucket are a prefix, found by halving.
            let tails = &runs.tails()[at + 1..rows.end];
            let inside = |&t: &u64| self.in_bucket(tail_time(t, scale), bucket);
            let end = at
                + 1
                + if run_time(runs, rows.end - 1, scale) <= run_time(runs, at, scale) {
                    tails.partition_point(inside)
                } else {
                    tails.iter().take_while(|t| inside(t)).count()
                };
            let Some((_, reducers)) = self.open.as_mut() else {
                return true;
            };
            for ((r, (call, _)), column) in reducers.iter_mut().zip(calls).zip(call_columns) {
                let Some(column) = *column else { continue };
                let values = runs.column(column, at..end);
                let time_of = |i: usize| run_time(runs, values.rows[i] as usize, scale);
                match values.values {
                    RunValueSlice::Floats(xs) => r.add_floats(call.func, xs, time_of),
                    RunValueSlice::Values(vs) => {
                        for (i, v) in vs.iter().enumerate() {
                            r.add(call.func, time_of(i), v);
                        }
                    }
                }
            }
            at = end;
            self.check_kept();
            if self.over || self.kept_over {
                return false;
            }
        }
        true
    }
}

/// Cell version `ms` as a statement's time, in nanoseconds.
fn ns_of_ms(ms: u64) -> i64 {
    i64::try_from(ms).map_or(i64::MAX, |ms| ms.saturating_mul(1_000_000))
}

/// How far back from the table's newest point a raw `ORDER BY time DESC
/// LIMIT n` looks first for each series' newest points (ms).
const RECENT_MS: u64 = 3_600_000;

/// Most values (a row's time and each column) a statement's aggregates
/// answer, and most reducers its folds hold at once (a call's state in a
/// bucket, about 150 bytes each; a thread's fold of a group holds its own
/// until they merge): one small statement must not take the memory of
/// the whole machine, as InfluxDB's `max-select-buckets` and
/// `max-select-point` guard (off by default there). A raw answer holds
/// what was stored and is not bounded here, unless its columns repeat.
const MAX_ANSWER_CELLS: usize = 5_000_000;
const MAX_FOLDED: usize = 2_000_000;
/// Most points `top`, `bottom`, `distinct` and `sample` hold to choose
/// among (about 100 bytes each).
const MAX_CHOSEN_FROM: usize = 5_000_000;
/// Most values the reducers of a statement's folds keep (a median, mode,
/// percentile, distinct count or integral keeps each value of a bucket
/// until it answers): 16 to 40 bytes each.
const MAX_KEPT_VALUES: usize = 16_000_000;
/// [`MAX_ANSWER_CELLS`] for the leaves of a statement's arithmetic and
/// transformations, which are held twice: as the leaves' rows and as the
/// columns worked out of them (5M took 385 MiB).
const MAX_PLAN_CELLS: usize = 2_000_000;

fn too_many_values(limit: usize) -> String {
    format!(
        "the statement's answer would hold more than {limit} values (buckets × functions × groups): \
         narrow the time range, widen GROUP BY time(), or select fewer functions or groups"
    )
}

/// The fields a statement's columns and calls name; `None` for `*` (and
/// for a statement naming no field, which reads them all).
fn selected_fields(
    s: &Select,
    fields: &BTreeMap<String, crate::series::FieldType>,
) -> Option<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    for f in &s.fields {
        match &f.expr {
            SelectExpr::Wildcard => return None,
            SelectExpr::Column(c) if fields.contains_key(c) => {
                out.insert(c.clone());
            }
            SelectExpr::Call { field, .. } | SelectExpr::Distinct { field, .. }
                if fields.contains_key(field) =>
            {
                out.insert(field.clone());
            }
            SelectExpr::Rank { field, .. } if fields.contains_key(field) => {
                out.insert(field.clone());
            }
            _ => {}
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Adds the fields condition `e` compares to `out`.
fn field_refs(
    e: &Expr,
    fields: &BTreeMap<String, crate::series::FieldType>,
    out: &mut BTreeSet<String>,
) {
    match e {
        Expr::And(terms) | Expr::Or(terms) => {
            for term in terms {
                field_refs(term, fields, out);
            }
        }
        Expr::Compare { lhs, .. } => {
            if fields.contains_key(lhs) {
                out.insert(lhs.clone());
            }
        }
    }
}

/// The time bounds of a condition (`time` compared at its top-level ANDs)
/// and what is left of it.
/// A condition taken apart: its lowest and highest time (inclusive) and
/// the rest.
pub(super) type TimeSplit = (Option<i64>, Option<i64>, Option<Expr>);

pub(super) fn split_time(e: Option<&Expr>) -> Result<TimeSplit, String> {
    let Some(e) = e else {
        return Ok((None, None, None));
    };
    match e {
        Expr::And(terms) => {
            let (mut lo, mut hi, mut rest) = (None::<i64>, None::<i64>, Vec::new());
            for term in terms {
                let (term_lo, term_hi, term_rest) = split_time(Some(term))?;
                lo = match (lo, term_lo) {
                    (Some(x), Some(y)) => Some(x.max(y)),
                    (x, y) => x.or(y),
                };
                hi = match (hi, term_hi) {
                    (Some(x), Some(y)) => Some(x.min(y)),
                    (x, y) => x.or(y),
                };
                match term_rest {
                    Some(Expr::And(inner)) => rest.extend(inner),
                    Some(other) => rest.push(other),
                    None => {}
                }
            }
            let rest = match rest.len() {
                0 => None,
                1 => rest.pop(),
                _ => Some(Expr::And(rest)),
            };
            Ok((lo, hi, rest))
        }
        Expr::Compare { lhs, op, rhs } if lhs.eq_ignore_ascii_case("time") => {
            let Operand::Time(t) = rhs else {
                return Err(
                    "invalid operation: time and *influxql.StringLiteral are not compatible".into(),
                );
            };
            let t = *t;
            Ok(match op {
                CompareOp::Gt => (Some(t.saturating_add(1)), None, None),
                CompareOp::GtEq => (Some(t), None, None),
                CompareOp::Lt => (None, Some(t.saturating_sub(1)), None),
                CompareOp::LtEq => (None, Some(t), None),
                CompareOp::Eq => (Some(t), Some(t), None),
                CompareOp::NotEq | CompareOp::Match | CompareOp::NotMatch => {
                    return Err("time may be compared with =, <, <=, > and >= only".into());
                }
            })
        }
        other => {
            if mentions_time(other) {
                return Err("invalid time condition: time may only be ANDed with the rest".into());
            }
            Ok((None, None, Some(other.clone())))
        }
    }
}

fn mentions_time(e: &Expr) -> bool {
    match e {
        Expr::And(terms) | Expr::Or(terms) => terms.iter().any(mentions_time),
        Expr::Compare { lhs, .. } => lhs.eq_ignore_ascii_case("time"),
    }
}

pub(super) fn mentions_field(
    e: &Expr,
    fields: &BTreeMap<String, crate::series::FieldType>,
) -> bool {
    match e {
        Expr::And(terms) | Expr::Or(terms) => terms.iter().any(|t| mentions_field(t, fields)),
        Expr::Compare { lhs, .. } => fields.contains_key(lhs),
    }
}

/// Whether a series (and a point of it, when given) meets `e`. A name
/// that is a field compares the point's value (a point without it: no);
/// any other name is a tag (a series without it has "").
fn eval(
    e: &Expr,
    tags: &BTreeMap<String, String>,
    point: Option<&PointFields<'_>>,
    fields: &BTreeMap<String, crate::series::FieldType>,
    regexes: &Regexes,
) -> bool {
    match e {
        Expr::And(terms) => terms.iter().all(|t| eval(t, tags, point, fields, regexes)),
        Expr::Or(terms) => terms.iter().any(|t| eval(t, tags, point, fields, regexes)),
        Expr::Compare { lhs, op, rhs } => {
            if fields.contains_key(lhs) {
                let Some(v) = point.and_then(|p| p.get(lhs)) else {
                    return false;
                };
                if let (Value::Str(text), Operand::Regex(re)) = (v, rhs) {
                    return matches_regex(text, *op, re, regexes);
                }
                return compare_value(v, *op, rhs);
            }
            let v = tags.get(lhs).map_or("", String::as_str);
            if let Operand::Regex(re) = rhs {
                return matches_regex(v, *op, re, regexes);
            }
            let Operand::Str(want) = rhs else {
                return false;
            };
            let ord = v.cmp(want.as_str());
            holds(ord, *op)
        }
    }
}

/// A tag and the values one of which a series must have for some point
/// of it to meet `e`, where `e` says so by equalities (`host = 'a'`, ORs
/// of them for one tag, either side of an AND); `None` where it does not
/// (a missing tag reads as "", so an equality with "" confines nothing).
fn required_tag_values<'e>(
    e: &'e Expr,
    fields: &BTreeMap<String, crate::series::FieldType>,
) -> Option<(&'e str, BTreeSet<&'e str>)> {
    match e {
        Expr::Compare {
            lhs,
            op: CompareOp::Eq,
            rhs: Operand::Str(value),
        } if !fields.contains_key(lhs) && !value.is_empty() => {
            Some((lhs.as_str(), BTreeSet::from([value.as_str()])))
        }
        Expr::Compare { .. } => None,
        Expr::Or(terms) => {
            let mut terms = terms.iter();
            let (key, mut values) = required_tag_values(terms.next()?, fields)?;
            for term in terms {
                let (other, more) = required_tag_values(term, fields)?;
                if other != key {
                    return None;
                }
                values.extend(more);
            }
            Some((key, values))
        }
        Expr::And(terms) => terms.iter().find_map(|t| required_tag_values(t, fields)),
    }
}

/// Whether some point of a series with `tags` could meet `e`: its tag
/// comparisons are decided, a field comparison could go either way. A
/// condition has no NOT, so a series this rules out has no point that
/// meets `e` (`usage_user > 90 AND host = 'a'` reads only host `a`).
fn may_hold(
    e: &Expr,
    tags: &BTreeMap<String, String>,
    fields: &BTreeMap<String, crate::series::FieldType>,
    regexes: &Regexes,
) -> bool {
    match e {
        Expr::And(terms) => terms.iter().all(|t| may_hold(t, tags, fields, regexes)),
        Expr::Or(terms) => terms.iter().any(|t| may_hold(t, tags, fields, regexes)),
        Expr::Compare { lhs, .. } if fields.contains_key(lhs) => true,
        Expr::Compare { .. } => eval(e, tags, None, fields, regexes),
    }
}

/// Every walk a SELECT makes of its condition, over a made-up series and
/// point: for the fuzz target, which has no store to select from.
#[doc(hidden)]
pub fn walk_condition(e: &Expr) {
    use crate::series::FieldType;
    let fields = BTreeMap::from([
        ("v".to_string(), FieldType::Float),
        ("s".to_string(), FieldType::String),
    ]);
    let mut refs = BTreeSet::new();
    field_refs(e, &fields, &mut refs);
    let _ = split_time(Some(e));
    let _ = mentions_field(e, &fields);
    let _ = required_tag_values(e, &fields);
    let mut regexes = Regexes::new();
    if compile_regexes(e, &mut regexes).is_err() {
        return;
    }
    let tags = BTreeMap::from([("host".to_string(), "a".to_string())]);
    let _ = may_hold(e, &tags, &fields, &regexes);
    let point = PointFields(vec![
        ("v", Value::Float(1.5)),
        ("s", Value::Str("x".into())),
    ]);
    let _ = eval(e, &tags, Some(&point), &fields, &regexes);
}

/// The condition's regular expressions, compiled once per statement.
type Regexes = BTreeMap<String, regex_lite::Regex>;

/// A `SHOW` statement's `WHERE`: a condition on series' tags alone, as
/// InfluxDB's meta queries take it (every name is a tag; a series without
/// it has "").
pub struct TagFilter {
    condition: Expr,
    regexes: Regexes,
    no_fields: BTreeMap<String, crate::series::FieldType>,
}

impl TagFilter {
    pub fn new(condition: &Expr) -> Result<TagFilter, String> {
        fn check(e: &Expr) -> Result<(), String> {
            match e {
                Expr::And(terms) | Expr::Or(terms) => terms.iter().try_for_each(check),
                Expr::Compare { lhs, .. } if lhs.eq_ignore_ascii_case("time") => Err(
                    "a time condition in a SHOW statement is not answered by halite yet \
                     (InfluxDB 1.6 lists what the shards of the range hold): leave it out"
                        .into(),
                ),
                Expr::Compare {
                    op: CompareOp::Lt | CompareOp::LtEq | CompareOp::Gt | CompareOp::GtEq,
                    ..
                } => Err("invalid tag comparison operator".into()),
                Expr::Compare { .. } => Ok(()),
            }
        }
        check(condition)?;
        let mut regexes = Regexes::new();
        compile_regexes(condition, &mut regexes)?;
        Ok(TagFilter {
            condition: condition.clone(),
            regexes,
            no_fields: BTreeMap::new(),
        })
    }

    pub fn holds(&self, tags: &BTreeMap<String, String>) -> bool {
        eval(&self.condition, tags, None, &self.no_fields, &self.regexes)
    }
}

/// A `SHOW` statement's `WITH KEY` (or `WITH MEASUREMENT`): which names
/// it takes.
pub struct NameFilter {
    how: super::influxql::NameMatch,
    regex: Option<regex_lite::Regex>,
}

impl NameFilter {
    pub fn new(how: &super::influxql::NameMatch) -> Result<NameFilter, String> {
        use super::influxql::NameMatch;
        let regex = match how {
            NameMatch::Regex(re) | NameMatch::NotRegex(re) => {
                Some(crate::query::compile_regex(re, 1).map_err(|e| {
                    format!(
                        "invalid regular expression /{}/: {e}",
                        crate::codec::quote_prefix(re)
                    )
                })?)
            }
            _ => None,
        };
        Ok(NameFilter {
            how: how.clone(),
            regex,
        })
    }

    pub fn takes(&self, name: &str) -> bool {
        use super::influxql::NameMatch;
        match (&self.how, &self.regex) {
            (NameMatch::In(names), _) => names.iter().any(|n| n == name),
            (NameMatch::NotEq(n), _) => n != name,
            (NameMatch::Regex(_), Some(re)) => re.is_match(name),
            (NameMatch::NotRegex(_), Some(re)) => !re.is_match(name),
            _ => false,
        }
    }
}

fn compile_regexes(e: &Expr, out: &mut Regexes) -> Result<(), String> {
    let mut patterns = BTreeSet::new();
    regex_patterns(e, &mut patterns);
    let count = patterns.len();
    for re in patterns {
        let compiled = crate::query::compile_regex(re, count).map_err(|e| {
            format!(
                "invalid regular expression /{}/: {e}",
                crate::codec::quote_prefix(re)
            )
        })?;
        out.insert(re.to_string(), compiled);
    }
    Ok(())
}

fn regex_patterns<'e>(e: &'e Expr, out: &mut BTreeSet<&'e str>) {
    match e {
        Expr::And(terms) | Expr::Or(terms) => {
            for term in terms {
                regex_patterns(term, out);
            }
        }
        Expr::Compare {
            rhs: Operand::Regex(re),
            ..
        } => {
            out.insert(re);
        }
        Expr::Compare { .. } => {}
    }
}

fn matches_regex(text: &str, op: CompareOp, re: &str, regexes: &Regexes) -> bool {
    let found = regexes.get(re).is_some_and(|r| r.is_match(text));
    match op {
        CompareOp::Match => found,
        CompareOp::NotMatch => !found,
        _ => false,
    }
}

fn holds(ord: std::cmp::Ordering, op: CompareOp) -> bool {
    use std::cmp::Ordering::*;
    match op {
        CompareOp::Eq => ord == Equal,
        CompareOp::NotEq => ord != Equal,
        CompareOp::Lt => ord == Less,
        CompareOp::LtEq => ord != Greater,
        CompareOp::Gt => ord == Greater,
        CompareOp::GtEq => ord != Less,
        CompareOp::Match | CompareOp::NotMatch => false,
    }
}

fn compare_value(v: &Value, op: CompareOp, rhs: &Operand) -> bool {
    match (v, rhs) {
        (Value::Str(s), Operand::Str(w)) => holds(s.as_str().cmp(w.as_str()), op),
        (Value::Bool(b), Operand::Bool(w)) => match op {
            CompareOp::Eq => b == w,
            CompareOp::NotEq => b != w,
            _ => false,
        },
        (_, Operand::Number(n)) => match as_f64(v) {
            Some(x) => x.partial_cmp(n).is_some_and(|o| holds(o, op)),
            None => false,
        },
        _ => false,
    }
}

/// Column names as InfluxDB gives them: the alias, the function, or the
/// field; a repeated name gets `_1`, `_2` …
fn unique(names: Vec<String>) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    names
        .into_iter()
        .map(|n| {
            let count = seen.entry(n.clone()).or_insert(0);
            let out = if *count == 0 {
                n.clone()
            } else {
                format!("{n}_{count}")
            };
            *count += 1;
            out
        })
        .collect()
}

/// A raw select's columns: the fields and tags it shows, by name, and
/// the names its answer gives them (`time` first, aliases made unique).
/// The same for every group of the statement.
fn raw_columns(
    s: &Select,
    fields: &BTreeMap<String, crate::series::FieldType>,
    tag_keys: &BTreeSet<String>,
    group_by: &[String],
) -> (Vec<String>, Vec<String>) {
    let mut columns: Vec<String> = Vec::new();
    let mut aliases: Vec<String> = Vec::new();
    for f in &s.fields {
        match &f.expr {
            SelectExpr::Wildcard => {
                let mut all: Vec<String> = fields
                    .keys()
                    .cloned()
                    .chain(tag_keys.iter().filter(|t| !group_by.contains(t)).cloned())
                    .collect();
                all.sort();
                all.dedup();
                aliases.extend(all.iter().cloned());
                columns.extend(all);
            }
            SelectExpr::Column(c) => {
                columns.push(c.clone());
                aliases.push(f.alias.clone().unwrap_or_else(|| c.clone()));
            }
            SelectExpr::Matching(_)
            | SelectExpr::Call { .. }
            | SelectExpr::CallEach { .. }
            | SelectExpr::Distinct { .. }
            | SelectExpr::Rank { .. }
            | SelectExpr::Expr(_) => {}
        }
    }
    let mut names = vec![s.time_column.clone()];
    names.extend(unique(aliases));
    (columns, names)
}

/// A raw select's rows of one group: one row per point of the group's
/// series, oldest first (points of one time in series order), `time`
/// and then `columns` ([`raw_columns`]).
fn raw_rows(
    members: &[&SeriesData<'_>],
    fields: &BTreeMap<String, crate::series::FieldType>,
    columns: &[String],
) -> Vec<Vec<Cell>> {
    let mut rows: Vec<(i64, usize, Vec<Cell>)> = Vec::new();
    for (order, d) in members.iter().enumerate() {
        for p in &d.points {
            let (cells, any_field) = point_cells(p, d.tags, fields, columns);
            if any_field {
                rows.push((p.time, order, cells));
            }
        }
    }
    rows.sort_by_key(|r| (r.0, r.1));
    rows.into_iter()
        .map(|(t, _, cells)| {
            let mut row = vec![Cell::Time(t)];
            row.extend(cells);
            row
        })
        .collect()
}

/// The time bucket of `t`: `GROUP BY time(every, offset)`.
fn bucket_of(t: i64, every: i64, offset: i64) -> i64 {
    (t - offset).div_euclid(every) * every + offset
}

/// [`bucket_of`] for a bound as written, which may lie near either end of
/// the time range: `None` where the bucket's start is out of range.
fn checked_bucket_of(t: i64, every: i64, offset: i64) -> Option<i64> {
    t.checked_sub(offset)?
        .div_euclid(every)
        .checked_mul(every)?
        .checked_add(offset)
}

/// One function call of an aggregate select.
struct Call {
    func: Func,
    field: String,
}

/// The calls of an aggregate select, and their column names.
fn aggregate_calls(
    s: &Select,
    fields: &BTreeMap<String, crate::series::FieldType>,
) -> Result<Vec<(Call, String)>, String> {
    let mut calls = Vec::new();
    let count = "count".to_string();
    for f in &s.fields {
        let (func, field, name) = match &f.expr {
            SelectExpr::Call { func, field, arg } => {
                let parsed = Func::parse(func, *arg)?;
                if arg.is_some() && !matches!(parsed, Func::Percentile(_) | Func::Integral(_)) {
                    return Err(format!(
                        "invalid number of arguments for {func}, expected 1, got 2"
                    ));
                }
                (parsed, field, func)
            }
            SelectExpr::Distinct { field, count: true } => (Func::CountDistinct, field, &count),
            _ => continue,
        };
        let call = Call {
            func,
            field: field.clone(),
        };
        // `mean` of a string field is an error, not an empty answer.
        if let Some(refusal) = fields.get(field).and_then(|ty| func.refusal(name, *ty)) {
            return Err(refusal);
        }
        calls.push((call, f.alias.clone().unwrap_or_else(|| name.clone())));
    }
    Ok(calls)
}

/// What a group of an aggregate select has gathered: whether any point
/// met the condition, and per time bucket a reducer per call.
#[derive(Clone, Default)]
struct GroupState {
    any_point: bool,
    buckets: BTreeMap<i64, Vec<Reducer>>,
}

impl GroupState {
    /// Folds in one bucket's reducers (a bucket where no call's field had
    /// a value is as if absent).
    /// `true` when the reducers are kept as the bucket's (not merged
    /// into the ones it had, nor dropped as empty).
    fn fold(&mut self, calls: &[(Call, String)], bucket: i64, reducers: Vec<Reducer>) -> bool {
        if reducers.iter().all(Reducer::is_empty) {
            return false;
        }
        match self.buckets.entry(bucket) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(reducers);
                true
            }
            std::collections::btree_map::Entry::Occupied(mut o) => {
                for ((whole, part), (call, _)) in o.get_mut().iter_mut().zip(reducers).zip(calls) {
                    whole.merge(call.func, part);
                }
                false
            }
        }
    }
}

/// An aggregate select's answer for one group: a row per time bucket (one
/// without `GROUP BY time`), a column per function. Without a lower time
/// bound (`lower` None) the buckets start at the group's first point, as
/// InfluxDB's do (TSBS's groupby-orderby-limit names only an upper bound).
#[allow(clippy::too_many_arguments)]
fn aggregate_rows(
    s: &Select,
    calls: &[(Call, String)],
    mut by_bucket: BTreeMap<i64, Vec<Reducer>>,
    fields: &BTreeMap<String, crate::series::FieldType>,
    lower: Option<i64>,
    hi: i64,
    max_cells: usize,
    aux: Option<&AuxColumns<'_>>,
) -> Result<(Vec<String>, Vec<Vec<Cell>>), String> {
    let lo = lower.unwrap_or(0);
    let Some(&first_bucket) = by_bucket.keys().next() else {
        return Ok((Vec::new(), Vec::new()));
    };
    // Each integral's answer by bucket, worked out across the buckets
    // from their points, which its reducers hold.
    let every = s.group_time.map(|(every, _)| every);
    let integral_of: Vec<Option<BTreeMap<i64, f64>>> = calls
        .iter()
        .enumerate()
        .map(|(i, (call, _))| {
            let Func::Integral(unit) = call.func else {
                return None;
            };
            let keys: Vec<i64> = by_bucket.keys().copied().collect();
            let buckets: Vec<(i64, Vec<(i64, f64)>)> = by_bucket
                .values_mut()
                .zip(&keys)
                .map(|(reducers, &b)| {
                    // Without GROUP BY time InfluxDB's one window starts
                    // at 0, whatever the range.
                    let start = if every.is_some() { b } else { 0 };
                    (start, std::mem::take(&mut reducers[i]).into_sorted_points())
                })
                .collect();
            let answers = integrals(&buckets, every, unit);
            Some(
                keys.into_iter()
                    .zip(answers)
                    .filter_map(|(b, a)| Some((b, a?)))
                    .collect(),
            )
        })
        .collect();
    // InfluxDB's integral answers only the buckets it has an area of,
    // whatever the fill.
    let only_integrals = integral_of.iter().all(Option::is_some);
    let selector_time = s.group_time.is_none() && calls.len() == 1 && calls[0].0.func.selects();
    // Each bucket as the fold keyed it, and the time it is answered at.
    // Of the rows they make, those at `answered` are shown: the others,
    // beyond a LIMIT's window, are made only for fill(linear) to draw its
    // line through (every bucket makes a row unless fill(none)).
    let mut answered: Option<std::ops::Range<usize>> = None;
    let buckets: Vec<(i64, i64)> = match s.group_time {
        Some((every, offset)) => {
            let first = checked_bucket_of(lower.unwrap_or(first_bucket), every, offset);
            let last = checked_bucket_of(hi, every, offset);
            // Checked: a bound as early as 1677 is a valid time.
            let n = first
                .zip(last)
                .and_then(|(first, last)| last.checked_sub(first))
                .map(|span| span / every + 1);
            let (first, last, n) = match (first, last, n) {
                (Some(first), Some(last), Some(n)) if n <= 1_000_000 => (first, last, n),
                (_, _, n) => {
                    let n = n.map_or("too many".to_string(), |n| n.to_string());
                    return Err(format!(
                        "GROUP BY time gives {n} buckets over the time range: narrow the range or widen the interval"
                    ));
                }
            };
            if s.fill == Fill::None || only_integrals {
                // Only buckets with values are answered: those the fold
                // made, however many the range holds.
                by_bucket
                    .range(first..=last)
                    .map(|(&b, _)| (b, b))
                    .collect()
            } else {
                // Every bucket is a row, empty or not; under a LIMIT only
                // the OFFSET + n at the answer's start are shown. Making
                // rows for the rest took gigabytes for `LIMIT 10`.
                let shown = window_buckets(s).map_or(n, |w| w.min(n));
                let (from, to) = if s.descending {
                    (n - shown, n)
                } else {
                    (0, shown)
                };
                let cells = (shown as usize).saturating_mul(calls.len() + 1);
                if cells > max_cells {
                    return Err(too_many_values(max_cells));
                }
                let at = |i: i64| first + i * every;
                let valued = |(&b, _): (&i64, _)| (b, b);
                let linear = s.fill == Fill::Linear;
                let mut buckets: Vec<(i64, i64)> = Vec::new();
                if linear {
                    buckets.extend(by_bucket.range(first..at(from)).map(valued));
                }
                let before = buckets.len();
                buckets.extend((from..to).map(|i| (at(i), at(i))));
                answered = Some(before..buckets.len());
                if linear && to < n {
                    buckets.extend(by_bucket.range(at(to)..=last).map(valued));
                }
                buckets
            }
        }
        // One bucket: read from 1970 at the earliest, answered at the
        // lower bound as written (before 1970 too, as InfluxDB does), but
        // InfluxDB's integral of floats, which answers at 0.
        None if calls.iter().all(|(call, _)| {
            matches!(call.func, Func::Integral(_))
                && fields.get(&call.field) == Some(&crate::series::FieldType::Float)
        }) =>
        {
            vec![(first_bucket, 0)]
        }
        None => vec![(first_bucket, lo)],
    };
    let mut rows: Vec<Vec<Cell>> = Vec::new();
    // Per row, which of its cells (after the time) `fill` may fill: those
    // of a call with no point in the bucket, as InfluxDB fills only empty
    // intervals (a stddev of one value stays null, an integral is never
    // filled), and any null beside a selector, as InfluxDB fills them.
    let mut fillable: Vec<Vec<bool>> = Vec::new();
    // The point each row's selector chose, for the columns beside it.
    let mut chosen_points: Vec<Option<(i64, u32)>> = Vec::new();
    for (key, b) in buckets {
        let mut reducers = by_bucket.remove(&key);
        let mut row = vec![Cell::Time(b)];
        let mut empty = Vec::with_capacity(calls.len());
        let mut any = false;
        let mut chosen = None;
        // A bucket with a point is answered under fill(none) though its
        // answer be null (a stddev of one value).
        let mut had_points = false;
        for (i, (call, _)) in calls.iter().enumerate() {
            let reducer = reducers
                .as_mut()
                .map(|r| std::mem::take(&mut r[i]))
                .unwrap_or_default();
            let mut had = !reducer.is_empty();
            let (mut cell, at) = match &integral_of[i] {
                Some(answers) => (
                    answers
                        .get(&key)
                        .map_or(Cell::Null, |x| Cell::Value(Value::Float(*x))),
                    None,
                ),
                None => reducer.finish(call.func, fields.get(&call.field).copied()),
            };
            // A percentile of too few points answers nothing in InfluxDB:
            // its bucket is as empty.
            if matches!(call.func, Func::Percentile(_)) && cell == Cell::Null {
                had = false;
            }
            had_points |= had;
            empty.push(!had && integral_of[i].is_none());
            if cell != Cell::Null {
                any = true;
            } else if matches!(call.func, Func::Count | Func::CountDistinct)
                && s.fill == Fill::Null
                && fields.contains_key(&call.field)
            {
                // InfluxDB counts an empty interval as 0, not null; but a
                // field the measurement never had has no count at all.
                cell = Cell::Value(Value::Int(0));
            }
            if selector_time && let Some((t, _)) = at {
                row[0] = Cell::Time(t);
            }
            chosen = chosen.or(at);
            row.push(cell);
        }
        if !(had_points || any)
            && (s.group_time.is_none() || s.fill == Fill::None || only_integrals)
        {
            continue;
        }
        if let Some(aux) = aux {
            // InfluxDB fills a null beside the selector with a number in
            // any bucket, with the previous value in an empty one only,
            // and never draws a line through them.
            let selector_empty = empty.first().copied().unwrap_or(true);
            let aux_fillable = match s.fill {
                Fill::Value(_) => true,
                Fill::Previous => selector_empty,
                _ => false,
            };
            row.extend(aux.names.iter().map(|_| Cell::Null));
            empty.extend(aux.names.iter().map(|_| aux_fillable));
        }
        rows.push(row);
        fillable.push(empty);
        chosen_points.push(chosen);
    }
    if let Some(aux) = aux {
        // One read of each series for the points chosen in it, not one a
        // row.
        let wanted: Vec<(usize, (i64, u32))> = chosen_points
            .iter()
            .enumerate()
            .filter_map(|(i, c)| Some((i, (*c)?)))
            .collect();
        let points: Vec<(i64, u32)> = wanted.iter().map(|(_, p)| *p).collect();
        let cells = (aux.read)(&points)?;
        let from = 1 + calls.len();
        for ((row, _), cells) in wanted.into_iter().zip(cells) {
            for (j, cell) in cells.into_iter().enumerate() {
                if let Some(slot) = rows[row].get_mut(from + j) {
                    *slot = cell;
                }
            }
        }
    }
    // Filled in the order answered, as InfluxDB's fill iterator does:
    // under ORDER BY time DESC, fill(previous) takes the newer bucket's
    // value (linear is the same either way).
    if s.descending {
        rows.reverse();
        fillable.reverse();
    }
    let answers: Vec<Option<AnswerType>> = calls
        .iter()
        .map(|(call, _)| call.func.answer_type(fields.get(&call.field).copied()))
        .collect();
    fill(
        &mut rows,
        &fillable,
        &s.fill,
        &answers,
        s.group_time.map_or(1, |(every, _)| every),
    );
    if s.descending {
        rows.reverse();
    }
    if let Some(answered) = answered {
        rows.truncate(answered.end);
        rows.drain(..answered.start);
    }
    let mut columns = vec![s.time_column.clone()];
    let names: Vec<String> = calls.iter().map(|(_, name)| name.clone()).collect();
    match aux {
        // Made unique where the columns take their places.
        Some(aux) => columns.extend(names.into_iter().chain(aux.names.iter().cloned())),
        None => columns.extend(unique(names)),
    }
    Ok((columns, rows))
}

/// The columns beside a selector (`max(usage), host`): their names, and
/// for points (time, member's origin) the cells of each.
struct AuxColumns<'a> {
    names: &'a [String],
    #[allow(clippy::type_complexity)]
    read: &'a dyn Fn(&[(i64, u32)]) -> Result<Vec<Vec<Cell>>, String>,
}

/// The cells of `columns` of each point (time, origin: a member of
/// `members`): its fields, and its series' tags. A series is read once,
/// from its first point asked for to its last; tags alone read nothing.
fn aux_cells(
    source: Source<'_>,
    members: &[Member<'_>],
    points: &[(i64, u32)],
    names: &[&str],
    fields: &BTreeMap<String, crate::series::FieldType>,
    columns: &[String],
) -> Result<Vec<Vec<Cell>>, String> {
    let wanted: BTreeSet<String> = columns
        .iter()
        .filter(|c| fields.contains_key(*c))
        .cloned()
        .collect();
    let mut by_origin: BTreeMap<u32, BTreeMap<i64, Point<'_>>> = BTreeMap::new();
    for &(time, origin) in points {
        by_origin.entry(origin).or_default().insert(
            time,
            Point {
                time,
                ..Point::default()
            },
        );
    }
    if !wanted.is_empty() {
        for (origin, at) in by_origin.iter_mut() {
            let (Some(m), Some(&lo), Some(&hi)) = (
                members.get(*origin as usize),
                at.keys().next(),
                at.keys().next_back(),
            ) else {
                continue;
            };
            let range = SeriesRange {
                lo,
                hi,
                fields: Some(&wanted),
                names,
                points: None,
            };
            scan_series(source, m.table, &m.series.key, &range, &mut |p| {
                if let Some(slot) = at.get_mut(&p.time) {
                    *slot = p.clone();
                }
                true
            })?;
        }
    }
    let no_tags = BTreeMap::new();
    Ok(points
        .iter()
        .map(|(time, origin)| {
            let tags = members
                .get(*origin as usize)
                .map_or(&no_tags, |m| &m.series.tags);
            match by_origin.get(origin).and_then(|at| at.get(time)) {
                Some(p) => point_cells(p, tags, fields, columns).0,
                None => columns.iter().map(|_| Cell::Null).collect(),
            }
        })
        .collect())
}

/// A point's cells of `columns`: its fields' values, its series' tags
/// (a name that is a field is never a tag), null for the others; and
/// whether a field had a value.
fn point_cells(
    p: &Point<'_>,
    tags: &BTreeMap<String, String>,
    fields: &BTreeMap<String, crate::series::FieldType>,
    columns: &[String],
) -> (Vec<Cell>, bool) {
    let mut any_field = false;
    let cells = columns
        .iter()
        .map(|c| {
            if let Some(v) = p.fields.get(c) {
                any_field = true;
                Cell::Value(v.clone())
            } else if !fields.contains_key(c)
                && let Some(t) = tags.get(c)
            {
                Cell::Value(Value::Str(t.clone()))
            } else {
                Cell::Null
            }
        })
        .collect();
    (cells, any_field)
}

/// Whether the statement calls `integral`.
fn calls_integral(s: &Select) -> bool {
    s.fields.iter().any(|f| {
        matches!(&f.expr, SelectExpr::Call { func, .. } | SelectExpr::CallEach { func, .. } if func == "integral")
    })
}

/// The statement's call of a function that answers chosen rows (`top`,
/// `bottom`, `distinct`, `sample`), if it has one.
fn rows_call(s: &Select) -> Result<Option<RowsCall>, String> {
    for f in &s.fields {
        let (func, field, tags) = match &f.expr {
            SelectExpr::Rank {
                bottom,
                field,
                n,
                tags,
            } => (
                RowsFunc::Rank {
                    bottom: *bottom,
                    n: *n,
                },
                field,
                tags.clone(),
            ),
            SelectExpr::Distinct {
                field,
                count: false,
            } => (RowsFunc::Distinct, field, Vec::new()),
            SelectExpr::Call { func, field, arg } if func == "sample" => (
                RowsFunc::Sample(super::influx_rows::sample_size(*arg)?),
                field,
                Vec::new(),
            ),
            _ => continue,
        };
        return Ok(Some(RowsCall {
            func,
            field: field.clone(),
            tags,
            name: f.alias.clone().unwrap_or_else(|| func.name().to_string()),
        }));
    }
    Ok(None)
}

/// InfluxDB's refusal of `top` and `bottom` over strings and booleans,
/// and halite's of `top(x, f, n)` by a field `f` rather than a tag.
fn rows_refusal(
    call: &RowsCall,
    fields: &BTreeMap<String, crate::series::FieldType>,
) -> Option<String> {
    let RowsFunc::Rank { .. } = call.func else {
        return None;
    };
    let name = call.func.name();
    if let Some(by_field) = call.tags.iter().find(|t| fields.contains_key(*t)) {
        return Some(format!(
            "{name}() by a field ({by_field}) is not answered by halite yet: name tags"
        ));
    }
    match fields.get(&call.field)? {
        crate::series::FieldType::String => Some(format!(
            "unsupported {name} iterator type: *query.stringInterruptIterator"
        )),
        crate::series::FieldType::Boolean => Some(format!(
            "unsupported {name} iterator type: *query.booleanInterruptIterator"
        )),
        _ => None,
    }
}

/// A call that answers chosen rows, as [`chosen_rows`] answers it.
struct RowsCall {
    func: RowsFunc,
    field: String,
    /// `top(x, tag…, n)`'s tags: a column each, after the call's.
    tags: Vec<String>,
    name: String,
}

/// One group's answer of `top`, `bottom`, `distinct` or `sample`: per
/// time bucket (one without `GROUP BY time`) the rows of what the function
/// chose, a chosen point's at its time with its tags' and the columns'
/// cells beside it (`raw_fields`, named `raw_names` after the time), a
/// distinct value's at the bucket's time. No row for an empty bucket,
/// whatever the fill, as InfluxDB answers them; under ORDER BY time DESC
/// the buckets come newest first, each one's rows still in time order.
#[allow(clippy::too_many_arguments)]
fn chosen_rows(
    s: &Select,
    call: &RowsCall,
    group: &[&SeriesData<'_>],
    fields: &BTreeMap<String, crate::series::FieldType>,
    raw_fields: &[String],
    raw_names: &[String],
    lower: Option<i64>,
) -> (Vec<String>, Vec<Vec<Cell>>) {
    // The group's points with a value of the field, in time order (of one
    // time, in series order).
    let mut points: Vec<(i64, usize, &Point<'_>, &Value)> = Vec::new();
    for (order, d) in group.iter().enumerate() {
        for p in &d.points {
            if let Some(v) = p.fields.get(&call.field) {
                points.push((p.time, order, p, v));
            }
        }
    }
    points.sort_by_key(|&(t, order, _, _)| (t, order));
    let tag_values = |order: usize| -> Vec<Option<&String>> {
        call.tags.iter().map(|t| group[order].tags.get(t)).collect()
    };
    // The combinations of the tags' values, numbered in their order.
    let mut combinations: BTreeMap<Vec<Option<&String>>, usize> = BTreeMap::new();
    if !call.tags.is_empty() {
        for order in 0..group.len() {
            combinations.insert(tag_values(order), 0);
        }
        for (i, n) in combinations.values_mut().enumerate() {
            *n = i;
        }
    }
    let bucket_of_time = |t: i64| match s.group_time {
        Some((every, offset)) => bucket_of(t, every, offset),
        None => lower.unwrap_or(0),
    };
    let mut buckets: Vec<Vec<Vec<Cell>>> = Vec::new();
    let mut at = 0;
    while at < points.len() {
        let bucket = bucket_of_time(points[at].0);
        let run = points[at..]
            .iter()
            .take_while(|p| bucket_of_time(p.0) == bucket)
            .count();
        let run = &points[at..at + run];
        at += run.len();
        let entries: Vec<Entry<'_>> = run
            .iter()
            .enumerate()
            .map(|(i, &(time, order, _, value))| Entry {
                time,
                value,
                // Without tags named, every point is its own combination.
                combination: if call.tags.is_empty() {
                    i
                } else {
                    combinations.get(&tag_values(order)).copied().unwrap_or(0)
                },
            })
            .collect();
        let rows = match super::influx_rows::choose(call.func, &entries, bucket as u64) {
            Chosen::Values(values) => values
                .into_iter()
                .map(|v| vec![Cell::Time(bucket), Cell::Value(v)])
                .collect(),
            Chosen::Entries(chosen) => chosen
                .into_iter()
                .map(|i| {
                    let (time, order, p, value) = run[i];
                    let mut row = vec![Cell::Time(time), Cell::Value(value.clone())];
                    row.extend(
                        tag_values(order)
                            .into_iter()
                            .map(|t| t.map_or(Cell::Null, |t| Cell::Value(Value::Str(t.clone())))),
                    );
                    row.extend(point_cells(p, group[order].tags, fields, raw_fields).0);
                    row
                })
                .collect(),
        };
        buckets.push(rows);
    }
    if s.descending {
        buckets.reverse();
    }
    let mut names = vec![call.name.clone()];
    if call.func != RowsFunc::Distinct {
        names.extend(call.tags.iter().cloned());
        names.extend(raw_names.iter().skip(1).cloned());
    }
    let mut columns = vec![s.time_column.clone()];
    columns.extend(names);
    (columns, buckets.into_iter().flatten().collect())
}

/// Puts the call's columns (the `width` after the time, which a call
/// answering beside columns makes first) after the first `before` of the
/// others, as the select list orders them (`SELECT host, max(x)`), and
/// makes the names unique in that order.
fn place_call_columns(
    mut columns: Vec<String>,
    rows: &mut [Vec<Cell>],
    width: usize,
    before: usize,
) -> Vec<String> {
    let shift = |cells: &mut [Cell]| {
        if cells.len() > width + before {
            cells[1..1 + width + before].rotate_left(width);
        }
    };
    if columns.len() > width + before {
        columns[1..1 + width + before].rotate_left(width);
    }
    for row in rows.iter_mut() {
        shift(row);
    }
    let time = columns.remove(0);
    let mut out = vec![time];
    out.extend(unique(columns));
    out
}

/// `fill(previous | linear | N)` over rows of time buckets `every` apart
/// (`null` and `none` were decided when the rows were made). `answers`
/// gives each call's column type: InfluxDB fills an integer column with
/// integers (`fill(1.5)` and a linear 2.5 both truncate to 2), a float
/// column with floats (`fill(0)` is 0.0 there), and a string or boolean
/// column with `""` or `false` whatever the number.
fn fill(
    rows: &mut [Vec<Cell>],
    fillable: &[Vec<bool>],
    how: &Fill,
    answers: &[Option<AnswerType>],
    every: i64,
) {
    let columns = rows.first().map_or(0, Vec::len);
    let may_fill = |i: usize, c: usize| fillable.get(i).and_then(|f| f.get(c - 1)) == Some(&true);
    for c in 1..columns {
        let answer = answers.get(c - 1).copied().flatten();
        match how {
            Fill::Value(v) => {
                let value = match answer {
                    Some(AnswerType::Integer) => Value::Int(*v as i64),
                    Some(AnswerType::Float) => Value::Float(*v),
                    Some(AnswerType::Boolean) => Value::Bool(false),
                    Some(AnswerType::String) => Value::Str(String::new()),
                    None if v.fract() == 0.0 && v.abs() < 9.0e15 => Value::Int(*v as i64),
                    None => Value::Float(*v),
                };
                for (i, r) in rows.iter_mut().enumerate() {
                    if r[c] == Cell::Null && may_fill(i, c) {
                        r[c] = Cell::Value(value.clone());
                    }
                }
            }
            Fill::Previous => {
                // A null answered (a stddev of one value) is InfluxDB's
                // NaN point: the one after it takes it, null.
                let mut last = Cell::Null;
                for (i, r) in rows.iter_mut().enumerate() {
                    if r[c] != Cell::Null {
                        last = r[c].clone();
                    } else if may_fill(i, c) {
                        r[c] = last.clone();
                    } else {
                        last = Cell::Null;
                    }
                }
            }
            Fill::Linear => {
                // The points a line is drawn between; a null answered (a
                // stddev of one value) is InfluxDB's NaN point, and no
                // line is drawn to it.
                let known: Vec<(usize, i64, Option<f64>)> = rows
                    .iter()
                    .enumerate()
                    .filter_map(|(i, r)| match (&r[0], &r[c]) {
                        (Cell::Time(t), Cell::Value(v)) => Some((i, *t, as_f64(v))),
                        (Cell::Time(t), Cell::Null) if !may_fill(i, c) => Some((i, *t, None)),
                        _ => None,
                    })
                    .collect();
                for w in known.windows(2) {
                    let ((i0, t0, Some(v0)), (i1, t1, Some(v1))) = (w[0], w[1]) else {
                        continue;
                    };
                    // InfluxDB's line through the two points, in its
                    // units (bucket numbers, Go's division) and order of
                    // operations: an integer column truncates what its
                    // float arithmetic gives.
                    let slope = (v1 - v0) / ((t1 / every - t0 / every) as f64);
                    for (i, r) in rows.iter_mut().enumerate().take(i1).skip(i0 + 1) {
                        if !may_fill(i, c) {
                            continue;
                        }
                        if let Cell::Time(t) = r[0] {
                            let x = slope * ((t / every - t0 / every) as f64) + v0;
                            r[c] = Cell::Value(match answer {
                                Some(AnswerType::Integer) => Value::Int(x as i64),
                                _ => Value::Float(x),
                            });
                        }
                    }
                }
            }
            Fill::Null | Fill::None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bounds as early as 1677 are valid times: their bucket is worked out
    /// where it fits and refused where it does not, never wrapped.
    #[test]
    fn buckets_of_early_bounds_are_checked_not_wrapped() {
        let hour = 3_600_000_000_000;
        for t in [-1, -hour, -hour - 1, 0, 5 * hour + 3, i64::MAX - hour] {
            for offset in [0, 60_000_000_000] {
                assert_eq!(
                    checked_bucket_of(t, hour, offset),
                    Some(bucket_of(t, hour, offset)),
                    "{t} {offset}"
                );
            }
        }
        assert_eq!(checked_bucket_of(i64::MIN + 1, hour, 0), None);
        assert_eq!(checked_bucket_of(i64::MIN, 60_000_000_000, 1), None);
    }
}
