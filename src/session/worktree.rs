//! Conversations' git worktrees in the Manager: the one a new conversation asks for (or its
//! project root gives it), a fork's own, removal with the conversation, and the changes a
//! client reviews, commits, merges or discards.

use std::path::Path;
use std::sync::Arc;

use super::{Manager, SessionError};
use crate::protocol::{AgentId, Chat, ErrorCode, Principal, SessionId, WorktreeOption};
use crate::store::{NewSession, SessionRecord};
use crate::worktrees::{Changes, Merged, Request, Strategy, Worktree, WorktreeError, Worktrees};

/// The session error of a failed worktree operation.
fn worktree_error(err: WorktreeError) -> SessionError {
    let code = match &err {
        WorktreeError::NotARepository(_) | WorktreeError::Invalid(_) => ErrorCode::InvalidRequest,
        WorktreeError::Conflict(_)
        | WorktreeError::Uncommitted { .. }
        | WorktreeError::Untracked { .. } => ErrorCode::Conflict,
        WorktreeError::Git(_) => ErrorCode::BackendUnavailable,
    };
    let mut error = SessionError::new(code, err.to_string());
    if let WorktreeError::Conflict(paths) | WorktreeError::Untracked { paths, .. } = err {
        error.paths = paths;
    }
    error
}

fn invalid_options(message: String) -> SessionError {
    SessionError::new(
        ErrorCode::InvalidOptions,
        format!("`options.worktree`: {message}"),
    )
}

impl Manager {
    fn worktrees(&self) -> Result<&Worktrees, SessionError> {
        self.shared.worktrees.as_deref().ok_or_else(|| {
            SessionError::new(
                ErrorCode::Unsupported,
                "this server has no git program, so conversations can't have worktrees",
            )
        })
    }

    /// Makes the worktree a new conversation's first `chat` asks for (or its project root
    /// gives it unless it says `worktree: false`), named by `session_id`, and points `new`
    /// at it. The repository must lie wholly inside a project root `principal` may use.
    ///
    /// # Errors
    /// `invalid_options` when the chat's directory is in no git repository (asked for
    /// explicitly), the repository reaches outside the principal's roots, or the base or
    /// branch is refused; `unsupported` without git.
    pub(super) async fn new_worktree(
        &self,
        principal: &Principal,
        chat: &Chat,
        new: &mut NewSession,
    ) -> Result<(), SessionError> {
        let asked = chat.options.worktree.as_deref();
        let Some(cwd) = chat.options.cwd.as_deref() else {
            return match asked {
                None | Some(WorktreeOption::On(false)) => Ok(()),
                Some(_) => Err(invalid_options(
                    "a worktree needs `options.cwd`: a directory of a git repository inside \
                     a project root"
                        .into(),
                )),
            };
        };
        let roots = &self.shared.config.projects.roots;
        let by_default = crate::projects::worktrees_by_default(roots, principal, Path::new(cwd));
        let request = match asked {
            Some(WorktreeOption::On(false)) => return Ok(()),
            None if !by_default => return Ok(()),
            None | Some(WorktreeOption::On(true)) => Request::default(),
            Some(WorktreeOption::From { base, branch }) => Request {
                base: base.clone(),
                branch: branch.clone(),
            },
        };
        let worktrees = self.worktrees()?;
        let repo = match worktrees.repo_of(Path::new(cwd)).await {
            Ok(repo) => repo,
            // A root's default applies to the repositories under it only.
            Err(_) if asked.is_none() => return Ok(()),
            Err(err) => return Err(invalid_options(err.to_string())),
        };
        let top = repo.top.to_string_lossy();
        match crate::projects::resolve_dir(roots, principal, &top).await {
            Ok(canonical) if canonical == repo.top => {}
            // Nor to a repository reaching above the root: no worktree, as the listing says.
            _ if asked.is_none() => return Ok(()),
            _ => {
                return Err(invalid_options(format!(
                    "the repository `{top}` reaches outside the project roots you may use"
                )));
            }
        }
        let worktree = worktrees
            .create(
                &repo,
                new.session_id.as_str(),
                chat.agent_id.as_str(),
                &request,
            )
            .await
            .map_err(|err| match err {
                WorktreeError::Invalid(why) => invalid_options(why),
                err => worktree_error(err),
            })?;
        new.cwd = worktree.cwd().to_string_lossy().into_owned();
        new.worktree = Some(worktree);
        Ok(())
    }

    /// Gives the fork `new` of `source` a worktree of its own whose branch starts from the
    /// source's files as they are (uncommitted changes included), when the source has one.
    ///
    /// # Errors
    /// As for a new worktree.
    pub(super) async fn fork_worktree(
        &self,
        source: &SessionRecord,
        new: &mut NewSession,
    ) -> Result<(), SessionError> {
        let Some(worktree) = source.worktree() else {
            return Ok(());
        };
        let fork = self
            .worktrees()?
            .fork(
                &worktree,
                new.session_id.as_str(),
                new.agent_id.as_str(),
                None,
            )
            .await
            .map_err(worktree_error)?;
        new.cwd = fork.cwd().to_string_lossy().into_owned();
        new.worktree = Some(fork);
        Ok(())
    }

