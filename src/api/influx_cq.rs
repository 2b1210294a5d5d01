//! InfluxQL continuous queries: `CREATE`, `DROP` and `SHOW CONTINUOUS
//! QUERIES`, and InfluxDB 1.6's schedule (`services/continuous_querier`):
//! every second (the loop is `influx.rs`'s) each query whose next run is
//! due computes its `SELECT … INTO` over the buckets it covers. The queries are kept in the
//! catalog; when each last ran is kept in memory, as in InfluxDB (a
//! restarted server runs each at once, over its last interval).

use std::collections::HashMap;

use serde_json::{Value as Json, json};

use super::state::AppState;
use crate::catalog::ContinuousQuery;
use crate::error::Error;
use crate::query::influxql::{self, CompareOp, Expr, Operand, Select, Statement};

/// How often due queries are looked for (InfluxDB's `run-interval`).
pub(super) const RUN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// `CREATE CONTINUOUS QUERY name ON db …`: the same statement again is no
/// error, another of that name is.
pub(super) fn create(
    s: &AppState,
    name: &str,
    on: &str,
    select: &Select,
    text: &str,
) -> Result<(), String> {
    let catalog = s.store.catalog();
    let exists = |db: &str| catalog.has_namespace(db);
    if !exists(on) {
        return Err(format!("database not found: {on}"));
    }
    if let Some(into) = &select.into {
        let db = into.database.as_deref().unwrap_or(on);
        if !exists(db) {
            return Err(format!("database not found: {db}"));
        }
        let policies = catalog.retention_policies(db);
        if let Err(rp) = policies.resolve(into.retention_policy.as_deref()) {
            return Err(format!("retention policy not found: {db}.{rp}"));
        }
    }
    if s.store.is_cluster() {
        return Err("continuous queries are not supported in cluster mode yet".into());
    }
    let mut exists_otherwise = false;
    catalog
        .update_continuous_queries(on, |queries| {
            if let Some(q) = queries.iter().find(|q| q.name == name) {
                exists_otherwise = q.query != text;
                return Ok(None);
            }
            queries.push(ContinuousQuery {
                name: name.into(),
                query: text.into(),
            });
            Ok(Some(()))
        })
        .map_err(|e| e.to_string())?;
    if exists_otherwise {
        return Err("continuous query already exists".into());
    }
    Ok(())
}

