//! Conversations, independent of any transport: the [`Manager`] maps `(principal, agent_id)`
//! to a live conversation actor, starting or resuming it on demand, and every client (WebSocket or
//! REST) goes through it.
//!
//! Each key has a [`Slot`] that outlives the actor behind it: it holds the conversation's
//! broadcast of frames (so subscribers stay attached across eviction and resume; its buffer
//! holds only what a subscriber has not read yet) and a mutex
//! that serializes starting, commanding and evicting the actor. That mutex is what makes
//! creation single-flight and guarantees at most one live actor, and so one agent process,
//! per conversation. A slot exists only while it has an actor or a subscriber (or is being
//! worked on): work refused by a limit leaves none behind.
//!
//! The [`Manager`] is spread over files by job: `slots` (the slot map), `start` (starting and
//! resuming actors), `checks` (option and access checks), `asks` (the one entry for what a
//! client asks, a typed method per command), `commands` (the commands on an existing
//! conversation), `routing` (between nodes), `history` (stored conversations), and `errors`.
//! The `actor` runs one live conversation, and `cluster` is the bus between nodes.

mod activity;
mod actor;
mod asks;
mod audit;
pub mod backup;
mod checks;
mod cli_sessions;
mod cluster;
mod commands;
pub mod credentials;
mod errors;
pub mod events;
mod history;
mod links;
pub mod replay;
mod routing;
mod schedules;
mod shares;
mod slots;
pub mod spend;
mod start;
mod viewers;
mod worktree;

pub use crate::agent::Supports;
pub use crate::agent::registry::AgentInfo;
pub use crate::store::audit::{AuditQuery, AuditRow};
pub use crate::store::links::LinkRow;
pub use crate::store::shares::ShareRow;
pub use crate::store::usage::{CapOverride, GroupBy, UsageQuery, UsageRow};
pub use crate::store::{Cursor, PageStart, SessionPage, SessionQuery, SessionRecord};
pub use actor::rfc3339 as rfc3339_ms;
pub use audit::Audit;
pub use backup::Backup;
pub use cli_sessions::{CliSession, Project};
pub use cluster::Bus;
pub use errors::SessionError;
pub use history::{ExportLine, MAX_TITLE_CHARS};
pub use links::{MAX_LINK_SECS, MAX_LINK_USES, NewLink};
pub use schedules::{LastRun, Schedule, ScheduleBody, Scheduler};
pub use shares::{Acting, Need, Revoked};
pub use viewers::Viewing;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use dashmap::DashMap;
use tokio::sync::oneshot;

use crate::agent::registry::Agents;
use crate::config::Config;
use crate::limits::Quota;
use crate::metrics::Metrics;
use crate::protocol::{AgentId, ErrorCode, Principal, SessionId, Tag};
use crate::store::{RowId, Store};
use routing::Command;
use slots::{Key, Slot};

/// The identity of a conversation that frames are tagged with.
#[derive(Debug)]
pub struct Conversation {
    /// Its row in the store.
    pub row: RowId,
    /// The client's routing key.
    pub agent_id: AgentId,
    /// Our id of the conversation.
    pub session_id: SessionId,
    /// The name of its agent (`session_info.backend`), fixed for its life.
    pub agent: String,
    /// Whose conversation it is.
    pub principal: Principal,
    /// Its own git worktree, fixed for its life, if it has one.
    pub worktree: Option<crate::worktrees::Worktree>,
}

impl Conversation {
    /// The identity of a stored conversation.
    pub fn from_record(record: &SessionRecord) -> Arc<Self> {
        Arc::new(Conversation {
            row: record.row,
            agent_id: record.agent_id.clone(),
            session_id: record.session_id.clone(),
            agent: record.backend.clone(),
            principal: record.principal.clone(),
            worktree: record.worktree(),
        })
    }

    /// The tag frames of this conversation carry.
    pub fn tag(&self) -> Tag<'_> {
        Tag {
            agent_id: &self.agent_id,
            session_id: &self.session_id,
        }
    }
}

