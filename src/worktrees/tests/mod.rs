//! Worktrees against the real git program: the repository fixture and git helpers every case
//! shares, and the cases of making worktrees: isolation of parallel worktrees, changes, fork,
//! removal, pruning, included files, hooks and hostile input. Landing work is in `land.rs`,
//! checkpoints in `checkpoints.rs`.

use std::path::{Path, PathBuf};

use super::*;
use crate::protocol::ChangeCounts;

mod checkpoints;
mod land;

/// The fixture's cap on what a checkpoint records.
const CHECKPOINT_CAP: u64 = 1 << 20;

/// A repository with one commit on `main` (`a.txt`, `sub/b.txt`), and the worktrees' folder.
struct Fixture {
    _tmp: tempfile::TempDir,
    repo: PathBuf,
    worktrees: Worktrees,
}

fn sh(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(find_on_path().expect("git on PATH"))
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim_end().to_owned()
}

impl Fixture {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let repo = base.join("repo");
        std::fs::create_dir_all(repo.join("sub")).unwrap();
        sh(&repo, &["init", "-q", "-b", "main"]);
        sh(&repo, &["config", "user.name", "Dev"]);
        sh(&repo, &["config", "user.email", "dev@example.com"]);
        std::fs::write(repo.join("a.txt"), "one\ntwo\nthree\n").unwrap();
        std::fs::write(repo.join("sub/b.txt"), "b\n").unwrap();
        sh(&repo, &["add", "."]);
        sh(&repo, &["commit", "-q", "-m", "first"]);
        let git = Git::new(find_on_path().unwrap(), false);
        Fixture {
            worktrees: Worktrees::new(git, base.join("data/worktrees"), CHECKPOINT_CAP),
            repo,
            _tmp: tmp,
        }
    }

    async fn create(&self, key: &str, request: Request) -> Result<Worktree> {
        let repo = self.worktrees.repo_of(&self.repo).await?;
        self.worktrees.create(&repo, key, key, &request).await
    }

    async fn worktree(&self, key: &str) -> Worktree {
        self.create(key, Request::default()).await.unwrap()
    }

    fn main_head(&self) -> String {
        sh(&self.repo, &["rev-parse", "refs/heads/main"])
    }
}

fn read(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[tokio::test]
async fn two_worktrees_of_one_repository_never_see_each_others_edits() {
    let fx = Fixture::new();
    let (one, two) = (fx.worktree("c1").await, fx.worktree("c2").await);
    assert_eq!(
        (one.branch.as_str(), one.base.as_str()),
        ("agentmux/c1", "main")
    );
    assert_ne!(one.path, two.path);
    std::fs::write(one.path.join("a.txt"), "one\nTWO\nthree\nfour\n").unwrap();
    std::fs::write(two.path.join("a.txt"), "uno\n").unwrap();
    assert_eq!(read(one.path.join("a.txt")), "one\nTWO\nthree\nfour\n");
    assert_eq!(read(two.path.join("a.txt")), "uno\n");
    assert_eq!(
        read(fx.repo.join("a.txt")),
        "one\ntwo\nthree\n",
        "the main checkout is untouched"
    );

    let changes = fx.worktrees.changes(&one, 1 << 20).await.unwrap();
    assert_eq!(changes.merge_base, fx.main_head());
    assert!(changes.uncommitted);
    assert_eq!(
        changes.files,
        [ChangedFile {
            path: "a.txt".into(),
            status: "modified",
            additions: 2,
            deletions: 1,
            binary: false
        }]
    );
    assert!(changes.diff.contains("+TWO\n"), "{}", changes.diff);
    assert!(!changes.truncated);
}

#[tokio::test]
async fn the_agent_runs_where_the_directory_was_in_the_repository() {
    let fx = Fixture::new();
    let repo = fx.worktrees.repo_of(&fx.repo.join("sub")).await.unwrap();
    assert_eq!(
        (repo.top.as_path(), repo.subdir.as_path()),
        (fx.repo.as_path(), Path::new("sub"))
    );
    let wt = fx
        .worktrees
        .create(&repo, "s1", "s1", &Request::default())
        .await
        .unwrap();
    assert_eq!(wt.cwd(), wt.path.join("sub"));
    assert_eq!(read(wt.cwd().join("b.txt")), "b\n");
}

#[tokio::test]
async fn untracked_files_count_and_a_link_out_of_the_root_shows_as_a_link() {
    let fx = Fixture::new();
    let wt = fx.worktree("u1").await;
    let secret = fx.repo.parent().unwrap().join("secret.txt");
    std::fs::write(&secret, "the secret\n").unwrap();
    std::fs::write(wt.path.join("new.txt"), "x\ny\n").unwrap();
    std::os::unix::fs::symlink(&secret, wt.path.join("link")).unwrap();
    std::fs::remove_file(wt.path.join("sub/b.txt")).unwrap();
    let changes = fx.worktrees.changes(&wt, 1 << 20).await.unwrap();
    let summary: Vec<_> = changes
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.status, f.additions, f.deletions))
        .collect();
    assert_eq!(
        summary,
        [
            ("link", "added", 1, 0),
            ("new.txt", "added", 2, 0),
            ("sub/b.txt", "deleted", 0, 1)
        ]
    );
    assert!(
        changes.diff.contains(&format!("+{}", secret.display())),
        "{}",
        changes.diff
    );
    assert!(!changes.diff.contains("the secret"), "{}", changes.diff);
    // The worktree's own index is untouched by listing its changes.
    assert_eq!(sh(&wt.path, &["diff", "--cached", "--name-only"]), "");
}

