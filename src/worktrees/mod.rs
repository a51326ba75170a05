//! Git worktrees for conversations: a conversation's own worktree of a project repository on a
//! branch of its own, created from a base, snapshotted at each turn, forked, listed as changes,
//! committed, merged into its base, discarded and removed; one git operation at a time per
//! repository.
//!
//! Nothing here touches anyone's uncommitted work outside the conversation's own worktree: a
//! merge into a branch checked out with changes, or one with conflicts, changes nothing and
//! says why. Client-given branch names and bases are checked by [`refs`] before git sees them.
//!
//! Here: the types, setting up, finding a directory's repository and the helpers every
//! operation shares; `make` (create, fork), `snapshots` (checkpoints), `changes`, `land`
//! (commit, merge, discard) and `cleanup` (remove, prune) hold the operations; `git` runs git.

mod changes;
mod cleanup;
mod git;
mod land;
mod make;
pub mod refs;
mod snapshots;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dashmap::DashMap;
use serde::{Deserialize, Serialize};

pub use changes::{ChangedFile, Changes};
pub use git::{Git, MIN_VERSION, find_on_path};
pub use snapshots::Rewind;

/// Most files a `.worktreeinclude` copies into a new worktree.
const MAX_INCLUDED_FILES: usize = 1000;
/// Most bytes a `.worktreeinclude` copies into a new worktree.
const MAX_INCLUDED_BYTES: u64 = 64 << 20;
/// The private references under which turn checkpoints are kept (never on a branch).
const CHECKPOINTS: &str = "refs/agentmux/checkpoints";
/// How the marker of a skipped checkpoint ends (`…/<n>-skipped`).
const SKIPPED: &str = "-skipped";
/// Most checkpoints kept per conversation: a rewind further back restores messages only.
pub const MAX_CHECKPOINTS: usize = 200;

/// What went wrong with a worktree operation.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    /// The directory is not inside a git repository.
    #[error("{0}")]
    NotARepository(String),
    /// A branch name or base the client gave, or an operation this worktree can't do.
    #[error("{0}")]
    Invalid(String),
    /// The merge would conflict in these files; nothing was changed.
    #[error("merging would conflict in {}; nothing was changed", .0.join(", "))]
    Conflict(Vec<String>),
    /// A working tree that would be touched has uncommitted changes; nothing was changed.
    #[error("{what} has uncommitted changes in `{}`; nothing was changed", .tree.display())]
    Uncommitted {
        /// Which tree: the conversation's own, or the base branch's checkout.
        what: &'static str,
        /// Where it is.
        tree: PathBuf,
    },
    /// Files of the base branch's checkout that git does not track are where the merge adds
    /// files; nothing was changed.
    #[error(
        "`{}` has files git does not track where the merge adds files: {}; nothing was changed",
        .tree.display(),
        .paths.join(", ")
    )]
    Untracked {
        /// The base branch's checkout.
        tree: PathBuf,
        /// The files in the way.
        paths: Vec<String>,
    },
    /// Git failed or could not be run.
    #[error("{0}")]
    Git(String),
}

type Result<T> = std::result::Result<T, WorktreeError>;

/// Where a worktree should start and which branch it makes, as a client asked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// A branch or commit of the repository; its current branch when None.
    pub base: Option<String>,
    /// The new branch; `agentmux/<agent_id>` (made unique) when None.
    pub branch: Option<String>,
}

/// A conversation's worktree, as stored with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worktree {
    /// The worktree's top directory.
    pub path: PathBuf,
    /// The top directory of the repository it belongs to.
    pub repo: PathBuf,
    /// Its branch.
    pub branch: String,
    /// The branch (or commit) it started from and merges into.
    pub base: String,
    /// Whether `base` is a branch (a commit can't be merged into).
    pub base_is_branch: bool,
    /// Where in the repository the conversation's directory is (`""` for its top).
    pub subdir: PathBuf,
}

impl Worktree {
    /// The directory the agent runs in: the same place in the worktree as in the repository.
    pub fn cwd(&self) -> PathBuf {
        // Not `join("")`, which would end it with a `/`.
        match self.subdir.as_os_str().is_empty() {
            true => self.path.clone(),
            false => self.path.join(&self.subdir),
        }
    }

