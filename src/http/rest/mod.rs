//! The REST API under `/api/sessions`, `/api/projects`, `/api/agents` and `/api/schedules`, and its OpenAPI document at `/api/openapi.json`,
//! generated from the handlers' own types.
//!
//! Every handler acts for the caller's [`Principal`](crate::http::auth::Principal) and sees only
//! that principal's conversations. Errors are JSON `{"code": "...", "error": "..."}` with the
//! stable codes of the WebSocket protocol.

mod agents;
mod projects;
mod schedules;
mod sessions;

pub(super) use sessions::{agent_id, last_event_id};

use axum::routing::{get, post};
use axum::{Json, Router};
use utoipa::OpenApi;

use crate::http::AppState;

/// The OpenAPI description of the REST API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "agentmux",
        description = "Conversations with AI agents: history, rename, delete, export/import, rewind, fork, chat and events; projects and the CLI sessions in them; scheduled prompts; tickets for the WebSocket."
    ),
    paths(
        sessions::list,
        sessions::get_one,
        sessions::messages,
        sessions::rename,
        sessions::delete,
        sessions::export,
        sessions::import,
        sessions::chat,
        sessions::rewind,
        sessions::fork,
        sessions::warm,
        sessions::interrupt,
        sessions::answer_permission,
        projects::list,
        projects::cli_sessions,
        projects::import,
        projects::sync,
        schedules::create,
        schedules::list,
        schedules::get_one,
        schedules::update,
        schedules::delete,
        schedules::run,
        super::sse::events,
        super::auth::ws_ticket,
        agents::list,
    ),
    components(schemas(
        crate::http::ErrorBody,
        crate::protocol::ErrorCode,
        sessions::SessionSummary,
        sessions::SessionList,
        sessions::MessagesPage,
        sessions::RenameBody,
        sessions::ChatBody,
        crate::protocol::ChatOptions,
        sessions::Ack,
        sessions::RewindBody,
        sessions::RewoundStatus,
        sessions::ForkBody,
        sessions::Warmed,
        sessions::InterruptOutcome,
        sessions::PermissionAnswerBody,
        crate::session::ExportLine,
        crate::session::Project,
        crate::session::CliSession,
        projects::ProjectList,
        projects::CliSessionList,
        projects::ImportCliBody,
        projects::Synced,
        schedules::ScheduleList,
        crate::session::Schedule,
        crate::session::ScheduleBody,
        crate::session::LastRun,
        super::auth::Ticket,
        agents::AgentList,
        crate::session::AgentInfo,
        crate::session::Supports,
        crate::config::AgentKind,
    ))
)]
pub struct ApiDoc;

/// The OpenAPI document, served to anyone.
pub fn docs() -> Router<AppState> {
    Router::new().route(
        "/api/openapi.json",
        get(|| async { Json(ApiDoc::openapi()) }),
    )
}

/// The routes of the REST API.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/agents", get(agents::list))
        .route("/api/sessions", get(sessions::list))
        .route("/api/sessions/import", post(sessions::import))
        .route(
            "/api/sessions/{agent_id}",
            get(sessions::get_one)
                .patch(sessions::rename)
                .delete(sessions::delete),
        )
        .route(
            "/api/sessions/{agent_id}/messages",
            get(sessions::messages).post(sessions::chat),
        )
        .route("/api/sessions/{agent_id}/export", get(sessions::export))
        .route("/api/sessions/{agent_id}/rewind", post(sessions::rewind))
        .route("/api/sessions/{agent_id}/fork", post(sessions::fork))
        .route("/api/sessions/{agent_id}/warm", post(sessions::warm))
        .route(
            "/api/sessions/{agent_id}/interrupt",
            post(sessions::interrupt),
        )
        .route(
            "/api/sessions/{agent_id}/permission-response",
            post(sessions::answer_permission),
        )
        .route("/api/sessions/{agent_id}/sync", post(projects::sync))
        .route("/api/projects", get(projects::list))
        .route("/api/projects/cli-sessions", get(projects::cli_sessions))
        .route("/api/projects/cli-sessions/import", post(projects::import))
        .route("/api/sessions/{agent_id}/events", get(super::sse::events))
        .route(
            "/api/schedules",
            get(schedules::list).post(schedules::create),
        )
        .route(
            "/api/schedules/{id}",
            get(schedules::get_one)
                .patch(schedules::update)
                .delete(schedules::delete),
        )
        .route("/api/schedules/{id}/run", post(schedules::run))
}
