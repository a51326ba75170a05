//! Snapshots of a worktree's files as commits: a turn's checkpoint under a private reference
//! and its restore, and the trees that changes and forks are read from.

use super::*;

impl Worktrees {
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

    /// A commit of the worktree's files as they are now (tracked, changed and untracked but
    /// not ignored), whose parent is its HEAD; the worktree's own index is left alone.
    pub(super) async fn snapshot_commit(&self, worktree: &Worktree, what: &str) -> Result<String> {
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
