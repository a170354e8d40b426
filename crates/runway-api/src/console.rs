//! The web console's files, served under `/ui/` on the API's own origin.
//!
//! The console is one page (`index.html`), a few ES modules and one stylesheet from
//! `crates/runway-api/console/`, built into the binary as they are: no build step, nothing
//! fetched from elsewhere, so it works offline. It calls the same JSON API as the CLI (its
//! session is a cookie, see `crate::session`); nothing here knows about services.
//!
//! Every answer carries a strict Content-Security-Policy (scripts, styles and connections
//! from this origin only, no inline script or style, no framing), `nosniff` and no referrer.
//! Each file's strong `ETag` is a hash of its bytes, and `Cache-Control: no-cache` makes a
//! browser ask again each time and get a `304` while the build is the same. Any other path
//! under `/ui/` that names no file is a page of the console (`/ui/services/hello/dev`): it
//! gets `index.html`, whose script draws that page.

use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use crate::error::ApiError;
use crate::state::ApiState;

/// The policy of every console answer: this origin only, no inline code, no framing.
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// One file of the console.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

/// Every file, by its name under `/ui/`.
const ASSETS: &[Asset] = &[
    Asset {
        name: "index.html",
        content_type: "text/html; charset=utf-8",
        body: include_bytes!("../console/index.html"),
    },
    Asset {
        name: "style.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../console/style.css"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/app.js"),
    },
    Asset {
        name: "api.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/api.js"),
    },
    Asset {
        name: "ui.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/ui.js"),
    },
    Asset {
        name: "pages.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/pages.js"),
    },
    Asset {
        name: "admin.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../console/admin.js"),
    },
    Asset {
        name: "icon.svg",
        content_type: "image/svg+xml",
        body: include_bytes!("../console/icon.svg"),
    },
];

/// The console's routes, outside the API's document (they are pages, not the contract):
/// `GET /` (to `/ui/`), `/ui`, `/ui/` and everything under it.
pub(crate) fn routes(
    router: utoipa_axum::router::OpenApiRouter<ApiState>,
) -> utoipa_axum::router::OpenApiRouter<ApiState> {
    router
        .route("/", get(|| async { Redirect::temporary("/ui/") }))
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(|headers: HeaderMap| async move { page(&headers) }))
        .route(
            "/ui/{*path}",
            get(
                |axum::extract::Path(path): axum::extract::Path<String>, headers: HeaderMap| async move {
                    file(&path, &headers)
                },
            ),
        )
}

/// `index.html`, for `/ui/` and every page under it.
fn page(headers: &HeaderMap) -> Response {
    serve(0, headers)
}

/// A file by name, a page (a path with no `.` in its last segment), or 404.
fn file(path: &str, headers: &HeaderMap) -> Response {
    if let Some(index) = ASSETS.iter().position(|a| a.name == path) {
        return serve(index, headers);
    }
    let last = path.rsplit('/').next().unwrap_or_default();
    if !last.contains('.') {
        return page(headers);
    }
    let mut response =
        ApiError::not_found(format!("the console has no file {path:?}")).into_response();
    secure(response.headers_mut());
    response
}

/// Each file's `ETag`: a hash of its bytes (stable for a build), with its length.
fn etags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|asset| {
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                asset.body.hash(&mut hasher);
                format!("\"{:016x}-{:x}\"", hasher.finish(), asset.body.len())
            })
            .collect()
    })
}

/// File `index`, or `304 Not Modified` when the browser holds it already.
fn serve(index: usize, headers: &HeaderMap) -> Response {
    let (Some(asset), Some(etag)) = (ASSETS.get(index), etags().get(index)) else {
        return ApiError::internal("a console file is missing from the build").into_response();
    };
    let fresh = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tag| {
            let tag = tag.trim();
            tag == "*" || tag.trim_start_matches("W/") == etag
        });
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            )],
            asset.body,
        )
            .into_response()
    };
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(etag) {
        headers.insert(header::ETAG, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    secure(headers);
    response
}

/// The headers every console answer carries.
fn secure(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
}

/// The console's files and their sizes, for tests and the size budget.
pub fn files() -> impl Iterator<Item = (&'static str, usize)> {
    ASSETS.iter().map(|a| (a.name, a.body.len()))
}
