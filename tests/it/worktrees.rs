//! Conversations in git worktrees of their own, against the real git: two conversations in
//! one repository never see each other's edits, their changes are listed, committed, merged
//! (a conflict changes nothing), discarded, forked and removed with them; hostile options,
//! branches, bases and other principals are refused.

use std::path::Path;

use serde_json::{Value, json};

use crate::common::*;
use crate::repos::{Fixture, cwd, git};
use crate::security::{TOKENS, connect_as, server_with};

#[tokio::test]
async fn parallel_conversations_work_apart_and_land_through_review() {
    let fx = Fixture::new("").await;
    let dir = fx.repo.join("sub").to_string_lossy().into_owned();
    let one = fx.start("one", json!({"cwd": dir, "worktree": true})).await;
    let two = fx
        .start(
            "two",
            json!({"cwd": dir, "worktree": {"branch": "feature/two"}}),
        )
        .await;
    assert_eq!(one["worktree"]["branch"], "agentmux/one");
    assert_eq!(one["worktree"]["base"], "main");
    assert_eq!(one["worktree"]["project_dir"], dir.as_str());
    assert_eq!(two["worktree"]["branch"], "feature/two");
    let (wt1, wt2) = (cwd(&one), cwd(&two));
    assert!(
        wt1.starts_with(fx.server.data_dir.join("worktrees")),
        "{}",
        wt1.display()
    );
    assert!(wt1.ends_with("sub") && wt1 != wt2);
    // What each agent writes, as its tools would: the same file, each its own way.
    std::fs::write(wt1.join("../a.txt"), "one\nTWO\n").unwrap();
    std::fs::write(wt2.join("../a.txt"), "uno\n").unwrap();
    assert_eq!(
        std::fs::read_to_string(fx.repo.join("a.txt")).unwrap(),
        "one\ntwo\n"
    );

    let (status, changes) = fx
        .api("tok-alice", "GET", "/api/sessions/one/changes", None)
        .await;
    assert_eq!(status, 200, "{changes}");
    assert_eq!(changes["uncommitted"], true);
    assert_eq!(
        changes["files"],
        json!([{"path": "a.txt", "status": "modified", "additions": 1, "deletions": 1, "binary": false}])
    );
    assert!(
        changes["diff"].as_str().unwrap().contains("+TWO"),
        "{changes}"
    );

    // A merge of uncommitted work is refused; commit, then merge lands on main.
    let merge = json!({"strategy": "merge"});
    let (status, err) = fx
        .api(
            "tok-alice",
            "POST",
            "/api/sessions/one/changes/merge",
            Some(merge.clone()),
        )
        .await;
    assert_eq!(
        (status, err["code"].as_str()),
        (409, Some("conflict")),
        "{err}"
    );
    for agent in ["one", "two"] {
        let (status, committed) = fx
            .api(
                "tok-alice",
                "POST",
                &format!("/api/sessions/{agent}/changes/commit"),
                Some(json!({"message": "edit"})),
            )
            .await;
        assert_eq!(status, 200, "{committed}");
        assert_eq!(committed["commit"].as_str().map(str::len), Some(40));
    }
    let (status, merged) = fx
        .api(
            "tok-alice",
            "POST",
            "/api/sessions/one/changes/merge",
            Some(merge.clone()),
        )
        .await;
    assert_eq!(
        (status, merged["changed"].as_bool()),
        (200, Some(true)),
        "{merged}"
    );
    assert_eq!(
        git(&fx.repo, &["rev-parse", "main"]),
        merged["commit"].as_str().unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(fx.repo.join("a.txt")).unwrap(),
        "one\nTWO\n"
    );

    let main_before = git(&fx.repo, &["rev-parse", "main"]);
    let (status, err) = fx
        .api(
            "tok-alice",
            "POST",
            "/api/sessions/two/changes/merge",
            Some(merge),
        )
        .await;
    assert_eq!(
        (status, err["code"].as_str()),
        (409, Some("conflict")),
        "{err}"
    );
    assert_eq!(err["paths"], json!(["a.txt"]), "{err}");
    assert_eq!(
        git(&fx.repo, &["rev-parse", "main"]),
        main_before,
        "nothing changed"
    );
    assert_eq!(git(&fx.repo, &["status", "--porcelain"]), "");

    // Discard needs its confirmation, then returns the worktree to main as it is now.
    let (status, _) = fx
        .api(
            "tok-alice",
            "POST",
            "/api/sessions/two/changes/discard",
            Some(json!({"confirm": false})),
        )
        .await;
    assert_eq!(status, 400);
    let (status, _) = fx
        .api(
            "tok-alice",
            "POST",
            "/api/sessions/two/changes/discard",
            Some(json!({"confirm": true})),
        )
        .await;
    assert_eq!(status, 204);
    assert_eq!(
        std::fs::read_to_string(wt2.join("../a.txt")).unwrap(),
        "one\nTWO\n"
    );

    // A later chat may name the repository's directory again, and runs in the worktree.
    let mut c = connect_as(&fx.server.addr, "tok-alice").await;
    c.send(json!({"type": "chat", "agent_id": "two", "content": "again", "options": {"cwd": dir}}))
        .await;
    assert_eq!(
        reply_text(&c.until_result("two").await),
        "Echo: again (turn 2)"
    );
}

