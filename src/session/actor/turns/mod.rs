//! The turn state machine: a chat is stored and queued, turns run one at a time, and an interrupt,
//! a stuck turn or a rewind ends them.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::Actor;
use super::files::Files;
use super::publish::Out;
use crate::agent::AgentInput;
use crate::protocol::{self, Activity, Chat, ChatOptions, ErrorCode, Frame, Principal};
use crate::session::SessionError;
use crate::session::spend::{Refusal, Terms};
use crate::session::{Conversation, Shared};
use crate::store::{NewMessage, NextLaunch, RunningTurn};

pub(super) struct Turn {
    pub(super) user_seq: i64,
    pub(super) content: protocol::Content,
    /// Model and permission mode asked for with this turn; applied when it starts.
    pub(super) options: ChatOptions,
    /// Whether a schedule's run sent it.
    pub(super) scheduled: bool,
    /// What its agent starts on, when it was checked just now (a turn that runs at once);
    /// a queued turn is checked again when it starts.
    pub(super) terms: Option<Terms>,
}

pub(super) struct Running {
    /// Set once an interrupt was sent: the agent is killed if the turn has not ended by then.
    interrupt_deadline: Option<Instant>,
    /// uuid of the latest assistant message of this turn (the rewind anchor).
    pub(super) last_assistant_uuid: Option<String>,
    /// The turn, to hand to a new agent if the one it was sent to went away without reading
    /// it (see [`Turns::release`]).
    turn: Turn,
}

/// A conversation's turns: the one running, if any, and those queued behind it in the order
/// their user messages were stored. What a client is told of them is decided here: a new
/// turn's place in the queue, whether there is room for it, which turn runs next, and whether
/// an interrupt found a turn to stop. A turn is queued ([`Turns::push`]), taken from the head
/// of the queue ([`Turns::take_next`]) and started ([`Turns::start`]) unless it can't run, and
/// runs until it finishes ([`Turns::finish`]), its agent goes without reading it
/// ([`Turns::release`]), or every turn is dropped ([`Turns::clear`]).
#[derive(Default)]
pub(super) struct Turns {
    queue: VecDeque<Turn>,
    running: Option<Running>,
}

/// What an interrupt found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Interrupt {
    /// No turn is running: nothing to stop (queued turns are never interrupted).
    Idle,
    /// The running turn is asked to stop now; it must end by the deadline.
    Asked,
    /// The running turn was already asked to stop; its deadline stands.
    AlreadyAsked,
}

/// What became of the running turn when its agent went without reading its prompt.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Released {
    /// No turn was running.
    Nothing,
    /// It was asked to stop meanwhile: it is still running, to end as if the agent had read
    /// both.
    Interrupted,
    /// It is back at the head of the queue, for the next agent.
    Requeued,
}

impl Turns {
    /// Whether a turn is running or queued.
    pub(super) fn is_busy(&self) -> bool {
        self.running.is_some() || !self.queue.is_empty()
    }

    /// Whether a turn is running.
    pub(super) fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// How many turns wait behind the running one.
    pub(super) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Whether another turn may be queued, when at most `max_queued` may wait; a turn that
    /// would run at once always may.
    pub(super) fn room(&self, max_queued: usize) -> Result<(), SessionError> {
        if self.is_busy() && self.queue.len() >= max_queued {
            return Err(SessionError::new(
                ErrorCode::LimitExceeded,
                format!("{} turns are already queued", self.queue.len()),
            ));
        }
        Ok(())
    }

    /// Queues `turn` behind the others; returns its place: 0 when it runs at once, else how
    /// many turns are ahead of it (the running one included).
    pub(super) fn push(&mut self, turn: Turn) -> usize {
        let position = if self.is_busy() {
            self.queue.len() + usize::from(self.running.is_some())
        } else {
            0
        };
        self.queue.push_back(turn);
        position
    }

    /// Takes the turn at the head of the queue to start it: it is then started
    /// ([`Turns::start`]), or closed when it can't run.
    pub(super) fn take_next(&mut self) -> Option<Turn> {
        self.queue.pop_front()
    }

