//! The built-in web UI: static files compiled into the binary, served at `/` and `/assets/`.
//!
//! Sources live in `web/` as plain ES modules (no build step), so `cargo build` never needs
//! npm. Every response carries a strict Content-Security-Policy: scripts and styles only from
//! this origin, no inline code, no plugins, no framing.
//!
//! Files are sent compressed (brotli or gzip, as the browser accepts) with an `ETag` made from
//! their content: a reload revalidates each file and gets `304 Not Modified` until the binary
//! changes, instead of fetching the files again.

use std::collections::HashMap;
use std::sync::LazyLock;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};
use tower_http::compression::CompressionLayer;

/// The Content-Security-Policy of every UI response. `connect-src 'self'` covers the
/// same-origin WebSocket; `img-src data:` shows the images of a conversation, which the page
/// holds as base64.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const JS: &str = "text/javascript; charset=utf-8";

/// An embedded file of `web/`, by its path there.
macro_rules! asset {
    ($name:literal, $content_type:expr) => {
        Asset {
            name: $name,
            content_type: $content_type,
            body: include_str!(concat!("../../web/", $name)),
        }
    };
}

/// The files under `/assets/`: the page's entry module, the modules of its parts (`ui/`), the
/// modules any client can use, the stylesheet and the icon.
const ASSETS: &[Asset] = &[
    asset!("app.js", JS),
    asset!("ui/api.js", JS),
    asset!("ui/composer.js", JS),
    asset!("ui/conversations.js", JS),
    asset!("ui/dialogs.js", JS),
    asset!("ui/dom.js", JS),
    asset!("ui/format.js", JS),
    asset!("ui/header.js", JS),
    asset!("ui/notifications.js", JS),
    asset!("ui/projects.js", JS),
    asset!("ui/schedules.js", JS),
    asset!("ui/settings.js", JS),
    asset!("ui/sidebar.js", JS),
    asset!("ui/state.js", JS),
    asset!("ui/view.js", JS),
    asset!("client.js", JS),
    asset!("markdown.js", JS),
    asset!("highlight.js", JS),
    asset!("images.js", JS),
    asset!("diff.js", JS),
    asset!("app.css", "text/css; charset=utf-8"),
    asset!("icon.svg", "image/svg+xml"),
];

/// The page itself, at `/`.
const INDEX: Asset = asset!("index.html", "text/html; charset=utf-8");

/// Each file's `ETag`, by name: a weak validator (the bytes sent differ with the compression)
/// made of the first 128 bits of the SHA-256 of its content.
static ETAGS: LazyLock<HashMap<&'static str, HeaderValue>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .chain([&INDEX])
        .map(|asset| {
            let digest = Sha256::digest(asset.body.as_bytes());
            let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
            let etag =
                HeaderValue::from_str(&format!("W/\"{hex}\"")).expect("hex is a valid header");
            (asset.name, etag)
        })
        .collect()
});

/// Routes of the web UI.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/assets/{*name}", get(asset))
        .layer(CompressionLayer::new())
}

async fn index(request: HeaderMap) -> Response {
    respond(&request, &INDEX)
}

async fn asset(Path(name): Path<String>, request: HeaderMap) -> Response {
    match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => respond(&request, a),
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}

/// `asset`, or `304 Not Modified` when the request's `If-None-Match` names its `ETag`.
fn respond(request: &HeaderMap, asset: &Asset) -> Response {
    let etag = &ETAGS[asset.name];
    let mut response = if matches_etag(request, etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        asset.body.into_response()
    };
    let headers = response.headers_mut();
    headers.insert(header::ETAG, etag.clone());
    for (name, value) in [
        (header::CONTENT_TYPE, asset.content_type),
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        // The files change only with the binary: revalidate rather than trust a stale copy.
        (header::CACHE_CONTROL, "no-cache"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Whether `If-None-Match` names `etag` (or is `*`), compared weakly as RFC 9110 says for it.
fn matches_etag(request: &HeaderMap, etag: &HeaderValue) -> bool {
    let own = etag
        .as_bytes()
        .strip_prefix(b"W/")
        .unwrap_or(etag.as_bytes());
    request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .flat_map(|value| value.as_bytes().split(|b| *b == b','))
        .map(<[u8]>::trim_ascii)
        .any(|tag| tag == b"*" || tag.strip_prefix(b"W/").unwrap_or(tag) == own)
}
