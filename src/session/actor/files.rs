//! A conversation's files in its worktree across turns: the checkpoint each turn starts from,
//! the `changes` its followers get after a turn that changed files, and the files a rewind
//! puts back.

use std::sync::Arc;

use tokio::task::JoinHandle;

use super::Actor;
use crate::protocol::{self, SessionId};
use crate::session::{Conversation, SessionError, Shared};
use crate::worktrees::{Hold, Rewind, Worktree, WorktreeError, Worktrees};

/// What a rewind did with the files of a conversation's worktree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::session) enum Files {
    /// The conversation has no worktree: files on disk stay as they are.
    NoWorktree,
    /// They are as they were when the first dropped turn started.
    Restored,
    /// The first dropped turn has no checkpoint (none was dropped, it ran before the
    /// conversation's checkpoints began, or its checkpoint failed): they stay as they are.
    Unchanged,
    /// The first dropped turn's checkpoint was skipped, the worktree's changed files being
    /// over `worktrees.max_checkpoint_bytes`: they stay as they are.
    OverCap,
}

impl Files {
    /// How the `rewound` status says it.
    pub(in crate::session) fn detail(self) -> &'static str {
        match self {
            Files::NoWorktree => "files on disk were not put back",
            Files::Restored => {
                "the worktree's files and branch are back as they were at that point (what it \
                 held before is kept under refs/agentmux/checkpoints/<session_id>/before-rewind)"
            }
            Files::Unchanged => {
                "the worktree's files were not put back: there is no record of them at that point"
            }
            Files::OverCap => {
                "the worktree's files were not put back: at that point its changed files were \
                 over worktrees.max_checkpoint_bytes, so they were not recorded"
            }
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
    /// Waits for the hold of the conversation's worktree, if it has one (see [`Hold`]).
    pub(super) async fn hold_worktree(&self) -> Option<Hold> {
        let (worktrees, worktree) = worktree_of(&self.shared, &self.conversation)?;
        Some(worktrees.hold(&worktree).await)
    }

    /// Records the worktree's files before a turn runs, numbered by the last stored `seq`: a
    /// rewind to any `seq` from there on until the next checkpoint puts them back. Kept for
    /// telling after the turn whether it changed files. A checkpoint that fails, or that is
    /// skipped because the worktree's changed files are over `worktrees.max_checkpoint_bytes`,
    /// only warns.
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
            Ok(Some(tree)) => self.files_at_turn_start = Some(tree),
            Ok(None) => {
                self.files_at_turn_start = None;
                self.publish_status(
                    "warning",
                    &format!(
                        "the worktree's changed files are over worktrees.max_checkpoint_bytes ({} bytes), so they were not recorded before this turn: a rewind to it can't put them back",
                        self.shared.config.worktrees.max_checkpoint_bytes
                    ),
                );
            }
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
    /// `changes` with what the worktree now differs from its base by, before anything the
    /// next turn sends.
    pub(super) async fn report_changes(&mut self) {
        let Some(tree) = self.files_at_turn_start.take() else {
            return;
        };
        let Some((worktrees, worktree)) = worktree_of(&self.shared, &self.conversation) else {
            return;
        };
        let counted = joined(tokio::spawn(async move {
            worktrees.changed_since(&worktree, &tree).await
        }))
        .await;
        match counted {
            Ok(None) => {}
            Ok(Some(counts)) => {
                self.publish(protocol::changes_frame(self.conversation.tag(), counts))
            }
            Err(err) => {
                tracing::warn!(agent_id = %self.conversation.agent_id, error = %err, "could not count the worktree's changes");
            }
        }
    }
}

/// Puts the files of `conversation`'s worktree back as they were when the first turn after
/// `to_seq` started, then runs `rewind` (the store's); when that fails, the files go forward
/// again to how they were. Whoever calls it makes sure no turn runs; the worktree is held
/// meanwhile (a commit, merge or discard running answers `busy`, and none comes between).
pub(in crate::session) async fn rewind_files<T>(
    shared: &Shared,
    conversation: &Conversation,
    to_seq: i64,
    rewind: impl AsyncFnOnce(Files) -> Result<T, SessionError>,
) -> Result<T, SessionError> {
    let Some((worktrees, worktree)) = worktree_of(shared, conversation) else {
        return rewind(Files::NoWorktree).await;
    };
    let _hold = worktrees.try_hold(&worktree).ok_or_else(|| {
        SessionError::new(
            protocol::ErrorCode::Busy,
            "the conversation's worktree is being committed, merged or discarded; rewind once that ended",
        )
    })?;
    let until = shared
        .store
        .next_result_after(conversation.row, to_seq)
        .await
        .map_err(|e| crate::session::errors::store_error(e, &conversation.agent_id))?;
    let key: SessionId = conversation.session_id.clone();
    let (w, t, k) = (worktrees.clone(), worktree.clone(), key.to_string());
    let rewound = joined(tokio::spawn(async move {
        w.rewind(&t, &k, to_seq, until).await
    }))
    .await
    .map_err(|err| {
        let code = match err {
            WorktreeError::Invalid(_) => protocol::ErrorCode::Conflict,
            _ => protocol::ErrorCode::BackendUnavailable,
        };
        SessionError::new(
            code,
            format!("the worktree's files could not be put back, so nothing was rewound: {err}"),
        )
    })?;
    let before = match rewound {
        Rewind::Restored(before) => before,
        Rewind::NoCheckpoint => return rewind(Files::Unchanged).await,
        Rewind::OverCap => return rewind(Files::OverCap).await,
    };
    match rewind(Files::Restored).await {
        Ok(done) => {
            let (w, t, k) = (worktrees, worktree, key.to_string());
            let dropped = joined(tokio::spawn(async move {
                w.drop_checkpoints_from(&t, &k, to_seq).await
            }))
            .await;
            if let Err(err) = dropped {
                tracing::warn!(agent_id = %conversation.agent_id, error = %err, "could not drop the rewound turns' checkpoints");
            }
            Ok(done)
        }
        Err(err) => {
            let back = joined(tokio::spawn(async move {
                worktrees.undo_rewind(&worktree, &before).await
            }))
            .await;
            if let Err(back) = back {
                tracing::error!(agent_id = %conversation.agent_id, error = %back, "the rewind failed and the worktree's files could not go forward again");
            }
            Err(err)
        }
    }
}
