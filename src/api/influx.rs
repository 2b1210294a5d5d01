//! The InfluxDB 1.x HTTP protocol, as Telegraf, Grafana and InfluxDB's
//! clients speak it: `/ping`, `/write`, `/api/v2/write` and `/query`
//! (`docs/compatibility.md` lists what is answered). A database is a
//! namespace; a measurement is a table of open tag sets in it, made on its
//! first point (`[influx]` settings). Answers take InfluxDB's shapes:
//! `{"error": "…"}` bodies, 204 for a write, `{"results": […]}`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Query as QueryParams, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value as Json, json};

use super::auth::allow;
use super::state::AppState;
use crate::auth::{Caller, Scope};
use crate::catalog::TableName;
use crate::error::Error;
use crate::ingest::line_protocol::{self, Precision};
use crate::ingest::refusal::{BEYOND_RETENTION, RefusalKind};
use crate::ingest::retention;
use crate::ingest::{self, databases};
use crate::query::influx_select::{self, Cell, NameFilter, SeriesOut, TagFilter};
use crate::query::influxql::{self, CardinalityOf, Expr, Paging, Statement};
use crate::query::measurements::{self, Measurement};
use crate::series::Dictionary;

use super::msgpack;

/// The InfluxDB version halite's protocol follows (its headers say so;
/// clients such as influxdb-python read it).
const VERSION: &str = "1.8.10";

/// An answer in InfluxDB's shape, with its headers.
fn influx(status: StatusCode, body: Option<Json>) -> Response {
    let mut resp = match body {
        Some(b) => {
            let mut text = b.to_string();
            text.push('\n');
            (status, text).into_response()
        }
        None => status.into_response(),
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert("X-Influxdb-Version", HeaderValue::from_static(VERSION));
    h.insert("X-Influxdb-Build", HeaderValue::from_static("OSS"));
    if status == StatusCode::SERVICE_UNAVAILABLE {
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

/// A request refused, answered as [`influx_error`] does.
pub(super) struct Refusal {
    status: StatusCode,
    pub(super) message: String,
}

fn refuse(status: StatusCode, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        message: message.into(),
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        influx_error(self.status, self.message)
    }
}

fn influx_error(status: StatusCode, message: impl Into<String>) -> Response {
    // Whatever a message holds of the request, the answer stays small.
    let message = crate::codec::bounded(&message.into(), super::error::MAX_MESSAGE).into_owned();
    let mut resp = influx(status, Some(json!({ "error": message })));
    if let Ok(v) = HeaderValue::from_str(&crate::codec::bounded(&message, 1024)) {
        resp.headers_mut().insert("X-Influxdb-Error", v);
    }
    resp
}

/// A store error as InfluxDB would answer it: overload and closing are
/// 503 (Telegraf drops a batch on a 4xx, retries a 5xx).
fn store_error(e: Error) -> Refusal {
    let status = match e.kind() {
        crate::error::ErrorKind::InvalidInput => StatusCode::BAD_REQUEST,
        crate::error::ErrorKind::NotFound => StatusCode::NOT_FOUND,
        crate::error::ErrorKind::Unavailable | crate::error::ErrorKind::Closed => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    refuse(status, e.to_string())
}

async fn on_blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Refusal> + Send + 'static,
) -> Result<T, Refusal> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("worker failed: {e}"),
        )
    })?
}

/// `GET|HEAD /ping`: 204, or with `verbose` 200 and the version.
pub(super) async fn ping(QueryParams(p): QueryParams<BTreeMap<String, String>>) -> Response {
    match p.get("verbose").map(String::as_str) {
        None | Some("" | "0" | "false") => influx(StatusCode::NO_CONTENT, None),
        Some(_) => influx(StatusCode::OK, Some(json!({ "version": VERSION }))),
    }
}

/// `POST /write?db=&rp=&precision=` (InfluxDB 1.x).
pub(super) async fn write_v1(
    State(s): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    QueryParams(p): QueryParams<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let precision = match p.get("precision").map(String::as_str) {
        None | Some("" | "n" | "ns") => Precision::Nanoseconds,
        Some("u") => Precision::Microseconds,
        Some("ms") => Precision::Milliseconds,
        Some("s") => Precision::Seconds,
        Some("m") => Precision::Minutes,
        Some("h") => Precision::Hours,
        Some(other) => {
            return influx_error(
                StatusCode::BAD_REQUEST,
                format!("invalid precision {other:?} (use n, u, ms, s, m or h)"),
            );
        }
    };
    if let Some(c) = p.get("consistency")
        && !["any", "one", "quorum", "all"].contains(&c.to_ascii_lowercase().as_str())
    {
        return influx_error(StatusCode::BAD_REQUEST, "invalid consistency level");
    }
    let db = p.get("db").cloned().unwrap_or_default();
    write(
        s,
        caller,
        db,
        p.get("rp").cloned(),
        precision,
        headers,
        body,
    )
    .await
}

/// `POST /api/v2/write?bucket=db[/rp]&precision=` (InfluxDB 1.8's
/// compatibility endpoint; `org` is ignored).
pub(super) async fn write_v2(
    State(s): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    QueryParams(p): QueryParams<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let precision = match p.get("precision").map(String::as_str) {
        None | Some("" | "ns") => Precision::Nanoseconds,
        Some("us") => Precision::Microseconds,
        Some("ms") => Precision::Milliseconds,
        Some("s") => Precision::Seconds,
        Some(other) => {
            return influx_error(
                StatusCode::BAD_REQUEST,
                format!("invalid precision {other:?} (use ns, us, ms or s)"),
            );
        }
    };
    let bucket = p.get("bucket").cloned().unwrap_or_default();
    let (db, rp) = match bucket.split_once('/') {
        Some((db, rp)) => (db.to_string(), Some(rp.to_string())),
        None => (bucket.clone(), None),
    };
    if db.is_empty() {
        return influx_error(
            StatusCode::NOT_FOUND,
            format!(
                "bucket name {bucket:?} is missing a database; use \"database\" or \"database/retention-policy\""
            ),
        );
    }
    write(s, caller, db, rp, precision, headers, body).await
}

fn database_exists(s: &AppState, db: &str) -> bool {
    s.store.catalog().has_namespace(db)
}

/// The database a statement names, which must exist: InfluxDB's errors
/// otherwise.
fn existing_database<'a>(s: &AppState, db: Option<&'a str>) -> Result<&'a str, String> {
    let db = db.ok_or("database name required")?;
    if !database_exists(s, db) {
        return Err(format!(
            "database not found: {}",
            crate::codec::quote_prefix(db)
        ));
    }
    Ok(db)
}

