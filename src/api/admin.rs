//! Administration: namespaces, tables (create, describe, alter, drop,
//! flush, compact), readiness, metrics and the ingest status.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::auth::allow;
use super::error::ApiError;
use super::error::ApiResult;
use super::state::AppState;
use super::state::{Params, blocking, json_body, table_name};
use crate::auth::{Caller, Scope};
use crate::catalog::{CreateTable, TableDescriptor};
use crate::error::Error;
use crate::schema::FamilySpec;

/// The Prometheus text exposition.
pub(super) async fn metrics_text(State(s): State<Arc<AppState>>) -> Response {
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

pub(super) async fn readyz(State(s): State<Arc<AppState>>) -> Response {
    match s.readiness() {
        Ok(()) => Json(json!({ "status": "ready" })).into_response(),
        Err(why) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_ready", why).into_response()
        }
    }
}

/// The namespaces the caller may see.
pub(super) async fn list_namespaces(
    State(s): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
) -> Json<Vec<String>> {
    let mut all = s.store.catalog().namespaces();
    all.retain(|ns| caller.sees(ns));
    Json(all)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NamespaceReq {
    pub(super) name: String,
}

pub(super) async fn create_namespace(
    State(s): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let req: NamespaceReq = json_body(body)?;
    allow(&caller, Scope::Admin, Some(&req.name))?;
    let store = s.store.clone();
    let name = req.name.clone();
    blocking(move || store.catalog().create_namespace(&name)).await?;
    Ok((StatusCode::CREATED, Json(json!({ "name": req.name }))).into_response())
}

pub(super) async fn drop_namespace(
    State(s): State<Arc<AppState>>,
    Path(ns): Path<String>,
) -> ApiResult<StatusCode> {
    let store = s.store.clone();
    blocking(move || store.catalog().drop_namespace(&ns)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListTables {
    pub(super) namespace: Option<String>,
}

/// The tables of the namespaces the caller may see.
pub(super) async fn list_tables(
    State(s): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Params(q): Params<ListTables>,
) -> Json<Vec<TableDescriptor>> {
    let mut tables = s.store.catalog().tables(q.namespace.as_deref());
    tables.retain(|t| caller.sees(&t.name.namespace));
    Json(tables)
}

pub(super) async fn create_table(
    State(s): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let req: CreateTable = json_body(body)?;
    allow(&caller, Scope::Admin, Some(&req.name.namespace))?;
    if req.name.table.starts_with("__") {
        return Err(ApiError::bad(format!(
            "table names starting with `__` are halite's own (`{}` keeps a namespace's open tag sets); choose another name",
            crate::series::TAGS_TABLE
        )));
    }
    let store = s.store.clone();
    let desc = blocking(move || store.create_table(&req)).await?;
    Ok((StatusCode::CREATED, Json(desc)).into_response())
}

pub(super) async fn describe_table(
    State(s): State<Arc<AppState>>,
    Path(t): Path<String>,
) -> ApiResult<Json<TableDescriptor>> {
    let name = table_name(&t)?;
    Ok(Json(s.store.catalog().table(&name)?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AlterReq {
    #[serde(default)]
    pub(super) families: Vec<FamilySpec>,
    /// `SKIP_WAL`, `ASYNC_WAL` or `SYNC_WAL`: HBase's ALTER DURABILITY.
    pub(super) durability: Option<crate::schema::Durability>,
    /// A new bucket count from a time on (a salt epoch).
    pub(super) salt: Option<SaltChange>,
}

/// `{"buckets": 16, "from": T}` (T in the table's time unit) or
/// `{"buckets": 16, "from_ms": T}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SaltChange {
    buckets: u32,
    from: Option<u64>,
    from_ms: Option<u64>,
}

pub(super) async fn alter_table(
    State(s): State<Arc<AppState>>,
    Path(t): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<TableDescriptor>> {
    let name = table_name(&t)?;
    let req: AlterReq = json_body(body)?;
    let store = s.store.clone();
    if let Some(salt) = req.salt {
        if !req.families.is_empty() || req.durability.is_some() {
            return Err(Error::InvalidInput(
                "change the salt in a request of its own, without families or durability".into(),
            )
            .into());
        }
        let unit = store.table(&name)?.desc.key.time_unit;
        let from = match (salt.from, salt.from_ms) {
            (Some(t), None) => t,
            (None, Some(ms)) => unit.from_ms_ceil(ms),
            _ => {
                return Err(Error::InvalidInput(
                    "a salt change needs `from` (in the table's time unit) or `from_ms`, one of them"
                        .into(),
                )
                .into());
            }
        };
        if store.is_cluster() {
            // Points of the new epoch already stored anywhere (in any
            // node's regions or MemStores) would stay under the old count:
            // asked of the whole cluster through a query first.
            let queries = s.queries.clone();
            let check_store = store.clone();
            let check_name = name.clone();
            blocking(move || stored_from(&queries, &check_store, &check_name, from)).await?;
        }
        return Ok(Json(
            blocking(move || store.add_salt_epoch(&name, from, salt.buckets)).await?,
        ));
    }
    Ok(Json(
        blocking(move || store.alter(&name, &req.families, req.durability)).await?,
    ))
}

/// Refuses a salt epoch from `from` (the table's unit) when the table
/// already holds a point at or after it, of any family and value type, or
/// cannot tell (a partition is moving). A read of every series' keys from
/// `from` on: an administrator's request, not a hot path.
fn stored_from(
    queries: &crate::query::engine::QueryEngine,
    store: &crate::store::Store,
    name: &crate::catalog::TableName,
    from: u64,
) -> Result<(), Error> {
    for family in store.table(name)?.desc.families.iter() {
        let q = crate::query::Query {
            start: Some(from),
            family: Some(family.name.clone()),
            limit: Some(1),
            ..Default::default()
        };
        let page = queries.query(name, &q)?;
        if !page.partial.is_empty() {
            return Err(Error::Unavailable(
                "a partition of the table is moving between nodes, so its newest points are not \
                 known now; try again"
                    .into(),
            ));
        }
        if !page.rows.is_empty() {
            return Err(Error::InvalidInput(format!(
                "table `{name}` already holds points at or after the new epoch's start ({from} \
                 in the table's unit): they would stay under the old count where reads of the \
                 new epoch do not look; start the epoch after the newest point"
            )));
        }
    }
    Ok(())
}

pub(super) async fn drop_table(
    State(s): State<Arc<AppState>>,
    Path(t): Path<String>,
) -> ApiResult<StatusCode> {
    let name = table_name(&t)?;
    if name.table == crate::series::TAGS_TABLE {
        let users: Vec<String> = s
            .store
            .catalog()
            .tables(Some(&name.namespace))
            .into_iter()
            .filter(|d| d.key.is_open_tags())
            .map(|d| d.name.to_string())
            .collect();
        if !users.is_empty() {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!(
                    "`{name}` holds the UIDs and series of {}: drop those tables first",
                    users.join(", ")
                ),
            ));
        }
    }
    let store = s.store.clone();
    let namespace = name.namespace.clone();
    blocking(move || store.drop_table(&name)).await?;
    s.tag_sets.forget(&namespace);
    Ok(StatusCode::NO_CONTENT)
}

/// Runs `op` on every region of a table, off the async runtime.
pub(super) async fn each_region(
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
pub(super) async fn flush_table(
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
pub(super) async fn compact_table(
    State(s): State<Arc<AppState>>,
    Path(t): Path<String>,
) -> ApiResult<StatusCode> {
    each_region(&s, &t, |r| r.compact(true)).await
}

/// The Kafka pipeline: counters since start and the offsets committed per
/// partition (what is durable). 404 when Kafka ingestion is off.
pub(super) async fn ingest_status(State(s): State<Arc<AppState>>) -> ApiResult<Response> {
    let stats = s.ingest.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "Kafka ingestion is off: set [kafka] brokers and topics",
        )
    })?;
    Ok(Json(stats.to_json()).into_response())
}

/// Who owns what in a cluster: the partitions this node holds (with
/// their epochs, regions and the position their published files cover),
/// and every shard's lease on the object store (owner and epoch).
pub(super) async fn cluster_status(State(s): State<Arc<AppState>>) -> ApiResult<Response> {
    let store = s.store.clone();
    let answer = blocking(move || -> Result<serde_json::Value, Error> {
        let Some(node) = store.node_name() else {
            return Ok(json!({ "mode": "single" }));
        };
        let leases: Vec<serde_json::Value> = store
            .leases()?
            .into_iter()
            .map(|(shard, lease)| json!({"shard": shard, "owner": lease.owner, "epoch": lease.epoch}))
            .collect();
        let cache = store.file_cache().map(|c| {
            use std::sync::atomic::Ordering::Relaxed;
            json!({
                "bytes": c.used(),
                "hits": c.hits.load(Relaxed),
                "misses": c.misses.load(Relaxed),
                "evictions": c.evictions.load(Relaxed),
            })
        });
        Ok(json!({
            "mode": "cluster",
            "node": node,
            "objects": store.objects().map(|o| o.describe().to_string()),
            "held": store.held_shards(),
            "leases": leases,
            "file_cache": cache,
        }))
    })
    .await?;
    Ok(Json(answer).into_response())
}
