//! `watch`: a socket told about every conversation of its principal (turns starting and
//! ending, tools waiting for approval) without following them, and nothing of anyone else's.

use serde_json::{Value, json};

use crate::claude::{Fixture, stop};
use crate::common::*;
use crate::security::{TOKENS, connect_as};

/// Sends `watch` and waits until the socket has handled it.
async fn watch(c: &mut Client) {
    c.send(json!({"type": "watch"})).await;
    assert_eq!(c.before_pong().await, Vec::<Value>::new(), "no answer");
}

/// The `activity` frames among `frames`, as (agent_id, activity, seq).
fn lines(frames: &[Value]) -> Vec<(String, String, i64)> {
    frames
        .iter()
        .filter(|f| f["message_type"] == "activity")
        .map(|f| {
            (
                f["agent_id"].as_str().unwrap().to_owned(),
                f["activity"].as_str().unwrap().to_owned(),
                f["seq"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// A watcher sees the turns another socket of the same principal runs, with the `seq`s of the
/// user message and the `result`, and none of the conversation's own frames; another
/// principal's watcher sees nothing of it.
#[tokio::test]
async fn a_watcher_sees_its_principals_turns_and_no_one_elses() {
    let (_dir, config) = config_file(TOKENS);
    let server = TestServer::start_with(&["--config", &config]).await;
    let mut watcher = connect_as(&server.addr, "tok-alice").await;
    let mut bob = connect_as(&server.addr, "tok-bob").await;
    watch(&mut watcher).await;
    watch(&mut bob).await;

    let mut alice = connect_as(&server.addr, "tok-alice").await;
    let ack = chat_ack(&mut alice, "work", "hello").await;
    let frames = alice.until_result("work").await;
    let result = frames
        .iter()
        .find(|f| f["message_type"] == "result")
        .unwrap();

    let seen = watcher.recv_until(|f| f["activity"] == "turn_ended").await;
    assert_eq!(
        lines(&seen),
        [
            (
                "work".into(),
                "turn_started".into(),
                ack["seq"].as_i64().unwrap()
            ),
            (
                "work".into(),
                "turn_ended".into(),
                result["seq"].as_i64().unwrap()
            ),
        ],
        "{seen:?}"
    );
    assert!(
        seen.iter().all(|f| f["message_type"] == "activity"),
        "only activity lines: {seen:?}"
    );
    let ended = seen.last().unwrap();
    assert_eq!(ended["session_id"], ack["session_id"]);
    assert_eq!(ended["is_error"], false);

    // Bob's own turn reaches him; alice's never did.
    chat_ack(&mut bob, "bobs", "hi").await;
    let bob_seen = bob.recv_until(|f| f["activity"] == "turn_ended").await;
    let agents: Vec<String> = lines(&bob_seen).into_iter().map(|l| l.0).collect();
    assert_eq!(agents, ["bobs", "bobs"], "{bob_seen:?}");
    assert!(lines(&watcher.before_pong().await).is_empty());
}

/// A tool waiting for approval is announced with its tool name, and its resolution too; after
/// `unwatch` nothing more comes.
#[tokio::test]
async fn a_watcher_is_told_when_a_tool_waits_and_unwatch_stops_it() {
    let fx = Fixture::new("[session]\npermission_timeout_secs = 3600\n");
    let server = fx.start(&[]).await;
    let mut watcher = server.client().await;
    watch(&mut watcher).await;
    let mut c = server.client().await;
    chat_ack(&mut c, "tool", "please run TOOL:touch_x").await;
    let request = c
        .recv_until(|f| f["message_type"] == "permission_request")
        .await
        .pop()
        .unwrap();
    let seen = watcher
        .recv_until(|f| f["activity"] == "permission_request")
        .await;
    let line = seen.last().unwrap();
    assert_eq!(line["agent_id"], "tool");
    assert_eq!(line["tool_name"], request["tool_name"]);
    assert_eq!(line["seq"], request["seq"]);

    c.send(json!({"type": "permission_response", "agent_id": "tool",
        "request_id": request["request_id"], "behavior": "deny"}))
        .await;
    c.until_result("tool").await;
    let seen = watcher.recv_until(|f| f["activity"] == "turn_ended").await;
    let kinds: Vec<String> = lines(&seen).into_iter().map(|l| l.1).collect();
    assert_eq!(kinds, ["permission_resolved", "turn_ended"], "{seen:?}");

    watcher.send(json!({"type": "unwatch"})).await;
    watcher.before_pong().await;
    chat_ack(&mut c, "tool", "again").await;
    c.until_result("tool").await;
    assert!(lines(&watcher.before_pong().await).is_empty());
    stop(server, &fx).await;
}