    /// Marks `turn` (taken from the head of the queue) as the running one.
    pub(super) fn start(&mut self, turn: Turn) {
        self.running = Some(Running {
            interrupt_deadline: None,
            last_assistant_uuid: None,
            turn,
        });
    }

    /// Records the running turn's latest assistant message: what a rewind to its end keeps.
    pub(super) fn saw_assistant(&mut self, uuid: Option<String>) {
        if let Some(running) = self.running.as_mut() {
            running.last_assistant_uuid = uuid;
        }
    }

    /// The running turn ended (its result is stored, or it was given up): what it was, if a
    /// turn was running.
    pub(super) fn finish(&mut self) -> Option<Running> {
        self.running.take()
    }

    /// The agent went before reading the running turn's prompt: unless the turn was asked to
    /// stop, it goes back to the head of the queue, for the next agent.
    pub(super) fn release(&mut self) -> Released {
        match self.running.take() {
            None => Released::Nothing,
            Some(running) if running.interrupt_deadline.is_some() => {
                self.running = Some(running);
                Released::Interrupted
            }
            Some(running) => {
                self.queue.push_front(running.turn);
                Released::Requeued
            }
        }
    }

    /// Drops every turn: whether one was running, and how many were queued.
    pub(super) fn clear(&mut self) -> (bool, usize) {
        let queued = self.queue.len();
        self.queue.clear();
        (self.running.take().is_some(), queued)
    }

    /// The user `seq` of the running turn, if any.
    pub(super) fn running_seq(&self) -> Option<i64> {
        self.running.as_ref().map(|r| r.turn.user_seq)
    }

    /// The user `seq` of the turn that runs next, if one is queued.
    pub(super) fn next_seq(&self) -> Option<i64> {
        self.queue.front().map(|t| t.user_seq)
    }

    /// When the running turn, asked to stop, must have ended.
    pub(super) fn interrupt_deadline(&self) -> Option<Instant> {
        self.running.as_ref().and_then(|r| r.interrupt_deadline)
    }

    /// Asks the running turn to stop within `timeout`, unless it was asked already.
    pub(super) fn interrupt(&mut self, timeout: Duration) -> Interrupt {
        let Some(running) = self.running.as_mut() else {
            return Interrupt::Idle;
        };
        if running.interrupt_deadline.is_some() {
            return Interrupt::AlreadyAsked;
        }
        running.interrupt_deadline = Some(Instant::now() + timeout);
        Interrupt::Asked
    }
}

