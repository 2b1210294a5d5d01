//! The HTTP API (JSON). Disk work runs on blocking threads, never on the
//! async runtime. Errors are `{"error": {"code", "message"}}` with a status
//! chosen from the error kind in one place ([`ApiError`]).
//!
//! | route | what |
//! |---|---|
//! | `GET /`, `GET /ui/{file}` | the explorer page and its embedded files (`ui.rs`) |
//! | `GET /healthz`, `GET /readyz` | alive; ready (catalog loaded, WALs replayed, no fatal I/O error) |
//! | `GET/POST /api/v1/namespaces`, `DELETE /api/v1/namespaces/{ns}` | namespaces |
//! | `GET/POST /api/v1/tables`, `GET/PATCH/DELETE /api/v1/tables/{table}` | tables |
//! | `POST /api/v1/tables/{table}/compact` | major compaction of every region |
//! | `POST /api/v1/tables/{table}/flush` | flush every region's MemStore |
//! | `POST /api/v1/write?table=…&precision=ns\|us\|ms\|s` | line protocol, or JSON points |
//! | `GET /api/v1/tables/{table}/rows/{row-hex}` | get one row |
//! | `POST /api/v1/tables/{table}/scan` | raw scan |
//! | `GET /api/v1/tables/{table}/series` | the table's series, one seek each |
//! | `POST /api/v1/query` | logical series query, raw or aggregated |
//! | `GET /api/v1/ingest` | the Kafka consumer's counters and positions |
//! | `GET /api/v1/cluster` | cluster mode: partitions held here, every lease |
//! | `GET/POST /api/v1/tokens`, `DELETE /api/v1/tokens/{id}` | API tokens (`auth.rs`, docs/security.md) |
//! | `GET /internal/v1/regions/{id}/tail` | cluster mode: a region's MemStore edits and files, for the other nodes |
//! | `GET\|HEAD /ping`, `POST /write`, `POST /api/v2/write`, `GET\|POST /query` | the InfluxDB 1.x protocol (`influx.rs`, docs/compatibility.md) |
//! | `POST /api/v1/write` (protobuf), `POST /api/v1/read`, `POST /api/v1/prom/{write,read}?db=` | Prometheus remote write and remote read (`prometheus.rs`) |
//!
//! This file routes requests and guards their bodies; the handlers are in
//! `admin.rs`, `read.rs` and `write.rs`, what they share in `state.rs`,
//! errors in `error.rs`, who may call what in `auth.rs`, what a page of
//! another site may ask through a browser in `browsers.rs`, hand-written JSON in `json.rs`, streamed answers in
//! `stream.rs` and `arrow.rs`, page tokens in `token.rs`.

mod admin;
mod arrow;
mod auth;
mod browsers;
mod error;
mod guessing;
mod influx;
mod influx_cq;
pub use influx::run_continuous_queries;
mod influx_into;
mod internal;
mod json;
pub mod listen;
mod msgpack;
mod prom_api;
mod prometheus;
mod read;
mod state;
mod stream;
mod token;
mod ui;
mod write;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use admin::{
    alter_table, cluster_status, compact_table, create_namespace, create_table, describe_table,
    drop_namespace, drop_table, flush_table, ingest_status, list_namespaces, list_tables,
    metrics_text, readyz,
};
use read::get_row;
use read::{list_series, query, scan_table};
use write::{delete_data, write};

pub use auth::{decide as decide_auth, is_loopback};
pub use browsers::BrowserPolicy;
pub use error::ApiError;
pub use guessing::FailedLogins;
pub use read::parse_scan_request;
pub use state::AppState;
pub use state::AuthSettings;

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
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authorize,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::identify,
        ))
        // Before credentials: a page of another site is refused whatever
        // its request carries.
        .layer(axum::middleware::from_fn_with_state(
            state.browsers.clone(),
            browsers::guard,
        ))
        .layer(axum::middleware::from_fn(count_request))
        .with_state(state)
}

/// The InfluxDB 1.x protocol's routes, answering in MessagePack to a
/// client that asks for it.
fn influx_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/ping", get(influx::ping).head(influx::ping))
        .route("/write", post(influx::write_v1))
        .route("/api/v2/write", post(influx::write_v2))
        .route("/query", get(influx::query).post(influx::query))
        .route_layer(axum::middleware::from_fn(influx::answer_in_accepted_format))
}

pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.max_body;
    monitoring_routes()
        .route("/", get(ui::index))
        .route("/ui", get(ui::index))
        .route("/ui/", get(ui::index))
        .route("/ui/{file}", get(ui::asset))
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
        .route("/api/v1/tables/{table}/series", get(list_series))
        .route("/api/v1/write", post(write_or_remote_write))
        .route("/api/v1/read", post(prometheus::remote_read))
        .route("/api/v1/prom/write", post(prometheus::remote_write))
        .route("/api/v1/prom/read", post(prometheus::remote_read))
        .route("/api/v1/query", post(query))
        .route(
            "/prometheus/api/v1/query",
            get(prom_api::query).post(prom_api::query),
        )
        .route(
            "/prometheus/api/v1/query_range",
            get(prom_api::query_range).post(prom_api::query_range),
        )
        .route(
            "/prometheus/api/v1/series",
            get(prom_api::series).post(prom_api::series),
        )
        .route(
            "/prometheus/api/v1/labels",
            get(prom_api::labels).post(prom_api::labels),
        )
        .route(
            "/prometheus/api/v1/label/{name}/values",
            get(prom_api::label_values),
        )
        .route(
            "/prometheus/api/v1/status/buildinfo",
            get(prom_api::buildinfo),
        )
        .route("/prometheus/api/v1/metadata", get(prom_api::metadata))
        .route("/api/v1/ingest", get(ingest_status))
        .route("/api/v1/cluster", get(cluster_status))
        .route(
            "/api/v1/tokens",
            get(auth::list_tokens).post(auth::create_token),
        )
        .route(
            "/api/v1/tokens/{id}",
            axum::routing::delete(auth::revoke_token),
        )
        .route("/internal/v1/regions/{id}/tail", get(internal::region_tail))
        .merge(influx_routes())
        .fallback(unknown_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard_body,
        ))
        // Credentials and scopes are checked before the body is read
        // (layers run after routing: the route is known to them).
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authorize,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::identify,
        ))
        // Before credentials: a page of another site is refused whatever
        // its request carries.
        .layer(axum::middleware::from_fn_with_state(
            state.browsers.clone(),
            browsers::guard,
        ))
        .layer(axum::middleware::from_fn(count_request))
        .with_state(state)
}

/// `POST /api/v1/write`: Prometheus' remote write when the body is
/// protobuf, else halite's own write (line protocol or JSON points).
async fn write_or_remote_write(
    State(state): State<Arc<AppState>>,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::handler::Handler;
    if prometheus::is_remote_write(request.headers()) {
        prometheus::remote_write.call(request, state).await
    } else {
        write.call(request, state).await
    }
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
    // InfluxDB reads these bodies whatever their type says (Telegraf sends
    // text/plain, Grafana a form, other clients octet-stream).
    if matches!(path, "/write" | "/api/v2/write" | "/query") {
        return Ok(());
    }
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
    // Prometheus' remote write and read: snappy-compressed protobuf.
    let protobuf = essence == "application/x-protobuf";
    if matches!(
        path,
        "/api/v1/read" | "/api/v1/prom/write" | "/api/v1/prom/read"
    ) && protobuf
    {
        return Ok(());
    }
    if path == "/api/v1/write" {
        if lenient.contains(&essence.as_str()) || essence == "application/octet-stream" || protobuf
        {
            return Ok(());
        }
        return Err(format!(
            "content type `{ct}` is not accepted by /api/v1/write: send line protocol as \
             text/plain, points as application/json, or Prometheus remote write as \
             application/x-protobuf"
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
    let mut parts = parts;
    let bytes = match decoded_body(&mut parts, bytes, s.max_body) {
        Ok(b) => b,
        // InfluxDB's clients read its shape of error.
        Err(refused) if auth::speaks_influx(parts.uri.path()) => {
            return (refused.status, Json(json!({ "error": refused.message }))).into_response();
        }
        Err(refused) => return refused.into_response(),
    };
    next.run(axum::extract::Request::from_parts(
        parts,
        axum::body::Body::from(bytes),
    ))
    .await
}

/// The body as its `Content-Encoding` says: gzip is inflated here, for
/// every route (within `max_body` of what it inflates to), and the header
/// dropped; snappy is Prometheus' routes' own to read; another encoding is
/// refused rather than read as the bytes it is not.
fn decoded_body(
    parts: &mut axum::http::request::Parts,
    bytes: axum::body::Bytes,
    max_body: usize,
) -> Result<axum::body::Bytes, ApiError> {
    use std::io::Read;
    let Some(encoding) = parts.headers.get(header::CONTENT_ENCODING) else {
        return Ok(bytes);
    };
    let encoding = encoding
        .to_str()
        .unwrap_or("(not ASCII)")
        .trim()
        .to_ascii_lowercase();
    let prometheus = matches!(
        parts.uri.path(),
        "/api/v1/write" | "/api/v1/read" | "/api/v1/prom/write" | "/api/v1/prom/read"
    );
    match encoding.as_str() {
        "" | "identity" => Ok(bytes),
        "snappy" if prometheus => Ok(bytes),
        "gzip" | "x-gzip" => {
            let mut out = Vec::new();
            // A small body may inflate a thousandfold: the limit holds for
            // what it inflates to.
            flate2::read::GzDecoder::new(&bytes[..])
                .take(max_body as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| {
                    ApiError::bad(format!(
                        "the body is not gzip, as its Content-Encoding says: {e}; nothing was \
                         written"
                    ))
                })?;
            if out.len() > max_body {
                return Err(ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "too_large",
                    format!(
                        "request body inflates to more than the server's limit ({max_body} \
                         bytes, server.max_body); send smaller batches"
                    ),
                ));
            }
            parts.headers.remove(header::CONTENT_ENCODING);
            parts.headers.remove(header::CONTENT_LENGTH);
            Ok(axum::body::Bytes::from(out))
        }
        other => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "Content-Encoding `{}` is not one halite reads: send the body as it is, or \
                 gzip{}",
                crate::codec::quote_prefix(other),
                if prometheus {
                    " (or snappy, Prometheus' own)"
                } else {
                    ""
                }
            ),
        )),
    }
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

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    serving: listen::Serving,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    listen::serve(listener, router(state), serving, shutdown).await
}

/// Serves [`metrics_router`] until `shutdown`.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    serving: listen::Serving,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    listen::serve(listener, metrics_router(state), serving, shutdown).await
}
