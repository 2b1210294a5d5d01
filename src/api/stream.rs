//! Answers that stream: NDJSON lines or Arrow record batches, produced on a
//! blocking thread as the scanners yield rows and handed to the response
//! body through a bounded channel, so a slow client slows the scan instead
//! of growing memory, and a client that goes away stops it.
//!
//! The status line goes out with the first chunk: an error before then (no
//! such table, a bad query, a failed first read) is an ordinary JSON error
//! answer. An error after it ends an NDJSON answer with an `{"error": …}`
//! line and aborts an Arrow answer mid-stream, which Arrow readers report.

use std::io::{self, Write};

use arrow_ipc::writer::StreamWriter;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use super::arrow::{BATCH_CELLS, RowBatches, row_schema};
use super::error::{ApiError, ApiResult};
use super::json::RowOut;
use super::token::PageScope;
use crate::error::{Error, Result};
use crate::key::KeySchema;
use crate::query::rows::QueryRows;
use crate::region::read::{ContinuationToken, RowCells, ScannedRow};
use crate::table::TableScanner;

pub const NDJSON: &str = "application/x-ndjson";
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

/// How the client asked for an answer (`Accept`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON document: a page of at most 10,000 rows.
    Json,
    /// One JSON row per line, then a trailer line; not paged.
    NdJson,
    /// Arrow IPC stream; not paged unless a limit is given.
    Arrow,
}

impl Format {
    pub fn from_headers(headers: &HeaderMap) -> Format {
        let accept = headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if accept.contains(ARROW_STREAM) {
            Format::Arrow
        } else if accept.contains(NDJSON) {
            Format::NdJson
        } else {
            Format::Json
        }
    }
}

/// Rows in answer order, then whether the answer was cut short.
pub trait RowSource: Send + 'static {
    fn next_row(&mut self) -> Result<Option<ScannedRow>>;
    fn continuation(&mut self) -> Result<Option<ContinuationToken>>;
}

impl RowSource for TableScanner {
    fn next_row(&mut self) -> Result<Option<ScannedRow>> {
        Ok(self.next_view()?.map(|v| v.to_scanned()))
    }
    fn continuation(&mut self) -> Result<Option<ContinuationToken>> {
        TableScanner::continuation(self)
    }
}

/// A raw scan that counts the cells it hands out
/// (`halite_scan_cells_returned_total`, once, when dropped).
pub struct CountedScan {
    scanner: TableScanner,
    cells: u64,
}

impl CountedScan {
    pub fn new(scanner: TableScanner) -> Self {
        CountedScan { scanner, cells: 0 }
    }
}

impl Drop for CountedScan {
    fn drop(&mut self) {
        metrics::counter!("halite_scan_cells_returned_total").increment(self.cells);
    }
}

impl RowSource for CountedScan {
    fn next_row(&mut self) -> Result<Option<ScannedRow>> {
        let row = RowSource::next_row(&mut self.scanner)?;
        self.cells += row.as_ref().map_or(0, |r| r.cell_count() as u64);
        Ok(row)
    }
    fn continuation(&mut self) -> Result<Option<ContinuationToken>> {
        self.scanner.continuation()
    }
}

impl RowSource for QueryRows {
    fn next_row(&mut self) -> Result<Option<ScannedRow>> {
        QueryRows::next_row(self)
    }
    fn continuation(&mut self) -> Result<Option<ContinuationToken>> {
        QueryRows::continuation(self)
    }
}

/// Bytes gathered before a chunk goes to the client.
const CHUNK: usize = 64 * 1024;
/// Chunks that may wait for a slow client before the scan pauses.
const CHUNKS_QUEUED: usize = 8;

type Chunk = std::result::Result<Bytes, io::Error>;

/// Buffers output and sends it in chunks; the first chunk also tells the
/// handler that the answer has begun.
struct ChunkWriter {
    buf: Vec<u8>,
    tx: mpsc::Sender<Chunk>,
    started: Option<oneshot::Sender<Result<()>>>,
}

impl ChunkWriter {
    /// Sends what is buffered once it makes a whole chunk.
    fn send_if_full(&mut self) -> io::Result<()> {
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(())
    }

    fn send(&mut self) -> io::Result<()> {
        if let Some(s) = self.started.take() {
            let _ = s.send(Ok(()));
        }
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"))
    }

