//! Worktrees with the real Claude CLI: two conversations in one repository write the same file
//! through a Bash tool call the client allows, each in its own worktree; the changes are
//! listed, announced, committed and merged (the second merge conflicts and changes nothing), and
//! a rewind takes back the files of a dropped turn.

use serde_json::{Value, json};

use crate::common::*;
use crate::real_cli::{FakeApi, real_cli, start_server, stop};
use crate::repos::{cwd, git, repo_in, rest};

/// Runs a turn of `agent_id` whose model asks to run `command` (spaces as `+`) in Bash, allows
/// it, and returns the turn's frames up to the `status` `changes` that follows its result.
async fn allowed_bash_turn(
    c: &mut Client,
    agent_id: &str,
    command: &str,
    options: Value,
) -> Vec<Value> {
    c.send(
        json!({"type": "chat", "agent_id": agent_id, "content": format!("TOOL:{command}"),
        "options": options}),
    )
    .await;
    let mut frames = c
        .recv_until(|f| f["message_type"] == "permission_request" && f["agent_id"] == agent_id)
        .await;
    let request = frames.last().unwrap().clone();
    assert_eq!(request["tool_name"], "Bash", "{request}");
    assert_eq!(request["input"]["command"], command.replace('+', " "));
    c.send(json!({"type": "permission_response", "agent_id": agent_id,
        "request_id": request["request_id"], "behavior": "allow"}))
        .await;
    frames.extend(c.until_result(agent_id).await);
    assert!(
        frames
            .iter()
            .any(|f| f["message_type"] == "permission_resolved" && f["outcome"] == "allowed"),
        "{frames:?}"
    );
    frames.extend(
        c.recv_until(|f| {
            f["message_type"] == "status" && f["status"] == "changes" && f["agent_id"] == agent_id
        })
        .await,
    );
    frames
}

/// The `seq` of the turn's `result`.
fn result_seq(frames: &[Value]) -> i64 {
    frames
        .iter()
        .find(|f| f["message_type"] == "result")
        .and_then(|f| f["seq"].as_i64())
        .unwrap()
}

