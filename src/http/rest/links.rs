//! Handlers of `/api/sessions/{agent_id}/links` (the owner makes, lists and revokes a
//! conversation's share links) and `POST /api/links/open` (a signed-in principal opens one and
//! gets the share it gives). A link's token is answered once, when it is made.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::shares::owned;
use super::summaries::SessionSummary;
use super::summaries::acting_summary;
use super::turns::FrameBody;
use crate::http::auth::Principal;
use crate::http::{ApiError, AppState, ErrorBody};
use crate::protocol::Role;
use crate::session::{Acting, LinkRow};

/// Longest token accepted, in bytes (a real one is 81).
const MAX_TOKEN_BYTES: usize = 200;

/// A link as its owner sees it (its secret is never stored, so never shown again).
#[derive(Debug, Serialize, ToSchema)]
pub struct Link {
    /// The link's id, to revoke it by.
    pub id: String,
    /// The role it gives.
    pub role: Role,
    /// When it was made (RFC 3339).
    pub created_at: String,
    /// When it stops working (RFC 3339).
    pub expires_at: String,
    /// How many times it may be opened; null: until it expires.
    pub max_uses: Option<i64>,
    /// How many times it was opened.
    pub uses: i64,
}

impl From<LinkRow> for Link {
    fn from(row: LinkRow) -> Self {
        Link {
            id: row.id,
            role: row.role,
            created_at: row.created_at,
            expires_at: row.expires_at,
            max_uses: row.max_uses,
            uses: row.uses,
        }
    }
}

/// A link just made: the link, its token and the address that opens it.
#[derive(Debug, Serialize, ToSchema)]
pub struct NewLinkBody {
    /// The link.
    #[serde(flatten)]
    pub link: Link,
    /// `ID.SECRET`: what `POST /api/links/open` takes. Shown only now.
    pub token: String,
    /// The web UI's address for it, relative to the server (the token in the fragment, which
    /// browsers never send to a server).
    pub url: String,
}

/// A conversation's links.
#[derive(Debug, Serialize, ToSchema)]
pub struct LinkList {
    /// Oldest first.
    pub links: Vec<Link>,
}

/// What link to make.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkBody {
    /// `viewer` or `editor`.
    pub role: Role,
    /// How long it works, in seconds (1 to 2,592,000: 30 days).
    pub expires_in_secs: u64,
    /// How many times it may be opened (1 to 1000); unlimited until it expires when absent.
    pub max_uses: Option<u32>,
}

/// The link to open.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenBody {
    /// The token the link's owner was given.
    pub token: String,
}

/// Makes a share link to the conversation.
#[utoipa::path(post, path = "/api/sessions/{agent_id}/links", operation_id = "make_link",
    request_body = LinkBody,
    params(("agent_id" = String, Path, description = "The conversation")),
    responses((status = 201, body = NewLinkBody), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn make(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Result<Json<FrameBody<LinkBody>>, JsonRejection>,
) -> Result<(StatusCode, Json<NewLinkBody>), ApiError> {
    let id = owned(&app, &principal, id).await?;
    let Json(FrameBody(body)) = body?;
    let made = app
        .manager
        .make_link(
            &principal,
            &id,
            body.role,
            body.expires_in_secs,
            body.max_uses,
        )
        .await?;
    let url = format!("/#link={}", made.token);
    Ok((
        StatusCode::CREATED,
        Json(NewLinkBody {
            link: made.link.into(),
            token: made.token,
            url,
        }),
    ))
}

/// The conversation's links, expired and used-up ones too until revoked.
#[utoipa::path(get, path = "/api/sessions/{agent_id}/links", operation_id = "list_links",
    params(("agent_id" = String, Path, description = "The conversation")),
    responses((status = 200, body = LinkList), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn list(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<LinkList>, ApiError> {
    let id = owned(&app, &principal, id).await?;
    let links = app.manager.links(&principal, &id).await?;
    Ok(Json(LinkList {
        links: links.into_iter().map(Link::from).collect(),
    }))
}

/// Revokes a link: it opens nothing from now on (the shares it gave stay). 204 whether or not
/// there was one.
#[utoipa::path(delete, path = "/api/sessions/{agent_id}/links/{link_id}", operation_id = "revoke_link",
    params(("agent_id" = String, Path, description = "The conversation"),
        ("link_id" = String, Path, description = "The link's id")),
    responses((status = 204, description = "No such link (any more)"),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn revoke(
    State(app): State<AppState>,
    principal: Principal,
    Path((id, link)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let id = owned(&app, &principal, id).await?;
    app.manager.revoke_link(&principal, &id, &link).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Opens a share link: the conversation is shared with the caller in the link's role (or the
/// greater of it and the one they had), and answered as they now see it.
#[utoipa::path(post, path = "/api/links/open", operation_id = "open_link",
    request_body = OpenBody,
    responses((status = 200, body = SessionSummary), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 410, body = ErrorBody)))]
pub async fn open(
    State(app): State<AppState>,
    principal: Principal,
    body: Result<Json<FrameBody<OpenBody>>, JsonRejection>,
) -> Result<Json<SessionSummary>, ApiError> {
    let Json(FrameBody(body)) = body?;
    if body.token.len() > MAX_TOKEN_BYTES {
        return Err(ApiError::invalid("that is not a share link's token"));
    }
    let share = app.manager.open_link(&principal, &body.token).await?;
    let acting = Acting {
        principal: share.owner,
        agent_id: share.agent_id,
        shared: Some((share.alias, share.role)),
    };
    Ok(Json(acting_summary(&app, &acting).await?))
}