/// A chat that was stored and queued.
pub struct ChatAccepted {
    /// The conversation.
    pub conversation: Arc<Conversation>,
    /// `seq` of the stored user message.
    pub seq: i64,
    /// 0 when the turn runs now, else how many turns are ahead of it.
    pub queue_position: usize,
    /// The conversation's frames from before the user message on.
    pub events: events::Receiver,
}

/// A user turn handed to its conversation and not yet known to be stored.
pub struct PendingChat {
    conversation: Arc<Conversation>,
    events: events::Receiver,
    reply: oneshot::Receiver<Result<(i64, usize), SessionError>>,
}

impl PendingChat {
    /// Waits until the user message is committed.
    ///
    /// # Errors
    /// `store_unavailable`, `limit_exceeded` or `backend_unavailable`.
    pub async fn stored(self) -> Result<ChatAccepted, SessionError> {
        let (seq, queue_position) = self.reply.await.map_err(|_| {
            SessionError::new(ErrorCode::BackendUnavailable, "the conversation stopped")
        })??;
        Ok(ChatAccepted {
            conversation: self.conversation,
            seq,
            queue_position,
            events: self.events,
        })
    }
}

/// A subscription to a conversation's live frames.
pub struct Subscription {
    /// The conversation.
    pub conversation: Arc<Conversation>,
    /// Live frames from now on.
    pub events: events::Receiver,
}

/// What a conversation is doing, as [`Manager::activity`] tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Activity {
    /// A turn is running or queued.
    Busy,
    /// The agent is live with nothing to do.
    Idle,
    /// Only in the store; the next chat resumes it.
    Dormant,
}

/// What became of a request to warm a conversation's agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warm {
    /// Its agent is running or starting in the background.
    Started,
    /// Not now: the live limits are reached (or the server is shutting down); the detail says
    /// why. The next chat starts the agent as usual.
    Refused(String),
}

/// The result of an `interrupt`.
pub struct Interrupted {
    /// The conversation.
    pub conversation: Arc<Conversation>,
    /// Whether a turn was running (and is now being stopped).
    pub was_running: bool,
    /// Whether, with no turn running, the wait for a rate limit was cancelled.
    pub cancelled_wait: bool,
}

pub(crate) struct Shared {
    store: Arc<dyn Store>,
    agents: Arc<Agents>,
    config: Arc<Config>,
    metrics: Metrics,
    /// Live conversations per principal and in total.
    live: Quota,
    /// Set once the server shuts down: no conversation starts any more.
    closing: AtomicBool,
    /// Imports and exports running per principal.
    transfers: Quota,
    /// Searches of conversations running per principal.
    searches: Quota,
    /// Replay pages being read at once, server-wide (see [`replay::REPLAY_READERS`]).
    replay_readers: Arc<tokio::sync::Semaphore>,
    /// Each principal's activity feed.
    activity: activity::Feeds,
    /// The ends of shares, for the sharees' open streams.
    revocations: shares::Revocations,
    /// Who views each conversation on this node.
    viewers: Arc<viewers::Viewers>,
    /// When the audit log was last pruned.
    audit_pruned: audit::Pruned,
    /// The other nodes, in cluster mode.
    bus: Option<Arc<Bus>>,
    /// The spending caps turns start under, as last read or set; None on PostgreSQL, where
    /// another node may set them.
    known_caps: Option<spend::KnownCaps>,
    /// Conversations' git worktrees; None without a git program.
    worktrees: Option<Arc<crate::worktrees::Worktrees>>,
    /// Web Push, told of what each principal's activity feed is.
    push: Arc<crate::push::Push>,
    /// Seals and opens principals' own credentials; None without a secret key.
    sealer: Option<Arc<crate::credentials::Sealer>>,

    /// Woken when a conversation starts waiting for a rate limit: the timer of the
    /// [`Scheduler`] then looks at when its "continue" turn is due.
    limit_waits: tokio::sync::Notify,
}

