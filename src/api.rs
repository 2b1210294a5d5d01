//! The HTTP API (JSON). Disk work runs on blocking threads, never on the
//! async runtime. Errors are `{"error": {"code", "message"}}` with a status
//! chosen from the error kind in one place ([`ApiError`]).
//!
//! | route | what |
//! |---|---|
//! | `GET /healthz`, `GET /readyz` | alive; ready (catalog loaded, WALs replayed, no fatal I/O error) |
//! | `GET/POST /api/v1/namespaces`, `DELETE /api/v1/namespaces/{ns}` | namespaces |
//! | `GET/POST /api/v1/tables`, `GET/PATCH/DELETE /api/v1/tables/{table}` | tables |
//! | `POST /api/v1/tables/{table}/compact` | major compaction of every region |
//! | `POST /api/v1/tables/{table}/flush` | flush every region's MemStore |
//! | `POST /api/v1/write?table=…&precision=ns\|us\|ms\|s` | line protocol, or JSON points |
//! | `GET /api/v1/tables/{table}/rows/{row-hex}` | get one row |
//! | `POST /api/v1/tables/{table}/scan` | raw scan |
//! | `POST /api/v1/query` | logical series query, raw or aggregated |

mod arrow;
mod error;
mod json;
mod stream;
mod token;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json_, json};

use crate::catalog::{CreateTable, TableDescriptor, TableName, from_hex};
use crate::clock::Clock;
use crate::codec::{bytes_equal, compare_bytes};
use crate::error::Error;
use crate::ingest::kafka::IngestStats;
use crate::ingest::line_protocol::Precision;
use crate::ingest::{self, PointEncoder};
use crate::key::{FieldEncoding, FieldRef, KeySchema, TimeUnit};
use crate::query::engine::QueryEngine;
use crate::query::{AggFn, Query, SeriesAggregate};
use crate::region::read::{
    Columns, CompareOp, Filter, Get, Operand, RowCells, Scan, ScannedRow, TimeRange,
};
use crate::schema::FamilySpec;
use crate::store::Store;
use crate::telemetry::Telemetry;
pub use error::ApiError;
use error::ApiResult;
use json::{RowOut, push_bytes_as_str, push_str, push_u64, push_value};
use stream::{Format, RowSource};
use token::{PageKind, PageScope};

/// What the handlers share.
pub struct AppState {
    pub store: Arc<Store>,
    /// Logical queries over the store's tables.
    pub queries: Arc<QueryEngine>,
    pub clock: Arc<dyn Clock>,
    pub ready: AtomicBool,
    /// Request bodies above this are refused with 413 (default 25 MiB).
    pub max_body: usize,
    /// A body must arrive within this once the headers have (else 408).
    pub body_timeout: std::time::Duration,
    /// The Kafka pipeline's counters, when it runs.
    pub ingest: Option<Arc<IngestStats>>,
    /// The metrics recorder behind `/metrics`, when installed.
    pub telemetry: Option<Arc<Telemetry>>,
}

/// Query parameters, read strictly: an unknown or malformed one is a 400
/// in the documented JSON shape (axum's own `Query` answers plain text).
struct Params<T>(T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> axum::extract::FromRequestParts<S>
    for Params<T>
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or("");
        serde_urlencoded::from_str(query)
            .map(Params)
            .map_err(|e| ApiError::bad(format!("query parameters: {e}")))
    }
}

/// Runs disk work off the async runtime.
async fn blocking<T: Send + 'static, E: Send + 'static>(
    f: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> ApiResult<T>
where
    ApiError: From<E>,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!("worker failed: {e}"),
            )
        })?
        .map_err(ApiError::from)
}

/// Runs `f` on this worker thread when the runtime has others to take its
/// tasks meanwhile (`block_in_place`), else on the blocking pool. A query
/// answered in a few hundred microseconds spends as long again being handed
/// to a pool thread and back on this 2-core machine: two wake-ups on the
/// answer's path, where `block_in_place` puts the hand-over of this
/// worker's other tasks off it.
async fn blocking_here<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> ApiResult<T> {
    if tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::MultiThread
    {
        tokio::task::block_in_place(|| run_here(f))
    } else {
        blocking(f).await
    }
}

/// Runs `f` right here, on the runtime's worker, for work bounded to a few
/// milliseconds ([`crate::query::plan::reads_one_series_page`]). `block_in_place`
/// still wakes another thread to take over this worker and switches back:
/// q1 (100 points of one series) took 306-324 us that way against 220-285
/// us run here, in paired runs. Meanwhile the other workers steal this
/// one's queued tasks. A panic answers 500, as one on the blocking pool
/// would, instead of taking the connection down.
fn run_here<T>(f: impl FnOnce() -> Result<T, Error>) -> ApiResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the query failed inside the server; see its log".to_string(),
            )
        })?
        .map_err(ApiError::from)
}

fn body_bytes(body: Result<Bytes, BytesRejection>) -> ApiResult<Bytes> {
    body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                "request body is larger than the server's limit; send smaller batches",
            )
        } else {
            ApiError::bad(format!("cannot read the request body: {e}"))
        }
    })
}

fn json_body<T: for<'de> Deserialize<'de>>(body: Result<Bytes, BytesRejection>) -> ApiResult<T> {
    let bytes = body_bytes(body)?;
    serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(&bytes))
        .map_err(|e| field_error("request body", e))
}

