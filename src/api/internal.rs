//! Routes the nodes of a cluster call on each other (docs/cluster.md):
//! `GET /internal/v1/regions/{id}/tail?start=<hex>&stop=<hex>` answers a
//! region's MemStore edits in those rows and the store files it reads
//! now, in the layout of `region/tail.rs`, when this node owns the region
//! (404 otherwise: the reader then reads what the manifest names and
//! calls its answer partial).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::error::{ApiError, ApiResult};
use super::state::{AppState, Params, blocking, run_here};
use crate::catalog::from_hex;
use crate::error::Error;

/// MemStores up to this size answer a tail on the HTTP worker.
const INLINE_TAIL_BYTES: usize = 256 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TailParams {
    start: Option<String>,
    stop: Option<String>,
}

pub(super) async fn region_tail(
    State(s): State<Arc<AppState>>,
    Path(id): Path<u64>,
    Params(p): Params<TailParams>,
) -> ApiResult<Response> {
    let hex = |v: Option<String>| {
        v.map(|h| from_hex(&h))
            .transpose()
            .map_err(|e| ApiError::bad(format!("start and stop are hex rows: {e}")))
    };
    let (start, stop) = (hex(p.start)?, hex(p.stop)?);
    let region = s.store.local_region(id);
    // A tail is at most the region's MemStores: a small one is answered
    // on this worker (a hand-over to the blocking pool and back cost as
    // much as a one-series tail); a big one where it blocks no one.
    let small = region
        .as_ref()
        .is_none_or(|r| r.memstore_bytes() <= INLINE_TAIL_BYTES);
    let answer = move || -> Result<Option<Vec<u8>>, Error> {
        let Some(region) = region else {
            return Ok(None);
        };
        let tail = region.tail(start.as_deref(), stop.as_deref())?;
        Ok(Some(crate::region::tail::encode_tail(&tail)))
    };
    let tail = if small {
        run_here(answer)?
    } else {
        blocking(answer).await?
    };
    match tail {
        Some(bytes) => Ok((
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            )],
            bytes,
        )
            .into_response()),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_owned",
            format!("region {id} is not owned by this node"),
        )),
    }
}