    /// Removes the worktree of a conversation that is gone (or was never stored); its branch
    /// stays unless its base has all of it. Returns the branch kept, if any. A failure is
    /// logged: the conversation is gone either way.
    pub(super) async fn drop_worktree(
        &self,
        session_id: &SessionId,
        worktree: &Worktree,
    ) -> Option<String> {
        let Some(worktrees) = self.shared.worktrees.as_deref() else {
            return Some(worktree.branch.clone());
        };
        match worktrees.remove(worktree, session_id.as_str()).await {
            Ok(true) => Some(worktree.branch.clone()),
            Ok(false) => None,
            Err(err) => {
                tracing::warn!(%session_id, error = %err, "could not remove a worktree");
                Some(worktree.branch.clone())
            }
        }
    }

    /// The worktree of `principal`'s conversation `agent_id`.
    async fn worktree_of(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
    ) -> Result<(Arc<Worktrees>, Worktree), SessionError> {
        let record = self.get(principal, agent_id).await?;
        let worktree = record.worktree().ok_or_else(|| {
            SessionError::new(
                ErrorCode::InvalidRequest,
                format!("conversation `{agent_id}` has no worktree"),
            )
        })?;
        self.worktrees()?;
        let worktrees = self.shared.worktrees.clone().expect("checked");
        Ok((worktrees, worktree))
    }

    /// Runs `change` on the conversation's worktree to its end even if the request that asked
    /// for it goes away meanwhile: git stopped halfway could leave a checkout half updated.
    async fn change_worktree<T, F>(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
        change: impl FnOnce(Arc<Worktrees>, Worktree) -> F,
    ) -> Result<T, SessionError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, WorktreeError>> + Send + 'static,
    {
        let (worktrees, worktree) = self.worktree_of(principal, agent_id).await?;
        // Not under an agent that may be writing files now, nor a rewind: a turn starts holding
        // the worktree until it counts as busy, and one that comes meanwhile waits.
        let busy = || {
            SessionError::new(
                ErrorCode::Busy,
                format!(
                    "a turn of conversation `{agent_id}` is running, starting or queued, or it \
                     is being rewound; wait for it to end or interrupt it"
                ),
            )
        };
        let hold = worktrees.try_hold(&worktree).ok_or_else(busy)?;
        if self.activity(principal, agent_id) == super::Activity::Busy {
            return Err(busy());
        }
        let changing = change(worktrees, worktree);
        tokio::spawn(async move {
            let changed = changing.await;
            drop(hold);
            changed
        })
        .await
        .map_err(|e| SessionError::new(ErrorCode::BackendUnavailable, e.to_string()))?
        .map_err(worktree_error)
    }

    /// What the conversation changed in its worktree.
    ///
    /// # Errors
    /// `unknown_agent`, `invalid_request` (no worktree, or its base is gone) or
    /// `backend_unavailable` when git fails.
    pub async fn changes(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
    ) -> Result<Changes, SessionError> {
        let (worktrees, worktree) = self.worktree_of(principal, agent_id).await?;
        let cap = self.shared.config.worktrees.max_diff_bytes;
        worktrees
            .changes(&worktree, cap)
            .await
            .map_err(worktree_error)
    }

    /// Commits everything in the conversation's worktree on its branch; None when there was
    /// nothing to commit.
    ///
    /// # Errors
    /// As [`Self::changes`].
    pub async fn commit_changes(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
        message: &str,
    ) -> Result<Option<String>, SessionError> {
        let message = message.to_owned();
        self.change_worktree(principal, agent_id, |w, wt| async move {
            w.commit(&wt, &message).await
        })
        .await
    }

    /// Merges the conversation's branch into its base.
    ///
    /// # Errors
    /// `conflict` (conflicting paths, or uncommitted changes in the worktree or in the base's
    /// checkout: nothing changed), or as [`Self::changes`].
    pub async fn merge_changes(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
        strategy: Strategy,
        message: Option<&str>,
    ) -> Result<Merged, SessionError> {
        let message = message.map(str::to_owned);
        self.change_worktree(principal, agent_id, |w, wt| async move {
            w.merge(&wt, strategy, message.as_deref()).await
        })
        .await
    }

    /// Returns the conversation's worktree to its base.
    ///
    /// # Errors
    /// As [`Self::changes`].
    pub async fn discard_changes(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
    ) -> Result<(), SessionError> {
        self.change_worktree(
            principal,
            agent_id,
            |w, wt| async move { w.discard(&wt).await },
        )
        .await
    }
}
