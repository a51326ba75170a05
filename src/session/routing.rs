//! Routing between nodes (cluster mode): a command for a conversation another node runs goes to
//! that node as a [`Command`], a chat whose node is gone waits to take the conversation over,
//! and other nodes' frames are relayed to this node's followers.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::oneshot;

use super::errors::store_error;
use super::slots::Slot;
use super::{Conversation, Manager, PendingChat, SessionRecord, cluster};
use crate::protocol::{
    AgentId, Chat, ClientFrame, ErrorCode, Frame, PermissionDecision, Principal,
};
use crate::session::SessionError;
use crate::store::{NewMessage, RowId, StoreError};

use std::time::Duration;

/// How often a chat for a conversation whose node is gone tries to take it over.
const TAKEOVER_POLL: Duration = Duration::from_millis(200);

/// Whether a command may go to the node that runs its conversation: a command forwarded
/// from another node is run here or refused, never sent on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    AnyNode,
    ThisNode,
}

/// A command for a conversation another node runs, as it is forwarded there: what a client
/// can ask of a conversation that its owner's node must run (a fork runs from the store, on
/// the node that got it). It goes as the client frame it mirrors ([`Command::into_frame`]),
/// which that node decodes as a socket's; only the session layer makes one, so only a
/// schedule's run or a "continue" turn carries a marker.
#[derive(Debug, Clone)]
// A command lives for one call and is moved a few times; boxing its chat would cost every chat
// an allocation for nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Command {
    /// Store and run a user turn (the chat names its conversation).
    Chat {
        /// The turn.
        chat: Chat,
        /// A status stored just before the user message, in the same write: the
        /// `scheduled_run` mark of a schedule's run, or the mark of a "continue" turn.
        marker: Option<Box<NewMessage>>,
    },
    /// Stop the running turn.
    Interrupt,
    /// Answer a pending tool permission request.
    AnswerPermission {
        /// The request answered.
        request_id: String,
        /// Allow or deny.
        decision: PermissionDecision,
    },
    /// Drop the stored messages after a `result`'s `seq`.
    Rewind {
        /// The `seq` of the `result` to go back to.
        to_seq: i64,
    },
}

impl Command {
    /// The client frame that asks this of conversation `agent_id`.
    pub(super) fn into_frame(self, agent_id: AgentId) -> ClientFrame {
        match self {
            Command::Chat { chat, .. } => ClientFrame::Chat(chat),
            Command::Interrupt => ClientFrame::Interrupt { agent_id },
            Command::AnswerPermission {
                request_id,
                decision,
            } => ClientFrame::PermissionResponse {
                agent_id,
                request_id,
                decision,
            },
            Command::Rewind { to_seq } => ClientFrame::Rewind { agent_id, to_seq },
        }
    }

    /// The command a client frame asks of its conversation (unmarked), and that conversation;
    /// none for a frame that is not forwarded (a fork, or one about the socket itself).
    pub(super) fn from_frame(frame: ClientFrame) -> Option<(AgentId, Command)> {
        Some(match frame {
            ClientFrame::Chat(chat) => {
                (chat.agent_id.clone(), Command::Chat { chat, marker: None })
            }
            ClientFrame::Interrupt { agent_id } => (agent_id, Command::Interrupt),
            ClientFrame::PermissionResponse {
                agent_id,
                request_id,
                decision,
            } => (
                agent_id,
                Command::AnswerPermission {
                    request_id,
                    decision,
                },
            ),
            ClientFrame::Rewind { agent_id, to_seq } => (agent_id, Command::Rewind { to_seq }),
            ClientFrame::Fork { .. }
            | ClientFrame::Ping { .. }
            | ClientFrame::Subscribe { .. }
            | ClientFrame::Unsubscribe { .. }
            | ClientFrame::Watch
            | ClientFrame::Unwatch
            | ClientFrame::Presence { .. } => return None,
        })
    }
}

