//! Rewind, fork, delete and option changes over real sockets, checked at the agent boundary
//! with the demo agent (its reply counts the turns it remembers).

use serde_json::{Value, json};

use crate::common::*;
use crate::rest::{Rest, turn};

/// `seq` of the `result` in a turn's frames.
fn result_seq(frames: &[Value]) -> i64 {
    frames
        .iter()
        .find(|f| f["message_type"] == "result")
        .and_then(|f| f["seq"].as_i64())
        .expect("a stored result")
}

/// Subscribes a fresh socket from seq 0 and collects frames until `last` holds.
async fn history(server: &TestServer, agent_id: &str, last: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut c = server.client().await;
    c.send(json!({"type": "subscribe", "agent_id": agent_id, "since_seq": 0}))
        .await;
    c.recv_until(last).await
}

/// The texts users typed, as stored.
fn prompts(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .filter(|f| f["message_type"] == "user")
        .filter_map(|f| f["message"]["message"]["content"].as_str())
        .map(str::to_owned)
        .collect()
}

/// After a rewind to the end of turn 1, turns 2 and 3 are gone from the store and from the
/// agent's memory: the next reply is turn 2 again, the agent runs under a new id, and a later
/// subscribe from 0 sees turn 1, the stored `rewound` status, then the new turn.
#[tokio::test]
async fn rewind_drops_later_turns_and_the_agent_forgets_them() {
    let server = TestServer::start().await;
    let rest = Rest::new(&server);
    let mut c = server.client().await;
    let t1 = turn(&mut c, "rw", "alpha").await;
    turn(&mut c, "rw", "beta").await;
    let t3 = turn(&mut c, "rw", "gamma").await;
    assert_eq!(reply_text(&t3), "Echo: gamma (turn 3)");
    let (_, before) = rest.get("/api/sessions/rw").await;
    let last_seq = before["last_seq"].as_i64().unwrap();
    let anchor = result_seq(&t1);

    c.send(json!({"type": "rewind", "agent_id": "rw", "to_seq": anchor - 1}))
        .await;
    let err = c.recv_until(|f| f["message_type"] == "error").await;
    assert_eq!(err.last().unwrap()["code"], "invalid_seq");

    c.send(json!({"type": "rewind", "agent_id": "rw", "to_seq": anchor}))
        .await;
    let got = c
        .recv_until(|f| f["message_type"] == "status" && f["status"] == "rewound")
        .await;
    let rewound = got.last().unwrap();
    assert_eq!(rewound["dropped_after_seq"], anchor);
    assert_eq!(rewound["seq"], last_seq + 1, "seqs are never reused");

    let t2 = turn(&mut c, "rw", "delta").await;
    assert_eq!(reply_text(&t2), "Echo: delta (turn 2)");
    let init = t2
        .iter()
        .find(|f| f["message_type"] == "system")
        .expect("init");
    let (_, after) = rest.get("/api/sessions/rw").await;
    assert_eq!(after["sdk_session_id"], init["message"]["session_id"]);
    assert_ne!(
        after["sdk_session_id"], before["sdk_session_id"],
        "the agent forked at the anchor"
    );
    assert_eq!(after["turn_count"], 2);

    let all = history(&server, "rw", |f| {
        f["message_type"] == "result" && f["seq"].as_i64() > Some(anchor)
    })
    .await;
    assert_eq!(prompts(&all), vec!["alpha", "delta"]);
    let stored: Vec<i64> = seqs(&all);
    let mut expected: Vec<i64> = (1..=anchor).collect();
    expected.extend(last_seq + 1..=last_seq + 5);
    assert_eq!(stored, expected);
    let status = all.iter().find(|f| f["status"] == "rewound").unwrap();
    assert_eq!(status["seq"], last_seq + 1);
    assert_eq!(status["dropped_after_seq"], anchor);

    // REST: the same rewind is reachable, with typed errors.
    let (status, body) = rest
        .post("/api/sessions/rw/rewind", json!({"to_seq": anchor}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "rewound");
    let t = turn(&mut c, "rw", "epsilon").await;
    assert_eq!(reply_text(&t), "Echo: epsilon (turn 2)");
    let (status, err) = rest
        .post("/api/sessions/rw/rewind", json!({"to_seq": 1}))
        .await;
    assert_eq!((status, err["code"].as_str()), (400, Some("invalid_seq")));
    let (status, err) = rest.post("/api/sessions/rw/rewind", json!({})).await;
    assert_eq!((status, err["code"].as_str()), (400, Some("invalid_seq")));
    // A null field is an absent one; a body is an object, never its fields in an array.
    let (status, err) = rest
        .post("/api/sessions/rw/rewind", json!({"to_seq": null}))
        .await;
    assert_eq!((status, err["code"].as_str()), (400, Some("invalid_seq")));
    let (status, err) = rest.post("/api/sessions/rw/rewind", json!([anchor])).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (400, Some("invalid_request"))
    );
    let (status, err) = rest
        .post("/api/sessions/none/rewind", json!({"to_seq": 4}))
        .await;
    assert_eq!((status, err["code"].as_str()), (404, Some("unknown_agent")));
}

