//! Starting and resuming a conversation's actor: a chat creates or resumes it (single-flight,
//! within the live limits), a warm-up starts its agent early, and a subscription follows it without
//! starting anything.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::{mpsc, oneshot};

use super::errors::{store_error, unknown_agent};
use super::routing::Route;
use super::slots::{INPUT_QUEUE, SessionHandle, Slot, SlotState, send_input};
use super::{Conversation, Manager, PendingChat, SessionRecord, Subscription, Warm, actor};
use crate::limits::{QuotaExceeded, QuotaPermit};
use crate::protocol::{AgentId, Chat, ErrorCode, LaunchOptions, Principal, SessionId};
use crate::session::SessionError;
use crate::store::{NewMessage, StoreError};

/// Why a conversation's actor did not start on this node.
enum Refused {
    /// A typed error for the client.
    Error(SessionError),
    /// Another node runs it (cluster mode).
    Elsewhere {
        node: String,
        record: Box<SessionRecord>,
    },
}

impl From<SessionError> for Refused {
    fn from(err: SessionError) -> Self {
        Refused::Error(err)
    }
}

impl Manager {
    /// Hands a user turn to its conversation (creating or resuming it first) without waiting
    /// for it to be stored, with `marker` (a status) stored just before the user message.
    /// Turns submitted one after the other, on any conversation, are queued in that order; a
    /// socket keeps reading meanwhile, so that many of its chats share one group commit. In
    /// cluster mode, a chat for a conversation another node runs goes to that node (with its
    /// marker); when that node is gone, the chat waits for its lease to expire and runs here.
    ///
    /// # Errors
    /// `store_unavailable`, `limit_exceeded` (queue full, or too many live conversations) or
    /// `backend_unavailable`.
    pub(super) async fn submit_marked(
        &self,
        principal: &Principal,
        chat: Chat,
        marker: Option<Box<NewMessage>>,
    ) -> Result<PendingChat, SessionError> {
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
                    if self.route == Route::AnyNode && self.shared.bus.is_some() =>
                {
                    let forwarded = self
                        .forward_chat(principal, chat, marker, &slot, node, &record)
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
        send_input(
            &handle,
            actor::Input::Chat {
                chat: Box::new(chat),
                marker,
                reply,
            },
        )?;
        drop(guard);
        Ok(PendingChat {
            conversation: handle.conversation,
            events,
            reply: reply_rx,
        })
    }

    /// Sends a turn the server sends for `principal` itself (a schedule's run, a turn that
    /// continues after a rate limit), with `marker`, the status that says why, stored just
    /// before its user message; returns once it is stored. Only the session layer marks a turn.
    ///
    /// # Errors
    /// Those of [`Manager::submit_marked`] and [`PendingChat::stored`].
    pub(super) async fn submit_own(
        &self,
        principal: &Principal,
        mut chat: Chat,
        marker: NewMessage,
    ) -> Result<super::ChatAccepted, SessionError> {
        chat.sender = Some(principal.clone());
        let pending = self.submit_marked(principal, chat, Some(Box::new(marker)));
        pending.await?.stored().await
    }

    /// Starts the actor of a conversation, creating the conversation if it is new.
    async fn start(
        &self,
        principal: &Principal,
        chat: &Chat,
        slot: &Arc<Slot>,
    ) -> Result<SessionHandle, Refused> {
        let shared = &self.shared;
        let live = self.acquire_live(principal)?;
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
                self.check_dirs(&record, &launch.add_dirs).await?;
                let mode = chat.options.permission_mode.as_ref();
                self.check_grants(
                    &record,
                    mode.or(record.permission_mode.as_ref()).map(String::as_str),
                    &launch.allowed_tools,
                )?;
                record
            }
            None => {
                let agent = self.pick_agent(chat)?;
                self.check_chat_options(&agent, chat)?;
                // Nothing is created for a first turn that could not start.
                self.admit_new(principal, &agent).await?;
                let backend = shared.agents.get(&agent).expect("checked by pick_agent");
                let launch = LaunchOptions::default().updated(&chat.options);
                // The pre-warmed agent runs in its own workspace with no launch options.
                let warm = chat.options.cwd.is_none() && launch.is_empty();
                let session_id = warm
                    .then(|| backend.take_prewarmed())
                    .flatten()
                    .unwrap_or_else(SessionId::new);
                let mut new = self.new_session(principal, &chat.agent_id, session_id)?;
                new.backend = agent;
                if let Some(cwd) = &chat.options.cwd {
                    new.cwd.clone_from(cwd);
                }
                new.model = chat.options.model.clone();
                new.permission_mode = chat.options.permission_mode.clone();
                new.launch_options = launch;
                self.new_worktree(principal, chat, &mut new).await?;
                let made = new.worktree.clone().map(|w| (new.session_id.clone(), w));
                match shared.store.create_session(new).await {
                    Ok(record) => record,
                    Err(err) => {
                        if let Some((session_id, worktree)) = &made {
                            self.drop_worktree(session_id, worktree).await;
                        }
                        return Err(store_err(err).into());
                    }
                }
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

    /// Takes a place among the live conversations, or fails with `limit_exceeded`.
    fn acquire_live(&self, principal: &Principal) -> Result<QuotaPermit, SessionError> {
        if self.shared.closing.load(Ordering::Acquire) {
            return Err(SessionError::new(
                ErrorCode::BackendUnavailable,
                "the server is shutting down",
            ));
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
            SessionError::new(ErrorCode::LimitExceeded, message)
        })
    }

    /// Starts the actor of a stored conversation, holding `live` while it runs.
    fn spawn_actor(&self, record: SessionRecord, slot: &Slot, live: QuotaPermit) -> SessionHandle {
        let conversation = slot
            .conversation
            .get_or_init(|| Conversation::from_record(&record))
            .clone();
        let (tx, rx) = mpsc::channel(INPUT_QUEUE);
        actor::spawn(actor::ActorInit {
            shared: self.shared.clone(),
            conversation: conversation.clone(),
            record,
            slot_state: slot.state.clone(),
            events: slot.events.clone(),
            busy: slot.busy.clone(),
            inputs: rx,
            live,
        });
        SessionHandle { tx, conversation }
    }

    /// Starts a conversation's agent in the background unless it is running, so that its next
    /// turn skips the start-up: a hint, refused (not failed) when the principal or the server
    /// is at its live limit. It never stops another conversation's turn.
    ///
    /// # Errors
    /// `unknown_agent` when there is no such conversation, `store_unavailable`.
    pub async fn warm(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
    ) -> Result<Warm, SessionError> {
        let key = Self::key(principal, agent_id);
        let (slot, mut guard) = self.existing_slot(principal, agent_id).await?;
        let handle = match &*guard {
            SlotState::Live(h) if !h.tx.is_closed() => h.clone(),
            _ => {
                let live = match self.acquire_live(principal) {
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
        let _ = handle.tx.try_send(actor::Input::Warm);
        Ok(Warm::Started)
    }

    /// Follows a conversation's live frames. Never starts an agent.
    ///
    /// # Errors
    /// `unknown_agent` when there is no such conversation.
    pub async fn subscribe(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
    ) -> Result<Subscription, SessionError> {
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
}
