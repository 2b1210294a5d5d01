//! Errors as the API answers them: one JSON shape (`{"error": {"code",
//! "message"}}`), and the one place where an [`ErrorKind`] becomes a status.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value as Json_, json};

use crate::error::{Error, ErrorKind};
use crate::ingest;

/// The longest message an error answers with: messages quote at most a
/// bounded prefix of what the request held (`codec::quote_prefix`), and
/// this bounds the rest (a list of reasons, a name somebody forgot to
/// quote short).
pub const MAX_MESSAGE: usize = 16 * 1024;

/// How many of a write's refused points an answer lists (it counts them
/// all).
pub const MAX_LISTED: usize = 100;

/// An error as the API answers it.
#[derive(Debug)]
pub struct ApiError {
    pub(super) status: StatusCode,
    pub(super) code: &'static str,
    pub(super) message: String,
    pub(super) extra: Option<Json_>,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            extra: None,
        }
    }
    pub(super) fn bad(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", message)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let (status, code) = match e.kind() {
            ErrorKind::InvalidInput => (StatusCode::BAD_REQUEST, "invalid_input"),
            ErrorKind::NotFound => (StatusCode::NOT_FOUND, "not_found"),
            ErrorKind::Conflict => (StatusCode::CONFLICT, "conflict"),
            ErrorKind::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ErrorKind::Closed => (StatusCode::SERVICE_UNAVAILABLE, "closed"),
            ErrorKind::Corruption => (StatusCode::INTERNAL_SERVER_ERROR, "corruption"),
            ErrorKind::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        ApiError::new(status, code, e.to_string())
    }
}

impl From<ingest::WriteLinesError> for ApiError {
    fn from(e: ingest::WriteLinesError) -> Self {
        match e {
            ingest::WriteLinesError::Store(e) => ApiError::from(e),
            refused => ApiError::bad(refused.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let message = crate::codec::bounded(&self.message, MAX_MESSAGE);
        let mut body = json!({ "error": { "code": self.code, "message": message } });
        if let (Some(extra), Some(obj)) = (self.extra, body.as_object_mut()) {
            if let Some(map) = extra.as_object() {
                for (k, v) in map {
                    obj.insert(k.clone(), v.clone());
                }
            }
        }
        let mut resp = (self.status, Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

pub(super) type ApiResult<T> = Result<T, ApiError>;
