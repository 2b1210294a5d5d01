//! Prometheus' HTTP query API under `/prometheus` (Mimir's convention:
//! halite's own `POST /api/v1/query` holds the bare path), so Grafana's
//! Prometheus data source reads halite with the URL
//! `http://<host>:<port>/prometheus`. Routing and codecs only: PromQL is
//! `prom/`, the reads `query/prom_read.rs`. A database other than
//! `prometheus` is chosen with `?db=` (Grafana's "custom query
//! parameters").

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value as Json, json};

use super::state::AppState;
use crate::catalog::TableName;
use crate::prom::answers::{self, bad_data};
use crate::prom::{Engine, EvalError, QueryRange};
use crate::query::prom_read::{DatabaseReader, MatchOp, Matcher, ReadRange};

/// Prometheus' `query.timeout` default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// A query's parameters, from the URL and a form body alike.
struct Params(Vec<(String, String)>);

impl Params {
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn all(&self, name: &str) -> impl Iterator<Item = &str> {
        self.0
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn params(query: Option<String>, method: &Method, body: &[u8]) -> Result<Params, EvalError> {
    let mut all: Vec<(String, String)> = match &query {
        Some(q) => serde_urlencoded::from_str(q)
            .map_err(|e| bad_data(format!("cannot read the URL's parameters: {e}")))?,
        None => Vec::new(),
    };
    if method == Method::POST && !body.is_empty() {
        let form = std::str::from_utf8(body).map_err(|_| bad_data("the form body is not UTF-8"))?;
        let more: Vec<(String, String)> = serde_urlencoded::from_str(form)
            .map_err(|e| bad_data(format!("cannot read the form body: {e}")))?;
        all.extend(more);
    }
    Ok(Params(all))
}

fn answer(result: Result<Json, EvalError>) -> Response {
    let (status, body) = match result {
        Ok(json) => (200, json),
        Err(e) => answers::error_body(&e),
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (status, axum::Json(body)).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

fn samples_table(p: &Params) -> Result<TableName, EvalError> {
    let db = p.get("db").unwrap_or(super::state::PROMETHEUS_DB);
    TableName::parse(&format!("{db}:{}", crate::ingest::databases::SAMPLES_TABLE))
        .map_err(|e| bad_data(format!("`db` must name a database (a namespace): {e}")))
}

fn timeout(p: &Params) -> Result<Duration, EvalError> {
    match p.get("timeout") {
        Some(t) => {
            let ms = answers::parse_duration_param(t, "timeout")?;
            Ok(Duration::from_millis(ms.max(0) as u64).min(DEFAULT_TIMEOUT))
        }
        None => Ok(DEFAULT_TIMEOUT),
    }
}

/// A query's own thread: PromQL's tree is walked recursively, so it
/// gets a stack that [`crate::prom::MAX_NESTING`] levels cannot exhaust
/// (only the pages it touches are ever committed).
async fn blocking(
    f: impl FnOnce() -> Result<Json, EvalError> + Send + 'static,
) -> Result<Json, EvalError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("promql".into())
        .stack_size(QUERY_STACK)
        .spawn(move || {
            let _ = tx.send(f());
        });
    if let Err(e) = spawned {
        return Err(EvalError::Execution(format!(
            "cannot start the query's thread: {e}"
        )));
    }
    rx.await.unwrap_or_else(|_| {
        Err(EvalError::Execution(
            "the query's thread failed (a fault in halite: please report it)".into(),
        ))
    })
}

const QUERY_STACK: usize = 64 << 20;

fn parse_expr(p: &Params) -> Result<promql_parser::parser::Expr, EvalError> {
    let text = p
        .get("query")
        .ok_or_else(|| bad_data("invalid parameter \"query\": missing"))?;
    crate::prom::parse(text).map_err(|e| bad_data(format!("invalid parameter \"query\": {e}")))
}

/// `expr` over the database `p` names, at every step of `range`.
fn evaluate(
    s: &AppState,
    p: &Params,
    expr: &promql_parser::parser::Expr,
    range: QueryRange,
) -> Result<crate::prom::Value, EvalError> {
    let mut reader = DatabaseReader::new(&s.store, &s.tag_sets, samples_table(p)?);
    let mut engine = Engine::new(
        &mut reader,
        range,
        s.prometheus.max_read_samples,
        timeout(p)?,
    );
    engine.evaluate(expr, range)
}

/// `GET|POST /prometheus/api/v1/query`.
pub(super) async fn query(
    State(s): State<Arc<AppState>>,
    method: Method,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> Response {
    let run = move || -> Result<Json, EvalError> {
        let p = params(raw, &method, &body)?;
        let expr = parse_expr(&p)?;
        let time = match p.get("time") {
            Some(t) => answers::parse_time(t, "time")?,
            None => s.clock.now_ms() as i64,
        };
        let range = QueryRange {
            start_ms: time,
            end_ms: time,
            step_ms: 1,
        };
        let value = evaluate(&s, &p, &expr, range)?;
        Ok(answers::success(answers::instant_data(value, time)))
    };
    answer(blocking(run).await)
}

/// `GET|POST /prometheus/api/v1/query_range`.
pub(super) async fn query_range(
    State(s): State<Arc<AppState>>,
    method: Method,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> Response {
    let run = move || -> Result<Json, EvalError> {
        let p = params(raw, &method, &body)?;
        let expr = parse_expr(&p)?;
        let need = |name: &str| {
            p.get(name)
                .ok_or_else(|| bad_data(format!("invalid parameter \"{name}\": missing")))
        };
        let start = answers::parse_time(need("start")?, "start")?;
        let end = answers::parse_time(need("end")?, "end")?;
        let step = answers::parse_duration_param(need("step")?, "step")?;
        let range = QueryRange {
            start_ms: start,
            end_ms: end,
            step_ms: step,
        };
        let value = evaluate(&s, &p, &expr, range)?;
        Ok(answers::success(answers::range_data(value, range)?))
    };
    answer(blocking(run).await)
}

/// The series `match[]` selects (every series without one) between
/// `start` and `end` (all time by default), their labels only.
fn matched_series(
    s: &AppState,
    p: &Params,
    required: bool,
) -> Result<Vec<Vec<(String, String)>>, EvalError> {
    let start = match p.get("start") {
        Some(t) => answers::parse_time(t, "start")?,
        None => i64::MIN / 2,
    };
    let end = match p.get("end") {
        Some(t) => answers::parse_time(t, "end")?,
        None => i64::MAX / 2,
    };
    let mut selectors = Vec::new();
    for m in p.all("match[]") {
        let expr = crate::prom::parse(m)
            .map_err(|e| bad_data(format!("invalid parameter \"match[]\": {e}")))?;
        let promql_parser::parser::Expr::VectorSelector(vs) = expr else {
            return Err(bad_data(format!(
                "invalid parameter \"match[]\": {m} is not a series selector"
            )));
        };
        selectors.push(crate::prom::engine::matchers_of(&vs));
    }
    if selectors.is_empty() {
        if required {
            return Err(bad_data("no match[] parameter provided"));
        }
        selectors.push(vec![Matcher {
            op: MatchOp::Regex,
            name: "__name__".into(),
            value: ".+".into(),
        }]);
    }
    let mut reader = DatabaseReader::new(&s.store, &s.tag_sets, samples_table(p)?);
    let mut out = std::collections::BTreeSet::new();
    for matchers in selectors {
        let range = ReadRange {
            start_ms: start.max(0),
            end_ms: end,
            labels_only: true,
        };
        for (labels, _) in reader.read(&matchers, range, s.prometheus.max_read_samples)? {
            out.insert(labels);
        }
    }
    Ok(out.into_iter().collect())
}

fn limited<T>(mut v: Vec<T>, p: &Params) -> Result<Vec<T>, EvalError> {
    if let Some(limit) = p.get("limit") {
        let n: usize = limit
            .parse()
            .map_err(|_| bad_data(format!("invalid parameter \"limit\": {limit}")))?;
        if n > 0 {
            v.truncate(n);
        }
    }
    Ok(v)
}

/// `GET|POST /prometheus/api/v1/series`.
pub(super) async fn series(
    State(s): State<Arc<AppState>>,
    method: Method,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> Response {
    answer(
        blocking(move || {
            let p = params(raw, &method, &body)?;
            let all = matched_series(&s, &p, true)?;
            let data: Vec<Json> = limited(all, &p)?
                .into_iter()
                .map(|labels| {
                    Json::Object(
                        labels
                            .into_iter()
                            .map(|(k, v)| (k, Json::String(v)))
                            .collect(),
                    )
                })
                .collect();
            Ok(answers::success(Json::Array(data)))
        })
        .await,
    )
}

/// `GET|POST /prometheus/api/v1/labels`.
pub(super) async fn labels(
    State(s): State<Arc<AppState>>,
    method: Method,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> Response {
    answer(
        blocking(move || {
            let p = params(raw, &method, &body)?;
            let names: std::collections::BTreeSet<String> = matched_series(&s, &p, false)?
                .into_iter()
                .flatten()
                .map(|(k, _)| k)
                .collect();
            Ok(answers::success(json!(limited(
                names.into_iter().collect(),
                &p
            )?)))
        })
        .await,
    )
}

/// `GET /prometheus/api/v1/label/{name}/values`.
pub(super) async fn label_values(
    State(s): State<Arc<AppState>>,
    Path(name): Path<String>,
    method: Method,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> Response {
    answer(
        blocking(move || {
            let p = params(raw, &method, &body)?;
            if !crate::prom::engine::valid_label_name(&name) {
                return Err(bad_data(format!("invalid label name: \"{name}\"")));
            }
            let values: std::collections::BTreeSet<String> = matched_series(&s, &p, false)?
                .into_iter()
                .flatten()
                .filter(|(k, _)| *k == name)
                .map(|(_, v)| v)
                .collect();
            Ok(answers::success(json!(limited(
                values.into_iter().collect(),
                &p
            )?)))
        })
        .await,
    )
}

/// `GET /prometheus/api/v1/status/buildinfo`.
pub(super) async fn buildinfo() -> Response {
    answer(Ok(answers::buildinfo()))
}

/// `GET /prometheus/api/v1/metadata`: halite keeps no metric metadata
/// (remote write 1.0 sends it apart, and it is not stored yet).
pub(super) async fn metadata() -> Response {
    answer(Ok(answers::success(json!({}))))
}
