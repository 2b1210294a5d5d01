//! Prometheus remote write 1.0 and remote read (sampled answers): halite
//! as Prometheus' long-term store (`docs/compatibility.md`, "Prometheus").
//! Samples go into one table of open tag sets per database, `<db>:samples`
//! (database `prometheus` unless `?db=` names another; made on the first
//! write): `__name__` is the series' metric, the other labels its tags,
//! the sample its field `value`, times in milliseconds. Staleness markers
//! (NaN with Prometheus' bits) are kept as they are.
//!
//! Refusals are what Prometheus' client expects: a body it cannot fix is
//! 400 (dropped), a full store or a passed series limit 503 (retried).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Query as QueryParams, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::auth::allow;
use super::state::AppState;
use crate::auth::{Caller, Scope};
use crate::catalog::TableName;
use crate::error::{Error, ErrorKind};
use crate::ingest::refusal::RefusalKind;
use crate::ingest::remote_write::{self, Series};
use crate::ingest::{PointEncoder, RowsSink};
use crate::query::prom_read::{self, MatchOp, Matcher};

/// The database samples go to without `?db=`.
pub use super::state::PROMETHEUS_DB as DEFAULT_DB;
pub use crate::ingest::databases::SAMPLES_TABLE;

#[derive(serde::Deserialize, Default)]
pub(super) struct PromParams {
    db: Option<String>,
}

/// A plain-text refusal, as Prometheus logs it.
pub(super) struct Refusal {
    status: StatusCode,
    message: String,
}

fn refuse(status: StatusCode, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        message: message.into(),
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut resp = (self.status, self.message).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

fn read_refusal(s: &AppState, e: prom_read::ReadError) -> Refusal {
    match e {
        prom_read::ReadError::TooManySamples(_) => refuse(
            StatusCode::BAD_REQUEST,
            format!(
                "the read would answer more than {} samples (prometheus.max_read_samples): \
                 narrow the time range or the matchers, or raise the limit",
                s.prometheus.max_read_samples
            ),
        ),
        prom_read::ReadError::BadRegex(..) => refuse(StatusCode::BAD_REQUEST, e.to_string()),
        prom_read::ReadError::Listing(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e),
        prom_read::ReadError::Store(e) => store_refusal(&e),
    }
}

fn store_refusal(e: &Error) -> Refusal {
    let status = match e.kind() {
        ErrorKind::InvalidInput => StatusCode::BAD_REQUEST,
        ErrorKind::Unavailable | ErrorKind::Closed => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    refuse(status, e.to_string())
}

/// Whether a `POST /api/v1/write` is Prometheus' (protobuf) rather than
/// halite's own (line protocol or JSON points).
pub(super) fn is_remote_write(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-protobuf"))
}

/// The request's body and the samples table of its `?db=`.
fn body_and_table(
    body: Result<Bytes, BytesRejection>,
    p: PromParams,
) -> Result<(Bytes, TableName), Refusal> {
    let body = body.map_err(|e| refuse(e.status(), format!("cannot read the body: {e}")))?;
    let db = p.db.unwrap_or_else(|| DEFAULT_DB.to_string());
    Ok((body, samples_table(&db)?))
}

fn samples_table(db: &str) -> Result<TableName, Refusal> {
    TableName::parse(&format!("{db}:{SAMPLES_TABLE}")).map_err(|e| {
        refuse(
            StatusCode::BAD_REQUEST,
            format!("`db` must name a database (a namespace): {e}"),
        )
    })
}

/// `POST /api/v1/write` (protobuf) and `/api/v1/prom/write?db=`.
pub(super) async fn remote_write(
    State(s): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    QueryParams(p): QueryParams<PromParams>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let (body, name) = match body_and_table(body, p) {
        Ok(got) => got,
        Err(r) => return r.into_response(),
    };
    // `/api/v1/write` shares its route with halite's own writes, so the
    // route cannot say which database a sample goes to: this does.
    if let Err(refused) = allow(&caller, Scope::Write, Some(&name.namespace)) {
        return super::ApiError::from(refused).into_response();
    }
    // In cluster mode the samples travel through the topic mapped to
    // their database, whose partitions carry their buckets.
    if let Some(topics) = &s.topics
        && !topics.carries(&name)
    {
        return refuse(
            StatusCode::NOT_IMPLEMENTED,
            format!(
                "in cluster mode Prometheus samples are written through a topic mapped to \
                 their database, and `{}` has none: add [[kafka.topics]] database = \"{}\" \
                 (format \"remote_write\" or \"line\")",
                name.namespace, name.namespace
            ),
        )
        .into_response();
    }
    let state = s.clone();
    let done = tokio::task::spawn_blocking(move || {
        let limit = state.prometheus.max_samples_per_request;
        let series = match remote_write::decode_write_request_within(&body, limit) {
            Ok(series) => series,
            // Retrying cannot help, so 400: Prometheus drops the batch and
            // logs this, which names the setting on either side to change.
            Err(remote_write::RemoteWriteError::TooManySamples(limit)) => {
                return Err(refuse(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "the request holds more than {limit} samples \
                         (prometheus.max_samples_per_request): lower the sender's \
                         queue_config.max_samples_per_send or raise the limit"
                    ),
                ));
            }
            Err(e) => return Err(refuse(StatusCode::BAD_REQUEST, e.to_string())),
        };
        write_series(&state, &name, &series)
    })
    .await;
    match done {
        Ok(Ok(())) => StatusCode::NO_CONTENT.into_response(),
        Ok(Err(r)) => r.into_response(),
        Err(e) => refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("worker failed: {e}"),
        )
        .into_response(),
    }
}