/// The registry of conversations; cheap to clone.
#[derive(Clone)]
pub struct Manager {
    slots: Arc<DashMap<Key, Arc<Slot>>>,
    shared: Arc<Shared>,
    /// Whether commands may go on to the node that runs their conversation.
    route: routing::Route,
}

/// What a [`Manager`] works with besides its store, agents, settings and metrics.
pub struct Services {
    /// The other nodes, in cluster mode.
    pub bus: Option<Arc<Bus>>,
    /// Conversations' git worktrees; None without a git program.
    pub worktrees: Option<Arc<crate::worktrees::Worktrees>>,
    /// Web Push.
    pub push: Arc<crate::push::Push>,
    /// Seals and opens principals' own credentials; None without a secret key.
    pub sealer: Option<Arc<crate::credentials::Sealer>>,
}

impl Manager {
    /// A manager over `store`, starting the agents of `agents`.
    pub fn new(
        store: Arc<dyn Store>,
        agents: Arc<Agents>,
        config: Arc<Config>,
        metrics: Metrics,
        services: Services,
    ) -> Self {
        let Services {
            bus,
            worktrees,
            push,
            sealer,
        } = services;
        let lost = store.lost_leases();
        let manager = Manager {
            slots: Arc::new(DashMap::new()),
            shared: Arc::new(Shared {
                live: Quota::new(
                    config.session.max_live_per_principal,
                    config.session.max_live_total,
                ),
                transfers: Quota::new(config.session.max_transfers_per_principal, 0),
                searches: Quota::new(config.session.max_searches_per_principal, 0),
                // Only SQLite's server is sure to be the one that sets the caps it reads.
                known_caps: config.store.url.is_empty().then(spend::KnownCaps::default),
                store,
                agents,
                config,
                metrics,
                closing: AtomicBool::new(false),
                replay_readers: Arc::new(tokio::sync::Semaphore::new(replay::REPLAY_READERS)),
                activity: activity::Feeds::default(),
                revocations: shares::Revocations::default(),
                viewers: Arc::default(),
                audit_pruned: audit::Pruned::default(),
                bus,
                worktrees,
                push,
                sealer,
                limit_waits: tokio::sync::Notify::new(),
            }),
            route: routing::Route::AnyNode,
        };
        if let Some(lost) = lost {
            manager.spawn_hand_overs(lost);
        }
        manager
    }

    /// Answers the commands other nodes send to this one, and hears of the shares they end
    /// (cluster mode), until `stop` fires.
    ///
    /// # Errors
    /// When this node can't subscribe to them.
    pub async fn serve_other_nodes(
        &self,
        stop: tokio_util::sync::CancellationToken,
    ) -> anyhow::Result<()> {
        let Some(bus) = &self.shared.bus else {
            return Ok(());
        };
        let limits = self.shared.config.decode_limits();
        bus.clone()
            .follow_revocations(self.clone(), stop.clone())
            .await?;
        tokio::spawn(self.clone().expire_gone_viewers(stop.clone()));
        bus.clone().serve(self.clone(), limits, stop).await
    }

    /// The activity of every conversation of `principal` from now on: an `activity` frame
    /// when a turn starts or ends or a tool waits for approval.
    pub fn watch(&self, principal: &Principal) -> events::Receiver {
        self.shared.activity.watch(principal)
    }

    /// The agents conversations can run, and the name of the default one.
    pub async fn agents(&self) -> (Vec<AgentInfo>, String) {
        let agents = &self.shared.agents;
        (agents.list().await, agents.default_name().to_owned())
    }

    /// The node that runs each of `records` now (its lease holder), in order; None for one
    /// that no node runs, and for every one on a store that only one node uses.
    pub async fn owner_nodes(&self, records: &[SessionRecord]) -> Vec<Option<String>> {
        let rows: Vec<RowId> = records.iter().map(|r| r.row).collect();
        match self.shared.store.lease_holders(&rows).await {
            Ok(mut holders) => rows.iter().map(|row| holders.remove(row)).collect(),
            Err(err) => {
                tracing::warn!(error = %err, "reading which nodes run conversations failed");
                vec![None; rows.len()]
            }
        }
    }
}
