//! A conversation's files in its worktree across turns: the checkpoint each turn starts from,
//! the `changes` its followers get after a turn that changed files, and the files a rewind
//! puts back.

use std::sync::Arc;

use tokio::task::JoinHandle;

use super::Actor;
use crate::protocol::{self, SessionId};
use crate::session::{Conversation, SessionError, Shared};
use crate::worktrees::{Worktree, WorktreeError, Worktrees};

/// What a rewind did with the files of a conversation's worktree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::session) enum Files {
    /// The conversation has no worktree: files on disk stay as they are.
    NoWorktree,
    /// They are as they were when the first dropped turn started.
    Restored,
    /// Nothing was dropped that had a checkpoint: they stay as they are.
    Unchanged,
}

impl Files {
    /// How the `rewound` status says it.
    pub(in crate::session) fn detail(self) -> &'static str {
        match self {
            Files::NoWorktree => "files on disk were not changed",
            Files::Restored => "the worktree's files are back as they were at that point",
            Files::Unchanged => "the worktree's files were not changed",
        }
    }
}

/// The worktree of `conversation` and the server's worktrees, when it has one.
fn worktree_of(shared: &Shared, conversation: &Conversation) -> Option<(Arc<Worktrees>, Worktree)> {
    Some((shared.worktrees.clone()?, conversation.worktree.clone()?))
}

/// The end of a worktree operation run on a task of its own (`tokio::spawn` at the call):
/// git's large futures stay out of the actor's, and an actor stopped meanwhile doesn't cut a
/// git command short.
async fn joined<T>(task: JoinHandle<Result<T, WorktreeError>>) -> Result<T, WorktreeError> {
    task.await
        .unwrap_or_else(|e| Err(WorktreeError::Git(format!("git task failed: {e}"))))
}

impl Actor {
    /// Records the worktree's files before a turn runs, numbered by the last stored `seq`: a
    /// rewind to any `seq` from there on until the next checkpoint puts them back. Kept for
    /// telling after the turn whether it changed files. A checkpoint that fails only warns.
    pub(super) async fn checkpoint_files(&mut self) {
        let Some((worktrees, worktree)) = worktree_of(&self.shared, &self.conversation) else {
            return;
        };
        let key = self.conversation.session_id.to_string();
        let n = self.last_seq;
        let made = joined(tokio::spawn(async move {
            worktrees.checkpoint(&worktree, &key, n).await
        }))
        .await;
        match made {
            Ok(tree) => self.files_at_turn_start = Some(tree),
            Err(err) => {
                tracing::warn!(agent_id = %self.conversation.agent_id, error = %err, "could not checkpoint the worktree");
                self.files_at_turn_start = None;
                self.publish_status(
                    "warning",
                    &format!(
                        "the worktree's files could not be recorded before this turn, so a rewind can't put them back: {err}"
                    ),
                );
            }
        }
    }

    /// After a turn: when it changed files in the worktree, its followers get a `status`
    /// `changes` with what the worktree now differs from its base by. In the background.
    pub(super) fn report_changes(&mut self) {
        let Some(tree) = self.files_at_turn_start.take() else {
            return;
        };
        let Some((worktrees, worktree)) = worktree_of(&self.shared, &self.conversation) else {
            return;
        };
        let (conversation, events, bus) = (
            self.conversation.clone(),
            self.events.clone(),
            self.shared.bus.clone(),
        );
        tokio::spawn(async move {
            match worktrees.changed_since(&worktree, &tree).await {
                Ok(None) => {}
                Ok(Some(counts)) => {
                    let frame = protocol::changes_frame(conversation.tag(), counts);
                    if let Some(bus) = &bus {
                        bus.publish(conversation.row, &frame);
                    }
                    let _ = events.send(frame);
                }
                Err(err) => {
                    tracing::warn!(agent_id = %conversation.agent_id, error = %err, "could not count the worktree's changes");
                }
            }
        });
    }
}

/// Puts the files of `conversation`'s worktree back as they were when the first turn after
/// `to_seq` started, then runs `rewind` (the store's); when that fails, the files go forward
/// again to how they were. Whoever calls it makes sure no turn runs.
pub(in crate::session) async fn rewind_files<T>(
    shared: &Shared,
    conversation: &Conversation,
    to_seq: i64,
    rewind: impl AsyncFnOnce(Files) -> Result<T, SessionError>,
) -> Result<T, SessionError> {
    let Some((worktrees, worktree)) = worktree_of(shared, conversation) else {
        return rewind(Files::NoWorktree).await;
    };
    let key: SessionId = conversation.session_id.clone();
    let failed = |err: WorktreeError| {
        SessionError::new(
            protocol::ErrorCode::BackendUnavailable,
            format!("the worktree's files could not be put back, so nothing was rewound: {err}"),
        )
    };
    let (w, t, k) = (worktrees.clone(), worktree.clone(), key.to_string());
    let found = joined(tokio::spawn(async move {
        let Some(state) = w.checkpoint_from(&t, &k, to_seq).await? else {
            return Ok(None);
        };
        let now = w.snapshot(&t).await?;
        w.restore(&t, &state).await?;
        Ok(Some(now))
    }))
    .await
    .map_err(failed)?;
    let Some(before) = found else {
        return rewind(Files::Unchanged).await;
    };
    match rewind(Files::Restored).await {
        Ok(done) => {
            let (w, t, k) = (worktrees, worktree, key.to_string());
            if let Err(err) = joined(tokio::spawn(async move {
                w.drop_checkpoints_from(&t, &k, to_seq).await
            }))
            .await
            {
                tracing::warn!(agent_id = %conversation.agent_id, error = %err, "could not drop the rewound turns' checkpoints");
            }
            Ok(done)
        }
        Err(err) => {
            if let Err(back) = joined(tokio::spawn(async move {
                worktrees.restore(&worktree, &before).await
            }))
            .await
            {
                tracing::error!(agent_id = %conversation.agent_id, error = %back, "the rewind failed and the worktree's files could not go forward again");
            }
            Err(err)
        }
    }
}
