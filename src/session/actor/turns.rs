//! The turn state machine: a chat is stored and queued, turns run one at a time, and an interrupt,
//! a stuck turn or a rewind ends them.

use std::sync::atomic::Ordering;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::Actor;
use super::publish::Out;
use crate::agent::AgentInput;
use crate::protocol::{self, Activity, Chat, ChatOptions, ErrorCode, Frame};
use crate::session::SessionError;
use crate::session::{Conversation, Shared};
use crate::store::{NewMessage, NextLaunch, RunningTurn, StoreError};

pub(super) struct Turn {
    pub(super) user_seq: i64,
    pub(super) content: protocol::Content,
    /// Model and permission mode asked for with this turn; applied when it starts.
    pub(super) options: ChatOptions,
}

pub(super) struct Running {
    /// Set once an interrupt was sent: the agent is killed if the turn has not ended by then.
    pub(super) interrupt_deadline: Option<Instant>,
    /// uuid of the latest assistant message of this turn (the rewind anchor).
    pub(super) last_assistant_uuid: Option<String>,
    /// The turn, to hand to a new agent if the one it was sent to went away without reading
    /// it (see [`AgentEvent::Released`]).
    pub(super) turn: Turn,
}

impl Actor {
    pub(super) async fn on_chat(
        &mut self,
        chat: Chat,
        marker: Option<Box<NewMessage>>,
        reply: oneshot::Sender<Result<(i64, usize), SessionError>>,
    ) {
        // The working directory is fixed: the agent's resume is scoped by it.
        if let Some(cwd) = &chat.options.cwd
            && std::path::Path::new(cwd) != self.cwd
        {
            let err = SessionError::new(
                ErrorCode::InvalidOptions,
                format!(
                    "`options.cwd`: the conversation works in `{}`; its working directory can't change (start a new conversation)",
                    self.cwd.display()
                ),
            );
            let _ = reply.send(Err(err));
            return;
        }
        let busy = self.running.is_some() || !self.queue.is_empty();
        if busy && self.queue.len() >= self.shared.config.session.max_queued_turns {
            let err = SessionError::new(
                ErrorCode::LimitExceeded,
                format!("{} turns are already queued", self.queue.len()),
            );
            let _ = reply.send(Err(err));
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
                let err = crate::session::errors::store_error(err, &chat.agent_id);
                let _ = reply.send(Err(err));
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

    pub(super) fn interrupt(&mut self) -> bool {
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
    pub(super) async fn start_next_turn(&mut self) {
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

    /// Closes a turn that could not run with a stored error result.
    async fn fail_turn(&mut self, turn: &Turn, reason: &'static str, detail: &str) {
        tracing::warn!(agent_id = %self.conversation.agent_id, seq = turn.user_seq, reason, detail, "turn failed");
        self.publish_error(SessionError::new(
            ErrorCode::BackendUnavailable,
            format!("the agent could not run the turn: {detail}"),
        ));
        let result =
            NewMessage::error_result(&self.conversation.session_id, reason, self.turn_ends());
        self.publish_batch(vec![Out::Stored(result)]).await;
    }

    /// What the result of the running turn records: the turn that runs next (the head of the
    /// queue, which [`Self::start_next_turn`] starts right after), or none when stopping.
    pub(super) fn turn_ends(&self) -> RunningTurn {
        RunningTurn::Ends {
            next: (!self.stopping)
                .then(|| self.queue.front().map(|t| t.user_seq))
                .flatten(),
        }
    }

    /// The interrupt deadline passed without the turn ending: kill the agent and close the
    /// turn. The conversation resumes from the agent's own record on the next turn.
    pub(super) async fn kill_stuck_turn(&mut self) {
        let seq = self.running.as_ref().map(|r| r.turn.user_seq);
        tracing::warn!(agent_id = %self.conversation.agent_id, ?seq, "interrupt not honoured in time; stopping the agent");
        if let Some(agent) = self.agent.take() {
            agent.stop().await;
        }
        let result = NewMessage::error_result(
            &self.conversation.session_id,
            "interrupt_timeout",
            self.turn_ends(),
        );
        self.publish_batch(vec![Out::Stored(result)]).await;
        self.running = None;
        self.start_next_turn().await;
        if self.running.is_none() {
            self.publish_status("idle", "no turn is running");
        }
    }

    /// Drops the stored messages after `to_seq` and makes the agent forget them: the live
    /// agent is stopped, and the next one starts as the store decided (a fork of the agent's
    /// session at the turn's anchor). Only while no turn is running or queued.
    pub(super) async fn rewind(&mut self, to_seq: i64) -> Result<Frame, SessionError> {
        if self.running.is_some() || !self.queue.is_empty() {
            return Err(SessionError::new(
                ErrorCode::Busy,
                "a turn is running or queued; interrupt it or wait for it to end, then rewind",
            ));
        }
        let (frame, next_launch) = rewind_store(&self.shared, &self.conversation, to_seq).await?;
        if let Some(agent) = self.agent.take() {
            agent.stop().await;
        }
        self.next_launch = Some(next_launch);
        self.publish(frame.clone());
        Ok(frame)
    }
}

/// Drops the stored messages of `session` after `to_seq` and stores the `rewound` status;
/// returns its frame (not yet published) and how the agent starts next. Whoever calls it
/// makes sure no turn runs: the live actor, or the manager for a dormant conversation.
pub(in crate::session) async fn rewind_store(
    shared: &Shared,
    conversation: &Conversation,
    to_seq: i64,
) -> Result<(Frame, NextLaunch), SessionError> {
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
        .map_err(|e| crate::session::errors::store_error(e, agent_id))?;
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
