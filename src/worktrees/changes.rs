//! What a conversation changed in its worktree: the files changed against the merge-base with
//! its base (committed, uncommitted and untracked alike) with their line counts, and the
//! unified diff, capped in bytes.

use serde::Serialize;

use super::{Result, Worktree, WorktreeError, Worktrees, git};

/// What a worktree changed against where its branch left its base.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Changes {
    /// The worktree's branch.
    pub branch: String,
    /// Its base branch or commit.
    pub base: String,
    /// The commit the diff is against: where the branch and the base last met.
    pub merge_base: String,
    /// Whether the worktree has changes not committed on its branch.
    pub uncommitted: bool,
    /// Every file that differs, by path.
    pub files: Vec<ChangedFile>,
    /// The unified diff, at most the cap asked for.
    pub diff: String,
    /// Whether the diff was cut at the cap.
    pub truncated: bool,
}

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ChangedFile {
    /// Its path in the repository.
    pub path: String,
    /// `added`, `modified`, `deleted` or `type_changed` (a file became a link, or back).
    pub status: &'static str,
    /// Lines added (0 for a binary file).
    pub additions: u64,
    /// Lines deleted (0 for a binary file).
    pub deletions: u64,
    /// Whether git sees it as binary.
    pub binary: bool,
}

impl Worktrees {
    /// What the worktree changed, with a diff of at most `max_diff_bytes`.
    ///
    /// # Errors
    /// `Invalid` when the base is gone; `Git` when git fails.
    pub async fn changes(&self, worktree: &Worktree, max_diff_bytes: usize) -> Result<Changes> {
        let _lock = self.lock(&worktree.repo).await;
        self.on_own_branch(worktree).await?;
        let dir = &worktree.path;
        let merge_base = self.merge_base(worktree).await?;
        let tree = self.snapshot_tree(worktree).await?;
        let uncommitted = self.has_changes(dir).await?;
        let files = self.changed_files(worktree, &merge_base, &tree).await?;
        let args = diff_args(&[], &merge_base, &tree);
        let out = self.git.run_capped(dir, &args, &[], max_diff_bytes).await?;
        let truncated = out.truncated;
        if !truncated && out.code != Some(0) {
            return Err(git::failure(&args, &out));
        }
        Ok(Changes {
            branch: worktree.branch.clone(),
            base: worktree.base.clone(),
            merge_base,
            uncommitted,
            files,
            diff: String::from_utf8_lossy(&out.stdout).into_owned(),
            truncated,
        })
    }

    /// The commit where the worktree's branch and its base last met.
    ///
    /// # Errors
    /// `Invalid` when the base is gone; `Git` when git fails.
    pub(super) async fn merge_base(&self, worktree: &Worktree) -> Result<String> {
        let dir = &worktree.path;
        let Some(base) = self.commit_of(dir, &worktree.base_ref()).await? else {
            return Err(WorktreeError::Invalid(format!(
                "the base `{}` no longer exists",
                worktree.base
            )));
        };
        self.git.ok(dir, &["merge-base", &base, "HEAD"]).await
    }

    /// The files that differ between two trees, with their line counts.
    pub(super) async fn changed_files(
        &self,
        worktree: &Worktree,
        from: &str,
        to: &str,
    ) -> Result<Vec<ChangedFile>> {
        let dir = &worktree.path;
        let numstat = self
            .git
            .ok(dir, &diff_args(&["--numstat", "-z"], from, to))
            .await?;
        let statuses = self
            .git
            .ok(dir, &diff_args(&["--name-status", "-z"], from, to))
            .await?;
        Ok(parse_files(&numstat, &statuses))
    }
}

/// `git diff` between two trees with `extra` options, as a person's config can't change it.
fn diff_args<'a>(extra: &[&'a str], from: &'a str, to: &'a str) -> Vec<&'a str> {
    let mut args = vec![
        "diff",
        "--no-ext-diff",
        "--no-textconv",
        "--no-renames",
        "--no-color",
        // Whatever `diff.noprefix` or `diff.mnemonicPrefix` a user set: clients split by these.
        "--src-prefix=a/",
        "--dst-prefix=b/",
    ];
    args.extend_from_slice(extra);
    args.extend([from, to]);
    args
}

/// The files of `git diff --numstat -z` and `--name-status -z` (no renames) together.
fn parse_files(numstat: &str, statuses: &str) -> Vec<ChangedFile> {
    let mut status_of = std::collections::HashMap::new();
    let mut fields = statuses.split('\0');
    while let (Some(code), Some(path)) = (fields.next(), fields.next()) {
        let status = match code {
            "A" => "added",
            "D" => "deleted",
            "T" => "type_changed",
            _ => "modified",
        };
        status_of.insert(path, status);
    }
    numstat
        .split('\0')
        .filter(|line| !line.is_empty())
        .filter_map(|line| {
            let mut parts = line.splitn(3, '\t');
            let (added, deleted, path) = (parts.next()?, parts.next()?, parts.next()?);
            let binary = added == "-";
            Some(ChangedFile {
                path: path.to_owned(),
                status: status_of.get(path).copied().unwrap_or("modified"),
                additions: added.parse().unwrap_or(0),
                deletions: deleted.parse().unwrap_or(0),
                binary,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numstat_and_name_status_make_one_list() {
        let numstat = "3\t1\tsrc/a.rs\0-\t-\timg.png\0\x30\t4\told.txt\0";
        let statuses = "M\0src/a.rs\0A\0img.png\0D\0old.txt\0";
        let files = parse_files(numstat, statuses);
        assert_eq!(
            files
                .iter()
                .map(|f| (
                    f.path.as_str(),
                    f.status,
                    f.additions,
                    f.deletions,
                    f.binary
                ))
                .collect::<Vec<_>>(),
            [
                ("src/a.rs", "modified", 3, 1, false),
                ("img.png", "added", 0, 0, true),
                ("old.txt", "deleted", 0, 4, false),
            ]
        );
    }
}
