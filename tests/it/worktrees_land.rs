//! Worktrees over REST and the protocol, against the real git, where landing meets the rest of
//! the repository: merged and squash-merged branches go with their conversation, files the
//! base's checkout doesn't track stop a merge only where it adds files, a fork carries
//! uncommitted and included files, the diff is capped and never follows a link out, a turn
//! waits for a merge that runs, checkpoints over their cap are skipped and said so, a restart
//! keeps every worktree, and a git too old refuses to start.

use std::path::Path;

use serde_json::{Value, json};

use crate::common::*;
use crate::repos::{Fixture, cwd, git};
use crate::security::connect_as;

/// Writes `file` in the conversation's worktree and commits it over REST.
async fn commit_file(fx: &Fixture, agent_id: &str, summary: &Value, file: &str, text: &str) {
    std::fs::write(cwd(summary).join(file), text).unwrap();
    let (status, committed) = fx
        .api(
            "tok-alice",
            "POST",
            &format!("/api/sessions/{agent_id}/changes/commit"),
            Some(json!({"message": format!("add {file}")})),
        )
        .await;
    assert_eq!(status, 200, "{committed}");
}

/// Merges `agent_id`'s branch with `strategy`; `(status, body)`.
async fn merge(fx: &Fixture, agent_id: &str, strategy: &str) -> (u16, Value) {
    fx.api(
        "tok-alice",
        "POST",
        &format!("/api/sessions/{agent_id}/changes/merge"),
        Some(json!({"strategy": strategy})),
    )
    .await
}

fn branches(repo: &Path) -> String {
    git(repo, &["branch", "--format=%(refname:short)"])
}

/// A merged and a squash-merged branch are removed with their conversation, an unmerged one
/// is kept and named; a squash-merged branch merged again changes nothing. Files the main
/// checkout doesn't track refuse a merge only where it adds files, and are named.
#[tokio::test]
async fn landed_branches_go_with_their_conversation_and_untracked_files_are_kept() {
    let fx = Fixture::new("").await;
    let dir = fx.repo.to_string_lossy().into_owned();
    let mut started = Vec::new();
    for agent in ["merged", "squashed", "open"] {
        let summary = fx.start(agent, json!({"cwd": dir, "worktree": true})).await;
        commit_file(&fx, agent, &summary, &format!("{agent}.txt"), "work\n").await;
        started.push(summary);
    }
    // The main checkout has files of its own: one where `squashed` adds its file, one not.
    std::fs::write(fx.repo.join("squashed.txt"), "mine\n").unwrap();
    std::fs::write(fx.repo.join("notes.txt"), "mine too\n").unwrap();
    let main_before = git(&fx.repo, &["rev-parse", "main"]);
    let (status, err) = merge(&fx, "squashed", "squash").await;
    assert_eq!(
        (status, err["code"].as_str()),
        (409, Some("conflict")),
        "{err}"
    );
    assert_eq!(err["paths"], json!(["squashed.txt"]), "{err}");
    assert_eq!(git(&fx.repo, &["rev-parse", "main"]), main_before);
    assert_eq!(
        std::fs::read_to_string(fx.repo.join("squashed.txt")).unwrap(),
        "mine\n"
    );
    std::fs::remove_file(fx.repo.join("squashed.txt")).unwrap();

    let (status, merged) = merge(&fx, "merged", "merge").await;
    assert_eq!((status, merged["changed"].as_bool()), (200, Some(true)));
    let (status, squash) = merge(&fx, "squashed", "squash").await;
    assert_eq!((status, squash["changed"].as_bool()), (200, Some(true)));
    assert_eq!(
        std::fs::read_to_string(fx.repo.join("notes.txt")).unwrap(),
        "mine too\n",
        "an untracked file elsewhere stays as it was"
    );
    assert_eq!(git(&fx.repo, &["status", "--porcelain"]), "?? notes.txt");
    let (status, again) = merge(&fx, "squashed", "merge").await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        (again["changed"].as_bool(), &again["commit"]),
        (Some(false), &squash["commit"]),
        "the base has all of it"
    );

    for (agent, kept) in [
        ("merged", Value::Null),
        ("squashed", Value::Null),
        ("open", json!("agentmux/open")),
    ] {
        let (status, deleted) = fx
            .api(
                "tok-alice",
                "DELETE",
                &format!("/api/sessions/{agent}"),
                None,
            )
            .await;
        assert_eq!(
            (status, deleted),
            (200, json!({"kept_branch": kept})),
            "{agent}"
        );
    }
    assert_eq!(branches(&fx.repo), "agentmux/open\nmain");
    assert!(started.iter().all(|s| !cwd(s).exists()));
}