/// The body, gunzipped when it says so, within `server.max_body`.
fn body_text(
    s: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Bytes, Refusal> {
    let bytes = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            refuse(StatusCode::PAYLOAD_TOO_LARGE, "Request Entity Too Large")
        } else {
            refuse(
                StatusCode::BAD_REQUEST,
                format!("cannot read the body: {e}"),
            )
        }
    })?;
    let gzipped = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("gzip"));
    if !gzipped {
        return Ok(bytes);
    }
    let mut out = Vec::new();
    // A small body may expand a thousandfold: the limit holds for what it
    // expands to.
    let mut reader = flate2::read::GzDecoder::new(&bytes[..]).take(s.max_body as u64 + 1);
    reader
        .read_to_end(&mut out)
        .map_err(|e| refuse(StatusCode::BAD_REQUEST, e.to_string()))?;
    if out.len() > s.max_body {
        return Err(refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Request Entity Too Large",
        ));
    }
    Ok(Bytes::from(out))
}

/// What one write did, over its measurements.
#[derive(Default)]
pub(super) struct Outcome {
    pub(super) written: usize,
    /// Lines that could not be read: `unable to parse '…': reason`.
    unparsed: Listed,
    /// Points refused for what they hold (a field type conflict …).
    refused: Listed,
    over_limit: Listed,
    /// Points older than the retention policy keeps.
    beyond_retention: usize,
}

/// Reasons of one kind: all counted, the first [`super::error::MAX_LISTED`]
/// kept (an answer lists no more), so a body of millions of bad lines
/// costs counts, not a string per line.
#[derive(Default)]
struct Listed {
    first: Vec<String>,
    count: usize,
}

impl Listed {
    fn push(&mut self, reason: impl FnOnce() -> String) {
        self.count += 1;
        if self.first.len() < super::error::MAX_LISTED {
            self.first.push(reason());
        }
    }

    /// Counts `n` more whose reasons were not kept.
    fn count_more(&mut self, n: usize) {
        self.count += n;
    }
}

async fn write(
    s: Arc<AppState>,
    caller: Caller,
    db: String,
    rp: Option<String>,
    precision: Precision,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if db.is_empty() {
        return influx_error(StatusCode::BAD_REQUEST, "database is required");
    }
    // The route checked the `db` it read; this is the one written to.
    if let Err(refused) = allow(&caller, Scope::Write, Some(&db)) {
        return influx_error(StatusCode::FORBIDDEN, refused.message());
    }
    if !database_exists(&s, &db) {
        return influx_error(
            StatusCode::NOT_FOUND,
            format!("database not found: {:?}", crate::codec::quote_prefix(&db)),
        );
    }
    let target = match retention::write_target(&s.store, &db, rp.as_deref(), s.clock.now_ms()) {
        Ok(t) => t,
        Err(no_policy) => {
            return influx_error(StatusCode::INTERNAL_SERVER_ERROR, no_policy.to_string());
        }
    };
    let body = match body_text(&s, &headers, body) {
        Ok(b) => b,
        Err(r) => return r.into_response(),
    };
    let state = s.clone();
    let done = on_blocking(move || write_body(&state, &target, &body, precision)).await;
    let outcome = match done {
        Ok(o) => o,
        Err(r) => return r.into_response(),
    };
    match outcome.refusal() {
        None => influx(StatusCode::NO_CONTENT, None),
        Some((status, message)) => influx_error(status, message),
    }
}

impl Outcome {
    /// The answer InfluxDB gives a write that did not take every point
    /// (status and message); `None` when it took them all.
    pub(super) fn refusal(&self) -> Option<(StatusCode, String)> {
        if let Some(first) = self.over_limit.first.first() {
            return Some((
                StatusCode::SERVICE_UNAVAILABLE,
                format!("partial write: {first} dropped={}", self.over_limit.count),
            ));
        }
        // As InfluxDB's: a write's refusal of points says itself over the
        // lines that could not be read, and a field's type over the points
        // beyond the retention policy.
        if self.beyond_retention > 0 && self.refused.count == 0 {
            return Some((
                StatusCode::BAD_REQUEST,
                format!(
                    "partial write: {BEYOND_RETENTION} dropped={}",
                    self.beyond_retention
                ),
            ));
        }
        if self.unparsed.count + self.refused.count == 0 {
            return None;
        }
        let joined = joined_reasons(&[&self.unparsed, &self.refused]);
        if self.written == 0 && self.refused.count == 0 {
            return Some((StatusCode::BAD_REQUEST, joined));
        }
        Some((
            StatusCode::BAD_REQUEST,
            format!("partial write: {joined} dropped={}", self.refused.count),
        ))
    }
}

/// The first [`super::error::MAX_LISTED`] reasons a write was refused, of
/// `kinds` in their order, a line each, and how many more there were.
fn joined_reasons(kinds: &[&Listed]) -> String {
    let listed: Vec<&str> = kinds
        .iter()
        .flat_map(|kind| kind.first.iter().map(String::as_str))
        .take(super::error::MAX_LISTED)
        .collect();
    let mut joined = listed.join("\n");
    let all: usize = kinds.iter().map(|kind| kind.count).sum();
    if all > listed.len() {
        joined.push_str(&format!("\n… and {} more", all - listed.len()));
    }
    joined
}

