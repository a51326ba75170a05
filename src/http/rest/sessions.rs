//! Handlers of `/api/sessions`: every query is scoped to the caller's principal, and another
//! principal's conversation is answered as unknown.
//!
//! The conversation resource: listing, reading, renaming, deleting, exporting and importing,
//! with the bodies they read and write (what is asked of its turns is `turns`, its worktree's
//! changes `changes`, its summaries `summaries`).

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::summaries::{SessionSummary, acting_summary, shared_summaries, summary};
use crate::http::AppState;
use crate::http::auth::Principal;
use crate::http::shared::named;
use crate::http::{ApiError, ErrorBody};
use crate::protocol::{AgentId, Frame};
use crate::session::{Audit, Cursor, ExportLine, Need, PageStart, SessionQuery};

/// Largest accepted import, in bytes.
pub const MAX_IMPORT_BYTES: usize = 64 << 20; // 64 MiB
/// Most conversations one list request returns.
const MAX_LIST: u32 = 500;
/// Longest search text of `GET /api/sessions?q=`, in characters.
const MAX_QUERY_CHARS: usize = 200;
/// Most messages one messages request returns.
const MAX_MESSAGES: u32 = 1000;

/// A page of conversations.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionList {
    /// Newest activity first.
    pub sessions: Vec<SessionSummary>,
    /// How many conversations match in all, when asked with `total=true`; else null.
    pub total: Option<i64>,
    /// The `before` of the next page; null when this page is the last.
    pub next_before: Option<String>,
    /// The conversations other principals shared with the caller, each under the alias the
    /// caller knows it by, with its `owner` and the caller's `role`: on the first page of a
    /// list without `q`, empty on the others.
    pub shared: Vec<SessionSummary>,
}

/// Paging and filtering of the list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Most conversations returned (1-500, default 50).
    limit: Option<u32>,
    /// The page after the one that gave this `next_before` (its cost does not grow with how
    /// far the page is). Not with `offset`.
    before: Option<String>,
    /// Conversations skipped (default 0; the cost grows with it). Not with `before`.
    offset: Option<u32>,
    /// Only conversations whose title, or one of whose messages, has for each word of this a
    /// word starting with it (case-insensitive; anything but letters and digits only separates
    /// words, and a `q` without any matches nothing; at most 200 characters).
    q: Option<String>,
    /// Whether to count every conversation that matches (`total`; default false: the count
    /// costs a look at each of them).
    total: Option<bool>,
}

/// A range of stored messages.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MessagesParams {
    /// Only messages with a greater `seq` (default 0: from the start).
    after_seq: Option<i64>,
    /// Most messages returned (1-1000, default 200).
    limit: Option<u32>,
}

/// Stored messages, each exactly the frame a WebSocket subscriber gets for it.
#[derive(Debug, Serialize, ToSchema)]
pub struct MessagesPage {
    /// Frames in `seq` order: `seq`, `message_type`, `timestamp`, `agent_id`, `session_id`
    /// and either `message` (agent messages) or the frame's own fields (`status`, ...).
    #[schema(value_type = Vec<Object>)]
    pub messages: Vec<Box<serde_json::value::RawValue>>,
    /// Whether more messages follow the last one returned.
    pub has_more: bool,
}

/// A new title.
#[derive(Debug, Deserialize, ToSchema)]
pub struct RenameBody {
    /// 1-200 characters.
    pub title: String,
}

/// The conversation an import creates.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ImportParams {
    /// Routing key of the new conversation.
    agent_id: String,
}

/// Checks the `agent_id` of a path.
pub(crate) fn agent_id(raw: String) -> Result<AgentId, ApiError> {
    Ok(AgentId::parse(raw)?)
}

/// Lists the caller's conversations, newest activity first.
#[utoipa::path(get, path = "/api/sessions", operation_id = "list_sessions", params(ListParams),
    responses((status = 200, body = SessionList), (status = 400, body = ErrorBody)))]