impl Actor {
    pub(super) async fn on_chat(
        &mut self,
        chat: Chat,
        marker: Option<Box<NewMessage>>,
        reply: oneshot::Sender<Result<(i64, usize), SessionError>>,
    ) {
        // The working directory is fixed: the agent's resume is scoped by it. A conversation
        // in a worktree may name the repository's directory it was made from.
        let origin = self
            .conversation
            .worktree
            .as_ref()
            .map(|w| w.repo.join(&w.subdir));
        if let Some(cwd) = &chat.options.cwd
            && std::path::Path::new(cwd) != self.cwd
            && origin.as_deref() != Some(std::path::Path::new(cwd))
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
        if let Err(err) = self.turns.room(self.shared.config.session.max_queued_turns) {
            let _ = reply.send(Err(err));
            return;
        }
        let budget_usd = chat.options.budget_usd.as_deref().map(|u| u.0);
        let terms = match self.admit(budget_usd).await {
            Ok(terms) => terms,
            Err(err) => {
                let _ = reply.send(Err(err));
                return;
            }
        };
        self.set_auto_continue(chat.options.auto_continue).await;
        let busy = self.turns.is_busy();
        let payload = serde_json::to_string(&UserLine {
            kind: "user",
            message: UserMessage {
                role: "user",
                content: &chat.content,
            },
            sender: chat.sender.as_ref().map(Principal::as_str),
        })
        .expect("a user message serializes");
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
                // Only a chat that is stored ends the wait: a refused one leaves it be.
                self.chat_ends_wait(marker_frame.as_ref().map(|(_, p)| p.as_str()))
                    .await;
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
                self.last_seq = first + i64::from(marker_frame.is_some());
                self.last_seq
            }
            Err(err) => {
                let _ = reply.send(Err(self.store_refused(err)));
                return;
            }
        };
        let position = self.turns.push(Turn {
            user_seq: seq,
            content: chat.content,
            options: chat.options,
            scheduled: marker_frame.is_some(),
            terms: (!busy).then_some(terms),
        });
        let _ = reply.send(Ok((seq, position)));
        self.publish(protocol::session_frame(
            self.conversation.tag(),
            "user",
            Some(seq),
            &created_at,
            &payload,
            None,
        ));
        if !self.turns.is_running() {
            self.start_next_turn().await;
        } else {
            self.shared.metrics.queued_turns(1);
            self.publish_status("queued", &format!("{position} turn(s) ahead"));
        }
    }

    pub(super) fn interrupt(&mut self, sender: &Principal) -> bool {
        let timeout = Duration::from_secs(self.shared.config.session.interrupt_timeout_secs);
        match self.turns.interrupt(timeout) {
            Interrupt::Idle => false,
            Interrupt::AlreadyAsked => true,
            Interrupt::Asked => {
                if let Some(agent) = &self.agent {
                    let _ = agent.input.try_send(AgentInput::Interrupt);
                }
                self.publish(protocol::sent_status_frame(
                    self.conversation.tag(),
                    "interrupted",
                    "the running turn is being stopped",
                    sender,
                ));
                true
            }
        }
    }

    /// Starts queued turns until one is running (a turn whose agent can't start is closed).
    /// The conversation's worktree is held meanwhile: a commit, merge or discard that runs
    /// makes the turn wait, and one asked for before the turn counts as busy is refused.
    pub(super) async fn start_next_turn(&mut self) {
        let _hold = match self.turns.queued() {
            0 => None,
            _ => self.hold_worktree().await,
        };
        while let Some(mut turn) = self.turns.take_next() {
            self.apply_options(&turn.options).await;
            // A turn queued behind others is checked again as it starts: it may find a cap
            // reached.
            let checked = match turn.terms.take() {
                Some(terms) => Ok(terms),
                None => self.launch_terms().await,
            };
            let terms = match checked {
                Ok(terms) => terms,
                Err(Refusal::Over(over)) => {
                    self.store_over_cap(&over).await;
                    self.fail_turn(&turn, "budget_exceeded", &over.error().message)
                        .await;
                    continue;
                }
                Err(Refusal::Error(err)) => {
                    self.fail_turn(&turn, "backend_unavailable", &err.message)
                        .await;
                    continue;
                }
            };
            self.restart_if_outdated(&terms).await;
            if self.agent.is_none()
                && let Err(detail) = self.spawn_agent(turn.user_seq, terms.clone()).await
            {
                self.fail_turn(&turn, "backend_unavailable", &detail).await;
                continue;
            }
            self.checkpoint_files().await;
            let mut sent = self.send_prompt(&turn).await;
            if !sent && self.agent.is_none() {
                // The agent had stopped (a background start that gave up its place, or a
                // crash not yet reported): start one for this turn.
                sent = self.spawn_agent(turn.user_seq, terms).await.is_ok()
                    && self.send_prompt(&turn).await;
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
            self.scheduled_turn = turn.scheduled;
            self.announced_reset = None;
            self.turns.start(turn);
            self.publish_status("busy", "a turn is running");
            self.publish_activity(Activity::TurnStarted, user_seq, "");
            return;
        }
        self.idle_since = Instant::now();
    }

    /// Stops the live agent when it runs on other credentials or another allowance than the
    /// turn must start on; the turn starts the next one (resuming).
    async fn restart_if_outdated(&mut self, terms: &Terms) {
        let outdated = self
            .terms
            .as_ref()
            .is_some_and(|live| live.outdated_by(self.process_cost, terms));
        if outdated && let Some(agent) = self.agent.take() {
            self.publish_status(
                "restarting",
                "your credentials or what the turn may spend changed; restarting the agent with resume",
            );
            agent.stop().await;
        }
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
        let code = match reason {
            "budget_exceeded" => ErrorCode::BudgetExceeded,
            _ => ErrorCode::BackendUnavailable,
        };
        self.publish_error(SessionError::new(
            code,
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
            next: (!self.stopping).then(|| self.turns.next_seq()).flatten(),
        }
    }

    /// The interrupt deadline passed without the turn ending: kill the agent and close the
    /// turn. The conversation resumes from the agent's own record on the next turn.
    pub(super) async fn kill_stuck_turn(&mut self) {
        let seq = self.turns.running_seq();
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
        self.turns.finish();
        self.report_changes().await;
        self.start_next_turn().await;
        if !self.turns.is_running() {
            self.publish_status("idle", "no turn is running");
        }
    }

    /// Drops the stored messages after `to_seq` and makes the agent forget them: the live
    /// agent is stopped, and the next one starts as the store decided (a fork of the agent's
    /// session at the turn's anchor). Only while no turn is running or queued.
    pub(super) async fn rewind(
        &mut self,
        to_seq: i64,
        sender: &Principal,
    ) -> Result<Frame, SessionError> {
        if self.turns.is_busy() {
            return Err(SessionError::new(
                ErrorCode::Busy,
                "a turn is running or queued; interrupt it or wait for it to end, then rewind",
            ));
        }
        let (frame, seq, next_launch) =
            rewind_store(&self.shared, &self.conversation, to_seq, sender).await?;
        self.last_seq = seq;
        self.limit_tries = 0;
        if let Some(agent) = self.agent.take() {
            agent.stop().await;
        }
        self.next_launch = Some(next_launch);
        self.publish(frame.clone());
        Ok(frame)
    }
}

/// Drops the stored messages of `session` after `to_seq` and stores the `rewound` status, and
/// puts the files of its worktree, if it has one, back as they were at that point; returns the
/// status's frame (not yet published), its `seq` and how the agent starts next. Whoever calls
/// it makes sure no turn runs: the live actor, or the manager for a dormant conversation.
pub(in crate::session) async fn rewind_store(
    shared: &Shared,
    conversation: &Conversation,
    to_seq: i64,
    sender: &Principal,
) -> Result<(Frame, i64, NextLaunch), SessionError> {
    let agent_id = conversation.agent_id.as_str();
    let sender = sender.to_string();
    super::files::rewind_files(shared, conversation, to_seq, async |files: Files| {
        let sender = sender.clone();
        let status = Box::new(move |dropped_seqs: &[i64]| {
            let dropped = match dropped_seqs {
                [] => format!(
                    "messages after seq {to_seq} were dropped; the agent no longer remembers them"
                ),
                _ => format!(
                    "messages after seq {to_seq}, and the prompts of later turns queued before it, were dropped; the agent no longer remembers them"
                ),
            };
            let payload = serde_json::json!({
                "status": "rewound",
                "detail": format!("{dropped}; {}", files.detail()),
                "dropped_after_seq": to_seq,
                "dropped_seqs": dropped_seqs,
                "files_restored": files == Files::Restored,
                "sender": sender,
            });
            NewMessage::new("status", payload.to_string())
        });
        let rewound = shared
            .store
            .rewind(conversation.row, to_seq, status)
            .await
            .map_err(|e| crate::session::errors::store_error(e, agent_id))?;
        // A wait for a rate limit belongs to the turns it drops: nothing continues them.
        if let Err(err) = shared.store.cancel_limit_wait(conversation.row).await {
            tracing::warn!(agent_id, error = %err, "cannot cancel the wait of a rewound conversation");
        }
        tracing::info!(agent_id, to_seq, dropped = rewound.dropped, dropped_prompts = ?rewound.dropped_prompts, launch = ?rewound.next_launch, ?files, "rewound");
        let frame = protocol::session_frame(
            conversation.tag(),
            "status",
            Some(rewound.status_seq),
            &rewound.status.created_at,
            &rewound.status.payload,
            None,
        );
        Ok((frame, rewound.status_seq, rewound.next_launch))
    })
    .await
}

/// A stored user message: the prompt as the agent's own transcript has it, and who sent it
/// when that is not the owner.
#[derive(serde::Serialize)]
struct UserLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message: UserMessage<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sender: Option<&'a str>,
}

#[derive(serde::Serialize)]
struct UserMessage<'a> {
    role: &'static str,
    content: &'a protocol::Content,
}

#[cfg(test)]
mod tests;
