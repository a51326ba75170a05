//! Removing worktrees: with their conversation (its branch kept unless merged), and at start
//! the ones whose conversation is gone.

use super::*;

impl Worktrees {
    /// Removes the worktree of conversation `key` and its checkpoints; its branch too when
    /// the base has everything on it (merged, or squash-merged: merging it would change no
    /// file). Returns whether the branch was kept.
    ///
    /// # Errors
    /// `Git` when git fails.
    pub async fn remove(&self, worktree: &Worktree, key: &str) -> Result<bool> {
        valid_key(key)?;
        // A commit, merge or discard that holds it runs to its end first.
        let _hold = self.hold(worktree).await;
        let _lock = self.lock(&worktree.repo).await;
        self.holds.remove(&worktree.path);
        let repo = &worktree.repo;
        let path = worktree.path.to_string_lossy();
        if tokio::fs::symlink_metadata(&worktree.path).await.is_ok() {
            self.git
                .ok(repo, &["worktree", "remove", "--force", "--force", &path])
                .await?;
        }
        self.git.ok(repo, &["worktree", "prune"]).await?;
        for name in self.private_refs(repo, key).await? {
            self.git.ok(repo, &["update-ref", "-d", &name]).await?;
        }
        let branch = format!("refs/heads/{}", worktree.branch);
        let Some(tip) = self.commit_of(repo, &branch).await? else {
            return Ok(false);
        };
        let landed = match self.commit_of(repo, &worktree.base_ref()).await? {
            Some(base) if worktree.base_is_branch => matches!(
                self.landing(repo, &base, &tip).await?,
                land::Landing::Nothing
            ),
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
                    // Its checkpoints go too (it was named by a valid key: checked above).
                    let prefix = checkpoints_of(&name).unwrap_or_default();
                    let refs = self
                        .git
                        .ok(
                            &self.dir,
                            &[&git_dir, "for-each-ref", "--format=%(refname)", &prefix],
                        )
                        .await
                        .unwrap_or_default();
                    for name in refs.lines() {
                        let _ = self
                            .git
                            .run(&self.dir, &[&git_dir, "update-ref", "-d", name])
                            .await;
                    }
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
}
