//! What every handler shares: the service's state, strict query
//! parameters, request bodies, and disk work run off the async runtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::Deserialize;

use super::error::{ApiError, ApiResult};
use crate::catalog::TableName;
use crate::clock::Clock;
use crate::error::Error;
use crate::ingest::kafka::IngestStats;
use crate::ingest::kafka::topic_writer::TopicWriter;
use crate::query::engine::QueryEngine;
use crate::store::Store;
use crate::telemetry::Telemetry;

/// What the handlers share.
pub struct AppState {
    pub store: Arc<Store>,
    /// Logical queries over the store's tables.
    pub queries: Arc<QueryEngine>,
    pub clock: Arc<dyn Clock>,
    pub ready: AtomicBool,
    /// Request bodies above this are refused with 413 (default 25 MiB).
    pub max_body: usize,
    /// Line protocol goes to the writers in pieces of about this many bytes.
    pub write_piece: usize,
    /// A body must arrive within this once the headers have (else 408).
    pub body_timeout: std::time::Duration,
    /// The Kafka pipeline's counters, when it runs.
    pub ingest: Option<Arc<IngestStats>>,
    /// The metrics recorder behind `/metrics`, when installed.
    pub telemetry: Option<Arc<Telemetry>>,
    /// Cluster mode: writes go through their table's topic.
    pub topics: Option<Arc<TopicWriter>>,
    /// Every namespace's UID dictionary and series (open tag sets).
    pub tag_sets: Arc<crate::series::TagSets>,
    pub influx: crate::config::InfluxConfig,
    pub prometheus: crate::config::PrometheusConfig,
    /// Whether requests need tokens, and the bootstrap token.
    pub auth: AuthSettings,
    /// What pages of other sites may ask through a browser.
    pub browsers: Arc<super::browsers::BrowserPolicy>,
    /// Refused credentials by address, to slow guessing.
    pub failed_logins: super::guessing::FailedLogins,
}

/// How the API checks callers (from `[auth]` and the listen address;
/// `auth.rs` decides and checks).
#[derive(Debug, Clone)]
pub struct AuthSettings {
    pub enabled: bool,
    pub bootstrap: Option<crate::auth::KnownSecret>,
    pub metrics_open: bool,
}

/// The database Prometheus' samples go to without `?db=` (its routes'
/// default namespace, which `auth.rs` checks too).
pub const PROMETHEUS_DB: &str = "prometheus";

/// Query parameters, read strictly: an unknown or malformed one is a 400
/// in the documented JSON shape (axum's own `Query` answers plain text).
pub(super) struct Params<T>(pub(super) T);

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
pub(super) async fn blocking<T: Send + 'static, E: Send + 'static>(
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
pub(super) async fn blocking_here<T: Send + 'static>(
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
pub(super) fn run_here<T>(f: impl FnOnce() -> Result<T, Error>) -> ApiResult<T> {
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

pub(super) fn body_bytes(body: Result<Bytes, BytesRejection>) -> ApiResult<Bytes> {
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

pub(super) fn json_body<T: for<'de> Deserialize<'de>>(
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<T> {
    let bytes = body_bytes(body)?;
    serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(&bytes))
        .map_err(|e| field_error("request body", e))
}

/// A body that does not read as the call's JSON, naming the field that
/// was wrong (`limit: invalid type: string "5", expected usize`) and
/// quoting at most a bounded part of what it held.
pub(super) fn field_error<E: std::fmt::Display>(
    what: &str,
    e: serde_path_to_error::Error<E>,
) -> ApiError {
    let path = e.path().to_string();
    let inner = e.inner().to_string();
    let inner = crate::codec::bounded(&inner, 240);
    if path == "." {
        ApiError::bad(format!("{what} is not valid for this call: {inner}"))
    } else {
        ApiError::bad(format!("{what}: field `{path}`: {inner}"))
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

pub(super) fn table_name(s: &str) -> ApiResult<TableName> {
    TableName::parse(s).map_err(ApiError::from)
}
