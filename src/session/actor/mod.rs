//! The session actor: one task per live conversation, owning its turn queue and its agent.
//!
//! Turns run one at a time, in the order they were acked. Every message the agent reports is
//! stored first and published after the commit, so a frame with a `seq` is never seen before
//! it is durable. Events that arrive together are stored in one append.

mod figures;
mod files;
mod handover;
mod output;
mod permissions;
mod process;
mod publish;
mod ratelimit;
mod spend;
mod turns;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::Instrument;

use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::time::{Instant, sleep_until};

use super::slots::SlotState;
use super::{Conversation, Shared};
use crate::agent::{AgentConn, AgentEvent};
use crate::limits::QuotaPermit;
use crate::protocol::{Chat, Frame, LaunchOptions, PermissionDecision, Principal};
use crate::session::SessionError;
use crate::store::{NewMessage, NextLaunch, SessionRecord};

pub use ratelimit::rfc3339;
pub(super) use ratelimit::{
    CANCELLED, GAVE_UP, WAIT_CANCELLED, cancel_stored_wait, continued_status, refused_detail,
    wait_status,
};
use turns::Turns;
pub(super) use turns::rewind_store;

/// The `user_seq` of an agent started with no turn for it: every stored prompt is before it.
const NO_TURN: i64 = i64::MAX;

/// Most agent events stored in one append.
const EVENT_BATCH: usize = 128;

/// What the server puts in a live actor's input queue. Not the client's
/// [`Command`](crate::session::Command): each carries the channel its reply comes back on,
/// some only the server sends (stopping, abandoning, warming, a take-over), and a fork never
/// reaches an actor (it runs from the store); a client's command that a live actor must run
/// arrives as one of these.
pub(crate) enum Input {
    /// Store and queue a user turn; the reply is `(seq, queue_position)`.
    Chat {
        chat: Box<Chat>,
        /// A status stored (and published) just before the user message, in the same write:
        /// the `scheduled_run` mark of a schedule's run.
        marker: Option<Box<NewMessage>>,
        reply: oneshot::Sender<Result<(i64, usize), SessionError>>,
    },
    /// Stop the running turn for `sender`, or with none running cancel the wait for a rate
    /// limit; the reply says whether a turn was running, and whether a wait was cancelled.
    Interrupt {
        sender: Principal,
        reply: oneshot::Sender<(bool, bool)>,
    },
    /// Answer a pending tool permission request, as `sender`.
    Permission {
        request_id: String,
        decision: PermissionDecision,
        sender: Principal,
        reply: oneshot::Sender<Result<(), SessionError>>,
    },
    /// End the running turn and stop (server shutdown).
    Stop { reply: oneshot::Sender<()> },
    /// Drop the stored messages after a `result` and make the agent forget them; the reply is
    /// the stored `rewound` status frame.
    Rewind {
        to_seq: i64,
        sender: Principal,
        reply: oneshot::Sender<Result<Frame, SessionError>>,
    },
    /// Stop the agent at once, whatever it is doing, and end (the conversation is deleted).
    Abandon { reply: oneshot::Sender<()> },
    /// Someone opened the conversation: start its agent in the background if none is running.
    Warm,
    /// Another node took the conversation over (its lease was lost): stop and end.
    TakenOver,
}

pub(crate) struct ActorInit {
    pub shared: Arc<Shared>,
    pub conversation: Arc<Conversation>,
    pub record: SessionRecord,
    pub slot_state: Arc<Mutex<SlotState>>,
    pub events: crate::session::events::Sender,
    /// Whether a turn is running or queued, for those who ask without a command.
    pub busy: Arc<AtomicBool>,
    pub inputs: mpsc::Receiver<Input>,
    /// This conversation's place among the live ones; given back when it stops.
    pub live: QuotaPermit,
}

struct Actor {
    shared: Arc<Shared>,
    conversation: Arc<Conversation>,
    slot_state: Arc<Mutex<SlotState>>,
    events: crate::session::events::Sender,
    busy: Arc<AtomicBool>,
    inputs: mpsc::Receiver<Input>,
    cwd: std::path::PathBuf,
    /// What starts this conversation's agent; none when its agent is no longer configured.
    backend: Option<Arc<dyn crate::agent::Backend>>,
    sdk_session_id: Option<String>,
    model: Option<String>,
    permission_mode: Option<String>,
    /// Options the agent takes only at start.
    launch_options: LaunchOptions,
    /// How the next agent launch starts, when a rewind or fork decided it; cleared once the
    /// agent reports its new id.
    next_launch: Option<NextLaunch>,
    turns: Turns,
    /// The `seq` last stored: what the next turn's checkpoint of the worktree is numbered by.
    last_seq: i64,
    /// The tree of the worktree's files when the running or last turn started.
    files_at_turn_start: Option<String>,
    /// Set when the next batch ends the last turn: the conversation is idle once it is stored.
    idle_after_batch: bool,
    agent: Option<AgentConn>,
    /// Cumulative cost the current agent process reported; results carry running totals.
    process_cost: f64,
    /// The credentials and allowance the current agent started on.
    terms: Option<crate::session::spend::Terms>,
    idle_since: Instant,
    /// Set on shutdown: no further queued turn starts.
    stopping: bool,
    /// Whether the running (or last) turn is a schedule's run.
    scheduled_turn: bool,
    /// Tool permission requests awaiting an answer, with the time they are denied.
    pending_permissions: HashMap<String, Instant>,
    /// Held while live; dropped on eviction before the slot can start another actor.
    live: Option<QuotaPermit>,
    /// Its agent's unexpected exits, and when to start it again.
    respawns: process::Respawns,
    /// Set when the store refused a write because another node took the conversation over.
    taken_over: AtomicBool,
    /// The conversation's own `auto_continue`; None follows the server's default.
    auto_continue: Option<bool>,
    /// Rate-limited turns in a row it has waited out (as stored).
    limit_tries: i64,
    /// The reset time a rate limit announced during the running turn.
    announced_reset: Option<i64>,
    /// Set when the running turn's result says a rate limit ended it.
    limit_hit: Option<ratelimit::Limited>,
}