/// A body that does not read as the call's JSON, naming the field that
/// was wrong (`limit: invalid type: string "5", expected usize`) and
/// quoting at most a bounded part of what it held.
fn field_error<E: std::fmt::Display>(what: &str, e: serde_path_to_error::Error<E>) -> ApiError {
    let path = e.path().to_string();
    let inner = e.inner().to_string();
    let inner = crate::codec::bounded(&inner, 240);
    if path == "." {
        ApiError::bad(format!("{what} is not valid for this call: {inner}"))
    } else {
        ApiError::bad(format!("{what}: field `{path}`: {inner}"))
    }
}

/// The routes a monitoring system needs, on the API port and, when
/// `server.metrics_listen` is set, on a port of their own.
fn monitoring_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route(
            "/healthz",
            get(|| async { Json(json!({ "status": "ok" })) }),
        )
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
}

/// Only `/metrics`, `/healthz` and `/readyz` (`server.metrics_listen`).
pub fn metrics_router(state: Arc<AppState>) -> Router {
    monitoring_routes()
        .layer(axum::middleware::from_fn(count_request))
        .with_state(state)
}

pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.max_body;
    monitoring_routes()
        .route(
            "/api/v1/namespaces",
            get(list_namespaces).post(create_namespace),
        )
        .route(
            "/api/v1/namespaces/{ns}",
            axum::routing::delete(drop_namespace),
        )
        .route("/api/v1/tables", get(list_tables).post(create_table))
        .route(
            "/api/v1/tables/{table}",
            get(describe_table).patch(alter_table).delete(drop_table),
        )
        .route("/api/v1/tables/{table}/compact", post(compact_table))
        .route("/api/v1/tables/{table}/flush", post(flush_table))
        .route("/api/v1/tables/{table}/rows/{row}", get(get_row))
        .route("/api/v1/tables/{table}/scan", post(scan_table))
        .route("/api/v1/tables/{table}/delete", post(delete_data))
        .route("/api/v1/write", post(write))
        .route("/api/v1/query", post(query))
        .route("/api/v1/ingest", get(ingest_status))
        .fallback(unknown_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard_body,
        ))
        .layer(axum::middleware::from_fn(count_request))
        .with_state(state)
}

async fn unknown_route(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!(
            "no route `{}`; the routes are listed in docs/api.md",
            crate::codec::quote_prefix(uri.path())
        ),
    )
}

async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "`{}` does not take {method}; see docs/api.md for its methods",
            crate::codec::quote_prefix(uri.path())
        ),
    )
}

/// Content types each kind of body is accepted in. Clients that send no
/// type, or curl's default, are taken at their word.
fn content_type_accepted(path: &str, content_type: Option<&str>) -> Result<(), String> {
    let Some(ct) = content_type else {
        return Ok(());
    };
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let lenient = [
        "application/x-www-form-urlencoded",
        "text/plain",
        "application/json",
    ];
    if path == "/api/v1/write" {
        if lenient.contains(&essence.as_str()) || essence == "application/octet-stream" {
            return Ok(());
        }
        return Err(format!(
            "content type `{ct}` is not accepted by /api/v1/write: send line protocol as \
             text/plain or points as application/json"
        ));
    }
    if lenient.contains(&essence.as_str()) {
        return Ok(());
    }
    Err(format!(
        "content type `{ct}` is not accepted here: send the request as JSON (application/json)"
    ))
}

/// Reads a request's body before any handler does: in the accepted
/// content type, within `server.max_body` and within `server.body_timeout`
/// of the headers. A client that stalls or goes away mid-body is answered
/// (or dropped) here, before anything is parsed or written.
async fn guard_body(
    State(s): State<Arc<AppState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use axum::http::Method;
    if !matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH) {
        return next.run(req).await;
    }
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("(not ASCII)").to_string());
    if let Err(why) = content_type_accepted(req.uri().path(), content_type.as_deref()) {
        return ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            why,
        )
        .into_response();
    }
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "request body is larger than the server's limit ({} bytes, server.max_body); \
                 send smaller batches",
                s.max_body
            ),
        )
        .into_response()
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > s.max_body as u64) {
        return too_large();
    }
    let (parts, body) = req.into_parts();
    let bytes =
        match tokio::time::timeout(s.body_timeout, axum::body::to_bytes(body, s.max_body)).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(e)) => {
                let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
                while let Some(err) = source {
                    if err.to_string().contains("length limit exceeded") {
                        return too_large();
                    }
                    source = err.source();
                }
                return ApiError::bad(format!(
                    "cannot read the request body ({e}); nothing was written"
                ))
                .into_response();
            }
            Err(_) => {
                return ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "body_timeout",
                    format!(
                        "the request body did not arrive within {:?} (server.body_timeout); \
                         nothing was written: send the body at once",
                        s.body_timeout
                    ),
                )
                .into_response();
            }
        };
    next.run(axum::extract::Request::from_parts(
        parts,
        axum::body::Body::from(bytes),
    ))
    .await
}

/// Counts every request by route template (never the path itself, which
/// holds table names and row keys), method and status, and times it.
async fn count_request(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = req.method().to_string();
    let started = std::time::Instant::now();
    let response = next.run(req).await;
    metrics::counter!(
        "halite_http_requests_total",
        "route" => route.clone(),
        "method" => method,
        "status" => response.status().as_u16().to_string()
    )
    .increment(1);
    metrics::histogram!("halite_http_request_duration_seconds", "route" => route)
        .record(started.elapsed().as_secs_f64());
    response
}

/// The Prometheus text exposition.
async fn metrics_text(State(s): State<Arc<AppState>>) -> Response {
    let Some(t) = s.telemetry.clone() else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "no_metrics",
            "metrics are not recorded in this process",
        )
        .into_response();
    };
    let ready = s.readiness().is_ok();
    let store = s.store.clone();
    match tokio::task::spawn_blocking(move || t.render(&store, ready)).await {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            )],
            text,
        )
            .into_response(),
        Err(e) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("rendering metrics failed: {e}"),
        )
        .into_response(),
    }
}