/// `DROP CONTINUOUS QUERY name ON db`: a missing one is no error.
pub(super) fn drop(s: &AppState, name: &str, on: &str) -> Result<(), String> {
    match s.store.catalog().update_continuous_queries(on, |queries| {
        let before = queries.len();
        queries.retain(|q| q.name != name);
        Ok((queries.len() != before).then_some(()))
    }) {
        Ok(_) | Err(Error::NotFound(_)) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// `SHOW CONTINUOUS QUERIES`: a series per database `sees` lets the
/// caller see, each query's name and statement.
pub(super) fn show(s: &AppState, sees: impl Fn(&str) -> bool) -> Vec<Json> {
    let catalog = s.store.catalog();
    let queries = catalog.continuous_queries();
    catalog
        .namespaces()
        .into_iter()
        .filter(|db| sees(db))
        .map(|db| {
            let mut series = json!({ "name": db, "columns": ["name", "query"] });
            if let Some(of_db) = queries.get(&db) {
                series["values"] = json!(
                    of_db
                        .iter()
                        .map(|q| json!([q.name, q.query]))
                        .collect::<Vec<_>>()
                );
            }
            series
        })
        .collect()
}

/// When a continuous query runs next, as InfluxDB 1.6 schedules it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// The run's time as the next one counts from.
    pub last_run: i64,
    /// The buckets it computes, `[start, end)` (ns); `None`: none yet.
    pub range: Option<(i64, i64)>,
}

/// Whether a query of `GROUP BY time(interval, offset)` with `RESAMPLE
/// EVERY every FOR for_` runs at `now` (all ns), having last run at
/// `last_run`; `None` when it does not.
pub fn schedule(
    now: i64,
    interval: i64,
    offset: i64,
    every: Option<i64>,
    for_: Option<i64>,
    last_run: Option<i64>,
) -> Option<Due> {
    if interval <= 0 {
        return None;
    }
    let mut resample_every = every.filter(|e| *e > 0).unwrap_or(interval);
    let next_run = match last_run {
        Some(last) => {
            let next = last.checked_add(resample_every)?;
            if next > now {
                return None;
            }
            next
        }
        None => now,
    };
    let truncate = |t: i64, by: i64| t.checked_sub(t.rem_euclid(by));
    let last_run = truncate(now.checked_sub(offset)?, resample_every)?.checked_add(offset)?;
    let resample_for = for_
        .filter(|f| *f > 0)
        .unwrap_or(if interval < resample_every {
            resample_every
        } else {
            interval
        });
    if interval < resample_every {
        resample_every = interval;
    }
    // Checked: a duration of thousands of weeks, or a clock at the end
    // of time, runs nothing rather than a range past either end.
    let start = next_run
        .checked_add(interval)?
        .checked_sub(resample_for)?
        .checked_sub(offset)?
        .checked_sub(1)?;
    let start = truncate(start, interval)?.checked_add(offset)?;
    let end = now
        .checked_add(interval)?
        .checked_sub(resample_every)?
        .checked_sub(offset)?;
    let end = truncate(end, interval)?.checked_add(offset)?;
    Some(Due {
        last_run,
        range: (end > start).then_some((start, end)),
    })
}

/// `condition` with every time comparison in it taken for true (InfluxDB's
/// `rewriteWithoutTimeDimensions`) and the range `[start, end)` ANDed to
/// the rest, as InfluxDB sets a continuous query's range.
fn in_range(condition: Option<&Expr>, start: i64, end: i64) -> Expr {
    /// `e` without its time comparisons; `None` when it is then true.
    fn without_time(e: &Expr) -> Option<Expr> {
        match e {
            Expr::Compare { lhs, .. } if lhs.eq_ignore_ascii_case("time") => None,
            Expr::Compare { .. } => Some(e.clone()),
            Expr::And(terms) => {
                let kept: Vec<Expr> = terms.iter().filter_map(without_time).collect();
                match kept.len() {
                    0 => None,
                    1 => kept.into_iter().next(),
                    _ => Some(Expr::And(kept)),
                }
            }
            // One true side makes the whole OR true.
            Expr::Or(terms) => {
                let kept: Option<Vec<Expr>> = terms.iter().map(without_time).collect();
                kept.map(Expr::Or)
            }
        }
    }
    let bound = |op, t| Expr::Compare {
        lhs: "time".into(),
        op,
        rhs: Operand::Time(t),
    };
    let mut terms = Vec::new();
    match condition.and_then(without_time) {
        Some(Expr::And(rest)) => terms.extend(rest),
        Some(rest) => terms.push(rest),
        None => {}
    }
    terms.push(bound(CompareOp::GtEq, start));
    terms.push(bound(CompareOp::Lt, end));
    Expr::And(terms)
}

/// When each query last ran, by database and name.
pub(super) type LastRuns = HashMap<(String, String), i64>;

/// Runs, through `run` (the statement and its database), every query due
/// at `now_ns`. A query's run is recorded before it runs, and a query that
/// fails (or panics) is logged and left to its next run: it does not stop
/// the others, nor run again every second.
pub(super) fn run_due(
    s: &AppState,
    now_ns: i64,
    last_runs: &parking_lot::Mutex<LastRuns>,
    run: impl Fn(&Select, &str) -> Result<(), String>,
) {
    for (db, queries) in s.store.catalog().continuous_queries() {
        for cq in queries {
            let key = (db.clone(), cq.name.clone());
            let parsed = influxql::parse(&cq.query);
            let Ok(
                [
                    Statement::CreateContinuousQuery {
                        every,
                        for_,
                        select,
                        ..
                    },
                ],
            ) = parsed.as_deref()
            else {
                tracing::warn!(database = %db, query = %cq.name, "a continuous query that no longer parses is skipped");
                continue;
            };
            let Some((interval, offset)) = select.group_time else {
                continue;
            };
            let last = last_runs.lock().get(&key).copied();
            let Some(due) = schedule(now_ns, interval, offset, *every, *for_, last) else {
                continue;
            };
            last_runs.lock().insert(key, due.last_run);
            let Some((start, end)) = due.range else {
                continue;
            };
            if !select.calls_functions() {
                tracing::warn!(database = %db, query = %cq.name, "continuous queries must be aggregate queries");
                continue;
            }
            let ranged = Select {
                condition: Some(in_range(select.condition.as_ref(), start, end)),
                ..(**select).clone()
            };
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&ranged, &db)));
            match ran {
                Ok(Ok(())) => {
                    tracing::debug!(database = %db, query = %cq.name, start, end, "continuous query ran")
                }
                Ok(Err(e)) => {
                    tracing::warn!(database = %db, query = %cq.name, error = %e, "continuous query failed")
                }
                Err(_) => {
                    tracing::error!(database = %db, query = %cq.name, "continuous query panicked")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;
    const M: i64 = 60 * S;

    #[test]
    fn the_schedule_is_influxdbs() {
        // Made at 10:30:20, a 1m query first runs at once over nothing
        // (the minute is still filling), as InfluxDB's.
        let now = 630 * M + 20 * S;
        let due = schedule(now, M, 0, None, None, None).expect("runs");
        assert_eq!(due.range, None);
        assert_eq!(due.last_run, 630 * M);
        // Not again until the next minute, then that one minute.
        assert_eq!(
            schedule(now + 30 * S, M, 0, None, None, Some(due.last_run)),
            None
        );
        let next = schedule(631 * M + S, M, 0, None, None, Some(due.last_run)).expect("runs");
        assert_eq!(next.range, Some((630 * M, 631 * M)));
        // RESAMPLE FOR 3m: the three minutes before.
        let three = schedule(631 * M + S, M, 0, None, Some(3 * M), Some(630 * M)).expect("runs");
        assert_eq!(three.range, Some((628 * M, 631 * M)));
        // RESAMPLE EVERY 2m of a 1m query: every other minute, over both.
        let every = schedule(632 * M + S, M, 0, Some(2 * M), None, Some(630 * M)).expect("runs");
        assert_eq!(every.range, Some((630 * M, 632 * M)));
        assert_eq!(every.last_run, 632 * M);
        assert_eq!(
            schedule(633 * M, M, 0, Some(2 * M), None, Some(632 * M)),
            None
        );
        // RESAMPLE EVERY 30s of a 1m query: twice a minute, the minute
        // still filling included.
        let half =
            schedule(630 * M + 31 * S, M, 0, Some(30 * S), None, Some(630 * M)).expect("runs");
        assert_eq!(half.range, Some((630 * M, 631 * M)));
        // An offset moves the buckets (the first run covers none of them,
        // as InfluxDB's).
        let first = schedule(630 * M + 20 * S, M, 15 * S, None, None, None).expect("runs");
        assert_eq!((first.last_run, first.range), (630 * M + 15 * S, None));
        let shifted = schedule(
            631 * M + 16 * S,
            M,
            15 * S,
            None,
            None,
            Some(first.last_run),
        );
        assert_eq!(
            shifted.and_then(|d| d.range),
            Some((630 * M + 15 * S, 631 * M + 15 * S))
        );
        assert_eq!(schedule(0, 0, 0, None, None, None), None);
        // At the end of time, or of a 12,000-week interval: nothing, no
        // overflow.
        assert_eq!(
            schedule(i64::MAX, M, 0, None, None, None).and_then(|d| d.range),
            None
        );
        assert_eq!(
            schedule(
                now,
                12_000 * 7 * 24 * 60 * M,
                0,
                None,
                None,
                Some(i64::MAX - 1)
            ),
            None
        );
    }

    #[test]
    fn a_range_replaces_the_time_bounds_and_keeps_the_rest() {
        let q = influxql::parse(
            "SELECT mean(v) FROM cpu WHERE host = 'a' AND time > now() - 1h GROUP BY time(1m)",
        )
        .expect("parses");
        let [Statement::Select(sel)] = q.as_slice() else {
            panic!("{q:?}");
        };
        let Expr::And(terms) = in_range(sel.condition.as_ref(), 10, 20) else {
            panic!("an AND");
        };
        assert_eq!(terms.len(), 3);
        assert!(matches!(&terms[0], Expr::Compare { lhs, .. } if lhs == "host"));
        assert!(matches!(
            &terms[2],
            Expr::Compare {
                op: CompareOp::Lt,
                rhs: Operand::Time(20),
                ..
            }
        ));
    }

    #[test]
    fn a_time_comparison_under_or_is_taken_for_true() {
        let q = influxql::parse(
            "SELECT mean(v) FROM cpu WHERE (host = 'a' OR time > 5s) AND (dc = 'x' AND time < 9s) GROUP BY time(1m)",
        )
        .expect("parses");
        let [Statement::Select(sel)] = q.as_slice() else {
            panic!("{q:?}");
        };
        let Expr::And(terms) = in_range(sel.condition.as_ref(), 10, 20) else {
            panic!("an AND");
        };
        // The OR went (one side true), `dc = 'x'` stayed, and the range.
        assert_eq!(terms.len(), 3, "{terms:?}");
        assert!(matches!(&terms[0], Expr::Compare { lhs, .. } if lhs == "dc"));
    }
}