fn write_series(s: &AppState, name: &TableName, series: &[Series]) -> Result<(), Refusal> {
    let catalog = s.store.catalog();
    if !catalog.has_namespace(&name.namespace) {
        match catalog.create_namespace(&name.namespace) {
            Ok(()) | Err(Error::Conflict(_)) => {}
            Err(e) => return Err(store_refusal(&e)),
        }
    }
    let table = crate::ingest::databases::table_or_make(&s.store, name, || {
        s.influx.template().samples_request(name)
    })
    .map_err(|e| store_refusal(&e))?;
    if !table.desc.key.is_open_tags() {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            format!("table `{name}` has a declared key; Prometheus samples need open tag sets"),
        ));
    }
    let dictionary = s
        .tag_sets
        .dictionary(&s.store, &name.namespace)
        .map_err(|e| store_refusal(&e))?;
    let mut encoder = PointEncoder::new(&table.desc, s.store.max_value_size())
        .map_err(|e| refuse(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    encoder.set_dictionary(&dictionary);
    let now = s.clock.now_ms();
    let refusals = encoder.add_remote_write(series, now);
    let over_limit = refusals.count(RefusalKind::SeriesLimit);
    let refused = refusals.first(1).first().map(|(_, r)| r.reason.clone());
    if encoder.needs_durable_dictionary() {
        dictionary
            .make_durable(&s.store)
            .map_err(|e| store_refusal(&e))?;
    }
    let rows = encoder.finish();
    if rows.rows() > 0 {
        let sent = match &s.topics {
            Some(topics) => topics
                .submit_rows(&table.desc, rows)
                .and_then(|pending| topics.wait_rows(pending)),
            None => s
                .store
                .submit_rows(&table.desc, rows)
                .and_then(|pending| s.store.wait_rows(pending)),
        };
        sent.map_err(|e| store_refusal(&e))?;
    }
    if over_limit > 0 {
        return Err(refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{over_limit} samples of new series refused: table `{name}` holds its limit of {} series",
                s.influx.series_limit
            ),
        ));
    }
    if let Some(reason) = refused {
        return Err(refuse(StatusCode::BAD_REQUEST, reason));
    }
    Ok(())
}

/// `POST /api/v1/read` and `/api/v1/prom/read?db=`: a snappy-compressed
/// protobuf `ReadRequest`, answered with sampled `ReadResponse`.
pub(super) async fn remote_read(
    State(s): State<Arc<AppState>>,
    QueryParams(p): QueryParams<PromParams>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let (body, name) = match body_and_table(body, p) {
        Ok(got) => got,
        Err(r) => return r.into_response(),
    };
    let queries = match decode_read_request(&body) {
        Ok(q) => q,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, e).into_response(),
    };

    let state = s.clone();
    let answered = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, Refusal> {
        let internal = |e: String| refuse(StatusCode::INTERNAL_SERVER_ERROR, e);
        let mut response = Vec::new();
        let mut budget = state.prometheus.max_read_samples;
        let mut reader = prom_read::DatabaseReader::new(&state.store, &state.tag_sets, name);
        for q in &queries {
            let wanted = prom_read::ReadRange {
                start_ms: q.start_ms,
                end_ms: q.end_ms,
                labels_only: q.labels_only,
            };
            let series = reader
                .read(&q.matchers, wanted, budget)
                .map_err(|e| read_refusal(&state, e))?;
            budget -= series
                .iter()
                .map(|(_, samples)| samples.len())
                .sum::<usize>();
            let mut result = Vec::new();
            for (labels, samples) in series {
                let mut ts = Vec::new();
                remote_write::encode_series(&Series { labels, samples }, &mut ts);
                remote_write::encode_message(1, &ts, &mut result);
            }
            remote_write::encode_message(1, &result, &mut response);
        }
        snap::raw::Encoder::new()
            .compress_vec(&response)
            .map_err(|e| internal(e.to_string()))
    })
    .await;
    match answered {
        Ok(Ok(bytes)) => {
            let mut resp = (StatusCode::OK, bytes).into_response();
            let h = resp.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-protobuf"),
            );
            h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("snappy"));
            resp
        }
        Ok(Err(r)) => r.into_response(),
        Err(e) => refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("worker failed: {e}"),
        )
        .into_response(),
    }
}