pub async fn list(
    State(app): State<AppState>,
    principal: Principal,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Json<SessionList>, ApiError> {
    let Query(params) = params?;
    let limit = params.limit.unwrap_or(50);
    if limit == 0 || limit > MAX_LIST {
        return Err(ApiError::invalid(format!("`limit` must be 1-{MAX_LIST}")));
    }
    if params
        .q
        .as_ref()
        .is_some_and(|q| q.chars().count() > MAX_QUERY_CHARS)
    {
        return Err(ApiError::invalid(format!(
            "`q` must be at most {MAX_QUERY_CHARS} characters"
        )));
    }
    let start = match (params.before, params.offset) {
        (Some(_), Some(_)) => return Err(ApiError::invalid("give `before` or `offset`, not both")),
        (Some(token), None) => PageStart::Before(Cursor::from_token(&token).ok_or_else(|| {
            ApiError::invalid("`before` must be the `next_before` of a page of this list")
        })?),
        (None, offset) => PageStart::Offset(offset.unwrap_or(0)),
    };
    let first_page = matches!(start, PageStart::Offset(0)) && params.q.is_none();
    let query = SessionQuery {
        limit,
        start,
        search: params.q.filter(|q| !q.is_empty()),
        count: params.total.unwrap_or(false),
    };
    let page = app.manager.list(&principal, &query).await?;
    let next_before = page
        .rows
        .last()
        .filter(|_| page.more)
        .map(|last| Cursor::after(last).token());
    let owners = app.manager.owner_nodes(&page.rows).await;
    let sessions = page
        .rows
        .into_iter()
        .zip(owners)
        .map(|(record, owner)| {
            let status = app.manager.activity(&principal, &record.agent_id);
            SessionSummary::new(record, status, owner)
        })
        .collect();
    let shared = if first_page {
        shared_summaries(&app, &principal).await?
    } else {
        Vec::new()
    };
    Ok(Json(SessionList {
        sessions,
        total: page.total,
        next_before,
        shared,
    }))
}

/// One conversation.
#[utoipa::path(get, path = "/api/sessions/{agent_id}", operation_id = "get_session",
    params(("agent_id" = String, Path, description = "The conversation")),
    responses((status = 200, body = SessionSummary), (status = 404, body = ErrorBody)))]
pub async fn get_one(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<SessionSummary>, ApiError> {
    let id = agent_id(id)?;
    let acting = app.manager.acting(&principal, &id, Need::View).await?;
    Ok(Json(acting_summary(&app, &acting).await?))
}

/// Stored messages by `seq` range.
#[utoipa::path(get, path = "/api/sessions/{agent_id}/messages", operation_id = "list_messages",
    params(("agent_id" = String, Path, description = "The conversation"), MessagesParams),
    responses((status = 200, body = MessagesPage), (status = 404, body = ErrorBody)))]
pub async fn messages(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    params: Result<Query<MessagesParams>, QueryRejection>,
) -> Result<Json<MessagesPage>, ApiError> {
    let id = agent_id(id)?;
    let Query(params) = params?;
    let limit = params.limit.unwrap_or(200);
    if limit == 0 || limit > MAX_MESSAGES {
        return Err(ApiError::invalid(format!(
            "`limit` must be 1-{MAX_MESSAGES}"
        )));
    }
    let acting = app.manager.acting(&principal, &id, Need::View).await?;
    let (frames, has_more) = app
        .manager
        .messages(
            &acting.principal,
            &acting.agent_id,
            params.after_seq.unwrap_or(0),
            limit,
        )
        .await?;
    let frames: Vec<Frame> = frames.into_iter().map(|f| named(&id, f)).collect();
    // A stored row that is not JSON (written by something other than this server) is left
    // out, never allowed to fail the page.
    let messages = frames
        .iter()
        .filter_map(|frame| {
            serde_json::value::RawValue::from_string(frame.text.as_str().to_owned())
                .inspect_err(|err| {
                    tracing::warn!(agent_id = %id.as_str(), seq = ?frame.seq, error = %err,
                        "a stored frame is not JSON; it is left out of the page");
                })
                .ok()
        })
        .collect();
    Ok(Json(MessagesPage { messages, has_more }))
}

