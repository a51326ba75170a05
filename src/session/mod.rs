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

mod activity;
mod actor;
mod cli_sessions;
mod cluster;
pub mod events;
mod history;
pub mod replay;
mod schedules;

pub use crate::agent::Supports;
pub use crate::agent::registry::AgentInfo;
pub use crate::store::{SessionQuery, SessionRecord};
pub use cli_sessions::{CliSession, Project};
pub use cluster::Bus;
pub use history::{ExportLine, MAX_TITLE_CHARS};
pub use schedules::{LastRun, Schedule, ScheduleBody, Scheduler};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::{Mutex, OwnedMutexGuard, mpsc, oneshot};

use crate::agent::registry::Agents;
use crate::config::Config;
use crate::limits::{Quota, QuotaExceeded, QuotaPermit};
use crate::metrics::Metrics;
use crate::protocol::{
    self, AgentId, Chat, ClientFrame, ErrorCode, Frame, FrameError, LaunchOptions, SessionId, Tag,
};
use crate::store::{NewMessage, RowId, Store, StoreError};

/// Commands waiting for one actor; a full queue answers `limit_exceeded`.
const COMMAND_QUEUE: usize = 256;
/// How often a chat for a conversation whose node is gone tries to take it over.
const TAKEOVER_POLL: Duration = Duration::from_millis(200);
/// How often dormant slots without subscribers are dropped from memory.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

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
    pub principal: String,
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

type Key = (String, String);

enum SlotState {
    Dormant,
    Live(SessionHandle),
}

#[derive(Clone)]
struct SessionHandle {
    tx: mpsc::Sender<actor::Command>,
    conversation: Arc<Conversation>,
}

/// Everything in memory about one conversation key.
struct Slot {
    events: events::Sender,
    state: Arc<Mutex<SlotState>>,
    /// Set (under `state`) when the slot is dropped from the map; holders must look again.
    removed: AtomicBool,
    conversation: std::sync::OnceLock<Arc<Conversation>>,
    /// Whether the actor is running or queueing a turn.
    busy: Arc<AtomicBool>,
    /// Set once frames of other nodes are relayed to this slot's followers (cluster mode).
    relaying: AtomicBool,
    /// Stops that relay when the slot is dropped.
    relay_stop: tokio_util::sync::CancellationToken,
    /// Held by the chat this node is forwarding to the conversation's node, so that the next
    /// one goes after it.
    forwarding: Arc<Mutex<()>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.relay_stop.cancel();
    }
}

/// Why a conversation's actor did not start on this node.
enum Refused {
    /// A typed error for the client.
    Error(FrameError),
    /// Another node runs it (cluster mode).
    Elsewhere {
        node: String,
        record: Box<SessionRecord>,
    },
}

impl From<FrameError> for Refused {
    fn from(err: FrameError) -> Self {
        Refused::Error(err)
    }
}

/// Whether a command may go to the node that runs its conversation: a command forwarded
/// from another node is run here or refused, never sent on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    AnyNode,
    ThisNode,
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
    agent_id: AgentId,
    conversation: Arc<Conversation>,
    events: events::Receiver,
    reply: oneshot::Receiver<Result<(i64, usize), FrameError>>,
}