async fn readyz(State(s): State<Arc<AppState>>) -> Response {
    match s.readiness() {
        Ok(()) => Json(json!({ "status": "ready" })).into_response(),
        Err(why) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_ready", why).into_response()
        }
    }
}

impl AppState {
    /// Ready: the catalog is loaded and the WALs recovered (the listener is
    /// up only after both), nothing keeps writes from going on (a WAL
    /// stopped on an I/O error, a full disk, failing flushes), and the
    /// Kafka consumer, when there is one, has joined its group.
    pub fn readiness(&self) -> Result<(), String> {
        if !self.ready.load(Ordering::Acquire) {
            return Err("starting up or shutting down".into());
        }
        if let Some(trouble) = self.store.trouble() {
            return Err(trouble);
        }
        if let Some(ingest) = &self.ingest
            && !ingest.joined.load(Ordering::Acquire)
        {
            return Err("the Kafka consumer has not joined its group yet".into());
        }
        Ok(())
    }
}

async fn list_namespaces(State(s): State<Arc<AppState>>) -> Json<Vec<String>> {
    Json(s.store.catalog().namespaces())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NamespaceReq {
    name: String,
}

async fn create_namespace(
    State(s): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let req: NamespaceReq = json_body(body)?;
    let store = s.store.clone();
    let name = req.name.clone();
    blocking(move || store.catalog().create_namespace(&name)).await?;
    Ok((StatusCode::CREATED, Json(json!({ "name": req.name }))).into_response())
}

async fn drop_namespace(
    State(s): State<Arc<AppState>>,
    Path(ns): Path<String>,
) -> ApiResult<StatusCode> {
    let store = s.store.clone();
    blocking(move || store.catalog().drop_namespace(&ns)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListTables {
    namespace: Option<String>,
}

async fn list_tables(
    State(s): State<Arc<AppState>>,
    Params(q): Params<ListTables>,
) -> Json<Vec<TableDescriptor>> {
    Json(s.store.catalog().tables(q.namespace.as_deref()))
}

async fn create_table(
    State(s): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let req: CreateTable = json_body(body)?;
    let store = s.store.clone();
    let desc = blocking(move || store.create_table(&req)).await?;
    Ok((StatusCode::CREATED, Json(desc)).into_response())
}

fn table_name(s: &str) -> ApiResult<TableName> {
    TableName::parse(s).map_err(ApiError::from)
}

async fn describe_table(
    State(s): State<Arc<AppState>>,
    Path(t): Path<String>,
) -> ApiResult<Json<TableDescriptor>> {
    let name = table_name(&t)?;
    Ok(Json(s.store.catalog().table(&name)?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AlterReq {
    #[serde(default)]
    families: Vec<FamilySpec>,
    /// `SKIP_WAL`, `ASYNC_WAL` or `SYNC_WAL`: HBase's ALTER DURABILITY.
    durability: Option<crate::schema::Durability>,
}

async fn alter_table(
    State(s): State<Arc<AppState>>,
    Path(t): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<TableDescriptor>> {
    let name = table_name(&t)?;
    let req: AlterReq = json_body(body)?;
    let store = s.store.clone();
    Ok(Json(
        blocking(move || store.alter(&name, &req.families, req.durability)).await?,
    ))
}

async fn drop_table(
    State(s): State<Arc<AppState>>,
    Path(t): Path<String>,
) -> ApiResult<StatusCode> {
    let name = table_name(&t)?;
    let store = s.store.clone();
    blocking(move || store.drop_table(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Runs `op` on every region of a table, off the async runtime.
async fn each_region(
    s: &AppState,
    t: &str,
    op: fn(&crate::table::RegionHandle) -> crate::error::Result<()>,
) -> ApiResult<StatusCode> {
    let name = table_name(t)?;
    let store = s.store.clone();
    blocking(move || {
        for r in store.table(&name)?.regions() {
            op(r)?;
        }
        Ok::<_, Error>(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Flushes every region's MemStore to store files (HBase's `flush`); a
/// region left with many files gets a minor compaction, as after a
/// background flush.
async fn flush_table(
    State(s): State<Arc<AppState>>,
    Path(t): Path<String>,
) -> ApiResult<StatusCode> {
    each_region(&s, &t, |r| {
        r.flush()?;
        r.request_compaction();
        Ok(())
    })
    .await
}

/// Major compaction of every region (HBase's `major_compact`).
async fn compact_table(
    State(s): State<Arc<AppState>>,
    Path(t): Path<String>,
) -> ApiResult<StatusCode> {
    each_region(&s, &t, |r| r.compact(true)).await
}

/// How a query's raw rows are laid out in a JSON answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Shape {
    /// One object per row: its key (hex and decoded) and its cells.
    #[default]
    Rows,
    /// One object per series, as InfluxDB and Prometheus answer: the
    /// series' key fields, `columns` (`time` and the fields) and `values`,
    /// one array per timestamp.
    Series,
}

/// The key fields of `row` other than its time field, as a JSON object
/// (`null` when the key does not decode), and the time field's value.
fn series_identity(schema: &KeySchema, key: &[u8]) -> Vec<u8> {
    let mut ident = Vec::with_capacity(64);
    ident.push(b'{');
    let mut index = 0;
    let mut first = true;
    let decoded = schema.decode_each(key, |name, v| {
        if schema.fields[index].encoding.is_identity() {
            if !first {
                ident.push(b',');
            }
            first = false;
            push_str(&mut ident, name);
            ident.push(b':');
            match v {
                FieldRef::Uint(u) => push_u64(&mut ident, u),
                FieldRef::Str(s) => push_str(&mut ident, s),
            }
        }
        index += 1;
    });
    if decoded.is_err() {
        return b"null".to_vec();
    }
    ident.push(b'}');
    ident
}

/// Rows as series (see [`Shape::Series`]). Rows come in logical key
/// order, so a series' rows are consecutive; a series cut by the page
/// limit continues in the next page. A row's time is its key's time field,
/// or its newest cell's timestamp when the key has none; a field a row
/// lacks is `null`.
fn series_answer<R: RowCells>(
    schema: &KeySchema,
    rows: &[R],
    continuation: Option<String>,
    buckets: Option<usize>,
) -> Response {
    let time_field = schema.fields.iter().position(|f| f.encoding.is_time());
    // A uniquifier is no part of the series: it is a column beside time.
    let uniquifier = schema
        .fields
        .iter()
        .position(|f| matches!(f.encoding, FieldEncoding::Uniquifier { .. }));
    // Rows of one series differ in their time field (and uniquifier) alone:
    // its identity is decoded once per run of keys whose identity field
    // bytes are equal (the salt follows from them), and each row's time
    // from its field alone.
    let mut identity_bytes: Vec<std::ops::Range<usize>> = Vec::new();
    for i in 0..schema.fields.len() {
        if !schema.fields[i].encoding.is_identity() {
            continue;
        }
        let r = schema.field_range(i);
        // Adjacent fields compare as one range.
        match identity_bytes.last_mut() {
            Some(last) if last.end == r.start => last.end = r.end,
            _ => identity_bytes.push(r),
        }
    }
    let same_series = |a: &[u8], b: &[u8]| {
        a.len() == schema.key_len()
            && b.len() == schema.key_len()
            && identity_bytes
                .iter()
                .all(|r| bytes_equal(&a[r.clone()], &b[r.clone()]))
    };
    let uint_at = |key: &[u8], field: Option<usize>| {
        field.and_then(|f| match schema.decode_field_at(key, f) {
            Ok(FieldRef::Uint(t)) => Some(t),
            _ => None,
        })
    };
    let mut idents: Vec<Vec<u8>> = Vec::new();
    // Per row: (its series in `idents`, its time field, its uniquifier).
    let mut identities: Vec<(usize, Option<u64>, Option<u64>)> = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let (time, uniq) = (
            uint_at(row.key(), time_field),
            uint_at(row.key(), uniquifier),
        );
        if i > 0 && same_series(rows[i - 1].key(), row.key()) {
            identities.push((idents.len() - 1, time, uniq));
            continue;
        }
        let ident = series_identity(schema, row.key());
        if idents.last() != Some(&ident) {
            idents.push(ident);
        }
        identities.push((idents.len() - 1, time, uniq));
    }
    let mut out =
        Vec::with_capacity(256 + rows.iter().map(|r| 24 + 20 * r.cell_count()).sum::<usize>());
    out.extend_from_slice(b"{\"series\":[");
    let mut start = 0;
    while start < rows.len() {
        let series = identities[start].0;
        let ident = &idents[series];
        let end = start
            + identities[start..]
                .iter()
                .take_while(|(s, _, _)| *s == series)
                .count();
        let group = &rows[start..end];
        // The series' fields in order. A row's cells are sorted by field,
        // and rows mostly hold the same fields: each cell is first checked
        // against the column after the last one seen in its row.
        let mut columns: Vec<&[u8]> = Vec::new();
        for row in group {
            let mut next = 0;
            for c in row.cells() {
                let q = c.qualifier;
                if columns.get(next).is_some_and(|known| bytes_equal(known, q)) {
                    next += 1;
                    continue;
                }
                next = match columns.binary_search_by(|known| compare_bytes(known, q)) {
                    Ok(at) => at + 1,
                    Err(at) => {
                        columns.insert(at, q);
                        at + 1
                    }
                };
            }
        }
        if start > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"key\":");
        out.extend_from_slice(ident);
        out.extend_from_slice(b",\"columns\":[\"time\"");
        if let Some(u) = uniquifier {
            out.push(b',');
            push_str(&mut out, &schema.fields[u].name);
        }
        for c in &columns {
            out.push(b',');
            push_bytes_as_str(&mut out, c);
        }
        out.extend_from_slice(b"],\"values\":[");
        for (n, (row, (_, key_time, uniq))) in group.iter().zip(&identities[start..end]).enumerate()
        {
            if n > 0 {
                out.push(b',');
            }
            out.push(b'[');
            let time = key_time.or_else(|| row.cells().map(|c| c.timestamp).max());
            match time {
                Some(t) => push_u64(&mut out, t),
                None => out.extend_from_slice(b"null"),
            }
            if uniquifier.is_some() {
                out.push(b',');
                match uniq {
                    Some(u) => push_u64(&mut out, *u),
                    None => out.extend_from_slice(b"null"),
                }
            }
            // Cells are sorted by qualifier (newest version first), as
            // the columns are: one walk pairs them.
            let mut cells = row.cells().peekable();
            for column in &columns {
                out.push(b',');
                while cells
                    .next_if(|c| compare_bytes(c.qualifier, column).is_lt())
                    .is_some()
                {}
                match cells.next_if(|c| bytes_equal(c.qualifier, column)) {
                    Some(c) => push_value(&mut out, c.value),
                    None => out.extend_from_slice(b"null"),
                }
            }
            out.push(b']');
        }
        out.extend_from_slice(b"]}");
        start = end;
    }
    end_page(out, continuation, buckets)
}

/// A JSON answer from its bytes.
fn json_bytes(body: Vec<u8>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// Closes a page's list (`out` holds `{"<list>":[…`) with its continuation
/// and buckets scanned.
fn end_page(mut out: Vec<u8>, continuation: Option<String>, buckets: Option<usize>) -> Response {
    out.extend_from_slice(b"],\"continuation\":");
    match continuation {
        Some(t) => push_str(&mut out, &t),
        None => out.extend_from_slice(b"null"),
    }
    if let Some(b) = buckets {
        out.extend_from_slice(b",\"buckets_scanned\":");
        push_u64(&mut out, b as u64);
    }
    out.push(b'}');
    json_bytes(out)
}

/// A page of rows: `{"rows": [...], "continuation": token|null[, "buckets_scanned": n]}`.
fn page_answer<R: RowCells>(
    schema: &KeySchema,
    rows: &[R],
    continuation: Option<String>,
    buckets: Option<usize>,
) -> Response {
    let mut out = Vec::with_capacity(
        256 + rows
            .iter()
            .map(|r| 160 + 96 * r.cell_count())
            .sum::<usize>(),
    );
    out.extend_from_slice(b"{\"rows\":[");
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        RowOut { schema, row }.write_json(&mut out);
    }
    end_page(out, continuation, buckets)
}

/// HBase's Get: `columns` (`family:qualifier` or a whole `family`,
/// comma-separated), a time range `[min_ts, max_ts)` of cell versions,
/// and `max_versions`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct GetParams {
    columns: Option<String>,
    min_ts: Option<u64>,
    max_ts: Option<u64>,
    max_versions: Option<u32>,
}

async fn get_row(
    State(s): State<Arc<AppState>>,
    Path((t, row)): Path<(String, String)>,
    Params(p): Params<GetParams>,
) -> ApiResult<Response> {
    let name = table_name(&t)?;
    let key = from_hex(&row).map_err(|e| ApiError::bad(format!("row must be hex: {e}")))?;
    let store = s.store.clone();
    let desc = store.catalog().table(&name)?;
    let schema = desc.key;
    let mut columns = Columns::all();
    for c in p.columns.iter().flat_map(|c| c.split(',')) {
        let (family, qualifier) = match c.split_once(':') {
            Some((f, q)) => (f, Some(q)),
            None => (c, None),
        };
        if !desc.families.iter().any(|f| f.name == family) {
            return Err(Error::UnknownFamily(family.to_string()).into());
        }
        match qualifier {
            Some(q) => columns
                .columns
                .push((family.as_bytes().to_vec(), q.as_bytes().to_vec())),
            None => columns.families.push(family.as_bytes().to_vec()),
        }
    }
    let get = Get {
        columns,
        time_range: TimeRange {
            min: p.min_ts.unwrap_or(0),
            max: p.max_ts.unwrap_or(u64::MAX),
        },
        max_versions: p.max_versions.unwrap_or(1),
        ..Get::new(key)
    };
    match blocking(move || store.get(&name, &get)).await? {
        Some(found) => {
            let mut out = Vec::with_capacity(256 + 96 * found.cells.len());
            RowOut {
                schema: &schema,
                row: &found,
            }
            .write_json(&mut out);
            Ok(json_bytes(out))
        }
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no row `{row}`"),
        )),
    }
}

/// A raw scan as JSON; row keys are hex.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ScanReq {
    start: Option<String>,
    stop: Option<String>,
    prefix: Option<String>,
    #[serde(default)]
    families: Vec<String>,
    /// `family:qualifier`
    #[serde(default)]
    columns: Vec<String>,
    min_ts: Option<u64>,
    max_ts: Option<u64>,
    max_versions: Option<u32>,
    column_prefix: Option<String>,
    value_filter: Option<ValueFilterReq>,
    #[serde(default)]
    offset: usize,
    limit: Option<usize>,
    #[serde(default)]
    reverse: bool,
    continuation: Option<String>,
}

/// HBase's ValueFilter (every cell compared) or, with `column`, its
/// SingleColumnValueFilter (rows kept by one column's newest value).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ValueFilterReq {
    op: CompareOp,
    /// Typed: a number, string, boolean or `{"hex": "…"}` (see [`Operand`]).
    value: Operand,
    /// `family:qualifier`: filter rows on this column instead of cells.
    column: Option<String>,
    /// With `column`: drop rows without the column (HBase's default keeps
    /// them).
    #[serde(default)]
    filter_if_missing: bool,
}

/// Largest page a scan or query returns in one JSON (or paged Arrow) answer.
const MAX_PAGE: usize = 10_000;

/// The row limit an answer applies: JSON answers are pages of at most
/// [`MAX_PAGE`] rows; NDJSON streams as many as asked (all by default);
/// Arrow streams all rows, or a page when a limit is given (its token goes
/// in the schema, which is sent first, so the page is read whole).
fn answer_limit(format: Format, asked: Option<usize>) -> Option<usize> {
    match format {
        Format::Json => Some(asked.unwrap_or(MAX_PAGE).min(MAX_PAGE)),
        Format::NdJson => asked,
        Format::Arrow => asked.map(|l| l.min(MAX_PAGE)),
    }
}

/// A scan request body as `POST /api/v1/tables/{t}/scan` reads it, checked
/// (the fuzz target of the HTTP scan request parser calls this).
pub fn parse_scan_request(body: &[u8]) -> Result<Scan, String> {
    let req: ScanReq = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let table = TableName::parse("fuzz").map_err(|e| e.to_string())?;
    let scan = to_scan(req, &PageScope::new(PageKind::Scan, &table)).map_err(|e| e.message)?;
    scan.validate().map_err(|e| e.to_string())?;
    scan.bounds().map_err(|e| e.to_string())?;
    Ok(scan)
}

fn to_scan(r: ScanReq, scope: &PageScope) -> ApiResult<Scan> {
    let hex_opt = |s: &Option<String>, what: &str| -> ApiResult<Option<Vec<u8>>> {
        s.as_deref()
            .map(|h| from_hex(h).map_err(|e| ApiError::bad(format!("{what} must be hex: {e}"))))
            .transpose()
    };
    let mut filters = Vec::new();
    if let Some(p) = &r.column_prefix {
        filters.push(Filter::ColumnPrefix(p.clone().into_bytes()));
    }
    if let Some(v) = r.value_filter {
        filters.push(match v.column {
            Some(c) => {
                let (family, qualifier) = split_column(&c)?;
                Filter::SingleColumnValue {
                    family,
                    qualifier,
                    op: v.op,
                    operand: v.value,
                    filter_if_missing: v.filter_if_missing,
                }
            }
            None if v.filter_if_missing => {
                return Err(ApiError::bad(
                    "value_filter.filter_if_missing needs a `column` to look for",
                ));
            }
            None => Filter::Value {
                op: v.op,
                operand: v.value,
            },
        });
    }
    let mut columns = Vec::new();
    for c in &r.columns {
        columns.push(split_column(c)?);
    }
    let selected = Columns {
        families: r.families.iter().map(|f| f.clone().into_bytes()).collect(),
        columns: columns.clone(),
    };
    // A row filter sees only the cells the scan returns: a column left out
    // would pass (or drop) every row without a word.
    for f in &filters {
        if let Filter::SingleColumnValue {
            family, qualifier, ..
        } = f
        {
            let prefixed = r
                .column_prefix
                .as_ref()
                .is_none_or(|p| qualifier.starts_with(p.as_bytes()));
            if !selected.wants(family, qualifier) || !prefixed {
                return Err(ApiError::bad(
                    "value_filter.column must be among the columns the scan returns (its families, columns and column_prefix)",
                ));
            }
        }
    }
    Ok(Scan {
        start: hex_opt(&r.start, "start")?,
        stop: hex_opt(&r.stop, "stop")?,
        prefix: hex_opt(&r.prefix, "prefix")?,
        columns: Columns {
            families: r.families.iter().map(|f| f.clone().into_bytes()).collect(),
            columns,
        },
        time_range: TimeRange {
            min: r.min_ts.unwrap_or(0),
            max: r.max_ts.unwrap_or(u64::MAX),
        },
        max_versions: r.max_versions.unwrap_or(1),
        filters,
        offset: r.offset,
        limit: r.limit,
        reverse: r.reverse,
        continuation: r
            .continuation
            .as_deref()
            .map(|t| scope.decode(t))
            .transpose()?,
    })
}

/// `family:qualifier` as bytes.
fn split_column(c: &str) -> ApiResult<(Vec<u8>, Vec<u8>)> {
    let (f, q) = c.split_once(':').ok_or_else(|| {
        ApiError::bad(format!(
            "column `{}` must be family:qualifier",
            crate::codec::quote_prefix(c)
        ))
    })?;
    Ok((f.as_bytes().to_vec(), q.as_bytes().to_vec()))
}

async fn scan_table(
    State(s): State<Arc<AppState>>,
    Path(t): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let name = table_name(&t)?;
    let req: ScanReq = json_body(body)?;
    let format = Format::from_headers(&headers);
    let paged = req.limit.is_some();
    let scope = PageScope::new(PageKind::Scan, &name);
    let mut scan = to_scan(req, &scope)?;
    scan.limit = answer_limit(format, scan.limit);
    let store = s.store.clone();
    let schema = store.catalog().table(&name)?.key;
    if format != Format::Json {
        return stream::stream_rows(format, schema, paged, scope, move || {
            Ok(
                Box::new(stream::CountedScan::new(store.scanner(&name, &scan)?))
                    as Box<dyn RowSource>,
            )
        })
        .await;
    }
    let page = blocking(move || store.scan(&name, &scan)).await?;
    metrics::counter!("halite_scan_cells_returned_total")
        .increment(page.rows.iter().map(|r| r.cells.len() as u64).sum());
    Ok(page_answer(
        &schema,
        &page.rows,
        page.continuation.map(|t| scope.encode(&t)),
        None,
    ))
}

/// A query request: `table`, `shape` and the [`Query`] itself. Read in
/// two steps (not with `#[serde(flatten)]`, which loses the name of a
/// field of the wrong type), so every error names its field.
fn parse_query_request(bytes: &[u8]) -> ApiResult<(String, Shape, Query)> {
    let mut v: Json_ = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad(format!(
            "query is not valid JSON: {}",
            crate::codec::bounded(&e.to_string(), 240)
        ))
    })?;
    let obj = v
        .as_object_mut()
        .ok_or_else(|| ApiError::bad("a query is a JSON object"))?;
    let table = match obj.remove("table") {
        Some(Json_::String(t)) => t,
        Some(_) => {
            return Err(ApiError::bad(
                "query: field `table` must be a string such as \"metrics:cpu\"",
            ));
        }
        None => return Err(ApiError::bad("query: field `table` is missing")),
    };
    let shape = match obj.remove("shape") {
        Some(shape) => serde_path_to_error::deserialize(shape).map_err(|e| {
            ApiError::bad(format!(
                "query: field `shape`: {}",
                crate::codec::bounded(&e.inner().to_string(), 240)
            ))
        })?,
        None => Shape::default(),
    };
    let query = serde_path_to_error::deserialize(v).map_err(|e| field_error("query", e))?;
    Ok((table, shape, query))
}

async fn query(
    State(s): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let bytes = body_bytes(body)?;
    let (table, shape, mut q) = parse_query_request(&bytes)?;
    let name = table_name(&table)?;
    let format = Format::from_headers(&headers);
    let paged = q.limit.is_some();
    let scope = PageScope::new(
        match q.aggregate {
            Some(_) => PageKind::Aggregates,
            None => PageKind::Rows,
        },
        &name,
    );
    // The client's token names this request's kind and table; the engine
    // gets back its own position.
    if let Some(t) = &q.continuation {
        q.continuation = Some(scope.decode(t)?.encode());
    }
    // Aggregates are computed whole, so an answer holds all of them unless
    // a limit asks for pages (each with a token to the next).
    if q.aggregate.is_none() {
        q.limit = answer_limit(format, q.limit);
    }
    let queries = s.queries.clone();
    let schema = s.store.catalog().table(&name)?.key;
    if shape == Shape::Series && (format != Format::Json || q.aggregate.is_some()) {
        return Err(ApiError::bad(
            "`shape: series` lays out raw rows in a JSON answer: drop it for aggregates \
             (they come per series already) and for NDJSON or Arrow answers",
        ));
    }
    if let Some(agg) = q.aggregate.clone() {
        let page = blocking_here(move || queries.aggregate(&name, &q)).await?;
        let continuation = page.continuation.map(|t| scope.encode(&t));
        return aggregate_answer(
            format,
            &schema,
            &agg.functions,
            &page.aggregates,
            continuation,
        );
    }
    if format != Format::Json {
        return stream::stream_rows(format, schema, paged, scope, move || {
            Ok(Box::new(queries.query_rows(&name, &q)?) as Box<dyn RowSource>)
        })
        .await;
    }
    let page = if crate::query::plan::reads_one_series_page(&schema, &q, MAX_PAGE) {
        run_here(|| queries.query(&name, &q))?
    } else {
        blocking_here(move || queries.query(&name, &q)).await?
    };
    let answer = match shape {
        Shape::Rows => page_answer::<ScannedRow>,
        Shape::Series => series_answer::<ScannedRow>,
    };
    Ok(answer(
        &schema,
        &page.rows,
        page.continuation.map(|t| scope.encode(&t)),
        Some(page.buckets_scanned),
    ))
}

/// One aggregate as JSON: `{"series": {field: value}, "field", "window_ms",
/// "values": {"max": …}}`; the window's key names the table's time unit
/// (`window_ns` for an ns table).
struct AggregateOut<'a>(&'a SeriesAggregate, TimeUnit);

impl Serialize for AggregateOut<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        struct Pairs<'a, K, V>(&'a [(K, V)], fn(&K) -> &str);
        impl<K, V: Serialize> Serialize for Pairs<'_, K, V> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(Some(self.0.len()))?;
                for (k, v) in self.0 {
                    m.serialize_entry((self.1)(k), v)?;
                }
                m.end()
            }
        }
        let a = self.0;
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("series", &Pairs(&a.series, |k: &String| k.as_str()))?;
        m.serialize_entry("field", &a.field)?;
        let window = match self.1 {
            TimeUnit::Seconds => "window_s",
            TimeUnit::Milliseconds => "window_ms",
            TimeUnit::Microseconds => "window_us",
            TimeUnit::Nanoseconds => "window_ns",
        };
        m.serialize_entry(window, &a.window)?;
        m.serialize_entry("values", &Pairs(&a.values, |f: &AggFn| arrow::agg_name(*f)))?;
        m.end()
    }
}