/// Writes the lines of `body` into their measurements' tables (made when
/// missing), measurement by measurement, in the body's order within each.
pub(super) fn write_body(
    s: &AppState,
    target: &retention::WriteTarget,
    body: &[u8],
    precision: Precision,
) -> Result<Outcome, Refusal> {
    let db = target.tables.db.as_str();
    let text = std::str::from_utf8(body).map_err(|e| {
        refuse(
            StatusCode::BAD_REQUEST,
            format!("line protocol must be UTF-8: {e}"),
        )
    })?;
    let mut outcome = Outcome::default();
    // Made on first use, by the first measurement of open tag sets.
    let mut dictionary: Option<Arc<Dictionary>> = None;
    let now = s.clock.now_ms();
    let groups = databases::lines_by_measurement(text);
    // In cluster mode a database's tables of open tag sets travel
    // through the topic mapped to the database, whose partitions carry
    // their buckets: without one, only declared tables.
    let no_topic = s.topics.as_ref().is_some_and(|t| !t.has_database(db));
    let names: Vec<Result<TableName, databases::BadMeasurement>> = groups
        .iter()
        .map(|g| databases::measurement_table(&target.tables, &g.measurement))
        .collect();
    // Every measurement's table is found, or made (the new ones at once),
    // before any line is written.
    let named: Vec<TableName> = names.iter().flatten().cloned().collect();
    let mut tables = if no_topic {
        let found: Result<Vec<_>, Error> = named
            .iter()
            .map(|name| match databases::existing_table(&s.store, name) {
                Err(Error::NotFound(_)) => Ok(None),
                got => got.map(|t| Some(Ok(t))),
            })
            .collect();
        found.map_err(store_error)?
    } else {
        let template = s.influx.template();
        databases::tables_or_make(&s.store, &named, template.max_measurements, |name| {
            template.measurement_request(name, target.ttl_secs)
        })
        .map_err(store_error)?
        .into_iter()
        .map(Some)
        .collect()
    }
    .into_iter();
    for (group, name) in groups.iter().zip(names) {
        let text = group.text();
        let unparsed = |outcome: &mut Outcome, reason: &str| {
            for (_, l) in line_protocol::lines(&text) {
                outcome.unparsed.push(|| {
                    format!(
                        "unable to parse '{}': {reason}",
                        crate::codec::quote_prefix(l)
                    )
                });
            }
        };
        let name = match name {
            Ok(n) => n,
            Err(bad) => {
                unparsed(&mut outcome, &bad.to_string());
                continue;
            }
        };
        let table = match tables.next().flatten() {
            Some(Ok(t)) => t,
            Some(Err(no_table)) => {
                for _ in line_protocol::lines(&text) {
                    outcome.refused.push(|| {
                        format!(
                            "{no_table}: measurement {:?} is new",
                            crate::codec::quote_prefix(&group.measurement)
                        )
                    });
                }
                continue;
            }
            None => {
                unparsed(
                    &mut outcome,
                    &format!(
                        "no table `{name}`, and in cluster mode a measurement's table is made only \
                         in a database mapped to a topic ([[kafka.topics]] database = \"{db}\")"
                    ),
                );
                continue;
            }
        };
        if table.desc.key.is_open_tags() && no_topic {
            unparsed(
                &mut outcome,
                &format!(
                    "table `{name}` has open tag sets: in cluster mode they are written through \
                     the topic mapped to their database ([[kafka.topics]] database = \"{db}\")"
                ),
            );
            continue;
        }
        // A declared-key table takes the lines as a Kafka topic into it
        // does: the measurement its `metric` field, the tags its other
        // key fields.
        let dictionary = match (table.desc.key.is_open_tags(), &dictionary) {
            (false, _) => None,
            (true, Some(d)) => Some(d.clone()),
            (true, None) => {
                let d = s.tag_sets.dictionary(&s.store, db).map_err(store_error)?;
                Some(dictionary.insert(d).clone())
            }
        };
        let how = ingest::LineWrite {
            max_value_size: s.store.max_value_size(),
            precision,
            ttl_ms: None,
            oldest_ms: target.oldest_ms,
            now_ms: now,
            dictionary: dictionary.as_deref().map(|d| (d, &*s.store)),
            piece_bytes: s.write_piece,
        };
        let written = match &s.topics {
            Some(topics) => ingest::write_lines(&**topics, &table.desc, text.as_bytes(), &how),
            None => ingest::write_lines(&*s.store, &table.desc, text.as_bytes(), &how),
        };
        let done = written.map_err(|e| match e {
            ingest::WriteLinesError::Store(e) => store_error(e),
            other => refuse(StatusCode::BAD_REQUEST, other.to_string()),
        })?;
        outcome.written += done.rows;
        let rejected = &done.rejected;
        for (kind, listed) in [
            (RefusalKind::SeriesLimit, &mut outcome.over_limit),
            (RefusalKind::Conflict, &mut outcome.refused),
        ] {
            for (_, refusal) in rejected.of_kind(kind) {
                listed.push(|| refusal.reason.clone());
            }
            listed.count_more(rejected.count(kind) - rejected.of_kind(kind).count());
        }
        outcome.beyond_retention += rejected.count(RefusalKind::BeyondRetention);
        // The text of each line whose reason is kept, in one pass.
        let wanted: std::collections::BTreeMap<usize, &str> = {
            let numbers: std::collections::BTreeSet<usize> = rejected
                .of_kind(RefusalKind::Invalid)
                .map(|(number, _)| *number)
                .collect();
            line_protocol::lines(&text)
                .filter(|(number, _)| numbers.contains(number))
                .collect()
        };
        for (number, refusal) in rejected.of_kind(RefusalKind::Invalid) {
            let line = wanted.get(number).copied().unwrap_or("");
            outcome.unparsed.push(|| {
                format!(
                    "unable to parse '{}': {}",
                    crate::codec::quote_prefix(line),
                    refusal.reason
                )
            });
        }
        let invalid = RefusalKind::Invalid;
        outcome
            .unparsed
            .count_more(rejected.count(invalid) - rejected.of_kind(invalid).count());
    }
    Ok(outcome)
}

/// Whether `st` is a SELECT of functions, whose answer can hold far more
/// than was stored (a raw one holds what was).
fn aggregates(st: &Statement) -> bool {
    matches!(st, Statement::Select(select) if select
        .fields
        .iter()
        .any(|f| matches!(f.expr, influxql::SelectExpr::Call { .. })))
}

/// Most bytes of InfluxQL one request carries.
const MAX_QUERY_BYTES: usize = 1 << 20;
/// Most values the answers of one request's aggregate statements hold
/// together (each is bounded on its own too, in `query/influx_select.rs`).
const MAX_REQUEST_CELLS: usize = 10_000_000;

