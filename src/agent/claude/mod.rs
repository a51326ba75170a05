//! The Claude Code CLI backend: one long-lived CLI process per live conversation, driven in
//! stream-json mode over stdin/stdout the way the official Agent SDKs drive it.
//!
//! Each agent is a task owning its process (`task`): it waits for a free process slot (in the
//! pool every agent process shares), starts the CLI (`process`, with the command line and environment of `argv`) or
//! adopts the pre-warmed spare (`spare`), sends `initialize` (`control`), then writes one
//! `user` line per turn and turns stdout lines (`lines`) into [`AgentEvent`]s. It holds an
//! interrupt that arrives before the turn has started until the CLI can act on it, answers
//! permission requests on the user's behalf, and when the CLI refuses to resume (its
//! transcript is gone) starts a fresh conversation instead. Processes run in their own
//! process group with a parent-death signal, and are stopped politely first: close stdin,
//! wait, SIGTERM, wait, SIGKILL. The CLI's own session files, which the user's CLI sessions
//! are imported from, are read by `transcripts`. Whether the CLI runs and is signed in is
//! asked by `health`.
//!
//! [`AgentEvent`]: super::AgentEvent

mod argv;
mod control;
mod health;
mod models;
mod spare;
mod task;
pub mod transcripts;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tracing::Instrument;

use self::models::Models;
use self::spare::Spare;
use self::task::AgentTask;
use super::pool::Pool;
use super::{AgentConn, Backend, EVENT_QUEUE, INPUT_QUEUE, Launch, SpawnError, SpawnSpec};
use crate::config::ClaudeConfig;
use crate::protocol::{LaunchOption, SessionId};

/// Settings of the backend: the configuration plus what it resolves to.
#[derive(Debug, Clone)]
pub struct ClaudeSettings {
    /// The `[claude]` configuration.
    pub config: ClaudeConfig,
    /// The CLI binary.
    pub bin: PathBuf,
    /// Root of the workspaces (`<data-dir>/workspaces`).
    pub workspaces: PathBuf,
    /// Variables added to the CLI's environment (an `[agents.NAME]`'s `env`).
    pub extra_env: Vec<(String, String)>,
}

impl ClaudeSettings {
    fn init_timeout(&self) -> Duration {
        Duration::from_secs(self.config.init_timeout_secs)
    }

    fn stop_grace(&self) -> Duration {
        Duration::from_secs(self.config.stop_grace_secs)
    }

    /// How to start the CLI with `args` in `cwd`.
    fn proc_spec<'a>(
        &'a self,
        args: &'a [String],
        cwd: &'a Path,
        credentials: &crate::agent::Credentials,
    ) -> crate::agent::process::ProcSpec<'a> {
        crate::agent::process::ProcSpec {
            program: &self.bin,
            args,
            env: credentials.added_to(self.env()),
            cwd,
            create_cwd: cwd.starts_with(&self.workspaces),
            max_line_bytes: self.config.max_line_bytes,
            label: "the Claude CLI",
        }
    }
}

/// Checks that `bin` is an executable file, and returns it as an absolute path: the CLI is
/// started in its workspace, where a relative path would name something else. A bare name
/// (`claude`, no `/`) is looked for in the server's `PATH`, once, here: the path found is
/// logged and used from then on.
///
/// # Errors
/// A message naming the path and the setting when it is missing, not a file or not
/// executable, or for a bare name, when no directory of `PATH` has it.
pub fn check_bin(bin: &Path) -> Result<PathBuf, String> {
    let advice = "set --claude-bin (or AGENTMUX_CLAUDE_BIN, or claude.bin in the config file) \
                  to the path of the executable, or to its name in PATH";
    if crate::programs::is_bare_name(bin) {
        return match crate::programs::find_in_path(bin) {
            Some(found) => {
                tracing::info!("`{}` is {} (found in PATH)", bin.display(), found.display());
                Ok(found)
            }
            None => Err(format!(
                "the Claude CLI `{}` is not in any directory of PATH: {advice}",
                bin.display()
            )),
        };
    }
    if let Some(problem) = crate::programs::unrunnable(bin) {
        return Err(format!(
            "the Claude CLI `{}` {problem}: {advice}",
            bin.display()
        ));
    }
    std::path::absolute(bin).map_err(|e| format!("the Claude CLI `{}`: {e}", bin.display()))
}

