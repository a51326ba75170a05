//! agentmux: one WebSocket, many AI agent sessions.
//!
//! A client sends `chat`, `interrupt` and `ping` frames tagged with an `agent_id`; the
//! [`session::Manager`] lazily creates or resumes the conversation behind that id, its actor
//! runs the agent, every message is committed to the store before any socket sees it, and
//! frames stream back tagged with their conversation.
//!
//! # Layout
//! The layers, outermost first; each may use the ones below it, never one above (a test in
//! `tests/it/layers.rs` keeps it so):
//! - [`http`]: everything HTTP (the only module that knows axum and hyper): the accept loop,
//!   the guard every request passes (Host, Origin, body type), authentication, the WebSocket
//!   loop, Server-Sent Events, the REST API and its OpenAPI document, the embedded web UI.
//! - [`session`]: conversations, independent of any transport, and the only way in: the
//!   manager (single-flight create/resume, eviction, history, rewind, fork), one actor per
//!   live conversation, replay by `seq`.
//! - [`agent`]: what runs behind a conversation (the Claude Code CLI, Agent Client Protocol
//!   agents, the demo agent), by name.
//! - [`store`]: the `Store` trait and its SQLite and PostgreSQL implementations with group
//!   commit.
//! - [`protocol`]: the wire frames, their decoding with typed errors and their building; a
//!   leaf that imports nothing else of the crate.
//! - [`push`]: Web Push to the browsers principals subscribed (VAPID key, subscriptions,
//!   which conversation each page shows, the background sender), fed by the session layer.
//! - [`config`], [`limits`], [`metrics`], [`programs`], [`projects`], [`worktrees`]:
//!   settings, quotas, counters, finding the programs the settings name, the project roots'
//!   path rules and conversations' git worktrees, used by every layer above them.
//!
//! Beside the layers, [`operate`] holds what the `agentmux` command does for an operator
//! besides serving (backup, restore), using any of them.

#![warn(missing_docs)]

pub mod agent;
pub mod config;
pub mod credentials;
pub mod http;
pub mod limits;
pub mod metrics;
pub mod operate;
pub mod programs;
pub mod projects;
pub mod protocol;
pub mod push;
pub mod session;
pub mod store;
pub mod worktrees;

use std::future::Future;
use std::os::unix::fs::DirBuilderExt;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::registry::Agents;
use crate::config::Config;
use crate::http::AppState;
use crate::http::auth::Authenticator;
use crate::limits::Quota;
use crate::metrics::Metrics;
use crate::push::Push;
use crate::session::{Bus, Manager, Scheduler};
use crate::store::Store;
use crate::store::postgres::{PgSettings, PgStore};
use crate::store::push::PushStore;
use crate::store::schedules::ScheduleStore;
use crate::store::sqlite::{SqliteSettings, SqliteStore};

/// How long a shutdown waits for the sockets to send their close frames.
const SOCKETS_CLOSE: Duration = Duration::from_secs(5);

/// A configured server, ready to run on a listener.
pub struct Server {
    state: AppState,
    scheduler: Scheduler,
    store: Arc<dyn Store>,
    /// Stops answering other nodes' commands.
    stop_serving_nodes: CancellationToken,
}