/// `GET|POST /query?q=&db=&epoch=`: `q` in the URL or a form body.
pub(super) async fn query(
    State(s): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    method: Method,
    QueryParams(mut p): QueryParams<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let msgpack = accepts_msgpack(&headers);
    if let Ok(b) = body
        && !b.is_empty()
        && let Ok(form) = serde_urlencoded::from_bytes::<Vec<(String, String)>>(&b)
    {
        for (k, v) in form {
            p.entry(k).or_insert(v);
        }
    }
    let Some(q) = p.get("q").filter(|q| !q.trim().is_empty()).cloned() else {
        return influx_error(StatusCode::BAD_REQUEST, "missing required parameter \"q\"");
    };
    // The parser holds a few words per character: a query is text a
    // person or a dashboard wrote, far below this.
    if q.len() > MAX_QUERY_BYTES {
        return influx_error(
            StatusCode::BAD_REQUEST,
            format!(
                "the query is {} bytes, over halite's limit of {MAX_QUERY_BYTES}",
                q.len()
            ),
        );
    }
    let statements = match influxql::parse(&q) {
        Ok(st) => st,
        Err(e) => {
            return influx_error(StatusCode::BAD_REQUEST, format!("error parsing query: {e}"));
        }
    };
    let db = p.get("db").cloned().filter(|d| !d.is_empty());
    // Every statement is checked before any runs, as InfluxDB does.
    for st in &statements {
        let (scope, ns) = statement_need(st, db.as_deref());
        // SHOW DATABASES lists what the caller may see.
        if matches!(
            st,
            Statement::ShowDatabases | Statement::ShowContinuousQueries
        ) && caller.holds(scope)
        {
            continue;
        }
        if let Err(refused) = allow(&caller, scope, ns) {
            return influx_error(
                StatusCode::FORBIDDEN,
                format!("error authorizing query: {}", refused.message()),
            );
        }
        // `SELECT … INTO` writes too, into its target's database; a
        // continuous query reads and writes later, as no caller: its maker
        // needs both now.
        let also: Vec<(Scope, Option<&str>)> = match st {
            Statement::Select(sel) => sel
                .into
                .iter()
                .map(|into| {
                    let target = into_database(into, db.as_deref(), sel.database.as_deref());
                    (Scope::Write, target)
                })
                .collect(),
            Statement::CreateContinuousQuery { on, select, .. } => {
                let mut need = vec![(Scope::Read, select.database.as_deref().or(Some(on)))];
                need.extend(
                    select
                        .into
                        .iter()
                        .map(|into| (Scope::Write, into_database(into, Some(on), None))),
                );
                need
            }
            _ => Vec::new(),
        };
        for (scope, ns) in also {
            if let Err(refused) = allow(&caller, scope, ns) {
                return influx_error(
                    StatusCode::FORBIDDEN,
                    format!("error authorizing query: {}", refused.message()),
                );
            }
        }
    }
    // Trimmed, as InfluxDB's handler trims it (`epoch= ms` is ms).
    let epoch = p
        .get("epoch")
        .map(|e| e.trim().to_string())
        .filter(|e| !e.is_empty());
    let read_only = method == Method::GET;
    let chunk_size = if p.get("chunked").is_some_and(|c| c == "true") {
        Some(
            p.get("chunk_size")
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n > 0)
                .unwrap_or(10_000),
        )
    } else {
        None
    };
    let state = s.clone();
    let body = on_blocking(move || {
        let format = CellFormat {
            epoch: epoch.as_deref(),
            msgpack,
        };
        let mut results = Vec::new();
        let mut answered = 0usize;
        for (i, st) in statements.iter().enumerate() {
            let mut answer = run(&state, &caller, st, db.as_deref(), format);
            // Each statement is bounded; their sum is too (a request can
            // repeat a statement thousands of times).
            if let Ok(Answer::Cells(series)) = &answer
                && aggregates(st)
            {
                answered = series.iter().fold(answered, |n, s| {
                    n.saturating_add(s.values.len().saturating_mul(s.columns.len()))
                });
                if answered > MAX_REQUEST_CELLS {
                    answer = Err(format!(
                        "the request's answers would hold more than {MAX_REQUEST_CELLS} values: \
                         send its statements in several requests"
                    ));
                }
            }
            let messages = (read_only && matches!(st, Statement::CreateDatabase { .. })).then(|| {
                json!([{
                    "level": "warning",
                    "text": format!("deprecated use of '{}' in a read only context, please use a POST request instead", statement_text(st)),
                }])
            });
            let failed = answer.is_err();
            results.push(StatementResult {
                id: i,
                answer,
                messages,
            });
            // InfluxDB stops at a failing statement.
            if failed {
                break;
            }
        }
        Ok(match (chunk_size, msgpack) {
            // The common answer, written straight from the cells.
            (None, false) => {
                let mut text = Vec::new();
                text.extend_from_slice(b"{\"results\":[");
                write_joined(&mut text, &results, |text, r| r.write_json(format, text));
                text.extend_from_slice(b"]}\n");
                text
            }
            (None, true) => {
                let results: Vec<Json> = results.into_iter().map(|r| r.into_json(format)).collect();
                msgpack::encode(&json!({ "results": results }))
            }
            (Some(size), msgpack) => {
                let results = results.into_iter().map(|r| r.into_json(format)).collect();
                let answers = chunked(results, size);
                if msgpack {
                    answers.iter().flat_map(msgpack::encode).collect()
                } else {
                    let mut text = String::new();
                    for a in &answers {
                        text.push_str(&a.to_string());
                        text.push('\n');
                    }
                    text.into_bytes()
                }
            }
        })
    })
    .await;
    let body = match body {
        Ok(body) => body,
        Err(r) => return r.into_response(),
    };
    let mut resp = influx(StatusCode::OK, None);
    if msgpack {
        resp.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(MSGPACK));
    }
    *resp.body_mut() = axum::body::Body::from(body);
    resp
}

/// One statement's result: its series (or error), and a warning.
struct StatementResult {
    id: usize,
    answer: Result<Answer, String>,
    messages: Option<Json>,
}

/// A statement's series: made as JSON, or a SELECT's kept as cells until
/// the answer is written (a big answer's tree of JSON values took more
/// than its reading did).
enum Answer {
    Json(Vec<Json>),
    Cells(Vec<SeriesOut>),
}

impl StatementResult {
    /// The result as JSON (InfluxDB's key order: `statement_id`,
    /// `series`, `messages`; or `statement_id`, `error`).
    fn into_json(self, format: CellFormat) -> Json {
        let mut r = match self.answer {
            Ok(answer) => {
                let series = match answer {
                    Answer::Json(series) => series,
                    Answer::Cells(out) => select_json(out, format),
                };
                let mut r = json!({ "statement_id": self.id });
                if !series.is_empty() {
                    r["series"] = Json::Array(series);
                }
                r
            }
            Err(e) => json!({ "statement_id": self.id, "error": e }),
        };
        if let Some(m) = self.messages {
            r["messages"] = m;
        }
        r
    }

    /// Writes the result as [`Self::into_json`] would print it, the cells
    /// of a SELECT straight from its answer.
    fn write_json(&self, format: CellFormat, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"statement_id\":");
        write_json_value(out, &self.id);
        match &self.answer {
            Err(e) => {
                out.extend_from_slice(b",\"error\":");
                write_json_value(out, e);
            }
            Ok(Answer::Json(series)) if !series.is_empty() => {
                out.extend_from_slice(b",\"series\":");
                write_json_value(out, series);
            }
            Ok(Answer::Cells(series)) if !series.is_empty() => {
                out.extend_from_slice(b",\"series\":[");
                write_joined(out, series, |out, s| write_series(s, format, out));
                out.push(b']');
            }
            Ok(_) => {}
        }
        if let Some(m) = &self.messages {
            out.extend_from_slice(b",\"messages\":");
            write_json_value(out, m);
        }
        out.push(b'}');
    }
}

/// Appends `v` as JSON.
fn write_json_value<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    // Writing to a Vec fails only for a value JSON cannot hold, and
    // these are numbers, strings, maps of strings and JSON values.
    let _ = serde_json::to_writer(&mut *out, v);
}