/// Runs turn 1 of `agent_id` with turns 2 and 3 sent while it runs. The gate is the test's:
/// turn 1 is long enough not to end by itself while the test waits, and the test ends it with
/// an `interrupt` once both other chats are acked as queued. Returns the `seq`s of turn 1's
/// `result` and of the two queued prompts, which are stored among turn 1's frames.
async fn run_with_two_queued(c: &mut Client, agent_id: &str) -> (i64, i64, i64) {
    let long = vec!["word"; 200].join(" ");
    c.chat(agent_id, &format!("one {long}")).await;
    c.recv_until(|f| f["message_type"] == "stream_event").await;
    let two = chat_ack(c, agent_id, "two").await;
    let three = chat_ack(c, agent_id, "three").await;
    assert_eq!(
        (&two["queue_position"], &three["queue_position"]),
        (&json!(1), &json!(2)),
        "both were queued behind turn 1"
    );
    c.send(json!({"type": "interrupt", "agent_id": agent_id}))
        .await;
    let t1 = c.until_result(agent_id).await;
    let r1 = result_seq(&t1);
    let t2 = c.until_result(agent_id).await;
    assert_eq!(reply_text(&t2), "Echo: two (turn 2)");
    let t3 = c.until_result(agent_id).await;
    assert_eq!(reply_text(&t3), "Echo: three (turn 3)");
    let (p2, p3) = (two["seq"].as_i64().unwrap(), three["seq"].as_i64().unwrap());
    assert!(
        p2 < r1 && p3 < r1,
        "the queued prompts are stored before turn 1's result"
    );
    (r1, p2, p3)
}

/// What the REST API says of a conversation: its turn count, its stored prompts, and whether
/// `message_count` agrees with the stored messages it lists.
async fn stored_turns(rest: &Rest, agent_id: &str) -> (i64, Vec<String>) {
    let (_, record) = rest.get(&format!("/api/sessions/{agent_id}")).await;
    let (_, page) = rest
        .get(&format!("/api/sessions/{agent_id}/messages?limit=1000"))
        .await;
    let messages = page["messages"].as_array().unwrap();
    assert_eq!(record["message_count"], messages.len(), "{record}");
    (record["turn_count"].as_i64().unwrap(), prompts(messages))
}

/// Rewinding to, or forking at, the end of turn 1 keeps exactly turn 1, even when turns 2 and
/// 3 were queued while it ran (their prompts are stored before its `result`): their prompts
/// go with the rest of those turns, the turn count is 1, and the demo agent, which counts the
/// turns it remembers from the store, answers the next chat as turn 2.
#[tokio::test]
async fn rewind_and_fork_keep_no_prompt_of_a_later_turn() {
    let server = TestServer::start_with(&["--demo-delay-ms", "100"]).await;
    let rest = Rest::new(&server);
    let mut c = server.client().await;
    let (r1, p2, p3) = run_with_two_queued(&mut c, "q").await;
    let first = format!("one {}", vec!["word"; 200].join(" "));

    c.send(json!({"type": "fork", "agent_id": "q", "new_agent_id": "q-fork", "at_seq": r1}))
        .await;
    c.recv_until(|f| f["status"] == "forked").await;
    assert_eq!(
        stored_turns(&rest, "q-fork").await,
        (1, vec![first.clone()])
    );
    let t = turn(&mut c, "q-fork", "four").await;
    assert_eq!(reply_text(&t), "Echo: four (turn 2)");

    assert_eq!(
        stored_turns(&rest, "q").await.0,
        3,
        "the original is untouched"
    );
    c.send(json!({"type": "rewind", "agent_id": "q", "to_seq": r1}))
        .await;
    let got = c.recv_until(|f| f["status"] == "rewound").await;
    let rewound = got.last().unwrap();
    assert_eq!(rewound["dropped_after_seq"], r1);
    assert_eq!(rewound["dropped_seqs"], json!([p2, p3]));
    assert_eq!(stored_turns(&rest, "q").await, (1, vec![first.clone()]));
    let t = turn(&mut c, "q", "four").await;
    assert_eq!(reply_text(&t), "Echo: four (turn 2)");
    let all = history(&server, "q", |f| {
        f["message_type"] == "result" && f["seq"].as_i64() > Some(r1)
    })
    .await;
    assert_eq!(prompts(&all), vec![first, "four".to_owned()]);
    assert!(seqs(&all).iter().all(|s| *s != p2 && *s != p3));
}

