//! `GET /api/audit`: the audit log, newest first, filtered and paged by a cursor — the entries
//! of the caller's own conversations, or everyone's for the server's admins. Nothing changes or
//! deletes an entry through the API.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::principal_named;
use crate::http::auth::Principal;
use crate::http::{ApiError, AppState, ErrorBody};
use crate::protocol::AgentId;
use crate::session::{AuditQuery, AuditRow};

/// Most entries one page holds.
const MAX_LIMIT: u32 = 500;
/// Longest action name accepted as a filter.
const MAX_ACTION_CHARS: usize = 64;

/// Which entries.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditParams {
    /// Only this conversation's (the owner's `agent_id`).
    agent_id: Option<String>,
    /// Only the entries of this principal's conversations (admins; anyone else may name only
    /// themself).
    owner: Option<String>,
    /// Only what this principal did.
    principal: Option<String>,
    /// Only this action (`chat`, `share`, …).
    action: Option<String>,
    /// Only entries at or after this time (RFC 3339).
    since: Option<String>,
    /// Only entries before this time (RFC 3339).
    until: Option<String>,
    /// The `next_before` of the previous page.
    before: Option<i64>,
    /// Most entries (1-500, default 100).
    limit: Option<u32>,
}

/// One entry.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditEntry {
    /// Its place in the log (later entries have greater ids).
    pub id: i64,
    /// When (RFC 3339).
    pub at: String,
    /// Who acted.
    pub principal: String,
    /// What they did.
    pub action: String,
    /// Whose conversation (or schedule) it concerned; null for none, or for one the principal
    /// could not name (an unknown id).
    pub owner: Option<String>,
    /// The owner's `agent_id` of it.
    pub agent_id: Option<String>,
    /// The action's particulars.
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
    /// `ok`, or the error code it was refused with.
    pub outcome: String,
}

impl From<AuditRow> for AuditEntry {
    fn from(row: AuditRow) -> Self {
        AuditEntry {
            id: row.id,
            at: row.at,
            principal: row.principal,
            action: row.action,
            owner: row.owner,
            agent_id: row.agent_id,
            detail: serde_json::from_str(&row.detail).unwrap_or_default(),
            outcome: row.outcome,
        }
    }
}

/// A page of entries.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditPage {
    /// Newest first.
    pub entries: Vec<AuditEntry>,
    /// The `before` of the next page; null when this is the last.
    pub next_before: Option<i64>,
}

/// A time filter as the store compares it: RFC 3339 in UTC with milliseconds.
fn instant(name: &str, raw: Option<String>) -> Result<Option<String>, ApiError> {
    raw.map(|raw| {
        chrono::DateTime::parse_from_rfc3339(&raw)
            .map(|t| {
                t.with_timezone(&chrono::Utc)
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            })
            .map_err(|_| ApiError::invalid(format!("`{name}` must be an RFC 3339 time")))
    })
    .transpose()
}

/// The audit log's entries the caller may read, newest first.
#[utoipa::path(get, path = "/api/audit", operation_id = "audit_log", params(AuditParams),
    responses((status = 200, body = AuditPage), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody)))]
pub async fn list(
    State(app): State<AppState>,
    principal: Principal,
    params: Result<Query<AuditParams>, QueryRejection>,
) -> Result<Json<AuditPage>, ApiError> {
    let Query(params) = params?;
    let limit = params.limit.unwrap_or(100);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(format!("`limit` must be 1-{MAX_LIMIT}")));
    }
    if params.before.is_some_and(|b| b < 1) {
        return Err(ApiError::invalid(
            "`before` must be the `next_before` of a page",
        ));
    }
    let name = |field: &str, raw: Option<String>| {
        (raw.map(|raw| principal_named(&raw, field).map(|p| p.to_string()))).transpose()
    };
    let action = params.action.filter(|a| !a.is_empty());
    if action.as_ref().is_some_and(|a| {
        a.len() > MAX_ACTION_CHARS || !a.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
    }) {
        return Err(ApiError::invalid(
            "`action` is an action's name: lowercase letters and `_`",
        ));
    }
    let query = AuditQuery {
        agent_id: params
            .agent_id
            .map(AgentId::parse)
            .transpose()?
            .map(|a| a.to_string()),
        owner: name("owner", params.owner)?,
        principal: name("principal", params.principal)?,
        action,
        since: instant("since", params.since)?,
        until: instant("until", params.until)?,
        before_id: params.before,
        limit: limit + 1,
    };
    let mut rows = app.manager.audit_log(&principal, query).await?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next_before = rows.last().filter(|_| more).map(|r| r.id);
    Ok(Json(AuditPage {
        entries: rows.into_iter().map(AuditEntry::from).collect(),
        next_before,
    }))
}
