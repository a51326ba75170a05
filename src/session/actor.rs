//! The session actor: one task per live conversation, owning its turn queue and its agent.
//!
//! Turns run one at a time, in the order they were acked. Every message the agent reports is
//! stored first and published after the commit, so a frame with a `seq` is never seen before
//! it is durable. Events that arrive together are stored in one append.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::Instrument;

use serde_json::Value;
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::time::{Instant, sleep_until};

use super::{Conversation, Shared, SlotState};
use crate::agent::{AgentConn, AgentEvent, AgentInput, AgentMessage, Launch, SpawnSpec};
use crate::limits::QuotaPermit;
use crate::protocol::{
    self, Activity, Chat, ChatOptions, ErrorCode, Frame, FrameError, LaunchOptions,
    PermissionDecision, error_result,
};
use crate::store::{NewMessage, NextLaunch, RunningTurn, SessionRecord, StoreError, Totals};

/// Writes `content` to a new file `path` only this user may read, making its directories
/// (private too) as needed; an existing file or link there is left alone.
async fn write_private(path: &std::path::Path, content: &[u8]) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt as _;
    if let Some(dir) = path.parent() {
        tokio::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .await?;
    }
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .await?;
    file.write_all(content).await?;
    file.sync_all().await
}

/// Reads the agent's transcript at `path`, at most `max_bytes` of it: a regular file with no
/// other hard link, never what a link there points to (the agent could have linked any file
/// the server may read).
async fn read_transcript(path: &std::path::Path, max_bytes: usize) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt as _;
    let too_large = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "the transcript is over claude.max_transcript_bytes ({max_bytes} bytes); the copy kept before stays"
            ),
        )
    };
    let (file, meta) = super::cli_sessions::open_regular_file(path)?;
    if meta.len() > max_bytes as u64 {
        return Err(too_large());
    }
    let mut content = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // It may have grown since.
    tokio::fs::File::from_std(file)
        .take(max_bytes as u64 + 1)
        .read_to_end(&mut content)
        .await?;
    if content.len() > max_bytes {
        return Err(too_large());
    }
    Ok(content)
}

/// The `user_seq` of an agent started with no turn for it: every stored prompt is before it.
const NO_TURN: i64 = i64::MAX;

/// Most agent events stored in one append.
const EVENT_BATCH: usize = 128;

