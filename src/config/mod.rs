//! Settings, with compiled-in defaults that `config/default.toml` documents one by one.
//!
//! Precedence, lowest first: the defaults, the file named by `--config`, `AGENTMUX_*`
//! variables, command-line flags. Secrets come only from the environment or the file.
//!
//! A setting named `…_secs` or `…_ms` holds a whole number of seconds or milliseconds; the file
//! may give it as that number or as a duration written out (`"90s"`, `"5m"`, `"1h 30m"`).
//!
//! One job, reading and checking the settings: the tables small enough to need no module of
//! their own are here, one type each with its defaults (their tests in `tests.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::protocol::{DecodeLimits, LaunchOption};

mod auth;
mod cluster;
pub(crate) mod durations;
mod projects;
mod push;
mod spend;

pub use auth::AuthConfig;
pub use cluster::ClusterConfig;
use durations::{millis, secs};
pub use projects::{ProjectRoot, ProjectsConfig, WorktreesConfig};
pub use push::PushConfig;
pub use spend::{BudgetsConfig, CLAUDE_CREDENTIAL_ENV, CredentialsConfig, credential_name_problem};

/// Which agent runs behind conversations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The Claude Code CLI, one process per live conversation.
    Claude,
    /// The built-in deterministic echo agent.
    Demo,
}

/// All settings of the server.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address to listen on; port 0 picks a free port.
    pub bind: SocketAddr,
    /// Directory of the database and the agents' workspaces.
    pub data_dir: PathBuf,
    /// Backend; when unset: `claude` if `claude.bin` is set, else `demo`.
    pub backend: Option<BackendKind>,
    /// Settings of the WebSocket endpoint.
    pub socket: SocketConfig,
    /// Settings of conversations.
    pub session: SessionConfig,
    /// Settings of the store.
    pub store: StoreConfig,
    /// Settings of the demo agent (its own options, with a testing aid among them).
    pub demo: DemoOptions,
    /// Settings of the Claude Code CLI backend.
    pub claude: ClaudeConfig,
    /// Authentication and the browser origin check.
    pub auth: AuthConfig,
    /// Which `Host` names the server answers to.
    pub server: ServerConfig,
    /// What clients may ask of every agent, and which agent a new conversation gets.
    pub agent: AgentConfig,
    /// Settings of the Agent Client Protocol backend, for every `kind = "acp"` agent.
    pub acp: AcpConfig,
    /// Agents by name (`[agents.NAME]`), besides the built-in `demo` and (when the Claude CLI
    /// is configured) `claude`.
    pub agents: BTreeMap<String, AgentDef>,
    /// Project roots: the directories conversations may work in.
    pub projects: ProjectsConfig,
    /// Scheduled prompts.
    pub schedules: SchedulesConfig,
    /// Several nodes on one PostgreSQL store: this node's name and its leases.
    pub cluster: ClusterConfig,
    /// Git worktrees of conversations.
    pub worktrees: WorktreesConfig,
    /// Web Push notifications.
    pub push: PushConfig,
    /// Principals' own agent credentials, and the key that seals them.
    pub credentials: CredentialsConfig,
    /// Spending caps.
    pub budgets: BudgetsConfig,
}

/// The demo agent's options (`[demo]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DemoOptions {
    /// Pause after each streamed word, in milliseconds.
    #[serde(deserialize_with = "durations::millis")]
    pub delay_ms: u64,
    /// Testing aid: each turn waits after its first word until `<gate_dir>/<agent_id>.<N>`
    /// exists (see `agent::demo::DemoBackend::gate_dir`). Off when unset.
    pub gate_dir: Option<PathBuf>,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            delay_ms: 20,
            gate_dir: None,
        }
    }
}

/// Settings of scheduled prompts.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulesConfig {
    /// The time zone cron expressions are read in: an IANA name (`Europe/Paris`) or `UTC`.
    /// An unknown name refuses to start.
    pub time_zone: String,
    /// Schedules one principal may have (`limit_exceeded` beyond). 0 is no limit.
    pub max_per_principal: usize,
    /// Runs of `mode: "new"` schedules (each starting a conversation) one principal may have
    /// in an hour; beyond, a run is skipped with the outcome `limited`. 0 is no limit.
    pub max_new_runs_per_hour: usize,
}