/// Aggregates as JSON `{"aggregates": [...], "continuation": token|null}`,
/// NDJSON (one a line, then a `{"aggregates": n, "continuation": …}`
/// trailer) or one Arrow batch (its token in the schema metadata).
fn aggregate_answer(
    format: Format,
    key: &KeySchema,
    functions: &[AggFn],
    out: &[SeriesAggregate],
    continuation: Option<String>,
) -> ApiResult<Response> {
    let internal = |e: String| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e);
    match format {
        Format::Json => {
            #[derive(Serialize)]
            struct All<'a> {
                aggregates: Vec<AggregateOut<'a>>,
                continuation: Option<String>,
            }
            Ok(Json(All {
                aggregates: out.iter().map(|a| AggregateOut(a, key.time_unit)).collect(),
                continuation,
            })
            .into_response())
        }
        Format::NdJson => {
            let mut body = Vec::new();
            for a in out {
                serde_json::to_writer(&mut body, &AggregateOut(a, key.time_unit))
                    .map_err(|e| internal(e.to_string()))?;
                body.push(b'\n');
            }
            serde_json::to_writer(
                &mut body,
                &json!({"aggregates": out.len(), "continuation": continuation}),
            )
            .map_err(|e| internal(e.to_string()))?;
            body.push(b'\n');
            Ok(([(header::CONTENT_TYPE, stream::NDJSON)], body).into_response())
        }
        Format::Arrow => {
            let mut batch =
                arrow::aggregate_batch(key, functions, out).map_err(|e| internal(e.to_string()))?;
            if let Some(t) = continuation {
                let schema = batch
                    .schema()
                    .as_ref()
                    .clone()
                    .with_metadata([(stream::CONTINUATION_METADATA.to_string(), t)].into());
                batch = batch
                    .with_schema(Arc::new(schema))
                    .map_err(|e| internal(e.to_string()))?;
            }
            let mut body = Vec::new();
            let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut body, &batch.schema())
                .map_err(|e| internal(e.to_string()))?;
            w.write(&batch).map_err(|e| internal(e.to_string()))?;
            w.finish().map_err(|e| internal(e.to_string()))?;
            drop(w);
            Ok(([(header::CONTENT_TYPE, stream::ARROW_STREAM)], body).into_response())
        }
    }
}