pub(crate) fn spawn(init: ActorInit) {
    let ActorInit {
        shared,
        conversation,
        record,
        slot_state,
        events,
        busy,
        inputs,
        live,
    } = init;
    shared.metrics.live_sessions(1);
    let actor = Actor {
        cwd: record.cwd.clone().into(),
        backend: shared.agents.get(&record.backend).cloned(),
        sdk_session_id: record.sdk_session_id.clone(),
        model: record.model.clone(),
        permission_mode: record.permission_mode.clone(),
        launch_options: record.launch_options(),
        next_launch: record.next_launch(),
        shared,
        conversation,
        slot_state,
        events,
        busy,
        inputs,
        turns: Turns::default(),
        last_seq: record.last_seq,
        files_at_turn_start: None,
        idle_after_batch: false,
        agent: None,
        process_cost: 0.0,
        terms: None,
        idle_since: Instant::now(),
        stopping: false,
        scheduled_turn: false,
        pending_permissions: HashMap::new(),
        live: Some(live),
        respawns: process::Respawns::default(),
        taken_over: AtomicBool::new(false),
        auto_continue: record.auto_continue,
        limit_tries: record.limit_tries,
        announced_reset: None,
        limit_hit: None,
    };
    let busy = actor.busy.clone();
    let span = tracing::info_span!(
        parent: None,
        "conversation",
        agent_id = %actor.conversation.agent_id,
        session_id = %actor.conversation.session_id,
    );
    tokio::spawn(
        async move {
            actor.run().await;
            busy.store(false, Ordering::Release);
        }
        .instrument(span),
    );
}

/// The next event of the agent, or never when there is none.
async fn next_event(agent: &mut Option<AgentConn>) -> Option<AgentEvent> {
    match agent {
        Some(conn) => conn.events.recv().await,
        None => std::future::pending().await,
    }
}

impl Actor {
    async fn run(mut self) {
        let evict_after = self.shared.config.idle_evict();
        loop {
            let idle = !self.turns.is_busy();
            let deadline = self.turns.interrupt_deadline();
            let permission_deadline = self.pending_permissions.values().min().copied();
            tokio::select! {
                input = self.inputs.recv() => match input {
                    Some(Input::Chat { chat, marker, reply }) => {
                        self.on_chat_or_continue(*chat, marker, reply).await
                    }
                    Some(Input::Interrupt { sender, reply }) => {
                        let was_running = self.interrupt(&sender);
                        let cancelled_wait = !was_running && self.cancel_wait().await;
                        let _ = reply.send((was_running, cancelled_wait));
                    }
                    Some(Input::Permission { request_id, decision, sender, reply }) => {
                        let _ = reply.send(self.answer_permission(request_id, decision, &sender).await);
                    }
                    Some(Input::Stop { reply }) => {
                        self.stop().await;
                        let _ = reply.send(());
                        return;
                    }
                    Some(Input::Rewind { to_seq, sender, reply }) => {
                        let _ = reply.send(self.rewind(to_seq, &sender).await);
                    }
                    Some(Input::Abandon { reply }) => {
                        self.abandon().await;
                        let _ = reply.send(());
                        return;
                    }
                    Some(Input::Warm) => self.warm().await,
                    Some(Input::TakenOver) => self.taken_over.store(true, Ordering::Release),
                    None => {
                        self.stop().await;
                        return;
                    }
                },
                event = next_event(&mut self.agent) => self.on_agent_events(event).await,
                _ = sleep_until(self.idle_since + evict_after), if idle => {
                    if self.try_evict().await {
                        return;
                    }
                }
                _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    self.kill_stuck_turn().await;
                }
                _ = sleep_until(permission_deadline.unwrap_or_else(Instant::now)), if permission_deadline.is_some() => {
                    self.expire_permissions().await;
                }
                _ = sleep_until(self.respawns.at.unwrap_or_else(Instant::now)), if self.respawns.at.is_some() => {
                    self.respawn().await;
                }
            }
            if self.taken_over.load(Ordering::Acquire) {
                self.hand_over().await;
                return;
            }
        }
    }
}
