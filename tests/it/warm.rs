//! Warming a conversation's agent when someone opens it: `subscribe` with `warm` and
//! `POST /api/sessions/{agent_id}/warm`, single-flight, within the live limits, and private to
//! the conversation's principal.

use std::time::Duration;

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::claude::{Fixture, alive, arg, spawned, stop};
use crate::common::*;
use crate::rest::Rest;
use crate::security::{TOKENS, connect_as};

/// Subscribes with `warm: true` and waits until the socket has handled it (a `pong` follows).
async fn warm_subscribe(c: &mut Client, agent_id: &str) -> Vec<Value> {
    c.send(json!({"type": "subscribe", "agent_id": agent_id, "since_seq": 0, "warm": true}))
        .await;
    c.send(json!({"type": "ping", "ts": "warmed"})).await;
    c.recv_until(|f| f["message_type"] == "pong" && f["ts"] == "warmed")
        .await
}

/// Makes conversations `ids` (one turn each) and restarts the server with `more_toml` added to
/// its configuration, so that they are dormant.
async fn dormant(fx: &Fixture, ids: &[&str], more_toml: &str) -> (TestServer, Vec<String>) {
    let mut server = fx.start(&[]).await;
    let mut c = server.client().await;
    let mut sessions = Vec::new();
    for id in ids {
        let ack = chat_ack(&mut c, id, "first").await;
        sessions.push(ack["session_id"].as_str().unwrap().to_owned());
        c.until_result(id).await;
    }
    drop(c);
    assert!(server.terminate().await.success());
    let mut toml = std::fs::read_to_string(&fx.config).unwrap();
    toml.push_str(more_toml);
    std::fs::write(&fx.config, toml).unwrap();
    (fx.start(&[]).await, sessions)
}

/// 100 warm requests at once (50 sockets subscribing with `warm`, 50 REST calls) start exactly
/// one process, resuming the conversation; the next chat runs on it and remembers.
#[tokio::test]
async fn concurrent_warms_start_one_process_that_the_next_chat_uses() {
    let fx = Fixture::new("");
    let (server, sessions) = dormant(&fx, &["w"], "").await;
    assert_eq!(fx.spawns().len(), 1);
    let rest = Rest::new(&server);
    let sockets = (0..50).map(|_| async {
        let mut c = server.client().await;
        warm_subscribe(&mut c, "w").await;
        c
    });
    let posts = (0..50).map(|_| rest.post("/api/sessions/w/warm", json!({})));
    let (clients, answers) = tokio::join!(join_all(sockets), join_all(posts));
    for (status, body) in answers {
        assert_eq!(status, 202, "{body}");
        assert_eq!(body["status"], "warming");
    }
    let spawns = spawned(&fx, 2, Duration::from_secs(10)).await;
    assert_eq!(spawns.len(), 2, "the warm-up started a process");
    assert_eq!(arg(&spawns[1], "--resume="), Some(sessions[0].as_str()));
    let warm_pid = spawns[1]["pid"].as_i64().unwrap();
    assert!(alive(warm_pid));

    let mut c = server.client().await;
    chat_ack(&mut c, "w", "second").await;
    assert_eq!(
        reply_text(&c.until_result("w").await),
        "Echo: second (history 2)"
    );
    assert_eq!(fx.prompt_pids().last(), Some(&warm_pid), "the warm process");
    assert_eq!(fx.spawns().len(), 2, "exactly one process for 100 warms");
    drop(clients);
    stop(server, &fx).await;
}

/// At the principal's live limit a warm is refused with a `status` (and `refused` over REST),
/// starts nothing and takes nothing from the live conversation.
#[tokio::test]
async fn warm_respects_the_live_limit() {
    let fx = Fixture::new("");
    let limit = "\n[session]\nmax_live_per_principal = 1\n";
    let (server, _) = dormant(&fx, &["a", "b"], limit).await;
    let before = fx.spawns().len();

    let mut c = server.client().await;
    let frames = warm_subscribe(&mut c, "a").await;
    assert!(!frames.iter().any(|f| f["status"] == "warm_refused"));
    let spawns = spawned(&fx, before + 1, Duration::from_secs(10)).await;
    assert_eq!(spawns.len(), before + 1);
    // The opener is told when the warm-up is complete.
    c.recv_until(|f| f["agent_id"] == "a" && f["status"] == "ready")
        .await;

    let frames = warm_subscribe(&mut c, "b").await;
    let refused: Vec<&Value> = frames
        .iter()
        .filter(|f| f["status"] == "warm_refused")
        .collect();
    assert_eq!(refused.len(), 1, "{frames:?}");
    assert_eq!(refused[0]["agent_id"], "b");
    assert!(
        !frames.iter().any(|f| f["message_type"] == "error"),
        "not an error"
    );
    let (status, body) = Rest::new(&server)
        .post("/api/sessions/b/warm", json!({}))
        .await;
    assert_eq!(status, 202);
    assert_eq!(body["status"], "refused");
    assert!(body["detail"].as_str().unwrap().contains("at most 1"));

    chat_ack(&mut c, "a", "second").await;
    assert_eq!(
        reply_text(&c.until_result("a").await),
        "Echo: second (history 2)"
    );
    assert_eq!(fx.spawns().len(), before + 1, "b started nothing");
    let (_, b) = Rest::new(&server).get("/api/sessions/b").await;
    assert_eq!(b["status"], "dormant");
    stop(server, &fx).await;
}

