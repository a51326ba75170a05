//! Landing what a worktree changed: committing it on its branch, merging it into its base
//! (changing nothing on a conflict or over uncommitted work), or discarding it.

use super::*;

/// What merging a branch into its base would land.
pub(super) enum Landing {
    /// Nothing: the base has all of it already.
    Nothing,
    /// This tree.
    Tree(String),
    /// Nothing: these paths conflict.
    Conflict(Vec<String>),
}

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
    /// the base branch, has uncommitted changes; `Untracked` when files of that checkout git
    /// doesn't track are where the merge adds files; `Conflict` with the conflicting paths. In
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
        let tree = match Box::pin(self.landing(dir, &base, &head)).await? {
            Landing::Nothing => {
                return Ok(Merged {
                    commit: base,
                    changed: false,
                });
            }
            Landing::Conflict(paths) => return Err(WorktreeError::Conflict(paths)),
            Landing::Tree(tree) => tree,
        };
        let checkout = self.checkout_of(dir, &base_ref).await?;
        if let Some(checkout) = &checkout {
            Box::pin(self.would_be_overwritten(checkout, &base, &tree)).await?;
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
            // Nothing in the checkout is in the way: a fast-forward updates its branch, index
            // and files.
            Some(checkout) => {
                self.git
                    .ok(
                        &checkout,
                        &["merge", "-q", "--ff-only", "--no-verify", &commit],
                    )
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

    /// What merging `head` into `base` (commits) would land: nothing when `base` has all of
    /// it already (`head` is an ancestor, or merging it changes no file, as after a squash
    /// merge), the tree of the merge, or the paths that conflict.
    pub(super) async fn landing(&self, dir: &Path, base: &str, head: &str) -> Result<Landing> {
        let ancestor = self
            .git
            .run(dir, &["merge-base", "--is-ancestor", head, base])
            .await?;
        if ancestor.code == Some(0) {
            return Ok(Landing::Nothing);
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
                    base,
                    head,
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
                return Ok(Landing::Conflict(paths));
            }
            _ => return Err(git::failure(&["merge-tree"], &out)),
        }
        let base_tree = self
            .git
            .ok(dir, &["rev-parse", &format!("{base}^{{tree}}")])
            .await?;
        Ok(if tree == base_tree {
            Landing::Nothing
        } else {
            Landing::Tree(tree)
        })
    }

    /// Refuses a merge that would touch work in `checkout`, the base branch's working tree at
    /// commit `base`, before it moves to `tree`: changes to files git tracks, or files it
    /// doesn't track (ignored ones included) where the merge adds a file. Untracked files
    /// elsewhere are no obstacle.
    async fn would_be_overwritten(&self, checkout: &Path, base: &str, tree: &str) -> Result<()> {
        let tracked = self
            .git
            .ok(checkout, &["status", "--porcelain", "--untracked-files=no"])
            .await?;
        if !tracked.is_empty() {
            return Err(WorktreeError::Uncommitted {
                what: "the base branch's checkout",
                tree: checkout.to_path_buf(),
            });
        }
        let added = self
            .git
            .ok(
                checkout,
                &[
                    "diff",
                    "--no-renames",
                    "--name-only",
                    "--diff-filter=A",
                    "-z",
                    base,
                    tree,
                ],
            )
            .await?;
        // An added file, or a folder on its way that is something else, in the checkout.
        let mut in_the_way = std::collections::BTreeSet::new();
        for path in added.split('\0').filter(|p| !p.is_empty()) {
            let mut at = Some(Path::new(path));
            while let Some(here) = at.filter(|p| !p.as_os_str().is_empty()) {
                if let Ok(meta) = tokio::fs::symlink_metadata(checkout.join(here)).await
                    && (here == Path::new(path) || !meta.is_dir())
                {
                    in_the_way.insert(here.to_string_lossy().into_owned());
                }
                at = here.parent();
            }
        }
        if in_the_way.is_empty() {
            return Ok(());
        }
        // Those git tracks at the base are the merge's to change.
        let mut args = vec![
            "--literal-pathspecs",
            "ls-tree",
            "-z",
            "--name-only",
            base,
            "--",
        ];
        args.extend(in_the_way.iter().map(String::as_str));
        let tracked = self.git.ok(checkout, &args).await?;
        for path in tracked.split('\0') {
            in_the_way.remove(path);
        }
        if in_the_way.is_empty() {
            return Ok(());
        }
        Err(WorktreeError::Untracked {
            tree: checkout.to_path_buf(),
            paths: in_the_way.into_iter().collect(),
        })
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