/// A fork starts from the source's files as they are, uncommitted and new ones included, and
/// gets the repository's `.worktreeinclude` files as a new worktree does.
#[tokio::test]
async fn a_fork_carries_uncommitted_changes_and_included_files() {
    let fx = Fixture::new("").await;
    std::fs::write(fx.repo.join(".gitignore"), ".env\n").unwrap();
    std::fs::write(fx.repo.join(".worktreeinclude"), ".env\n").unwrap();
    git(&fx.repo, &["add", ".gitignore", ".worktreeinclude"]);
    git(&fx.repo, &["commit", "-q", "-m", "include .env"]);
    std::fs::write(fx.repo.join(".env"), "KEY=1\n").unwrap();
    let dir = fx.repo.to_string_lossy().into_owned();
    let source = fx.start("src", json!({"cwd": dir, "worktree": true})).await;
    assert_eq!(
        std::fs::read_to_string(cwd(&source).join(".env")).unwrap(),
        "KEY=1\n"
    );
    std::fs::write(cwd(&source).join("a.txt"), "one\nchanged\n").unwrap();
    std::fs::write(cwd(&source).join("new.txt"), "new\n").unwrap();
    let (status, fork) = fx
        .api(
            "tok-alice",
            "POST",
            "/api/sessions/src/fork",
            Some(json!({"new_agent_id": "copy"})),
        )
        .await;
    assert_eq!(status, 201, "{fork}");
    let forked = cwd(&fork);
    for (file, text) in [
        (".env", "KEY=1\n"),
        ("a.txt", "one\nchanged\n"),
        ("new.txt", "new\n"),
    ] {
        assert_eq!(
            std::fs::read_to_string(forked.join(file)).unwrap(),
            text,
            "{file}"
        );
    }
    let (status, changes) = fx
        .api("tok-alice", "GET", "/api/sessions/copy/changes", None)
        .await;
    assert_eq!(status, 200, "{changes}");
    let paths: Vec<&str> = changes["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        ["a.txt", "new.txt"],
        "the ignored .env is not a change"
    );
}

/// A diff over `worktrees.max_diff_bytes` is cut and says so, with whole counts; a symbolic
/// link out of the root shows as a link, never with what it points to.
#[tokio::test]
async fn the_diff_is_capped_and_a_link_out_of_the_root_shows_as_a_link() {
    let fx = Fixture::with("", "[worktrees]\nmax_diff_bytes = 4096\n").await;
    let dir = fx.repo.to_string_lossy().into_owned();
    let big = fx.start("big", json!({"cwd": dir, "worktree": true})).await;
    std::fs::write(cwd(&big).join("big.txt"), "line\n".repeat(10_000)).unwrap();
    let (status, changes) = fx
        .api("tok-alice", "GET", "/api/sessions/big/changes", None)
        .await;
    assert_eq!(status, 200, "{changes}");
    assert_eq!(changes["truncated"], true);
    assert!(changes["diff"].as_str().unwrap().len() <= 4096);
    assert_eq!(
        changes["files"][0]["additions"], 10_000,
        "the counts are whole"
    );

    let secret = fx
        .repo
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("secret.txt");
    std::fs::write(&secret, "TOP-SECRET\n").unwrap();
    let link = fx
        .start("link", json!({"cwd": dir, "worktree": true}))
        .await;
    std::os::unix::fs::symlink(&secret, cwd(&link).join("leak")).unwrap();
    let (status, changes) = fx
        .api("tok-alice", "GET", "/api/sessions/link/changes", None)
        .await;
    assert_eq!(status, 200, "{changes}");
    assert_eq!(changes["truncated"], false);
    assert_eq!(
        changes["files"],
        json!([{"path": "leak", "status": "added", "additions": 1, "deletions": 0, "binary": false}])
    );
    let diff = changes["diff"].as_str().unwrap();
    assert!(diff.contains("new file mode 120000"), "{diff}");
    assert!(diff.contains(&format!("+{}", secret.display())), "{diff}");
    assert!(!diff.contains("TOP-SECRET"), "{diff}");
}

