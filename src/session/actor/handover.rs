//! How an actor ends and hands its conversation on: idle eviction, deletion, shutdown, a take-over
//! by another node, and the agent's transcript kept in a shared store so that another node can
//! resume it.

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::permissions::resolved;
use super::publish::Out;
use super::{Actor, Input};
use crate::agent::records::{read_transcript, write_private};
use crate::agent::{AgentInput, Launch};
use crate::session::slots::SlotState;
use crate::store::{NewMessage, RunningTurn};

impl Actor {
    /// Keeps a copy of the agent's own record of this conversation in a store that several
    /// nodes share, so that another node can resume it (see [`crate::agent::Backend::transcript`]).
    pub(super) async fn mirror_transcript(&self) {
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
    pub(super) async fn restore_transcript(
        &self,
        backend: &dyn crate::agent::Backend,
        launch: &Launch,
    ) {
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
    pub(super) async fn try_evict(&mut self) -> bool {
        let state = self.slot_state.clone();
        // A held slot means a command for this actor is on its way (and its sender may be
        // waiting for the reply): stay, and look again after another idle period.
        let Ok(mut guard) = state.try_lock() else {
            self.idle_since = Instant::now();
            return false;
        };
        if !self.inputs.is_empty() {
            return false;
        }
        self.inputs.close();
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

    /// The conversation is being deleted: stop the agent mid-turn without storing anything
    /// more, and drop the queue.
    pub(super) async fn abandon(&mut self) {
        self.inputs.close();
        self.drop_turns();
        if let Some(agent) = self.agent.take() {
            agent.stop().await;
        }
        self.shared.store.release_lease(self.conversation.row).await;
        self.shared.metrics.live_sessions(-1);
    }

    /// Another node took the conversation over, so this node can't store anything more for
    /// it: stop the agent, drop the turns, answer the inputs still queued, and tell the
    /// subscribers (a `moved` status; the next command reaches the new owner's node, or says
    /// where the conversation lives).
    pub(super) async fn hand_over(&mut self) {
        self.inputs.close();
        while let Ok(input) = self.inputs.try_recv() {
            let agent_id = self.conversation.agent_id.as_str();
            match input {
                Input::Chat { reply, .. } => {
                    let _ = reply.send(Err(crate::session::errors::moved(agent_id)));
                }
                Input::Permission { reply, .. } => {
                    let _ = reply.send(Err(crate::session::errors::moved(agent_id)));
                }
                Input::Rewind { reply, .. } => {
                    let _ = reply.send(Err(crate::session::errors::moved(agent_id)));
                }
                Input::Interrupt { reply, .. } => {
                    let _ = reply.send((false, false));
                }
                Input::Stop { reply } | Input::Abandon { reply } => {
                    let _ = reply.send(());
                }
                Input::Warm | Input::TakenOver => {}
            }
        }
        if let Some(agent) = self.agent.take() {
            agent.stop().await;
        }
        self.drop_turns();
        self.pending_permissions.clear();
        self.respawns.at = None;
        self.live = None;
        self.shared.metrics.live_sessions(-1);
        self.busy.store(false, Ordering::Release);
        self.publish_status(
            "moved",
            "another node took this conversation over; send again to continue it there",
        );
    }

    /// Drops every turn, the queued ones leaving the metric: how many there were, the running
    /// one included.
    fn drop_turns(&mut self) -> usize {
        let (running, queued) = self.turns.clear();
        self.shared.metrics.queued_turns(-(queued as i64));
        usize::from(running) + queued
    }

    /// Server shutdown: the running turn and every queued one end now with a stored result
    /// whose `terminal_reason` is `server_shutdown` (pending permission requests `cancelled`),
    /// published before any socket is closed; then the agent is stopped. The next start
    /// resumes from the agent's own record.
    pub(super) async fn stop(&mut self) {
        self.stopping = true;
        let open = self.drop_turns();
        if open > 0
            && let Some(agent) = &self.agent
        {
            let _ = agent.input.try_send(AgentInput::Interrupt);
        }
        if let Some(agent) = self.agent.take() {
            agent.stop().await;
        }
        let mut outs: Vec<Out> = std::mem::take(&mut self.pending_permissions)
            .into_keys()
            .map(|request_id| Out::Stored(resolved(&request_id, "cancelled", None)))
            .collect();
        for _ in 0..open {
            outs.push(Out::Stored(NewMessage::error_result(
                &self.conversation.session_id,
                "server_shutdown",
                RunningTurn::Ends { next: None },
            )));
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
