//! The Agent Client Protocol backend: any agent that speaks ACP (JSON-RPC 2.0, one message
//! per line on its stdio), one process per live conversation.
//!
//! The task of each agent (`task`) waits for a place among the live agent processes (the pool
//! the Claude CLI's share), starts the configured program in the conversation's working
//! directory, in its own process group with a parent-death signal (the same process handling
//! as the Claude CLI's), sends `initialize` advertising no file system or terminal capability,
//! opens the session (`open`: `session/new`, or `session/resume` / `session/load` for a
//! conversation the agent already knows), keeps its mode and model as the conversation wants
//! (`modes`), then sends one `session/prompt` per turn (`turns`), relays the agent's permission
//! requests (`permissions`) and turns its `session/update` notifications into the stream-json
//! shaped messages every backend reports (`updates`). The wire types come from the pinned
//! schema crate, through `schema` only.

mod modes;
mod open;
mod permissions;
mod schema;
mod task;
mod turns;
mod updates;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::pool::Pool;
use super::{AgentConn, Backend, EVENT_QUEUE, INPUT_QUEUE, SpawnError, SpawnSpec, Supports};
use crate::config::AcpConfig;
use crate::protocol::LaunchOption;

/// One configured ACP agent.
#[derive(Debug, Clone)]
pub struct AcpSettings {
    /// Its name (`[agents.NAME]`).
    pub name: String,
    /// The program, an absolute path.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables added to its environment.
    pub env: Vec<(String, String)>,
    /// The `[acp]` settings.
    pub config: AcpConfig,
    /// Whether a session may keep a mode that runs tools without asking
    /// (`agent.allow_bypass_permissions`); when not, such a starting mode is switched to
    /// `default` where the agent offers it.
    pub allow_unattended: bool,
    /// Its mode ids that run tools without asking (`unattended_modes`, else
    /// `acp.unattended_modes`).
    pub unattended_modes: Vec<String>,
    /// The launch options it honours through `_meta` (`launch_options`).
    pub launch_options: BTreeSet<LaunchOption>,
}

impl AcpSettings {
    /// Whether `mode` is one of the agent's modes that run tools without asking.
    pub(super) fn is_unattended(&self, mode: &str) -> bool {
        self.unattended_modes.iter().any(|m| m == mode)
    }

    /// The agent's environment: `PATH`, `HOME`, `LANG` and the names of `acp.env_allow` from
    /// the server's, then the agent's own `env`. Nothing else of the server's.
    fn environment(&self) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = std::env::vars()
            .filter(|(name, _)| {
                matches!(name.as_str(), "PATH" | "HOME" | "LANG")
                    || self.config.env_allow.iter().any(|allowed| allowed == name)
            })
            .filter(|(name, _)| !self.env.iter().any(|(own, _)| own == name))
            .collect();
        env.extend(self.env.iter().cloned());
        env
    }
}

/// What the backend learnt from its agents: capabilities from `initialize`, and the modes and
/// options of the latest session. Empty until an agent has started.
#[derive(Debug, Default)]
struct Learnt {
    caps: Option<schema::Capabilities>,
    offered: Option<schema::Offered>,
}

/// The ACP backend of one configured agent.
pub struct AcpBackend {
    settings: Arc<AcpSettings>,
    learnt: Arc<Mutex<Learnt>>,
    pool: Arc<Pool>,
}

impl AcpBackend {
    /// A backend starting `settings`' program, each process taking its place in `pool`.
    pub(crate) fn new(settings: AcpSettings, pool: Arc<Pool>) -> Self {
        AcpBackend {
            settings: Arc::new(settings),
            learnt: Arc::default(),
            pool,
        }
    }
}

#[async_trait]
impl Backend for AcpBackend {
    fn name(&self) -> &'static str {
        "acp"
    }

    fn supports(&self) -> Supports {
        let learnt = self.learnt.lock().expect("learnt lock");
        let caps = learnt.caps.unwrap_or_default();
        Supports {
            resume: caps.resume || caps.load,
            load: caps.load,
            permissions: true,
            modes: learnt.offered.as_ref().is_some_and(|o| !o.modes.is_empty()),
            rewind: false,
            fork: false,
            // Until the agent has said, images are let through (and refused at the turn).
            images: learnt.caps.is_none_or(|c| c.image),
            launch_options: self.settings.launch_options.clone(),
            known: learnt.caps.is_some(),
            max_budget: false,
        }
    }

    fn unattended_mode(&self, mode: &str) -> bool {
        self.settings.is_unattended(mode)
    }

    fn modes(&self) -> Vec<String> {
        let learnt = self.learnt.lock().expect("learnt lock");
        learnt
            .offered
            .as_ref()
            .map(|o| o.modes.clone())
            .unwrap_or_default()
    }

    async fn models(&self) -> Vec<crate::agent::AgentModel> {
        let learnt = self.learnt.lock().expect("learnt lock");
        learnt
            .offered
            .as_ref()
            .map(|o| o.models.clone())
            .unwrap_or_default()
    }

    fn check_options(&self, model: Option<&str>, mode: Option<&str>) -> Result<(), String> {
        let learnt = self.learnt.lock().expect("learnt lock");
        let Some(offered) = &learnt.offered else {
            return Ok(());
        };
        if let Some(mode) = mode
            && !modes::offers_mode(offered, mode)
        {
            return Err(format!(
                "agent `{}` has no mode `{mode}` (modes: {})",
                self.settings.name,
                offered.modes.join(", ")
            ));
        }
        if let Some(model) = model
            && !offered
                .option("model")
                .is_some_and(|v| v.iter().any(|m| m == model))
        {
            return Err(match offered.option("model") {
                Some(models) => format!(
                    "agent `{}` has no model `{model}` (models: {})",
                    self.settings.name,
                    models.join(", ")
                ),
                None => format!("agent `{}` offers no choice of model", self.settings.name),
            });
        }
        Ok(())
    }

    async fn spawn(&self, spec: SpawnSpec) -> Result<AgentConn, SpawnError> {
        if !self.settings.program.is_file() {
            return Err(SpawnError(format!(
                "the agent program is not at {}",
                self.settings.program.display()
            )));
        }
        let (input_tx, input_rx) = mpsc::channel(INPUT_QUEUE);
        let (event_tx, event_rx) = mpsc::channel(EVENT_QUEUE);
        let span = tracing::info_span!(
            "acp_agent",
            agent = %self.settings.name,
            session_id = %spec.session_id,
            agent_id = %spec.agent_id
        );
        let task = task::AcpTask::new(
            self.settings.clone(),
            self.learnt.clone(),
            self.pool.clone(),
            spec,
            input_rx,
            event_tx,
        );
        tokio::spawn(task.run().instrument(span));
        Ok(AgentConn {
            input: input_tx,
            events: event_rx,
        })
    }
}