/// Writes each of `items` with `write`, commas between them.
fn write_joined<T>(
    out: &mut Vec<u8>,
    items: impl IntoIterator<Item = T>,
    mut write: impl FnMut(&mut Vec<u8>, T),
) {
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write(out, item);
    }
}

/// Writes one SELECT series as [`select_json`] makes and prints it.
fn write_series(s: &SeriesOut, format: CellFormat, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"name\":");
    write_json_value(out, &s.name);
    if let Some(tags) = &s.tags {
        out.extend_from_slice(b",\"tags\":");
        write_json_value(out, tags);
    }
    out.extend_from_slice(b",\"columns\":");
    write_json_value(out, &s.columns);
    out.extend_from_slice(b",\"values\":[");
    write_joined(out, &s.values, |out, row| {
        out.push(b'[');
        write_joined(out, row, |out, c| match c {
            Cell::Time(t) => write_json_value(out, &time_json(*t, format)),
            Cell::Value(v) => write_json_value(out, &value_json(v, format.msgpack)),
            Cell::Null => out.extend_from_slice(b"null"),
        });
        out.push(b']');
    });
    out.extend_from_slice(b"]}");
}

const MSGPACK: &str = "application/x-msgpack";

/// Whether the client asks for MessagePack (Python's `influxdb` client
/// does, on every request).
fn accepts_msgpack(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|t| t.trim().starts_with(MSGPACK)))
}

/// Writes the InfluxDB routes' JSON answers (errors, `/ping?verbose`) as
/// MessagePack when the client asks for it, as InfluxDB does; `/query`
/// writes its own, with the cells' types kept.
pub(super) async fn answer_in_accepted_format(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if !accepts_msgpack(request.headers()) {
        return next.run(request).await;
    }
    let resp = next.run(request).await;
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    parts
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(MSGPACK));
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return Response::from_parts(parts, axum::body::Body::empty());
    };
    let body = match serde_json::from_slice::<Json>(&bytes) {
        Ok(answer) => msgpack::encode(&answer),
        Err(_) => bytes.to_vec(),
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(body))
}

/// `chunked=true`: one `{"results": […]}` line per series, a series of
/// more than `size` values cut into several; `"partial": true` on every
/// piece of a series but its last, and on every line of a statement but
/// its last (InfluxDB's shape).
fn chunked(results: Vec<Json>, size: usize) -> Vec<Json> {
    let mut out = Vec::new();
    for r in results {
        let Some(series) = r.get("series").and_then(Json::as_array).cloned() else {
            out.push(json!({ "results": [r] }));
            continue;
        };
        let mut pieces = Vec::new();
        for mut s in series {
            // Taken out once: each piece copies its own values and the
            // series' few other members, not the whole series again.
            let values = match s.get_mut("values") {
                Some(Json::Array(values)) if !values.is_empty() => std::mem::take(values),
                _ => {
                    pieces.push(s);
                    continue;
                }
            };
            let n = values.len().div_ceil(size);
            let mut values = values.into_iter();
            for i in 0..n {
                let mut piece = s.clone();
                piece["values"] = Json::Array(values.by_ref().take(size).collect());
                if i + 1 < n {
                    piece["partial"] = json!(true);
                }
                pieces.push(piece);
            }
        }
        let last = pieces.len().saturating_sub(1);
        for (i, piece) in pieces.into_iter().enumerate() {
            let mut line = json!({ "statement_id": r["statement_id"].clone(), "series": [piece] });
            if i < last {
                line["partial"] = json!(true);
            }
            out.push(json!({ "results": [line] }));
        }
    }
    out
}

fn statement_text(st: &Statement) -> String {
    match st {
        Statement::CreateDatabase { name, .. } => format!("CREATE DATABASE {name}"),
        other => format!("{other:?}"),
    }
}

fn one_series(name: Option<&str>, columns: &[&str], values: Vec<Vec<Json>>) -> Json {
    let mut s = json!({ "columns": columns });
    if let Some(n) = name {
        s["name"] = json!(n);
    }
    if !values.is_empty() {
        s["values"] = json!(values);
    }
    s
}

/// The database a SHOW statement reads: `None` when it does not exist,
/// which InfluxDB answers with no series rather than an error.
fn database<'a>(
    s: &AppState,
    on: Option<&'a str>,
    db: Option<&'a str>,
) -> Result<Option<&'a str>, String> {
    let db = on.or(db).ok_or("database name required")?;
    Ok(database_exists(s, db).then_some(db))
}

/// The measurements to list: one, or every measurement of the database,
/// whatever tables and retention policies hold them.
fn measurements(s: &AppState, db: &str, from: Option<&str>) -> Result<Vec<Measurement>, String> {
    let d = dictionary_of(s, db)?;
    measurements::of_every_policy(&s.store, d.as_deref(), db, from)
}

