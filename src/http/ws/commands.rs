//! What each frame a client sends on a socket asks of it: decoded, handed to the session
//! manager as the principal's command, and answered on the socket (a chat by its `ack` once its
//! user message is stored, any refusal by an `error` naming the conversation).

use crate::protocol::{self, AgentId, ClientFrame, ErrorCode, Tag};
use crate::session::{ChatAccepted, Need, SessionError};

use super::{Connection, SocketResult};

impl Connection {
    pub(super) async fn on_text(&mut self, text: &str) -> SocketResult {
        let frame = match protocol::decode(text, self.limits) {
            Ok(frame) => frame,
            Err(err) => {
                self.app.metrics.frame_in("invalid");
                return self.send_error(&err).await;
            }
        };
        let manager = self.app.manager.clone();
        match frame {
            ClientFrame::Chat(chat) => {
                self.app.metrics.frame_in("chat");
                let agent_id = chat.agent_id.clone();
                let client_msg_id = chat.client_msg_id.clone();
                if let Err(err) = self.room_to_follow(&agent_id) {
                    return self.on_stored(agent_id, client_msg_id, Err(err)).await;
                }
                match manager.chat(&self.principal, chat).await {
                    Ok(pending) => {
                        self.acks.push_back(Box::pin(async move {
                            (agent_id, client_msg_id, pending.stored().await)
                        }));
                        Ok(())
                    }
                    Err(err) => self.on_stored(agent_id, client_msg_id, Err(err)).await,
                }
            }
            ClientFrame::Interrupt { agent_id } => {
                self.app.metrics.frame_in("interrupt");
                match manager.interrupt_turn(&self.principal, &agent_id).await {
                    Ok(outcome) if !outcome.was_running => {
                        let idle = protocol::status_frame(
                            outcome.conversation.tag(),
                            "idle",
                            "no turn is running",
                        );
                        self.send_as(&agent_id, idle).await
                    }
                    Ok(_) => Ok(()),
                    Err(err) => self.send_error(&err.into_frame(&agent_id, None)).await,
                }
            }
            ClientFrame::Ping { ts } => {
                self.app.metrics.frame_in("ping");
                self.send(protocol::pong_frame(ts.as_ref())).await
            }
            ClientFrame::Subscribe {
                agent_id,
                since_seq,
                warm,
            } => {
                self.app.metrics.frame_in("subscribe");
                if let Err(err) = self.room_to_follow(&agent_id) {
                    return self.send_error(&err.into_frame(&agent_id, None)).await;
                }
                let acting = match manager.acting(&self.principal, &agent_id, Need::View).await {
                    Ok(acting) => acting,
                    Err(err) => return self.send_error(&err.into_frame(&agent_id, None)).await,
                };
                match manager.subscribe(&acting.principal, &acting.agent_id).await {
                    Ok(sub) => {
                        let conversation = sub.conversation.clone();
                        let cursor = manager.cursor(sub.conversation, since_seq);
                        self.follow(agent_id.clone(), cursor, sub.events);
                        self.replay(&agent_id).await?;
                        if !warm {
                            return Ok(());
                        }
                        let warmed = match acting.shared {
                            Some((_, crate::protocol::Role::Viewer)) => {
                                Ok(crate::session::Warm::Refused(
                                    "a viewer doesn't start the agent".into(),
                                ))
                            }
                            _ => manager.warm(&acting.principal, &acting.agent_id).await,
                        };
                        match warmed {
                            Ok(crate::session::Warm::Started) => Ok(()),
                            Ok(crate::session::Warm::Refused(detail)) => {
                                let status = protocol::status_frame(
                                    conversation.tag(),
                                    "warm_refused",
                                    &detail,
                                );
                                self.send_as(&agent_id, status).await
                            }
                            Err(err) => self.send_error(&err.into_frame(&agent_id, None)).await,
                        }
                    }
                    Err(err) => self.send_error(&err.into_frame(&agent_id, None)).await,
                }
            }
            ClientFrame::PermissionResponse {
                agent_id,
                request_id,
                decision,
            } => {
                self.app.metrics.frame_in("permission_response");
                let answered =
                    manager.answer_prompt(&self.principal, &agent_id, request_id, decision);
                match answered.await {
                    Ok(()) => Ok(()),
                    Err(err) => self.send_error(&err.into_frame(&agent_id, None)).await,
                }
            }
            ClientFrame::Unsubscribe { agent_id } => {
                self.app.metrics.frame_in("unsubscribe");
                if let Some(followed) = self.followed.remove(&agent_id) {
                    followed.stop.abort();
                }
                Ok(())
            }
            ClientFrame::Watch => {
                self.app.metrics.frame_in("watch");
                if self.activity.is_none() {
                    self.activity = Some(manager.watch(&self.principal));
                }
                Ok(())
            }
            ClientFrame::Unwatch => {
                self.app.metrics.frame_in("unwatch");
                self.activity = None;
                Ok(())
            }
            ClientFrame::Presence { visible, agent_id } => {
                self.app.metrics.frame_in("presence");
                let presence = self.app.push.presence();
                let seat = self
                    .presence
                    .get_or_insert_with(|| presence.seat(&self.principal));
                seat.shows(agent_id.filter(|_| visible));
                Ok(())
            }
            ClientFrame::Rewind { agent_id, to_seq } => {
                self.app.metrics.frame_in("rewind");
                match manager.rewind_to(&self.principal, &agent_id, to_seq).await {
                    // A follower gets the stored status through its subscription.
                    Ok(_) if self.followed.contains_key(&agent_id) => Ok(()),
                    Ok(status) => self.send_as(&agent_id, status).await,
                    Err(err) => self.send_error(&err.into_frame(&agent_id, None)).await,
                }
            }
            ClientFrame::Fork {
                agent_id,
                new_agent_id,
                at_seq,
            } => {
                self.app.metrics.frame_in("fork");
                let forked = manager.fork(&self.principal, &agent_id, new_agent_id, at_seq);
                match forked.await {
                    Ok(fork) => {
                        let tag = Tag {
                            agent_id: &fork.agent_id,
                            session_id: &fork.session_id,
                        };
                        self.send(protocol::forked_frame(tag, fork.last_seq, &agent_id))
                            .await
                    }
                    Err(err) => self.send_error(&err.into_frame(&agent_id, None)).await,
                }
            }
        }
    }

