//! The "continue" turns of conversations that wait for a rate limit: claimed when due (by
//! whichever node claims it first) and sent as a chat marked by a stored `limit_continued`
//! status, on the scheduler's one timer.

use serde_json::json;

use super::super::actor::continued_status;
use super::super::{Audit, SessionError};
use super::Scheduler;
use crate::protocol::{Chat, ChatOptions, Content, ErrorCode};
use crate::store::waits::DueWait;

/// What a "continue" turn says to the agent.
const CONTINUE_PROMPT: &str = "continue";

impl Scheduler {
    /// Claims the waits that are over and sends each conversation its "continue" turn; false
    /// when the store failed.
    pub(super) async fn continue_due(&self, now_ms: i64) -> bool {
        let store = &self.inner.manager.shared.store;
        let due = match store.due_limit_waits(now_ms).await {
            Ok(due) => due,
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the waits for rate limits");
                return false;
            }
        };
        for wait in due {
            match store.claim_limit_wait(wait.row, wait.until_ms).await {
                Ok(true) => {
                    let this = self.clone();
                    tokio::spawn(async move { Box::pin(this.send_continue(wait)).await });
                }
                // Cancelled, or claimed by another node.
                Ok(false) => {}
                Err(err) => {
                    tracing::warn!(error = %err, "cannot claim a wait for a rate limit");
                    return false;
                }
            }
        }
        true
    }

    /// When the earliest wait for a rate limit ends.
    pub(super) async fn earliest_continue(&self) -> Option<i64> {
        let store = &self.inner.manager.shared.store;
        store.earliest_limit_wait().await.ok().flatten()
    }

    /// Sends a conversation its "continue" turn, as its owner, unless the owner can no longer
    /// sign in; recorded in the audit log. A refused turn ends the wait for good.
    async fn send_continue(&self, wait: DueWait) {
        let manager = &self.inner.manager;
        let metrics = &manager.shared.metrics;
        let entry = Audit::new(&wait.principal, "limit_continue")
            .on(&wait.principal, &wait.agent_id)
            .detail(json!({ "by": "server" }));
        let sent = if self.principal_exists(&wait.principal) {
            let chat = Chat {
                agent_id: wait.agent_id.clone(),
                content: Content::Text(CONTINUE_PROMPT.into()),
                client_msg_id: None,
                options: ChatOptions::default(),
                sender: None,
            };
            manager
                .submit_own(&wait.principal, chat, continued_status())
                .await
                .map(|_| ())
        } else {
            Err(SessionError::new(
                ErrorCode::Unauthorized,
                "its principal can no longer sign in",
            ))
        };
        match manager.audited(entry, sent).await {
            Ok(()) => {
                tracing::info!(agent_id = %wait.agent_id, "continued after a rate limit");
                metrics.limit_wait("continued");
            }
            Err(err) => {
                tracing::warn!(
                    agent_id = %wait.agent_id,
                    error = %err.message,
                    "the turn continuing after a rate limit was refused"
                );
                metrics.limit_wait("refused");
                manager
                    .give_up_dormant_wait(&wait.principal, &wait.agent_id, &err.message)
                    .await;
            }
        }
    }
}
