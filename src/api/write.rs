//! Writes: line protocol and JSON points, and deletes.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value as Json_, json};

use super::auth::allow;
use super::error::ApiError;
use super::error::ApiResult;
use super::read::split_column;
use super::state::AppState;
use super::state::{Params, blocking, body_bytes, field_error, table_name};
use crate::auth::{Caller, Scope};
use crate::catalog::from_hex;
use crate::ingest::line_protocol::Precision;
use crate::ingest::{self, PointEncoder, RowsSink};
use crate::query::Query;

/// HBase's Delete of one row: the whole row, a family, a column (every
/// version at or before `timestamp`), or with `exact` one version.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RowDeleteReq {
    /// Hex row key.
    pub(super) row: String,
    pub(super) family: Option<String>,
    /// `family:qualifier`
    pub(super) column: Option<String>,
    /// Versions at or before it (epoch ms); absent: the server's clock.
    pub(super) timestamp: Option<u64>,
    /// Only the version at exactly `timestamp` (needs `column`).
    #[serde(default)]
    pub(super) exact: bool,
}

pub(super) fn row_delete(r: RowDeleteReq) -> ApiResult<crate::cell::RowMutation> {
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
pub(super) async fn delete_data(
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WriteParams {
    pub(super) table: String,
    pub(super) precision: Option<String>,
    /// Cell TTL of the written points, in milliseconds (capped at the
    /// family's TTL when reading).
    pub(super) ttl_ms: Option<u64>,
}

/// Writes line protocol (or JSON points with `Content-Type:
/// application/json`). Answers when the good points are durable; bad lines
/// get 400 with their numbers and reasons, and the good ones are written.
pub(super) async fn write(
    State(s): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Params(p): Params<WriteParams>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let name = table_name(&p.table)?;
    allow(&caller, Scope::Write, Some(&name.namespace))?;
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
    // The layout the store routes by now (see the Kafka writers).
    let desc = s.store.table(&name)?.desc.clone();
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
    let max_value_size = s.store.max_value_size();
    let piece_bytes = s.write_piece;
    let dictionary = match (&s.topics, desc.key.is_open_tags()) {
        (Some(topics), true) if !topics.carries(&name) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "unsupported",
                format!(
                    "table `{name}` has open tag sets: in cluster mode they are written through \
                     the topic mapped to their database ([[kafka.topics]] database = \"{}\")",
                    name.namespace
                ),
            ));
        }
        (_, true) => {
            let (store, tag_sets, ns) =
                (s.store.clone(), s.tag_sets.clone(), name.namespace.clone());
            Some(blocking(move || tag_sets.dictionary(&store, &ns)).await?)
        }
        _ => None,
    };
    let (written, errors) = match format {
        ingest::Format::Line => {
            let store = s.store.clone();
            let topics = s.topics.clone();
            let precision = precision.unwrap_or_default();
            let ttl = p.ttl_ms;
            let done = blocking(move || {
                let how = ingest::LineWrite {
                    max_value_size,
                    precision,
                    ttl_ms: ttl,
                    oldest_ms: None,
                    now_ms: now,
                    dictionary: None,
                    piece_bytes,
                };
                match topics {
                    Some(t) => ingest::write_lines(&*t, &desc, &bytes, &how),
                    None => {
                        let how = ingest::LineWrite {
                            dictionary: dictionary.as_deref().map(|d| (d, &*store)),
                            ..how
                        };
                        ingest::write_lines(&*store, &desc, &bytes, &how)
                    }
                }
            })
            .await?;
            (done.rows, done.rejected)
        }
        // (Remote writes come here only by their own route.)
        ingest::Format::Json | ingest::Format::RemoteWrite => {
            let mut encoder = PointEncoder::new(&desc, max_value_size).map_err(ApiError::bad)?;
            encoder.set_ttl(p.ttl_ms);
            if let Some(d) = &dictionary {
                encoder.set_dictionary(d);
            }
            let errors = encoder
                .add_body(format, &bytes, precision, now)
                .map_err(ApiError::bad)?;
            if encoder.needs_durable_dictionary()
                && let Some(d) = dictionary.clone()
            {
                let store = s.store.clone();
                blocking(move || d.make_durable(&store)).await?;
            }
            let batch = encoder.finish();
            let written = batch.rows();
            if written > 0 {
                let store = s.store.clone();
                let topics = s.topics.clone();
                blocking(move || match topics {
                    Some(t) => t.submit_rows(&desc, batch).and_then(|p| t.wait_rows(p)),
                    None => store.write_encoded(&name, batch, None),
                })
                .await?;
            }
            (written, errors)
        }
    };
    if errors.is_empty() {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let listed = errors.first(super::error::MAX_LISTED);
    let (first_line, first) = listed[0];
    let mut err = ApiError::bad(format!(
        "{} point(s) rejected, {written} written; first: line {first_line}: {first}",
        errors.len(),
    ));
    err.code = "partial_write";
    err.extra = Some(json!({
        "written": written,
        "rejected_count": errors.len(),
        "rejected": listed
            .iter()
            .map(|(l, r)| json!({ "line": l, "reason": r.reason }))
            .collect::<Vec<_>>(),
    }));
    Err(err)
}