/// One query of a `ReadRequest`.
struct ReadQuery {
    start_ms: i64,
    end_ms: i64,
    matchers: Vec<Matcher>,
    /// The query's hints say `func: "series"`: Prometheus' label and
    /// series lookups (`/api/v1/series`, Grafana's `label_values`) want
    /// which series have samples, not the samples.
    labels_only: bool,
}

/// Most queries a remote read request, and matchers a query, may hold
/// (Prometheus sends one query of a few matchers a request); each is a
/// few bytes sent and a hundred read.
const MAX_READ_QUERIES: usize = 100;
const MAX_MATCHERS: usize = 1000;

/// `ReadRequest { repeated Query queries = 1; … }`, `Query { int64
/// start_timestamp_ms = 1; int64 end_timestamp_ms = 2; repeated
/// LabelMatcher matchers = 3; ReadHints hints = 4; }`, `LabelMatcher {
/// Type type = 1; string name = 2; string value = 3; }` (EQ, NEQ, RE,
/// NRE), `ReadHints { int64 step_ms = 1; string func = 2; … }`.
fn decode_read_request(body: &[u8]) -> Result<Vec<ReadQuery>, String> {
    use crate::ingest::remote_write::{MAX_DECOMPRESSED, field_iter, fields};
    let len = snap::raw::decompress_len(body)
        .map_err(|e| format!("the body is not snappy-compressed: {e}"))?;
    if len > MAX_DECOMPRESSED {
        return Err(format!(
            "the body decompresses to {len} bytes, over the limit of {MAX_DECOMPRESSED}"
        ));
    }
    let raw = snap::raw::Decoder::new()
        .decompress_vec(body)
        .map_err(|e| format!("the body is not snappy-compressed: {e}"))?;
    let mut out = Vec::new();
    for next in field_iter(&raw) {
        let (field, q) = next?;
        if field != 1 {
            continue;
        }
        if out.len() == MAX_READ_QUERIES {
            return Err(format!(
                "the request holds more than {MAX_READ_QUERIES} queries: send fewer a request"
            ));
        }
        let mut query = ReadQuery {
            start_ms: 0,
            end_ms: i64::MAX,
            matchers: Vec::new(),
            labels_only: false,
        };
        for next in field_iter(q.bytes()) {
            let (field, v) = next?;
            match field {
                1 => query.start_ms = v.int() as i64,
                2 => query.end_ms = v.int() as i64,
                3 => {
                    let mut m = Matcher {
                        op: MatchOp::Equal,
                        name: String::new(),
                        value: String::new(),
                    };
                    for (field, v) in fields(v.bytes())? {
                        let text = || {
                            std::str::from_utf8(v.bytes())
                                .map(str::to_string)
                                .map_err(|_| "a matcher is not UTF-8".to_string())
                        };
                        match field {
                            1 => {
                                m.op = match v.int() {
                                    0 => MatchOp::Equal,
                                    1 => MatchOp::NotEqual,
                                    2 => MatchOp::Regex,
                                    3 => MatchOp::NotRegex,
                                    other => return Err(format!("unknown matcher type {other}")),
                                }
                            }
                            2 => m.name = text()?,
                            3 => m.value = text()?,
                            _ => {}
                        }
                    }
                    if query.matchers.len() == MAX_MATCHERS {
                        return Err(format!("a query holds more than {MAX_MATCHERS} matchers"));
                    }
                    query.matchers.push(m);
                }
                4 => {
                    query.labels_only = fields(v.bytes())?
                        .iter()
                        .any(|(field, func)| *field == 2 && func.bytes() == b"series");
                }
                _ => {}
            }
        }
        out.push(query);
    }
    Ok(out)
}
