//! Agent backends: what runs behind a conversation.
//!
//! A backend spawns an [`AgentConn`]: a pair of bounded channels to one running agent. Inputs
//! go in (prompts, interrupts), and the agent's messages come out as [`AgentEvent`]s in the
//! shape of the Claude CLI's stream-json output, whichever backend produced them. Dropping the
//! input side asks the agent to stop; the event channel closes once it has.

pub mod acp;
mod check;
pub mod claude;
pub mod demo;
mod lines;
mod message;
mod pool;
mod process;
pub mod records;
pub mod registry;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::mpsc;

pub use check::{AgentCheck, Problem, SignIn};
pub use message::AgentMessage;

use crate::protocol::{
    AgentId, Content, LaunchOption, LaunchOptions, PermissionDecision, SessionId,
};

/// Capacity of the channel of events from one agent to its session.
pub const EVENT_QUEUE: usize = 256;
/// Capacity of the channel of inputs to one agent.
pub const INPUT_QUEUE: usize = 16;

/// The Claude CLI's permission modes: what `options.permission_mode` may name for the `claude`
/// and `demo` agents (an ACP agent offers its own).
pub const CLI_PERMISSION_MODES: &[&str] = &[
    "default",
    "acceptEdits",
    "bypassPermissions",
    "plan",
    "dontAsk",
    "auto",
    "manual",
];

/// The CLI's permission modes that let it run tools without asking anyone.
pub const CLI_UNATTENDED_MODES: &[&str] = &["bypassPermissions", "auto"];

/// Checks a chat's permission mode against the CLI's names.
///
/// # Errors
/// When `mode` is not one of [`CLI_PERMISSION_MODES`].
pub fn check_cli_mode(mode: Option<&str>) -> Result<(), String> {
    match mode {
        Some(mode) if !CLI_PERMISSION_MODES.contains(&mode) => Err(format!(
            "`options.permission_mode` must be one of {}",
            CLI_PERMISSION_MODES.join(", ")
        )),
        _ => Ok(()),
    }
}

/// How the agent's conversation starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launch {
    /// A new conversation under this id (`--session-id`).
    New {
        /// The id the agent is asked to use.
        session_id: String,
    },
    /// Continue the conversation the agent reported (`--resume`).
    Resume {
        /// The id the agent reported in its init message.
        sdk_session_id: String,
    },
    /// After a rewind, or for a fork at an earlier turn: a new agent session holding the
    /// history of `sdk_session_id` up to and including the assistant message `at_message_uuid`,
    /// and nothing after it. For the Claude CLI: `--resume=<sdk_session_id>
    /// --resume-session-at=<at_message_uuid> --fork-session --session-id=<new_session_id>`
    /// (always in the `=` form). The agent reports `new_session_id` in its init message, and
    /// that is what later launches resume.
    ResumeAt {
        /// The agent session to branch from (an id the agent reported).
        sdk_session_id: String,
        /// uuid of the last assistant message to keep (a `result`'s turn anchor).
        at_message_uuid: String,
        /// A fresh UUID for the new agent session.
        new_session_id: String,
    },
    /// For a fork of a whole conversation: a new agent session holding all of
    /// `sdk_session_id`'s history. For the Claude CLI: `--resume=<sdk_session_id>
    /// --fork-session --session-id=<new_session_id>`.
    Fork {
        /// The agent session to copy (an id the agent reported).
        sdk_session_id: String,
        /// A fresh UUID for the new agent session.
        new_session_id: String,
    },
}