/// HBase's Delete of one row: the whole row, a family, a column (every
/// version at or before `timestamp`), or with `exact` one version.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RowDeleteReq {
    /// Hex row key.
    row: String,
    family: Option<String>,
    /// `family:qualifier`
    column: Option<String>,
    /// Versions at or before it (epoch ms); absent: the server's clock.
    timestamp: Option<u64>,
    /// Only the version at exactly `timestamp` (needs `column`).
    #[serde(default)]
    exact: bool,
}

fn row_delete(r: RowDeleteReq) -> ApiResult<crate::cell::RowMutation> {
    let key = from_hex(&r.row).map_err(|e| ApiError::bad(format!("row must be hex: {e}")))?;
    let m = crate::cell::RowMutation::new(key);
    Ok(match (r.column, r.family, r.exact) {
        (Some(_), Some(_), _) => {
            return Err(ApiError::bad(
                "give `column` (family:qualifier) or `family`, not both",
            ));
        }
        (Some(c), None, true) => {
            let (f, q) = split_column(&c)?;
            let ts = r.timestamp.ok_or_else(|| {
                ApiError::bad("`exact` deletes the version at `timestamp`: give it")
            })?;
            m.delete_version(f, q, ts)
        }
        (Some(c), None, false) => {
            let (f, q) = split_column(&c)?;
            m.delete_column(f, q, r.timestamp)
        }
        (None, Some(f), false) => m.delete_family(f, r.timestamp),
        (None, None, false) => m.delete_row(r.timestamp),
        (None, _, true) => return Err(ApiError::bad("`exact` needs a `column`")),
    })
}

