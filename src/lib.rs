//! agentmux: one WebSocket, many AI agent sessions.
//!
//! A client sends `chat`, `interrupt` and `ping` frames tagged with an `agent_id`; the
//! [`session::Manager`] lazily creates or resumes the conversation behind that id, its actor
//! runs the agent, every message is committed to the store before any socket sees it, and
//! frames stream back tagged with their conversation.
//!
//! # Layout
//! - [`protocol`]: wire frames, decoding with typed errors, frame building. No I/O.
//! - [`ws`]: one task per socket; subscriptions, replay from the store, lag handling.
//! - [`api`]: the REST API under `/api/sessions` (history, rename, delete, export/import,
//!   rewind, fork, chat and Server-Sent Events for clients without a socket) and its OpenAPI
//!   document.
//! - [`replay`]: reading stored frames back by `seq`; the cursor every follower keeps.
//! - [`cli_chat`]: `agentmux chat`, the terminal client.
//! - [`http`]: the router (`/ws`, `/healthz`, `/metrics`, `/api`, and the [`web`] UI at `/`).
//! - [`web`]: the browser UI, embedded in the binary.
//! - [`session`]: the manager (single-flight create/resume, eviction) and the session actor.
//! - [`agent`]: backends that run agents (the built-in demo agent).
//! - [`store`]: the `Store` trait and its SQLite implementation with group commit.
//! - [`auth`]: the principal every request and socket acts for: tokens, JWTs, tickets, Origin.
//! - [`limits`]: quotas per principal and the per-socket frame rate.
//! - [`serve`]: the accept loop, with a deadline for each request head.
//! - [`config`], [`metrics`]: settings and counters.

#![warn(missing_docs)]

pub mod agent;
pub mod cli_chat;
pub mod config;
pub mod http;
pub mod limits;
pub mod metrics;
pub mod protocol;
pub mod session;
pub mod store;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::agent::Backend;
use crate::config::{BackendKind, Config};
use crate::http::AppState;
use crate::http::auth::Authenticator;
use crate::limits::Quota;
use crate::metrics::Metrics;
use crate::session::Manager;
use crate::store::Store;
use crate::store::sqlite::{SqliteSettings, SqliteStore};

/// A configured server, ready to run on a listener.
pub struct Server {
    state: AppState,
    store: Arc<dyn Store>,
}

impl Server {
    /// Checks the authentication settings, opens the store (running migrations and closing
    /// turns a crash left open) and sets up the backend.
    ///
    /// # Errors
    /// When authentication is off on a non-loopback bind, a JWT key is unreadable, the data
    /// directory or database can't be opened, or the backend can't be set up.
    pub async fn new(config: Config) -> anyhow::Result<Self> {
        let auth = Arc::new(Authenticator::new(
            &config.auth,
            &config.server,
            config.bind,
        )?);
        std::fs::create_dir_all(&config.data_dir).map_err(|e| {
            anyhow::anyhow!("cannot create data dir {}: {e}", config.data_dir.display())
        })?;
        let metrics = Metrics::default();
        let settings = SqliteSettings {
            synchronous_full: config.store.synchronous_full,
            max_batch: config.store.max_batch,
            max_page_count: config.store.max_page_count,
            ..SqliteSettings::default()
        };
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(&config.database_path(), settings, metrics.clone()).await?);
        let closed = store.close_unfinished_turns().await?;
        if closed > 0 {
            tracing::info!(
                turns = closed,
                "closed turns left unfinished by the last run"
            );
        }
        let backend: Arc<dyn Backend> = match config.backend_kind() {
            BackendKind::Demo => {
                let demo = agent::demo::DemoBackend {
                    word_delay: Duration::from_millis(config.demo.delay_ms),
                };
                match config.demo.gate_dir.clone() {
                    Some(gate_dir) => Arc::new(agent::demo::GatedDemoBackend { demo, gate_dir }),
                    None => Arc::new(demo),
                }
            }
            BackendKind::Claude => {
                let bin = config.claude.bin.clone().ok_or_else(|| {
                    anyhow::anyhow!("the claude backend needs the CLI's path: --claude-bin or AGENTMUX_CLAUDE_BIN")
                })?;
                let settings = agent::claude::ClaudeSettings {
                    config: config.claude.clone(),
                    bin,
                    workspaces: config.workspaces_dir(),
                };
                Arc::new(agent::claude::ClaudeBackend::new(settings))
            }
        };
        let sockets = Quota::new(config.socket.max_per_principal, 0);
        let config = Arc::new(config);
        let manager = Manager::new(store.clone(), backend, config.clone(), metrics.clone());
        Ok(Server {
            state: AppState {
                manager,
                config,
                metrics,
                shutdown: CancellationToken::new(),
                auth,
                sockets,
            },
            store,
        })
    }

    /// Serves on `listener` until `shutdown` completes, then shuts down in order: stop
    /// accepting and close sockets (1001), end running turns, stop agents, flush the store.
    ///
    /// # Errors
    /// None today: failed accepts are retried. The `Result` leaves room for start-up steps
    /// that can fail.
    pub async fn run(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let token = self.state.shutdown.clone();
        self.state.manager.spawn_sweeper(token.clone());
        let app = http::router(self.state.clone());
        let handshake = Duration::from_secs(self.state.config.socket.handshake_timeout_secs);
        let signal_token = token.clone();
        http::serve::serve(listener, app, handshake, async move {
            shutdown.await;
            signal_token.cancel();
        })
        .await;
        token.cancel();
        self.state.manager.shutdown().await;
        self.store.close().await;
        Ok(())
    }
}

/// Raises the soft limit on open files to the hard limit, so that many sockets fit.
pub fn raise_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed by reference.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