/// Everything a backend needs to start an agent.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    /// The conversation's routing key (for logs).
    pub agent_id: AgentId,
    /// Our id of the conversation.
    pub session_id: SessionId,
    /// Working directory: a project directory, or the conversation's own workspace
    /// `<data-dir>/workspaces/<session_id>`. Never passed in argv.
    pub cwd: PathBuf,
    /// New or resumed.
    pub launch: Launch,
    /// Model, if one was chosen.
    pub model: Option<String>,
    /// Permission mode, if one was chosen.
    pub permission_mode: Option<String>,
    /// Options the agent takes only at start; the session restarts the agent when they change.
    pub options: LaunchOptions,
    /// User turns the conversation already holds (the demo agent's memory).
    pub prior_prompts: i64,
    /// Started with no turn waiting for it (a warm-up or a restart after a crash): it must not
    /// wait behind busy agents for a place, only take a free one or an idle one's.
    pub background: bool,
    /// Whether someone follows the conversation now; an agent nobody follows is stopped first
    /// when places run out.
    pub watched: Watched,
    /// The principal's own credentials for this agent: added to its environment, over the
    /// configured variables of the same names. Never logged.
    pub credentials: Credentials,
    /// What the agent may spend before it stops by itself (an agent that [`Supports::max_budget`]
    /// is told at start), when a cap applies.
    pub max_budget_usd: Option<f64>,
}

/// A principal's own variables for an agent; its `Debug` shows the names only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// The variables, by name.
    pub vars: BTreeMap<String, String>,
    /// Every name the agent takes as a credential: with any of the principal's own set, none
    /// of these but a base URL comes from the server's environment (an operator's key never
    /// rides along with a member's base URL, nor overrides a member's key).
    pub names: Vec<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.vars.keys()).finish()
    }
}

impl Credentials {
    /// `env` with these variables in place of every credential variable it had, when there
    /// are any; `env` unchanged when there are none.
    pub(crate) fn added_to(&self, mut env: Vec<(String, String)>) -> Vec<(String, String)> {
        if self.vars.is_empty() {
            return env;
        }
        let servers = |name: &String| !self.names.contains(name) || name.ends_with("_BASE_URL");
        env.retain(|(name, _)| !self.vars.contains_key(name) && servers(name));
        env.extend(self.vars.iter().map(|(n, v)| (n.clone(), v.clone())));
        env
    }
}

/// Tells whether a conversation has followers right now.
#[derive(Clone)]
pub struct Watched(std::sync::Arc<dyn Fn() -> bool + Send + Sync>);

impl Watched {
    /// From a function that answers it.
    pub fn new(f: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        Watched(std::sync::Arc::new(f))
    }

    /// Whether someone follows the conversation now.
    pub fn now(&self) -> bool {
        (self.0)()
    }
}

impl Default for Watched {
    fn default() -> Self {
        Watched::new(|| false)
    }
}

impl std::fmt::Debug for Watched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Watched({})", self.now())
    }
}

/// An input for a running agent.
#[derive(Debug, Clone)]
pub enum AgentInput {
    /// Start a turn with this user message.
    Prompt(Content),
    /// Stop the running turn; the agent stays alive.
    Interrupt,
    /// Between turns: run the next turns with this model and permission mode (`None`: the
    /// agent's default). Sent before the `Prompt` of the turn that asked for them. The Claude
    /// CLI backend maps them to the `set_model` / `set_permission_mode` control requests; when
    /// the agent refuses one it ends with [`AgentEvent::Exited`], and the session starts it
    /// again with resume under the new settings.
    SetOptions {
        /// Model for the next turns.
        model: Option<String>,
        /// Permission mode for the next turns.
        permission_mode: Option<String>,
    },
    /// Answer a tool permission request.
    Permission {
        /// The agent's id of the request.
        request_id: String,
        /// What the user decided.
        decision: PermissionDecision,
    },
    /// Nobody answered a tool permission request in time: the tool must not run.
    PermissionTimedOut {
        /// The agent's id of the request.
        request_id: String,
    },
}

/// Where an agent's task reports to its conversation.
#[derive(Debug, Clone)]
pub(crate) struct Reports(pub(crate) mpsc::Sender<AgentEvent>);

impl Reports {
    /// Reports `event`; a conversation that is gone no longer listens.
    pub(crate) async fn emit(&self, event: AgentEvent) {
        let _ = self.0.send(event).await;
    }