/// A rewind while a turn runs (held at its gate) is refused with `busy`; nothing is dropped.
#[tokio::test]
async fn rewind_during_a_turn_is_refused() {
    let gates = Gates::new("");
    let server = gates.start().await;
    gates.open("rb", 1);
    let mut c = server.client().await;
    let t1 = turn(&mut c, "rb", "one").await;
    c.chat("rb", "a reply that is held at its gate").await;
    c.recv_until(|f| f["message"]["event"]["type"] == "content_block_delta")
        .await;
    c.send(json!({"type": "rewind", "agent_id": "rb", "to_seq": result_seq(&t1)}))
        .await;
    let got = c.recv_until(|f| f["message_type"] == "error").await;
    assert_eq!(got.last().unwrap()["code"], "busy");
    assert_eq!(got.last().unwrap()["agent_id"], "rb");
    assert!(got.iter().all(|f| f["status"] != "rewound"), "{got:?}");
    gates.open("rb", 2);
    let rest = c.until_result("rb").await;
    assert_eq!(
        reply_text(&rest),
        "Echo: a reply that is held at its gate (turn 2)"
    );
    let all = history(&server, "rb", |f| f["seq"] == rest.last().unwrap()["seq"]).await;
    assert_eq!(prompts(&all), ["one", "a reply that is held at its gate"]);
}

