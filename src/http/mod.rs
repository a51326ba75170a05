//! The HTTP surface: the WebSocket endpoint and its tickets, the REST API, health, metrics and
//! the web UI, behind one guard that every request passes before any handler runs.
//!
//! A request body that has not fully arrived `socket.body_timeout_secs` after its request
//! came is abandoned, however steadily it trickles in, and every
//! authenticated request (and its response, for the streaming ones: event streams, exports)
//! holds one of its principal's `socket.max_per_principal` connections, like a WebSocket.
//!
//! Every request runs in a `request` span naming its method, its route (the pattern matched,
//! never the path or query as sent: a WebSocket ticket travels in the query) and the
//! `X-Request-Id` it came with, if any; a WebSocket's `socket` span lives inside the span of
//! its upgrade request.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::StreamExt;
use tokio::time::Sleep;
use tower_http::trace::TraceLayer;
use tracing::Span;

pub mod auth;
pub mod client;
mod error;
mod rest;
pub mod serve;
mod shared;
mod sse;
mod web;
mod ws;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use error::{ApiError, ErrorBody};

use crate::config::Config;
use crate::limits::{Quota, QuotaPermit};
use crate::metrics::Metrics;
use crate::protocol::ErrorCode;
use crate::session::{Manager, Scheduler};
use auth::Authenticator;

/// Media types a request body may be declared as: JSON, or JSON Lines for an import. None of
/// them is a CORS "simple" type, so a browser must ask first (a preflight we never grant).
const BODY_TYPES: &[&str] = &[
    "application/json",
    "application/x-ndjson",
    "application/jsonl",
];

/// What every request handler and socket shares; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// The registry of conversations.
    pub manager: Manager,
    /// Scheduled prompts.
    pub scheduler: Scheduler,
    /// Settings in force.
    pub config: Arc<Config>,
    /// Counters.
    pub metrics: Metrics,
    /// Fires when the server begins to shut down.
    pub shutdown: CancellationToken,
    /// The open WebSockets, so that a shutdown waits until each has sent its close frame.
    pub open_sockets: TaskTracker,
    /// Checks credentials and origins.
    pub auth: Arc<Authenticator>,
    /// Open sockets, requests and event streams per principal.
    pub sockets: Quota,
    /// Web Push: subscriptions, action tokens and which conversation each page shows.
    pub push: Arc<crate::push::Push>,
}

/// The application's routes.
pub fn router(state: AppState) -> Router {
    let body_timeout = Duration::from_secs(state.config.socket.body_timeout_secs);
    let trusted_proxies: Arc<[IpAddr]> = state.config.server.trusted_proxies.clone().into();
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        // The upgrade counts its socket itself; every route under `/api/` is the REST API's.
        .route("/ws", get(ws::upgrade))
        .merge(rest::router(&state))
        .merge(web::router())
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(move |request: &Request| request_span(request, &trusted_proxies)),
        )
        .layer(middleware::map_request(
            move |request: Request| async move {
                // A request without a body (most of them) needs no deadline.
                request.map(|body| match body.is_end_stream() {
                    true => body,
                    false => Body::new(DeadlineBody::new(body, body_timeout)),
                })
            },
        ))
        .with_state(state)
}

/// The span a request runs in: method, route pattern, client and request id. Never the URI
/// as sent (its query may hold a ticket), headers (credentials) or the body.
fn request_span(request: &Request, trusted_proxies: &[IpAddr]) -> Span {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str);
    let request_id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok());
    let client = client(request, trusted_proxies).map(tracing::field::display);
    tracing::info_span!(
        "request",
        method = %request.method(),
        route,
        client,
        request_id,
    )
}

/// Who sent `request`: the peer of its connection, unless that is one of `trusted_proxies`,
/// which name the client in the last entry of `X-Forwarded-For` (the one they set; earlier
/// ones came from the client and prove nothing). None for a request served without a
/// connection (in-process tests).
fn client(request: &Request, trusted_proxies: &[IpAddr]) -> Option<IpAddr> {
    let ConnectInfo(peer) = request.extensions().get::<ConnectInfo<SocketAddr>>()?;
    let peer = peer.ip();
    if !trusted_proxies.contains(&peer) {
        return Some(peer);
    }
    let forwarded = request
        .headers()
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .last()
        .and_then(|last| last.trim().parse().ok());
    Some(forwarded.unwrap_or(peer))
}

/// A request body that fails once `timeout` has passed since the request came, however
/// steadily it arrives (a per-read timeout would keep a body that trickles in forever).
struct DeadlineBody {
    body: Body,
    timeout: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl DeadlineBody {
    fn new(body: Body, timeout: Duration) -> Self {
        DeadlineBody {
            body,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
        }
    }
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        if self.deadline.as_mut().poll(cx).is_ready() {
            let secs = self.timeout.as_secs();
            return Poll::Ready(Some(Err(axum::Error::new(format!(
                "the request body did not arrive within {secs} s (socket.body_timeout_secs)"
            )))));
        }
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// One of `principal`'s connections (sockets, requests and event streams share
/// `socket.max_per_principal`), or 429 `limit_exceeded`.
fn connection(app: &AppState, principal: &str) -> Result<QuotaPermit, ApiError> {
    app.sockets.try_acquire(principal).map_err(|_| {
        ApiError::new(
            ErrorCode::LimitExceeded,
            format!(
                "at most {} open sockets, requests and event streams per principal",
                app.config.socket.max_per_principal
            ),
        )
    })
}

/// Authenticates a request (401) and holds one of its principal's connections (429 beyond
/// `socket.max_per_principal`) until its response has been sent, body included.
async fn count(State(app): State<AppState>, mut request: Request, next: Next) -> Response {
    let principal = match app.auth.principal(request.headers()) {
        Ok(principal) => principal,
        Err(refusal) => return refusal.into_response(),
    };
    let permit = match connection(&app, &principal) {
        Ok(permit) => permit,
        Err(refusal) => return refusal.into_response(),
    };
    request.extensions_mut().insert(principal);
    let response = next.run(request).await;
    if response.body().size_hint().exact().is_some() {
        // The whole answer is in memory already.
        return response;
    }
    response.map(|body| {
        Body::from_stream(body.into_data_stream().map(move |chunk| {
            let _held = &permit;
            chunk
        }))
    })
}

/// What every request passes first: a `Host` this server answers to (421), a browser `Origin`
/// that is its own or allowed (403), and a body declared as JSON (415).
async fn guard(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let checked = app
        .auth
        .check_host(headers)
        .and_then(|()| app.auth.check_origin(headers))
        .and_then(|()| check_body_type(request.method(), headers));
    match checked {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    }
}

/// A request that carries a body must declare it as JSON.
fn check_body_type(method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    let has_body = headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0");
    if !has_body || matches!(*method, Method::GET | Method::HEAD) {
        return Ok(());
    }
    let declared = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase());
    if declared.is_some_and(|t| BODY_TYPES.contains(&t.as_str())) {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            format!(
                "a request body must be sent with Content-Type {}",
                BODY_TYPES.join(" or ")
            ),
        ))
    }
}

async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
}