    fn base_ref(&self) -> String {
        if self.base_is_branch {
            format!("refs/heads/{}", self.base)
        } else {
            self.base.clone()
        }
    }
}

/// The repository a directory is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    /// Its top directory.
    pub top: PathBuf,
    /// The directory's place in it.
    pub subdir: PathBuf,
}

/// How a merge ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Merged {
    /// The base branch's commit after the merge.
    pub commit: String,
    /// False when the branch had nothing the base lacked (nothing was changed).
    pub changed: bool,
}

/// How merging lands on the base branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// A merge commit with both histories.
    Merge,
    /// One new commit on the base with all the branch's changes.
    Squash,
}

/// Refuses a `key` (a conversation's session id) that is not letters, digits and `-`: it names
/// a folder and references.
fn valid_key(key: &str) -> Result<()> {
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(WorktreeError::Invalid(format!(
            "`{key}` can't name a worktree"
        )));
    }
    Ok(())
}

/// The folder of conversation `key`'s private references.
fn checkpoints_of(key: &str) -> Result<String> {
    valid_key(key)?;
    Ok(format!("{CHECKPOINTS}/{key}/"))
}

/// The private reference of checkpoint `n` of conversation `key`, or of the marker saying it
/// was `skipped` (the worktree's changed files were over the cap).
fn checkpoint_ref(key: &str, n: i64, skipped: bool) -> Result<String> {
    let suffix = if skipped { SKIPPED } else { "" };
    Ok(format!("{}{n}{suffix}", checkpoints_of(key)?))
}

/// The private reference to what conversation `key`'s worktree held before its last rewind.
fn before_rewind_ref(key: &str) -> Result<String> {
    Ok(format!("{}before-rewind", checkpoints_of(key)?))
}

/// The server's worktrees: where they live, the git that runs them, one lock per repository
/// and one hold per worktree.
#[derive(Debug)]
pub struct Worktrees {
    git: Git,
    dir: PathBuf,
    locks: DashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>,
    holds: DashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>,
    /// Most bytes of changed and new files a checkpoint records; a larger one is skipped.
    max_checkpoint_bytes: u64,
}

/// Held by whoever acts on a worktree's files for longer than one git operation: a turn as it
/// starts (until it counts as running), a rewind, a commit, merge or discard.
pub type Hold = tokio::sync::OwnedMutexGuard<()>;

impl Worktrees {
    /// Worktrees under `dir` (created 0700 when the first is made), run by `git`, whose
    /// checkpoints record at most `max_checkpoint_bytes` of changed and new files.
    pub fn new(git: Git, dir: PathBuf, max_checkpoint_bytes: u64) -> Self {
        Worktrees {
            git,
            dir,
            locks: DashMap::new(),
            holds: DashMap::new(),
            max_checkpoint_bytes,
        }
    }

