//! Handlers of `/api/sessions/{agent_id}/shares` (the owner shares a conversation with another
//! principal as a viewer or an editor, lists and revokes its shares) and `/api/shares` (the
//! conversations shared with the caller). Only the owner manages shares: anyone else is
//! answered as for an unknown conversation, or `forbidden` when it is shared with them.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::principal_named;
use super::sessions::agent_id;
use super::summaries::SessionSummary;
use super::summaries::shared_summaries;
use super::turns::FrameBody;
use crate::http::auth::Principal;
use crate::http::{ApiError, AppState, ErrorBody};
use crate::protocol::Role;
use crate::session::{Need, ShareRow};

/// A share as its owner sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Share {
    /// Whom the conversation is shared with.
    pub principal: String,
    /// What they may do with it.
    pub role: Role,
    /// The `agent_id` they know it by (`~` and 16 letters and digits).
    pub agent_id: String,
    /// When it was first shared with them (RFC 3339).
    pub created_at: String,
}

impl From<ShareRow> for Share {
    fn from(row: ShareRow) -> Self {
        Share {
            principal: row.principal.to_string(),
            role: row.role,
            agent_id: row.alias.to_string(),
            created_at: row.created_at,
        }
    }
}

/// A conversation's shares.
#[derive(Debug, Serialize, ToSchema)]
pub struct ShareList {
    /// Oldest first.
    pub shares: Vec<Share>,
}

/// The role to give.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ShareBody {
    /// `viewer` or `editor`.
    pub role: Role,
}

/// The conversations shared with the caller.
#[derive(Debug, Serialize, ToSchema)]
pub struct SharedList {
    /// Each under the alias the caller knows it by, with its `owner` and the caller's `role`.
    pub sessions: Vec<SessionSummary>,
}

/// The owner's own conversation `raw` names, for managing its shares and links.
pub(super) async fn owned(
    app: &AppState,
    principal: &Principal,
    raw: String,
) -> Result<crate::protocol::AgentId, ApiError> {
    let id = agent_id(raw)?;
    app.manager.acting(principal, &id, Need::Own).await?;
    Ok(id)
}

/// Shares the conversation with `principal` as `role`, or changes their role. A downgrade or
/// a revocation holds from their next request, and their open streams stop at once on a
/// revocation.
#[utoipa::path(put, path = "/api/sessions/{agent_id}/shares/{principal}", operation_id = "put_share",
    request_body = ShareBody,
    params(("agent_id" = String, Path, description = "The conversation"),
        ("principal" = String, Path, description = "Whom to share it with")),
    responses((status = 200, body = Share), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn put_share(
    State(app): State<AppState>,
    principal: Principal,
    Path((id, with)): Path<(String, String)>,
    body: Result<Json<FrameBody<ShareBody>>, JsonRejection>,
) -> Result<Json<Share>, ApiError> {
    let id = owned(&app, &principal, id).await?;
    let with = principal_named(&with, "principal")?;
    let Json(FrameBody(body)) = body?;
    let share = app.manager.share(&principal, &id, &with, body.role).await?;
    Ok(Json(share.into()))
}

/// Ends the share with `principal`: 204 whether or not there was one.
#[utoipa::path(delete, path = "/api/sessions/{agent_id}/shares/{principal}", operation_id = "delete_share",
    params(("agent_id" = String, Path, description = "The conversation"),
        ("principal" = String, Path, description = "Whom it is shared with")),
    responses((status = 204, description = "Not shared with them (any more)"),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn delete_share(
    State(app): State<AppState>,
    principal: Principal,
    Path((id, with)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let id = owned(&app, &principal, id).await?;
    let with = principal_named(&with, "principal")?;
    app.manager.unshare(&principal, &id, &with).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Everyone the conversation is shared with.
#[utoipa::path(get, path = "/api/sessions/{agent_id}/shares", operation_id = "list_shares",
    params(("agent_id" = String, Path, description = "The conversation")),
    responses((status = 200, body = ShareList), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn list_shares(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<ShareList>, ApiError> {
    let id = owned(&app, &principal, id).await?;
    let shares = app.manager.shares(&principal, &id).await?;
    Ok(Json(ShareList {
        shares: shares.into_iter().map(Share::from).collect(),
    }))
}

/// The conversations other principals shared with the caller.
#[utoipa::path(get, path = "/api/shares", operation_id = "shared_with_me",
    responses((status = 200, body = SharedList)))]
pub async fn shared_with_me(
    State(app): State<AppState>,
    principal: Principal,
) -> Result<Json<SharedList>, ApiError> {
    Ok(Json(SharedList {
        sessions: shared_summaries(&app, &principal).await?,
    }))
}