impl PendingChat {
    /// Waits until the user message is committed.
    ///
    /// # Errors
    /// `store_unavailable`, `limit_exceeded` or `backend_unavailable`.
    pub async fn stored(self) -> Result<ChatAccepted, FrameError> {
        let agent_id = self.agent_id;
        let (seq, queue_position) = self.reply.await.map_err(|_| {
            FrameError::new(ErrorCode::BackendUnavailable, "the conversation stopped")
                .for_agent(Some(&agent_id))
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
    /// Replay pages being read at once, server-wide (see [`replay::REPLAY_READERS`]).
    replay_readers: Arc<tokio::sync::Semaphore>,
    /// Each principal's activity feed.
    activity: activity::Feeds,
    /// The other nodes, in cluster mode.
    bus: Option<Arc<Bus>>,
}

/// The registry of conversations; cheap to clone.
#[derive(Clone)]
pub struct Manager {
    slots: Arc<DashMap<Key, Arc<Slot>>>,
    shared: Arc<Shared>,
}

pub(crate) fn unknown_agent(agent_id: &str) -> FrameError {
    FrameError::new(
        ErrorCode::UnknownAgent,
        format!("no conversation with agent_id `{agent_id}`"),
    )
    .for_agent(Some(agent_id))
}

/// A failed store call that concerns no one conversation, as a typed error.
pub(crate) fn store_failure(err: StoreError) -> FrameError {
    tracing::warn!(error = %err, "store unavailable");
    FrameError::new(
        ErrorCode::StoreUnavailable,
        "the store is unavailable; try again",
    )
}

pub(crate) fn store_error(err: StoreError, agent_id: &str) -> FrameError {
    match err {
        StoreError::UnknownSession => unknown_agent(agent_id),
        StoreError::InvalidSeq(detail) => {
            FrameError::new(ErrorCode::InvalidSeq, detail).for_agent(Some(agent_id))
        }
        StoreError::AgentExists => FrameError::new(
            ErrorCode::AgentExists,
            format!("a conversation with agent_id `{agent_id}` already exists"),
        )
        .for_agent(Some(agent_id)),
        StoreError::Importing => FrameError::new(
            ErrorCode::Busy,
            format!("conversation `{agent_id}` is being imported; try again once it is done"),
        )
        .for_agent(Some(agent_id)),
        StoreError::OwnedElsewhere(node) => FrameError::new(
            ErrorCode::OwnedElsewhere,
            format!(
                "conversation `{agent_id}` is live on node `{node}`; send it there, or again once that node has stopped"
            ),
        )
        .for_agent(Some(agent_id)),
        StoreError::Fenced => moved(agent_id),
        err @ StoreError::Unavailable(_) => store_failure(err).for_agent(Some(agent_id)),
    }
}

impl Manager {
    /// A manager over `store`, starting the agents of `agents`.
    pub fn new(
        store: Arc<dyn Store>,
        agents: Arc<Agents>,
        config: Arc<Config>,
        metrics: Metrics,
        bus: Option<Arc<Bus>>,
    ) -> Self {
        let lost = store.lost_leases();
        let manager = Manager {
            slots: Arc::new(DashMap::new()),
            shared: Arc::new(Shared {
                live: Quota::new(
                    config.session.max_live_per_principal,
                    config.session.max_live_total,
                ),
                transfers: Quota::new(config.session.max_transfers_per_principal, 0),
                store,
                agents,
                config,
                metrics,
                closing: AtomicBool::new(false),
                replay_readers: Arc::new(tokio::sync::Semaphore::new(replay::REPLAY_READERS)),
                activity: activity::Feeds::default(),
                bus,
            }),
        };
        if let Some(lost) = lost {
            manager.spawn_hand_overs(lost);
        }
        manager
    }

    /// Stops the actor of each conversation another node took over from this one, as the
    /// store reports them.
    fn spawn_hand_overs(&self, mut lost: mpsc::UnboundedReceiver<RowId>) {
        let slots = Arc::downgrade(&self.slots);
        tokio::spawn(async move {
            while let Some(row) = lost.recv().await {
                let Some(slots) = slots.upgrade() else { return };
                let slot = slots
                    .iter()
                    .find(|e| e.value().conversation.get().is_some_and(|c| c.row == row))
                    .map(|e| e.value().clone());
                drop(slots);
                let Some(slot) = slot else { continue };
                let tx = match &*slot.state.lock().await {
                    SlotState::Live(handle) => handle.tx.clone(),
                    SlotState::Dormant => continue,
                };
                let _ = tx.send(actor::Command::TakenOver).await;
            }
        });
    }

    /// Answers the commands other nodes send to this one (cluster mode) until `stop` fires.
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
        bus.clone().serve(self.clone(), limits, stop).await
    }

    /// The activity of every conversation of `principal` from now on: an `activity` frame
    /// when a turn starts or ends or a tool waits for approval.
    pub fn watch(&self, principal: &str) -> events::Receiver {
        self.shared.activity.watch(principal)
    }

    /// The agents conversations can run, and the name of the default one.
    pub fn agents(&self) -> (Vec<AgentInfo>, String) {
        let agents = &self.shared.agents;
        (agents.list(), agents.default_name().to_owned())
    }

    /// Drops dormant, unwatched slots from memory now and then, until `stop` fires.
    pub fn spawn_sweeper(&self, stop: tokio_util::sync::CancellationToken) {
        let slots = Arc::downgrade(&self.slots);
        let metrics = self.shared.metrics.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let Some(slots) = slots.upgrade() else { return };
                sweep(&slots, &metrics);
            }
        });
    }

    fn key(principal: &str, agent_id: &str) -> Key {
        (principal.to_owned(), agent_id.to_owned())
    }

    /// Locks the slot of `key`, creating it if needed.
    async fn lock_slot(&self, key: &Key) -> (Arc<Slot>, OwnedMutexGuard<SlotState>) {
        loop {
            let mut created = false;
            let slot = self
                .slots
                .entry(key.clone())
                .or_insert_with(|| {
                    created = true;
                    Arc::new(Slot {
                        events: events::Sender::new(
                            self.shared.config.socket.session_buffer_frames,
                        ),
                        state: Arc::new(Mutex::new(SlotState::Dormant)),
                        removed: AtomicBool::new(false),
                        conversation: std::sync::OnceLock::new(),
                        busy: Arc::new(AtomicBool::new(false)),
                        relaying: AtomicBool::new(false),
                        relay_stop: tokio_util::sync::CancellationToken::new(),
                        forwarding: Arc::new(Mutex::new(())),
                    })
                })
                .clone();
            if created {
                self.shared.metrics.slots(1);
            }
            let guard = slot.state.clone().lock_owned().await;
            if !slot.removed.load(Ordering::Acquire) {
                return (slot, guard);
            }
        }
    }

    /// Drops the slot of `key` from memory, its state held locked by the caller.
    fn remove_slot(&self, key: &Key, slot: &Arc<Slot>) {
        slot.removed.store(true, Ordering::Release);
        if self
            .slots
            .remove_if(key, |_, s| Arc::ptr_eq(s, slot))
            .is_some()
        {
            self.shared.metrics.slots(-1);
        }
    }

    /// Drops the slot of `key` if it has neither an actor nor a subscriber (after refused or
    /// finished work), its state `guard` held locked by the caller.
    fn release_if_unused(&self, key: &Key, slot: &Arc<Slot>, guard: &SlotState) {
        if is_dormant(guard) && slot.events.receiver_count() == 0 {
            self.remove_slot(key, slot);
        }
    }

    /// Stores a user turn for `chat.agent_id`, creating or resuming the conversation first.
    ///
    /// # Errors
    /// `store_unavailable`, `limit_exceeded` (queue full, or too many live conversations) or
    /// `backend_unavailable`.
    pub async fn chat(&self, principal: &str, chat: Chat) -> Result<ChatAccepted, FrameError> {
        self.submit_chat(principal, chat).await?.stored().await
    }

    /// Hands a user turn to its conversation (creating or resuming it first) without waiting
    /// for it to be stored. Turns submitted one after the other, on any conversation, are
    /// queued in that order; a socket uses this to keep reading while its chats are committed,
    /// so that many of them share one group commit.
    ///
    /// # Errors
    /// `store_unavailable`, `limit_exceeded` (queue full) or `backend_unavailable`.
    pub async fn submit_chat(
        &self,
        principal: &str,
        chat: Chat,
    ) -> Result<PendingChat, FrameError> {
        self.submit_marked(principal, chat, None, Route::AnyNode)
            .await
    }

    /// [`Self::submit_chat`], storing `marker` (a status) just before the user message. In
    /// cluster mode, a chat for a conversation another node runs goes to that node (with its
    /// marker); when that node is gone, the chat waits for its lease to expire and runs here.
    pub(super) async fn submit_marked(
        &self,
        principal: &str,
        chat: Chat,
        marker: Option<Box<NewMessage>>,
        route: Route,
    ) -> Result<PendingChat, FrameError> {
        let chat = self.resolve_paths(principal, chat).await?;
        let agent_id = chat.agent_id.clone();
        let key = Self::key(principal, &agent_id);
        let (slot, mut guard) = self.lock_slot(&key).await;
        let handle = match &*guard {
            SlotState::Live(h) if !h.tx.is_closed() => {
                self.check_chat_options(&h.conversation.agent, &chat)?;
                h.clone()
            }
            _ => match self.start(principal, &chat, &slot).await {
                Ok(h) => {
                    *guard = SlotState::Live(h.clone());
                    h
                }
                Err(Refused::Elsewhere { node, record })
                    if route == Route::AnyNode && self.shared.bus.is_some() =>
                {
                    let marked = marker.as_deref().map(cluster::Marker::of);
                    let forwarded = self
                        .forward_chat(principal, chat, marked, &slot, node, &record)
                        .await;
                    drop(guard);
                    return Ok(forwarded);
                }
                Err(refused) => {
                    self.release_if_unused(&key, &slot, &guard);
                    return Err(match refused {
                        Refused::Error(err) => err,
                        Refused::Elsewhere { node, .. } => {
                            store_error(StoreError::OwnedElsewhere(node), &agent_id)
                        }
                    });
                }
            },
        };
        let events = slot.events.subscribe();
        let (reply, reply_rx) = oneshot::channel();
        send_command(
            &handle,
            &agent_id,
            actor::Command::Chat {
                chat: Box::new(chat),
                marker,
                reply,
            },
        )?;
        drop(guard);
        Ok(PendingChat {
            agent_id,
            conversation: handle.conversation,
            events,
            reply: reply_rx,
        })
    }

    /// Checks a chat's options against the conversation's agent (by name): `options.agent`
    /// must be that agent, the model and permission mode must be ones it offers (for an ACP
    /// agent, once that is known), and a mode that runs tools without asking, or an
    /// `allowed_tools` pattern that grants a whole tool, needs `agent.allow_bypass_permissions`.
    /// Images to an agent known not to take them, and launch options an agent does not take,
    /// are `unsupported`.
    fn check_chat_options(&self, conversation_agent: &str, chat: &Chat) -> Result<(), FrameError> {
        let invalid = |message: String| {
            FrameError::new(ErrorCode::InvalidOptions, message)
                .for_agent(Some(&chat.agent_id))
                .with_client_msg_id(chat.client_msg_id.clone())
        };
        if let Some(agent) = &chat.options.agent
            && agent != conversation_agent
        {
            return Err(invalid(format!(
                "this conversation's agent is `{conversation_agent}`; it can't change to `{agent}`"
            )));
        }
        let Some(backend) = self.shared.agents.get(conversation_agent) else {
            return Ok(());
        };
        if !chat.content.images().is_empty() && !backend.supports().images {
            return Err(FrameError::new(
                ErrorCode::Unsupported,
                format!(
                    "this conversation's agent `{conversation_agent}` does not take images; \
                     send the message without them"
                ),
            )
            .for_agent(Some(&chat.agent_id))
            .with_client_msg_id(chat.client_msg_id.clone()));
        }
        let takes = backend.supports().launch_options;
        if let Some(field) =
            (chat.options.launch_options().into_iter()).find(|o| !takes.contains(o))
        {
            return Err(FrameError::new(
                ErrorCode::Unsupported,
                format!(
                    "this conversation's agent `{conversation_agent}` does not take \
                     `options.{field}` (its launch_options: [{}]); send the chat without it",
                    takes
                        .iter()
                        .map(|o| o.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
            .for_agent(Some(&chat.agent_id))
            .with_client_msg_id(chat.client_msg_id.clone()));
        }
        let unattended_allowed = self.shared.config.agent.allow_bypass_permissions;
        if let Some(mode) = &chat.options.permission_mode
            && backend.unattended_mode(mode)
            && !unattended_allowed
        {
            return Err(invalid(format!(
                "`options.permission_mode` `{mode}` lets the agent run tools without asking; \
                 this server does not allow it (agent.allow_bypass_permissions)"
            )));
        }
        if !unattended_allowed
            && let Some(pattern) = (chat.options.allowed_tools.iter().flatten())
                .find(|p| protocol::grants_whole_tool(p))
        {
            return Err(invalid(format!(
                "`options.allowed_tools` `{pattern}` lets the agent use a whole tool without \
                 asking; this server allows only exact arguments, a literal command prefix \
                 that is not a shell or interpreter, or files below the working directory \
                 that are not hidden, such as `Bash(git log:*)` or `Edit(src/**)` \
                 (agent.allow_bypass_permissions)"
            )));
        }
        backend
            .check_options(
                chat.options.model.as_deref(),
                chat.options.permission_mode.as_deref(),
            )
            .map_err(invalid)
    }

    /// Checks a chat's options as [`Self::chat`] would before creating or starting anything,
    /// against the conversation's agent, or for a new conversation (always when `new`) the
    /// agent it would get.
    ///
    /// # Errors
    /// `invalid_options`, `store_unavailable`.
    pub(crate) async fn check_options(
        &self,
        principal: &str,
        chat: &Chat,
        new: bool,
    ) -> Result<(), FrameError> {
        let existing = if new {
            None
        } else {
            self.shared
                .store
                .find_session(principal, &chat.agent_id)
                .await
                .map_err(|e| store_error(e, &chat.agent_id))?
        };
        let agent = match existing {
            Some(record) => record.backend,
            None => self.pick_agent(chat)?,
        };
        self.check_chat_options(&agent, chat)
    }

    /// The agent a new conversation gets: the chat's `options.agent`, else the default.
    fn pick_agent(&self, chat: &Chat) -> Result<String, FrameError> {
        let agents = &self.shared.agents;
        let name = chat
            .options
            .agent
            .clone()
            .unwrap_or_else(|| agents.default_name().to_owned());
        if agents.get(&name).is_none() {
            let known: Vec<String> = agents.list().into_iter().map(|a| a.name).collect();
            return Err(FrameError::new(
                ErrorCode::InvalidOptions,
                format!(
                    "no agent named `{name}` on this server (agents: {})",
                    known.join(", ")
                ),
            )
            .for_agent(Some(&chat.agent_id))
            .with_client_msg_id(chat.client_msg_id.clone()));
        }
        Ok(name)
    }

    /// Refuses an operation the conversation's agent can't do with `unsupported`.
    fn require(
        &self,
        agent: &str,
        agent_id: &str,
        what: &str,
        can: impl Fn(&crate::agent::Supports) -> bool,
    ) -> Result<(), FrameError> {
        let supported = self
            .shared
            .agents
            .get(agent)
            .is_some_and(|b| can(&b.supports()));
        if supported {
            return Ok(());
        }
        Err(FrameError::new(
            ErrorCode::Unsupported,
            format!("this conversation's agent `{agent}` can't {what}"),
        )
        .for_agent(Some(agent_id)))
    }

    /// Hands a chat to node `node`, which runs its conversation, without waiting for its
    /// answer: the chats this node forwards for one conversation reach the owner in the order
    /// they came, and the socket goes on reading meanwhile.
    async fn forward_chat(
        &self,
        principal: &str,
        chat: Chat,
        marker: Option<cluster::Marker>,
        slot: &Arc<Slot>,
        node: String,
        record: &SessionRecord,
    ) -> PendingChat {
        let conversation = slot
            .conversation
            .get_or_init(|| Conversation::from_record(record))
            .clone();
        self.relay(slot).await;
        let events = slot.events.subscribe();
        let order = slot.forwarding.clone().lock_owned().await;
        let (reply, reply_rx) = oneshot::channel();
        let agent_id = chat.agent_id.clone();
        let (manager, principal, row) = (self.clone(), principal.to_owned(), conversation.row);
        tokio::spawn(async move {
            let _order = order;
            let answer = manager
                .forward_until_answered(&principal, chat, marker, node, row)
                .await;
            let _ = reply.send(answer);
        });
        PendingChat {
            agent_id,
            conversation,
            events,
            reply: reply_rx,
        }
    }

    /// Sends a chat to node `node` and waits for its answer. When that node is gone, the
    /// conversation is this node's once its lease expires: the chat then runs here (or goes to
    /// whichever node took the conversation meanwhile), until `cluster.lease_secs` + 2 s.
    async fn forward_until_answered(
        &self,
        principal: &str,
        chat: Chat,
        marker: Option<cluster::Marker>,
        mut node: String,
        row: RowId,
    ) -> Result<(i64, usize), FrameError> {
        let bus = self.shared.bus.as_ref().expect("only in cluster mode");
        let deadline = tokio::time::Instant::now() + self.shared.config.cluster.takeover_wait();
        let with_id = |err: FrameError| FrameError {
            client_msg_id: chat.client_msg_id.clone(),
            ..err
        };
        let frame = ClientFrame::Chat(chat.clone());
        loop {
            if let Ok(answer) = bus.forward(&node, principal, &frame, marker.clone()).await {
                self.shared.metrics.forwarded_command();
                return match answer {
                    cluster::Answer::Chat {
                        seq,
                        queue_position,
                    } => Ok((seq, queue_position)),
                    other => Err(with_id(other.into_error(&chat.agent_id))),
                };
            }
            if tokio::time::Instant::now() >= deadline {
                let err = store_error(StoreError::OwnedElsewhere(node), &chat.agent_id);
                return Err(with_id(err));
            }
            tokio::time::sleep(TAKEOVER_POLL).await;
            let marked = marker.clone().map(|m| Box::new(m.into_message()));
            match self.submit_here(principal, chat.clone(), marked).await {
                Ok(pending) => {
                    return pending
                        .stored()
                        .await
                        .map(|accepted| (accepted.seq, accepted.queue_position));
                }
                Err(err) if err.code == ErrorCode::OwnedElsewhere => {
                    if let Ok(Some(owner)) = self.shared.store.lease_owner(row).await {
                        node = owner;
                    }
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// [`Self::submit_marked`] on this node only, as a boxed future: a forwarded chat whose
    /// node is gone retries through it, and the box ends the cycle of the two futures' types.
    fn submit_here<'a>(
        &'a self,
        principal: &'a str,
        chat: Chat,
        marker: Option<Box<NewMessage>>,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<PendingChat, FrameError>> + Send + 'a>> {
        Box::pin(self.submit_marked(principal, chat, marker, Route::ThisNode))
    }

    /// Relays the frames other nodes publish for the slot's conversation to its followers
    /// (cluster mode), once per slot; returns once the relay is in place.
    async fn relay(&self, slot: &Slot) {
        let (Some(bus), Some(conversation)) = (&self.shared.bus, slot.conversation.get()) else {
            return;
        };
        if slot.relaying.swap(true, Ordering::AcqRel) {
            return;
        }
        bus.relay(
            conversation.clone(),
            slot.events.clone(),
            self.shared.store.clone(),
            slot.relay_stop.clone(),
        )
        .await;
    }

    /// Sends `frame` to the followers of `slot` on every node.
    fn broadcast(&self, slot: &Slot, conversation: &Conversation, frame: Frame) {
        if let Some(bus) = &self.shared.bus {
            bus.publish(conversation.row, &frame);
        }
        let _ = slot.events.send(frame);
    }

    /// The node other than this one that runs conversation `row`, in cluster mode.
    async fn owner_elsewhere(
        &self,
        row: RowId,
        agent_id: &str,
    ) -> Result<Option<String>, FrameError> {
        if self.shared.bus.is_none() {
            return Ok(None);
        }
        self.shared
            .store
            .lease_owner(row)
            .await
            .map_err(|e| store_error(e, agent_id))
    }

    /// Sends a command to node `node`, which runs its conversation.
    ///
    /// # Errors
    /// `owned_elsewhere` when that node is gone (its lease has yet to expire).
    async fn forward(
        &self,
        node: &str,
        principal: &str,
        frame: &ClientFrame,
        agent_id: &str,
    ) -> Result<cluster::Answer, FrameError> {
        let bus = self.shared.bus.as_ref().expect("only in cluster mode");
        self.shared.metrics.forwarded_command();
        bus.forward(node, principal, frame, None)
            .await
            .map_err(|cluster::NoOwner| {
                store_error(StoreError::OwnedElsewhere(node.into()), agent_id)
            })
    }

    /// Starts the actor of a conversation, creating the conversation if it is new.
    async fn start(
        &self,
        principal: &str,
        chat: &Chat,
        slot: &Arc<Slot>,
    ) -> Result<SessionHandle, Refused> {
        let shared = &self.shared;
        let live = self.acquire_live(principal, &chat.agent_id)?;
        let store_err = |e| store_error(e, &chat.agent_id);
        let record = match shared
            .store
            .find_session(principal, &chat.agent_id)
            .await
            .map_err(store_err)?
        {
            Some(record) => {
                // Checked before the actor starts, so a refused chat wakes nothing up.
                self.check_chat_options(&record.backend, chat)?;
                let launch = record.launch_options().updated(&chat.options);
                self.check_dirs(&record, &launch.add_dirs)
                    .await
                    .map_err(|err| err.with_client_msg_id(chat.client_msg_id.clone()))?;
                record
            }
            None => {
                let agent = self.pick_agent(chat)?;
                self.check_chat_options(&agent, chat)?;
                let backend = shared.agents.get(&agent).expect("checked by pick_agent");
                let launch = LaunchOptions::default().updated(&chat.options);
                // The pre-warmed agent runs in its own workspace with no launch options.
                let warm = chat.options.cwd.is_none() && launch.is_empty();
                let session_id = warm
                    .then(|| backend.take_prewarmed())
                    .flatten()
                    .unwrap_or_else(SessionId::new);
                let mut new = self.new_session(principal, &chat.agent_id, session_id);
                new.backend = agent;
                if let Some(cwd) = &chat.options.cwd {
                    new.cwd.clone_from(cwd);
                }
                new.model = chat.options.model.clone();
                new.permission_mode = chat.options.permission_mode.clone();
                new.launch_options = launch;
                shared.store.create_session(new).await.map_err(store_err)?
            }
        };
        match shared.store.take_lease(record.row).await {
            Ok(()) => {
                let handle = self.spawn_actor(record, slot, live);
                self.relay(slot).await;
                Ok(handle)
            }
            Err(StoreError::OwnedElsewhere(node)) => Err(Refused::Elsewhere {
                node,
                record: Box::new(record),
            }),
            Err(err) => Err(store_err(err).into()),
        }
    }

    /// Replaces the paths a chat names (`options.cwd`, `options.add_dirs`) by their canonical
    /// form, each checked by [`crate::projects::resolve_dir`] against the roots `principal`
    /// may use; anything else is `invalid_options`, before anything is created.
    ///
    /// # Errors
    /// `invalid_options`, naming the first path refused.
    pub async fn resolve_paths(&self, principal: &str, mut chat: Chat) -> Result<Chat, FrameError> {
        let roots = &self.shared.config.projects.roots;
        let refuse = |field: &str, why: String, chat: &Chat| FrameError {
            client_msg_id: chat.client_msg_id.clone(),
            ..FrameError::new(
                ErrorCode::InvalidOptions,
                format!("`options.{field}`: {why}"),
            )
            .for_agent(Some(&chat.agent_id))
        };
        if let Some(raw) = chat.options.cwd.clone() {
            match crate::projects::resolve_dir(roots, principal, &raw).await {
                Ok(dir) => chat.options.cwd = Some(dir.to_string_lossy().into_owned()),
                Err(why) => return Err(refuse("cwd", why, &chat)),
            }
        }
        if let Some(dirs) = chat.options.add_dirs.clone() {
            let mut resolved = Vec::with_capacity(dirs.len());
            for raw in dirs {
                match crate::projects::resolve_dir(roots, principal, &raw).await {
                    Ok(dir) => resolved.push(dir.to_string_lossy().into_owned()),
                    Err(why) => return Err(refuse("add_dirs", why, &chat)),
                }
            }
            resolved.dedup();
            chat.options.add_dirs = Some(resolved);
        }
        Ok(chat)
    }

    /// Takes a place among the live conversations, or fails with `limit_exceeded`.
    fn acquire_live(&self, principal: &str, agent_id: &str) -> Result<QuotaPermit, FrameError> {
        if self.shared.closing.load(Ordering::Acquire) {
            return Err(FrameError::new(
                ErrorCode::BackendUnavailable,
                "the server is shutting down",
            )
            .for_agent(Some(agent_id)));
        }
        self.shared.live.try_acquire(principal).map_err(|exceeded| {
            let message = match exceeded {
                QuotaExceeded::Principal(max) => format!(
                    "at most {max} live conversations per principal; wait until one goes idle"
                ),
                QuotaExceeded::Total(max) => {
                    format!("the server runs at most {max} live conversations; try again later")
                }
            };
            FrameError::new(ErrorCode::LimitExceeded, message).for_agent(Some(agent_id))
        })
    }

    /// Starts the actor of a stored conversation, holding `live` while it runs.
    fn spawn_actor(&self, record: SessionRecord, slot: &Slot, live: QuotaPermit) -> SessionHandle {
        let conversation = slot
            .conversation
            .get_or_init(|| Conversation::from_record(&record))
            .clone();
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        actor::spawn(actor::ActorInit {
            shared: self.shared.clone(),
            conversation: conversation.clone(),
            record,
            slot_state: slot.state.clone(),
            events: slot.events.clone(),
            busy: slot.busy.clone(),
            commands: rx,
            live,
        });
        SessionHandle { tx, conversation }
    }

    /// Drops the stored messages of a conversation after `to_seq` (the `seq` of a `result`)
    /// and makes its agent forget them. Returns the stored `rewound` status, which every
    /// subscriber also gets. A dormant conversation is rewound in the store alone (its agent
    /// starts as the store decided at its next turn), so it takes no place among the live ones.
    ///
    /// # Errors
    /// `unknown_agent`, `invalid_seq` (not a `result`'s seq), `busy` (a turn is running or
    /// queued) or `store_unavailable`.
    pub async fn rewind(
        &self,
        principal: &str,
        agent_id: &AgentId,
        to_seq: i64,
    ) -> Result<Frame, FrameError> {
        self.rewind_routed(principal, agent_id, to_seq, Route::AnyNode)
            .await
    }

    pub(super) async fn rewind_routed(
        &self,
        principal: &str,
        agent_id: &AgentId,
        to_seq: i64,
        route: Route,
    ) -> Result<Frame, FrameError> {
        let (slot, guard) = self.existing_slot(principal, agent_id).await?;
        let agent = &slot.conversation.get().expect("set by existing_slot").agent;
        self.require(agent, agent_id, "rewind", |s| s.rewind)?;
        match &*guard {
            SlotState::Live(handle) if !handle.tx.is_closed() => {
                let (reply, rx) = oneshot::channel();
                send_command(handle, agent_id, actor::Command::Rewind { to_seq, reply })?;
                drop(guard);
                rx.await.map_err(|_| stopped(agent_id))?
            }
            _ => {
                // The held slot keeps a chat on this node from starting the conversation
                // meanwhile, and the lease one on another node.
                let conversation = slot.conversation.get().expect("set by existing_slot");
                let store = &self.shared.store;
                match store.take_lease(conversation.row).await {
                    Ok(()) => {}
                    Err(StoreError::OwnedElsewhere(node))
                        if route == Route::AnyNode && self.shared.bus.is_some() =>
                    {
                        drop(guard);
                        let frame = ClientFrame::Rewind {
                            agent_id: agent_id.clone(),
                            to_seq,
                        };
                        return match self.forward(&node, principal, &frame, agent_id).await? {
                            cluster::Answer::Rewound {
                                seq,
                                message_type,
                                text,
                            } => Ok(Frame::relayed(seq, &message_type, text)),
                            other => Err(other.into_error(agent_id)),
                        };
                    }
                    Err(err) => return Err(store_error(err, agent_id)),
                }
                let rewound = actor::rewind_store(&self.shared, conversation, to_seq).await;
                store.release_lease(conversation.row).await;
                let (frame, _) = rewound?;
                self.broadcast(&slot, conversation, frame.clone());
                Ok(frame)
            }
        }
    }

    /// Creates conversation `new_agent_id` from `agent_id`'s stored history up to `at_seq`
    /// (a `result`'s `seq`; the latest by default). The copied messages keep their `seq`s;
    /// the fork's agent forks the original's session at that turn, so the two diverge from
    /// there and never see each other's later messages.
    ///
    /// # Errors
    /// `unknown_agent`, `invalid_seq`, `agent_exists` or `store_unavailable`.
    pub async fn fork(
        &self,
        principal: &str,
        agent_id: &AgentId,
        new_agent_id: &AgentId,
        at_seq: Option<i64>,
    ) -> Result<SessionRecord, FrameError> {
        let store = &self.shared.store;
        let source = self.get(principal, agent_id).await?;
        self.require(&source.backend, agent_id, "fork", |s| s.fork)?;
        self.check_dirs(&source, &source.launch_options().add_dirs)
            .await?;
        let mut new = self.new_session(principal, new_agent_id, SessionId::new());
        new.backend = source.backend.clone();
        new.model = source.model.clone();
        new.permission_mode = source.permission_mode.clone();
        new.launch_options = source.launch_options();
        // A project conversation's fork works in the same project (the agent's resume is
        // scoped by it); one in its own workspace gets a workspace of its own.
        if !self.is_own_workspace(&source.session_id, &source.cwd) {
            new.cwd.clone_from(&source.cwd);
        }
        // Holding the new key's slot keeps a concurrent chat from creating it meanwhile.
        let key = Self::key(principal, new_agent_id);
        let (slot, guard) = self.lock_slot(&key).await;
        let forked = store
            .fork(source.row, at_seq, new)
            .await
            .map_err(|e| match e {
                // The error is about the frame's own conversation; the message names the
                // taken one.
                StoreError::AgentExists => FrameError::new(
                    ErrorCode::AgentExists,
                    format!("a conversation with agent_id `{new_agent_id}` already exists"),
                )
                .for_agent(Some(agent_id)),
                e => store_error(e, agent_id),
            });
        self.release_if_unused(&key, &slot, &guard);
        forked
    }

    /// Deletes a conversation: a running turn is abandoned and its agent stopped, every stored
    /// message is removed, and subscribers get a `status` `deleted` before their subscription
    /// ends. The `agent_id` is free again afterwards.
    ///
    /// # Errors
    /// `unknown_agent` or `store_unavailable`.
    pub async fn delete(&self, principal: &str, agent_id: &AgentId) -> Result<(), FrameError> {
        let (slot, mut guard) = self.existing_slot(principal, agent_id).await?;
        let conversation = slot
            .conversation
            .get()
            .expect("set by existing_slot")
            .clone();
        let cwd = self.get(principal, agent_id).await?.cwd;
        let live = match &*guard {
            SlotState::Live(handle) => !handle.tx.is_closed(),
            SlotState::Dormant => false,
        };
        if !live {
            // Not while another node runs it.
            self.shared
                .store
                .take_lease(conversation.row)
                .await
                .map_err(|e| store_error(e, agent_id))?;
        }
        if let SlotState::Live(handle) = std::mem::replace(&mut *guard, SlotState::Dormant) {
            let (reply, rx) = oneshot::channel();
            if handle
                .tx
                .send(actor::Command::Abandon { reply })
                .await
                .is_ok()
            {
                let _ = rx.await;
            }
        }
        let deleted = self.shared.store.delete_session(conversation.row).await;
        self.shared.store.release_lease(conversation.row).await;
        deleted.map_err(|e| store_error(e, agent_id))?;
        // The agent has stopped; the slot is still held, so none starts in it meanwhile.
        self.remove_workspace(&conversation.session_id, &cwd).await;
        let _ = slot.events.send(protocol::status_frame(
            conversation.tag(),
            "deleted",
            "the conversation was deleted",
        ));
        self.remove_slot(&Self::key(principal, agent_id), &slot);
        drop(guard);
        Ok(())
    }

    /// Removes the workspace the server made for a deleted conversation,
    /// `<data-dir>/workspaces/<session_id>`: only when that is the conversation's working
    /// directory and a real directory there (a symbolic link is left alone, and nothing outside
    /// the workspaces is touched). A failure is logged; the conversation is gone either way.
    async fn remove_workspace(&self, session_id: &SessionId, cwd: &str) {
        let dir = self.shared.config.workspaces_dir().join(session_id);
        if !self.is_own_workspace(session_id, cwd) {
            tracing::debug!(
                %session_id,
                cwd,
                "the conversation worked in a project directory; left alone"
            );
            return;
        }
        match tokio::fs::symlink_metadata(&dir).await {
            Ok(meta) if meta.is_dir() => {
                if let Err(err) = tokio::fs::remove_dir_all(&dir).await {
                    tracing::warn!(dir = %dir.display(), error = %err, "cannot remove the workspace");
                }
            }
            Ok(_) => {
                tracing::warn!(dir = %dir.display(), "the workspace is not a directory; left alone");
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => {
                tracing::warn!(dir = %dir.display(), error = %err, "cannot inspect the workspace");
            }
        }
    }

    /// Whether `cwd` is the workspace the server made for conversation `session_id`.
    fn is_own_workspace(&self, session_id: &SessionId, cwd: &str) -> bool {
        own_workspace(&self.shared.config, session_id, cwd)
    }

    /// [`check_stored_dirs`] for a stored conversation whose agent would start with
    /// `add_dirs`, as a typed error: `forbidden`.
    async fn check_dirs(
        &self,
        record: &SessionRecord,
        add_dirs: &[String],
    ) -> Result<(), FrameError> {
        check_stored_dirs(
            &self.shared.config,
            &record.principal,
            &record.session_id,
            &record.cwd,
            add_dirs,
        )
        .await
        .map_err(|why| FrameError::new(ErrorCode::Forbidden, why).for_agent(Some(&record.agent_id)))
    }

    /// Finds the slot of a conversation that exists, without starting anything.
    async fn existing_slot(
        &self,
        principal: &str,
        agent_id: &AgentId,
    ) -> Result<(Arc<Slot>, OwnedMutexGuard<SlotState>), FrameError> {
        let key = Self::key(principal, agent_id);
        if !self.slots.contains_key(&key) {
            self.get(principal, agent_id).await?;
        }
        let (slot, guard) = self.lock_slot(&key).await;
        if slot.conversation.get().is_none() {
            let record = self.get(principal, agent_id).await?;
            let _ = slot.conversation.set(Conversation::from_record(&record));
        }
        self.relay(&slot).await;
        Ok((slot, guard))
    }

    /// Follows a conversation's live frames. Never starts an agent.
    ///
    /// # Errors
    /// `unknown_agent` when there is no such conversation.
    pub async fn subscribe(
        &self,
        principal: &str,
        agent_id: &AgentId,
    ) -> Result<Subscription, FrameError> {
        let (slot, _guard) = self.existing_slot(principal, agent_id).await?;
        Ok(Subscription {
            conversation: slot
                .conversation
                .get()
                .expect("set by existing_slot")
                .clone(),
            events: slot.events.subscribe(),
        })
    }

    /// Starts a conversation's agent in the background unless it is running, so that its next
    /// turn skips the start-up: a hint, refused (not failed) when the principal or the server
    /// is at its live limit. It never stops another conversation's turn.
    ///
    /// # Errors
    /// `unknown_agent` when there is no such conversation, `store_unavailable`.
    pub async fn warm(&self, principal: &str, agent_id: &AgentId) -> Result<Warm, FrameError> {
        let key = Self::key(principal, agent_id);
        let (slot, mut guard) = self.existing_slot(principal, agent_id).await?;
        let handle = match &*guard {
            SlotState::Live(h) if !h.tx.is_closed() => h.clone(),
            _ => {
                let live = match self.acquire_live(principal, agent_id) {
                    Ok(live) => live,
                    Err(err) => {
                        self.release_if_unused(&key, &slot, &guard);
                        return Ok(Warm::Refused(err.message));
                    }
                };
                let found = match self.shared.store.find_session(principal, agent_id).await {
                    Ok(Some(record)) => self
                        .shared
                        .store
                        .take_lease(record.row)
                        .await
                        .map(|()| Some(record)),
                    other => other,
                };
                let record = match found {
                    Ok(Some(record)) => record,
                    Err(StoreError::OwnedElsewhere(node)) => {
                        self.release_if_unused(&key, &slot, &guard);
                        return Ok(Warm::Refused(format!(
                            "the conversation is live on node `{node}`"
                        )));
                    }
                    Ok(None) => {
                        self.release_if_unused(&key, &slot, &guard);
                        return Err(unknown_agent(agent_id));
                    }
                    Err(err) => {
                        self.release_if_unused(&key, &slot, &guard);
                        return Err(store_error(err, agent_id));
                    }
                };
                if let Err(err) = self
                    .check_dirs(&record, &record.launch_options().add_dirs)
                    .await
                {
                    self.shared.store.release_lease(record.row).await;
                    self.release_if_unused(&key, &slot, &guard);
                    return Ok(Warm::Refused(err.message));
                }
                let handle = self.spawn_actor(record, &slot, live);
                *guard = SlotState::Live(handle.clone());
                handle
            }
        };
        // A full command queue means the conversation is busy anyway: nothing to warm.
        let _ = handle.tx.try_send(actor::Command::Warm);
        Ok(Warm::Started)
    }

    /// Stops the running turn of a conversation, if any.
    ///
    /// # Errors
    /// `unknown_agent` when there is no such conversation.
    pub async fn interrupt(
        &self,
        principal: &str,
        agent_id: &AgentId,
    ) -> Result<Interrupted, FrameError> {
        self.interrupt_routed(principal, agent_id, Route::AnyNode)
            .await
    }

    pub(super) async fn interrupt_routed(
        &self,
        principal: &str,
        agent_id: &AgentId,
        route: Route,
    ) -> Result<Interrupted, FrameError> {
        let (slot, guard) = self.existing_slot(principal, agent_id).await?;
        let conversation = slot
            .conversation
            .get()
            .expect("set by existing_slot")
            .clone();
        let SlotState::Live(handle) = &*guard else {
            drop(guard);
            let mut was_running = false;
            if route == Route::AnyNode
                && let Some(node) = self.owner_elsewhere(conversation.row, agent_id).await?
            {
                let frame = ClientFrame::Interrupt {
                    agent_id: agent_id.clone(),
                };
                was_running = match self.forward(&node, principal, &frame, agent_id).await? {
                    cluster::Answer::Interrupt { was_running } => was_running,
                    other => return Err(other.into_error(agent_id)),
                };
            }
            return Ok(Interrupted {
                conversation,
                was_running,
            });
        };
        let (reply, rx) = oneshot::channel();
        send_command(handle, agent_id, actor::Command::Interrupt { reply })?;
        drop(guard);
        Ok(Interrupted {
            conversation,
            was_running: rx.await.unwrap_or(false),
        })
    }

    /// Answers a pending tool permission request of a conversation.
    ///
    /// # Errors
    /// `unknown_agent`, or `unknown_request` when no such request is pending.
    pub async fn answer_permission(
        &self,
        principal: &str,
        agent_id: &AgentId,
        request_id: String,
        decision: crate::protocol::PermissionDecision,
    ) -> Result<(), FrameError> {
        self.answer_permission_routed(principal, agent_id, request_id, decision, Route::AnyNode)
            .await
    }

    pub(super) async fn answer_permission_routed(
        &self,
        principal: &str,
        agent_id: &AgentId,
        request_id: String,
        decision: crate::protocol::PermissionDecision,
        route: Route,
    ) -> Result<(), FrameError> {
        let no_request = || {
            FrameError::new(
                ErrorCode::UnknownRequest,
                "no pending permission request with that id",
            )
            .for_agent(Some(agent_id))
        };
        let (slot, guard) = self.existing_slot(principal, agent_id).await?;
        let SlotState::Live(handle) = &*guard else {
            drop(guard);
            let row = slot.conversation.get().expect("set by existing_slot").row;
            if route == Route::AnyNode
                && let Some(node) = self.owner_elsewhere(row, agent_id).await?
            {
                let frame = ClientFrame::PermissionResponse {
                    agent_id: agent_id.clone(),
                    request_id,
                    decision,
                };
                return match self.forward(&node, principal, &frame, agent_id).await? {
                    cluster::Answer::Done => Ok(()),
                    other => Err(other.into_error(agent_id)),
                };
            }
            return Err(no_request());
        };
        let (reply, rx) = oneshot::channel();
        let command = actor::Command::Permission {
            request_id,
            decision,
            reply,
        };
        send_command(handle, agent_id, command)?;
        drop(guard);
        rx.await.unwrap_or_else(|_| Err(no_request()))
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

    /// What a conversation is doing now: `busy` (a turn running or queued), `idle` (its actor
    /// is live, nothing to do) or `dormant` (only in the store).
    pub fn activity(&self, principal: &str, agent_id: &str) -> Activity {
        let Some(slot) = self
            .slots
            .get(&Self::key(principal, agent_id))
            .map(|s| s.clone())
        else {
            return Activity::Dormant;
        };
        if slot.busy.load(Ordering::Acquire) {
            return Activity::Busy;
        }
        // A held slot is being started, commanded or evicted: report what it most likely is.
        let live = match slot.state.try_lock() {
            Ok(state) => matches!(&*state, SlotState::Live(h) if !h.tx.is_closed()),
            Err(_) => true,
        };
        if live {
            Activity::Idle
        } else {
            Activity::Dormant
        }
    }

    /// Ends every live conversation: running and queued turns end with a `server_shutdown`
    /// result, then agents are stopped. No conversation starts afterwards.
    pub async fn shutdown(&self) {
        self.shared.closing.store(true, Ordering::Release);
        let slots: Vec<Arc<Slot>> = self.slots.iter().map(|e| e.value().clone()).collect();
        let stops = slots.into_iter().map(|slot| async move {
            let mut guard = slot.state.clone().lock_owned().await;
            if let SlotState::Live(handle) = std::mem::replace(&mut *guard, SlotState::Dormant) {
                let (reply, rx) = oneshot::channel();
                if handle.tx.send(actor::Command::Stop { reply }).await.is_ok() {
                    let _ = rx.await;
                }
            }
        });
        futures_util::future::join_all(stops).await;
    }
}

/// Whether `cwd` is the workspace the server made for conversation `session_id`
/// (`<data-dir>/workspaces/<session_id>`), rather than a project directory. A [`SessionId`] is
/// a UUID, so that is always one directory right under the workspaces.
fn own_workspace(config: &Config, session_id: &SessionId, cwd: &str) -> bool {
    std::path::Path::new(cwd) == config.workspaces_dir().join(session_id)
}

/// Checks, before an agent starts in them, that a stored conversation's directories are still
/// ones `principal` may use: its working directory (unless it is the conversation's own
/// workspace) and each of `add_dirs` must still resolve ([`crate::projects::resolve_dir`]) to
/// themselves, inside a root the principal may use now. A root removed from the settings or
/// limited to other principals since, or a directory replaced by a symbolic link (which would
/// start the agent wherever the link leads), fails with a message saying so.
pub(crate) async fn check_stored_dirs(
    config: &Config,
    principal: &str,
    session_id: &SessionId,
    cwd: &str,
    add_dirs: &[String],
) -> Result<(), String> {
    let project = (!own_workspace(config, session_id, cwd)).then_some(("working directory", cwd));
    let added = add_dirs.iter().map(|dir| ("added directory", dir.as_str()));
    for (what, dir) in project.into_iter().chain(added) {
        let resolved = crate::projects::resolve_dir(&config.projects.roots, principal, dir).await;
        if resolved.is_ok_and(|canonical| canonical == std::path::Path::new(dir)) {
            continue;
        }
        return Err(format!(
            "the conversation's {what} `{dir}` is no longer a directory inside a project root \
             you may use (the root was removed or limited to others, or the directory was \
             replaced by a symbolic link); nothing was started"
        ));
    }
    Ok(())
}

/// Queues a command for an actor without waiting for room.
fn send_command(
    handle: &SessionHandle,
    agent_id: &str,
    command: actor::Command,
) -> Result<(), FrameError> {
    handle.tx.try_send(command).map_err(|_| {
        FrameError::new(
            ErrorCode::LimitExceeded,
            "the conversation is overloaded; try again",
        )
        .for_agent(Some(agent_id))
    })
}

/// The answer to a command for a conversation that another node took over from this one.
pub(crate) fn moved(agent_id: &str) -> FrameError {
    FrameError::new(
        ErrorCode::OwnedElsewhere,
        format!("conversation `{agent_id}` was taken over by another node; send it again"),
    )
    .for_agent(Some(agent_id))
}

fn stopped(agent_id: &str) -> FrameError {
    FrameError::new(ErrorCode::BackendUnavailable, "the conversation stopped")
        .for_agent(Some(agent_id))
}

/// Whether a slot's conversation has no running actor.
fn is_dormant(state: &SlotState) -> bool {
    match state {
        SlotState::Dormant => true,
        SlotState::Live(h) => h.tx.is_closed(),
    }
}

/// Drops slots that have no live actor and no subscriber.
fn sweep(slots: &DashMap<Key, Arc<Slot>>, metrics: &Metrics) {
    let mut idle = Vec::new();
    for entry in slots.iter() {
        let slot = entry.value();
        if let Ok(state) = slot.state.try_lock()
            && is_dormant(&state)
            && slot.events.receiver_count() == 0
        {
            slot.removed.store(true, Ordering::Release);
            idle.push((entry.key().clone(), slot.clone()));
        }
    }
    for (key, slot) in idle {
        if slots
            .remove_if(&key, |_, s| Arc::ptr_eq(s, &slot))
            .is_some()
        {
            metrics.slots(-1);
        }
    }
}
