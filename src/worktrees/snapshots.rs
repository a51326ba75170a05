//! Snapshots of a worktree's files as commits: a turn's checkpoint under a private reference,
//! the rewind that puts one back, what a turn changed, and the trees that changes and forks
//! are read from.

use super::*;
use crate::protocol::ChangeCounts;

impl Worktrees {
    /// Records the worktree's files as they are now as checkpoint `n` of conversation `key`
    /// (checkpoints are numbered in the order they are taken, and only the latest
    /// [`MAX_CHECKPOINTS`] are kept); returns their tree, which [`Self::changed_since`]
    /// compares with.
    ///
    /// # Errors
    /// `Git` when git fails.
    pub async fn checkpoint(&self, worktree: &Worktree, key: &str, n: i64) -> Result<String> {
        let name = checkpoint_ref(key, n)?;
        let _lock = self.lock(&worktree.repo).await;
        let (state, tree) = self.snapshot_commit(worktree, "checkpoint").await?;
        self.git
            .ok(&worktree.path, &["update-ref", &name, &state])
            .await?;
        let mut kept = self.checkpoints(&worktree.repo, key).await?;
        if kept.len() > MAX_CHECKPOINTS {
            kept.sort();
            for (_, old) in &kept[..kept.len() - MAX_CHECKPOINTS] {
                self.git
                    .ok(&worktree.repo, &["update-ref", "-d", old])
                    .await?;
            }
        }
        Ok(tree)
    }

    /// Puts the worktree's files (and its branch) back as they were when the first turn after
    /// `seq` started: its checkpoint is the first numbered `seq` or later, and it must come
    /// before `until` (where that turn ended), else the turn has none (taken before
    /// checkpoints, in a fork's source, or its checkpoint failed) and nothing is touched. What
    /// the worktree held before is kept under [`before_rewind_ref`] until the next rewind,
    /// and returned for [`Self::undo_rewind`]. None when nothing was touched.
    ///
    /// # Errors
    /// `Invalid` when the worktree is on another branch; `Git` when git fails (the files are
    /// then as they were before, or the error says they could not be put back).
    pub async fn rewind(
        &self,
        worktree: &Worktree,
        key: &str,
        seq: i64,
        until: Option<i64>,
    ) -> Result<Option<String>> {
        let _lock = self.lock(&worktree.repo).await;
        self.on_own_branch(worktree).await?;
        let found = self.checkpoints(&worktree.repo, key).await?;
        let first = found.into_iter().filter(|(at, _)| *at >= seq).min();
        let Some((_, name)) = first.filter(|(at, _)| until.is_none_or(|end| *at < end)) else {
            return Ok(None);
        };
        let Some(state) = self.commit_of(&worktree.repo, &name).await? else {
            return Ok(None);
        };
        let (before, _) = self.snapshot_commit(worktree, "before rewind").await?;
        if let Err(err) = self.restore(worktree, &state).await {
            return Err(match self.restore(worktree, &before).await {
                Ok(()) => err,
                Err(back) => WorktreeError::Git(format!(
                    "{err}; and the files could not be put forward again: {back}"
                )),
            });
        }
        self.git
            .ok(
                &worktree.repo,
                &["update-ref", &before_rewind_ref(key)?, &before],
            )
            .await?;
        Ok(Some(before))
    }

    /// After a [`Self::rewind`] whose conversation could not be rewound: the files (and the
    /// branch) go forward to `before`, what the rewind returned.
    ///
    /// # Errors
    /// `Invalid` when the worktree is on another branch; `Git` when git fails.
    pub async fn undo_rewind(&self, worktree: &Worktree, before: &str) -> Result<()> {
        let _lock = self.lock(&worktree.repo).await;
        self.on_own_branch(worktree).await?;
        self.restore(worktree, before).await
    }

    /// Drops the checkpoints of conversation `key` numbered `n` or later (their turns were
    /// rewound away).
    ///
    /// # Errors
    /// `Git` when git fails.
    pub async fn drop_checkpoints_from(
        &self,
        worktree: &Worktree,
        key: &str,
        n: i64,
    ) -> Result<()> {
        let _lock = self.lock(&worktree.repo).await;
        for (at, name) in self.checkpoints(&worktree.repo, key).await? {
            if at >= n {
                self.git
                    .ok(&worktree.repo, &["update-ref", "-d", &name])
                    .await?;
            }
        }
        Ok(())
    }

    /// The numbered checkpoints of conversation `key`: their numbers and reference names.
    pub(super) async fn checkpoints(&self, repo: &Path, key: &str) -> Result<Vec<(i64, String)>> {
        let prefix = checkpoints_of(key)?;
        Ok(self
            .private_refs(repo, key)
            .await?
            .into_iter()
            .filter_map(|name| Some((name.strip_prefix(&prefix)?.parse().ok()?, name)))
            .collect())
    }

    /// Every private reference of conversation `key` (its checkpoints and the state before
    /// its last rewind).
    pub(super) async fn private_refs(&self, repo: &Path, key: &str) -> Result<Vec<String>> {
        let prefix = checkpoints_of(key)?;
        let names = self
            .git
            .ok(repo, &["for-each-ref", "--format=%(refname)", &prefix])
            .await?;
        Ok(names.lines().map(str::to_owned).collect())
    }

    /// Puts the worktree's files (and its branch) back as they were in `state`, a commit made
    /// by [`Self::snapshot_commit`]. The caller holds the repository's lock.
    async fn restore(&self, worktree: &Worktree, state: &str) -> Result<()> {
        let git = |args: &'static [&'static str]| self.git.ok(&worktree.path, args);
        // Files and index as in the checkpoint, then what it did not have is removed, then
        // the branch goes back to where it was, leaving the files as they are.
        self.git
            .ok(&worktree.path, &["read-tree", "-u", "--reset", state])
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

    /// What the worktree changed against its merge-base, when its files are no longer those
    /// of `tree` (a checkpoint's): None when nothing changed since.
    ///
    /// # Errors
    /// `Invalid` when the base is gone; `Git` when git fails.
    pub async fn changed_since(
        &self,
        worktree: &Worktree,
        tree: &str,
    ) -> Result<Option<ChangeCounts>> {
        let _lock = self.lock(&worktree.repo).await;
        let now = self.snapshot_tree(worktree).await?;
        if now == tree {
            return Ok(None);
        }
        let merge_base = self.merge_base(worktree).await?;
        let files = self.changed_files(worktree, &merge_base, &now).await?;
        Ok(Some(ChangeCounts {
            files: files.len() as u64,
            additions: files.iter().map(|f| f.additions).sum(),
            deletions: files.iter().map(|f| f.deletions).sum(),
            uncommitted: self.has_changes(&worktree.path).await?,
        }))
    }

    /// A commit of the worktree's files as they are now (tracked, changed and untracked but
    /// not ignored), whose parent is its HEAD, and its tree; the worktree's own index is left
    /// alone.
    pub(super) async fn snapshot_commit(
        &self,
        worktree: &Worktree,
        what: &str,
    ) -> Result<(String, String)> {
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
        let commit = self.git.ok(&worktree.path, &args).await?;
        Ok((commit, tree))
    }

    /// The tree of the worktree's files as they are now, written through an index of its own.
    pub(super) async fn snapshot_tree(&self, worktree: &Worktree) -> Result<String> {
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
}
