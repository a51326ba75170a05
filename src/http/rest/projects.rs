//! Handlers of `/api/projects` and of syncing a conversation with its CLI transcript: the
//! projects the caller may work in, the sessions the user ran with the CLI in one, their
//! import. Every path is checked against the caller's own project roots.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::sessions::agent_id;
use super::summaries::{SessionSummary, summary};
use crate::http::auth::Principal;
use crate::http::{ApiError, AppState, ErrorBody};
use crate::protocol::AgentId;
use crate::session::{Audit, CliSession, Project};

/// The caller's projects.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProjectList {
    /// Each root the caller may use, then the directories directly under it.
    pub projects: Vec<Project>,
}

/// A project's CLI sessions.
#[derive(Debug, Serialize, ToSchema)]
pub struct CliSessionList {
    /// Most recently changed first (at most 200).
    pub sessions: Vec<CliSession>,
}

/// Which project.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CwdParams {
    /// The project's absolute path (inside a root the caller may use).
    cwd: String,
}

/// Which CLI session to import, and as which conversation.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportCliBody {
    /// The project the session ran in.
    pub cwd: String,
    /// The CLI's id of the session (a UUID).
    pub cli_session_id: String,
    /// The new conversation's routing key; the session id when absent.
    #[serde(default)]
    pub agent_id: Option<String>,
}

/// A conversation after a sync.
#[derive(Debug, Serialize, ToSchema)]
pub struct Synced {
    /// Messages appended from the CLI transcript (0: nothing new).
    pub appended: usize,
    /// The conversation.
    pub session: SessionSummary,
}

/// Lists the projects the caller may work in: each project root open to it and each
/// directory directly under one, with its conversations and CLI sessions.
#[utoipa::path(get, path = "/api/projects", operation_id = "list_projects",
    responses((status = 200, body = ProjectList), (status = 429, body = ErrorBody)))]
pub async fn list(
    State(app): State<AppState>,
    principal: Principal,
) -> Result<Json<ProjectList>, ApiError> {
    let projects = app.manager.projects(&principal).await?;
    Ok(Json(ProjectList { projects }))
}

/// Lists the sessions the user ran with the Claude CLI in a project.
#[utoipa::path(get, path = "/api/projects/cli-sessions", operation_id = "list_cli_sessions",
    params(CwdParams),
    responses((status = 200, body = CliSessionList), (status = 400, body = ErrorBody)))]
pub async fn cli_sessions(
    State(app): State<AppState>,
    principal: Principal,
    params: Result<Query<CwdParams>, QueryRejection>,
) -> Result<Json<CliSessionList>, ApiError> {
    let Query(params) = params?;
    let sessions = app.manager.cli_sessions(&principal, &params.cwd).await?;
    Ok(Json(CliSessionList { sessions }))
}

/// Imports a CLI session as a conversation: its `session_id` is the CLI's, its `cwd` the
/// project, its transcript the stored history, and its next chat resumes the CLI session
/// with all of it remembered.
#[utoipa::path(post, path = "/api/projects/cli-sessions/import",
    operation_id = "import_cli_session", request_body = ImportCliBody,
    responses((status = 201, body = SessionSummary), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn import(
    State(app): State<AppState>,
    principal: Principal,
    body: Result<Json<ImportCliBody>, JsonRejection>,
) -> Result<(StatusCode, Json<SessionSummary>), ApiError> {
    let Json(body) = body?;
    let agent_id = body.agent_id.clone().map(AgentId::parse).transpose();
    let imported = match agent_id {
        Ok(agent_id) => {
            let (cwd, id) = (&body.cwd, &body.cli_session_id);
            let manager = &app.manager;
            manager
                .import_cli_session(&principal, cwd, id, agent_id)
                .await
        }
        Err(err) => Err(err.into()),
    };
    let mut entry = Audit::new(&principal, "import_cli_session").detail(serde_json::json!({
        "cwd": body.cwd,
        "cli_session_id": body.cli_session_id,
    }));
    if let Ok(record) = &imported {
        entry = entry.on(&principal, &record.agent_id);
    }
    let record = app.manager.audited(entry, imported).await?;
    Ok((
        StatusCode::CREATED,
        Json(summary(&app, &principal, record).await),
    ))
}

/// Appends what the CLI added to a conversation's transcript since (the user went on with
/// the CLI); the next chat resumes with it.
#[utoipa::path(post, path = "/api/sessions/{agent_id}/sync", operation_id = "sync_cli_session",
    params(("agent_id" = String, Path, description = "The conversation")),
    responses((status = 200, body = Synced), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn sync(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<Synced>, ApiError> {
    let id = agent_id(id)?;
    let (record, appended) = app.manager.sync_cli_session(&principal, &id).await?;
    Ok(Json(Synced {
        appended,
        session: summary(&app, &principal, record).await,
    }))
}