/// `POST /api/v1/tables/{t}/delete`: one row as HBase deletes it (`row`),
/// or the points of series over a time range (`series`, `start_ms`/
/// `end_ms` or `start`/`end`, `family`, `fields`, as a query names them).
/// Durable like a write; answered with how many rows it reached.
async fn delete_data(
    State(s): State<Arc<AppState>>,
    Path(t): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let name = table_name(&t)?;
    let bytes = body_bytes(body)?;
    let v: Json_ = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::bad(format!(
            "delete is not JSON: {}",
            crate::codec::bounded(&e.to_string(), 240)
        ))
    })?;
    let store = s.store.clone();
    let deleted = if v.get("row").is_some() {
        let req: RowDeleteReq =
            serde_path_to_error::deserialize(v).map_err(|e| field_error("delete", e))?;
        let m = row_delete(req)?;
        blocking(move || store.write(&name, vec![m], None)).await?;
        1
    } else {
        let q: Query = serde_path_to_error::deserialize(v).map_err(|e| field_error("delete", e))?;
        let queries = s.queries.clone();
        blocking(move || queries.delete_points(&name, &q)).await?
    };
    Ok(Json(json!({ "deleted_rows": deleted })).into_response())
}

/// The Kafka pipeline: counters since start and the offsets committed per
/// partition (what is durable). 404 when Kafka ingestion is off.
async fn ingest_status(State(s): State<Arc<AppState>>) -> ApiResult<Response> {
    let stats = s.ingest.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "Kafka ingestion is off: set [kafka] brokers and topics",
        )
    })?;
    Ok(Json(stats.to_json()).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteParams {
    table: String,
    precision: Option<String>,
    /// Cell TTL of the written points, in milliseconds (capped at the
    /// family's TTL when reading).
    ttl_ms: Option<u64>,
}

/// Writes line protocol (or JSON points with `Content-Type:
/// application/json`). Answers when the good points are durable; bad lines
/// get 400 with their numbers and reasons, and the good ones are written.
async fn write(
    State(s): State<Arc<AppState>>,
    Params(p): Params<WriteParams>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let name = table_name(&p.table)?;
    let precision = match p.precision.as_deref() {
        None => None,
        Some(x) => Some(Precision::parse(x).ok_or_else(|| {
            ApiError::bad(format!(
                "unknown precision `{}`; use ns, us, ms or s",
                crate::codec::quote_prefix(x)
            ))
        })?),
    };
    let bytes = body_bytes(body)?;
    let desc = s.store.catalog().table(&name)?;
    let now = s.clock.now_ms();
    let format = if headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
    {
        ingest::Format::Json
    } else {
        ingest::Format::Line
    };
    let (written, errors) = match format {
        ingest::Format::Line => {
            let store = s.store.clone();
            let precision = precision.unwrap_or_default();
            let ttl = p.ttl_ms;
            let done =
                blocking(move || ingest::write_lines(&store, &desc, &bytes, precision, ttl, now))
                    .await?;
            (done.rows, done.rejected)
        }
        ingest::Format::Json => {
            let mut encoder =
                PointEncoder::new(&desc, s.store.max_value_size()).map_err(ApiError::bad)?;
            encoder.set_ttl(p.ttl_ms);
            let errors = encoder
                .add_body(format, &bytes, precision, now)
                .map_err(ApiError::bad)?;
            let batch = encoder.finish();
            let written = batch.rows();
            if written > 0 {
                let store = s.store.clone();
                blocking(move || store.write_encoded(&name, batch, None)).await?;
            }
            (written, errors)
        }
    };
    if errors.is_empty() {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let mut err = ApiError::bad(format!(
        "{} point(s) rejected, {written} written; first: line {}: {}",
        errors.len(),
        errors[0].0,
        errors[0].1
    ));
    err.code = "partial_write";
    err.extra = Some(json!({
        "written": written,
        "rejected": errors.iter().map(|(l, r)| json!({ "line": l, "reason": r })).collect::<Vec<_>>(),
    }));
    Err(err)
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Serves [`metrics_router`] until `shutdown`.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, metrics_router(state))
        .with_graceful_shutdown(shutdown)
        .await
}
