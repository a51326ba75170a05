//! The HTTP surface: the WebSocket endpoint and its tickets, the REST API, health, metrics and
//! the web UI, behind one guard that every request passes before any handler runs.

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

pub mod auth;
mod error;
mod rest;
pub mod serve;
mod sse;
mod web;
mod ws;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use error::{ApiError, ErrorBody};

use crate::config::Config;
use crate::limits::Quota;
use crate::metrics::Metrics;
use crate::protocol::ErrorCode;
use crate::session::Manager;
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
    /// Settings in force.
    pub config: Arc<Config>,
    /// Counters.
    pub metrics: Metrics,
    /// Fires when the server begins to shut down.
    pub shutdown: CancellationToken,
    /// Checks credentials and origins.
    pub auth: Arc<Authenticator>,
    /// Open sockets per principal.
    pub sockets: Quota,
}

/// The application's routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .route("/ws", get(ws::upgrade))
        .route("/api/ws-ticket", post(auth::ws_ticket))
        .merge(rest::router())
        .merge(web::router())
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
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