/// What the manager asks of an actor.
pub(crate) enum Command {
    /// Store and queue a user turn; the reply is `(seq, queue_position)`.
    Chat {
        chat: Box<Chat>,
        /// A status stored (and published) just before the user message, in the same write:
        /// the `scheduled_run` mark of a schedule's run.
        marker: Option<Box<NewMessage>>,
        reply: oneshot::Sender<Result<(i64, usize), FrameError>>,
    },
    /// Stop the running turn; the reply says whether one was running.
    Interrupt { reply: oneshot::Sender<bool> },
    /// Answer a pending tool permission request.
    Permission {
        request_id: String,
        decision: PermissionDecision,
        reply: oneshot::Sender<Result<(), FrameError>>,
    },
    /// End the running turn and stop (server shutdown).
    Stop { reply: oneshot::Sender<()> },
    /// Drop the stored messages after a `result` and make the agent forget them; the reply is
    /// the stored `rewound` status frame.
    Rewind {
        to_seq: i64,
        reply: oneshot::Sender<Result<Frame, FrameError>>,
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
    pub events: super::events::Sender,
    /// Whether a turn is running or queued, for those who ask without a command.
    pub busy: Arc<AtomicBool>,
    pub commands: mpsc::Receiver<Command>,
    /// This conversation's place among the live ones; given back when it stops.
    pub live: QuotaPermit,
}

struct Turn {
    user_seq: i64,
    content: protocol::Content,
    /// Model and permission mode asked for with this turn; applied when it starts.
    options: ChatOptions,
}

struct Running {
    /// Set once an interrupt was sent: the agent is killed if the turn has not ended by then.
    interrupt_deadline: Option<Instant>,
    /// uuid of the latest assistant message of this turn (the rewind anchor).
    last_assistant_uuid: Option<String>,
    /// The turn, to hand to a new agent if the one it was sent to went away without reading
    /// it (see [`AgentEvent::Released`]).
    turn: Turn,
}

/// A frame to publish after the store has committed the batch it belongs to.
enum Out {
    Stored(NewMessage),
    Live(&'static str, String),
    Status(&'static str, String),
}

struct Actor {
    shared: Arc<Shared>,
    conversation: Arc<Conversation>,
    slot_state: Arc<Mutex<SlotState>>,
    events: super::events::Sender,
    busy: Arc<AtomicBool>,
    commands: mpsc::Receiver<Command>,
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
    queue: VecDeque<Turn>,
    running: Option<Running>,
    agent: Option<AgentConn>,
    /// Cumulative cost the current agent process reported; results carry running totals.
    process_cost: f64,
    idle_since: Instant,
    /// Set on shutdown: no further queued turn starts.
    stopping: bool,
    /// Tool permission requests awaiting an answer, with the time they are denied.
    pending_permissions: HashMap<String, Instant>,
    /// Held while live; dropped on eviction before the slot can start another actor.
    live: Option<QuotaPermit>,
    /// When the agent that exited unexpectedly is started again in the background.
    respawn_at: Option<Instant>,
    /// Unexpected exits within the respawn window, oldest first.
    crashes: VecDeque<Instant>,
    /// Set once restarting was given up (`respawn_failed` told); cleared by a turn that ends well.
    gave_up: bool,
    /// Set when the store refused a write because another node took the conversation over.
    taken_over: AtomicBool,
}

pub(crate) fn spawn(init: ActorInit) {
    let ActorInit {
        shared,
        conversation,
        record,
        slot_state,
        events,
        busy,
        commands,
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
        commands,
        queue: VecDeque::new(),
        running: None,
        agent: None,
        process_cost: 0.0,
        idle_since: Instant::now(),
        stopping: false,
        pending_permissions: HashMap::new(),
        live: Some(live),
        respawn_at: None,
        crashes: VecDeque::new(),
        gave_up: false,
        taken_over: AtomicBool::new(false),
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
            let idle = self.running.is_none() && self.queue.is_empty();
            let deadline = self.running.as_ref().and_then(|r| r.interrupt_deadline);
            let permission_deadline = self.pending_permissions.values().min().copied();
            tokio::select! {
                cmd = self.commands.recv() => match cmd {
                    Some(Command::Chat { chat, marker, reply }) => {
                        self.on_chat(*chat, marker, reply).await
                    }
                    Some(Command::Interrupt { reply }) => {
                        let _ = reply.send(self.interrupt());
                    }
                    Some(Command::Permission { request_id, decision, reply }) => {
                        let _ = reply.send(self.answer_permission(request_id, decision).await);
                    }
                    Some(Command::Stop { reply }) => {
                        self.stop().await;
                        let _ = reply.send(());
                        return;
                    }
                    Some(Command::Rewind { to_seq, reply }) => {
                        let _ = reply.send(self.rewind(to_seq).await);
                    }
                    Some(Command::Abandon { reply }) => {
                        self.abandon().await;
                        let _ = reply.send(());
                        return;
                    }
                    Some(Command::Warm) => self.warm().await,
                    Some(Command::TakenOver) => self.taken_over.store(true, Ordering::Release),
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
                _ = sleep_until(self.respawn_at.unwrap_or_else(Instant::now)), if self.respawn_at.is_some() => {
                    self.respawn().await;
                }
            }
            if self.taken_over.load(Ordering::Acquire) {
                self.hand_over().await;
                return;
            }
        }
    }

    fn publish(&self, frame: Frame) {
        if let Some(bus) = &self.shared.bus {
            bus.publish(self.conversation.row, &frame);
        }
        // No receiver is fine: nobody is watching this conversation right now.
        let _ = self.events.send(frame);
    }

    /// Tells the principal's watchers what happened; the frame is built only when someone
    /// watches. `payload` is the stored message's, for the details the activity carries.
    fn publish_activity(&self, activity: Activity, seq: i64, payload: &str) {
        let tag = self.conversation.tag();
        self.shared
            .activity
            .publish(&self.conversation.principal, || {
                let detail = match activity {
                    Activity::PermissionRequest | Activity::TurnEnded => {
                        serde_json::from_str::<Value>(payload).unwrap_or_default()
                    }
                    _ => Value::Null,
                };
                protocol::activity_frame(
                    tag,
                    activity,
                    seq,
                    detail["tool_name"].as_str(),
                    (activity == Activity::TurnEnded)
                        .then(|| detail["is_error"].as_bool() == Some(true)),
                )
            });
    }

    fn publish_status(&self, status: &str, detail: &str) {
        match status {
            "busy" => self.busy.store(true, Ordering::Release),
            "idle" => self.busy.store(false, Ordering::Release),
            _ => {}
        }
        self.publish(protocol::status_frame(
            self.conversation.tag(),
            status,
            detail,
        ));
    }

    fn store_failed(&self, err: &StoreError) {
        if matches!(err, StoreError::Fenced) {
            self.taken_over.store(true, Ordering::Release);
            return;
        }
        tracing::error!(agent_id = %self.conversation.agent_id, error = %err, "could not store agent output");
        self.shared
            .metrics
            .error(ErrorCode::StoreUnavailable.as_str());
        let err = FrameError::new(
            ErrorCode::StoreUnavailable,
            "the store is unavailable; agent output was not saved",
        )
        .for_agent(Some(&self.conversation.agent_id));
        self.publish(protocol::error_frame(&err));
    }

    async fn on_chat(
        &mut self,
        chat: Chat,
        marker: Option<Box<NewMessage>>,
        reply: oneshot::Sender<Result<(i64, usize), FrameError>>,
    ) {
        // The working directory is fixed: the agent's resume is scoped by it.
        if let Some(cwd) = &chat.options.cwd
            && std::path::Path::new(cwd) != self.cwd
        {
            let err = FrameError::new(
                ErrorCode::InvalidOptions,
                format!(
                    "`options.cwd`: the conversation works in `{}`; its working directory can't change (start a new conversation)",
                    self.cwd.display()
                ),
            )
            .for_agent(Some(&chat.agent_id));
            let _ = reply.send(Err(FrameError {
                client_msg_id: chat.client_msg_id,
                ..err
            }));
            return;
        }
        let busy = self.running.is_some() || !self.queue.is_empty();
        if busy && self.queue.len() >= self.shared.config.session.max_queued_turns {
            let err = FrameError::new(
                ErrorCode::LimitExceeded,
                format!("{} turns are already queued", self.queue.len()),
            )
            .for_agent(Some(&chat.agent_id));
            let _ = reply.send(Err(FrameError {
                client_msg_id: chat.client_msg_id,
                ..err
            }));
            return;
        }
        let payload = serde_json::json!({
            "type": "user",
            "message": { "role": "user", "content": chat.content },
        })
        .to_string();
        let mut message = NewMessage::new("user", payload.clone());
        message.prompt = true;
        // A turn that runs at once is recorded as running in the same write.
        message.running = (!busy).then_some(RunningTurn::Starts);
        // A marker's title (a schedule's name) wins over the prompt's.
        if marker.as_ref().is_none_or(|m| m.title.is_none()) {
            message.title =
                Some(protocol::truncate_chars(chat.content.title_text().trim(), 50).to_owned());
        }
        let created_at = message.created_at.clone();
        let mut messages = Vec::with_capacity(2);
        let marker_frame = marker
            .as_ref()
            .map(|m| (m.created_at.clone(), m.payload.clone()));
        messages.extend(marker.map(|m| *m));
        messages.push(message);
        let seq = match self
            .shared
            .store
            .append(self.conversation.row, messages)
            .await
        {
            Ok(first) => {
                if let Some((at, payload)) = &marker_frame {
                    self.publish(protocol::session_frame(
                        self.conversation.tag(),
                        "status",
                        Some(first),
                        at,
                        payload,
                        None,
                    ));
                }
                first + i64::from(marker_frame.is_some())
            }
            Err(err) => {
                if matches!(err, StoreError::Fenced) {
                    self.taken_over.store(true, Ordering::Release);
                }
                let mut e = super::store_error(err, &chat.agent_id);
                e.client_msg_id = chat.client_msg_id;
                let _ = reply.send(Err(e));
                return;
            }
        };
        let position = if busy {
            self.queue.len() + usize::from(self.running.is_some())
        } else {
            0
        };
        let _ = reply.send(Ok((seq, position)));
        self.publish(protocol::session_frame(
            self.conversation.tag(),
            "user",
            Some(seq),
            &created_at,
            &payload,
            None,
        ));
        self.queue.push_back(Turn {
            user_seq: seq,
            content: chat.content,
            options: chat.options,
        });
        if self.running.is_none() {
            self.start_next_turn().await;
        } else {
            self.shared.metrics.queued_turns(1);
            self.publish_status("queued", &format!("{position} turn(s) ahead"));
        }
    }

    fn interrupt(&mut self) -> bool {
        let Some(running) = self.running.as_mut() else {
            return false;
        };
        if running.interrupt_deadline.is_none() {
            if let Some(agent) = &self.agent {
                let _ = agent.input.try_send(AgentInput::Interrupt);
            }
            running.interrupt_deadline = Some(
                Instant::now()
                    + std::time::Duration::from_secs(
                        self.shared.config.session.interrupt_timeout_secs,
                    ),
            );
            self.publish_status("interrupted", "the running turn is being stopped");
        }
        true
    }

    /// Starts queued turns until one is running (a turn whose agent can't start is closed).
    async fn start_next_turn(&mut self) {
        while let Some(turn) = self.queue.pop_front() {
            self.apply_options(&turn.options).await;
            if self.agent.is_none()
                && let Err(detail) = self.spawn_agent(turn.user_seq).await
            {
                self.fail_turn(&turn, "backend_unavailable", &detail).await;
                continue;
            }
            let mut sent = self.send_prompt(&turn).await;
            if !sent && self.agent.is_none() {
                // The agent had stopped (a background start that gave up its place, or a
                // crash not yet reported): start one for this turn.
                sent =
                    self.spawn_agent(turn.user_seq).await.is_ok() && self.send_prompt(&turn).await;
            }
            if !sent {
                self.agent = None;
                self.fail_turn(
                    &turn,
                    "crashed",
                    "the agent stopped before the turn started",
                )
                .await;
                continue;
            }
            let user_seq = turn.user_seq;
            self.running = Some(Running {
                interrupt_deadline: None,
                last_assistant_uuid: None,
                turn,
            });
            self.publish_status("busy", "a turn is running");
            self.publish_activity(Activity::TurnStarted, user_seq, "");
            return;
        }
        self.idle_since = Instant::now();
    }

    /// Hands a turn's prompt to the live agent; false (and no agent) when it has stopped.
    async fn send_prompt(&mut self, turn: &Turn) -> bool {
        let Some(agent) = self.agent.as_ref() else {
            return false;
        };
        if agent
            .input
            .send(AgentInput::Prompt(turn.content.clone()))
            .await
            .is_ok()
        {
            return true;
        }
        self.agent = None;
        false
    }

    /// Runs the next turns under the options a turn asked for, and stores them. A live agent
    /// is told a new model or permission mode between turns; when an option it only takes at
    /// start changed, it is stopped, and the next one starts with them, resuming.
    async fn apply_options(&mut self, options: &ChatOptions) {
        let model = options.model.clone().or_else(|| self.model.clone());
        let permission_mode = options
            .permission_mode
            .clone()
            .or_else(|| self.permission_mode.clone());
        let launch = self.launch_options.updated(options);
        if model == self.model
            && permission_mode == self.permission_mode
            && launch == self.launch_options
        {
            return;
        }
        let relaunch = launch != self.launch_options;
        self.model = model.clone();
        self.permission_mode = permission_mode.clone();
        self.launch_options = launch;
        if let Err(err) = self
            .shared
            .store
            .set_options(
                self.conversation.row,
                model.as_deref(),
                permission_mode.as_deref(),
                &self.launch_options,
            )
            .await
        {
            self.store_failed(&err);
        }
        if relaunch {
            if let Some(agent) = self.agent.take() {
                self.publish_status(
                    "restarting",
                    "options the agent takes only at start changed; restarting it with resume",
                );
                agent.stop().await;
            }
            return;
        }
        if let Some(agent) = &self.agent
            && agent
                .input
                .send(AgentInput::SetOptions {
                    model,
                    permission_mode,
                })
                .await
                .is_err()
        {
            self.agent = None;
        }
    }

    /// How the next agent starts: as a rewind or fork decided, else resuming the id the agent
    /// reported, else new under our own id.
    fn launch(&self) -> Launch {
        let new_session_id = || uuid::Uuid::new_v4().to_string();
        match (&self.next_launch, &self.sdk_session_id) {
            (Some(NextLaunch::ForkAt { from, at }), _) => Launch::ResumeAt {
                sdk_session_id: from.clone(),
                at_message_uuid: at.clone(),
                new_session_id: new_session_id(),
            },
            (Some(NextLaunch::Fork { from }), _) => Launch::Fork {
                sdk_session_id: from.clone(),
                new_session_id: new_session_id(),
            },
            (Some(NextLaunch::Fresh), _) => Launch::New {
                session_id: new_session_id(),
            },
            (None, Some(id)) => Launch::Resume {
                sdk_session_id: id.clone(),
            },
            (None, None) => Launch::New {
                session_id: self.conversation.session_id.to_string(),
            },
        }
    }

    async fn spawn_agent(&mut self, user_seq: i64) -> Result<(), String> {
        let shared = self.shared.clone();
        let launch = self.launch();
        // A fork after a rewind resumes the agent's own history too.
        let resumed = !matches!(launch, Launch::New { .. });
        self.publish_status(
            if resumed { "resuming" } else { "creating" },
            if resumed {
                "resuming the agent"
            } else {
                "starting the agent"
            },
        );
        let prior_prompts = shared
            .store
            .prompts_before(self.conversation.row, user_seq)
            .await
            .map_err(|e| e.to_string())?;
        // A project directory (or an added one) may have left the principal's roots, or been
        // replaced by a symbolic link, since the conversation was created.
        super::check_stored_dirs(
            &shared.config,
            &self.conversation.principal,
            &self.conversation.session_id,
            &self.cwd.to_string_lossy(),
            &self.launch_options.add_dirs,
        )
        .await?;
        // The server's own workspace is made on demand; a project directory must exist. On a
        // store that nodes share, a conversation that ran before ran in a workspace that every
        // node must see: a node that can't see it refuses rather than start over in an empty one.
        let present = tokio::fs::metadata(&self.cwd)
            .await
            .is_ok_and(|m| m.is_dir());
        if !present {
            if shared.store.is_shared() && self.sdk_session_id.is_some() {
                return Err(format!(
                    "this node can't see the conversation's working directory {}: the nodes \
                     sharing a store must share their data directories and project roots, at \
                     the same paths",
                    self.cwd.display()
                ));
            }
            if !self.cwd.starts_with(shared.config.workspaces_dir()) {
                return Err(format!(
                    "the project directory {} is gone",
                    self.cwd.display()
                ));
            }
            tokio::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.cwd)
                .await
                .map_err(|e| format!("cannot create the workspace: {e}"))?;
        }
        let spec = SpawnSpec {
            agent_id: self.conversation.agent_id.clone(),
            session_id: self.conversation.session_id.clone(),
            cwd: self.cwd.clone(),
            launch,
            model: self.model.clone(),
            permission_mode: self.permission_mode.clone(),
            options: self.launch_options.clone(),
            prior_prompts,
            background: user_seq == NO_TURN,
            watched: {
                let events = self.events.clone();
                crate::agent::Watched::new(move || events.receiver_count() > 0)
            },
        };
        let backend = self.backend.as_ref().ok_or_else(|| {
            format!(
                "the agent `{}` is not configured on this server any more",
                self.conversation.agent
            )
        })?;
        self.restore_transcript(backend.as_ref(), &spec.launch)
            .await;
        let conn = backend.spawn(spec).await.map_err(|e| e.to_string())?;
        shared.metrics.agent_spawned(resumed);
        self.process_cost = 0.0;
        self.agent = Some(conn);
        self.publish_status("active", "the agent is running");
        Ok(())
    }

    /// Closes a turn that could not run with a stored error result.
    async fn fail_turn(&mut self, turn: &Turn, reason: &'static str, detail: &str) {
        tracing::warn!(agent_id = %self.conversation.agent_id, seq = turn.user_seq, reason, detail, "turn failed");
        self.shared
            .metrics
            .error(ErrorCode::BackendUnavailable.as_str());
        let err = FrameError::new(
            ErrorCode::BackendUnavailable,
            format!("the agent could not run the turn: {detail}"),
        )
        .for_agent(Some(&self.conversation.agent_id));
        self.publish(protocol::error_frame(&err));
        let mut result = NewMessage::new(
            "result",
            error_result(&self.conversation.session_id, reason),
        );
        result.totals = Some(Totals::default());
        result.running = Some(self.turn_ends());
        self.publish_batch(vec![Out::Stored(result)]).await;
    }

    /// What the result of the running turn records: the turn that runs next (the head of the
    /// queue, which [`Self::start_next_turn`] starts right after), or none when stopping.
    fn turn_ends(&self) -> RunningTurn {
        RunningTurn::Ends {
            next: (!self.stopping)
                .then(|| self.queue.front().map(|t| t.user_seq))
                .flatten(),
        }
    }

    /// Handles one agent event and whatever else the agent has already reported.
    async fn on_agent_events(&mut self, first: Option<AgentEvent>) {
        let mut outs = Vec::new();
        let mut turn_ended = false;
        let mut crashed = None;
        let mut redeliver = false;
        let mut next = Some(first);
        while let Some(event) = next.take() {
            match event {
                Some(AgentEvent::Message(message)) => {
                    if let Some(out) = self.on_message(message, &mut turn_ended).await {
                        outs.push(out);
                    }
                }
                Some(AgentEvent::Status { status, detail }) => {
                    tracing::info!(agent_id = %self.conversation.agent_id, status, %detail, "agent status");
                    outs.push(Out::Status(status, detail));
                }
                Some(AgentEvent::PermissionRequest {
                    request_id,
                    tool_name,
                    input,
                    suggestions,
                }) => {
                    let payload = serde_json::to_string(&protocol::PermissionRequest {
                        request_id: &request_id,
                        tool_name: &tool_name,
                        input: &input,
                        suggestions: &suggestions,
                    })
                    .expect("permission requests serialize");
                    let timeout = std::time::Duration::from_secs(
                        self.shared.config.session.permission_timeout_secs,
                    );
                    self.pending_permissions
                        .insert(request_id, Instant::now() + timeout);
                    outs.push(Out::Stored(NewMessage::new("permission_request", payload)));
                }
                Some(AgentEvent::PermissionCancelled { request_id }) => {
                    if self.pending_permissions.remove(&request_id).is_some() {
                        outs.push(Out::Stored(resolved(&request_id, "cancelled")));
                    }
                }
                Some(AgentEvent::Exited { detail }) => {
                    self.on_exit(&detail, &mut outs, &mut turn_ended);
                    crashed = Some(detail);
                    break;
                }
                Some(AgentEvent::Released { detail }) => {
                    // An agent goes only while idle with no prompt read: the prompt of a turn
                    // sent meanwhile never reached it, and goes to the next agent instead.
                    self.agent = None;
                    match self.running.take() {
                        // Interrupted meanwhile: it ends as if the agent had read both.
                        Some(running) if running.interrupt_deadline.is_some() => {
                            self.running = Some(running);
                            let mut result = NewMessage::new(
                                "result",
                                error_result(&self.conversation.session_id, "aborted_streaming"),
                            );
                            result.totals = Some(Totals::default());
                            result.running = Some(self.turn_ends());
                            outs.push(Out::Stored(result));
                            turn_ended = true;
                        }
                        Some(running) => {
                            tracing::debug!(agent_id = %self.conversation.agent_id, detail, "the agent went before reading the turn; starting another");
                            self.queue.push_front(running.turn);
                            redeliver = true;
                        }
                        None => {}
                    }
                    break;
                }
                None => {
                    let detail = "the agent stopped".to_owned();
                    self.on_exit(&detail, &mut outs, &mut turn_ended);
                    crashed = Some(detail);
                    break;
                }
            }
            if outs.len() < EVENT_BATCH
                && let Some(agent) = self.agent.as_mut()
                && let Ok(event) = agent.events.try_recv()
            {
                next = Some(Some(event));
            }
        }
        if turn_ended {
            // A turn's open questions end with it.
            for request_id in std::mem::take(&mut self.pending_permissions).into_keys() {
                outs.push(Out::Stored(resolved(&request_id, "cancelled")));
            }
        }
        self.publish_batch(outs).await;
        if turn_ended && crashed.is_none() {
            // The agent proved healthy: a later crash starts the back-off over.
            self.crashes.clear();
            self.gave_up = false;
        }
        if turn_ended {
            self.running = None;
            self.mirror_transcript().await;
            if self.queue.is_empty() || self.stopping {
                self.idle_since = Instant::now();
                self.publish_status("idle", "no turn is running");
            } else {
                self.shared.metrics.queued_turns(-1);
                self.start_next_turn().await;
            }
        }
        if let Some(detail) = crashed {
            self.schedule_respawn(&detail);
        }
        if redeliver {
            self.start_next_turn().await;
        }
    }

    /// After an unexpected exit: plans to start the agent again in the background (at once the
    /// first time, then after a doubling delay), unless a turn already started one, or gives
    /// up with a `respawn_failed` status after too many exits in the window.
    fn schedule_respawn(&mut self, detail: &str) {
        let config = &self.shared.config.session;
        let now = Instant::now();
        let window = std::time::Duration::from_secs(config.respawn_window_secs);
        while self
            .crashes
            .front()
            .is_some_and(|t| now.duration_since(*t) >= window)
        {
            self.crashes.pop_front();
        }
        self.crashes.push_back(now);
        if self.stopping || self.agent.is_some() || config.max_respawns == 0 {
            return;
        }
        let exits = self.crashes.len();
        if exits > config.max_respawns as usize {
            self.respawn_at = None;
            if !self.gave_up {
                self.gave_up = true;
                tracing::warn!(agent_id = %self.conversation.agent_id, exits, detail, "agent keeps exiting; not restarting it");
                self.publish_status(
                    "respawn_failed",
                    &format!(
                        "the agent exited unexpectedly {exits} times in {} s ({detail}); it is no longer restarted in the background, the next message starts it",
                        config.respawn_window_secs
                    ),
                );
            }
            return;
        }
        let delay = respawn_delay(
            exits,
            config.respawn_backoff_ms,
            config.respawn_backoff_max_secs,
        );
        tracing::info!(agent_id = %self.conversation.agent_id, exits, ?delay, detail, "agent exited unexpectedly; restarting it");
        self.respawn_at = Some(now + delay);
        self.publish_status(
            "respawning",
            &format!(
                "the agent exited unexpectedly ({detail}); starting it again in {} ms",
                delay.as_millis()
            ),
        );
    }

    /// Starts the agent with no turn for it, unless one is running or a turn is on its way;
    /// the idle timer starts over.
    async fn warm(&mut self) {
        if self.running.is_none() && self.queue.is_empty() {
            self.idle_since = Instant::now();
        }
        if self.stopping || self.agent.is_some() || self.running.is_some() || self.backend.is_none()
        {
            return;
        }
        self.respawn_at = None;
        self.start_idle_agent().await;
    }

    /// Starts the agent again in the background, if nothing else has started it meanwhile.
    async fn respawn(&mut self) {
        self.respawn_at = None;
        if self.stopping || self.agent.is_some() || self.running.is_some() || self.backend.is_none()
        {
            return;
        }
        self.start_idle_agent().await;
    }

    /// Starts the agent with no turn for it (a respawn or a warm-up); a failure to start
    /// counts as an unexpected exit.
    async fn start_idle_agent(&mut self) {
        if let Err(detail) = self.spawn_agent(NO_TURN).await {
            tracing::warn!(agent_id = %self.conversation.agent_id, detail, "cannot start the agent in the background");
            self.schedule_respawn(&detail);
        }
    }

    fn on_exit(&mut self, detail: &str, outs: &mut Vec<Out>, turn_ended: &mut bool) {
        self.agent = None;
        if self.running.is_some() {
            tracing::warn!(agent_id = %self.conversation.agent_id, detail, "agent died mid-turn");
            self.shared.metrics.agent_crashed();
            outs.push(Out::Status(
                "crashed",
                format!("the agent stopped mid-turn: {detail}"),
            ));
            let mut result = NewMessage::new(
                "result",
                error_result(&self.conversation.session_id, "crashed"),
            );
            result.totals = Some(Totals::default());
            result.running = Some(self.turn_ends());
            outs.push(Out::Stored(result));
            *turn_ended = true;
        }
    }

    async fn on_message(&mut self, message: AgentMessage, turn_ended: &mut bool) -> Option<Out> {
        let AgentMessage {
            kind,
            subtype,
            uuid,
            session_id,
            raw,
        } = message;
        let message_type: &'static str = match kind.as_str() {
            "stream_event" => return Some(Out::Live("stream_event", raw)),
            "user" => "user",
            "assistant" => "assistant",
            "result" => "result",
            "system" => "system",
            "conversation_reset" => {
                if let Ok(v) = serde_json::from_str::<Value>(&raw)
                    && let Some(id) = v["new_conversation_id"].as_str()
                {
                    self.record_agent_session(id.to_owned()).await;
                }
                return Some(Out::Live("agent_event", raw));
            }
            _ => return Some(Out::Live("agent_event", raw)),
        };
        if message_type == "system"
            && subtype.as_deref() == Some("init")
            && let Some(id) = session_id
        {
            self.record_agent_session(id).await;
        }
        let mut stored = NewMessage::new(message_type, raw);
        if let Some(running) = self.running.as_mut()
            && message_type == "assistant"
        {
            running.last_assistant_uuid = uuid.clone();
        }
        if message_type == "result" {
            stored.totals = Some(self.result_totals(&stored.payload));
            stored.turn_anchor = self
                .running
                .as_mut()
                .and_then(|r| r.last_assistant_uuid.take());
            // The turn is over from here on: a release or an exit reported in the same batch
            // finds nothing running.
            *turn_ended = self.running.take().is_some();
            if *turn_ended {
                stored.running = Some(self.turn_ends());
            }
        }
        stored.sdk_uuid = uuid;
        Some(Out::Stored(stored))
    }