/// A fork starts from the original's history up to a turn and then diverges: writes to the
/// fork never show in the original and the reverse, and each agent remembers its own turns.
#[tokio::test]
async fn fork_is_isolated_both_ways() {
    let server = TestServer::start().await;
    let rest = Rest::new(&server);
    let mut c = server.client().await;
    let t1 = turn(&mut c, "orig", "shared start").await;
    turn(&mut c, "orig", "original only").await;
    let at = result_seq(&t1);

    c.send(json!({"type": "fork", "agent_id": "orig", "new_agent_id": "branch", "at_seq": at}))
        .await;
    let got = c.recv_until(|f| f["status"] == "forked").await;
    let forked = got.last().unwrap();
    assert_eq!(forked["agent_id"], "branch");
    assert_eq!(forked["forked_from"], "orig");
    assert_eq!(forked["at_seq"], at);

    let b = turn(&mut c, "branch", "fork write").await;
    assert_eq!(reply_text(&b), "Echo: fork write (turn 2)");
    assert_eq!(
        b.iter().find(|f| f["message_type"] == "user").unwrap()["seq"],
        at + 1
    );
    let o = turn(&mut c, "orig", "original write").await;
    assert_eq!(reply_text(&o), "Echo: original write (turn 3)");
    let ack = |frames: &[Value]| {
        frames.iter().find(|f| f["message_type"] == "ack").unwrap()["session_id"].clone()
    };
    assert_ne!(ack(&b), ack(&o));

    let orig = history(&server, "orig", |f| {
        f["message_type"] == "result"
            && reply_text(std::slice::from_ref(f)).contains("original write")
    })
    .await;
    assert_eq!(
        prompts(&orig),
        vec!["shared start", "original only", "original write"]
    );
    let branch = history(&server, "branch", |f| {
        f["message_type"] == "result" && reply_text(std::slice::from_ref(f)).contains("fork write")
    })
    .await;
    assert_eq!(prompts(&branch), vec!["shared start", "fork write"]);
    assert!(branch.iter().all(|f| f["agent_id"] == "branch"));

    // Forking the latest turn by default, over REST; the new agent_id must be free.
    let (status, whole) = rest
        .post(
            "/api/sessions/orig/fork",
            json!({"new_agent_id": "branch2"}),
        )
        .await;
    assert_eq!(status, 201);
    assert_eq!(whole["turn_count"], 3);
    // Each titled as a fork of its source, and found by that word; the source keeps its title.
    assert_eq!(whole["title"], "shared start (fork)");
    let (_, branch) = rest.get("/api/sessions/branch").await;
    assert_eq!(branch["title"], "shared start (fork)");
    let (_, orig) = rest.get("/api/sessions/orig").await;
    assert_eq!(orig["title"], "shared start");
    let (_, found) = rest.get("/api/sessions?q=fork").await;
    let found: Vec<&str> = found["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["agent_id"].as_str().unwrap())
        .collect();
    assert_eq!(found.len(), 2, "{found:?}");
    let long = "x".repeat(200);
    let (status, _) = rest
        .patch("/api/sessions/orig", json!({"title": long}))
        .await;
    assert_eq!(status, 200);
    let (_, fork) = rest
        .post(
            "/api/sessions/orig/fork",
            json!({"new_agent_id": "branch3"}),
        )
        .await;
    let title = fork["title"].as_str().unwrap();
    assert!(
        title.ends_with("x (fork)") && title.chars().count() == 200,
        "{title}"
    );
    let w = turn(&mut c, "branch2", "later").await;
    assert_eq!(reply_text(&w), "Echo: later (turn 4)");
    let (status, err) = rest
        .post("/api/sessions/orig/fork", json!({"new_agent_id": "branch"}))
        .await;
    assert_eq!((status, err["code"].as_str()), (409, Some("agent_exists")));
    // Over the socket, the error echoes the frame's own `agent_id` and names the taken one.
    c.send(json!({"type": "fork", "agent_id": "orig", "new_agent_id": "branch"}))
        .await;
    let got = c.recv_until(|f| f["message_type"] == "error").await;
    let err = got.last().unwrap();
    assert_eq!(err["code"], "agent_exists");
    assert_eq!(err["agent_id"], "orig");
    assert!(err["error"].as_str().unwrap().contains("`branch`"), "{err}");
    c.send(json!({"type": "fork", "agent_id": "orig", "new_agent_id": "b3", "at_seq": 1}))
        .await;
    let got = c.recv_until(|f| f["message_type"] == "error").await;
    assert_eq!(got.last().unwrap()["code"], "invalid_seq");
}

/// Deleting a conversation in the middle of a turn stops its agent, leaves no row behind (no
/// orphan messages either), tells the subscribed socket, and frees the agent_id for a fresh
/// conversation.
#[tokio::test]
async fn delete_of_a_live_session_mid_turn() {
    let gates = Gates::new("");
    let mut server = gates.start().await;
    gates.open("keep", 1);
    let rest = Rest::new(&server);
    let mut c = server.client().await;
    turn(&mut c, "keep", "unrelated").await;
    c.chat("doomed", "a long reply that is held at its gate")
        .await;
    let first = c
        .recv_until(|f| f["message"]["event"]["type"] == "content_block_delta")
        .await;
    let old_session =
        first.iter().find(|f| f["agent_id"] == "doomed").unwrap()["session_id"].clone();
    let workspaces = server.data_dir.join("workspaces");
    let workspace = workspaces.join(old_session.as_str().unwrap());
    assert!(workspace.is_dir(), "the agent runs in its workspace");
    std::fs::write(workspace.join("notes.txt"), "made by the agent").unwrap();

    assert_eq!(rest.delete("/api/sessions/doomed").await, 204);
    let got = c.recv_until(|f| f["status"] == "deleted").await;
    assert!(
        got.iter().all(|f| f["message_type"] != "result"),
        "the turn was abandoned, not finished"
    );
    assert!(
        !workspace.exists(),
        "the workspace went with the conversation"
    );
    let (_, keep) = rest.get("/api/sessions/keep").await;
    assert!(
        workspaces
            .join(keep["session_id"].as_str().unwrap())
            .is_dir(),
        "another conversation's workspace stays"
    );
    // Had its agent lived on, opening the gate would let it finish now.
    gates.open("doomed", 1);

    let (status, err) = rest.get("/api/sessions/doomed").await;
    assert_eq!((status, err["code"].as_str()), (404, Some("unknown_agent")));

    // Another socket starts a new conversation under the same id; its first turn passes the
    // same gate, which the deleted turn reached long before.
    let mut other = server.client().await;
    let ack = chat_ack(&mut other, "doomed", "again").await;
    assert_eq!(ack["seq"], 1);
    assert_ne!(ack["session_id"], old_session);
    let fresh = other.until_result("doomed").await;
    assert_eq!(reply_text(&fresh), "Echo: again (turn 1)");
    // The socket that followed the deleted conversation heard nothing of it after `deleted`
    // (nor of the new one, which it does not follow).
    for _ in 0..5 {
        let got = c.before_pong().await;
        assert!(
            got.iter().all(|f| f["agent_id"] != "doomed"),
            "after `deleted`: {got:?}"
        );
    }
    let (_, list) = rest.get("/api/sessions?total=true").await;
    assert_eq!(list["total"], 2);
    // In the store: nothing of the deleted conversation, no orphan message, the other
    // conversation's four messages as they were.
    let db = server.stop_and_open_db().await;
    let sessions: i64 =
        sqlx::query_scalar("select count(*) from session_info where session_id = $1")
            .bind(old_session.as_str().unwrap())
            .fetch_one(&db)
            .await
            .unwrap();
    let orphans: i64 = sqlx::query_scalar(
        "select count(*) from messages where session_pk not in (select id from session_info)",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    let kept: i64 = sqlx::query_scalar(
        "select count(*) from messages m join session_info s on s.id = m.session_pk
         where s.agent_id = 'keep'",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!((sessions, orphans, kept), (0, 0, 4));
}

/// The permission mode the demo reports in a turn's `init`.
fn permission_mode_of(frames: &[Value]) -> String {
    let init = frames
        .iter()
        .find(|f| f["message_type"] == "system")
        .expect("an init");
    init["message"]["permissionMode"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Deleting removes only a workspace directory the server made under
/// `<data-dir>/workspaces/`: a workspace replaced by a symbolic link to elsewhere, or a
/// working directory outside the workspaces, is left alone with everything in it.
#[tokio::test]
async fn delete_never_removes_anything_outside_the_workspaces() {
    let mut server = TestServer::start().await;
    let rest = Rest::new(&server);
    let mut c = server.client().await;
    let outside = tempfile::tempdir().unwrap();
    let precious = outside.path().join("precious.txt");
    std::fs::write(&precious, "not the server's").unwrap();

    let linked = turn(&mut c, "linked", "one").await;
    let workspace = server
        .data_dir
        .join("workspaces")
        .join(linked[0]["session_id"].as_str().unwrap());
    std::fs::remove_dir_all(&workspace).unwrap();
    std::os::unix::fs::symlink(outside.path(), &workspace).unwrap();
    assert_eq!(rest.delete("/api/sessions/linked").await, 204);
    assert!(precious.is_file(), "the link was not followed");

    turn(&mut c, "elsewhere", "two").await;
    drop(c);
    let db = server.stop_and_open_db().await;
    sqlx::query("update session_info set cwd = $1 where agent_id = 'elsewhere'")
        .bind(outside.path().to_str().unwrap())
        .execute(&db)
        .await
        .unwrap();
    db.close().await;
    server.restart().await;
    let rest = Rest::new(&server);
    assert_eq!(rest.delete("/api/sessions/elsewhere").await, 204);
    assert!(
        precious.is_file(),
        "a directory outside the workspaces stays"
    );
    let (status, _) = rest.get("/api/sessions/elsewhere").await;
    assert_eq!(status, 404);
}

/// A new model or permission mode in `chat.options` applies from that turn on (the demo
/// reports its model in the init and assistant messages, its permission mode in the init), is
/// stored, and survives a restart; a conversation created with a permission mode reports it
/// from its first turn.
#[tokio::test]
async fn options_change_between_turns() {
    let mut server = TestServer::start().await;
    let mut c = server.client().await;
    c.send(
        json!({"type": "chat", "agent_id": "opt-new", "content": "hi",
        "options": {"permission_mode": "acceptEdits"}}),
    )
    .await;
    let created = c.until_result("opt-new").await;
    assert_eq!(permission_mode_of(&created), "acceptEdits");
    let model_of = |frames: &[Value]| {
        let init = frames
            .iter()
            .find(|f| f["message_type"] == "system")
            .unwrap();
        let assistant = frames
            .iter()
            .find(|f| f["message_type"] == "assistant")
            .unwrap();
        (
            init["message"]["model"].as_str().unwrap().to_owned(),
            assistant["message"]["message"]["model"]
                .as_str()
                .unwrap()
                .to_owned(),
        )
    };
    let t1 = turn(&mut c, "opt", "one").await;
    assert_eq!(model_of(&t1), ("demo".into(), "demo".into()));
    assert_eq!(permission_mode_of(&t1), "default");
    c.send(json!({"type": "chat", "agent_id": "opt", "content": "two",
        "options": {"model": "model-b", "permission_mode": "plan"}}))
        .await;
    let t2 = c.until_result("opt").await;
    assert_eq!(model_of(&t2), ("model-b".into(), "model-b".into()));
    assert_eq!(permission_mode_of(&t2), "plan");
    assert_eq!(
        reply_text(&t2),
        "Echo: two (turn 2)",
        "the same agent conversation goes on"
    );
    let (_, got) = Rest::new(&server).get("/api/sessions/opt").await;
    assert_eq!(got["model"], "model-b");
    assert_eq!(got["permission_mode"], "plan");

    server.terminate().await;
    let restarted = TestServer::start_in(&server.data_dir, &["--demo-delay-ms", "0"], &[]).await;
    let mut c = restarted.client().await;
    let t3 = turn(&mut c, "opt", "three").await;
    assert_eq!(model_of(&t3).0, "model-b");
    assert_eq!(permission_mode_of(&t3), "plan");
    assert_eq!(reply_text(&t3), "Echo: three (turn 3)");
}

/// The argument of the spawn's `prefix` flag (`--resume=` ...), if given.
fn flag<'a>(spawn: &'a Value, prefix: &str) -> Option<&'a str> {
    spawn["argv"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix(prefix))
}

/// At the agent boundary with the (fake) Claude CLI, whose reply counts the prompts the model
/// was sent: after a rewind the CLI is resumed at the turn's last assistant message as a fork
/// under a new id, so the dropped turns are no longer sent; a fork forks the CLI session and
/// leaves the original's alone; a new model goes through `set_model` between turns, in the
/// same process.
#[tokio::test]
async fn claude_cli_forgets_rewound_turns_and_forks_its_session() {
    let fx = crate::claude::Fixture::new("");
    let server = fx.start(&[]).await;
    let rest = Rest::new(&server);
    let mut c = server.client().await;
    let t1 = turn(&mut c, "cl", "one").await;
    let two = turn(&mut c, "cl", "two").await;
    assert_eq!(reply_text(&two), "Echo: two (history 2)");
    let anchor_uuid = t1
        .iter()
        .rfind(|f| f["message_type"] == "assistant")
        .unwrap()["message"]["uuid"]
        .clone();
    let (_, before) = rest.get("/api/sessions/cl").await;

    c.send(json!({"type": "rewind", "agent_id": "cl", "to_seq": result_seq(&t1)}))
        .await;
    c.recv_until(|f| f["status"] == "rewound").await;
    let three = turn(&mut c, "cl", "three").await;
    assert_eq!(
        reply_text(&three),
        "Echo: three (history 2)",
        "turn two is forgotten"
    );
    let (_, after) = rest.get("/api/sessions/cl").await;
    let spawn = fx.spawns().last().unwrap().clone();
    assert_eq!(flag(&spawn, "--resume="), before["sdk_session_id"].as_str());
    assert_eq!(flag(&spawn, "--resume-session-at="), anchor_uuid.as_str());
    assert_eq!(flag(&spawn, "--fork-session"), Some(""));
    assert_eq!(
        flag(&spawn, "--session-id="),
        after["sdk_session_id"].as_str()
    );
    assert_ne!(after["sdk_session_id"], before["sdk_session_id"]);

    let (status, _) = rest
        .post("/api/sessions/cl/fork", json!({"new_agent_id": "cl-fork"}))
        .await;
    assert_eq!(status, 201);
    let four = turn(&mut c, "cl-fork", "four").await;
    assert_eq!(reply_text(&four), "Echo: four (history 3)");
    let spawn = fx.spawns().last().unwrap().clone();
    let (_, fork) = rest.get("/api/sessions/cl-fork").await;
    assert_eq!(flag(&spawn, "--resume="), after["sdk_session_id"].as_str());
    assert_eq!(
        flag(&spawn, "--resume-session-at="),
        None,
        "a fork of the whole session"
    );
    assert_eq!(
        flag(&spawn, "--session-id="),
        fork["sdk_session_id"].as_str()
    );
    let five = turn(&mut c, "cl", "five").await;
    assert_eq!(
        reply_text(&five),
        "Echo: five (history 3)",
        "the fork's turn is not in the original"
    );

    let spawns_before = fx.spawns().len();
    c.send(json!({"type": "chat", "agent_id": "cl", "content": "six", "options": {"model": "claude-other"}}))
        .await;
    let six = c.until_result("cl").await;
    let init = six.iter().find(|f| f["message_type"] == "system").unwrap();
    assert_eq!(init["message"]["model"], "claude-other");
    assert_eq!(reply_text(&six), "Echo: six (history 4)");
    assert_eq!(
        fx.spawns().len(),
        spawns_before,
        "switched in the running process"
    );
    assert!(
        fx.stdin()
            .iter()
            .any(|(_, line)| line["request"]["subtype"] == "set_model"
                && line["request"]["model"] == "claude-other")
    );
}

/// Each `result` says what its own turn cost (the agent's `total_cost_usd` is a running total
/// of its process): the same live and in a replay, summing to the conversation's total, and
/// right again for the first turn of a new process after a restart.
#[tokio::test]
async fn each_result_carries_its_own_turn_cost() {
    let mut server = TestServer::start().await;
    let mut c = server.client().await;
    let mut live = Vec::new();
    for content in ["one", "two", "three"] {
        chat_ack(&mut c, "tc", content).await;
        let frames = c.until_result("tc").await;
        live.push(frames.last().unwrap().clone());
    }
    let mut previous_running = 0.0;
    let mut sum = 0.0;
    for result in &live {
        let running = result["message"]["total_cost_usd"].as_f64().unwrap();
        let turn = result["turn_cost_usd"]
            .as_f64()
            .expect("a result says its turn's cost");
        assert!(
            (turn - (running - previous_running)).abs() < 1e-12,
            "{result}"
        );
        assert!(turn > 0.0);
        previous_running = running;
        sum += turn;
    }
    let rest = Rest::new(&server);
    let (_, info) = rest.get("/api/sessions/tc").await;
    assert!(
        (info["total_cost_usd"].as_f64().unwrap() - sum).abs() < 1e-12,
        "{info}"
    );

    // A replay carries the same figures, byte for byte.
    let mut other = server.client().await;
    other
        .send(json!({"type": "subscribe", "agent_id": "tc", "since_seq": 0}))
        .await;
    let replayed: Vec<Value> = other
        .recv_until(|f| f["message_type"] == "result" && f["seq"] == live[2]["seq"])
        .await
        .into_iter()
        .filter(|f| f["message_type"] == "result")
        .collect();
    assert_eq!(replayed, live);

    // After a restart the agent is a new process: its running total starts again, and the
    // turn's own cost is still right.
    assert!(server.terminate().await.success());
    let server = TestServer::start_in(&server.data_dir, &["--demo-delay-ms", "0"], &[]).await;
    let mut c = server.client().await;
    chat_ack(&mut c, "tc", "four").await;
    let result = c.until_result("tc").await.pop().unwrap();
    let running = result["message"]["total_cost_usd"].as_f64().unwrap();
    assert!(
        running < previous_running,
        "a new process counts from zero: {result}"
    );
    assert!((result["turn_cost_usd"].as_f64().unwrap() - running).abs() < 1e-12);
    let (_, info) = Rest::new(&server).get("/api/sessions/tc").await;
    assert!((info["total_cost_usd"].as_f64().unwrap() - (sum + running)).abs() < 1e-12);
}

/// What the demo spends on a turn: $0.0001, its words as tokens (the prompt in; the reply,
/// `Echo: <prompt> (turn N)`, out) and the duration its result reports.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Spent {
    cost: f64,
    input: i64,
    output: i64,
    duration: i64,
}

impl Spent {
    /// Adds a demo turn whose frames are `frames`, checking its reply.
    fn add(&mut self, frames: &[Value], prompt: &str, turn: usize) {
        let reply = format!("Echo: {prompt} (turn {turn})");
        assert_eq!(reply_text(frames), reply);
        let result = &frames.last().unwrap()["message"];
        self.cost += 0.0001;
        self.input += prompt.split_whitespace().count() as i64;
        self.output += reply.split_whitespace().count() as i64;
        self.duration += result["duration_ms"].as_i64().unwrap();
        assert_eq!(
            (
                result["usage"]["input_tokens"].as_i64(),
                result["usage"]["output_tokens"].as_i64()
            ),
            (
                Some(prompt.split_whitespace().count() as i64),
                Some(reply.split_whitespace().count() as i64)
            ),
            "{result}"
        );
    }

    /// Checks a conversation's totals as `GET /api/sessions/{agent_id}` reports them.
    async fn check(&self, rest: &Rest, agent_id: &str, when: &str) {
        let (status, got) = rest.get(&format!("/api/sessions/{agent_id}")).await;
        assert_eq!(status, 200);
        let cost = got["total_cost_usd"].as_f64().unwrap();
        assert!(
            (cost - self.cost).abs() < 1e-12,
            "{agent_id} {when}: cost {cost}, expected {}",
            self.cost
        );
        assert_eq!(
            (
                got["input_tokens"].as_i64(),
                got["output_tokens"].as_i64(),
                got["duration_ms"].as_i64()
            ),
            (Some(self.input), Some(self.output), Some(self.duration)),
            "{agent_id} {when}: {got}"
        );
    }
}

/// Totals are exactly what the turns spent: they add up across turns and across a restart
/// (where the agent's own running total starts again), keep counting after a rewind, and
/// start at zero for a fork and for an import.
#[tokio::test]
async fn totals_are_exact_across_turns_restart_rewind_fork_and_import() {
    let mut server = TestServer::start().await;
    let mut c = server.client().await;
    let mut spent = Spent::default();
    let t1 = turn(&mut c, "tot", "one two").await;
    spent.add(&t1, "one two", 1);
    spent
        .check(&Rest::new(&server), "tot", "after turn 1")
        .await;
    let t2 = turn(&mut c, "tot", "three").await;
    spent.add(&t2, "three", 2);
    spent
        .check(&Rest::new(&server), "tot", "after turn 2")
        .await;

    assert!(server.terminate().await.success());
    let server = TestServer::start_in(&server.data_dir, &["--demo-delay-ms", "0"], &[]).await;
    let rest = Rest::new(&server);
    spent.check(&rest, "tot", "after a restart").await;
    let mut c = server.client().await;
    let t3 = turn(&mut c, "tot", "four five six").await;
    spent.add(&t3, "four five six", 3);
    spent
        .check(&rest, "tot", "after a turn on the new process")
        .await;

    // A rewind drops turns 2 and 3 but not what they cost.
    let (status, _) = rest
        .post(
            "/api/sessions/tot/rewind",
            json!({"to_seq": result_seq(&t1)}),
        )
        .await;
    assert_eq!(status, 200);
    spent.check(&rest, "tot", "after the rewind").await;
    let (_, info) = rest.get("/api/sessions/tot").await;
    assert_eq!(info["turn_count"], 1);
    let t4 = turn(&mut c, "tot", "seven").await;
    spent.add(&t4, "seven", 2);
    spent
        .check(&rest, "tot", "after a turn after the rewind")
        .await;

    // A fork starts at zero and counts its own turns only; the original is unchanged.
    let (status, fork) = rest
        .post(
            "/api/sessions/tot/fork",
            json!({"new_agent_id": "tot-fork", "at_seq": result_seq(&t1)}),
        )
        .await;
    assert_eq!(status, 201, "{fork}");
    let mut forked = Spent::default();
    forked.check(&rest, "tot-fork", "after the fork").await;
    let f1 = turn(&mut c, "tot-fork", "eight").await;
    forked.add(&f1, "eight", 2);
    forked
        .check(&rest, "tot-fork", "after a turn on the fork")
        .await;
    spent.check(&rest, "tot", "after a turn on its fork").await;

    // An import starts at zero too, whatever its transcript's results say.
    let export = rest.text("/api/sessions/tot/export").await;
    let (status, imported) = rest
        .send(
            rest.http
                .post(server.url("/api/sessions/import?agent_id=tot-import"))
                .header("content-type", "application/x-ndjson")
                .body(export),
        )
        .await;
    assert_eq!(status, 201, "{imported}");
    let mut fresh = Spent::default();
    fresh.check(&rest, "tot-import", "after the import").await;
    let i1 = turn(&mut c, "tot-import", "nine").await;
    fresh.add(&i1, "nine", 1);
    fresh
        .check(&rest, "tot-import", "after a turn on the import")
        .await;
    spent.check(&rest, "tot", "at the end").await;
}
