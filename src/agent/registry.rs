//! The agents a server offers by name: the built-in `demo`, `claude` when the CLI is
//! configured, and every `[agents.NAME]`, each with the backend that starts it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::acp::{AcpBackend, AcpSettings};
use super::claude::{ClaudeBackend, ClaudeSettings, check_bin};
use super::demo::DemoBackend;
use super::pool::Pool;
use super::{AgentCheck, AgentModel, Backend, Supports};
use crate::config::{AgentDef, AgentKind, BackendKind, Config};

pub use crate::protocol::{MAX_AGENT_NAME_CHARS, valid_agent_name};

/// One agent as `GET /api/agents` lists it.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct AgentInfo {
    /// Its name, what `options.agent` gives.
    pub name: String,
    /// What program it is.
    pub kind: AgentKind,
    /// Whether a conversation whose first chat names no agent gets this one.
    pub default: bool,
    /// What it can do.
    pub supports: Supports,
    /// The permission modes a chat may pick on this server (empty while an ACP agent has not
    /// said yet): those that run tools without asking only where `agent.allow_bypass_permissions`
    /// allows them.
    pub modes: Vec<String>,
    /// The models a chat may pick (`options.model`), as the agent lists them; empty when it
    /// does not say (then any name is passed on).
    pub models: Vec<AgentModel>,
}

struct Entry {
    kind: AgentKind,
    backend: Arc<dyn Backend>,
}

/// The agents of a server, by name.
pub struct Agents {
    default: String,
    entries: BTreeMap<String, Entry>,
    /// Whether modes that run tools without asking may be picked.
    allow_unattended: bool,
}

impl Agents {
    /// A registry with one agent, `name`, which is also the default (for tests and tools).
    pub fn single(name: &str, kind: AgentKind, backend: Arc<dyn Backend>) -> Self {
        let mut entries = BTreeMap::new();
        entries.insert(name.to_owned(), Entry { kind, backend });
        Agents {
            default: name.to_owned(),
            entries,
            allow_unattended: false,
        }
    }