impl Default for SchedulesConfig {
    fn default() -> Self {
        SchedulesConfig {
            time_zone: "UTC".into(),
            max_per_principal: 100,
            max_new_runs_per_hour: 60,
        }
    }
}

/// What program an agent is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AgentKind {
    /// An Agent Client Protocol agent: JSON-RPC over its stdio.
    Acp,
    /// The Claude Code CLI in stream-json mode.
    Claude,
    /// The built-in echo agent.
    Demo,
}

/// One named agent (`[agents.NAME]`).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentDef {
    /// What program it is.
    pub kind: AgentKind,
    /// Program and arguments, no shell; the program is a path, or a bare name looked for in
    /// `PATH` once, at start. For
    /// `claude`: the CLI and extra arguments (default: `claude.bin`).
    #[serde(default)]
    pub command: Vec<String>,
    /// Variables added to the agent's allow-listed environment (API keys and the like).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The variables a principal may set as their own credentials for this agent (for
    /// `kind = "claude"`, `claude.credential_env` when unset).
    #[serde(default)]
    pub credential_env: Option<Vec<String>>,
    /// For an ACP agent: the ids of its modes that run tools without asking anyone (default:
    /// `acp.unattended_modes`).
    #[serde(default)]
    pub unattended_modes: Option<Vec<String>>,
    /// For an ACP agent: the launch options (`system_prompt`, `allowed_tools`,
    /// `disallowed_tools`, `max_turns`, `add_dirs`) it honours when they are passed in the
    /// session's `_meta` as the Claude adapter reads them; a chat setting another is refused.
    #[serde(default)]
    pub launch_options: BTreeSet<LaunchOption>,
}

/// Shows which variables are set, never their values (they are often keys).
impl fmt::Debug for AgentDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentDef")
            .field("kind", &self.kind)
            .field("command", &self.command)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("credential_env", &self.credential_env)
            .field("unattended_modes", &self.unattended_modes)
            .field("launch_options", &self.launch_options)
            .finish()
    }
}

/// Settings of the Agent Client Protocol backend.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AcpConfig {
    /// Longest stdout line accepted from an agent, in bytes; a longer one is skipped with a warning.
    pub max_line_bytes: usize,
    /// How long an agent may take to answer `initialize` and to open its session.
    #[serde(deserialize_with = "secs")]
    pub init_timeout_secs: u64,
    /// Each step of stopping an agent (close stdin, TERM, KILL) waits this long.
    #[serde(deserialize_with = "secs")]
    pub stop_grace_secs: u64,
    /// Extra environment variable names passed to every ACP agent, besides `PATH`, `HOME` and
    /// `LANG` (and each agent's own `env`).
    pub env_allow: Vec<String>,
    /// Mode ids that let an agent run tools without asking anyone (ACP has no field saying
    /// so): a chat may pick one only with `agent.allow_bypass_permissions`, and a session that
    /// starts in one is switched to a mode that asks. An agent's own `unattended_modes`
    /// replaces this list.
    pub unattended_modes: Vec<String>,
}

impl Default for AcpConfig {
    fn default() -> Self {
        AcpConfig {
            max_line_bytes: 64 << 20,
            init_timeout_secs: 60,
            stop_grace_secs: 5,
            env_allow: Vec::new(),
            unattended_modes: ["bypassPermissions", "auto", "yolo"]
                .map(str::to_owned)
                .to_vec(),
        }
    }
}

/// Settings of the HTTP server itself.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// `Host` names (`name` or `name:port`) the server answers to besides loopback ones
    /// (`localhost`, `*.localhost`, `127.0.0.0/8`, `[::1]`). Without authentication only these
    /// and loopback names are served; with authentication, when set, only these and loopback.
    pub allowed_hosts: Vec<String>,
    /// The addresses of reverse proxies in front of the server. A request that comes from one
    /// of them names its client in `X-Forwarded-For` (its last entry, the one the proxy set);
    /// from anyone else, that header is ignored and the peer is the client. The client is
    /// what the log's request lines show; no decision depends on it.
    pub trusted_proxies: Vec<std::net::IpAddr>,
}