/// A duration as Go prints one (`168h0m0s`, `1h30m0s`, `0s`), as InfluxDB
/// shows a retention policy's.
fn go_duration(ns: u64) -> String {
    if ns == 0 {
        return "0s".into();
    }
    let secs = ns / 1_000_000_000;
    let frac = ns % 1_000_000_000;
    let (h, m, sec) = (secs / 3_600, secs / 60 % 60, secs % 60);
    let seconds = if frac == 0 {
        sec.to_string()
    } else {
        format!("{sec}.{frac:09}").trim_end_matches('0').to_string()
    };
    if h > 0 {
        format!("{h}h{m}m{seconds}s")
    } else if m > 0 {
        format!("{m}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}

/// A tag key or value in a series key, escaped as line protocol does.
fn escape_tag(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, ',' | '=' | ' ') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// One statement's series (InfluxDB's answer shape), or its error.
/// How an answer's cells are written: times as `epoch` asks, and for a
/// MessagePack answer with their types kept (`msgpack.rs`).
#[derive(Clone, Copy)]
struct CellFormat<'a> {
    epoch: Option<&'a str>,
    msgpack: bool,
}

/// A time as `epoch` asks: an integer in its unit, else RFC 3339 (a
/// timestamp in MessagePack).
fn time_json(ns: i64, format: CellFormat) -> Json {
    let divisor: i64 = match format.epoch {
        None if format.msgpack => return msgpack::time(ns),
        None => return json!(influxql::format_rfc3339(ns)),
        // InfluxDB 1.6 knows `u` alone for microseconds: `us` and `µ`
        // give nanoseconds there, as any other unit it does not know.
        Some("u") => 1_000,
        Some("ms") => 1_000_000,
        Some("s") => 1_000_000_000,
        Some("m") => 60_000_000_000,
        Some("h") => 3_600_000_000_000,
        Some(_) => 1,
    };
    // Toward zero, as Go's division in InfluxDB's handler: a time before
    // 1970 is not floored (-999,999,999 ns is -999 ms).
    json!(ns / divisor)
}

/// A value as InfluxDB's JSON writes it: a whole float without a
/// fraction (Go prints 95.0 as `95`); MessagePack keeps it a float.
fn value_json(v: &crate::value::Value, msgpack: bool) -> Json {
    use crate::value::Value;
    match v {
        Value::Float(f) if !msgpack && f.fract() == 0.0 && f.abs() < 1e15 => json!(*f as i64),
        Value::Float(f) => json!(f),
        Value::Int(i) => json!(i),
        Value::Uint(u) => json!(u),
        Value::Bool(b) => json!(b),
        Value::Str(s) => json!(s),
    }
}

fn select_json(out: Vec<SeriesOut>, format: CellFormat) -> Vec<Json> {
    out.into_iter()
        .map(|s| {
            let mut j = json!({ "name": s.name });
            if let Some(tags) = s.tags {
                j["tags"] = json!(tags);
            }
            j["columns"] = json!(s.columns);
            j["values"] = Json::Array(
                s.values
                    .iter()
                    .map(|row| {
                        Json::Array(
                            row.iter()
                                .map(|c| match c {
                                    Cell::Time(t) => time_json(*t, format),
                                    Cell::Value(v) => value_json(v, format.msgpack),
                                    Cell::Null => Json::Null,
                                })
                                .collect(),
                        )
                    })
                    .collect(),
            );
            j
        })
        .collect()
}

/// The dictionary of database `db` (a table of the namespace made on
/// first use; a cluster's is on the object store).
fn dictionary_of(s: &AppState, db: &str) -> Result<Option<Arc<Dictionary>>, String> {
    s.tag_sets
        .dictionary(&s.store, db)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// A SHOW statement answered per measurement (`FROM` one, else every
/// one of the database): a series of `columns` for each measurement
/// `rows` finds something in, cut at `limit`.
fn per_measurement(
    s: &AppState,
    on: &Option<String>,
    from: &Option<String>,
    db: Option<&str>,
    paging: Paging,
    columns: &[&str],
    rows: impl Fn(&Measurement) -> Vec<Vec<Json>>,
) -> Result<Vec<Json>, String> {
    let Some(db) = database(s, on.as_deref(), db)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for m in measurements(s, db, from.as_deref())? {
        let values = paging.apply(rows(&m));
        if !values.is_empty() {
            out.push(one_series(Some(&m.name), columns, values));
        }
    }
    Ok(out)
}

/// `SHOW … [EXACT] CARDINALITY`, as InfluxDB 1.6 answers it: of the
/// whole database (series, measurements) as one `cardinality estimation`
/// where neither `FROM` nor `WHERE` narrows it (halite's estimate is the
/// exact count), else a `count` per measurement (of measurements: one).
/// `LIMIT` and `OFFSET` page each measurement's one row, as there.
#[allow(clippy::too_many_arguments)]
fn cardinality(
    s: &AppState,
    of: &CardinalityOf,
    exact: bool,
    on: &Option<String>,
    from: &Option<String>,
    condition: Option<&Expr>,
    paging: Paging,
    db: Option<&str>,
) -> Result<Vec<Json>, String> {
    let whole = matches!(of, CardinalityOf::Series | CardinalityOf::Measurements)
        && !exact
        && from.is_none()
        && condition.is_none();
    let name = on.as_deref().or(db).ok_or("database name required")?;
    let Some(db) = database(s, on.as_deref(), db)? else {
        if whole {
            return Ok(vec![one_series(
                None,
                &["cardinality estimation"],
                vec![vec![json!(0)]],
            )]);
        }
        return Err(format!("database not found: {name}"));
    };
    let filter = condition.map(TagFilter::new).transpose()?;
    let keys = match of {
        CardinalityOf::TagValues(keys) => Some(NameFilter::new(keys)?),
        _ => None,
    };
    let meets = |series: &&crate::series::NamedSeries| {
        filter.as_ref().is_none_or(|f| f.holds(&series.tags))
    };
    let mut counts: Vec<(String, usize)> = Vec::new();
    for m in measurements(s, db, from.as_deref())? {
        let count = match of {
            CardinalityOf::Series => m.series.iter().filter(meets).count(),
            CardinalityOf::Measurements => usize::from(m.series.iter().any(|x| meets(&x))),
            CardinalityOf::TagKeys => m
                .series
                .iter()
                .filter(meets)
                .flat_map(|series| series.tags.keys())
                .collect::<BTreeSet<_>>()
                .len(),
            CardinalityOf::TagValues(_) => m
                .series
                .iter()
                .filter(meets)
                .flat_map(|series| series.tags.iter())
                .filter(|(k, _)| keys.as_ref().is_some_and(|f| f.takes(k)))
                .collect::<BTreeSet<_>>()
                .len(),
            CardinalityOf::FieldKeys if m.series.iter().any(|x| meets(&x)) => m.fields.len(),
            CardinalityOf::FieldKeys => 0,
        };
        if count > 0 {
            counts.push((m.name.clone(), count));
        }
    }
    if let CardinalityOf::Measurements = of {
        let column = if whole {
            "cardinality estimation"
        } else {
            "count"
        };
        return Ok(vec![one_series(
            None,
            &[column],
            vec![vec![json!(counts.len())]],
        )]);
    }
    if whole {
        let total: usize = counts.iter().map(|(_, n)| n).sum();
        return Ok(vec![one_series(
            None,
            &["cardinality estimation"],
            vec![vec![json!(total)]],
        )]);
    }
    Ok(counts
        .into_iter()
        .filter_map(|(name, count)| {
            let values = paging.apply(vec![vec![json!(count)]]);
            (!values.is_empty()).then(|| one_series(Some(&name), &["count"], values))
        })
        .collect())
}

/// The scope a statement needs, and the database it is in (`None` for
/// `SHOW DATABASES`, which lists only what the caller may see).
fn statement_need<'a>(st: &'a Statement, db: Option<&'a str>) -> (Scope, Option<&'a str>) {
    match st {
        Statement::CreateDatabase { name, .. } | Statement::DropDatabase { name } => {
            (Scope::Admin, Some(name))
        }
        Statement::CreateRetentionPolicy { on, .. }
        | Statement::AlterRetentionPolicy { on, .. }
        | Statement::DropRetentionPolicy { on, .. } => (Scope::Admin, Some(on)),
        // As InfluxDB 1.6: dropping a measurement is an admin's, deleting
        // series a writer's.
        Statement::DropMeasurement { .. } => (Scope::Admin, db),
        Statement::DeleteSeries { .. } => (Scope::Write, db),
        Statement::CreateContinuousQuery { on, .. } | Statement::DropContinuousQuery { on, .. } => {
            (Scope::Admin, Some(on))
        }
        Statement::ShowContinuousQueries => (Scope::Read, None),
        Statement::ShowDatabases => (Scope::Read, None),
        Statement::ShowRetentionPolicies { on }
        | Statement::ShowMeasurements { on, .. }
        | Statement::ShowTagKeys { on, .. }
        | Statement::ShowTagValues { on, .. }
        | Statement::ShowFieldKeys { on, .. }
        | Statement::ShowSeries { on, .. }
        | Statement::ShowCardinality { on, .. } => (Scope::Read, on.as_deref().or(db)),
        Statement::Select(sel) => (Scope::Read, sel.database.as_deref().or(db)),
        Statement::Unsupported(_) => (Scope::Read, db),
    }
}

fn run(
    s: &AppState,
    caller: &Caller,
    st: &Statement,
    db: Option<&str>,
    format: CellFormat,
) -> Result<Answer, String> {
    if let Statement::Select(sel) = st {
        return select_of(s, sel, db).map(Answer::Cells);
    }
    run_other(s, caller, st, db, format).map(Answer::Json)
}

/// The database `INTO` writes: the one it names, else the request's (as
/// InfluxDB fills in the statement's unnamed databases), else the one the
/// statement reads.
fn into_database<'a>(
    into: &'a influxql::IntoTarget,
    request: Option<&'a str>,
    from: Option<&'a str>,
) -> Option<&'a str> {
    into.database.as_deref().or(request).or(from)
}

