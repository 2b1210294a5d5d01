//! Delete messages: how a JSON message asks to delete points, and the
//! seam through which the consumer has them carried out. Ingest does not
//! plan queries: the query engine implements [`PointDeletes`] and `app.rs`
//! hands it to the consumer.

/// Why a delete message was not carried out.
pub enum DeleteFailure {
    /// The message is wrong: it goes where bad messages go.
    Bad(String),
    /// The store failed (or refused what the message asks).
    Store(crate::error::Error),
}

/// Carries out the point deletes that messages ask for. Ingest does not
/// plan queries: the query engine selects the points, and `app.rs` hands
/// the consumer this seam over it.
pub trait PointDeletes: Send + Sync {
    /// Deletes the points that `request` (the body of a `{"delete": …}`
    /// message, read with [`read_delete`]) selects in `table`, durably as
    /// the table's writes are; returns the rows reached.
    fn delete_points(
        &self,
        table: &crate::catalog::TableName,
        request: serde_json::Value,
    ) -> Result<u64, DeleteFailure>;
}

/// Reads a delete message's body as `T`, or says which field is wrong
/// (the reason a bad delete is dead-lettered with).
pub fn read_delete<T: serde::de::DeserializeOwned>(
    request: serde_json::Value,
) -> Result<T, String> {
    serde_path_to_error::deserialize(request).map_err(|e| {
        let inner = crate::codec::bounded(&e.inner().to_string(), 240).into_owned();
        match e.path().to_string().as_str() {
            "." => format!("delete: {inner}"),
            path => format!("delete: field `{path}`: {inner}"),
        }
    })
}

/// A JSON message `{"delete": {"series": [...], "start_ms": …, "end_ms": …,
/// "fields": [...]}}` (what `POST …/delete` takes for points): the body of
/// the delete, or `None` when the message is not one.
pub(super) fn delete_message(payload: &[u8]) -> Option<serde_json::Value> {
    // Most messages are points: only one naming `delete` is read twice.
    memchr::memmem::find(payload, b"\"delete\"")?;
    let serde_json::Value::Object(mut top) = serde_json::from_slice(payload).ok()? else {
        return None;
    };
    if top.len() != 1 {
        return None;
    }
    top.remove("delete")
}