/// Settings that apply to every agent.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// Whether a client may choose a permission mode that lets the agent run tools without
    /// asking (`bypassPermissions`, `auto`).
    pub allow_bypass_permissions: bool,
    /// The agent (by name) of a conversation whose first chat names none; `--backend` sets it.
    /// When unset: the backend in force (`claude` or `demo`).
    pub default: Option<String>,
    /// Most agent processes alive at once, Claude CLIs and ACP agents together; beyond it the
    /// idle one nobody follows (else the least recently used idle one) is stopped, and when
    /// all are busy new turns wait. When unset: `claude.max_live_processes`, else
    /// [`DEFAULT_MAX_LIVE_PROCESSES`].
    pub max_live_processes: Option<usize>,
    /// Whether a principal's turns on an agent that takes credentials run only on that
    /// principal's own (`credentials_required` otherwise).
    pub require_own_credentials: bool,
}

/// The cap on live agent processes when neither `agent.max_live_processes` nor
/// `claude.max_live_processes` is set.
pub const DEFAULT_MAX_LIVE_PROCESSES: usize = 16;

/// The principal of every caller while authentication is off.
pub const LOCAL_PRINCIPAL: &str = "local";

/// Claude Code CLI settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClaudeConfig {
    /// Path of the CLI binary; a bare name is looked for in `PATH` once, at start.
    pub bin: Option<PathBuf>,
    /// Extra arguments appended to every CLI command line.
    pub extra_args: Vec<String>,
    /// Model for new conversations (`--model`), unless a chat chooses one.
    pub model: Option<String>,
    /// Permission mode (`--permission-mode`), unless a chat chooses one; `acceptEdits` or
    /// `bypassPermissions` skip the permission prompts.
    pub permission_mode: Option<String>,
    /// `CLAUDE_CONFIG_DIR` for the CLI (where it keeps its transcripts, and where the CLI
    /// sessions of a project are looked for); when unset, the server's own
    /// `CLAUDE_CONFIG_DIR`, else `$HOME/.claude`.
    pub config_dir: Option<PathBuf>,
    /// Extra environment variable names passed to the CLI, besides `PATH`, `HOME`, `LANG`,
    /// `ANTHROPIC_*`, `CLAUDE_CODE_*` and `CLAUDE_CONFIG_DIR`.
    pub env_allow: Vec<String>,
    /// Longest stdout line accepted from the CLI, in bytes; a longer one is skipped with a warning.
    pub max_line_bytes: usize,
    /// Largest CLI transcript read, in bytes: a CLI session over it is not imported or synced,
    /// and a store shared by several nodes does not keep a copy of it (the copy kept before
    /// stays).
    pub max_transcript_bytes: usize,
    /// How long the CLI may take to answer the `initialize` request.
    #[serde(deserialize_with = "secs")]
    pub init_timeout_secs: u64,
    /// Each step of stopping a CLI (close stdin, TERM, KILL) waits this long.
    #[serde(deserialize_with = "secs")]
    pub stop_grace_secs: u64,
    /// The former name of `agent.max_live_processes` (which wins when both are set): it caps
    /// every agent process, not only the CLI's.
    pub max_live_processes: Option<usize>,
    /// Keep one initialized spare CLI so a new conversation's first reply skips start-up.
    pub prewarm: bool,
    /// The variables a principal may set as their own credentials for the CLI.
    pub credential_env: Vec<String>,
}

impl Default for ClaudeConfig {
    fn default() -> Self {
        ClaudeConfig {
            bin: None,
            extra_args: Vec::new(),
            model: None,
            permission_mode: None,
            config_dir: None,
            env_allow: Vec::new(),
            max_line_bytes: 64 << 20,
            max_transcript_bytes: 64 << 20,
            init_timeout_secs: 60,
            stop_grace_secs: 5,
            max_live_processes: None,
            prewarm: false,
            credential_env: CLAUDE_CREDENTIAL_ENV
                .iter()
                .map(|n| (*n).to_owned())
                .collect(),
        }
    }
}