    /// Builds every agent the configuration names, checking their programs.
    ///
    /// # Errors
    /// When an agent's name is malformed, its program is missing or not executable, the
    /// default agent does not exist, or the claude backend has no CLI.
    pub fn from_config(config: &Config) -> anyhow::Result<Self> {
        let mut entries = BTreeMap::new();
        // One cap for every agent process, whichever agent runs it.
        let pool = Arc::new(Pool::new(config.max_live_processes()));
        let demo: Arc<dyn Backend> = Arc::new(DemoBackend {
            word_delay: Duration::from_millis(config.demo.delay_ms),
            gate_dir: config.demo.gate_dir.clone(),
        });
        entries.insert(
            "demo".to_owned(),
            Entry {
                kind: AgentKind::Demo,
                backend: demo.clone(),
            },
        );
        match (&config.claude.bin, config.backend_kind()) {
            (Some(bin), _) => {
                let bin = check_bin(bin).map_err(anyhow::Error::msg)?;
                let settings = ClaudeSettings {
                    config: config.claude.clone(),
                    bin,
                    workspaces: config.workspaces_dir(),
                    extra_env: Vec::new(),
                };
                entries.insert(
                    "claude".to_owned(),
                    Entry {
                        kind: AgentKind::Claude,
                        backend: Arc::new(ClaudeBackend::new(settings, pool.clone())),
                    },
                );
            }
            (None, BackendKind::Claude) => anyhow::bail!(
                "the claude backend needs the CLI's path: --claude-bin or AGENTMUX_CLAUDE_BIN"
            ),
            (None, BackendKind::Demo) => {}
        }
        for (name, def) in &config.agents {
            if !valid_agent_name(name) {
                anyhow::bail!(
                    "agent name `{name}` must be 1-{MAX_AGENT_NAME_CHARS} characters of \
                     [A-Za-z0-9._-], not starting with `-` or `.`"
                );
            }
            let backend = Self::build(config, name, def, &pool)?;
            entries.insert(
                name.clone(),
                Entry {
                    kind: def.kind,
                    backend,
                },
            );
        }
        let default = config.default_agent();
        if !entries.contains_key(&default) {
            anyhow::bail!(
                "the default agent `{default}` is not configured (agents: {})",
                entries.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        Ok(Agents {
            default,
            entries,
            allow_unattended: config.agent.allow_bypass_permissions,
        })
    }

    fn build(
        config: &Config,
        name: &str,
        def: &AgentDef,
        pool: &Arc<Pool>,
    ) -> anyhow::Result<Arc<dyn Backend>> {
        let program = |what: &str| -> anyhow::Result<PathBuf> {
            let Some(program) = def.command.first() else {
                anyhow::bail!("agents.{name}: `command` must name the {what} to run");
            };
            check_bin(std::path::Path::new(program))
                .map_err(|e| anyhow::anyhow!("agents.{name}: {e}"))
        };
        let env: Vec<(String, String)> = def
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if def.kind != AgentKind::Acp && !def.launch_options.is_empty() {
            anyhow::bail!(
                "agents.{name}: `launch_options` is for ACP agents only (this one takes them all)"
            );
        }
        Ok(match def.kind {
            AgentKind::Demo => Arc::new(DemoBackend {
                word_delay: Duration::from_millis(config.demo.delay_ms),
                gate_dir: None,
            }),
            AgentKind::Claude => {
                let mut claude = config.claude.clone();
                let bin = if def.command.is_empty() {
                    let bin = claude.bin.clone().ok_or_else(|| {
                        anyhow::anyhow!("agents.{name}: no `command` and no claude.bin")
                    })?;
                    check_bin(&bin).map_err(|e| anyhow::anyhow!("agents.{name}: {e}"))?
                } else {
                    program("Claude CLI")?
                };
                claude
                    .extra_args
                    .extend(def.command.iter().skip(1).cloned());
                Arc::new(ClaudeBackend::new(
                    ClaudeSettings {
                        config: claude,
                        bin,
                        workspaces: config.workspaces_dir(),
                        extra_env: env,
                    },
                    pool.clone(),
                ))
            }
            AgentKind::Acp => Arc::new(AcpBackend::new(
                AcpSettings {
                    name: name.to_owned(),
                    program: program("agent program")?,
                    args: def.command.iter().skip(1).cloned().collect(),
                    env,
                    config: config.acp.clone(),
                    allow_unattended: config.agent.allow_bypass_permissions,
                    unattended_modes: def
                        .unattended_modes
                        .clone()
                        .unwrap_or_else(|| config.acp.unattended_modes.clone()),
                    launch_options: def.launch_options.clone(),
                },
                pool.clone(),
            )),
        })
    }

    /// The backend of the agent `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Backend>> {
        self.entries.get(name).map(|e| &e.backend)
    }

    /// The name of the default agent.
    pub fn default_name(&self) -> &str {
        &self.default
    }

    /// What each agent's program says of itself, by agent name, for those that can say
    /// (the Claude CLI); asked of all at once.
    pub async fn self_checks(&self) -> Vec<(String, AgentCheck)> {
        let asked = self.entries.iter().map(|(name, entry)| async move {
            let check = entry.backend.self_check().await?;
            Some((name.clone(), check))
        });
        futures_util::future::join_all(asked)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// Logs what each agent's program says of itself: a line each, a warning for what needs
    /// fixing (with how). For the server's start: it waits for nothing.
    pub fn log_self_checks(self: &Arc<Self>) {
        let agents = self.clone();
        tokio::spawn(async move {
            for (name, check) in agents.self_checks().await {
                match check.problem() {
                    None => tracing::info!(agent = %name, "{}", check.summary()),
                    Some(problem) => {
                        tracing::warn!(agent = %name, fix = %problem.fix, "{}", problem.what);
                    }
                }
            }
        });
    }

    /// The names of the agents.
    pub fn names(&self) -> Vec<String> {
        self.entries.keys().cloned().collect()
    }

    /// Every agent, by name, with the modes this server lets a chat pick and the models it
    /// offers (an agent that has not said yet is asked, all at once).
    pub async fn list(&self) -> Vec<AgentInfo> {
        let listed = self.entries.iter().map(|(name, entry)| async move {
            let backend = &entry.backend;
            let mut modes = backend.modes();
            modes.retain(|m| self.allow_unattended || !backend.unattended_mode(m));
            AgentInfo {
                name: name.clone(),
                kind: entry.kind,
                default: *name == self.default,
                supports: backend.supports(),
                modes,
                models: backend.models().await,
            }
        });
        futures_util::future::join_all(listed).await
    }
}
