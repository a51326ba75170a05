//! Snapshots of a worktree's files as commits: a turn's checkpoint under a private reference,
//! the rewind that puts one back, what a turn changed, and the trees that changes and forks
//! are read from.

use super::*;
use crate::protocol::ChangeCounts;

/// What a rewind did with a worktree's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rewind {
    /// They are back; what the worktree held before is this commit, for
    /// [`Worktrees::undo_rewind`].
    Restored(String),
    /// They stay as they are: the turn has no checkpoint.
    NoCheckpoint,
    /// They stay as they are: the turn's checkpoint was skipped, the worktree's changed files
    /// being over the cap.
    OverCap,
}

impl Worktrees {
    /// Records the worktree's files as they are now as checkpoint `n` of conversation `key`
    /// (checkpoints are numbered in the order they are taken, and only the latest
    /// [`MAX_CHECKPOINTS`] are kept); returns their tree, which [`Self::changed_since`]
    /// compares with. None when its changed and new files come to more than the cap: a marker
    /// then says the checkpoint was skipped, and a rewind to it says so.
    ///
    /// # Errors
    /// `Git` when git fails.
    pub async fn checkpoint(
        &self,
        worktree: &Worktree,
        key: &str,
        n: i64,
    ) -> Result<Option<String>> {
        checkpoints_of(key)?;
        let _lock = self.lock(&worktree.repo).await;
        let taken = self
            .snapshot_within(worktree, "checkpoint", Some(self.max_checkpoint_bytes))
            .await?;
        let skipped = taken.is_none();
        let (target, tree) = match taken {
            Some((state, tree)) => (state, Some(tree)),
            None => {
                let head = self.git.ok(&worktree.path, &["rev-parse", "HEAD"]).await?;
                (head, None)
            }
        };
        let name = checkpoint_ref(key, n, skipped)?;
        self.git
            .ok(&worktree.path, &["update-ref", &name, &target])
            .await?;
        let mut kept = self.checkpoints(&worktree.repo, key).await?;
        // A turn taken again (requeued) checkpoints under the same number: the other form of
        // it, from before, would otherwise be found first by a rewind.
        let other = checkpoint_ref(key, n, !skipped)?;
        if let Some(i) = kept.iter().position(|(_, r, _)| *r == other) {
            self.git
                .ok(&worktree.repo, &["update-ref", "-d", &other])
                .await?;
            kept.remove(i);
        }
        if kept.len() > MAX_CHECKPOINTS {
            kept.sort();
            for (_, old, _) in &kept[..kept.len() - MAX_CHECKPOINTS] {
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
    /// checkpoints, in a fork's source, or its checkpoint failed) and nothing is touched, as
    /// when its checkpoint was skipped. What the worktree held before is kept under
    /// [`before_rewind_ref`] until the next rewind.
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
    ) -> Result<Rewind> {
        let _lock = self.lock(&worktree.repo).await;
        self.on_own_branch(worktree).await?;
        let found = self.checkpoints(&worktree.repo, key).await?;
        let first = found.into_iter().filter(|(at, ..)| *at >= seq).min();
        let Some((_, name, skipped)) = first.filter(|(at, ..)| until.is_none_or(|end| *at < end))
        else {
            return Ok(Rewind::NoCheckpoint);
        };
        if skipped {
            return Ok(Rewind::OverCap);
        }
        let Some(state) = self.commit_of(&worktree.repo, &name).await? else {
            return Ok(Rewind::NoCheckpoint);
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
        Ok(Rewind::Restored(before))
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
        for (at, name, _) in self.checkpoints(&worktree.repo, key).await? {
            if at >= n {
                self.git
                    .ok(&worktree.repo, &["update-ref", "-d", &name])
                    .await?;
            }
        }
        Ok(())
    }

    /// The numbered checkpoints of conversation `key`: their numbers, reference names and
    /// whether each is the marker of a skipped one.
    pub(super) async fn checkpoints(
        &self,
        repo: &Path,
        key: &str,
    ) -> Result<Vec<(i64, String, bool)>> {
        let prefix = checkpoints_of(key)?;
        Ok(self
            .private_refs(repo, key)
            .await?
            .into_iter()
            .filter_map(|name| {
                let rest = name.strip_prefix(&prefix)?;
                let (number, skipped) = match rest.strip_suffix(SKIPPED) {
                    Some(number) => (number, true),
                    None => (rest, false),
                };
                Some((number.parse().ok()?, name, skipped))
            })
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
        let taken = self.snapshot_within(worktree, what, None).await?;
        Ok(taken.expect("no cap"))
    }

    /// [`Self::snapshot_commit`], or None when the files changed and new since HEAD come to
    /// more than `cap` bytes.
    async fn snapshot_within(
        &self,
        worktree: &Worktree,
        what: &str,
        cap: Option<u64>,
    ) -> Result<Option<(String, String)>> {
        let Some(tree) = self.tree_within(worktree, cap).await? else {
            return Ok(None);
        };
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
        Ok(Some((commit, tree)))
    }

    /// The tree of the worktree's files as they are now.
    pub(super) async fn snapshot_tree(&self, worktree: &Worktree) -> Result<String> {
        let tree = self.tree_within(worktree, None).await?;
        Ok(tree.expect("no cap"))
    }

    /// The tree of the worktree's files as they are now, or None when the files changed and
    /// new since HEAD come to more than `cap` bytes. Written through an index of its own that
    /// starts, as `git stash` does, from what the worktree's index knows of its files (read
    /// against HEAD), so that only files that changed since are read again.
    async fn tree_within(&self, worktree: &Worktree, cap: Option<u64>) -> Result<Option<String>> {
        let index = self.dir.join(format!(".index-{}", uuid::Uuid::new_v4()));
        // Boxed: its git commands make a large future, which every snapshot would carry.
        let tree = Box::pin(self.write_tree(worktree, &index, cap)).await;
        let _ = tokio::fs::remove_file(&index).await;
        let _ = tokio::fs::remove_file(index.with_extension("lock")).await;
        tree
    }

    /// [`Self::tree_within`] through the index file `index`.
    async fn write_tree(
        &self,
        worktree: &Worktree,
        index: &Path,
        cap: Option<u64>,
    ) -> Result<Option<String>> {
        let dir = &worktree.path;
        let env = [("GIT_INDEX_FILE", index)];
        let run = async |args: &[&str]| {
            let out = self.git.run_capped(dir, args, &env, 16 << 20).await?;
            git::expect_ok(args, out)
        };
        let own = self
            .git
            .ok(dir, &["rev-parse", "--git-path", "index"])
            .await?;
        let copied = copy_index(&dir.join(own), index).await;
        // The copy read against HEAD keeps what it knows of unchanged files; an index that
        // can't be (none, or one with unresolved conflicts) is started afresh.
        if !copied || run(&["read-tree", "-m", "HEAD"]).await.is_err() {
            let _ = tokio::fs::remove_file(index).await;
            run(&["read-tree", "HEAD"]).await?;
            // Every file is read to know which changed: slow, but what follows is right. It
            // exits 1 when some did.
            let _ = run(&["update-index", "-q", "--refresh"]).await;
        }
        if let Some(cap) = cap {
            let listed = run(&[
                "ls-files",
                "-z",
                "--modified",
                "--others",
                "--exclude-standard",
            ])
            .await?;
            let mut bytes = 0u64;
            for path in listed.split('\0').filter(|p| !p.is_empty()) {
                if let Ok(meta) = tokio::fs::symlink_metadata(dir.join(path)).await
                    && meta.is_file()
                {
                    bytes += meta.len();
                    if bytes > cap {
                        return Ok(None);
                    }
                }
            }
        }
        run(&["add", "-A", "--", "."]).await?;
        run(&["write-tree"]).await.map(Some)
    }
}

/// Copies a worktree's index to `to` with its modification time: git tells a file changed in
/// the instant the index was written from one it recorded by that time, which a copy dated
/// now would hide. False when it could not.
async fn copy_index(from: &Path, to: &Path) -> bool {
    let Ok(modified) = tokio::fs::metadata(from).await.and_then(|m| m.modified()) else {
        return false;
    };
    if tokio::fs::copy(from, to).await.is_err() {
        return false;
    }
    match tokio::fs::OpenOptions::new().write(true).open(to).await {
        Ok(file) => file.into_std().await.set_modified(modified).is_ok(),
        Err(_) => false,
    }
}