/// WebSocket settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SocketConfig {
    /// Largest accepted client frame, in bytes; a larger one closes the socket with 1009.
    pub max_frame_bytes: usize,
    /// Longest accepted `chat.content`, in bytes.
    pub max_content_bytes: usize,
    /// A socket that sends nothing (no frame, no ping) for this long is closed; an event
    /// stream with nothing to send for this long is ended.
    #[serde(deserialize_with = "secs")]
    pub idle_timeout_secs: u64,
    /// Frames a lagging socket may have in flight per conversation before it is told `lagged`
    /// and replayed from the store.
    pub session_buffer_frames: usize,
    /// Client frames accepted per second per socket (a token bucket holding one second's
    /// worth); beyond, frames are answered `rate_limited`. 0 turns the limit off.
    pub max_frames_per_sec: u32,
    /// `rate_limited` answers a socket may collect before it is closed with 1008; the count
    /// starts over once the socket has slowed down for a full second.
    pub max_rate_limited: u32,
    /// Open sockets, REST requests and event streams per principal (429 `limit_exceeded`
    /// beyond); 0 is no limit.
    pub max_per_principal: usize,
    /// A connection must deliver its HTTP request head (the upgrade) within this many seconds.
    #[serde(deserialize_with = "secs")]
    pub handshake_timeout_secs: u64,
    /// Conversations one socket may follow at once (subscribed, or chatted to); beyond,
    /// `limit_exceeded`. 0 is no limit.
    pub max_subscriptions: usize,
    /// A request body not fully arrived this many seconds after its request came is abandoned,
    /// however steadily it trickles in.
    #[serde(deserialize_with = "secs")]
    pub body_timeout_secs: u64,
}

/// Conversation settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionConfig {
    /// A conversation with nothing to do for this long is evicted from memory (its agent stopped).
    #[serde(deserialize_with = "secs")]
    pub idle_evict_secs: u64,
    /// Turns that may wait behind a running one, per conversation.
    pub max_queued_turns: usize,
    /// How long an interrupted turn may take to end before its agent is killed.
    #[serde(deserialize_with = "secs")]
    pub interrupt_timeout_secs: u64,
    /// A tool permission request nobody answers is denied after this long.
    #[serde(deserialize_with = "secs")]
    pub permission_timeout_secs: u64,
    /// Live conversations (each with its agent) per principal; 0 is no limit.
    pub max_live_per_principal: usize,
    /// Live conversations on the whole server; 0 is no limit.
    pub max_live_total: usize,
    /// Imports and exports one principal may run at once, syncs and listings of CLI sessions
    /// and of projects (which count their CLI sessions) included; 0 is no limit.
    pub max_transfers_per_principal: usize,
    /// Searches of conversations one principal may run at once (429 limit_exceeded beyond); 0
    /// is no limit.
    pub max_searches_per_principal: usize,
    /// Delay before the second restart of an agent that keeps exiting unexpectedly, in
    /// milliseconds; the first restart is at once, each later one waits twice as long.
    #[serde(deserialize_with = "millis")]
    pub respawn_backoff_ms: u64,
    /// Longest wait between two restarts of a crashing agent.
    #[serde(deserialize_with = "secs")]
    pub respawn_backoff_max_secs: u64,
    /// Unexpected exits within `respawn_window_secs` after which the agent is no longer
    /// restarted in the background (status `respawn_failed`); 0 turns restarting off.
    pub max_respawns: u32,
    /// The window in which unexpected exits are counted.
    #[serde(deserialize_with = "secs")]
    pub respawn_window_secs: u64,
    /// Most payload bytes of stored frames read in one page (of a replay, an event stream's
    /// replay, a `GET .../messages` page, an export), besides the pages' row counts; a frame
    /// larger than this is a page alone.
    pub page_bytes: usize,
    /// Whether a turn a rate limit ended continues by itself once the limit resets, for the
    /// conversations that don't say (their `options.auto_continue`).
    pub auto_continue: bool,
    /// Without a reset time, the first wait before continuing; each later try waits twice as
    /// long.
    #[serde(deserialize_with = "secs")]
    pub auto_continue_backoff_secs: u64,
    /// The longest wait without a reset time.
    #[serde(deserialize_with = "secs")]
    pub auto_continue_backoff_max_secs: u64,
    /// Rate-limited turns in a row a conversation continues after; the next one only waits
    /// to be continued by hand (0: none continues).
    pub auto_continue_max_tries: u32,
    /// Most time added at random to each wait, so that conversations limited together do not
    /// all continue at once.
    #[serde(deserialize_with = "millis")]
    pub auto_continue_jitter_ms: u64,
    /// A reset further ahead than this is not waited for.
    #[serde(deserialize_with = "secs")]
    pub auto_continue_max_wait_secs: u64,
}

