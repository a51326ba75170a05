//! Checkpoints of a worktree's files against the real git program: restoring one, going
//! forward again, how many are kept, and one over the cap.

use super::*;

#[tokio::test]
async fn restoring_a_checkpoint_puts_the_files_back() {
    let fx = Fixture::new();
    let wt = fx.worktree("r1").await;
    std::fs::write(wt.path.join("kept.txt"), "from turn 1\n").unwrap();
    let at_turn_2 = fx
        .worktrees
        .checkpoint(&wt, "r1", 2)
        .await
        .unwrap()
        .expect("under the cap");
    assert_eq!(
        fx.worktrees.changed_since(&wt, &at_turn_2).await.unwrap(),
        None,
        "nothing changed since the checkpoint"
    );
    // Turn 2 creates a file, changes one, removes one and commits part of it.
    std::fs::write(wt.path.join("created.txt"), "turn 2\n").unwrap();
    std::fs::write(wt.path.join("a.txt"), "changed by turn 2\n").unwrap();
    std::fs::remove_file(wt.path.join("sub/b.txt")).unwrap();
    fx.worktrees.commit(&wt, "turn 2").await.unwrap();
    std::fs::write(wt.path.join("kept.txt"), "changed too\n").unwrap();
    let counts = fx.worktrees.changed_since(&wt, &at_turn_2).await.unwrap();
    assert_eq!(
        counts,
        Some(ChangeCounts {
            files: 4,
            additions: 3,
            deletions: 4,
            uncommitted: true,
        }),
        "against the merge-base: created.txt, a.txt, sub/b.txt and kept.txt"
    );
    fx.worktrees.checkpoint(&wt, "r1", 9).await.unwrap();
    // Boxed: the whole test in one future overflows a test thread's stack in a debug build.
    Box::pin(restore_and_forward(&fx, &wt)).await;
}

/// Rewinds to checkpoint 2, then forward again; drops checkpoints from 3.
async fn restore_and_forward(fx: &Fixture, wt: &Worktree) {
    // The first checkpoint from 3 is 9: not the turn's that ended before 9.
    assert_eq!(
        fx.worktrees.rewind(wt, "r1", 3, Some(9)).await.unwrap(),
        Rewind::NoCheckpoint
    );
    assert_eq!(
        read(wt.path.join("kept.txt")),
        "changed too\n",
        "nothing touched"
    );
    let rewound = fx.worktrees.rewind(wt, "r1", 1, Some(5)).await.unwrap();
    assert!(!wt.path.join("created.txt").exists());
    assert_eq!(read(wt.path.join("a.txt")), "one\ntwo\nthree\n");
    assert_eq!(read(wt.path.join("sub/b.txt")), "b\n");
    assert_eq!(read(wt.path.join("kept.txt")), "from turn 1\n");
    assert_eq!(
        sh(&wt.path, &["rev-parse", "HEAD"]),
        fx.main_head(),
        "the branch went back"
    );
    assert_eq!(
        sh(&wt.path, &["status", "--porcelain"]),
        "?? kept.txt",
        "uncommitted as it was"
    );
    // What it held before is kept, its commit included.
    let kept = sh(
        &fx.repo,
        &["rev-parse", "refs/agentmux/checkpoints/r1/before-rewind"],
    );
    assert_eq!(rewound, Rewind::Restored(kept.clone()));
    assert_eq!(
        sh(&fx.repo, &["log", "-1", "--format=%s", &format!("{kept}^")]),
        "turn 2"
    );
    // Undone, it all goes forward again.
    Box::pin(fx.worktrees.undo_rewind(wt, &kept)).await.unwrap();
    assert_eq!(read(wt.path.join("created.txt")), "turn 2\n");
    assert_eq!(read(wt.path.join("kept.txt")), "changed too\n");
    assert_eq!(sh(&wt.path, &["log", "-1", "--format=%s"]), "turn 2");

    fx.worktrees
        .drop_checkpoints_from(wt, "r1", 3)
        .await
        .unwrap();
    assert_eq!(
        Box::pin(fx.worktrees.rewind(wt, "r1", 3, None))
            .await
            .unwrap(),
        Rewind::NoCheckpoint
    );
    assert_eq!(
        Box::pin(fx.worktrees.rewind(wt, "other", 0, None))
            .await
            .unwrap(),
        Rewind::NoCheckpoint
    );
    // Checkpoints are not on any branch; removal takes every private reference along.
    assert!(!sh(&fx.repo, &["branch", "-a"]).contains("checkpoint"));
    Box::pin(fx.worktrees.remove(wt, "r1")).await.unwrap();
    assert_eq!(sh(&fx.repo, &["for-each-ref", "refs/agentmux"]), "");
}

#[tokio::test]
async fn only_the_latest_checkpoints_are_kept() {
    let fx = Fixture::new();
    let wt = fx.worktree("many").await;
    for n in 0..(MAX_CHECKPOINTS as i64 + 3) {
        fx.worktrees.checkpoint(&wt, "many", n).await.unwrap();
    }
    let kept = fx.worktrees.checkpoints(&fx.repo, "many").await.unwrap();
    assert_eq!(kept.len(), MAX_CHECKPOINTS);
    assert_eq!(kept.iter().map(|(n, ..)| *n).min(), Some(3));
}

#[tokio::test]
async fn a_checkpoint_over_the_cap_is_skipped_and_a_rewind_to_it_says_so() {
    let fx = Fixture::new();
    let wt = fx.worktree("cap").await;
    // Staged, then changed again: the checkpoint holds the files, not the index.
    std::fs::write(wt.path.join("a.txt"), "staged\n").unwrap();
    sh(&wt.path, &["add", "a.txt"]);
    std::fs::write(wt.path.join("a.txt"), "changed after\n").unwrap();
    assert!(
        fx.worktrees
            .checkpoint(&wt, "cap", 1)
            .await
            .unwrap()
            .is_some()
    );
    // What the files changed and new come to counts, committed files don't.
    std::fs::write(wt.path.join("big.bin"), vec![7u8; CHECKPOINT_CAP as usize]).unwrap();
    assert_eq!(fx.worktrees.checkpoint(&wt, "cap", 5).await.unwrap(), None);
    std::fs::write(wt.path.join("later.txt"), "turn 5\n").unwrap();
    assert_eq!(
        fx.worktrees.rewind(&wt, "cap", 4, None).await.unwrap(),
        Rewind::OverCap
    );
    assert!(wt.path.join("later.txt").exists(), "nothing touched");
    // The first is whole: its files come back.
    assert!(matches!(
        fx.worktrees.rewind(&wt, "cap", 1, Some(5)).await.unwrap(),
        Rewind::Restored(_)
    ));
    assert_eq!(read(wt.path.join("a.txt")), "changed after\n");
    assert!(!wt.path.join("big.bin").exists() && !wt.path.join("later.txt").exists());
    // Committed, the big file no longer counts.
    std::fs::write(wt.path.join("big.bin"), vec![7u8; CHECKPOINT_CAP as usize]).unwrap();
    fx.worktrees.commit(&wt, "big").await.unwrap();
    assert!(
        fx.worktrees
            .checkpoint(&wt, "cap", 9)
            .await
            .unwrap()
            .is_some()
    );
    // Markers go with the conversation, as checkpoints do.
    fx.worktrees.remove(&wt, "cap").await.unwrap();
    assert_eq!(sh(&fx.repo, &["for-each-ref", "refs/agentmux"]), "");
}