    /// Records the id the agent reports for the conversation: what the next resume uses.
    async fn record_agent_session(&mut self, id: String) {
        if self.sdk_session_id.as_deref() == Some(id.as_str()) {
            return;
        }
        let unified = self.conversation.session_id == id.as_str();
        if let Err(err) = self
            .shared
            .store
            .record_agent_session(self.conversation.row, &id, unified)
            .await
        {
            self.store_failed(&err);
        }
        self.sdk_session_id = Some(id);
        self.next_launch = None;
    }

    async fn answer_permission(
        &mut self,
        request_id: String,
        decision: PermissionDecision,
    ) -> Result<(), FrameError> {
        if self.pending_permissions.remove(&request_id).is_none() {
            return Err(FrameError::new(
                ErrorCode::UnknownRequest,
                "no pending permission request with that id",
            )
            .for_agent(Some(&self.conversation.agent_id)));
        }
        let outcome = match decision {
            PermissionDecision::Allow { .. } => "allowed",
            PermissionDecision::Deny { .. } => "denied",
        };
        self.send_decision(request_id.clone(), decision).await;
        self.publish_batch(vec![Out::Stored(resolved(&request_id, outcome))])
            .await;
        Ok(())
    }

    async fn send_decision(&self, request_id: String, decision: PermissionDecision) {
        if let Some(agent) = &self.agent {
            let _ = agent
                .input
                .send(AgentInput::Permission {
                    request_id,
                    decision,
                })
                .await;
        }
    }