/// Store settings.
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Where conversations are stored: empty for the SQLite file in the data directory, or a
    /// `postgres://` URL for a PostgreSQL database (the store several nodes share).
    pub url: String,
    /// fsync every commit (`synchronous=FULL`) instead of relying on WAL with `NORMAL`.
    pub synchronous_full: bool,
    /// Most append requests stored in one transaction.
    pub max_batch: usize,
    /// Largest database size in pages of 4 KiB; 0 means no limit but the disk's.
    pub max_page_count: u64,
    /// SQLite: MiB written to the WAL after which it is made to start over (16 to 65,536).
    pub wal_restart_mib: u64,
    /// Longest a search of conversations may run (waiting for its turn included), in
    /// milliseconds; it is then stopped and answered `search_timeout`.
    #[serde(deserialize_with = "millis")]
    pub search_timeout_ms: u64,
    /// Searches running at once on this node (each holds one database connection); the others
    /// wait for their turn, within `search_timeout_ms`.
    pub max_searches: usize,
    /// Days an audit log entry is kept; 0 keeps every entry.
    pub audit_retention_days: u32,
}

impl StoreConfig {
    /// Pages of 4 KiB written to the SQLite WAL after which it is made to start over.
    ///
    /// # Errors
    /// When `wal_restart_mib` is under 16 or over 65,536 (64 GiB).
    pub fn wal_restart_pages(&self) -> anyhow::Result<u64> {
        if !(16..=65_536).contains(&self.wal_restart_mib) {
            anyhow::bail!("store.wal_restart_mib must be at least 16 and at most 65536");
        }
        Ok(self.wal_restart_mib * 256)
    }

    /// How long a search may run, and how many run at once.
    ///
    /// # Errors
    /// When either is 0 (every search would be refused) or the time is over an hour.
    pub fn search_limits(&self) -> anyhow::Result<(Duration, usize)> {
        if !(1..=3_600_000).contains(&self.search_timeout_ms) {
            anyhow::bail!("store.search_timeout_ms must be at least 1 ms and at most an hour");
        }
        if self.max_searches == 0 {
            anyhow::bail!("store.max_searches must be at least 1");
        }
        Ok((
            Duration::from_millis(self.search_timeout_ms),
            self.max_searches,
        ))
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: SocketAddr::from(([127, 0, 0, 1], 7878)),
            data_dir: PathBuf::from("./data"),
            backend: None,
            socket: SocketConfig::default(),
            session: SessionConfig::default(),
            store: StoreConfig::default(),
            demo: DemoOptions::default(),
            claude: ClaudeConfig::default(),
            auth: AuthConfig::default(),
            server: ServerConfig::default(),
            agent: AgentConfig::default(),
            projects: ProjectsConfig::default(),
            acp: AcpConfig::default(),
            agents: BTreeMap::new(),
            schedules: SchedulesConfig::default(),
            cluster: ClusterConfig::default(),
            worktrees: WorktreesConfig::default(),
            push: PushConfig::default(),
            credentials: CredentialsConfig::default(),
            budgets: BudgetsConfig::default(),
        }
    }
}

impl Default for SocketConfig {
    fn default() -> Self {
        SocketConfig {
            max_frame_bytes: 1 << 20,
            max_content_bytes: 256 << 10,
            idle_timeout_secs: 120,
            session_buffer_frames: 1024,
            max_frames_per_sec: 1000,
            max_rate_limited: 100,
            max_per_principal: 0,
            handshake_timeout_secs: 10,
            max_subscriptions: 1000,
            body_timeout_secs: 30,
        }
    }
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            idle_evict_secs: 600,
            max_queued_turns: 32,
            interrupt_timeout_secs: 10,
            permission_timeout_secs: 300,
            max_live_per_principal: 0,
            max_live_total: 0,
            max_transfers_per_principal: 2,
            max_searches_per_principal: 2,
            respawn_backoff_ms: 1000,
            respawn_backoff_max_secs: 30,
            max_respawns: 5,
            respawn_window_secs: 300,
            page_bytes: 1 << 20,
            auto_continue: false,
            auto_continue_backoff_secs: 60,
            auto_continue_backoff_max_secs: 1920,
            auto_continue_max_tries: 6,
            auto_continue_jitter_ms: 5000,
            auto_continue_max_wait_secs: 8 * 24 * 3600,
        }
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            url: String::new(),
            synchronous_full: false,
            max_batch: 512,
            max_page_count: 0,
            wal_restart_mib: 64,
            search_timeout_ms: 2000,
            max_searches: 2,
            audit_retention_days: 365,
        }
    }
}

