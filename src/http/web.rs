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

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest as _, Sha256};
use std::sync::LazyLock;

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
    asset!("ui/api.js", JS),
    asset!("ui/changes.js", JS),
    asset!("ui/composer.js", JS),
    asset!("ui/conversations.js", JS),
    asset!("ui/dialogs.js", JS),
    asset!("ui/dom.js", JS),
    asset!("ui/format.js", JS),
    asset!("ui/header.js", JS),
    asset!("ui/notifications.js", JS),
    asset!("ui/projects.js", JS),
    asset!("ui/push.js", JS),
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
    asset!("icon-192.png", "image/png"),
    asset!("icon-512.png", "image/png"),
    asset!("icon-maskable.png", "image/png"),
];

const INDEX: &[u8] = include_bytes!("../../web/index.html");
const MANIFEST: &[u8] = include_bytes!("../../web/manifest.webmanifest");
const WORKER: &str = include_str!("../../web/sw.js");

/// The service worker as served: the shell's files and their version, then `web/sw.js`.
static SERVED_WORKER: LazyLock<String> = LazyLock::new(|| {
    let mut shell = vec!["/".to_owned(), "/manifest.webmanifest".to_owned()];
    shell.extend(ASSETS.iter().map(|a| format!("/assets/{}", a.name)));
    let mut version = Sha256::new();
    for body in [INDEX, MANIFEST, WORKER.as_bytes()]
        .into_iter()
        .chain(ASSETS.iter().map(|a| a.body))
    {
        version.update(body);
    }
    let version: String = version.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let shell = serde_json::to_string(&shell).expect("a list of strings is JSON");
    format!("self.AGENTMUX_SHELL = {shell};\nself.AGENTMUX_VERSION = \"{version}\";\n{WORKER}")
});

/// Routes of the web UI.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/manifest.webmanifest", get(manifest))
        .route("/sw.js", get(worker))
        .route("/assets/{*name}", get(asset))
}

async fn index() -> Response {
    respond("text/html; charset=utf-8", INDEX)
}

async fn manifest() -> Response {
    respond("application/manifest+json", MANIFEST)
}

async fn worker() -> Response {
    respond(JS, SERVED_WORKER.as_bytes())
}

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => respond(a.content_type, a.body),
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}

fn respond(content_type: &'static str, body: &'static [u8]) -> Response {
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
