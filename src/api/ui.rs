//! The explorer: a page served from the binary itself (`GET /`, assets
//! under `/ui/`) that lists tables, picks a series, fields and a time
//! range, charts the answer of the query API and shows the service's own
//! metrics live. Everything it needs is embedded here: no CDN, nothing
//! fetched at run time, so it works offline. The page only calls the
//! public API (`docs/explorer.md`).

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// An embedded file: its name under `/ui/`, content type and bytes.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

const INDEX: Asset = Asset {
    name: "index.html",
    content_type: "text/html; charset=utf-8",
    bytes: include_bytes!("ui/index.html"),
};

const ASSETS: &[Asset] = &[
    INDEX,
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("ui/app.js"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("ui/app.css"),
    },
    // uPlot 1.6.32 (MIT), its release build as published; see
    // ui/vendor/README.md for where it came from.
    Asset {
        name: "uPlot.iife.min.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("ui/vendor/uPlot.iife.min.js"),
    },
    Asset {
        name: "uPlot.min.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("ui/vendor/uPlot.min.css"),
    },
    Asset {
        name: "uPlot.LICENSE",
        content_type: "text/plain; charset=utf-8",
        bytes: include_bytes!("ui/vendor/uPlot.LICENSE"),
    },
];

/// `GET /` and `GET /ui/`: the explorer page.
pub(super) async fn index() -> Response {
    serve(&INDEX)
}

/// `GET /ui/{file}`: one of the page's embedded files.
pub(super) async fn asset(Path(file): Path<String>) -> Result<Response, ApiError> {
    ASSETS
        .iter()
        .find(|a| a.name == file)
        .map(serve)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no file `/ui/{file}`: the explorer is at `/`"),
            )
        })
}

fn serve(a: &Asset) -> Response {
    let mut r = (StatusCode::OK, a.bytes).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(a.content_type),
    );
    // A new binary serves new files under the same names.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // The page loads only its own files and talks only to this server.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
        ),
    );
    r
}