#[tokio::test]
async fn a_diff_larger_than_the_cap_is_cut_and_says_so() {
    let fx = Fixture::new();
    let wt = fx.worktree("big").await;
    std::fs::write(wt.path.join("big.txt"), "line\n".repeat(100_000)).unwrap();
    let changes = fx.worktrees.changes(&wt, 4096).await.unwrap();
    assert!(changes.truncated);
    assert_eq!(changes.diff.len(), 4096);
    assert_eq!(changes.files[0].additions, 100_000, "the counts are whole");
}

#[tokio::test]
async fn a_fork_starts_from_the_sources_files_uncommitted_ones_included() {
    let fx = Fixture::new();
    let source = fx.worktree("src").await;
    std::fs::write(source.path.join("wip.txt"), "not committed\n").unwrap();
    let fork = fx
        .worktrees
        .fork(&source, "fork", "fork", None)
        .await
        .unwrap();
    assert_eq!(
        (fork.branch.as_str(), fork.base.as_str()),
        ("agentmux/fork", "main")
    );
    assert_eq!(read(fork.path.join("wip.txt")), "not committed\n");
    assert!(
        !fork.path.join(".env").exists(),
        "no `.worktreeinclude` yet"
    );
    // The source keeps its uncommitted file, uncommitted.
    assert_eq!(sh(&source.path, &["status", "--porcelain"]), "?? wip.txt");

    // The repository's `.worktreeinclude` files are copied into a fork as into a new one.
    std::fs::write(fx.repo.join(".gitignore"), ".env\n").unwrap();
    std::fs::write(fx.repo.join(".worktreeinclude"), ".env\n").unwrap();
    std::fs::write(fx.repo.join(".env"), "KEY=1\n").unwrap();
    let again = fx
        .worktrees
        .fork(&source, "fork2", "fork2", None)
        .await
        .unwrap();
    assert_eq!(read(again.path.join(".env")), "KEY=1\n");
    assert_eq!(read(again.path.join("wip.txt")), "not committed\n");
}

#[tokio::test]
async fn removal_keeps_an_unmerged_branch_and_drops_a_merged_one() {
    let fx = Fixture::new();
    let (merged, open) = (fx.worktree("gone").await, fx.worktree("open").await);
    let squashed = fx.worktree("squashed").await;
    for wt in [&merged, &open, &squashed] {
        std::fs::write(
            wt.path.join(format!("{}.txt", wt.branch.replace('/', "-"))),
            "x\n",
        )
        .unwrap();
        fx.worktrees.commit(wt, "work").await.unwrap();
        fx.worktrees.checkpoint(wt, "k", 1).await.unwrap();
    }
    fx.worktrees
        .merge(&merged, Strategy::Merge, None)
        .await
        .unwrap();
    assert!(
        !fx.worktrees.remove(&merged, "gone").await.unwrap(),
        "a merged branch goes"
    );
    // A squash is never an ancestor of the base, but the base has all of it: merging it
    // again changes nothing, and its branch goes too.
    let squash = fx
        .worktrees
        .merge(&squashed, Strategy::Squash, None)
        .await
        .unwrap();
    let again = fx
        .worktrees
        .merge(&squashed, Strategy::Merge, None)
        .await
        .unwrap();
    assert_eq!((again.changed, again.commit), (false, squash.commit));
    assert!(
        !fx.worktrees.remove(&squashed, "squashed").await.unwrap(),
        "a squash-merged branch goes"
    );
    assert!(
        fx.worktrees.remove(&open, "open").await.unwrap(),
        "an unmerged branch stays"
    );
    assert!(!merged.path.exists() && !open.path.exists() && !squashed.path.exists());
    let branches = sh(&fx.repo, &["branch", "--format=%(refname:short)"]);
    assert_eq!(branches, "agentmux/open\nmain");
    assert_eq!(
        sh(
            &fx.repo,
            &["for-each-ref", "refs/agentmux/checkpoints/gone/"]
        ),
        ""
    );
}

