//! Handlers of `/api/me/credentials` (the caller's own agent credentials: set, listed by name,
//! removed; never shown), `/api/budgets/{principal}` (spending caps: anyone sees their own, an
//! admin sets anyone's), `/api/sessions/{agent_id}/budget` (a conversation's own cap) and
//! `/api/usage` (what turns cost, summed by day, conversation, agent or model).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::{IntoParams, ToSchema};

use super::principal_named;
use super::sessions::agent_id;
use super::turns::FrameBody;
use crate::http::auth::Principal;
use crate::http::{ApiError, AppState, ErrorBody};
use crate::session::credentials::{AgentCredentials, CredentialName};
use crate::session::spend::Budget;
use crate::session::{Audit, CapOverride, GroupBy, UsageQuery, UsageRow};

/// The caller's credentials for every agent that takes some.
#[derive(Debug, Serialize, ToSchema)]
pub struct CredentialList {
    /// By agent name.
    pub agents: Vec<AgentCredentials>,
}

/// The variables to set; those set before and not named here stay.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialsBody {
    /// Variable name → value; names must be among those the agent takes.
    pub env: BTreeMap<String, String>,
}

/// What was set, by name.
#[derive(Debug, Serialize, ToSchema)]
pub struct CredentialsSet {
    /// The agent.
    pub agent: String,
    /// The variables this request set.
    pub set: Vec<CredentialName>,
}

/// The caller's credentials, by name and when each was set; values are never returned.
#[utoipa::path(get, path = "/api/me/credentials", operation_id = "list_credentials",
    responses((status = 200, body = CredentialList)))]
pub async fn list_credentials(
    State(app): State<AppState>,
    principal: Principal,
) -> Result<Json<CredentialList>, ApiError> {
    let agents = app.manager.credentials(&principal).await?;
    Ok(Json(CredentialList { agents }))
}

/// The caller's credentials for one agent, by name.
#[utoipa::path(get, path = "/api/me/credentials/{agent}", operation_id = "get_credentials",
    params(("agent" = String, Path, description = "The agent's name")),
    responses((status = 200, body = AgentCredentials), (status = 404, body = ErrorBody)))]
pub async fn get_credentials(
    State(app): State<AppState>,
    principal: Principal,
    Path(agent): Path<String>,
) -> Result<Json<AgentCredentials>, ApiError> {
    app.manager
        .credentials(&principal)
        .await?
        .into_iter()
        .find(|c| c.agent == agent)
        .map(Json)
        .ok_or_else(|| {
            ApiError::new(
                crate::protocol::ErrorCode::UnknownAgent,
                "no agent of that name takes credentials",
            )
        })
}

/// Sets the caller's own credentials for an agent, each replacing one of the same name: they are sealed
/// at rest, added to the environment of the caller's agents only, and their live agents start
/// again on them at their next turn.
#[utoipa::path(put, path = "/api/me/credentials/{agent}", operation_id = "put_credentials",
    request_body = CredentialsBody,
    params(("agent" = String, Path, description = "The agent's name")),
    responses((status = 200, body = CredentialsSet),
        (status = 400, description = "`invalid_request`: a name the agent does not take, a value empty, over the size cap or with NUL", body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 422, description = "`unsupported`: the server has no secret key", body = ErrorBody)))]
pub async fn put_credentials(
    State(app): State<AppState>,
    principal: Principal,
    Path(agent): Path<String>,
    body: Result<Json<FrameBody<CredentialsBody>>, JsonRejection>,
) -> Result<Json<CredentialsSet>, ApiError> {
    let Json(FrameBody(body)) = body?;
    // The names set, never their values.
    let entry = Audit::new(&principal, "credentials_set")
        .of(&principal)
        .detail(json!({ "agent": agent, "names": body.env.keys().collect::<Vec<_>>() }));
    let set = app.manager.set_credentials(&principal, &agent, &body.env);
    let set = app.manager.audited(entry, set.await).await?;
    Ok(Json(CredentialsSet { agent, set }))
}

/// Removes the caller's credentials for an agent.
#[utoipa::path(delete, path = "/api/me/credentials/{agent}", operation_id = "delete_credentials",
    params(("agent" = String, Path, description = "The agent's name")),
    responses((status = 204, description = "Removed"), (status = 404, body = ErrorBody)))]
