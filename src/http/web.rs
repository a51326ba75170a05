//! The built-in web UI: static files compiled into the binary, served at `/` and `/assets/`.
//!
//! Sources live in `web/` as plain ES modules (no build step), so `cargo build` never needs
//! npm. Every response carries a strict Content-Security-Policy: scripts and styles only from
//! this origin, no inline code, no plugins, no framing.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

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

/// The files under `/assets/`.
const ASSETS: &[Asset] = &[
    Asset {
        name: "app.js",
        content_type: JS,
        body: include_str!("../../web/app.js"),
    },
    Asset {
        name: "client.js",
        content_type: JS,
        body: include_str!("../../web/client.js"),
    },
    Asset {
        name: "markdown.js",
        content_type: JS,
        body: include_str!("../../web/markdown.js"),
    },
    Asset {
        name: "highlight.js",
        content_type: JS,
        body: include_str!("../../web/highlight.js"),
    },
    Asset {
        name: "images.js",
        content_type: JS,
        body: include_str!("../../web/images.js"),
    },
    Asset {
        name: "diff.js",
        content_type: JS,
        body: include_str!("../../web/diff.js"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../../web/app.css"),
    },
    Asset {
        name: "icon.svg",
        content_type: "image/svg+xml",
        body: include_str!("../../web/icon.svg"),
    },
];

const INDEX: &str = include_str!("../../web/index.html");

/// Routes of the web UI.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/assets/{name}", get(asset))
}

async fn index() -> Response {
    respond("text/html; charset=utf-8", INDEX)
}

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => respond(a.content_type, a.body),
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}

fn respond(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, content_type),
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