impl Manager {
    /// Hands a chat to node `node`, which runs its conversation, without waiting for its
    /// answer: the chats this node forwards for one conversation reach the owner in the order
    /// they came, and the socket goes on reading meanwhile.
    pub(super) async fn forward_chat(
        &self,
        principal: &Principal,
        chat: Chat,
        marker: Option<Box<NewMessage>>,
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
        let (manager, principal, row) = (self.clone(), principal.to_owned(), conversation.row);
        tokio::spawn(async move {
            let _order = order;
            let answer = manager
                .forward_until_answered(&principal, chat, marker, node, row)
                .await;
            let _ = reply.send(answer);
        });
        PendingChat {
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
        principal: &Principal,
        chat: Chat,
        marker: Option<Box<NewMessage>>,
        mut node: String,
        row: RowId,
    ) -> Result<(i64, usize), SessionError> {
        let bus = self.shared.bus.as_ref().expect("only in cluster mode");
        let deadline = tokio::time::Instant::now() + self.shared.config.cluster.takeover_wait();
        let command = Command::Chat {
            chat: chat.clone(),
            marker: marker.clone(),
        };
        loop {
            let sender = chat.sender.as_ref().unwrap_or(principal);
            let forwarded = bus
                .forward(&node, principal, &chat.agent_id, sender, &command)
                .await;
            if let Ok(answer) = forwarded {
                self.shared.metrics.forwarded_command();
                return match answer {
                    cluster::Answer::Chat {
                        seq,
                        queue_position,
                    } => Ok((seq, queue_position)),
                    other => Err(other.into_error()),
                };
            }
            if tokio::time::Instant::now() >= deadline {
                let err = store_error(StoreError::OwnedElsewhere(node), &chat.agent_id);
                return Err(err);
            }
            tokio::time::sleep(TAKEOVER_POLL).await;
            match self
                .submit_here(principal, chat.clone(), marker.clone())
                .await
            {
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
        principal: &'a Principal,
        chat: Chat,
        marker: Option<Box<NewMessage>>,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<PendingChat, SessionError>> + Send + 'a>>
    {
        Box::pin(async move {
            self.this_node_only()
                .submit_marked(principal, chat, marker)
                .await
        })
    }

    /// This manager, running every command on this node (or refusing it) rather than sending
    /// it on: what answers the commands other nodes forward.
    fn this_node_only(&self) -> Manager {
        Manager {
            route: Route::ThisNode,
            ..self.clone()
        }
    }

    /// Runs a command another node forwarded, on this node only, and says how it went.
    pub(super) async fn answer(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
        sender: &Principal,
        command: Command,
    ) -> cluster::Answer {
        let here = self.this_node_only();
        let answer = match command {
            Command::Chat { mut chat, marker } => {
                chat.sender = Some(sender.clone());
                match here.submit_marked(principal, chat, marker).await {
                    Ok(pending) => pending
                        .stored()
                        .await
                        .map(|accepted| cluster::Answer::Chat {
                            seq: accepted.seq,
                            queue_position: accepted.queue_position,
                        }),
                    Err(err) => Err(err),
                }
            }
            Command::Interrupt => (here.interrupt(principal, agent_id, sender).await).map(|i| {
                cluster::Answer::Interrupt {
                    was_running: i.was_running,
                    cancelled_wait: i.cancelled_wait,
                }
            }),
            Command::AnswerPermission {
                request_id,
                decision,
            } => here
                .answer_permission(principal, agent_id, sender, request_id, decision)
                .await
                .map(|()| cluster::Answer::Done),
            Command::Rewind { to_seq } => (here.rewind(principal, agent_id, sender, to_seq).await)
                .map(|frame| cluster::Answer::Rewound {
                    seq: frame.seq,
                    message_type: frame.kind.to_owned(),
                    text: frame.text.as_str().to_owned(),
                }),
        };
        answer.unwrap_or_else(cluster::Answer::from_error)
    }

    /// Relays the frames other nodes publish for the slot's conversation to its followers
    /// (cluster mode), once per slot; returns once the relay is in place.
    pub(super) async fn relay(&self, slot: &Slot) {
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
            self.shared.viewers.clone(),
            slot.relay_stop.clone(),
        )
        .await;
    }

    /// Sends `frame` to the followers of `slot` on every node.
    pub(super) fn broadcast(&self, slot: &Slot, conversation: &Conversation, frame: Frame) {
        if let Some(bus) = &self.shared.bus {
            bus.publish(conversation.row, &frame);
        }
        let _ = slot.events.send(frame);
    }

    /// The node other than this one that runs conversation `row`, in cluster mode.
    pub(super) async fn owner_elsewhere(
        &self,
        row: RowId,
        agent_id: &str,
    ) -> Result<Option<String>, SessionError> {
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
    pub(super) async fn forward(
        &self,
        node: &str,
        principal: &Principal,
        agent_id: &AgentId,
        sender: &Principal,
        command: Command,
    ) -> Result<cluster::Answer, SessionError> {
        let bus = self.shared.bus.as_ref().expect("only in cluster mode");
        self.shared.metrics.forwarded_command();
        bus.forward(node, principal, agent_id, sender, &command)
            .await
            .map_err(|cluster::NoOwner| {
                store_error(StoreError::OwnedElsewhere(node.into()), agent_id)
            })
    }
}