/// A SELECT statement's series (an `INTO`'s, the points written).
fn select_of(
    s: &AppState,
    sel: &influxql::Select,
    db: Option<&str>,
) -> Result<Vec<SeriesOut>, String> {
    let name = existing_database(s, sel.database.as_deref().or(db))?;
    let d = dictionary_of(s, name)?;
    let now = i64::try_from(s.clock.now_ms())
        .unwrap_or(i64::MAX)
        .saturating_mul(1_000_000);
    let Some(into) = &sel.into else {
        return influx_select::select(&s.store, d.as_deref(), name, sel, now);
    };
    let target = into_database(into, db, Some(name)).unwrap_or(name);
    // An empty bucket is no point: `fill(null)`'s rows of one (a count's
    // 0 among them) are not written, as InfluxDB writes none.
    let written = influxql::Select {
        fill: match &sel.fill {
            influxql::Fill::Null => influxql::Fill::None,
            other => other.clone(),
        },
        ..sel.clone()
    };
    let answer = influx_select::select(&s.store, d.as_deref(), name, &written, now)?;
    if !database_exists(s, target) {
        return Err(format!("database not found: {target}"));
    }
    let policy = retention::write_target(
        &s.store,
        target,
        into.retention_policy.as_deref(),
        s.clock.now_ms(),
    )
    .map_err(|e| e.to_string())?;
    super::influx_into::write_into(into, &answer, |text| {
        let outcome = write_body(s, &policy, text.as_bytes(), Precision::Nanoseconds)
            .map_err(|refused| refused.message)?;
        match outcome.refusal() {
            Some((_, message)) => Err(message),
            None => Ok(outcome.written),
        }
    })
}

/// Whether SHOW DATABASES lists namespace `ns`: one InfluxQL can read (a
/// table of open tag sets in it, or a declared table it reads as series),
/// or one with no tables yet (a `CREATE DATABASE` not written to). A
/// namespace of tables it cannot read, and `default` with nothing to
/// read, are not databases a dashboard could chart.
fn is_database(ns: &str, tables: &[crate::catalog::TableDescriptor]) -> bool {
    let mut own = tables
        .iter()
        .filter(|t| t.name.namespace == ns && measurements::is_measurement_table(&t.name.table))
        .peekable();
    if own.peek().is_none() {
        return ns != crate::catalog::DEFAULT_NAMESPACE;
    }
    measurements::holds_series_tables(tables, ns)
}