impl Server {
    /// Checks the authentication settings, opens the store (running migrations and closing
    /// turns a crash left open) and sets up the backend.
    ///
    /// # Errors
    /// When a project root is missing, authentication is off on a non-loopback bind, a JWT key
    /// is unreadable, the Claude CLI is not an executable file, the data directory or database
    /// can't be opened, or the backend can't be set up.
    pub async fn new(mut config: Config) -> anyhow::Result<Self> {
        // Roots are compared by their canonical form; a missing one would refuse every chat
        // that names it, so refuse to start instead.
        config.projects.canonicalize()?;
        config.push.check()?;
        config.check_spend()?;
        let sealer = credentials::Sealer::from_config(&config.credentials)?.map(Arc::new);
        let auth = Arc::new(Authenticator::new(
            &config.auth,
            &config.server,
            config.bind,
        )?);
        // An agent program that can't run would fail every turn: refuse to start instead.
        let agents = Arc::new(Agents::from_config(&config)?);
        // A CLI that is not signed in would fail only at its first turn: say so now.
        agents.log_self_checks();
        // Conversations and workspaces are the server's user's alone: directories it creates
        // are 0700 (the database file itself is made 0600 by the store).
        for dir in [config.data_dir.clone(), config.workspaces_dir()] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| anyhow::anyhow!("cannot create data dir {}: {e}", dir.display()))?;
        }
        let unfinished = session::backup::remove_unfinished(&config.data_dir);
        if unfinished > 0 {
            tracing::info!(
                files = unfinished,
                "removed backups left unfinished by the last run"
            );
        }
        let metrics = Metrics::default();
        let (search_timeout, max_searches) = config.store.search_limits()?;
        let settings = SqliteSettings {
            synchronous_full: config.store.synchronous_full,
            max_batch: config.store.max_batch,
            max_page_count: config.store.max_page_count,
            wal_restart_pages: config.store.wal_restart_pages()?,
            search_timeout,
            max_searches,
            ..SqliteSettings::default()
        };
        let (store, schedules, pushes): (
            Arc<dyn Store>,
            Arc<dyn ScheduleStore>,
            Arc<dyn PushStore>,
        ) = if config.store.url.is_empty() {
            let sqlite = Arc::new(
                SqliteStore::open(&config.database_path(), settings, metrics.clone()).await?,
            );
            (sqlite.clone(), sqlite.clone(), sqlite)
        } else {
            let node = config.cluster.node_name(config.bind)?;
            let settings = PgSettings {
                max_batch: config.store.max_batch,
                node_id: node.clone(),
                address: config.bind.to_string(),
                lease: Duration::from_secs(config.cluster.lease_secs),
                search_timeout,
                max_searches,
                ..PgSettings::default()
            };
            let pg = Arc::new(PgStore::open(&config.store.url, settings, metrics.clone()).await?);
            tracing::info!(
                url = %crate::config::redact_url(&config.store.url),
                node = %node,
                "conversations are stored in PostgreSQL"
            );
            (pg.clone(), pg.clone(), pg)
        };
        let discarded = store.discard_unfinished_imports().await?;
        if discarded > 0 {
            tracing::info!(
                imports = discarded,
                "removed imports left unfinished by the last run"
            );
        }
        // Credentials that the configured key can't open would fail their principals' turns:
        // refuse to start instead, saying which key they need.
        credentials::check_stored(store.as_ref(), sealer.as_deref()).await?;
        let closed = store.close_unfinished_turns().await?;
        if closed > 0 {
            tracing::info!(
                turns = closed,
                "closed turns left unfinished by the last run"
            );
        }
        let sockets = Quota::new(config.socket.max_per_principal, 0);
        let config = Arc::new(config);
        let bus = match config.cluster.nats.as_str() {
            "" => None,
            _ if config.store.url.is_empty() => anyhow::bail!(
                "a cluster (--cluster-nats) needs a PostgreSQL store that every node shares (--store-url)"
            ),
            _ => {
                let node = config.cluster.node_name(config.bind)?;
                let page_bytes = config.session.page_bytes;
                Some(Bus::connect(&config.cluster, node, metrics.clone(), page_bytes).await?)
            }
        };
        let worktrees = worktrees::Worktrees::from_config(&config)
            .await?
            .map(Arc::new);
        if let Some(worktrees) = &worktrees {
            prune_worktrees(worktrees, store.as_ref()).await;
        }
        let push = Push::start(
            &config.push,
            &config.data_dir,
            pushes,
            store.clone(),
            metrics.clone(),
        )?;
        let manager = Manager::new(
            store.clone(),
            agents,
            config.clone(),
            metrics.clone(),
            session::Services {
                bus,
                worktrees,
                push: push.clone(),
                sealer,
            },
        );
        // Commands the other nodes of a cluster forward are answered from before this node's
        // address is announced, until its shutdown begins.
        let stop_serving_nodes = CancellationToken::new();
        manager
            .serve_other_nodes(stop_serving_nodes.clone())
            .await?;
        let scheduler = Scheduler::new(manager.clone(), schedules, &config.schedules)?;
        Ok(Server {
            scheduler: scheduler.clone(),
            state: AppState {
                manager,
                scheduler,
                config,
                metrics,
                shutdown: CancellationToken::new(),
                open_sockets: TaskTracker::new(),
                auth,
                sockets,
                push,
            },
            store,
            stop_serving_nodes,
        })
    }

    /// Serves on `listener` until `shutdown` completes, then shuts down in order: stop
    /// accepting, end running and queued turns (their `server_shutdown` results reach the
    /// sockets), stop agents, close sockets (1001), flush the store.
    ///
    /// # Errors
    /// None today: failed accepts are retried. The `Result` leaves room for start-up steps
    /// that can fail.
    pub async fn run(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let sockets = self.state.shutdown.clone();
        let open_sockets = self.state.open_sockets.clone();
        self.state.manager.spawn_sweeper(sockets.clone());
        let app = http::router(self.state.clone());
        let handshake = Duration::from_secs(self.state.config.socket.handshake_timeout_secs);
        let stop_accepting = CancellationToken::new();
        let manager = self.state.manager.clone();
        // Schedules run from now on; ticks missed while the server was down run at once.
        let stop_schedules = CancellationToken::new();
        self.scheduler.spawn(stop_schedules.clone());
        let ending = {
            let stop_accepting = stop_accepting.clone();
            let stop_serving_nodes = self.stop_serving_nodes.clone();
            tokio::spawn(async move {
                shutdown.await;
                stop_serving_nodes.cancel();
                stop_schedules.cancel();
                stop_accepting.cancel();
                manager.shutdown().await;
                sockets.cancel();
                // Each socket sends its close frame before the process may end.
                open_sockets.close();
                if tokio::time::timeout(SOCKETS_CLOSE, open_sockets.wait())
                    .await
                    .is_err()
                {
                    tracing::warn!("sockets still open after {SOCKETS_CLOSE:?}; closing anyway");
                }
            })
        };
        http::serve::serve(listener, app, handshake, stop_accepting.cancelled_owned()).await;
        let _ = ending.await;
        self.store.close().await;
        Ok(())
    }
}

/// Removes the worktrees whose conversation is gone (deleted while the server was down, or
/// left by a crash between making a worktree and storing its conversation). One the store
/// can't answer for is kept.
async fn prune_worktrees(worktrees: &worktrees::Worktrees, store: &dyn Store) {
    let mut known = std::collections::HashSet::new();
    for name in worktrees.names().await {
        match store.find_by_session_id(&name).await {
            Ok(Some(record)) if record.worktree.is_none() => {}
            Ok(None) => {}
            Ok(Some(_)) | Err(_) => {
                known.insert(name);
            }
        }
    }
    let pruned = worktrees.prune(|name| known.contains(name)).await;
    if pruned > 0 {
        tracing::info!(
            worktrees = pruned,
            "removed worktrees of conversations that are gone"
        );
    }
}

/// Raises the soft limit on open files to the hard limit, so that many sockets fit.
pub fn raise_fd_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            ..limit
        };
        let _ = setrlimit(Resource::Nofile, raised);
    }
}
