//! The built-in web UI: static files compiled into the binary, served at `/` and `/assets/`.
//!
//! Sources live in `web/` as plain ES modules (no build step), so `cargo build` never needs
//! npm. Every response carries a strict Content-Security-Policy: scripts and styles only from
//! this origin, no inline code, no plugins, no framing.
//!
//! It installs as an app: the manifest at `/manifest.webmanifest`, and a service worker at
//! `/sw.js` (its scope is the whole site) that keeps the app shell for offline starts and shows
//! Web Push notifications. The worker is served with the list of the shell's files and a
//! version made from their contents in front, so a server with other files makes browsers
//! install the worker again.
//!
//! Files are sent compressed (brotli or gzip, as the browser accepts) with an `ETag` made from
//! their content: a reload revalidates each file and gets `304 Not Modified` until the binary
//! changes, instead of fetching the files again.

use std::collections::HashMap;
use std::sync::LazyLock;

use axum::Router;
use axum::body::Bytes;
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
                   connect-src 'self'; manifest-src 'self'; worker-src 'self'; base-uri 'none'; \
                   form-action 'none'; frame-ancestors 'none'";

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

const JS: &str = "text/javascript; charset=utf-8";

/// An embedded file of `web/`, by its path there.
macro_rules! asset {
    ($name:literal, $content_type:expr) => {
        Asset {
            name: $name,
            content_type: $content_type,
            body: include_bytes!(concat!("../../web/", $name)),
        }
    };
}

/// The files under `/assets/`: the page's entry module, the modules of its parts (`ui/`), the
/// modules any client can use, the stylesheet and the icon.
const ASSETS: &[Asset] = &[
    asset!("app.js", JS),
    asset!("ui/account.js", JS),
    asset!("ui/api.js", JS),
    asset!("ui/changes.js", JS),
    asset!("ui/composer.js", JS),
    asset!("ui/conversations.js", JS),
    asset!("ui/dialogs.js", JS),
    asset!("ui/dom.js", JS),
    asset!("ui/format.js", JS),
    asset!("ui/header.js", JS),
    asset!("ui/notifications.js", JS),
    asset!("ui/permissions.js", JS),
    asset!("ui/projects.js", JS),
    asset!("ui/push.js", JS),
    asset!("ui/schedules.js", JS),
    asset!("ui/settings.js", JS),
    asset!("ui/sharing.js", JS),
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
    asset!("icon-192.png", "image/png"),
    asset!("icon-512.png", "image/png"),
    asset!("icon-maskable.png", "image/png"),
];

/// The page itself, at `/`.
const INDEX: Asset = asset!("index.html", "text/html; charset=utf-8");
/// The app's manifest, at `/manifest.webmanifest`.
const MANIFEST: Asset = asset!("manifest.webmanifest", "application/manifest+json");
const WORKER: &str = include_str!("../../web/sw.js");

/// A file as served: its type, its bytes and their `ETag`.
struct Served {
    content_type: &'static str,
    body: Bytes,
    etag: HeaderValue,
}

impl Served {
    /// `body` with a weak `ETag` (the bytes sent differ with the compression) made of the
    /// first 128 bits of the SHA-256 of its content.
    fn new(content_type: &'static str, body: Bytes) -> Served {
        let etag = format!("W/\"{}\"", hex::encode(&Sha256::digest(&body)[..16]));
        Served {
            content_type,
            etag: HeaderValue::from_str(&etag).expect("hex is a valid header"),
            body,
        }
    }
}

/// Every file the UI serves, by its path.
static FILES: LazyLock<HashMap<String, Served>> = LazyLock::new(|| {
    let mut files: HashMap<String, Served> = ASSETS
        .iter()
        .map(|a| (format!("/assets/{}", a.name), a))
        .chain([
            ("/".to_owned(), &INDEX),
            ("/manifest.webmanifest".to_owned(), &MANIFEST),
        ])
        .map(|(path, a)| {
            (
                path,
                Served::new(a.content_type, Bytes::from_static(a.body)),
            )
        })
        .collect();
    files.insert("/sw.js".to_owned(), Served::new(JS, served_worker().into()));
    files
});

/// The service worker as served: the shell's files and their version, then `web/sw.js`.
fn served_worker() -> String {
    let mut shell = vec!["/".to_owned(), "/manifest.webmanifest".to_owned()];
    shell.extend(ASSETS.iter().map(|a| format!("/assets/{}", a.name)));
    let mut version = Sha256::new();
    for body in [INDEX.body, MANIFEST.body, WORKER.as_bytes()]
        .into_iter()
        .chain(ASSETS.iter().map(|a| a.body))
    {
        version.update(body);
    }
    let version = hex::encode(&version.finalize()[..8]);
    let shell = serde_json::to_string(&shell).expect("a list of strings is JSON");
    format!("self.AGENTMUX_SHELL = {shell};\nself.AGENTMUX_VERSION = \"{version}\";\n{WORKER}")
}

/// Routes of the web UI.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|request: HeaderMap| async move { respond(&request, "/") }),
        )
        .route(
            "/manifest.webmanifest",
            get(|request: HeaderMap| async move { respond(&request, "/manifest.webmanifest") }),
        )
        .route(
            "/sw.js",
            get(|request: HeaderMap| async move { respond(&request, "/sw.js") }),
        )
        .route("/assets/{*name}", get(asset))
        .layer(CompressionLayer::new())
}

async fn asset(Path(name): Path<String>, request: HeaderMap) -> Response {
    respond(&request, &format!("/assets/{name}"))
}

/// The file at `path`, `304 Not Modified` when the request's `If-None-Match` names its
/// `ETag`, or 404.
fn respond(request: &HeaderMap, path: &str) -> Response {
    let Some(file) = FILES.get(path) else {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    };
    let mut response = if matches_etag(request, &file.etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        file.body.clone().into_response()
    };
    let headers = response.headers_mut();
    headers.insert(header::ETAG, file.etag.clone());
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(file.content_type),
    );
    for (name, value) in [
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