/// The series of a statement other than SELECT, as JSON.
fn run_other(
    s: &AppState,
    caller: &Caller,
    st: &Statement,
    db: Option<&str>,
    format: CellFormat,
) -> Result<Vec<Json>, String> {
    match st {
        Statement::CreateDatabase { name, with } => {
            let with = with.as_ref().map(|w| (w.name.as_deref(), w.spec));
            retention::create_database(&s.store, name, with).map_err(|e| e.to_string())?;
            Ok(Vec::new())
        }
        Statement::DropDatabase { name } => {
            retention::drop_database(&s.store, &s.tag_sets, name).map_err(|e| e.to_string())?;
            Ok(Vec::new())
        }
        Statement::DropMeasurement { name } => {
            let db = existing_database(s, db)?;
            let declared = measurements::measurement(
                &s.store,
                None,
                &crate::catalog::PolicyTables::autogen(db),
                name,
            )?
            .is_some();
            retention::drop_measurement(&s.store, &s.tag_sets, db, name, declared)
                .map_err(|e| e.to_string())?;
            Ok(Vec::new())
        }
        Statement::CreateContinuousQuery {
            name,
            on,
            select,
            text,
            ..
        } => {
            super::influx_cq::create(s, name, on, select, text)?;
            Ok(Vec::new())
        }
        Statement::DropContinuousQuery { name, on } => {
            super::influx_cq::drop(s, name, on)?;
            Ok(Vec::new())
        }
        Statement::ShowContinuousQueries => Ok(super::influx_cq::show(s, |db| {
            caller.sees(db) && is_database(db, &s.store.catalog().tables(None))
        })),
        Statement::DeleteSeries {
            sources,
            condition,
            drop,
        } => {
            let db = existing_database(s, db)?;
            let d = s
                .tag_sets
                .dictionary(&s.store, db)
                .map_err(|e| e.to_string())?;
            crate::query::influx_delete::delete_series(
                &s.store,
                &d,
                db,
                sources,
                condition.as_ref(),
                *drop,
            )?;
            Ok(Vec::new())
        }
        Statement::CreateRetentionPolicy {
            name,
            on,
            policy,
            default,
        } => {
            retention::create_policy(&s.store, &s.tag_sets, on, name, *policy, *default)
                .map_err(|e| e.to_string())?;
            Ok(Vec::new())
        }
        Statement::AlterRetentionPolicy {
            name,
            on,
            policy,
            default,
        } => {
            retention::alter_policy(&s.store, on, name, *policy, *default)
                .map_err(|e| e.to_string())?;
            Ok(Vec::new())
        }
        Statement::DropRetentionPolicy { name, on } => {
            retention::drop_policy(&s.store, &s.tag_sets, on, name).map_err(|e| e.to_string())?;
            Ok(Vec::new())
        }
        Statement::ShowDatabases => {
            let catalog = s.store.catalog();
            let tables = catalog.tables(None);
            let values: Vec<Vec<Json>> = catalog
                .namespaces()
                .into_iter()
                .filter(|n| caller.sees(n) && is_database(n, &tables))
                .map(|n| vec![json!(n)])
                .collect();
            Ok(vec![one_series(Some("databases"), &["name"], values)])
        }
        Statement::ShowRetentionPolicies { on } => {
            if database(s, on.as_deref(), db)?.is_none() {
                return Err(format!(
                    "database not found: {}",
                    crate::codec::quote_prefix(on.as_deref().or(db).unwrap_or_default())
                ));
            }
            let db = on.as_deref().or(db).unwrap_or_default();
            let policies = s.store.catalog().retention_policies(db);
            let values = policies
                .policies
                .iter()
                .map(|p| {
                    vec![
                        json!(p.name),
                        json!(go_duration(p.duration_ns)),
                        json!(go_duration(p.shard_group_ns)),
                        json!(p.replication),
                        json!(p.name == policies.default),
                    ]
                })
                .collect();
            Ok(vec![one_series(
                None,
                &[
                    "name",
                    "duration",
                    "shardGroupDuration",
                    "replicaN",
                    "default",
                ],
                values,
            )])
        }
        Statement::ShowMeasurements {
            on,
            with,
            condition,
            paging,
        } => {
            let Some(db) = database(s, on.as_deref(), db)? else {
                return Ok(Vec::new());
            };
            let with = with.as_ref().map(NameFilter::new).transpose()?;
            let filter = condition.as_ref().map(TagFilter::new).transpose()?;
            let values = paging.apply(
                measurements(s, db, None)?
                    .into_iter()
                    .filter(|m| with.as_ref().is_none_or(|w| w.takes(&m.name)))
                    .filter(|m| {
                        m.series
                            .iter()
                            .any(|series| filter.as_ref().is_none_or(|f| f.holds(&series.tags)))
                    })
                    .map(|m| vec![json!(m.name)])
                    .collect(),
            );
            if values.is_empty() {
                return Ok(Vec::new());
            }
            Ok(vec![one_series(Some("measurements"), &["name"], values)])
        }
        Statement::ShowTagKeys {
            on,
            from,
            condition,
            paging,
        } => {
            let filter = condition.as_ref().map(TagFilter::new).transpose()?;
            per_measurement(s, on, from, db, *paging, &["tagKey"], |m| {
                let keys: BTreeSet<String> = m
                    .series
                    .iter()
                    .filter(|series| filter.as_ref().is_none_or(|f| f.holds(&series.tags)))
                    .flat_map(|series| series.tags.keys().cloned())
                    .collect();
                keys.into_iter().map(|k| vec![json!(k)]).collect()
            })
        }
        Statement::ShowTagValues {
            on,
            from,
            keys,
            condition,
            paging,
        } => {
            let keys = NameFilter::new(keys)?;
            let filter = condition.as_ref().map(TagFilter::new).transpose()?;
            per_measurement(s, on, from, db, *paging, &["key", "value"], |m| {
                let pairs: BTreeSet<(String, String)> = m
                    .series
                    .iter()
                    .filter(|series| filter.as_ref().is_none_or(|f| f.holds(&series.tags)))
                    .flat_map(|series| series.tags.iter())
                    .filter(|(k, _)| keys.takes(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                pairs
                    .into_iter()
                    .map(|(k, v)| vec![json!(k), json!(v)])
                    .collect()
            })
        }
        Statement::ShowFieldKeys {
            on,
            retention_policy,
            from,
            paging,
        } => {
            // A policy's own, unlike the series (InfluxDB 1.6).
            let Some(db) = database(s, on.as_deref(), db)? else {
                return Ok(Vec::new());
            };
            let policy = influx_select::policy_of(&s.store, db, retention_policy.as_deref())?;
            let d = dictionary_of(s, db)?;
            let found = match from {
                Some(m) => measurements::measurement(&s.store, d.as_deref(), &policy, m)?
                    .into_iter()
                    .collect(),
                None => measurements::measurements(&s.store, d.as_deref(), &policy)?,
            };
            Ok(found
                .iter()
                .filter_map(|m| {
                    let values = paging.apply(
                        m.fields
                            .iter()
                            .map(|(f, t)| vec![json!(f), json!(t.name())])
                            .collect(),
                    );
                    (!values.is_empty())
                        .then(|| one_series(Some(&m.name), &["fieldKey", "fieldType"], values))
                })
                .collect())
        }
        Statement::ShowSeries {
            on,
            from,
            condition,
            paging,
        } => {
            let Some(db) = database(s, on.as_deref(), db)? else {
                return Ok(Vec::new());
            };
            let filter = condition.as_ref().map(TagFilter::new).transpose()?;
            let mut keys = Vec::new();
            for m in measurements(s, db, from.as_deref())? {
                for series in m.series.iter() {
                    if filter.as_ref().is_some_and(|f| !f.holds(&series.tags)) {
                        continue;
                    }
                    let mut key = escape_tag(&series.metric).replace("\\=", "=");
                    for (k, v) in &series.tags {
                        key.push(',');
                        key.push_str(&escape_tag(k));
                        key.push('=');
                        key.push_str(&escape_tag(v));
                    }
                    keys.push(key);
                }
            }
            keys.sort();
            let values = paging.apply(keys.into_iter().map(|k| vec![json!(k)]).collect());
            if values.is_empty() {
                return Ok(Vec::new());
            }
            Ok(vec![one_series(None, &["key"], values)])
        }
        Statement::ShowCardinality {
            of,
            exact,
            on,
            from,
            condition,
            paging,
        } => cardinality(s, of, *exact, on, from, condition.as_ref(), *paging, db),
        Statement::Select(sel) => Ok(select_json(select_of(s, sel, db)?, format)),
        Statement::Unsupported(what) => Err(format!(
            "halite does not answer {what} statements yet (docs/compatibility.md lists what it answers)"
        )),
    }
}

/// Runs InfluxQL's continuous queries on their schedule until `shutdown`:
/// every second, those due (`influx_cq.rs`) run as `SELECT … INTO`.
pub async fn run_continuous_queries(
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let last_runs = Arc::new(parking_lot::Mutex::new(super::influx_cq::LastRuns::new()));
    let mut ticks = tokio::time::interval(super::influx_cq::RUN_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => return,
            _ = ticks.tick() => {}
        }
        let s = state.clone();
        let runs = last_runs.clone();
        let done = tokio::task::spawn_blocking(move || {
            let now = i64::try_from(s.clock.now_ms())
                .unwrap_or(i64::MAX)
                .saturating_mul(1_000_000);
            super::influx_cq::run_due(&s, now, &runs, |select, db| {
                select_of(&s, select, Some(db)).map(drop)
            });
        })
        .await;
        if let Err(e) = done {
            tracing::error!(error = %e, "the continuous queries' run failed");
        }
    }
}