// By hand: the URL may hold a password.
impl fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreConfig")
            .field("url", &redact_url(&self.url))
            .field("synchronous_full", &self.synchronous_full)
            .field("max_batch", &self.max_batch)
            .field("max_page_count", &self.max_page_count)
            .field("wal_restart_mib", &self.wal_restart_mib)
            .finish()
    }
}

/// A store URL as it may be shown: its password (if any) replaced by `***`; a text that is not
/// a URL but holds an `@` (a mistyped one, maybe with a password) entirely.
pub fn redact_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, tail) = match rest.find(['/', '?', '#']) {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            match authority.rsplit_once('@') {
                Some((userinfo, host)) => match userinfo.split_once(':') {
                    Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
                    None => url.to_owned(),
                },
                None => url.to_owned(),
            }
        }
        None if url.contains('@') => "***".to_owned(),
        None => url.to_owned(),
    }
}

impl Config {
    /// Reads a TOML file over the defaults.
    ///
    /// # Errors
    /// When the file can't be read or has unknown or mistyped settings.
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read config {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("bad config {}: {e}", path.display()))
    }

    /// The name of the agent a new conversation gets when its first chat names none.
    pub fn default_agent(&self) -> String {
        match &self.agent.default {
            Some(name) => name.clone(),
            None => match self.backend_kind() {
                BackendKind::Claude => "claude".to_owned(),
                BackendKind::Demo => "demo".to_owned(),
            },
        }
    }

    /// The backend in force.
    pub fn backend_kind(&self) -> BackendKind {
        match (self.backend, &self.claude.bin) {
            (Some(kind), _) => kind,
            (None, Some(_)) => BackendKind::Claude,
            (None, None) => BackendKind::Demo,
        }
    }

    /// How long a conversation may idle before eviction.
    pub fn idle_evict(&self) -> Duration {
        Duration::from_secs(self.session.idle_evict_secs)
    }

    /// Most agent processes alive at once (`agent.max_live_processes`, else the older
    /// `claude.max_live_processes`, else 16); at least 1.
    pub fn max_live_processes(&self) -> usize {
        self.agent
            .max_live_processes
            .or(self.claude.max_live_processes)
            .unwrap_or(DEFAULT_MAX_LIVE_PROCESSES)
            .max(1)
    }

    /// What decoding a client frame accepts.
    pub fn decode_limits(&self) -> DecodeLimits {
        DecodeLimits {
            max_content_bytes: self.socket.max_content_bytes,
        }
    }

    /// The database file.
    pub fn database_path(&self) -> PathBuf {
        self.data_dir.join("agentmux.db")
    }

    /// Root of the agents' working directories.
    pub fn workspaces_dir(&self) -> PathBuf {
        self.data_dir.join("workspaces")
    }

    /// Where conversations' git worktrees are made: `<data-dir>/worktrees`.
    pub fn worktrees_dir(&self) -> PathBuf {
        self.data_dir.join("worktrees")
    }
}

impl ClaudeConfig {
    /// The CLI's config dir, where its transcripts live: `config_dir`, else the server's
    /// `CLAUDE_CONFIG_DIR`, else `$HOME/.claude`; None when none of them is set.
    pub fn home(&self) -> Option<PathBuf> {
        self.config_dir
            .clone()
            .or_else(|| std::env::var_os("CLAUDE_CONFIG_DIR").map(PathBuf::from))
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".claude")))
            .filter(|p| !p.as_os_str().is_empty())
    }
}

#[cfg(test)]
mod tests;