    /// Reports a `status` with its detail.
    pub(crate) async fn status(&self, status: &'static str, detail: impl Into<String>) {
        self.emit(AgentEvent::Status {
            status,
            detail: detail.into(),
        })
        .await;
    }
}

/// What an agent reports.
#[derive(Debug)]
pub enum AgentEvent {
    /// A stdout message.
    Message(AgentMessage),
    /// News for the conversation's subscribers (`status` frame), e.g. `warning` for an
    /// over-long line that was skipped, `resume_failed`, or `queued` while waiting for a
    /// free agent process.
    Status {
        /// The `status` value.
        status: &'static str,
        /// Human-readable detail.
        detail: String,
    },
    /// The agent asks whether it may use a tool.
    PermissionRequest {
        /// The agent's id of the request, echoed in the answer.
        request_id: String,
        /// Tool name, e.g. `Bash`.
        tool_name: String,
        /// The tool's input as the agent proposes it.
        input: Value,
        /// Permission suggestions the agent offers.
        suggestions: Value,
    },
    /// The agent withdrew a permission request.
    PermissionCancelled {
        /// The withdrawn request.
        request_id: String,
    },
    /// The agent ended unexpectedly (it crashed, was killed, or could not start); `detail`
    /// says how. The session starts it again in the background.
    Exited {
        /// Exit status or reason.
        detail: String,
    },
    /// The backend stopped an idle agent on purpose, to free its place for another
    /// conversation; the session starts it again at its next turn, not before.
    Released {
        /// Why it was stopped.
        detail: String,
    },
}

/// A running agent.
pub struct AgentConn {
    /// Inputs to the agent. Dropping it asks the agent to stop.
    pub input: mpsc::Sender<AgentInput>,
    /// What the agent reports; closed once it has stopped.
    pub events: mpsc::Receiver<AgentEvent>,
}

impl AgentConn {
    /// Asks the agent to stop and waits until it has.
    pub async fn stop(self) {
        let AgentConn { input, mut events } = self;
        drop(input);
        while events.recv().await.is_some() {}
    }
}

/// Why an agent could not be started.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SpawnError(pub String);

/// What an agent can do, as `GET /api/agents` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Supports {
    /// Whether a conversation continues with the agent's memory after eviction or restart
    /// (for an ACP agent: `session/resume`).
    pub resume: bool,
    /// Whether the agent can reload a session by replaying it (ACP `session/load`).
    pub load: bool,
    /// Whether the agent asks before using tools (`permission_request` frames).
    pub permissions: bool,
    /// Whether the agent has modes that `options.permission_mode` picks.
    pub modes: bool,
    /// Whether `rewind` works on its conversations.
    pub rewind: bool,
    /// Whether `fork` works on its conversations.
    pub fork: bool,
    /// Whether a chat may carry images (an ACP agent's `promptCapabilities.image`).
    pub images: bool,
    /// Which of `options.system_prompt`, `allowed_tools`, `disallowed_tools`, `max_turns` and
    /// `add_dirs` the agent takes (an ACP agent: those its `launch_options` names); a chat that
    /// sets another is refused as `unsupported`.
    pub launch_options: BTreeSet<LaunchOption>,
    /// False while an ACP agent has not started yet: what it supports is learnt from its
    /// first `initialize`, and the other fields are guesses until then.
    pub known: bool,
    /// Whether the agent stops a turn by itself once it has spent what it was allowed (the
    /// Claude CLI's `--max-budget-usd`); other agents finish the turn that crosses a cap.
    pub max_budget: bool,
}