/// Makes a FIFO at `path`.
fn fifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success());
}

/// While a merge runs (held in the repository's `post-merge` hook), a rewind and a commit of
/// the same conversation are refused as busy, and a turn sent meanwhile waits for the merge
/// to end, then runs.
#[tokio::test]
async fn a_turn_sent_while_a_merge_runs_waits_for_it() {
    let fx = Fixture::with("", "[worktrees]\nrun_hooks = true\n").await;
    let dir = fx.repo.to_string_lossy().into_owned();
    let summary = fx
        .start("race", json!({"cwd": dir, "worktree": true}))
        .await;
    let mut c = connect_as(&fx.server.addr, "tok-alice").await;
    c.chat("race", "two").await;
    let first = c.until_result("race").await;
    let result_2 = first
        .iter()
        .find(|f| f["message_type"] == "result")
        .unwrap()["seq"]
        .as_i64()
        .unwrap();
    commit_file(&fx, "race", &summary, "race.txt", "race\n").await;

    let hooks = fx.repo.parent().unwrap().parent().unwrap();
    let (started, gate) = (hooks.join("started.fifo"), hooks.join("gate.fifo"));
    fifo(&started);
    fifo(&gate);
    let hook = fx.repo.join(".git/hooks/post-merge");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\necho started > '{}'\ncat '{}' > /dev/null\n",
            started.display(),
            gate.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();

    let merging = {
        let server = fx.server.url("/api/sessions/race/changes/merge");
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(server)
                .bearer_auth("tok-alice")
                .json(&json!({"strategy": "merge"}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    let in_hook = tokio::task::spawn_blocking(move || std::fs::read_to_string(started).unwrap());
    assert_eq!(in_hook.await.unwrap().trim(), "started");

    let (status, err) = fx
        .api(
            "tok-alice",
            "POST",
            "/api/sessions/race/rewind",
            Some(json!({"to_seq": result_2 - 4})),
        )
        .await;
    assert_eq!((status, err["code"].as_str()), (409, Some("busy")), "{err}");
    let (status, err) = fx
        .api(
            "tok-alice",
            "POST",
            "/api/sessions/race/changes/commit",
            Some(json!({"message": "meanwhile"})),
        )
        .await;
    assert_eq!((status, err["code"].as_str()), (409, Some("busy")), "{err}");
    let ack = chat_ack(&mut c, "race", "during the merge").await;
    assert_eq!(ack["message_type"], "ack", "{ack}");

    let open = tokio::task::spawn_blocking(move || std::fs::write(gate, "go\n").unwrap());
    open.await.unwrap();
    assert_eq!(merging.await.unwrap(), 200);
    let frames = c.until_result("race").await;
    assert!(
        reply_text(&frames).starts_with("Echo: during the merge"),
        "{frames:?}"
    );
    assert!(
        git(&fx.repo, &["log", "-1", "--format=%s", "main"]).starts_with("Merge branch"),
        "the merge landed"
    );
}

/// A turn whose worktree holds more changed files than `worktrees.max_checkpoint_bytes` gets
/// no checkpoint, with a `warning`; a rewind to before it leaves the files as they are and its
/// status says why.
#[tokio::test]
async fn a_checkpoint_over_its_cap_is_skipped_and_the_rewind_says_so() {
    let fx = Fixture::with("", "[worktrees]\nmax_checkpoint_bytes = 1000\n").await;
    let dir = fx.repo.to_string_lossy().into_owned();
    let summary = fx
        .start("capped", json!({"cwd": dir, "worktree": true}))
        .await;
    std::fs::write(cwd(&summary).join("big.txt"), "x".repeat(2000)).unwrap();
    let mut c = connect_as(&fx.server.addr, "tok-alice").await;
    c.chat("capped", "two").await;
    let frames = c.until_result("capped").await;
    let warning = frames
        .iter()
        .find(|f| f["message_type"] == "status" && f["status"] == "warning")
        .unwrap_or_else(|| panic!("{frames:?}"));
    assert!(
        warning["detail"]
            .as_str()
            .unwrap()
            .contains("max_checkpoint_bytes"),
        "{warning}"
    );
    let (_, summary) = fx
        .api("tok-alice", "GET", "/api/sessions/capped", None)
        .await;
    let (status, rewound) = fx
        .api(
            "tok-alice",
            "POST",
            "/api/sessions/capped/rewind",
            Some(json!({"to_seq": summary["last_seq"].as_i64().unwrap() - 4})),
        )
        .await;
    assert_eq!(status, 200, "{rewound}");
    assert_eq!(rewound["files_restored"], false, "{rewound}");
    assert!(
        rewound["detail"]
            .as_str()
            .unwrap()
            .contains("over worktrees.max_checkpoint_bytes"),
        "{rewound}"
    );
    assert!(cwd(&summary).join("big.txt").exists());
}

/// After a restart every worktree is still there, and each conversation resumes in its own:
/// its `resuming` and `active` statuses name the worktree, branch and base.
#[tokio::test]
async fn a_restart_keeps_every_worktree_and_each_conversation_resumes_in_it() {
    let mut fx = Fixture::new("").await;
    let top = fx.repo.to_string_lossy().into_owned();
    let sub = fx.repo.join("sub").to_string_lossy().into_owned();
    let mut started = Vec::new();
    for (agent, dir) in [("top", &top), ("deep", &sub)] {
        let summary = fx.start(agent, json!({"cwd": dir, "worktree": true})).await;
        std::fs::write(cwd(&summary).join(format!("{agent}.txt")), "wip\n").unwrap();
        started.push((agent, summary));
    }
    assert!(fx.server.terminate().await.success());
    fx.server.restart().await;
    let mut c = connect_as(&fx.server.addr, "tok-alice").await;
    for (agent, summary) in &started {
        let wt = cwd(summary);
        assert_eq!(
            std::fs::read_to_string(wt.join(format!("{agent}.txt"))).unwrap(),
            "wip\n"
        );
        c.chat(agent, "after").await;
        let frames = c.until_result(agent).await;
        assert_eq!(reply_text(&frames), "Echo: after (turn 2)");
        let named: Vec<&Value> = frames
            .iter()
            .filter(|f| f["message_type"] == "status" && !f["worktree"].is_null())
            .collect();
        let statuses: Vec<&str> = named
            .iter()
            .map(|f| f["status"].as_str().unwrap())
            .collect();
        assert_eq!(statuses, ["resuming", "active"], "{frames:?}");
        for frame in named {
            assert_eq!(
                frame["worktree"],
                json!({"branch": format!("agentmux/{agent}"), "base": "main",
                       "path": summary["cwd"]}),
                "{frame}"
            );
            assert!(
                frame["detail"]
                    .as_str()
                    .unwrap()
                    .contains("on branch `agentmux/"),
                "{frame}"
            );
        }
        let (_, again) = fx
            .api("tok-alice", "GET", &format!("/api/sessions/{agent}"), None)
            .await;
        assert_eq!(again["cwd"], summary["cwd"]);
    }
    let listed = git(&fx.repo, &["worktree", "list", "--porcelain"]);
    for (_, summary) in &started {
        let top = cwd(summary)
            .ancestors()
            .find(|p| p.parent() == Some(&fx.server.data_dir.join("worktrees")))
            .unwrap()
            .to_path_buf();
        assert!(
            listed
                .lines()
                .any(|line| line.strip_prefix("worktree ").map(Path::new) == Some(&top)),
            "{listed}"
        );
    }
}

/// A git older than the one worktrees need, or none at the configured path, refuses to start
/// when worktrees are asked for, and says which version was found.
#[tokio::test]
async fn a_git_too_old_or_missing_refuses_to_start() {
    let tmp = tempfile::tempdir().unwrap();
    let old = tmp.path().join("old-git");
    std::fs::write(&old, "#!/bin/sh\necho 'git version 2.30.1'\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (git, says) in [
        (old.clone(), "worktrees need git 2.38 or later; found 2.30"),
        (tmp.path().join("no-git"), "cannot run git"),
    ] {
        let config = tmp.path().join("config.toml");
        std::fs::write(
            &config,
            format!(
                "[worktrees]\ngit = {}\n",
                toml_string(&git.to_string_lossy())
            ),
        )
        .unwrap();
        let (listened, output) = serve_output(&["--config", config.to_str().unwrap()], &[]).await;
        assert!(!listened, "{}: {output}", git.display());
        assert!(output.contains(says), "{}: {output}", git.display());
    }
}
