//! The commands on an existing conversation (interrupt, permission answer, rewind, fork) as its
//! owner's side runs them, for whoever sends them, and its deletion; a chat is handed on to
//! `start`. What an edge calls is in `asks`.

use tokio::sync::oneshot;

use super::errors::{stopped, store_error};
use super::routing::Route;
use super::slots::{SlotState, send_input};
use super::{Command, Interrupted, Manager, SessionRecord, actor, cluster};
use crate::protocol::{self, AgentId, ErrorCode, Frame, Principal, SessionId};
use crate::session::SessionError;
use crate::store::StoreError;

impl Manager {
    /// Stops the running turn of a conversation, if any; with none running, cancels its wait
    /// for a rate limit, if it has one.
    ///
    /// # Errors
    /// `unknown_agent` when there is no such conversation.
    pub(super) async fn interrupt(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
        sender: &Principal,
    ) -> Result<Interrupted, SessionError> {
        let (slot, guard) = self.existing_slot(principal, agent_id).await?;
        let conversation = slot
            .conversation
            .get()
            .expect("set by existing_slot")
            .clone();
        let SlotState::Live(handle) = &*guard else {
            if self.route == Route::AnyNode
                && let Some(node) = self.owner_elsewhere(conversation.row, agent_id).await?
            {
                drop(guard);
                let command = Command::Interrupt;
                let (was_running, cancelled_wait) = match self
                    .forward(&node, principal, agent_id, sender, command)
                    .await?
                {
                    cluster::Answer::Interrupt {
                        was_running,
                        cancelled_wait,
                    } => (was_running, cancelled_wait),
                    other => return Err(other.into_error()),
                };
                return Ok(Interrupted {
                    conversation,
                    was_running,
                    cancelled_wait,
                });
            }
            // Dormant: the held slot keeps a chat on this node from starting it meanwhile.
            let cancelled_wait = self.cancel_dormant_wait(&slot, &conversation).await?;
            drop(guard);
            return Ok(Interrupted {
                conversation,
                was_running: false,
                cancelled_wait,
            });
        };
        let (reply, rx) = oneshot::channel();
        let sender = sender.clone();
        send_input(handle, actor::Input::Interrupt { sender, reply })?;
        drop(guard);
        let (was_running, cancelled_wait) = rx.await.unwrap_or((false, false));
        Ok(Interrupted {
            conversation,
            was_running,
            cancelled_wait,
        })
    }

    /// Cancels the wait for a rate limit of a conversation no node runs, storing (and
    /// telling its followers) the status that says so; whether it waited.
    async fn cancel_dormant_wait(
        &self,
        slot: &super::slots::Slot,
        conversation: &super::Conversation,
    ) -> Result<bool, SessionError> {
        let cancelled = (actor::cancel_stored_wait(&self.shared, conversation.row).await)
            .map_err(|e| store_error(e, &conversation.agent_id))?;
        if cancelled {
            let (status, detail) = (actor::WAIT_CANCELLED, actor::CANCELLED);
            self.store_dormant_status(slot, conversation, status, detail)
                .await;
        }
        Ok(cancelled)
    }

    /// Ends for good the wait for a rate limit of conversation `agent_id` of `principal`,
    /// whose "continue" turn was refused with `reason` before any actor saw it, storing (and
    /// telling its followers) a `limit_gave_up` status. A live actor, here or on another node,
    /// refused the turn itself and said so.
    pub(super) async fn give_up_dormant_wait(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
        reason: &str,
    ) {
        let Ok((slot, guard)) = self.existing_slot(principal, agent_id).await else {
            return;
        };
        let conversation = slot
            .conversation
            .get()
            .expect("set by existing_slot")
            .clone();
        let elsewhere = self.route == Route::AnyNode
            && !matches!(
                self.owner_elsewhere(conversation.row, agent_id).await,
                Ok(None)
            );
        if matches!(&*guard, SlotState::Live(_)) || elsewhere {
            return;
        }
        let store = &self.shared.store;
        if let Err(err) = store.set_limit_wait(conversation.row, None, 0).await {
            tracing::warn!(%agent_id, error = %err, "cannot end the wait of a refused continue turn");
        }
        self.shared.metrics.limit_wait("gave_up");
        let detail = actor::refused_detail(reason);
        self.store_dormant_status(&slot, &conversation, actor::GAVE_UP, &detail)
            .await;
        drop(guard);
    }