    /// Whether this socket may follow `agent_id`: it already does, or follows fewer than
    /// `socket.max_subscriptions` conversations. Checked before anything is started.
    fn room_to_follow(&self, agent_id: &str) -> Result<(), SessionError> {
        let max = self.app.config.socket.max_subscriptions;
        if max == 0 || self.followed.len() < max || self.followed.contains_key(agent_id) {
            return Ok(());
        }
        Err(SessionError::new(
            ErrorCode::LimitExceeded,
            format!("a socket follows at most {max} conversations; unsubscribe from one first"),
        ))
    }

    /// Answers a chat once its user message is stored (or could not be): an `ack`, after which
    /// the socket follows the conversation, or an `error`.
    pub(super) async fn on_stored(
        &mut self,
        agent_id: AgentId,
        client_msg_id: Option<String>,
        outcome: Result<ChatAccepted, SessionError>,
    ) -> SocketResult {
        let accepted = match outcome {
            Ok(accepted) => accepted,
            Err(err) => {
                return self
                    .send_error(&err.into_frame(&agent_id, client_msg_id))
                    .await;
            }
        };
        let ack = protocol::ack_frame(
            accepted.conversation.tag(),
            client_msg_id.as_deref(),
            accepted.seq,
            accepted.queue_position,
        );
        self.send_as(&agent_id, ack).await?;
        // A cursor of an earlier conversation under this agent_id (deleted since) is replaced.
        if self
            .followed
            .get(&agent_id)
            .is_none_or(|f| f.cursor.conversation.session_id != accepted.conversation.session_id)
        {
            let cursor = self
                .app
                .manager
                .cursor(accepted.conversation, accepted.seq - 1);
            self.follow(agent_id, cursor, accepted.events);
        }
        Ok(())
    }
}
