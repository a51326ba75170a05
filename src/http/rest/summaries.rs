//! How a conversation is described to its caller: its summary as listed and fetched, under
//! its own `agent_id`, or, for one shared with the caller, under the alias they know it by with
//! its owner and their role.

use serde::Serialize;
use utoipa::ToSchema;

use crate::http::ApiError;
use crate::http::AppState;
use crate::http::auth::Principal;
use crate::protocol::{AgentId, Role, SessionId};
use crate::session::{Acting, Activity, SessionRecord};

/// One conversation, as listed and fetched.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SessionSummary {
    /// The client's routing key.
    #[schema(value_type = String)]
    pub agent_id: AgentId,
    /// The server's id of the conversation.
    #[schema(value_type = String)]
    pub session_id: SessionId,
    /// The agent's own session id (what a resume continues); null until reported.
    pub sdk_session_id: Option<String>,
    /// Title: the start of the first user message, or what it was renamed to.
    pub title: Option<String>,
    /// What it is doing now: `busy` (a turn running or queued), `idle` (its agent is live
    /// with nothing to do) or `dormant` (the next chat resumes it).
    pub status: Activity,
    /// Whether the conversation is loaded in memory now (`status` is not `dormant`).
    pub live: bool,
    /// The node running the conversation now (`--node-id`), when several nodes share a
    /// PostgreSQL store; null when none does, and always on a single node's SQLite store.
    pub owner_node: Option<String>,
    /// `claude` or `demo`.
    pub backend: String,
    /// Model the agent runs with, if one was chosen.
    pub model: Option<String>,
    /// Permission mode the agent runs with, if one was chosen.
    pub permission_mode: Option<String>,
    /// The agent's working directory: a project directory, the conversation's own workspace,
    /// or the same place in its own worktree. Fixed for the conversation's life; a fork keeps
    /// it (in a worktree of its own).
    pub cwd: String,
    /// The conversation's own git worktree, if it works in one.
    pub worktree: Option<WorktreeSummary>,
    /// Whose conversation it is, when another principal shared it with the caller (its
    /// `agent_id` is then the alias the caller knows it by).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// What the caller may do with it, when it is shared with them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// Text appended to the agent's system prompt, if any.
    pub system_prompt: Option<String>,
    /// Tool-name patterns the agent may use without asking.
    pub allowed_tools: Vec<String>,
    /// Tool-name patterns the agent may never use.
    pub disallowed_tools: Vec<String>,
    /// Most agentic turns per user turn, if limited.
    pub max_turns: Option<u32>,
    /// More directories the agent may use.
    pub add_dirs: Vec<String>,
    /// Stored messages.
    pub message_count: i64,
    /// User turns stored.
    pub turn_count: i64,
    /// Highest `seq` ever assigned (never reused, even after a rewind).
    pub last_seq: i64,
    /// Creation time (RFC 3339).
    pub created_at: String,
    /// Time of the last stored message (RFC 3339).
    pub last_active_at: String,
    /// Total cost reported by the agent, in US dollars.
    pub total_cost_usd: f64,
    /// Total input tokens.
    pub input_tokens: i64,
    /// Total output tokens.
    pub output_tokens: i64,
    /// Total turn duration, in milliseconds.
    pub duration_ms: i64,
    /// Whether a turn the model API's rate limit ends continues by itself, as the
    /// conversation chose (`options.auto_continue`); null follows the server's default.
    pub auto_continue: Option<bool>,
    /// While the conversation waits for a rate limit to reset: when its "continue" turn is
    /// due (RFC 3339). An interrupt cancels the wait.
    pub waiting_for_limit: Option<String>,
}

/// A conversation's git worktree, as listed and fetched.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorktreeSummary {
    /// The conversation's branch.
    pub branch: String,
    /// The branch (or commit) it started from and merges into.
    pub base: String,
    /// The repository's directory the conversation was started in.
    pub project_dir: String,
}

impl SessionSummary {
    pub(crate) fn new(record: SessionRecord, status: Activity, owner_node: Option<String>) -> Self {
        let launch = record.launch_options();
        let worktree = record.worktree().map(|w| WorktreeSummary {
            project_dir: w.repo.join(&w.subdir).to_string_lossy().into_owned(),
            branch: w.branch,
            base: w.base,
        });
        SessionSummary {
            worktree,
            owner: None,
            role: None,
            cwd: record.cwd,
            system_prompt: launch.system_prompt,
            allowed_tools: launch.allowed_tools,
            disallowed_tools: launch.disallowed_tools,
            max_turns: launch.max_turns,
            add_dirs: launch.add_dirs,
            agent_id: record.agent_id,
            session_id: record.session_id,
            sdk_session_id: record.sdk_session_id,
            title: record.title,
            status,
            live: status != Activity::Dormant,
            owner_node,
            backend: record.backend,
            model: record.model,
            permission_mode: record.permission_mode,
            message_count: record.message_count,
            turn_count: record.prompt_count,
            last_seq: record.last_seq,
            created_at: record.created_at,
            last_active_at: record.last_active_at,
            total_cost_usd: record.total_cost_usd,
            input_tokens: record.input_tokens,
            output_tokens: record.output_tokens,
            duration_ms: record.duration_ms,
            auto_continue: record.auto_continue,
            waiting_for_limit: record.limit_wait_until_ms.map(crate::session::rfc3339_ms),
        }
    }
}

pub(crate) async fn summary(
    app: &AppState,
    principal: &Principal,
    record: SessionRecord,
) -> SessionSummary {
    let owner = app.manager.owner_nodes(std::slice::from_ref(&record)).await;
    let status = app.manager.activity(principal, &record.agent_id);
    SessionSummary::new(record, status, owner.into_iter().next().flatten())
}

/// The summary of the conversation `acting` names, as its caller sees it: under the alias
/// they know it by, with its owner and their role, when it is shared with them.
pub(crate) async fn acting_summary(
    app: &AppState,
    acting: &Acting,
) -> Result<SessionSummary, ApiError> {
    let record = app.manager.get(&acting.principal, &acting.agent_id).await?;
    let mut summary = summary(app, &acting.principal, record).await;
    if let Some((alias, role)) = &acting.shared {
        summary.agent_id = alias.clone();
        summary.owner = Some(acting.principal.to_string());
        summary.role = Some(*role);
    }
    Ok(summary)
}

/// Most conversations shared with a principal that a listing shows.
pub(crate) const MAX_SHARED: u32 = 500;

/// The conversations other principals shared with `principal`, oldest share first (the first
/// [`MAX_SHARED`]), each under its alias with its owner and their role: read in one query.
pub(crate) async fn shared_summaries(
    app: &AppState,
    principal: &Principal,
) -> Result<Vec<SessionSummary>, ApiError> {
    let (shares, records): (Vec<_>, Vec<_>) = app
        .manager
        .shared_with(principal, MAX_SHARED)
        .await?
        .into_iter()
        .unzip();
    let owners = app.manager.owner_nodes(&records).await;
    Ok(shares
        .into_iter()
        .zip(records)
        .zip(owners)
        .map(|((share, record), node)| {
            let status = app.manager.activity(&share.owner, &share.agent_id);
            let mut summary = SessionSummary::new(record, status, node);
            summary.agent_id = share.alias;
            summary.owner = Some(share.owner.to_string());
            summary.role = Some(share.role);
            summary
        })
        .collect())
}
