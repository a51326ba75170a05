//! The actor's turns as they run: a chat stored and queued, the next turn started with its
//! options and terms, its prompt sent, and a turn interrupted, failed or stuck.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Interrupt, Turn};
use crate::agent::AgentInput;
use crate::protocol::{self, Activity, Chat, ChatOptions, ErrorCode, Principal};
use crate::session::SessionError;
use crate::session::actor::{Actor, publish::Out};
use crate::session::spend::{Refusal, Terms};
use crate::store::{NewMessage, RunningTurn};

impl Actor {
    pub(in crate::session::actor) async fn on_chat(
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
        let payload = user_payload(&chat.content, chat.sender.as_ref().map(Principal::as_str));
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

    pub(in crate::session::actor) fn interrupt(&mut self, sender: &Principal) -> bool {
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
    pub(in crate::session::actor) async fn start_next_turn(&mut self) {
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
    pub(in crate::session::actor) fn turn_ends(&self) -> RunningTurn {
        RunningTurn::Ends {
            next: (!self.stopping).then(|| self.turns.next_seq()).flatten(),
        }
    }

    /// The interrupt deadline passed without the turn ending: kill the agent and close the
    /// turn. The conversation resumes from the agent's own record on the next turn.
    pub(in crate::session::actor) async fn kill_stuck_turn(&mut self) {
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
}

/// The stored payload of a user message with `content`, sent by `sender` when that is not
/// the owner (see [`UserLine`]).
pub(super) fn user_payload(content: &protocol::Content, sender: Option<&str>) -> String {
    serde_json::to_string(&UserLine {
        kind: "user",
        message: UserMessage {
            role: "user",
            content,
        },
        sender,
    })
    .expect("a user message serializes")
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