/// The Claude Code CLI backend.
pub struct ClaudeBackend {
    settings: Arc<ClaudeSettings>,
    pool: Arc<Pool>,
    spare: Arc<Spare>,
    models: Arc<Models>,
}

impl ClaudeBackend {
    /// A backend whose processes take their places in `pool`; with `prewarm` set it starts
    /// keeping a spare process right away.
    pub(crate) fn new(settings: ClaudeSettings, pool: Arc<Pool>) -> Self {
        let settings = Arc::new(settings);
        let backend = ClaudeBackend {
            pool,
            spare: Arc::new(Spare::default()),
            settings,
            models: Arc::default(),
        };
        if backend.settings.config.prewarm {
            tokio::spawn(spare::keep_spare(
                backend.settings.clone(),
                Arc::downgrade(&backend.spare),
                backend.models.clone(),
            ));
        }
        backend
    }
}

#[async_trait]
impl Backend for ClaudeBackend {
    fn name(&self) -> &'static str {
        "claude"
    }

    fn transcript(&self, cwd: &std::path::Path, agent_session: &str) -> Option<PathBuf> {
        // The id names a file: only the CLI's own form of it (a UUID) does.
        crate::protocol::valid_session_id(agent_session).then_some(())?;
        let home = self.settings.config.home()?;
        Some(transcripts::folder(&home, cwd).join(format!("{agent_session}.jsonl")))
    }

    async fn self_check(&self) -> Option<super::AgentCheck> {
        Some(health::check(&self.settings).await)
    }

    async fn models(&self) -> Vec<super::AgentModel> {
        self.models.get(&self.settings).await
    }

    fn supports(&self) -> super::Supports {
        super::Supports {
            resume: true,
            load: false,
            permissions: true,
            modes: true,
            rewind: true,
            fork: true,
            images: true,
            launch_options: LaunchOption::ALL.into(),
            known: true,
            max_budget: true,
        }
    }

    fn check_options(&self, _model: Option<&str>, mode: Option<&str>) -> Result<(), String> {
        super::check_cli_mode(mode)
    }

    fn unattended_mode(&self, mode: &str) -> bool {
        super::CLI_UNATTENDED_MODES.contains(&mode)
    }

    async fn spawn(&self, spec: SpawnSpec) -> Result<AgentConn, SpawnError> {
        if !self.settings.bin.is_file() {
            return Err(SpawnError(format!(
                "the Claude CLI is not at {}",
                self.settings.bin.display()
            )));
        }
        let warm = match &spec.launch {
            Launch::New { session_id } => self.spare.claim(session_id),
            Launch::Resume { .. } | Launch::ResumeAt { .. } | Launch::Fork { .. } => None,
        };
        // The spare started in its own workspace with no launch options, on the configured
        // credentials and no budget: a conversation that wants otherwise gets a process of its
        // own (dropping the spare kills it).
        let warm = warm.filter(|_| {
            spec.options.is_empty()
                && spec.credentials.vars.is_empty()
                && spec.max_budget_usd.is_none()
                && spec.cwd == self.settings.workspaces.join(&spec.session_id)
        });
        let (input_tx, input_rx) = mpsc::channel(INPUT_QUEUE);
        let (event_tx, event_rx) = mpsc::channel(EVENT_QUEUE);
        let span = tracing::info_span!(
            "claude_agent",
            session_id = %spec.session_id,
            agent_id = %spec.agent_id
        );
        let task = AgentTask::new(
            self.settings.clone(),
            self.models.clone(),
            self.pool.clone(),
            spec,
            input_rx,
            event_tx,
        );
        tokio::spawn(task.run(warm).instrument(span));
        Ok(AgentConn {
            input: input_tx,
            events: event_rx,
        })
    }

    fn take_prewarmed(&self) -> Option<SessionId> {
        self.spare.take()
    }
}