/// Two real CLIs in worktrees of one repository: each writes `a.txt` its own way and sees only
/// its own change, the main checkout stays as it was; each conversation's changes list exactly
/// that file and were announced after its turn; the first merge lands on `main`, the second
/// conflicts on `a.txt` and changes nothing; a rewind to the first turn removes the file a
/// later turn created, and the agent forgets that turn.
#[cfg_attr(
    no_test_claude,
    ignore = "needs the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN), not configured here"
)]
#[tokio::test]
async fn real_cli_agents_in_worktrees_work_apart_and_land_through_review() {
    let Some(cli) = real_cli() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let repo = repo_in(&base.join("root"));
    let api = FakeApi::start(&base).await;
    let (_cfg, config) = config_file(&format!(
        "[projects]\nroots = [{{ path = {} }}]\n[claude]\nconfig_dir = {}\n",
        toml_string(&base.join("root").to_string_lossy()),
        toml_string(&base.join("claude-home").to_string_lossy())
    ));
    let server = start_server(&base.join("data"), &cli, &api, &config).await;
    let mut c = server.client().await;
    let options = json!({"cwd": repo.to_string_lossy(), "worktree": true});
    let main_before = git(&repo, &["rev-parse", "main"]);

    let mut first_result = None;
    let mut worktrees = Vec::new();
    for agent in ["one", "two"] {
        let frames = allowed_bash_turn(
            &mut c,
            agent,
            &format!("printf+'from+{agent}\\n'+>+a.txt"),
            options.clone(),
        )
        .await;
        first_result.get_or_insert(result_seq(&frames));
        let announced = frames.last().unwrap();
        assert_eq!(
            announced["changes"],
            json!({"files": 1, "additions": 1, "deletions": 2, "uncommitted": true}),
            "{announced}"
        );
        let (status, summary) = rest(
            &server,
            None,
            "GET",
            &format!("/api/sessions/{agent}"),
            None,
        )
        .await;
        assert_eq!(status, 200, "{summary}");
        assert_eq!(summary["worktree"]["branch"], format!("agentmux/{agent}"));
        worktrees.push(cwd(&summary));
    }
    let (wt1, wt2) = (&worktrees[0], &worktrees[1]);
    assert_ne!(wt1, wt2);
    assert_eq!(
        std::fs::read_to_string(wt1.join("a.txt")).unwrap(),
        "from one\n"
    );
    assert_eq!(
        std::fs::read_to_string(wt2.join("a.txt")).unwrap(),
        "from two\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("a.txt")).unwrap(),
        "one\ntwo\n"
    );
    assert_eq!(
        git(&repo, &["status", "--porcelain"]),
        "",
        "the main checkout is untouched"
    );
    assert_eq!(git(&repo, &["rev-parse", "main"]), main_before);

    for agent in ["one", "two"] {
        let (status, changes) = rest(
            &server,
            None,
            "GET",
            &format!("/api/sessions/{agent}/changes"),
            None,
        )
        .await;
        assert_eq!(status, 200, "{changes}");
        assert_eq!(changes["uncommitted"], true, "{changes}");
        assert_eq!(
            changes["files"],
            json!([{"path": "a.txt", "status": "modified", "additions": 1, "deletions": 2, "binary": false}]),
            "{agent}: only its own write"
        );
        let diff = changes["diff"].as_str().unwrap();
        assert!(
            diff.contains(&format!("+from {agent}\n")) && diff.contains("-two\n"),
            "{diff}"
        );
        let (status, committed) = rest(
            &server,
            None,
            "POST",
            &format!("/api/sessions/{agent}/changes/commit"),
            Some(json!({"message": format!("from {agent}")})),
        )
        .await;
        assert_eq!(status, 200, "{committed}");
        assert_eq!(
            committed["commit"].as_str().map(str::len),
            Some(40),
            "{committed}"
        );
    }

    // The first merge lands on main; its checkout, clean, moves with it.
    let merge = json!({"strategy": "merge"});
    let (status, merged) = rest(
        &server,
        None,
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
    let main_merged = git(&repo, &["rev-parse", "main"]);
    assert_eq!(main_merged, merged["commit"].as_str().unwrap());
    assert_eq!(git(&repo, &["show", "main:a.txt"]), "from one");
    assert_eq!(
        std::fs::read_to_string(repo.join("a.txt")).unwrap(),
        "from one\n"
    );
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");

    // The second conflicts on a.txt and changes nothing: not main, not its branch.
    let two_before = git(&repo, &["rev-parse", "agentmux/two"]);
    let (status, err) = rest(
        &server,
        None,
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
    assert_eq!(git(&repo, &["rev-parse", "main"]), main_merged);
    assert_eq!(git(&repo, &["rev-parse", "agentmux/two"]), two_before);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert_eq!(git(wt2, &["status", "--porcelain"]), "");
    assert_eq!(
        std::fs::read_to_string(wt2.join("a.txt")).unwrap(),
        "from two\n"
    );

    // A second turn creates b.txt: against main, which has the first turn's commit now, that
    // is all that differs.
    let frames = allowed_bash_turn(&mut c, "one", "printf+'later\\n'+>+b.txt", json!({})).await;
    assert_eq!(
        frames.last().unwrap()["changes"],
        json!({"files": 1, "additions": 1, "deletions": 0, "uncommitted": true})
    );
    assert_eq!(
        std::fs::read_to_string(wt1.join("b.txt")).unwrap(),
        "later\n"
    );
    // Rewinding to the first turn's result takes it away.
    let (status, rewound) = rest(
        &server,
        None,
        "POST",
        "/api/sessions/one/rewind",
        Some(json!({"to_seq": first_result.unwrap()})),
    )
    .await;
    assert_eq!(status, 200, "{rewound}");
    assert_eq!(rewound["files_restored"], true, "{rewound}");
    assert!(
        !wt1.join("b.txt").exists(),
        "the dropped turn's file is gone"
    );
    assert_eq!(
        std::fs::read_to_string(wt1.join("a.txt")).unwrap(),
        "from one\n"
    );
    assert_eq!(git(&repo, &["rev-parse", "main"]), main_merged);

    // The agent carries on from the first turn, without the dropped one.
    chat_ack(&mut c, "one", "after the rewind").await;
    let reply = reply_text(&c.until_result("one").await);
    assert_eq!(reply, "Echo: after the rewind (history 2)");
    let last = api.requests().pop().unwrap().to_string();
    assert!(
        last.contains("from+one") && !last.contains("b.txt"),
        "{last}"
    );
    stop(server, &cli).await;
}
