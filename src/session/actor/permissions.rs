//! Tool permission requests of a conversation: answered by a client, or denied once they time out.

use tokio::time::Instant;

use super::Actor;
use super::publish::Out;
use crate::agent::AgentInput;
use crate::protocol::{self, ErrorCode, PermissionDecision, Principal};
use crate::session::SessionError;
use crate::store::NewMessage;

impl Actor {
    pub(super) async fn answer_permission(
        &mut self,
        request_id: String,
        decision: PermissionDecision,
        sender: &Principal,
    ) -> Result<(), SessionError> {
        if self.pending_permissions.remove(&request_id).is_none() {
            return Err(SessionError::new(
                ErrorCode::UnknownRequest,
                "no pending permission request with that id",
            ));
        }
        let outcome = match decision {
            PermissionDecision::Allow { .. } => "allowed",
            PermissionDecision::Deny { .. } => "denied",
        };
        self.send_decision(request_id.clone(), decision).await;
        let answered = resolved(&request_id, outcome, Some(sender));
        self.publish_batch(vec![Out::Stored(answered)]).await;
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
    pub(super) async fn expire_permissions(&mut self) {
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
            outs.push(Out::Stored(resolved(&request_id, "timed_out", None)));
        }
        self.publish_batch(outs).await;
    }
}

/// A stored `permission_resolved` frame; `sender` answered it (none when nobody did).
pub(super) fn resolved(request_id: &str, outcome: &str, sender: Option<&Principal>) -> NewMessage {
    let payload = protocol::PermissionResolved {
        request_id,
        outcome,
        sender: sender.map(Principal::as_str),
    };
    NewMessage::new(
        "permission_resolved",
        serde_json::to_string(&payload).expect("permission outcomes serialize"),
    )
}