    /// Stores the `status` (with `detail`) ending the wait of a conversation no node runs,
    /// under its lease, and tells its followers (who are told even when the store fails).
    async fn store_dormant_status(
        &self,
        slot: &super::slots::Slot,
        conversation: &super::Conversation,
        status: &str,
        detail: &str,
    ) {
        let store = &self.shared.store;
        let agent_id = conversation.agent_id.as_str();
        let message = actor::wait_status(status, detail);
        let stored = match store.take_lease(conversation.row).await {
            Ok(()) => {
                let stored = store.append(conversation.row, vec![message.clone()]).await;
                store.release_lease(conversation.row).await;
                stored
            }
            Err(err) => Err(err),
        };
        let frame = match stored {
            Ok(seq) => protocol::session_frame(
                conversation.tag(),
                "status",
                Some(seq),
                &message.created_at,
                &message.payload,
                None,
            ),
            Err(err) => {
                // Ended all the same: its followers are told, though history won't say.
                tracing::warn!(agent_id, error = %err, "cannot store the end of a wait");
                protocol::status_frame(conversation.tag(), status, detail)
            }
        };
        self.broadcast(slot, conversation, frame);
    }

    /// Answers a pending tool permission request of a conversation.
    ///
    /// # Errors
    /// `unknown_agent`, or `unknown_request` when no such request is pending.
    pub(super) async fn answer_permission(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
        sender: &Principal,
        request_id: String,
        decision: crate::protocol::PermissionDecision,
    ) -> Result<(), SessionError> {
        let no_request = || {
            SessionError::new(
                ErrorCode::UnknownRequest,
                "no pending permission request with that id",
            )
        };
        let (slot, guard) = self.existing_slot(principal, agent_id).await?;
        let SlotState::Live(handle) = &*guard else {
            drop(guard);
            let row = slot.conversation.get().expect("set by existing_slot").row;
            if self.route == Route::AnyNode
                && let Some(node) = self.owner_elsewhere(row, agent_id).await?
            {
                let command = Command::AnswerPermission {
                    request_id,
                    decision,
                };
                let forwarded = self.forward(&node, principal, agent_id, sender, command);
                return match forwarded.await? {
                    cluster::Answer::Done => Ok(()),
                    other => Err(other.into_error()),
                };
            }
            return Err(no_request());
        };
        let (reply, rx) = oneshot::channel();
        let command = actor::Input::Permission {
            request_id,
            decision,
            sender: sender.clone(),
            reply,
        };
        send_input(handle, command)?;
        drop(guard);
        rx.await.unwrap_or_else(|_| Err(no_request()))
    }

    /// Drops the stored messages of a conversation after `to_seq` (the `seq` of a `result`)
    /// and makes its agent forget them. Returns the stored `rewound` status, which every
    /// subscriber also gets. A dormant conversation is rewound in the store alone (its agent
    /// starts as the store decided at its next turn), so it takes no place among the live ones.
    ///
    /// # Errors
    /// `unknown_agent`, `invalid_seq` (not a `result`'s seq), `busy` (a turn is running or
    /// queued) or `store_unavailable`.
    pub(super) async fn rewind(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
        sender: &Principal,
        to_seq: i64,
    ) -> Result<Frame, SessionError> {
        let (slot, guard) = self.existing_slot(principal, agent_id).await?;
        let agent = &slot.conversation.get().expect("set by existing_slot").agent;
        self.require(agent, "rewind", |s| s.rewind)?;
        match &*guard {
            SlotState::Live(handle) if !handle.tx.is_closed() => {
                let (reply, rx) = oneshot::channel();
                let sender = sender.clone();
                send_input(
                    handle,
                    actor::Input::Rewind {
                        to_seq,
                        sender,
                        reply,
                    },
                )?;
                drop(guard);
                rx.await.map_err(|_| stopped())?
            }
            _ => {
                // The held slot keeps a chat on this node from starting the conversation
                // meanwhile, and the lease one on another node.
                let conversation = slot.conversation.get().expect("set by existing_slot");
                let store = &self.shared.store;
                match store.take_lease(conversation.row).await {
                    Ok(()) => {}
                    Err(StoreError::OwnedElsewhere(node))
                        if self.route == Route::AnyNode && self.shared.bus.is_some() =>
                    {
                        drop(guard);
                        let command = Command::Rewind { to_seq };
                        let forwarded = self.forward(&node, principal, agent_id, sender, command);
                        return match forwarded.await? {
                            cluster::Answer::Rewound {
                                seq,
                                message_type,
                                text,
                            } => Ok(Frame::relayed(seq, &message_type, text)),
                            other => Err(other.into_error()),
                        };
                    }
                    Err(err) => return Err(store_error(err, agent_id)),
                }
                let rewound = actor::rewind_store(&self.shared, conversation, to_seq, sender).await;
                store.release_lease(conversation.row).await;
                let (frame, _, _) = rewound?;
                self.broadcast(&slot, conversation, frame.clone());
                Ok(frame)
            }
        }
    }

