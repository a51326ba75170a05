//! Rewinding a conversation: its stored messages after a `result` dropped, its worktree's files
//! restored, and its agent made to forget them.

use crate::protocol::{self, ErrorCode, Frame, Principal};
use crate::session::SessionError;
use crate::session::actor::Actor;
use crate::session::actor::files::{self, Files};
use crate::session::{Conversation, Shared};
use crate::store::{NewMessage, NextLaunch};

impl Actor {
    /// Drops the stored messages after `to_seq` and makes the agent forget them: the live
    /// agent is stopped, and the next one starts as the store decided (a fork of the agent's
    /// session at the turn's anchor). Only while no turn is running or queued.
    pub(in crate::session::actor) async fn rewind(
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
    files::rewind_files(shared, conversation, to_seq, async |files: Files| {
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
