//! Landing a worktree's work against the real git program: merge, squash and their conflicts,
//! uncommitted work left alone, and discard.

use super::*;

#[tokio::test]
async fn merges_land_on_the_base_and_a_conflict_changes_nothing() {
    let fx = Fixture::new();
    let (one, two) = (fx.worktree("m1").await, fx.worktree("m2").await);
    std::fs::write(one.path.join("a.txt"), "one\nfrom m1\nthree\n").unwrap();
    std::fs::write(two.path.join("a.txt"), "one\nfrom m2\nthree\n").unwrap();
    for wt in [&one, &two] {
        assert!(fx.worktrees.commit(wt, "edit").await.unwrap().is_some());
        assert_eq!(
            fx.worktrees.commit(wt, "again").await.unwrap(),
            None,
            "nothing left"
        );
    }
    let before = fx.main_head();
    let merged = fx
        .worktrees
        .merge(&one, Strategy::Merge, None)
        .await
        .unwrap();
    assert!(merged.changed);
    assert_eq!(fx.main_head(), merged.commit);
    assert_eq!(
        sh(&fx.repo, &["rev-list", "--parents", "-n", "1", "main"])
            .split(' ')
            .count(),
        3,
        "a merge commit has two parents"
    );
    // The main checkout (on main, clean) moved with its branch.
    assert_eq!(read(fx.repo.join("a.txt")), "one\nfrom m1\nthree\n");
    assert_eq!(sh(&fx.repo, &["status", "--porcelain"]), "");
    assert_ne!(before, merged.commit);

    let main_before = fx.main_head();
    let two_head = sh(&two.path, &["rev-parse", "HEAD"]);
    match fx.worktrees.merge(&two, Strategy::Merge, None).await {
        Err(WorktreeError::Conflict(paths)) => assert_eq!(paths, ["a.txt"]),
        other => panic!("{other:?}"),
    }
    assert_eq!(fx.main_head(), main_before);
    assert_eq!(sh(&two.path, &["rev-parse", "HEAD"]), two_head);
    assert_eq!(read(fx.repo.join("a.txt")), "one\nfrom m1\nthree\n");
    assert_eq!(sh(&fx.repo, &["status", "--porcelain"]), "");
    // Merging again what has landed changes nothing.
    let again = fx
        .worktrees
        .merge(&one, Strategy::Merge, None)
        .await
        .unwrap();
    assert_eq!((again.changed, again.commit), (false, main_before));
}

#[tokio::test]
async fn a_squash_is_one_commit_and_a_dirty_checkout_of_the_base_is_never_touched() {
    let fx = Fixture::new();
    let wt = fx.worktree("sq").await;
    for (i, text) in ["x\n", "y\n"].into_iter().enumerate() {
        std::fs::write(wt.path.join(format!("f{i}.txt")), text).unwrap();
        fx.worktrees
            .commit(&wt, &format!("step {i}"))
            .await
            .unwrap();
    }
    std::fs::write(fx.repo.join("a.txt"), "my own work\n").unwrap();
    let before = fx.main_head();
    match fx
        .worktrees
        .merge(&wt, Strategy::Squash, Some("both steps"))
        .await
    {
        Err(WorktreeError::Uncommitted { tree, .. }) => assert_eq!(tree, fx.repo),
        other => panic!("{other:?}"),
    }
    assert_eq!(fx.main_head(), before);
    assert_eq!(read(fx.repo.join("a.txt")), "my own work\n");

    sh(&fx.repo, &["checkout", "-q", "--", "a.txt"]);
    // Files git doesn't track, ignored ones too, stop it only where it adds files.
    std::fs::write(fx.repo.join(".gitignore"), "*.log\nf0.txt\n").unwrap();
    std::fs::write(fx.repo.join("f1.txt"), "mine\n").unwrap();
    std::fs::write(fx.repo.join("f0.txt"), "mine too\n").unwrap();
    match fx.worktrees.merge(&wt, Strategy::Squash, None).await {
        Err(WorktreeError::Untracked { tree, paths }) => {
            assert_eq!(
                (tree, paths),
                (fx.repo.clone(), vec!["f0.txt".into(), "f1.txt".into()])
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fx.main_head(), before);
    assert_eq!(read(fx.repo.join("f1.txt")), "mine\n");
    std::fs::remove_file(fx.repo.join("f1.txt")).unwrap();
    std::fs::rename(fx.repo.join("f0.txt"), fx.repo.join("notes.log")).unwrap();
    std::fs::write(fx.repo.join("notes.txt"), "mine\n").unwrap();
    let merged = fx
        .worktrees
        .merge(&wt, Strategy::Squash, Some("both steps"))
        .await
        .unwrap();
    assert_eq!(read(fx.repo.join("notes.txt")), "mine\n");
    assert_eq!(read(fx.repo.join("notes.log")), "mine too\n");
    assert_eq!(
        sh(&fx.repo, &["log", "-1", "--format=%s%n%P", "main"]),
        format!("both steps\n{before}")
    );
    assert_eq!(merged.commit, fx.main_head());
    assert_eq!(read(fx.repo.join("f1.txt")), "y\n");
}

#[tokio::test]
async fn uncommitted_work_in_the_worktree_is_not_merged_unasked() {
    let fx = Fixture::new();
    let wt = fx.worktree("dirty").await;
    std::fs::write(wt.path.join("a.txt"), "changed\n").unwrap();
    let before = fx.main_head();
    assert!(matches!(
        fx.worktrees.merge(&wt, Strategy::Merge, None).await,
        Err(WorktreeError::Uncommitted { .. })
    ));
    assert_eq!(fx.main_head(), before);
}

#[tokio::test]
async fn discard_returns_the_worktree_to_its_base() {
    let fx = Fixture::new();
    let wt = fx.worktree("d1").await;
    std::fs::write(wt.path.join("a.txt"), "changed\n").unwrap();
    fx.worktrees.commit(&wt, "c").await.unwrap();
    std::fs::write(wt.path.join("new.txt"), "new\n").unwrap();
    fx.worktrees.discard(&wt).await.unwrap();
    assert_eq!(read(wt.path.join("a.txt")), "one\ntwo\nthree\n");
    assert!(!wt.path.join("new.txt").exists());
    let changes = fx.worktrees.changes(&wt, 1 << 20).await.unwrap();
    assert!(
        changes.files.is_empty() && !changes.uncommitted,
        "{changes:?}"
    );
}