#[tokio::test]
async fn a_fork_gets_its_own_worktree_and_delete_removes_it() {
    let fx = Fixture::new("").await;
    let dir = fx.repo.to_string_lossy().into_owned();
    let source = fx.start("src", json!({"cwd": dir, "worktree": true})).await;
    std::fs::write(cwd(&source).join("wip.txt"), "not committed\n").unwrap();
    let (status, fork) = fx
        .api(
            "tok-alice",
            "POST",
            "/api/sessions/src/fork",
            Some(json!({"new_agent_id": "copy"})),
        )
        .await;
    assert_eq!(status, 201, "{fork}");
    assert_eq!(fork["worktree"]["branch"], "agentmux/copy");
    let forked = cwd(&fork);
    assert_ne!(forked, cwd(&source));
    assert_eq!(
        std::fs::read_to_string(forked.join("wip.txt")).unwrap(),
        "not committed\n"
    );

    // Deleting removes the worktree; the branch with unmerged work stays.
    let (status, _) = fx
        .api(
            "tok-alice",
            "POST",
            "/api/sessions/copy/changes/commit",
            Some(json!({"message": "wip"})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, deleted) = fx
        .api("tok-alice", "DELETE", "/api/sessions/copy", None)
        .await;
    assert_eq!(
        (status, deleted),
        (200, json!({"kept_branch": "agentmux/copy"}))
    );
    assert!(!forked.exists());
    assert!(git(&fx.repo, &["branch", "--list", "agentmux/copy"]).contains("agentmux/copy"));
    // The source's deletion drops its branch, which has nothing main lacks.
    let (status, deleted) = fx
        .api("tok-alice", "DELETE", "/api/sessions/src", None)
        .await;
    assert_eq!((status, deleted), (200, json!({"kept_branch": null})));
    assert_eq!(git(&fx.repo, &["branch", "--list", "agentmux/src"]), "");
}

#[tokio::test]
async fn a_root_can_make_worktrees_the_default_and_a_restart_keeps_them() {
    let mut fx = Fixture::new(", worktrees = true").await;
    let dir = fx.repo.to_string_lossy().into_owned();
    let isolated = fx.start("iso", json!({"cwd": dir})).await;
    assert_eq!(isolated["worktree"]["branch"], "agentmux/iso");
    let shared = fx
        .start("plain", json!({"cwd": dir, "worktree": false}))
        .await;
    assert_eq!(shared["worktree"], Value::Null);
    assert_eq!(shared["cwd"], dir.as_str());
    // Outside any repository the default does not apply.
    let root = fx
        .repo
        .parent()
        .unwrap()
        .join("plain")
        .to_string_lossy()
        .into_owned();
    let elsewhere = fx.start("elsewhere", json!({"cwd": root})).await;
    assert_eq!(elsewhere["worktree"], Value::Null);

    assert!(fx.server.terminate().await.success());
    fx.server.restart().await;
    let mut c = connect_as(&fx.server.addr, "tok-alice").await;
    c.chat("iso", "after").await;
    assert_eq!(
        reply_text(&c.until_result("iso").await),
        "Echo: after (turn 2)"
    );
    let (_, again) = fx.api("tok-alice", "GET", "/api/sessions/iso", None).await;
    assert_eq!(again["cwd"], isolated["cwd"]);
}

#[tokio::test]
async fn the_project_listing_says_where_a_worktree_can_be_had() {
    let fx = Fixture::new(r#", worktrees = true, principals = ["alice"]"#).await;
    let root = fx.repo.parent().unwrap().to_path_buf();
    // A linked checkout's `.git` is a file.
    let checkout = root.join("checkout");
    git(
        &fx.repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "side",
            &checkout.to_string_lossy(),
        ],
    );
    let listed = |projects: &Value| -> Vec<(String, bool, bool)> {
        projects["projects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let path = Path::new(p["path"].as_str().unwrap());
                let name = path.strip_prefix(&root).unwrap().to_string_lossy();
                (
                    name.into_owned(),
                    p["git"].as_bool().unwrap(),
                    p["worktree_default"].as_bool().unwrap(),
                )
            })
            .collect()
    };
    let own = |name: &str, git: bool, default: bool| (name.to_owned(), git, default);
    let (status, projects) = fx.api("tok-alice", "GET", "/api/projects", None).await;
    assert_eq!(status, 200, "{projects}");
    assert_eq!(
        listed(&projects),
        [
            own("", false, false),
            own("checkout", true, true),
            own("plain", false, false),
            own("repo", true, true),
        ]
    );
    // Once the root itself is a repository, everything under it is in one.
    git(&root, &["init", "-q"]);
    let (_, projects) = fx.api("tok-alice", "GET", "/api/projects", None).await;
    assert!(
        listed(&projects)
            .iter()
            .all(|(_, git, default)| *git && *default),
        "{projects}"
    );
    // Another principal sees nothing of a root that is not its own.
    let (status, projects) = fx.api("tok-bob", "GET", "/api/projects", None).await;
    assert_eq!(status, 200);
    assert_eq!(projects["projects"], json!([]));
}