pub async fn delete_credentials(
    State(app): State<AppState>,
    principal: Principal,
    Path(agent): Path<String>,
) -> Result<StatusCode, ApiError> {
    let entry = Audit::new(&principal, "credentials_delete")
        .of(&principal)
        .detail(json!({ "agent": agent }));
    let deleted = app.manager.delete_credentials(&principal, &agent).await;
    app.manager.audited(entry, deleted).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A principal's caps: each a number of US dollars, or absent for the configured default.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetBody {
    /// Per day (UTC).
    pub daily_usd: Option<f64>,
    /// Per calendar month (UTC).
    pub monthly_usd: Option<f64>,
}

/// The principal a path or query names; `me` is the caller.
fn principal_in(raw: &str, caller: &Principal) -> Result<Principal, ApiError> {
    if raw == "me" {
        return Ok(caller.clone());
    }
    principal_named(raw, "principal")
}

/// A principal's caps and what they spent today and this month (their own, or anyone's for
/// an admin).
#[utoipa::path(get, path = "/api/budgets/{principal}", operation_id = "get_budget",
    params(("principal" = String, Path, description = "Whose (`me`: the caller)")),
    responses((status = 200, body = Budget), (status = 403, body = ErrorBody)))]
pub async fn get_budget(
    State(app): State<AppState>,
    principal: Principal,
    Path(whose): Path<String>,
) -> Result<Json<Budget>, ApiError> {
    let whose = principal_in(&whose, &principal)?;
    Ok(Json(app.manager.budget(&principal, &whose).await?))
}

/// Sets a principal's caps (admins only).
#[utoipa::path(put, path = "/api/budgets/{principal}", operation_id = "put_budget",
    request_body = BudgetBody,
    params(("principal" = String, Path, description = "Whose")),
    responses((status = 200, body = Budget),
        (status = 400, description = "`invalid_request`: a cap negative, not a number or over 1000000", body = ErrorBody),
        (status = 403, body = ErrorBody)))]
pub async fn put_budget(
    State(app): State<AppState>,
    principal: Principal,
    Path(whose): Path<String>,
    body: Result<Json<FrameBody<BudgetBody>>, JsonRejection>,
) -> Result<Json<Budget>, ApiError> {
    let whose = principal_in(&whose, &principal)?;
    let Json(FrameBody(body)) = body?;
    let caps = CapOverride {
        daily_usd: body.daily_usd,
        monthly_usd: body.monthly_usd,
    };
    Ok(Json(
        app.manager
            .set_budget(&principal, &whose, Some(caps))
            .await?,
    ))
}

/// Puts a principal's caps back to the configured defaults (admins only).
#[utoipa::path(delete, path = "/api/budgets/{principal}", operation_id = "delete_budget",
    params(("principal" = String, Path, description = "Whose")),
    responses((status = 200, body = Budget), (status = 403, body = ErrorBody)))]
pub async fn delete_budget(
    State(app): State<AppState>,
    principal: Principal,
    Path(whose): Path<String>,
) -> Result<Json<Budget>, ApiError> {
    let whose = principal_in(&whose, &principal)?;
    Ok(Json(
        app.manager.set_budget(&principal, &whose, None).await?,
    ))
}

/// A conversation's own cap.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConversationCap {
    /// US dollars, from 0 to 1000000.
    pub budget_usd: f64,
}

/// Whose conversation a cap is set on: an admin may name its owner.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct CapParams {
    /// The conversation's owner (admins only; default the caller).
    pub principal: Option<String>,
}

