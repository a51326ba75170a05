//! Handler of `/api/agents`: the agents a new conversation can pick with `options.agent`.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use crate::http::AppState;
use crate::http::ErrorBody;
use crate::http::auth::Principal;
use crate::session::AgentInfo;

/// The agents of this server.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentList {
    /// Every agent, by name.
    pub agents: Vec<AgentInfo>,
    /// The name of the agent a conversation gets when its first chat names none.
    pub default: String,
}

/// Lists the agents a conversation can run (`options.agent` on its first chat).
#[utoipa::path(get, path = "/api/agents", operation_id = "list_agents",
    responses((status = 200, body = AgentList), (status = 401, body = ErrorBody)))]
pub async fn list(State(app): State<AppState>, _principal: Principal) -> Json<AgentList> {
    let (agents, default) = app.manager.agents().await;
    Json(AgentList { agents, default })
}