/// A model an agent offers, as it names and describes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct AgentModel {
    /// What `options.model` gives to pick it.
    pub id: String,
    /// Its name for people, when the agent gives one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What the agent says of it (what it is good at, its price), when it says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Something that can start agents.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// What it is: `claude`, `demo` or `acp`.
    fn name(&self) -> &'static str;

    /// What its agents can do.
    fn supports(&self) -> Supports;

    /// Checks a chat's model and permission mode against what the agent offers (for an ACP
    /// agent: once it is known); `Err` says why one can't be used. Called before anything is
    /// created or stored.
    ///
    /// # Errors
    /// When the agent is known not to offer the model or the mode.
    fn check_options(
        &self,
        model: Option<&str>,
        permission_mode: Option<&str>,
    ) -> Result<(), String>;

    /// Whether permission mode `mode` lets the agent run tools without asking anyone; such a
    /// mode needs `agent.allow_bypass_permissions`.
    fn unattended_mode(&self, mode: &str) -> bool;

    /// The permission modes `options.permission_mode` may name (the CLI's, unless the agent
    /// offers its own; empty while they are not known yet).
    fn modes(&self) -> Vec<String> {
        CLI_PERMISSION_MODES
            .iter()
            .map(|m| (*m).to_owned())
            .collect()
    }

    /// The models `options.model` may name, as the agent lists them (the Claude CLI: its
    /// `initialize` answer, asked once if no conversation has started it yet; an ACP agent:
    /// its latest session's); empty when it does not say.
    async fn models(&self) -> Vec<AgentModel> {
        Vec::new()
    }

    /// Starts an agent for a conversation. It returns at once: a backend that needs time to
    /// get ready buffers inputs meanwhile, so the conversation keeps answering its clients.
    async fn spawn(&self, spec: SpawnSpec) -> Result<AgentConn, SpawnError>;

    /// The file in which the agent keeps conversation `agent_session` (an id it reported) of an
    /// agent working in `cwd`, when it keeps one that a resume needs (the Claude CLI's
    /// transcript); stores shared by several nodes keep a copy, so that any node can resume.
    fn transcript(
        &self,
        _cwd: &std::path::Path,
        _agent_session: &str,
    ) -> Option<std::path::PathBuf> {
        None
    }

    /// An id for a new conversation whose agent is already warm, if the backend keeps one;
    /// the conversation must use it as its `session_id` (and its workspace directory name).
    fn take_prewarmed(&self) -> Option<SessionId> {
        None
    }

    /// What its program says of itself (version, sign-in), for a backend that can ask.
    async fn self_check(&self) -> Option<AgentCheck> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A principal's variables replace every credential variable of the server's environment
    /// but its base URL: one who sets only a base URL does not send the operator's key there,
    /// and one who sets a key uses the operator's base URL with it. Without any, the server's
    /// stay; `Debug` shows names only.
    #[test]
    fn credentials_replace_the_servers_and_show_none() {
        let names = vec![
            "ANTHROPIC_API_KEY".to_owned(),
            "ANTHROPIC_BASE_URL".to_owned(),
        ];
        let server = || {
            vec![
                ("PATH".to_owned(), "/bin".to_owned()),
                ("ANTHROPIC_API_KEY".to_owned(), "operator".to_owned()),
                (
                    "ANTHROPIC_BASE_URL".to_owned(),
                    "https://proxy.example".to_owned(),
                ),
            ]
        };
        let own = |name: &str, value: &str| Credentials {
            vars: [(name.to_owned(), value.to_owned())].into(),
            names: names.clone(),
        };
        let key = own("ANTHROPIC_API_KEY", "sk-own");
        assert_eq!(
            key.added_to(server()),
            [
                ("PATH".to_owned(), "/bin".to_owned()),
                (
                    "ANTHROPIC_BASE_URL".to_owned(),
                    "https://proxy.example".to_owned()
                ),
                ("ANTHROPIC_API_KEY".to_owned(), "sk-own".to_owned())
            ]
        );
        assert_eq!(
            own("ANTHROPIC_BASE_URL", "https://mine.example").added_to(server()),
            [
                ("PATH".to_owned(), "/bin".to_owned()),
                (
                    "ANTHROPIC_BASE_URL".to_owned(),
                    "https://mine.example".to_owned()
                )
            ]
        );
        let none = Credentials {
            vars: Default::default(),
            names,
        };
        assert_eq!(none.added_to(server()), server());
        assert_eq!(format!("{key:?}"), r#"{"ANTHROPIC_API_KEY"}"#);
    }
}