/// Renames a conversation.
#[utoipa::path(patch, path = "/api/sessions/{agent_id}", operation_id = "rename_session",
    request_body = RenameBody,
    params(("agent_id" = String, Path, description = "The conversation")),
    responses((status = 200, body = SessionSummary), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn rename(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Result<Json<RenameBody>, JsonRejection>,
) -> Result<Json<SessionSummary>, ApiError> {
    let id = agent_id(id)?;
    let Json(body) = body?;
    let renamed = async {
        app.manager.acting(&principal, &id, Need::Own).await?;
        app.manager.rename(&principal, &id, &body.title).await
    };
    let entry = Audit::new(&principal, "rename")
        .on(&principal, &id)
        .detail(serde_json::json!({ "title": body.title }));
    let record = app.manager.audited(entry, renamed.await).await?;
    Ok(Json(summary(&app, &principal, record).await))
}

/// What deleting a conversation with a worktree did with its branch.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeletedWorktree {
    /// The worktree's branch, kept because its base lacks some of it; None when it was
    /// removed with the worktree.
    pub kept_branch: Option<String>,
}

/// Deletes a conversation: stops its agent (mid-turn too) and removes every stored message and
/// its workspace directory, or its worktree (whose branch stays unless merged).
#[utoipa::path(delete, path = "/api/sessions/{agent_id}", operation_id = "delete_session",
    params(("agent_id" = String, Path, description = "The conversation")),
    responses((status = 204, description = "Deleted"),
        (status = 200, description = "Deleted with its worktree", body = DeletedWorktree),
        (status = 404, body = ErrorBody)))]
pub async fn delete(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = agent_id(id)?;
    let deleted = async {
        app.manager.acting(&principal, &id, Need::Own).await?;
        app.manager.delete(&principal, &id).await
    };
    let entry = Audit::new(&principal, "delete").on(&principal, &id);
    Ok(match app.manager.audited(entry, deleted.await).await? {
        Some(kept_branch) => Json(DeletedWorktree { kept_branch }).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    })
}

/// The conversation as JSONL, one stored message a line.
#[utoipa::path(get, path = "/api/sessions/{agent_id}/export", operation_id = "export_session",
    params(("agent_id" = String, Path, description = "The conversation")),
    responses((status = 200, description = "One `ExportLine` a line", content_type = "application/x-ndjson", body = ExportLine),
        (status = 404, body = ErrorBody)))]
pub async fn export(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = agent_id(id)?;
    let acting = app.manager.acting(&principal, &id, Need::View).await?;
    let exported = app
        .manager
        .export(&acting.principal, &acting.agent_id)
        .await;
    let entry = Audit::new(&principal, "export").on(&acting.principal, &acting.agent_id);
    let lines = app.manager.audited(entry, exported).await?;
    let body =
        Body::from_stream(lines.map(|line| line.map_err(|err| std::io::Error::other(err.message))));
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{id}.jsonl\""),
            ),
        ],
        body,
    )
        .into_response())
}

/// Creates a conversation from an export (JSONL). Its messages keep their order and content
/// (`seq`s are assigned anew from 1); its agent starts fresh, and a stored `status`
/// `imported` says so. The body is stored as it arrives; the conversation appears only once
/// all of it is stored, and nothing is left of a failed import.
#[utoipa::path(post, path = "/api/sessions/import", operation_id = "import_session",
    params(ImportParams),
    request_body(content = String, content_type = "application/x-ndjson", description = "An export: one `ExportLine` a line"),
    responses((status = 201, body = SessionSummary), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn import(
    State(app): State<AppState>,
    principal: Principal,
    params: Result<Query<ImportParams>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<SessionSummary>), ApiError> {
    let Query(params) = params?;
    let id = agent_id(params.agent_id)?;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_IMPORT_BYTES as u64) {
        return Err(ApiError::invalid(format!(
            "an import is at most {} MiB",
            MAX_IMPORT_BYTES >> 20
        )));
    }
    // Read as it arrives: the body is never held whole.
    let lines = body.into_data_stream();
    let imported = app
        .manager
        .import(&principal, &id, lines, MAX_IMPORT_BYTES)
        .await;
    let entry = Audit::new(&principal, "import").on(&principal, &id);
    let record = app.manager.audited(entry, imported).await?;
    Ok((
        StatusCode::CREATED,
        Json(summary(&app, &principal, record).await),
    ))
}

/// The `Last-Event-ID` header: the last `seq` an event stream client saw.
pub(crate) fn last_event_id(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
    match headers.get("last-event-id") {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .filter(|n| *n >= 0)
            .map(Some)
            .ok_or_else(|| ApiError::invalid("`Last-Event-ID` must be a non-negative integer")),
    }
}