    /// Denies the permission requests nobody answered in time.
    async fn expire_permissions(&mut self) {
        let now = Instant::now();
        let expired: Vec<String> = self
            .pending_permissions
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        let mut outs = Vec::new();
        for request_id in expired {
            self.pending_permissions.remove(&request_id);
            if let Some(agent) = &self.agent {
                let input = AgentInput::PermissionTimedOut {
                    request_id: request_id.clone(),
                };
                let _ = agent.input.send(input).await;
            }
            outs.push(Out::Stored(resolved(&request_id, "timed_out")));
        }
        self.publish_batch(outs).await;
    }

    /// What one result adds to the totals: the agent reports cost cumulatively per process.
    fn result_totals(&mut self, raw: &str) -> Totals {
        let Some(figures) = ResultFigures::read(raw) else {
            return Totals::default();
        };
        let cumulative = figures.total_cost_usd.unwrap_or(0.0);
        let cost = (cumulative - self.process_cost).max(0.0);
        self.process_cost = cumulative.max(self.process_cost);
        let usage = figures.usage.unwrap_or_default();
        Totals {
            cost_usd: cost,
            input_tokens: usage.input_tokens.unwrap_or(0),
            output_tokens: usage.output_tokens.unwrap_or(0),
            duration_ms: figures.duration_ms.unwrap_or(0),
        }
    }