    /// The server's worktrees as `config` sets them up, under `<data-dir>/worktrees`: None
    /// when there is no usable git and nothing asks for worktrees (a conversation that asks
    /// for one is then refused).
    ///
    /// # Errors
    /// When `worktrees.git` is set or a project root makes worktrees the default, and that git
    /// can't be found or run or is older than [`MIN_VERSION`].
    pub async fn from_config(config: &crate::config::Config) -> anyhow::Result<Option<Self>> {
        let wanted =
            config.worktrees.git.is_some() || config.projects.roots.iter().any(|r| r.worktrees);
        let Some(program) = config.worktrees.git.clone().or_else(find_on_path) else {
            anyhow::ensure!(
                !wanted,
                "worktrees are asked for but there is no `git` on PATH (set worktrees.git)"
            );
            return Ok(None);
        };
        // Made now and named by its canonical path: git is run in the repositories, where a
        // relative data dir would mean another place.
        let dir = config.worktrees_dir();
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
        }
        let worktrees = Worktrees::new(
            Git::new(program, config.worktrees.run_hooks),
            std::fs::canonicalize(&dir)?,
            config.worktrees.max_checkpoint_bytes,
        );
        match worktrees.check_git().await {
            Ok(_) => Ok(Some(worktrees)),
            Err(err) if wanted => anyhow::bail!("{err}"),
            Err(err) => {
                tracing::warn!(error = %err, "conversations can't have worktrees");
                Ok(None)
            }
        }
    }

    /// Checks that the git program runs and is at least [`MIN_VERSION`].
    ///
    /// # Errors
    /// `Git` saying which version was found and which is needed.
    pub async fn check_git(&self) -> Result<(u32, u32)> {
        let found = self.git.version().await?;
        if found < MIN_VERSION {
            return Err(WorktreeError::Git(format!(
                "worktrees need git {}.{} or later; found {}.{}",
                MIN_VERSION.0, MIN_VERSION.1, found.0, found.1
            )));
        }
        Ok(found)
    }

    /// The repository `dir` is in.
    ///
    /// # Errors
    /// `NotARepository` when it is in none (or in a bare one).
    pub async fn repo_of(&self, dir: &Path) -> Result<Repo> {
        let out = self
            .git
            .run(dir, &["rev-parse", "--show-toplevel", "--show-prefix"])
            .await?;
        let text = out.text();
        let mut lines = text.lines();
        match (out.code, lines.next()) {
            (Some(0), Some(top)) if !top.is_empty() => Ok(Repo {
                top: PathBuf::from(top),
                subdir: PathBuf::from(lines.next().unwrap_or("").trim_end_matches('/')),
            }),
            _ => Err(WorktreeError::NotARepository(format!(
                "`{}` is not inside a git repository",
                dir.display()
            ))),
        }
    }

    /// The lock of the repository at `top`, held while one operation runs on it.
    async fn lock(&self, top: &Path) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = self.locks.entry(top.to_path_buf()).or_default().clone();
        lock.lock_owned().await
    }

    /// Waits for `worktree`'s hold (see [`Hold`]).
    pub async fn hold(&self, worktree: &Worktree) -> Hold {
        self.hold_of(worktree).lock_owned().await
    }

    /// `worktree`'s hold, or None while another has it.
    pub fn try_hold(&self, worktree: &Worktree) -> Option<Hold> {
        self.hold_of(worktree).try_lock_owned().ok()
    }

    fn hold_of(&self, worktree: &Worktree) -> Arc<tokio::sync::Mutex<()>> {
        self.holds.entry(worktree.path.clone()).or_default().clone()
    }

    /// Refuses an operation on a worktree whose HEAD is not on its own branch (its agent
    /// switched branches): it would act on another branch, perhaps one of the user's.
    pub(super) async fn on_own_branch(&self, worktree: &Worktree) -> Result<()> {
        let head = self
            .git
            .run(&worktree.path, &["symbolic-ref", "--quiet", "HEAD"])
            .await?;
        if head.code == Some(0) && head.text() == format!("refs/heads/{}", worktree.branch) {
            return Ok(());
        }
        Err(WorktreeError::Invalid(format!(
            "the worktree is not on its branch `{}` (it was switched to another branch or \
             commit); switch it back first",
            worktree.branch
        )))
    }

    /// The commit `rev` (a full reference or a commit id) names, if any.
    async fn commit_of(&self, dir: &Path, rev: &str) -> Result<Option<String>> {
        let out = self
            .git
            .run(
                dir,
                &[
                    "rev-parse",
                    "--verify",
                    "--quiet",
                    "--end-of-options",
                    &format!("{rev}^{{commit}}"),
                ],
            )
            .await?;
        Ok((out.code == Some(0)).then(|| out.text()))
    }

    /// Whether the working tree at `dir` has changes not committed (untracked files count).
    async fn has_changes(&self, dir: &Path) -> Result<bool> {
        let status = self
            .git
            .ok(dir, &["status", "--porcelain", "--untracked-files=normal"])
            .await?;
        Ok(!status.is_empty())
    }

    /// `-c user.name=… -c user.email=…` when the repository has no identity of its own for
    /// commits, so that committing works on a server without a git identity.
    async fn identity(&self, dir: &Path) -> Result<Vec<String>> {
        let email = self
            .git
            .run(dir, &["config", "--get", "user.email"])
            .await?;
        if email.code == Some(0) && !email.text().is_empty() {
            return Ok(Vec::new());
        }
        Ok([
            "-c",
            "user.name=agentmux",
            "-c",
            "user.email=agentmux@localhost",
        ]
        .map(String::from)
        .to_vec())
    }
}
