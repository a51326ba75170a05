//! Making a conversation's worktree: from a base on a new branch (checked by [`super::refs`])
//! or as a fork of another's current files, with the repository's `.worktreeinclude` files.

use super::*;

impl Worktrees {
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
    /// uncommitted changes included, with the same base, and the repository's
    /// `.worktreeinclude` files copied in as into a new one.
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
        let (state, _) = self.snapshot_commit(source, "fork").await?;
        let worktree = Worktree {
            path: self.path_for(key)?,
            branch: self.new_branch(&source.repo, branch, agent_id).await?,
            ..source.clone()
        };
        self.add(&worktree, &state).await?;
        self.copy_included(&worktree).await;
        Ok(worktree)
    }

    /// Where worktree `key` goes (the folder made 0700 if missing).
    pub(super) fn path_for(&self, key: &str) -> Result<PathBuf> {
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
    pub(super) async fn add(&self, worktree: &Worktree, commit: &str) -> Result<()> {
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
    pub(super) async fn resolve_base(
        &self,
        top: &Path,
        base: Option<&str>,
    ) -> Result<(String, bool, String)> {
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
    pub(super) async fn new_branch(
        &self,
        top: &Path,
        asked: Option<&str>,
        agent_id: &str,
    ) -> Result<String> {
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

    /// Copies the gitignored files the repository's `.worktreeinclude` names into the new
    /// worktree: regular files inside the repository only (never through a link), within
    /// [`MAX_INCLUDED_FILES`] and [`MAX_INCLUDED_BYTES`].
    pub(super) async fn copy_included(&self, worktree: &Worktree) {
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