    /// Stores the stored frames of `outs` in one append, then publishes all in order.
    async fn publish_batch(&mut self, outs: Vec<Out>) {
        if outs.is_empty() {
            return;
        }
        let stored: Vec<NewMessage> = outs
            .iter()
            .filter_map(|o| match o {
                Out::Stored(m) => Some(m.clone()),
                _ => None,
            })
            .collect();
        let mut seq = None;
        if !stored.is_empty() {
            match self
                .shared
                .store
                .append(self.conversation.row, stored)
                .await
            {
                Ok(first) => seq = Some(first),
                Err(err) => self.store_failed(&err),
            }
        }
        let tag = self.conversation.tag();
        // Live frames of one wake-up share one timestamp: formatting the clock is a good part of
        // a streamed delta's cost.
        let mut live_at: Option<String> = None;
        for out in outs {
            match out {
                Out::Stored(m) => {
                    if let Some(s) = seq.as_mut() {
                        let activity = match m.message_type {
                            "result" => Some(Activity::TurnEnded),
                            "permission_request" => Some(Activity::PermissionRequest),
                            "permission_resolved" => Some(Activity::PermissionResolved),
                            _ => None,
                        };
                        if let Some(activity) = activity {
                            self.publish_activity(activity, *s, &m.payload);
                        }
                        self.publish(protocol::session_frame(
                            tag,
                            m.message_type,
                            Some(*s),
                            &m.created_at,
                            &m.payload,
                            m.totals.map(|t| t.cost_usd),
                        ));
                        *s += 1;
                    }
                }
                Out::Live(kind, raw) => {
                    let at = live_at.get_or_insert_with(protocol::now_rfc3339);
                    self.publish(protocol::session_frame(tag, kind, None, at, &raw, None));
                }
                Out::Status(status, detail) => self.publish_status(status, &detail),
            }
        }
    }

