//! Landing what a worktree changed: committing it on its branch, merging it into its base
//! (changing nothing on a conflict or over uncommitted work), or discarding it.

use super::*;

impl Worktrees {
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

    /// The working tree that has `branch` (a full reference) checked out, if any.
    pub(super) async fn checkout_of(&self, dir: &Path, branch: &str) -> Result<Option<PathBuf>> {
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
}