    /// Creates conversation `new_agent_id` from `agent_id`'s stored history up to `at_seq`
    /// (a `result`'s `seq`; the latest by default). The copied messages keep their `seq`s;
    /// the fork's agent forks the original's session at that turn, so the two diverge from
    /// there and never see each other's later messages.
    /// The fork is `into`'s: the owner's, or that of a principal the conversation is shared
    /// with, who must be allowed its directories too.
    ///
    /// # Errors
    /// `unknown_agent`, `invalid_seq`, `agent_exists`, `forbidden` or `store_unavailable`.
    pub(super) async fn fork_into(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
        into: &Principal,
        new_agent_id: &AgentId,
        at_seq: Option<i64>,
    ) -> Result<SessionRecord, SessionError> {
        let store = &self.shared.store;
        let source = self.get(principal, agent_id).await?;
        self.require(&source.backend, "fork", |s| s.fork)?;
        let launch = source.launch_options();
        self.check_dirs(&source, &launch.add_dirs).await?;
        if into != principal {
            let worktree = source.worktree();
            super::checks::check_stored_dirs(
                &self.shared.config,
                into,
                &source.session_id,
                &source.cwd,
                worktree.as_ref(),
                &launch.add_dirs,
            )
            .await
            .map_err(|why| {
                SessionError::new(
                    ErrorCode::Forbidden,
                    format!("you can't fork it into your own conversations: {why}"),
                )
            })?;
        }
        let principal = into;
        self.check_grants(
            &source,
            source.permission_mode.as_deref(),
            &launch.allowed_tools,
        )?;
        let mut new = self.new_session(principal, new_agent_id, SessionId::new())?;
        new.backend = source.backend.clone();
        new.model = source.model.clone();
        new.permission_mode = source.permission_mode.clone();
        new.launch_options = source.launch_options();
        // A project conversation's fork works in the same project (the agent's resume is
        // scoped by it); one in its own workspace gets a workspace of its own.
        if !self.is_own_workspace(&source.session_id, &source.cwd) {
            new.cwd.clone_from(&source.cwd);
        }
        // One in a worktree gets a worktree of its own, from the source's files as they are.
        self.fork_worktree(&source, &mut new).await?;
        let made = new.worktree.clone().map(|w| (new.session_id.clone(), w));
        // Holding the new key's slot keeps a concurrent chat from creating it meanwhile.
        let key = Self::key(principal, new_agent_id);
        let (slot, guard) = self.lock_slot(&key).await;
        let forked = store
            .fork(source.row, at_seq, new)
            .await
            .map_err(|e| match e {
                // The error is about the frame's own conversation; the message names the
                // taken one.
                StoreError::AgentExists => SessionError::new(
                    ErrorCode::AgentExists,
                    format!("a conversation with agent_id `{new_agent_id}` already exists"),
                ),
                e => store_error(e, agent_id),
            });
        self.release_if_unused(&key, &slot, &guard);
        if forked.is_err()
            && let Some((session_id, worktree)) = &made
        {
            self.drop_worktree(session_id, worktree).await;
        }
        let mut forked = forked?;
        // Titled as what it is, so that the two are told apart in any list.
        if let Some(title) = forked.title.as_deref().map(fork_title) {
            match store.rename_session(forked.row, &title).await {
                Ok(()) => forked.title = Some(title),
                Err(err) => tracing::warn!(error = %err, "titling a fork failed"),
            }
        }
        Ok(forked)
    }

    /// Deletes a conversation: a running turn is abandoned and its agent stopped, every stored
    /// message is removed, and subscribers get a `status` `deleted` before their subscription
    /// ends. The `agent_id` is free again afterwards. Its worktree, if it has one, is removed;
    /// returns what became of the worktree's branch: None without a worktree, else the branch
    /// when it was kept (its base lacks some of it, or the worktree could not be removed).
    ///
    /// # Errors
    /// `unknown_agent` or `store_unavailable`.
    pub async fn delete(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
    ) -> Result<Option<Option<String>>, SessionError> {
        let (slot, mut guard) = self.existing_slot(principal, agent_id).await?;
        let conversation = slot
            .conversation
            .get()
            .expect("set by existing_slot")
            .clone();
        let record = self.get(principal, agent_id).await?;
        let (cwd, worktree) = (record.cwd.clone(), record.worktree());
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
                .send(actor::Input::Abandon { reply })
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
        let kept_branch = match &worktree {
            Some(worktree) => Some(self.drop_worktree(&conversation.session_id, worktree).await),
            None => None,
        };
        let _ = slot.events.send(protocol::status_frame(
            conversation.tag(),
            "deleted",
            "the conversation was deleted",
        ));
        self.remove_slot(&Self::key(principal, agent_id), &slot);
        drop(guard);
        Ok(kept_branch)
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
}

/// A fork's title: its source's, marked ` (fork)`, within [`super::MAX_TITLE_CHARS`].
fn fork_title(source: &str) -> String {
    const MARK: &str = " (fork)";
    let room = super::MAX_TITLE_CHARS - MARK.chars().count();
    let base: String = source.chars().take(room).collect();
    format!("{}{MARK}", base.trim_end())
}
