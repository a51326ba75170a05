//! Git worktrees for conversations: a conversation's own worktree of a project repository on a
//! branch of its own, created from a base, snapshotted at each turn, forked, listed as changes,
//! committed, merged into its base, discarded and removed; one git operation at a time per
//! repository.
//!
//! Nothing here touches anyone's uncommitted work outside the conversation's own worktree: a
//! merge into a branch checked out with changes, or one with conflicts, changes nothing and
//! says why. Client-given branch names and bases are checked by [`refs`] before git sees them.

mod changes;
mod git;
pub mod refs;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dashmap::DashMap;
use serde::{Deserialize, Serialize};

pub use changes::{ChangedFile, Changes};
pub use git::{Git, MIN_VERSION, find_on_path};

/// Most files a `.worktreeinclude` copies into a new worktree.
const MAX_INCLUDED_FILES: usize = 1000;
/// Most bytes a `.worktreeinclude` copies into a new worktree.
const MAX_INCLUDED_BYTES: u64 = 64 << 20;
/// The private references under which turn checkpoints are kept (never on a branch).
const CHECKPOINTS: &str = "refs/agentmux/checkpoints";

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
        self.path.join(&self.subdir)
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

/// The private reference of checkpoint `n` of conversation `key`.
fn checkpoint_ref(key: &str, n: i64) -> Result<String> {
    valid_key(key)?;
    Ok(format!("{CHECKPOINTS}/{key}/{n}"))
}

/// The server's worktrees: where they live, the git that runs them, one lock per repository.
#[derive(Debug)]
pub struct Worktrees {
    git: Git,
    dir: PathBuf,
    locks: DashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>,
}