/// Sets (raises or lowers) the caller's conversation's own cap; an admin may set another
/// principal's by naming them.
#[utoipa::path(put, path = "/api/sessions/{agent_id}/budget", operation_id = "put_conversation_budget",
    request_body = ConversationCap,
    params(("agent_id" = String, Path, description = "The conversation"), CapParams),
    responses((status = 200, body = ConversationCap), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn put_conversation_budget(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    params: Result<Query<CapParams>, QueryRejection>,
    body: Result<Json<FrameBody<ConversationCap>>, JsonRejection>,
) -> Result<Json<ConversationCap>, ApiError> {
    let id = agent_id(id)?;
    let Query(params) = params?;
    let owner = match params.principal {
        Some(owner) => principal_in(&owner, &principal)?,
        None => principal.clone(),
    };
    let Json(FrameBody(body)) = body?;
    let entry = Audit::new(&principal, "conversation_budget")
        .on(&owner, &id)
        .detail(json!({ "budget_usd": body.budget_usd }));
    let set = (app.manager)
        .set_conversation_cap(&principal, &owner, &id, body.budget_usd)
        .await;
    app.manager.audited(entry, set).await?;
    Ok(Json(body))
}

/// Which turns a usage report sums.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UsageParams {
    /// First day (`YYYY-MM-DD`, UTC), inclusive; default 30 days before `to`.
    pub from: Option<String>,
    /// Last day (`YYYY-MM-DD`, UTC), inclusive; default today.
    pub to: Option<String>,
    /// `day` (default), `conversation`, `agent` or `model`.
    pub group_by: Option<GroupBy>,
    /// Whose turns (default the caller's); an admin may name anyone, or `*` for everyone.
    pub principal: Option<String>,
}

/// A usage report.
#[derive(Debug, Serialize, ToSchema)]
pub struct Usage {
    /// First day summed.
    pub from: String,
    /// Last day summed.
    pub to: String,
    /// What the groups are.
    pub group_by: GroupBy,
    /// One row per group, in order of its key.
    pub rows: Vec<UsageRow>,
    /// All groups together.
    pub total: UsageTotal,
}

/// The sums of a whole report.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct UsageTotal {
    /// Cost in US dollars.
    pub cost_usd: f64,
    /// Input tokens.
    pub input_tokens: i64,
    /// Output tokens.
    pub output_tokens: i64,
    /// Input tokens read from the prompt cache.
    pub cache_read_tokens: i64,
    /// Input tokens written to the prompt cache.
    pub cache_creation_tokens: i64,
    /// Turns.
    pub turns: i64,
}

/// Longest span a report covers, in days.
const MAX_USAGE_DAYS: i64 = 366;

fn day(raw: &str, what: &str) -> Result<chrono::NaiveDate, ApiError> {
    chrono::NaiveDate::parse_from_str(raw, "%Y-%m-%d")
        .ok()
        .filter(|_| raw.len() == 10)
        .ok_or_else(|| ApiError::invalid(format!("`{what}` must be a day, YYYY-MM-DD")))
}

/// What turns cost (as their agents reported it) and their tokens, summed per day, per
/// conversation, per agent or per model; the caller's own, or (an admin) anyone's.
#[utoipa::path(get, path = "/api/usage", operation_id = "usage", params(UsageParams),
    responses((status = 200, body = Usage), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody)))]
pub async fn usage(
    State(app): State<AppState>,
    principal: Principal,
    params: Result<Query<UsageParams>, QueryRejection>,
) -> Result<Json<Usage>, ApiError> {
    let Query(params) = params?;
    let to = match &params.to {
        Some(raw) => day(raw, "to")?,
        None => chrono::Utc::now().date_naive(),
    };
    let from = match &params.from {
        Some(raw) => day(raw, "from")?,
        None => to - chrono::Days::new(29),
    };
    let span = (to - from).num_days();
    if !(0..MAX_USAGE_DAYS).contains(&span) {
        return Err(ApiError::invalid(format!(
            "`from` must be on or before `to`, at most {MAX_USAGE_DAYS} days before it"
        )));
    }
    let whose = match params.principal.as_deref() {
        Some("*") => None,
        Some(raw) => Some(principal_in(raw, &principal)?),
        None => Some(principal.clone()),
    };
    let group_by = params.group_by.unwrap_or(GroupBy::Day);
    let end = to + chrono::Days::new(1);
    let query = UsageQuery {
        principal: whose,
        from: format!("{from}T00:00:00.000Z"),
        to: format!("{end}T00:00:00.000Z"),
        group_by,
    };
    let rows = app.manager.usage(&principal, query).await?;
    let mut total = UsageTotal::default();
    for r in &rows {
        total.cost_usd += r.cost_usd;
        total.input_tokens += r.input_tokens;
        total.output_tokens += r.output_tokens;
        total.cache_read_tokens += r.cache_read_tokens;
        total.cache_creation_tokens += r.cache_creation_tokens;
        total.turns += r.turns;
    }
    Ok(Json(Usage {
        from: from.to_string(),
        to: to.to_string(),
        group_by,
        rows,
        total,
    }))
}
