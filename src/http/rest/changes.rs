//! Handlers of `/api/sessions/{agent_id}/changes`: what a conversation changed in its own git
//! worktree, and committing, merging or discarding it. Another principal's conversation is
//! answered as unknown; one shared with the caller as a viewer may be read, as an editor landed.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::sessions::agent_id;
use crate::http::auth::Principal;
use crate::http::{ApiError, AppState, ErrorBody};
use crate::session::Need;
use crate::worktrees::{Changes, Merged, Strategy};

/// Longest commit or merge message, in bytes.
const MAX_MESSAGE_BYTES: usize = 16 * 1024;

/// A commit or merge message as given: non-empty, at most [`MAX_MESSAGE_BYTES`], no NUL.
fn message(text: &str) -> Result<&str, ApiError> {
    if text.trim().is_empty() || text.len() > MAX_MESSAGE_BYTES || text.contains('\0') {
        return Err(ApiError::invalid(format!(
            "`message` must be non-empty text of at most {MAX_MESSAGE_BYTES} bytes without NUL"
        )));
    }
    Ok(text)
}

/// What the conversation changed in its worktree against where its branch left its base:
/// committed, uncommitted and new files, with the unified diff (cut at
/// `worktrees.max_diff_bytes`, `truncated` then).
#[utoipa::path(get, path = "/api/sessions/{agent_id}/changes", operation_id = "get_changes",
    params(("agent_id" = String, Path, description = "The conversation")),
    responses((status = 200, body = Changes), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn get_changes(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<Changes>, ApiError> {
    let id = agent_id(id)?;
    let acting = app.manager.acting(&principal, &id, Need::View).await?;
    Ok(Json(
        app.manager
            .changes(&acting.principal, &acting.agent_id)
            .await?,
    ))
}

/// The body of a commit.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitBody {
    /// The commit message.
    pub message: String,
}

/// What a commit made.
#[derive(Debug, Serialize, ToSchema)]
pub struct Committed {
    /// The new commit on the conversation's branch; null when there was nothing to commit.
    pub commit: Option<String>,
}

/// Commits everything in the conversation's worktree on its branch.
#[utoipa::path(post, path = "/api/sessions/{agent_id}/changes/commit", operation_id = "commit_changes",
    params(("agent_id" = String, Path, description = "The conversation")),
    request_body = CommitBody,
    responses((status = 200, body = Committed), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "`busy`: a turn or a rewind is on", body = ErrorBody)))]
pub async fn commit(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Result<Json<CommitBody>, JsonRejection>,
) -> Result<Json<Committed>, ApiError> {
    let id = agent_id(id)?;
    let acting = app.manager.acting(&principal, &id, Need::Edit).await?;
    let Json(body) = body?;
    let commit = app
        .manager
        .commit_changes(&acting.principal, &acting.agent_id, message(&body.message)?)
        .await?;
    Ok(Json(Committed { commit }))
}

/// The body of a merge.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MergeBody {
    /// `merge` (a merge commit) or `squash` (one commit with all the changes).
    pub strategy: Strategy,
    /// The new commit's message; a default naming the branch when absent.
    #[serde(default)]
    pub message: Option<String>,
}

/// Merges what is committed on the conversation's branch into its base branch. Nothing
/// changes on a conflict (409 naming the paths), when the worktree has uncommitted changes,
/// when the base branch is checked out somewhere with uncommitted changes (409 naming it) or
/// with files git doesn't track where the merge adds files (409 naming them), or while a turn
/// or a rewind is on (409 `busy`).
#[utoipa::path(post, path = "/api/sessions/{agent_id}/changes/merge", operation_id = "merge_changes",
    params(("agent_id" = String, Path, description = "The conversation")),
    request_body = MergeBody,
    responses((status = 200, body = Merged), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn merge(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Result<Json<MergeBody>, JsonRejection>,
) -> Result<Json<Merged>, ApiError> {
    let id = agent_id(id)?;
    let acting = app.manager.acting(&principal, &id, Need::Edit).await?;
    let Json(body) = body?;
    let text = body.message.as_deref().map(message).transpose()?;
    let merged = app
        .manager
        .merge_changes(&acting.principal, &acting.agent_id, body.strategy, text)
        .await?;
    Ok(Json(merged))
}

/// The body of a discard: it must say `confirm: true`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DiscardBody {
    /// Must be true: the worktree's changes, committed or not, are dropped.
    pub confirm: bool,
}

/// Returns the conversation's worktree to its base: every change in it, committed on its
/// branch or not, is dropped.
#[utoipa::path(post, path = "/api/sessions/{agent_id}/changes/discard", operation_id = "discard_changes",
    params(("agent_id" = String, Path, description = "The conversation")),
    request_body = DiscardBody,
    responses((status = 204), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "`busy`: a turn or a rewind is on", body = ErrorBody)))]
pub async fn discard(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Result<Json<DiscardBody>, JsonRejection>,
) -> Result<StatusCode, ApiError> {
    let id = agent_id(id)?;
    let acting = app.manager.acting(&principal, &id, Need::Edit).await?;
    let Json(body) = body?;
    if !body.confirm {
        return Err(ApiError::invalid(
            "a discard drops every change of the worktree: send `{\"confirm\": true}`",
        ));
    }
    app.manager
        .discard_changes(&acting.principal, &acting.agent_id)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