#[tokio::test]
async fn worktrees_of_conversations_that_are_gone_are_pruned() {
    let fx = Fixture::new();
    let (keep, drop) = (fx.worktree("keep").await, fx.worktree("drop").await);
    fx.worktrees.checkpoint(&drop, "drop", 1).await.unwrap();
    fx.worktrees.checkpoint(&keep, "keep", 1).await.unwrap();
    assert_eq!(fx.worktrees.prune(|key| key == "keep").await, 1);
    assert!(keep.path.exists() && !drop.path.exists());
    assert!(!sh(&fx.repo, &["worktree", "list"]).contains("drop"));
    let refs = sh(&fx.repo, &["for-each-ref", "--format=%(refname)"]);
    assert!(
        refs.contains("checkpoints/keep/1") && !refs.contains("checkpoints/drop"),
        "{refs}"
    );
}

#[tokio::test]
async fn hostile_branches_and_bases_are_refused_before_git_runs() {
    let fx = Fixture::new();
    for branch in ["--upload-pack=x", "a..b", "refs/heads/../../x", "-b"] {
        let asked = Request {
            base: None,
            branch: Some(branch.into()),
        };
        assert!(
            matches!(fx.create("h1", asked).await, Err(WorktreeError::Invalid(_))),
            "{branch}"
        );
    }
    for base in [
        "nope",
        "--output=/tmp/x",
        "main..HEAD",
        "HEAD~1",
        "deadbeef00",
    ] {
        let asked = Request {
            base: Some(base.into()),
            branch: None,
        };
        match fx.create("h2", asked).await {
            Err(WorktreeError::Invalid(why)) => assert!(why.contains("neither a branch"), "{why}"),
            other => panic!("{base}: {other:?}"),
        }
    }
    let taken = Request {
        base: None,
        branch: Some("main".into()),
    };
    assert!(matches!(
        fx.create("h3", taken).await,
        Err(WorktreeError::Invalid(_))
    ));
    assert!(matches!(
        fx.create("../x", Request::default()).await,
        Err(WorktreeError::Invalid(_))
    ));
    let outside = fx.repo.parent().unwrap();
    assert!(matches!(
        fx.worktrees.repo_of(outside).await,
        Err(WorktreeError::NotARepository(_))
    ));
    // A base given as a commit works, and can't be merged into.
    let commit = fx.main_head();
    let wt = fx
        .create(
            "h4",
            Request {
                base: Some(commit[..12].into()),
                branch: Some("topic".into()),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (wt.base.as_str(), wt.base_is_branch),
        (commit.as_str(), false)
    );
    assert!(matches!(
        fx.worktrees.merge(&wt, Strategy::Merge, None).await,
        Err(WorktreeError::Invalid(_))
    ));
    // Default names never collide with an existing branch.
    sh(&fx.repo, &["branch", "agentmux/h5"]);
    assert_eq!(fx.worktree("h5").await.branch, "agentmux/h5-2");
}

#[tokio::test]
async fn a_worktreeinclude_copies_ignored_files_but_never_through_a_link() {
    let fx = Fixture::new();
    std::fs::write(fx.repo.join(".gitignore"), ".env\n*.log\nlinked.env\n").unwrap();
    std::fs::write(fx.repo.join(".worktreeinclude"), ".env\nlinked.env\n").unwrap();
    sh(&fx.repo, &["add", ".gitignore", ".worktreeinclude"]);
    sh(&fx.repo, &["commit", "-q", "-m", "ignore"]);
    std::fs::write(fx.repo.join(".env"), "KEY=1\n").unwrap();
    std::fs::write(fx.repo.join("debug.log"), "noise\n").unwrap();
    let outside = fx.repo.parent().unwrap().join("outside.env");
    std::fs::write(&outside, "SECRET=1\n").unwrap();
    std::os::unix::fs::symlink(&outside, fx.repo.join("linked.env")).unwrap();
    let wt = fx.worktree("inc").await;
    assert_eq!(read(wt.path.join(".env")), "KEY=1\n");
    assert!(
        !wt.path.join("debug.log").exists(),
        "not named in .worktreeinclude"
    );
    assert!(std::fs::symlink_metadata(wt.path.join("linked.env")).is_err());
}

#[tokio::test]
async fn repository_hooks_do_not_run_unless_allowed() {
    let fx = Fixture::new();
    let marker = fx.repo.parent().unwrap().join("hook-ran");
    let hook = fx.repo.join(".git/hooks/post-checkout");
    std::fs::write(&hook, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let wt = fx.worktree("hooks").await;
    std::fs::write(wt.path.join("x"), "x").unwrap();
    fx.worktrees.commit(&wt, "x").await.unwrap();
    assert!(!marker.exists(), "a hook ran");
    let allowing = Worktrees::new(
        Git::new(find_on_path().unwrap(), true),
        fx.worktrees.dir.clone(),
        CHECKPOINT_CAP,
    );
    let repo = allowing.repo_of(&fx.repo).await.unwrap();
    allowing
        .create(&repo, "hooks2", "hooks2", &Request::default())
        .await
        .unwrap();
    assert!(marker.exists(), "run_hooks lets them run");
}

#[tokio::test]
async fn the_git_here_is_new_enough() {
    let fx = Fixture::new();
    assert!(fx.worktrees.check_git().await.unwrap() >= MIN_VERSION);
    let missing = Worktrees::new(
        Git::new(PathBuf::from("/nonexistent/git"), false),
        fx.worktrees.dir.clone(),
        CHECKPOINT_CAP,
    );
    assert!(matches!(
        missing.check_git().await,
        Err(WorktreeError::Git(_))
    ));
}

#[tokio::test]
async fn a_worktree_switched_to_another_branch_is_left_alone() {
    let fx = Fixture::new();
    let wt = fx.worktree("sw").await;
    sh(&fx.repo, &["branch", "users-own"]);
    let own = sh(&fx.repo, &["rev-parse", "users-own"]);
    sh(&wt.path, &["checkout", "-q", "users-own"]);
    std::fs::write(wt.path.join("a.txt"), "changed\n").unwrap();
    assert!(matches!(
        fx.worktrees.discard(&wt).await,
        Err(WorktreeError::Invalid(_))
    ));
    assert!(matches!(
        fx.worktrees.commit(&wt, "x").await,
        Err(WorktreeError::Invalid(_))
    ));
    assert!(matches!(
        fx.worktrees.merge(&wt, Strategy::Merge, None).await,
        Err(WorktreeError::Invalid(_))
    ));
    assert_eq!(sh(&fx.repo, &["rev-parse", "users-own"]), own);
    assert_eq!(
        read(wt.path.join("a.txt")),
        "changed\n",
        "nothing was reset"
    );
}

#[tokio::test]
async fn an_included_file_is_never_copied_through_a_link_the_base_checked_out() {
    let fx = Fixture::new();
    let outside = fx.repo.parent().unwrap().join("target.txt");
    std::fs::write(&outside, "kept\n").unwrap();
    // The base has `.env` as a link out of the repository; the main checkout has a real one.
    std::os::unix::fs::symlink(&outside, fx.repo.join(".env")).unwrap();
    sh(&fx.repo, &["add", ".env"]);
    sh(&fx.repo, &["commit", "-q", "-m", "link"]);
    sh(&fx.repo, &["rm", "-q", "--cached", ".env"]);
    std::fs::write(fx.repo.join(".gitignore"), ".env\n").unwrap();
    std::fs::write(fx.repo.join(".worktreeinclude"), ".env\n").unwrap();
    sh(&fx.repo, &["add", ".gitignore", ".worktreeinclude"]);
    sh(&fx.repo, &["commit", "-q", "-m", "ignore"]);
    std::fs::remove_file(fx.repo.join(".env")).unwrap();
    std::fs::write(fx.repo.join(".env"), "SECRET=1\n").unwrap();
    let base = sh(&fx.repo, &["rev-parse", "HEAD~1"]);
    let asked = Request {
        base: Some(base),
        branch: None,
    };
    let wt = fx.create("lnk", asked).await.unwrap();
    assert!(
        std::fs::symlink_metadata(wt.path.join(".env"))
            .unwrap()
            .is_symlink()
    );
    assert_eq!(
        read(&outside),
        "kept\n",
        "the link's target was not written"
    );
}