#[tokio::test]
async fn hostile_worktree_options_and_other_principals_are_refused() {
    let fx = Fixture::new("").await;
    let dir = fx.repo.to_string_lossy().into_owned();
    let plain = fx
        .repo
        .parent()
        .unwrap()
        .join("plain")
        .to_string_lossy()
        .into_owned();
    for (options, says) in [
        (json!({"worktree": true}), "needs `options.cwd`"),
        (
            json!({"cwd": plain, "worktree": true}),
            "not inside a git repository",
        ),
        (
            json!({"cwd": dir, "worktree": {"branch": "--upload-pack=x"}}),
            "not a valid branch name",
        ),
        (
            json!({"cwd": dir, "worktree": {"branch": "refs/heads/../../x"}}),
            "not a valid branch name",
        ),
        (
            json!({"cwd": dir, "worktree": {"branch": "a..b"}}),
            "not a valid branch name",
        ),
        (
            json!({"cwd": dir, "worktree": {"branch": "main"}}),
            "exists already",
        ),
        (
            json!({"cwd": dir, "worktree": {"base": "main..HEAD"}}),
            "neither a branch nor a commit",
        ),
        (
            json!({"cwd": dir, "worktree": {"base": "nope"}}),
            "neither a branch nor a commit",
        ),
        (
            json!({"cwd": dir, "worktree": {"base": "-x"}}),
            "neither a branch nor a commit",
        ),
        (
            json!({"cwd": dir, "worktree": {"other": 1}}),
            "must be true, false",
        ),
        (
            json!({"cwd": dir, "worktree": "yes"}),
            "must be true, false",
        ),
    ] {
        let err = fx.refused("bad", options.clone()).await;
        assert_eq!(err["code"], "invalid_options", "{options}: {err}");
        assert!(
            err["error"].as_str().unwrap().contains(says),
            "{options}: {err}"
        );
        let (status, _) = fx.api("tok-alice", "GET", "/api/sessions/bad", None).await;
        assert_eq!(status, 404, "{options}: nothing is stored");
    }
    assert_eq!(
        std::fs::read_dir(fx.server.data_dir.join("worktrees"))
            .map(|d| d.count())
            .unwrap_or(0),
        0,
        "no worktree is left behind"
    );
    // A repository reaching above the root is refused: its worktree would hold files outside.
    // The root's default gives none there, and the conversation runs in the directory itself.
    let (mut server, _cfg) = server_with(&format!(
        "{TOKENS}\n[projects]\nroots = [{{ path = {}, worktrees = true }}]\n",
        toml_string(&fx.repo.join("sub").to_string_lossy())
    ))
    .await;
    let mut c = connect_as(&server.addr, "tok-alice").await;
    let sub = fx.repo.join("sub").to_string_lossy().into_owned();
    c.send(json!({"type": "chat", "agent_id": "up", "content": "hi", "options": {"cwd": sub, "worktree": true}}))
        .await;
    let frames = c
        .recv_until(|v| v["message_type"] == "error" || v["message_type"] == "result")
        .await;
    let err = frames.last().unwrap();
    assert_eq!(err["code"], "invalid_options", "{err}");
    assert!(
        err["error"].as_str().unwrap().contains("reaches outside"),
        "{err}"
    );
    c.send(json!({"type": "chat", "agent_id": "up", "content": "hi", "options": {"cwd": sub}}))
        .await;
    assert!(reply_text(&c.until_result("up").await).starts_with("Echo: hi"));
    let (_, summary) = get_as(&server, "tok-alice", "/api/sessions/up").await;
    assert_eq!(
        (summary["cwd"].as_str(), &summary["worktree"]),
        (Some(sub.as_str()), &Value::Null)
    );
    server.terminate().await;

    // Another principal's conversation is unknown; one without a worktree says so.
    fx.start("mine", json!({"cwd": dir, "worktree": true}))
        .await;
    fx.start("nowt", json!({})).await;
    for (method, path, body) in [
        ("GET", "/api/sessions/mine/changes", None),
        (
            "POST",
            "/api/sessions/mine/changes/commit",
            Some(json!({"message": "x"})),
        ),
        (
            "POST",
            "/api/sessions/mine/changes/merge",
            Some(json!({"strategy": "squash"})),
        ),
        (
            "POST",
            "/api/sessions/mine/changes/discard",
            Some(json!({"confirm": true})),
        ),
    ] {
        let (status, err) = fx.api("tok-bob", method, path, body).await;
        assert_eq!(
            (status, err["code"].as_str()),
            (404, Some("unknown_agent")),
            "{path}"
        );
    }
    let (status, err) = fx
        .api("tok-alice", "GET", "/api/sessions/nowt/changes", None)
        .await;
    assert_eq!(
        (status, err["code"].as_str()),
        (400, Some("invalid_request")),
        "{err}"
    );
    for body in [
        json!({"message": ""}),
        json!({"message": "a\u{0}b"}),
        json!({"message": "x".repeat(20_000)}),
        json!({}),
    ] {
        let (status, _) = fx
            .api(
                "tok-alice",
                "POST",
                "/api/sessions/mine/changes/commit",
                Some(body),
            )
            .await;
        assert_eq!(status, 400);
    }
    let (status, _) = fx
        .api(
            "tok-alice",
            "POST",
            "/api/sessions/mine/changes/merge",
            Some(json!({"strategy": "rebase"})),
        )
        .await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn a_worktree_directory_swapped_for_a_link_starts_nothing() {
    let mut fx = Fixture::new("").await;
    let dir = fx.repo.join("sub").to_string_lossy().into_owned();
    let summary = fx
        .start("link", json!({"cwd": dir, "worktree": true}))
        .await;
    assert!(fx.server.terminate().await.success());
    fx.server.restart().await;
    let wt_sub = cwd(&summary);
    std::fs::remove_dir_all(&wt_sub).unwrap();
    let outside = fx.repo.parent().unwrap().parent().unwrap().to_path_buf();
    std::os::unix::fs::symlink(&outside, &wt_sub).unwrap();
    let mut c = connect_as(&fx.server.addr, "tok-alice").await;
    c.chat("link", "go").await;
    let frames = c
        .recv_until(|v| v["message_type"] == "error" || v["message_type"] == "result")
        .await;
    let last = frames.last().unwrap();
    assert_eq!(last["code"], "forbidden", "{last}");
}

#[tokio::test]
async fn worktrees_of_conversations_gone_behind_the_servers_back_are_pruned_at_start() {
    let mut fx = Fixture::new("").await;
    let dir = fx.repo.to_string_lossy().into_owned();
    let gone = cwd(&fx
        .start("gone", json!({"cwd": dir, "worktree": true}))
        .await);
    let kept = cwd(&fx
        .start("kept", json!({"cwd": dir, "worktree": true}))
        .await);
    let db = fx.server.stop_and_open_db().await;
    sqlx::query("delete from session_info where agent_id = 'gone'")
        .execute(&db)
        .await
        .unwrap();
    db.close().await;
    fx.server.restart().await;
    assert!(!gone.exists() && kept.exists());
    let listed = git(&fx.repo, &["worktree", "list"]);
    assert!(
        !listed.contains(gone.to_string_lossy().as_ref()),
        "{listed}"
    );
    let (status, _) = fx
        .api("tok-alice", "GET", "/api/sessions/kept/changes", None)
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_running_turn_keeps_its_worktree_from_being_merged_or_discarded() {
    let gates = Gates::new("");
    let fx = Fixture::with(
        "",
        &format!(
            "[demo]\ngate_dir = {}\n",
            toml_string(&gates.dir.to_string_lossy())
        ),
    )
    .await;
    let dir = fx.repo.to_string_lossy().into_owned();
    gates.open("held", 1);
    let summary = fx
        .start("held", json!({"cwd": dir, "worktree": true}))
        .await;
    std::fs::write(cwd(&summary).join("a.txt"), "changed\n").unwrap();
    fx.api(
        "tok-alice",
        "POST",
        "/api/sessions/held/changes/commit",
        Some(json!({"message": "c"})),
    )
    .await;
    // Turn 2 waits at its gate: the agent may be writing files now.
    let mut c = connect_as(&fx.server.addr, "tok-alice").await;
    c.chat("held", "two").await;
    c.recv_until(|v| v["message_type"] == "stream_event" && v["agent_id"] == "held")
        .await;
    for (path, body) in [
        (
            "/api/sessions/held/changes/merge",
            json!({"strategy": "merge"}),
        ),
        (
            "/api/sessions/held/changes/discard",
            json!({"confirm": true}),
        ),
    ] {
        let (status, err) = fx.api("tok-alice", "POST", path, Some(body)).await;
        assert_eq!(
            (status, err["code"].as_str()),
            (409, Some("busy")),
            "{path}: {err}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(cwd(&summary).join("a.txt")).unwrap(),
        "changed\n"
    );
    gates.open("held", 2);
    c.until_result("held").await;
    let (status, merged) = fx
        .api(
            "tok-alice",
            "POST",
            "/api/sessions/held/changes/merge",
            Some(json!({"strategy": "merge"})),
        )
        .await;
    assert_eq!(status, 200, "{merged}");
}

/// Runs turn `n` of `agent_id` (held at its gate) and makes `edit` while it runs, as its agent
/// would; returns the turn's frames up to the `status` `changes` (or the result, when
/// `changes` is false).
async fn turn_that_edits(
    c: &mut Client,
    gates: &Gates,
    agent_id: &str,
    n: u32,
    options: Value,
    edit: impl FnOnce(),
    changes: bool,
) -> Vec<Value> {
    c.send(json!({"type": "chat", "agent_id": agent_id, "content": format!("turn {n}"), "options": options}))
        .await;
    let mut frames = c
        .recv_until(|v| v["message_type"] == "stream_event" && v["agent_id"] == agent_id)
        .await;
    edit();
    gates.open(agent_id, n);
    frames.extend(c.until_result(agent_id).await);
    if changes {
        frames.extend(
            c.recv_until(|v| v["message_type"] == "status" && v["status"] == "changes")
                .await,
        );
    }
    frames
}

#[tokio::test]
async fn rewind_puts_the_worktrees_files_back_and_changed_files_are_announced() {
    let gates = Gates::new("");
    let fx = Fixture::with(
        "",
        &format!(
            "[demo]\ngate_dir = {}\n",
            toml_string(&gates.dir.to_string_lossy())
        ),
    )
    .await;
    let dir = fx.repo.to_string_lossy().into_owned();
    let mut c = connect_as(&fx.server.addr, "tok-alice").await;
    let wt = fx.server.data_dir.join("worktrees");
    let at = |name: &str| {
        std::fs::read_dir(&wt)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path()
            .join(name)
    };
    // Turn 1 creates a file; turn 2 creates another and changes one that was committed.
    let first = turn_that_edits(
        &mut c,
        &gates,
        "rw",
        1,
        json!({"cwd": dir, "worktree": true}),
        || std::fs::write(at("kept.txt"), "turn 1\n").unwrap(),
        true,
    )
    .await;
    let result_1 = first
        .iter()
        .find(|f| f["message_type"] == "result")
        .unwrap()["seq"]
        .as_i64()
        .unwrap();
    let second = turn_that_edits(
        &mut c,
        &gates,
        "rw",
        2,
        json!({}),
        || {
            std::fs::write(at("created.txt"), "turn 2\n").unwrap();
            std::fs::write(at("a.txt"), "one\nTWO\n").unwrap();
        },
        true,
    )
    .await;
    let changes = second.last().unwrap();
    assert_eq!(
        changes["changes"],
        json!({"files": 3, "additions": 3, "deletions": 1, "uncommitted": true}),
        "kept.txt, created.txt and a.txt against main: {changes}"
    );
    // A turn that changes nothing announces nothing: the next `changes` is turn 4's.
    let mut later = turn_that_edits(&mut c, &gates, "rw", 3, json!({}), || {}, false).await;
    later.extend(
        turn_that_edits(
            &mut c,
            &gates,
            "rw",
            4,
            json!({}),
            || std::fs::remove_file(at("kept.txt")).unwrap(),
            true,
        )
        .await,
    );
    let announced: Vec<&Value> = later.iter().filter(|f| f["status"] == "changes").collect();
    assert_eq!(announced.len(), 1, "{later:?}");
    assert_eq!(announced[0]["changes"]["files"], 2, "{}", announced[0]);

    let (status, rewound) = fx
        .api(
            "tok-alice",
            "POST",
            "/api/sessions/rw/rewind",
            Some(json!({"to_seq": result_1})),
        )
        .await;
    assert_eq!(status, 200, "{rewound}");
    assert_eq!(rewound["files_restored"], true, "{rewound}");
    assert!(!at("created.txt").exists(), "turn 2's new file is gone");
    assert!(at("kept.txt").exists(), "turn 4's removal is undone");
    assert_eq!(std::fs::read_to_string(at("a.txt")).unwrap(), "one\ntwo\n");
    assert_eq!(std::fs::read_to_string(at("kept.txt")).unwrap(), "turn 1\n");
    assert_eq!(
        std::fs::read_to_string(fx.repo.join("a.txt")).unwrap(),
        "one\ntwo\n",
        "the main checkout is untouched"
    );
    // What it held before is kept in the repository: turn 2's file is in it.
    let (_, summary) = fx.api("tok-alice", "GET", "/api/sessions/rw", None).await;
    let before = format!(
        "refs/agentmux/checkpoints/{}/before-rewind:created.txt",
        summary["session_id"].as_str().unwrap()
    );
    assert_eq!(git(&fx.repo, &["show", &before]), "turn 2");

    // A fork has no checkpoints of the turns before it: rewinding it there puts no files back.
    let (status, fork) = fx
        .api(
            "tok-alice",
            "POST",
            "/api/sessions/rw/fork",
            Some(json!({"new_agent_id": "rw-fork"})),
        )
        .await;
    assert_eq!(status, 201, "{fork}");
    std::fs::write(cwd(&fork).join("fork.txt"), "made in the fork\n").unwrap();
    let (status, rewound) = fx
        .api(
            "tok-alice",
            "POST",
            "/api/sessions/rw-fork/rewind",
            Some(json!({"to_seq": result_1})),
        )
        .await;
    assert_eq!(status, 200, "{rewound}");
    assert_eq!(rewound["files_restored"], false, "{rewound}");
    assert!(cwd(&fork).join("fork.txt").exists());

    // Without a worktree, a rewind says the files stay as they are.
    let plain = fx.repo.parent().unwrap().join("plain");
    let plain_dir = plain.to_string_lossy().into_owned();
    for n in [1, 2] {
        gates.open("flat", n);
        c.send(json!({"type": "chat", "agent_id": "flat", "content": "x", "options": {"cwd": plain_dir}}))
            .await;
        c.until_result("flat").await;
        if n == 1 {
            std::fs::write(plain.join("made.txt"), "stays\n").unwrap();
        }
    }
    let (_, summary) = fx.api("tok-alice", "GET", "/api/sessions/flat", None).await;
    let (status, rewound) = fx
        .api(
            "tok-alice",
            "POST",
            "/api/sessions/flat/rewind",
            Some(json!({"to_seq": summary["last_seq"].as_i64().unwrap() - 4})),
        )
        .await;
    assert_eq!(status, 200, "{rewound}");
    assert_eq!(rewound["files_restored"], false, "{rewound}");
    assert!(
        rewound["detail"].as_str().unwrap().contains("not put back"),
        "{rewound}"
    );
    assert!(plain.join("made.txt").exists());
}
