//! The HTTP surface: the WebSocket endpoint and its tickets, the REST API, health, metrics and
//! the web UI.

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, post};

use crate::{AppState, api, auth, web, ws};

/// The application's routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .route("/ws", get(ws::upgrade))
        .route("/api/ws-ticket", post(auth::ws_ticket))
        .merge(api::router())
        .merge(web::router())
        .with_state(state)
}

async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
}