impl Worktrees {
    /// Worktrees under `dir` (created 0700 when the first is made), run by `git`.
    pub fn new(git: Git, dir: PathBuf) -> Self {
        Worktrees {
            git,
            dir,
            locks: DashMap::new(),
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

    /// Makes a worktree named `key` (a conversation's session id) for `agent_id` in `repo`,
    /// as `request` asks, with the repository's `.worktreeinclude` files copied in.
    ///
    /// # Errors
    /// `Invalid` for a bad or taken branch name or an unknown base; `Git` when git fails.
    pub async fn create(
        &self,
        repo: &Repo,
        key: &str,
        agent_id: &str,
        request: &Request,
    ) -> Result<Worktree> {
        let _lock = self.lock(&repo.top).await;
        let (base, base_is_branch, commit) = self
            .resolve_base(&repo.top, request.base.as_deref())
            .await?;
        let branch = self
            .new_branch(&repo.top, request.branch.as_deref(), agent_id)
            .await?;
        let worktree = Worktree {
            path: self.path_for(key)?,
            repo: repo.top.clone(),
            branch,
            base,
            base_is_branch,
            subdir: repo.subdir.clone(),
        };
        self.add(&worktree, &commit).await?;
        self.copy_included(&worktree).await;
        Ok(worktree)
    }

    /// A worktree named `key` for `agent_id` whose branch starts from `source`'s current state,
    /// uncommitted changes included, with the same base.
    ///
    /// # Errors
    /// As [`Self::create`].
    pub async fn fork(
        &self,
        source: &Worktree,
        key: &str,
        agent_id: &str,
        branch: Option<&str>,
    ) -> Result<Worktree> {
        let _lock = self.lock(&source.repo).await;
        let state = self.snapshot_commit(source, "fork").await?;
        let worktree = Worktree {
            path: self.path_for(key)?,
            branch: self.new_branch(&source.repo, branch, agent_id).await?,
            ..source.clone()
        };
        self.add(&worktree, &state).await?;
        Ok(worktree)
    }

    /// Records the worktree's files as they are now as checkpoint `n` of conversation `key`.
    ///
    /// # Errors
    /// `Git` when git fails.
    pub async fn checkpoint(&self, worktree: &Worktree, key: &str, n: i64) -> Result<()> {
        let name = checkpoint_ref(key, n)?;
        let _lock = self.lock(&worktree.repo).await;
        let state = self.snapshot_commit(worktree, "checkpoint").await?;
        self.git
            .ok(&worktree.path, &["update-ref", &name, &state])
            .await?;
        Ok(())
    }

    /// Puts the worktree's files (and its branch) back as they were at checkpoint `n`.
    ///
    /// # Errors
    /// `Invalid` when there is no such checkpoint; `Git` when git fails.
    pub async fn restore(&self, worktree: &Worktree, key: &str, n: i64) -> Result<()> {
        let name = checkpoint_ref(key, n)?;
        let _lock = self.lock(&worktree.repo).await;
        self.on_own_branch(worktree).await?;
        let Some(state) = self.commit_of(&worktree.path, &name).await? else {
            return Err(WorktreeError::Invalid(format!(
                "no checkpoint of the worktree's files at turn {n}"
            )));
        };
        let git = |args: &'static [&'static str]| self.git.ok(&worktree.path, args);
        // Files and index as in the checkpoint, then what it did not have is removed, then
        // the branch goes back to where it was, leaving the files as they are.
        self.git
            .ok(&worktree.path, &["read-tree", "-u", "--reset", &state])
            .await?;
        git(&["clean", "-f", "-d", "-q"]).await?;
        self.git
            .ok(
                &worktree.path,
                &["reset", "-q", "--soft", &format!("{state}^")],
            )
            .await?;
        git(&["reset", "-q"]).await?;
        Ok(())
    }

    /// Commits everything in the worktree on its branch; None when there was nothing to commit.
    ///
    /// # Errors
    /// `Git` when git fails.
    pub async fn commit(&self, worktree: &Worktree, message: &str) -> Result<Option<String>> {
        let _lock = self.lock(&worktree.repo).await;
        self.on_own_branch(worktree).await?;
        self.git
            .ok(&worktree.path, &["add", "-A", "--", "."])
            .await?;
        let staged = self
            .git
            .run(&worktree.path, &["diff", "--cached", "--quiet"])
            .await?;
        if staged.code == Some(0) {
            return Ok(None);
        }
        let mut args = self.identity(&worktree.path).await?;
        args.extend(["commit", "-q", "--no-verify", "-m", message].map(String::from));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.git.ok(&worktree.path, &args).await?;
        Ok(Some(
            self.git.ok(&worktree.path, &["rev-parse", "HEAD"]).await?,
        ))
    }

    /// Merges what is committed on the worktree's branch into its base branch.
    ///
    /// # Errors
    /// `Invalid` when the base is a commit; `Uncommitted` when the worktree, or a checkout of
    /// the base branch, has uncommitted changes; `Conflict` with the conflicting paths. In
    /// each case no reference or file has changed.
    pub async fn merge(
        &self,
        worktree: &Worktree,
        strategy: Strategy,
        message: Option<&str>,
    ) -> Result<Merged> {
        if !worktree.base_is_branch {
            return Err(WorktreeError::Invalid(format!(
                "this worktree started from commit {}, not a branch: there is nothing to merge into",
                worktree.base
            )));
        }
        let _lock = self.lock(&worktree.repo).await;
        self.on_own_branch(worktree).await?;
        if self.has_changes(&worktree.path).await? {
            return Err(WorktreeError::Uncommitted {
                what: "the conversation's worktree",
                tree: worktree.path.clone(),
            });
        }
        let dir = &worktree.path;
        let base_ref = worktree.base_ref();
        let Some(base) = self.commit_of(dir, &base_ref).await? else {
            return Err(WorktreeError::Invalid(format!(
                "the base branch `{}` no longer exists",
                worktree.base
            )));
        };
        let head = self.git.ok(dir, &["rev-parse", "HEAD"]).await?;
        let merged = self
            .git
            .run(dir, &["merge-base", "--is-ancestor", &head, &base])
            .await?;
        if merged.code == Some(0) {
            return Ok(Merged {
                commit: base,
                changed: false,
            });
        }
        let out = self
            .git
            .run(
                dir,
                &[
                    "merge-tree",
                    "--write-tree",
                    "--no-messages",
                    "--name-only",
                    "-z",
                    &base,
                    &head,
                ],
            )
            .await?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut fields = text.split('\0').filter(|f| !f.is_empty());
        let tree = fields.next().unwrap_or_default().to_owned();
        match out.code {
            Some(0) => {}
            Some(1) => {
                let mut paths: Vec<String> = fields.map(str::to_owned).collect();
                paths.sort();
                paths.dedup();
                return Err(WorktreeError::Conflict(paths));
            }
            _ => return Err(git::failure(&["merge-tree"], &out)),
        }
        let checkout = self.checkout_of(dir, &base_ref).await?;
        if let Some(tree) = &checkout
            && self.has_changes(tree).await?
        {
            return Err(WorktreeError::Uncommitted {
                what: "the base branch's checkout",
                tree: tree.clone(),
            });
        }
        let default_message = match strategy {
            Strategy::Merge => format!("Merge branch '{}'", worktree.branch),
            Strategy::Squash => format!("Squashed branch '{}'", worktree.branch),
        };
        let mut args = self.identity(dir).await?;
        args.extend([
            "commit-tree".to_owned(),
            tree,
            "-p".to_owned(),
            base.clone(),
        ]);
        if strategy == Strategy::Merge {
            args.extend(["-p".to_owned(), head]);
        }
        args.extend([
            "-m".to_owned(),
            message.unwrap_or(&default_message).to_owned(),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let commit = self.git.ok(dir, &args).await?;
        match checkout {
            // The checkout is clean: a fast-forward updates its branch, index and files.
            Some(tree) => {
                self.git
                    .ok(&tree, &["merge", "-q", "--ff-only", "--no-verify", &commit])
                    .await?;
            }
            None => {
                self.git
                    .ok(dir, &["update-ref", &base_ref, &commit, &base])
                    .await?;
            }
        }
        Ok(Merged {
            commit,
            changed: true,
        })
    }

    /// Returns the worktree (files and branch) to its base as it is now.
    ///
    /// # Errors
    /// `Invalid` when the base branch is gone; `Git` when git fails.
    pub async fn discard(&self, worktree: &Worktree) -> Result<()> {
        let _lock = self.lock(&worktree.repo).await;
        self.on_own_branch(worktree).await?;
        let Some(base) = self.commit_of(&worktree.path, &worktree.base_ref()).await? else {
            return Err(WorktreeError::Invalid(format!(
                "the base `{}` no longer exists",
                worktree.base
            )));
        };
        self.git
            .ok(&worktree.path, &["reset", "-q", "--hard", &base])
            .await?;
        self.git
            .ok(&worktree.path, &["clean", "-f", "-d", "-q"])
            .await?;
        Ok(())
    }

    /// Removes the worktree of conversation `key` and its checkpoints; its branch too when
    /// the base has everything on it. Returns whether the branch was kept.
    ///
    /// # Errors
    /// `Git` when git fails.
    pub async fn remove(&self, worktree: &Worktree, key: &str) -> Result<bool> {
        valid_key(key)?;
        let _lock = self.lock(&worktree.repo).await;
        let repo = &worktree.repo;
        let path = worktree.path.to_string_lossy();
        if tokio::fs::symlink_metadata(&worktree.path).await.is_ok() {
            self.git
                .ok(repo, &["worktree", "remove", "--force", "--force", &path])
                .await?;
        }
        self.git.ok(repo, &["worktree", "prune"]).await?;
        let checkpoints = self
            .git
            .ok(
                repo,
                &[
                    "for-each-ref",
                    "--format=%(refname)",
                    &format!("{CHECKPOINTS}/{key}/"),
                ],
            )
            .await?;
        for name in checkpoints.lines() {
            self.git.ok(repo, &["update-ref", "-d", name]).await?;
        }
        let branch = format!("refs/heads/{}", worktree.branch);
        let Some(tip) = self.commit_of(repo, &branch).await? else {
            return Ok(false);
        };
        let landed = match self.commit_of(repo, &worktree.base_ref()).await? {
            Some(base) if worktree.base_is_branch => {
                self.git
                    .run(repo, &["merge-base", "--is-ancestor", &tip, &base])
                    .await?
                    .code
                    == Some(0)
            }
            _ => false,
        };
        if landed {
            self.git
                .ok(repo, &["update-ref", "-d", &branch, &tip])
                .await?;
        }
        Ok(!landed)
    }

    /// The names (conversations' session ids) of the worktrees there are.
    pub async fn names(&self) -> Vec<String> {
        let mut names = Vec::new();
        let Ok(mut entries) = tokio::fs::read_dir(&self.dir).await else {
            return names;
        };
        while let Ok(Some(entry)) = entries.next_entry().await {
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type().await.is_ok_and(|t| t.is_dir()) && valid_key(&name).is_ok() {
                names.push(name);
            }
        }
        names
    }

    /// Removes the worktrees whose conversation `keep` does not know; returns how many.
    pub async fn prune(&self, keep: impl Fn(&str) -> bool) -> usize {
        let Ok(mut entries) = tokio::fs::read_dir(&self.dir).await else {
            return 0;
        };
        let mut pruned = 0;
        while let Ok(Some(entry)) = entries.next_entry().await {
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_dir = entry.file_type().await.is_ok_and(|t| t.is_dir());
            if keep(&name) || !is_dir || valid_key(&name).is_err() {
                continue;
            }
            let path = entry.path();
            // The worktree's `.git` file names its repository's administrative folder.
            let common = tokio::fs::read_to_string(path.join(".git"))
                .await
                .ok()
                .and_then(|text| {
                    let admin = PathBuf::from(text.trim().strip_prefix("gitdir: ")?);
                    Some(admin.parent()?.parent()?.to_path_buf())
                });
            let removed = match common {
                Some(common) => {
                    // Locked as every other operation on it: by the repository's top.
                    let _lock = match common.parent() {
                        Some(top) => Some(self.lock(top).await),
                        None => None,
                    };
                    let git_dir = format!("--git-dir={}", common.display());
                    let target = path.to_string_lossy();
                    let out = self
                        .git
                        .run(
                            &self.dir,
                            &[
                                &git_dir, "worktree", "remove", "--force", "--force", &target,
                            ],
                        )
                        .await;
                    let _ = self
                        .git
                        .run(&self.dir, &[&git_dir, "worktree", "prune"])
                        .await;
                    out.is_ok_and(|o| o.code == Some(0))
                }
                None => false,
            };
            if !removed {
                let _ = tokio::fs::remove_dir_all(&path).await;
            }
            tracing::info!(worktree = %path.display(), "removed a worktree no conversation uses");
            pruned += 1;
        }
        pruned
    }

    /// The lock of the repository at `top`, held while one operation runs on it.
    async fn lock(&self, top: &Path) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = self.locks.entry(top.to_path_buf()).or_default().clone();
        lock.lock_owned().await
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

    /// Where worktree `key` goes (the folder made 0700 if missing).
    fn path_for(&self, key: &str) -> Result<PathBuf> {
        valid_key(key)?;
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|e| {
                WorktreeError::Git(format!("cannot create {}: {e}", self.dir.display()))
            })?;
        Ok(self.dir.join(key))
    }

    /// `git worktree add` of `worktree` at `commit` on its new branch.
    async fn add(&self, worktree: &Worktree, commit: &str) -> Result<()> {
        let path = worktree.path.to_string_lossy();
        self.git
            .ok(
                &worktree.repo,
                &[
                    "worktree",
                    "add",
                    "-q",
                    "--no-track",
                    "-b",
                    &worktree.branch,
                    &path,
                    commit,
                ],
            )
            .await?;
        Ok(())
    }

    /// The base a client named (or the repository's current branch) as (name, is a branch,
    /// commit).
    async fn resolve_base(&self, top: &Path, base: Option<&str>) -> Result<(String, bool, String)> {
        let Some(base) = base else {
            let current = self
                .git
                .run(top, &["symbolic-ref", "--quiet", "--short", "HEAD"])
                .await?;
            let name = current.text();
            if current.code != Some(0) || name.is_empty() {
                return Err(WorktreeError::Invalid(
                    "the repository has no current branch (a detached HEAD): name a base".into(),
                ));
            }
            let commit = self
                .commit_of(top, &format!("refs/heads/{name}"))
                .await?
                .ok_or_else(|| {
                    WorktreeError::Invalid(format!(
                        "the repository's current branch `{name}` has no commit yet"
                    ))
                })?;
            return Ok((name, true, commit));
        };
        let unknown = || {
            WorktreeError::Invalid(format!(
                "base `{base}` is neither a branch nor a commit of the repository"
            ))
        };
        if refs::branch_error(base).is_none()
            && let Some(commit) = self.commit_of(top, &format!("refs/heads/{base}")).await?
        {
            return Ok((base.to_owned(), true, commit));
        }
        if refs::is_commit_id(base)
            && let Some(commit) = self.commit_of(top, base).await?
            && commit.starts_with(&base.to_ascii_lowercase())
        {
            return Ok((commit.clone(), false, commit));
        }
        Err(unknown())
    }

    /// The branch to make: the one asked for (which must not exist yet), or a free
    /// `agentmux/<agent_id>`.
    async fn new_branch(&self, top: &Path, asked: Option<&str>, agent_id: &str) -> Result<String> {
        if let Some(name) = asked {
            if let Some(why) = refs::branch_error(name) {
                return Err(WorktreeError::Invalid(why));
            }
            if self
                .commit_of(top, &format!("refs/heads/{name}"))
                .await?
                .is_some()
            {
                return Err(WorktreeError::Invalid(format!(
                    "branch `{name}` exists already"
                )));
            }
            return Ok(name.to_owned());
        }
        let stem = refs::default_branch(agent_id);
        for n in 1..=100 {
            let name = if n == 1 {
                stem.clone()
            } else {
                format!("{stem}-{n}")
            };
            if self
                .commit_of(top, &format!("refs/heads/{name}"))
                .await?
                .is_none()
            {
                return Ok(name);
            }
        }
        Err(WorktreeError::Invalid(format!(
            "branches `{stem}` to `{stem}-100` exist already: name a branch"
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

    /// The working tree that has `branch` (a full reference) checked out, if any.
    async fn checkout_of(&self, dir: &Path, branch: &str) -> Result<Option<PathBuf>> {
        let list = self
            .git
            .ok(dir, &["worktree", "list", "--porcelain", "-z"])
            .await?;
        let mut path = None;
        for field in list.split('\0') {
            if let Some(p) = field.strip_prefix("worktree ") {
                path = Some(PathBuf::from(p));
            } else if field.strip_prefix("branch ") == Some(branch) {
                return Ok(path);
            }
        }
        Ok(None)
    }

    /// A commit of the worktree's files as they are now (tracked, changed and untracked but
    /// not ignored), whose parent is its HEAD; the worktree's own index is left alone.
    async fn snapshot_commit(&self, worktree: &Worktree, what: &str) -> Result<String> {
        let tree = self.snapshot_tree(worktree).await?;
        let mut args = self.identity(&worktree.path).await?;
        args.extend(
            [
                "commit-tree",
                &tree,
                "-p",
                "HEAD",
                "-m",
                &format!("agentmux {what}"),
            ]
            .map(String::from),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.git.ok(&worktree.path, &args).await
    }

    /// The tree of the worktree's files as they are now, written through an index of its own.
    async fn snapshot_tree(&self, worktree: &Worktree) -> Result<String> {
        let index = self.dir.join(format!(".index-{}", uuid::Uuid::new_v4()));
        let env = [("GIT_INDEX_FILE", index.as_path())];
        let run = async {
            for args in [&["read-tree", "HEAD"][..], &["add", "-A", "--", "."]] {
                let out = self
                    .git
                    .run_capped(&worktree.path, args, &env, 1 << 20)
                    .await?;
                git::expect_ok(args, out)?;
            }
            let args = ["write-tree"];
            let out = self
                .git
                .run_capped(&worktree.path, &args, &env, 1 << 20)
                .await?;
            git::expect_ok(&args, out)
        };
        let tree = run.await;
        let _ = tokio::fs::remove_file(&index).await;
        tree
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

    /// Copies the gitignored files the repository's `.worktreeinclude` names into the new
    /// worktree: regular files inside the repository only (never through a link), within
    /// [`MAX_INCLUDED_FILES`] and [`MAX_INCLUDED_BYTES`].
    async fn copy_included(&self, worktree: &Worktree) {
        let top = &worktree.repo;
        let include = top.join(".worktreeinclude");
        if !tokio::fs::symlink_metadata(&include)
            .await
            .is_ok_and(|m| m.is_file())
        {
            return;
        }
        let from = format!("--exclude-from={}", include.display());
        let listed = |args: Vec<String>| async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            self.git
                .ok(top, &args)
                .await
                .map(|text| {
                    text.split('\0')
                        .filter(|p| !p.is_empty())
                        .map(str::to_owned)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        };
        let named = listed(
            ["ls-files", "-z", "--others", "--ignored", &from]
                .map(String::from)
                .to_vec(),
        )
        .await;
        let ignored: std::collections::HashSet<String> = listed(
            [
                "ls-files",
                "-z",
                "--others",
                "--ignored",
                "--exclude-standard",
            ]
            .map(String::from)
            .to_vec(),
        )
        .await
        .into_iter()
        .collect();
        let (mut files, mut bytes) = (0, 0);
        for rel in named.iter().filter(|p| ignored.contains(*p)) {
            let source = top.join(rel);
            let inside = tokio::fs::canonicalize(&source)
                .await
                .is_ok_and(|c| c == source);
            let Ok(meta) = tokio::fs::symlink_metadata(&source).await else {
                continue;
            };
            if !inside || !meta.is_file() {
                continue;
            }
            if files >= MAX_INCLUDED_FILES || bytes + meta.len() > MAX_INCLUDED_BYTES {
                tracing::warn!(repo = %top.display(), "`.worktreeinclude` names more than a worktree takes; the rest is not copied");
                break;
            }
            // Never over what the base checked out (a link there would lead the copy out of
            // the worktree), and never into a folder reached through a link.
            let target = worktree.path.join(rel);
            if tokio::fs::symlink_metadata(&target).await.is_ok() {
                continue;
            }
            let Some(parent) = target.parent() else {
                continue;
            };
            let _ = tokio::fs::create_dir_all(parent).await;
            if !tokio::fs::canonicalize(parent)
                .await
                .is_ok_and(|real| real == parent && real.starts_with(&worktree.path))
            {
                continue;
            }
            if tokio::fs::copy(&source, &target).await.is_ok() {
                files += 1;
                bytes += meta.len();
            }
        }
    }
}