    /// The interrupt deadline passed without the turn ending: kill the agent and close the
    /// turn. The conversation resumes from the agent's own record on the next turn.
    async fn kill_stuck_turn(&mut self) {
        let seq = self.running.as_ref().map(|r| r.turn.user_seq);
        tracing::warn!(agent_id = %self.conversation.agent_id, ?seq, "interrupt not honoured in time; stopping the agent");
        if let Some(agent) = self.agent.take() {
            agent.stop().await;
        }
        let mut result = NewMessage::new(
            "result",
            error_result(&self.conversation.session_id, "interrupt_timeout"),
        );
        result.totals = Some(Totals::default());
        result.running = Some(self.turn_ends());
        self.publish_batch(vec![Out::Stored(result)]).await;
        self.running = None;
        self.start_next_turn().await;
        if self.running.is_none() {
            self.publish_status("idle", "no turn is running");
        }
    }

    /// Keeps a copy of the agent's own record of this conversation in a store that several
    /// nodes share, so that another node can resume it (see [`crate::agent::Backend::transcript`]).
    async fn mirror_transcript(&self) {
        let store = &self.shared.store;
        let (Some(backend), Some(id)) = (&self.backend, &self.sdk_session_id) else {
            return;
        };
        if !store.is_shared() {
            return;
        }
        let Some(path) = backend.transcript(&self.cwd, id) else {
            return;
        };
        let max_bytes = self.shared.config.claude.max_transcript_bytes;
        let saved = match read_transcript(&path, max_bytes).await {
            Ok(content) => {
                store
                    .save_transcript(self.conversation.row, id, content)
                    .await
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return,
            Err(err) => {
                return tracing::warn!(error = %err, path = %path.display(), "reading the agent's transcript failed");
            }
        };
        if let Err(err) = saved {
            tracing::warn!(error = %err, "keeping the agent's transcript in the store failed");
        }
    }

    /// Before an agent resumes (or forks) an agent session, puts back the transcript a store
    /// that several nodes share keeps of it, when this node lacks it (the session ran on
    /// another node).
    async fn restore_transcript(&self, backend: &dyn crate::agent::Backend, launch: &Launch) {
        let store = &self.shared.store;
        let id = match launch {
            Launch::New { .. } => return,
            Launch::Resume { sdk_session_id }
            | Launch::ResumeAt { sdk_session_id, .. }
            | Launch::Fork { sdk_session_id, .. } => sdk_session_id,
        };
        if !store.is_shared() {
            return;
        }
        let Some(path) = backend.transcript(&self.cwd, id) else {
            return;
        };
        if tokio::fs::symlink_metadata(&path).await.is_ok() {
            return;
        }
        let content = match store.load_transcript(id).await {
            Ok(Some(content)) => content,
            Ok(None) => return,
            Err(err) => return tracing::warn!(error = %err, "reading a kept transcript failed"),
        };
        if let Err(err) = write_private(&path, &content).await {
            tracing::warn!(error = %err, path = %path.display(), "putting a kept transcript back failed");
        }
    }

    /// Evicts the conversation if nothing arrived meanwhile; true when the actor should end.
    async fn try_evict(&mut self) -> bool {
        let state = self.slot_state.clone();
        // A held slot means a command for this actor is on its way (and its sender may be
        // waiting for the reply): stay, and look again after another idle period.
        let Ok(mut guard) = state.try_lock() else {
            self.idle_since = Instant::now();
            return false;
        };
        if !self.commands.is_empty() {
            return false;
        }
        self.commands.close();
        *guard = SlotState::Dormant;
        if let Some(agent) = self.agent.take() {
            agent.stop().await;
        }
        self.live = None;
        drop(guard);
        self.mirror_transcript().await;
        self.shared.store.release_lease(self.conversation.row).await;
        self.shared.metrics.live_sessions(-1);
        self.publish_status(
            "evicted",
            "idle; the conversation resumes on the next message",
        );
        true
    }

    /// Drops the stored messages after `to_seq` and makes the agent forget them: the live
    /// agent is stopped, and the next one starts as the store decided (a fork of the agent's
    /// session at the turn's anchor). Only while no turn is running or queued.
    async fn rewind(&mut self, to_seq: i64) -> Result<Frame, FrameError> {
        let agent_id = self.conversation.agent_id.as_str();
        if self.running.is_some() || !self.queue.is_empty() {
            return Err(FrameError::new(
                ErrorCode::Busy,
                "a turn is running or queued; interrupt it or wait for it to end, then rewind",
            )
            .for_agent(Some(agent_id)));
        }
        let (frame, next_launch) = rewind_store(&self.shared, &self.conversation, to_seq).await?;
        if let Some(agent) = self.agent.take() {
            agent.stop().await;
        }
        self.next_launch = Some(next_launch);
        self.publish(frame.clone());
        Ok(frame)
    }

    /// The conversation is being deleted: stop the agent mid-turn without storing anything
    /// more, and drop the queue.
    async fn abandon(&mut self) {
        self.commands.close();
        self.shared.metrics.queued_turns(-(self.queue.len() as i64));
        self.queue.clear();
        self.running = None;
        if let Some(agent) = self.agent.take() {
            agent.stop().await;
        }
        self.shared.store.release_lease(self.conversation.row).await;
        self.shared.metrics.live_sessions(-1);
    }

    /// Another node took the conversation over, so this node can't store anything more for
    /// it: stop the agent, drop the turns, answer the commands still queued, and tell the
    /// subscribers (a `moved` status; the next command reaches the new owner's node, or says
    /// where the conversation lives).
    async fn hand_over(&mut self) {
        self.commands.close();
        while let Ok(command) = self.commands.try_recv() {
            let agent_id = self.conversation.agent_id.as_str();
            match command {
                Command::Chat { reply, .. } => {
                    let _ = reply.send(Err(super::moved(agent_id)));
                }
                Command::Permission { reply, .. } => {
                    let _ = reply.send(Err(super::moved(agent_id)));
                }
                Command::Rewind { reply, .. } => {
                    let _ = reply.send(Err(super::moved(agent_id)));
                }
                Command::Interrupt { reply } => {
                    let _ = reply.send(false);
                }
                Command::Stop { reply } | Command::Abandon { reply } => {
                    let _ = reply.send(());
                }
                Command::Warm | Command::TakenOver => {}
            }
        }
        if let Some(agent) = self.agent.take() {
            agent.stop().await;
        }
        self.shared.metrics.queued_turns(-(self.queue.len() as i64));
        self.queue.clear();
        self.running = None;
        self.pending_permissions.clear();
        self.respawn_at = None;
        self.live = None;
        self.shared.metrics.live_sessions(-1);
        self.busy.store(false, Ordering::Release);
        self.publish_status(
            "moved",
            "another node took this conversation over; send again to continue it there",
        );
    }

    /// Server shutdown: the running turn and every queued one end now with a stored result
    /// whose `terminal_reason` is `server_shutdown` (pending permission requests `cancelled`),
    /// published before any socket is closed; then the agent is stopped. The next start
    /// resumes from the agent's own record.
    async fn stop(&mut self) {
        self.stopping = true;
        let open = usize::from(self.running.take().is_some()) + self.queue.len();
        if open > 0
            && let Some(agent) = &self.agent
        {
            let _ = agent.input.try_send(AgentInput::Interrupt);
        }
        if let Some(agent) = self.agent.take() {
            agent.stop().await;
        }
        self.shared.metrics.queued_turns(-(self.queue.len() as i64));
        self.queue.clear();
        let mut outs: Vec<Out> = std::mem::take(&mut self.pending_permissions)
            .into_keys()
            .map(|request_id| Out::Stored(resolved(&request_id, "cancelled")))
            .collect();
        for _ in 0..open {
            let mut result = NewMessage::new(
                "result",
                error_result(&self.conversation.session_id, "server_shutdown"),
            );
            result.totals = Some(Totals::default());
            result.running = Some(RunningTurn::Ends { next: None });
            outs.push(Out::Stored(result));
        }
        if !outs.is_empty() {
            self.publish_batch(outs).await;
            self.publish_status("idle", "the server is shutting down");
        }
        self.mirror_transcript().await;
        self.shared.store.release_lease(self.conversation.row).await;
        self.shared.metrics.live_sessions(-1);
    }
}

/// Drops the stored messages of `session` after `to_seq` and stores the `rewound` status;
/// returns its frame (not yet published) and how the agent starts next. Whoever calls it
/// makes sure no turn runs: the live actor, or the manager for a dormant conversation.
pub(super) async fn rewind_store(
    shared: &Shared,
    conversation: &Conversation,
    to_seq: i64,
) -> Result<(Frame, NextLaunch), FrameError> {
    let agent_id = conversation.agent_id.as_str();
    let status = Box::new(move |dropped_seqs: &[i64]| {
        let detail = match dropped_seqs {
            [] => format!(
                "messages after seq {to_seq} were dropped; the agent no longer remembers them"
            ),
            _ => format!(
                "messages after seq {to_seq}, and the prompts of later turns queued before it, were dropped; the agent no longer remembers them"
            ),
        };
        let payload = serde_json::json!({
            "status": "rewound",
            "detail": detail,
            "dropped_after_seq": to_seq,
            "dropped_seqs": dropped_seqs,
        });
        NewMessage::new("status", payload.to_string())
    });
    let rewound = shared
        .store
        .rewind(conversation.row, to_seq, status)
        .await
        .map_err(|e| super::store_error(e, agent_id))?;
    tracing::info!(agent_id, to_seq, dropped = rewound.dropped, dropped_prompts = ?rewound.dropped_prompts, launch = ?rewound.next_launch, "rewound");
    let frame = protocol::session_frame(
        conversation.tag(),
        "status",
        Some(rewound.status_seq),
        &rewound.status.created_at,
        &rewound.status.payload,
        None,
    );
    Ok((frame, rewound.next_launch))
}

/// How long to wait before restarting an agent after its `exits`-th unexpected exit in the
/// window: nothing after the first, then `base_ms`, doubling, at most `max_secs`.
fn respawn_delay(exits: usize, base_ms: u64, max_secs: u64) -> std::time::Duration {
    let max = std::time::Duration::from_secs(max_secs);
    if exits <= 1 {
        return std::time::Duration::ZERO;
    }
    let doublings = u32::try_from(exits - 2).unwrap_or(u32::MAX).min(32);
    let ms = base_ms.saturating_mul(1u64 << doublings);
    std::time::Duration::from_millis(ms).min(max)
}

/// A stored `permission_resolved` frame.
fn resolved(request_id: &str, outcome: &str) -> NewMessage {
    let payload = protocol::PermissionResolved {
        request_id,
        outcome,
    };
    NewMessage::new(
        "permission_resolved",
        serde_json::to_string(&payload).expect("permission outcomes serialize"),
    )
}

/// The figures of a `result` that add to a conversation's totals; a field that is absent or
/// of another type counts as absent.
#[derive(Debug, PartialEq, serde::Deserialize)]
struct ResultFigures {
    total_cost_usd: Option<f64>,
    usage: Option<UsageFigures>,
    duration_ms: Option<i64>,
}

#[derive(Debug, Default, PartialEq, serde::Deserialize)]
struct UsageFigures {
    input_tokens: Option<i64>,
    output_tokens: Option<i64>,
}

impl ResultFigures {
    /// Reads the figures of a result, skipping the rest of it (its reply text and so on)
    /// without building a value tree. A result that the typed read refuses (a field of
    /// another type, a key given twice) is read from a value tree instead, field by field.
    fn read(raw: &str) -> Option<Self> {
        serde_json::from_str(raw).ok().or_else(|| {
            let v: Value = serde_json::from_str(raw).ok()?;
            Some(ResultFigures {
                total_cost_usd: v["total_cost_usd"].as_f64(),
                usage: Some(UsageFigures {
                    input_tokens: v["usage"]["input_tokens"].as_i64(),
                    output_tokens: v["usage"]["output_tokens"].as_i64(),
                }),
                duration_ms: v["duration_ms"].as_i64(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{ResultFigures, UsageFigures, read_transcript, respawn_delay, write_private};

    /// A transcript is put back only as a new file, and read only from a regular file of at
    /// most the limit with no other hard link: a link at its path is never followed, to an
    /// existing file or to one that does not exist yet.
    #[tokio::test]
    async fn transcripts_are_never_written_or_read_through_a_link() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        let dangling = dir.path().join("nothing-yet");
        std::fs::write(&target, "kept").unwrap();
        for (link, to) in [("a.jsonl", &target), ("b.jsonl", &dangling)] {
            let link = dir.path().join("projects").join(link);
            std::fs::create_dir_all(link.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(to, &link).unwrap();
            assert!(write_private(&link, b"transcript").await.is_err());
            assert!(read_transcript(&link, 1 << 20).await.is_err());
        }
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept");
        assert!(!dangling.exists());
        // A new file is written, private, and read back.
        let new = dir.path().join("projects").join("c.jsonl");
        write_private(&new, b"transcript").await.unwrap();
        assert_eq!(read_transcript(&new, 1 << 20).await.unwrap(), b"transcript");
        // Not over the limit, nor through a hard link: it has two names then.
        let err = read_transcript(&new, 5).await.unwrap_err().to_string();
        assert!(
            err.contains("claude.max_transcript_bytes (5 bytes)"),
            "{err}"
        );
        let hard = dir.path().join("projects").join("d.jsonl");
        std::fs::hard_link(&target, &hard).unwrap();
        assert!(read_transcript(&hard, 1 << 20).await.is_err());
        assert!(read_transcript(&target, 1 << 20).await.is_err());
        let mode = std::fs::metadata(&new).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_result_s_figures_are_read_whatever_else_it_holds() {
        let figures = |cost, input, output, duration| {
            Some(ResultFigures {
                total_cost_usd: cost,
                usage: Some(UsageFigures {
                    input_tokens: input,
                    output_tokens: output,
                }),
                duration_ms: duration,
            })
        };
        let read = |raw: &str| {
            ResultFigures::read(raw).map(|mut f| {
                f.usage.get_or_insert_default();
                f
            })
        };
        assert_eq!(
            read(
                r#"{"type":"result","result":"a \"long\" reply","total_cost_usd":0.25,"usage":{"input_tokens":3,"output_tokens":5,"cache":{"x":1}},"duration_ms":12,"errors":[]}"#
            ),
            figures(Some(0.25), Some(3), Some(5), Some(12))
        );
        // Absent, null, or of another type: absent, and the other figures are still read.
        assert_eq!(
            read(
                r#"{"type":"result","total_cost_usd":"1","usage":{"input_tokens":2.5,"output_tokens":7},"duration_ms":null}"#
            ),
            figures(None, None, Some(7), None)
        );
        assert_eq!(
            read(r#"{"type":"result","usage":5,"duration_ms":9}"#),
            figures(None, None, None, Some(9))
        );
        assert_eq!(
            read(r#"{"type":"result","total_cost_usd":1}"#),
            figures(Some(1.0), None, None, None)
        );
        // A key given twice counts once, with its last value, as everywhere else.
        assert_eq!(
            read(r#"{"type":"result","duration_ms":1,"duration_ms":2}"#),
            figures(None, None, None, Some(2))
        );
        assert_eq!(read("not json"), None);
    }

    #[test]
    fn respawn_backs_off_doubling_up_to_the_cap() {
        let delays: Vec<Duration> = (1..=8).map(|n| respawn_delay(n, 1000, 30)).collect();
        let secs: Vec<u64> = delays.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [0, 1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(respawn_delay(1000, 1000, 30), Duration::from_secs(30));
    }
}