/// Another principal's conversation answers a warm exactly like one that does not exist; bad
/// ids are refused; `warm` that is not a boolean is a `bad_frame`.
#[tokio::test]
async fn warm_is_private_and_checks_its_input() {
    let (_dir, config) = config_file(TOKENS);
    let server = TestServer::start_with(&["--config", &config, "--demo-delay-ms", "0"]).await;
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    chat_ack(&mut alice, "mine", "hello").await;
    alice.until_result("mine").await;

    let mut bob = connect_as(&server.addr, "tok-bob").await;
    let theirs = warm_subscribe(&mut bob, "mine").await;
    let unknown = warm_subscribe(&mut bob, "nosuch").await;
    let error = |frames: &[Value]| {
        frames
            .iter()
            .find(|f| f["message_type"] == "error")
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(error(&theirs)["code"], "unknown_agent");
    assert_eq!(error(&unknown)["code"], "unknown_agent");
    assert_eq!(
        error(&theirs)["error"]
            .as_str()
            .unwrap()
            .replace("mine", "X"),
        error(&unknown)["error"]
            .as_str()
            .unwrap()
            .replace("nosuch", "X"),
    );

    let rest = Rest::new(&server);
    let post = |token: &'static str, id: String| {
        let req = rest
            .http
            .post(format!("{}/api/sessions/{id}/warm", rest.base))
            .bearer_auth(token);
        rest.send(req)
    };
    let (status, body) = post("tok-bob", "mine".into()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("unknown_agent"))
    );
    for id in ["a..b", "-rf", "nosuch"] {
        let (status, body) = post("tok-bob", id.into()).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (404, Some("unknown_agent")),
            "{id}"
        );
    }
    let (status, body) = post("tok-bob", "x".repeat(200)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_agent_id"))
    );
    let (status, body) = post("tok-alice", "mine".into()).await;
    assert_eq!((status, body["status"].as_str()), (202, Some("warming")));

    bob.send(json!({"type": "subscribe", "agent_id": "mine", "warm": "yes"}))
        .await;
    let bad = bob.recv_until(|f| f["message_type"] == "error").await;
    assert_eq!(bad.last().unwrap()["code"], "bad_frame");
}

/// With every process place taken by a running turn, a warm starts nothing and says so; the
/// running turn is not disturbed.
#[tokio::test]
async fn warm_never_displaces_a_running_turn() {
    let fx = Fixture::new("[claude]\nmax_live_processes = 1\n");
    let (server, _) = dormant(&fx, &["a", "b"], "").await;
    let before = fx.spawns().len();
    let mut c = server.client().await;
    chat_ack(&mut c, "a", "LATE hello").await;
    let mut follower = server.client().await;
    follower
        .send(json!({"type": "subscribe", "agent_id": "b", "since_seq": 0}))
        .await;
    // The warm must find b followed: wait until the socket has handled the subscribe.
    follower
        .send(json!({"type": "ping", "ts": "followed"}))
        .await;
    follower
        .recv_until(|f| f["message_type"] == "pong" && f["ts"] == "followed")
        .await;
    let (status, body) = Rest::new(&server)
        .post("/api/sessions/b/warm", json!({}))
        .await;
    assert_eq!((status, body["status"].as_str()), (202, Some("warming")));
    let told = follower
        .recv_until(|f| f["agent_id"] == "b" && f["status"] == "warm_refused")
        .await;
    assert!(
        told.last().unwrap()["detail"]
            .as_str()
            .unwrap()
            .contains("running turns")
    );
    assert_eq!(
        reply_text(&c.until_result("a").await),
        "Echo: LATE hello (history 2)"
    );
    assert_eq!(fx.spawns().len(), before + 1, "only a's process");
    // b's next chat starts it as usual.
    chat_ack(&mut c, "b", "second").await;
    assert_eq!(
        reply_text(&c.until_result("b").await),
        "Echo: second (history 2)"
    );
    stop(server, &fx).await;
}

/// When the process cap is reached, the idle process of a conversation nobody follows is
/// stopped before that of a followed one, even one used less recently.
#[tokio::test]
async fn eviction_prefers_conversations_nobody_follows() {
    let fx = Fixture::new("[claude]\nmax_live_processes = 2\n");
    let server = fx.start(&[]).await;
    let mut a = server.client().await;
    chat_ack(&mut a, "a", "hi").await;
    a.until_result("a").await;
    let mut b = server.client().await;
    chat_ack(&mut b, "b", "hi").await;
    b.until_result("b").await;
    let spawns = fx.spawns();
    let (a_pid, b_pid) = (
        spawns[0]["pid"].as_i64().unwrap(),
        spawns[1]["pid"].as_i64().unwrap(),
    );
    b.send(json!({"type": "unsubscribe", "agent_id": "b"}))
        .await;
    b.send(json!({"type": "ping", "ts": "gone"})).await;
    b.recv_until(|f| f["message_type"] == "pong").await;

    let mut c = server.client().await;
    chat_ack(&mut c, "c", "hi").await;
    c.until_result("c").await;
    let mut tries = 0;
    while alive(b_pid) && tries < 50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        tries += 1;
    }
    assert!(!alive(b_pid), "b, followed by nobody, was stopped");
    assert!(alive(a_pid), "a, followed and least recently used, stays");
    stop(server, &fx).await;
}