    /// Reports an error: as the answer itself when nothing was sent yet.
    /// Gives the error back when the answer has begun and the caller must
    /// end it.
    fn fail_early(&mut self, e: Error) -> Option<Error> {
        match self.started.take() {
            Some(s) => {
                let _ = s.send(Err(e));
                None
            }
            None => Some(e),
        }
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        self.send_if_full()?;
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn io_error(e: io::Error) -> Error {
    Error::Internal(format!("writing the answer: {e}"))
}

fn arrow_error(e: arrow_schema::ArrowError) -> Error {
    Error::Internal(format!("encoding Arrow: {e}"))
}

/// The last NDJSON line: how many rows came, and where to go on.
#[derive(Serialize)]
struct Trailer {
    rows: u64,
    continuation: Option<String>,
}

fn write_ndjson(
    source: &mut dyn RowSource,
    key: &KeySchema,
    scope: &PageScope,
    w: &mut ChunkWriter,
) -> Result<()> {
    let mut rows = 0u64;
    while let Some(row) = source.next_row()? {
        RowOut {
            schema: key,
            row: &row,
        }
        .write_json(&mut w.buf);
        w.buf.push(b'\n');
        w.send_if_full().map_err(io_error)?;
        rows += 1;
    }
    let continuation = source.continuation()?.map(|t| scope.encode(&t));
    serde_json::to_writer(&mut *w, &Trailer { rows, continuation })
        .map_err(|e| Error::Internal(format!("writing the answer: {e}")))?;
    w.write_all(b"\n").map_err(io_error)?;
    w.send().map_err(io_error)
}

/// Key of the schema metadata entry that carries a continuation token.
pub const CONTINUATION_METADATA: &str = "halite:continuation";

fn write_arrow(
    source: &mut dyn RowSource,
    key: &KeySchema,
    paged: bool,
    scope: &PageScope,
    w: &mut ChunkWriter,
) -> Result<()> {
    let mut schema = row_schema(key);
    // A paged answer is read whole first (it is at most a page), so its
    // continuation can go in the schema, which Arrow sends first.
    let mut page = Vec::new();
    if paged {
        while let Some(row) = source.next_row()? {
            page.push(row);
        }
        if let Some(t) = source.continuation()? {
            schema = schema
                .with_metadata([(CONTINUATION_METADATA.to_string(), scope.encode(&t))].into());
        }
    }
    let schema = std::sync::Arc::new(schema);
    let mut batches = RowBatches::new(key, schema.clone());
    let mut writer = StreamWriter::try_new(&mut *w, &schema).map_err(arrow_error)?;
    let mut page = page.into_iter();
    loop {
        let row = if paged {
            page.next()
        } else {
            source.next_row()?
        };
        let Some(row) = row else { break };
        batches.push(&row);
        if batches.cells() >= BATCH_CELLS {
            writer
                .write(&batches.take().map_err(arrow_error)?)
                .map_err(arrow_error)?;
        }
    }
    if batches.cells() > 0 {
        writer
            .write(&batches.take().map_err(arrow_error)?)
            .map_err(arrow_error)?;
    }
    writer.finish().map_err(arrow_error)?;
    drop(writer);
    w.send().map_err(io_error)
}

/// Streams the rows of the source `open` builds (on a blocking thread) in
/// `format` (NDJSON or Arrow). `paged`: the request gave a limit, so an Arrow
/// answer carries a continuation token.
pub async fn stream_rows(
    format: Format,
    key: KeySchema,
    paged: bool,
    scope: PageScope,
    open: impl FnOnce() -> Result<Box<dyn RowSource>> + Send + 'static,
) -> ApiResult<Response> {
    let (tx, rx) = mpsc::channel::<Chunk>(CHUNKS_QUEUED);
    let (started_tx, started_rx) = oneshot::channel();
    tokio::task::spawn_blocking(move || {
        let mut w = ChunkWriter {
            buf: Vec::with_capacity(CHUNK),
            tx,
            started: Some(started_tx),
        };
        let outcome = open().and_then(|mut source| match format {
            Format::Arrow => write_arrow(&mut *source, &key, paged, &scope, &mut w),
            _ => write_ndjson(&mut *source, &key, &scope, &mut w),
        });
        let Err(e) = outcome else { return };
        let Some(e) = w.fail_early(e) else { return };
        // The answer has begun: end it so the client cannot take it for whole.
        if format == Format::NdJson {
            let line =
                serde_json::json!({ "error": { "code": "internal", "message": e.to_string() } });
            w.buf.extend_from_slice(line.to_string().as_bytes());
            w.buf.push(b'\n');
            let _ = w.send();
        } else {
            let _ = w.tx.blocking_send(Err(io::Error::other(e.to_string())));
        }
    });
    match started_rx.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the answer ended before it began",
            ));
        }
    }
    let body = Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    }));
    let content_type = match format {
        Format::Arrow => ARROW_STREAM,
        _ => NDJSON,
    };
    let mut resp = Response::new(body);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(resp)
}
