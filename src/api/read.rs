//! Reads: Get, Scan and logical queries, answered as JSON pages or
//! streamed as NDJSON or Arrow.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json_, json};

use super::arrow;
use super::auth::allow;
use super::error::ApiError;
use super::error::ApiResult;
use super::json::{RowOut, push_bytes_as_str, push_str, push_u64, push_value};
use super::state::AppState;
use super::state::{
    Params, blocking, blocking_here, body_bytes, field_error, json_body, run_here, table_name,
};
use super::stream;
use super::stream::{Format, RowSource};
use super::token::{PageKind, PageScope};
use crate::auth::{Caller, Scope};
use crate::catalog::TableDescriptor;
use crate::catalog::{TableName, from_hex};
use crate::codec::{bytes_equal, compare_bytes};
use crate::error::Error;
use crate::key::{FieldEncoding, FieldRef, KeySchema, TimeUnit};
use crate::query::{AggFn, Query, SeriesAggregate};
use crate::region::read::{
    Columns, CompareOp, Filter, Get, Operand, RowCells, Scan, ScannedRow, TimeRange,
};

/// How a query's raw rows are laid out in a JSON answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Shape {
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
pub(super) fn series_identity(schema: &KeySchema, key: &[u8]) -> Vec<u8> {
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
pub(super) fn series_answer<R: RowCells>(
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
pub(super) fn json_bytes(body: Vec<u8>) -> Response {
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
pub(super) fn end_page(
    mut out: Vec<u8>,
    continuation: Option<String>,
    buckets: Option<usize>,
) -> Response {
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
pub(super) fn page_answer<R: RowCells>(
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
pub(super) struct GetParams {
    pub(super) columns: Option<String>,
    pub(super) min_ts: Option<u64>,
    pub(super) max_ts: Option<u64>,
    pub(super) max_versions: Option<u32>,
}

pub(super) async fn get_row(
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
pub(super) struct ScanReq {
    pub(super) start: Option<String>,
    pub(super) stop: Option<String>,
    pub(super) prefix: Option<String>,
    #[serde(default)]
    pub(super) families: Vec<String>,
    /// `family:qualifier`
    #[serde(default)]
    pub(super) columns: Vec<String>,
    pub(super) min_ts: Option<u64>,
    pub(super) max_ts: Option<u64>,
    pub(super) max_versions: Option<u32>,
    pub(super) column_prefix: Option<String>,
    pub(super) value_filter: Option<ValueFilterReq>,
    #[serde(default)]
    pub(super) offset: usize,
    pub(super) limit: Option<usize>,
    #[serde(default)]
    pub(super) reverse: bool,
    pub(super) continuation: Option<String>,
}

/// HBase's ValueFilter (every cell compared) or, with `column`, its
/// SingleColumnValueFilter (rows kept by one column's newest value).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ValueFilterReq {
    pub(super) op: CompareOp,
    /// Typed: a number, string, boolean or `{"hex": "…"}` (see [`Operand`]).
    pub(super) value: Operand,
    /// `family:qualifier`: filter rows on this column instead of cells.
    pub(super) column: Option<String>,
    /// With `column`: drop rows without the column (HBase's default keeps
    /// them).
    #[serde(default)]
    pub(super) filter_if_missing: bool,
}

/// Largest page a scan or query returns in one JSON (or paged Arrow) answer.
pub(super) const MAX_PAGE: usize = 10_000;

/// The row limit an answer applies: JSON answers are pages of at most
/// [`MAX_PAGE`] rows; NDJSON streams as many as asked (all by default);
/// Arrow streams all rows, or a page when a limit is given (its token goes
/// in the schema, which is sent first, so the page is read whole).
pub(super) fn answer_limit(format: Format, asked: Option<usize>) -> Option<usize> {
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

pub(super) fn to_scan(r: ScanReq, scope: &PageScope) -> ApiResult<Scan> {
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
        versions_are_key_times: false,
        max_versions: r.max_versions.unwrap_or(1),
        filters,
        key_window: None,
        rows_per_series: None,
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
pub(super) fn split_column(c: &str) -> ApiResult<(Vec<u8>, Vec<u8>)> {
    let (f, q) = c.split_once(':').ok_or_else(|| {
        ApiError::bad(format!(
            "column `{}` must be family:qualifier",
            crate::codec::quote_prefix(c)
        ))
    })?;
    Ok((f.as_bytes().to_vec(), q.as_bytes().to_vec()))
}

pub(super) async fn scan_table(
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
pub(super) fn parse_query_request(bytes: &[u8]) -> ApiResult<(String, Shape, Query)> {
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

pub(super) async fn query(
    State(s): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let bytes = body_bytes(body)?;
    let (table, shape, mut q) = parse_query_request(&bytes)?;
    let name = table_name(&table)?;
    allow(&caller, Scope::Read, Some(&name.namespace))?;
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
    let desc = s.store.catalog().table(&name)?;
    let schema = desc.key.clone();
    if shape == Shape::Series && (format != Format::Json || q.aggregate.is_some()) {
        return Err(ApiError::bad(
            "`shape: series` lays out raw rows in a JSON answer: drop it for aggregates \
             (they come per series already) and for NDJSON or Arrow answers",
        ));
    }
    if let Some(agg) = q.aggregate.clone() {
        let page = blocking_here(move || queries.aggregate(&name, &q)).await?;
        let continuation = page.continuation.map(|t| scope.encode(&t));
        let answer = aggregate_answer(
            format,
            &schema,
            &agg.functions,
            &page.aggregates,
            continuation,
        )?;
        return Ok(mark_partial(answer, &desc, &page.partial).await);
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
    let answer = answer(
        &schema,
        &page.rows,
        page.continuation.map(|t| scope.encode(&t)),
        Some(page.buckets_scanned),
    );
    Ok(mark_partial(answer, &desc, &page.partial).await)
}

/// Marks an answer that read some regions without their owner's MemStore
/// edits (cluster mode: the owner did not answer, say while its partition
/// moves): a `Halite-Partial` header naming the salt buckets, and in a
/// JSON answer `"partial": true` with `missing_buckets` and
/// `missing_regions`. Other answers are left as they are.
async fn mark_partial(answer: Response, desc: &TableDescriptor, regions: &[u64]) -> Response {
    if regions.is_empty() {
        return answer;
    }
    let mut buckets: Vec<u32> = desc
        .regions
        .iter()
        .filter(|r| regions.contains(&r.id))
        .map(|r| desc.key.salt_bucket(&r.start).unwrap_or(0))
        .collect();
    buckets.sort_unstable();
    buckets.dedup();
    let listed = buckets
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let (mut parts, body) = answer.into_parts();
    if let Ok(v) = HeaderValue::from_str(&listed) {
        parts.headers.insert("halite-partial", v);
    }
    let is_json = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return Response::from_parts(parts, axum::body::Body::empty());
    };
    if is_json && let Ok(Json_::Object(mut obj)) = serde_json::from_slice::<Json_>(&bytes) {
        obj.insert("partial".into(), Json_::Bool(true));
        obj.insert("missing_buckets".into(), json!(buckets));
        obj.insert("missing_regions".into(), json!(regions));
        let body = serde_json::to_vec(&Json_::Object(obj)).unwrap_or_default();
        parts.headers.remove(header::CONTENT_LENGTH);
        return Response::from_parts(parts, axum::body::Body::from(body));
    }
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// One aggregate as JSON: `{"series": {field: value}, "field", "window_ms",
/// "values": {"max": …}}`; the window's key names the table's time unit
/// (`window_ns` for an ns table).
pub(super) struct AggregateOut<'a>(&'a SeriesAggregate, TimeUnit);

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
pub(super) fn aggregate_answer(
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

/// `GET /api/v1/tables/{table}/series` parameters.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListSeries {
    #[serde(default)]
    limit: Option<usize>,
}

/// Series a listing returns when the request names no limit.
const DEFAULT_SERIES_LISTED: usize = 1_000;
/// The most series one listing returns.
const MAX_SERIES_LISTED: usize = 10_000;

/// `GET /api/v1/tables/{table}/series[?limit=n]`: the table's series, what
/// a client lists before it asks for data. A table of declared key fields
/// is walked one seek per series (`query::series_list`); a table of open
/// tag sets lists its dictionary. Each series: `key` (identity fields, or
/// `metric` and `tags`), `newest_ms` (declared keys) and `fields`.
pub(super) async fn list_series(
    State(s): State<Arc<AppState>>,
    Path(t): Path<String>,
    Params(p): Params<ListSeries>,
) -> ApiResult<Json<Json_>> {
    let name = table_name(&t)?;
    let limit = p.limit.unwrap_or(DEFAULT_SERIES_LISTED);
    if !(1..=MAX_SERIES_LISTED).contains(&limit) {
        return Err(ApiError::bad(format!(
            "limit must be between 1 and {MAX_SERIES_LISTED}; page a bigger table's series with InfluxQL or a scan"
        )));
    }
    let desc = s.store.catalog().table(&name)?;
    if desc.key.is_open_tags() {
        let store = s.store.clone();
        let tag_sets = s.tag_sets.clone();
        return blocking(move || -> crate::error::Result<Json<Json_>> {
            let dictionary = tag_sets.dictionary(&store, &name.namespace)?;
            dictionary.refresh(&name.table)?;
            let all = dictionary.series_of(&name.table);
            let fields: Vec<String> = dictionary.fields_of(&name.table).into_keys().collect();
            let series: Vec<Json_> = all
                .iter()
                .take(limit)
                .map(|s| json!({ "metric": s.metric, "tags": s.tags, "fields": fields }))
                .collect();
            Ok(Json(json!({
                "table": name.to_string(),
                "open_tags": true,
                "key_fields": ["metric", "tags"],
                "series": series,
                "truncated": all.len() > limit,
            })))
        })
        .await;
    }
    let queries = s.queries.clone();
    let key_fields: Vec<String> = desc
        .key
        .fields
        .iter()
        .take_while(|f| f.encoding.is_identity())
        .map(|f| f.name.clone())
        .collect();
    let listing = blocking(move || queries.series(&name, limit)).await?;
    let series: Vec<Json_> = listing
        .series
        .iter()
        .map(|e| {
            let key: serde_json::Map<String, Json_> = e
                .key
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        crate::key::FieldValue::Str(s) => json!(s),
                        crate::key::FieldValue::Uint(u) => json!(u),
                    };
                    (k.clone(), v)
                })
                .collect();
            json!({ "key": key, "newest_ms": e.newest_ms, "fields": e.fields })
        })
        .collect();
    Ok(Json(json!({
        "table": desc.name.to_string(),
        "open_tags": false,
        "key_fields": key_fields,
        "series": series,
        "truncated": listing.truncated,
    })))
}
