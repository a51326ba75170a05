//! Turns that wait out a rate limit, with the real Claude CLI against the fake model API
//! answering 429 with a reset a few seconds ahead: the conversation waits, shows it, continues
//! by itself once (after a restart too), and an interrupt cancels the wait.
//!
//! The CLI tells the reset time of a subscription's usage limit (a `rate_limit_event` that
//! rejects, with `resetsAt`), so these CLIs sign in with a subscription's token; with an API key
//! it tells none, and the wait backs off instead.

use std::time::Duration;

use serde_json::{Value, json};

use crate::claude::Fixture;
use crate::cli_chat::{Terminal, have_tmux};
use crate::common::*;
use crate::real_cli::{FakeApi, RealSetup, real_cli, start_server_env, stop};
use crate::repos::rest;
use crate::security::connect_as;

/// Short random additions to each wait, so that the tests take seconds.
const CONFIG: &str = "[session]\nauto_continue_jitter_ms = 200\n";

/// The prompt the fake model API answers with 429 and a reset `secs` ahead.
fn limited(secs: u32) -> String {
    format!("please USAGELIMIT:{secs}")
}

/// A subscription's token, as the CLI is given one (the fake model API takes any).
const SUBSCRIPTION: (&str, &str) = ("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-fake");

/// A server whose CLIs sign in with a subscription's token.
async fn start_server(
    data_dir: &std::path::Path,
    cli: &std::path::Path,
    api: &FakeApi,
    config: &str,
) -> TestServer {
    start_server_env(data_dir, cli, api, config, &[SUBSCRIPTION]).await
}

async fn chat_with(c: &mut Client, agent_id: &str, content: &str, options: Value) -> Value {
    c.send(json!({"type": "chat", "agent_id": agent_id, "content": content, "options": options}))
        .await;
    let frames = c
        .recv_until(|v| v["message_type"] == "ack" || v["message_type"] == "error")
        .await;
    frames.last().unwrap().clone()
}

/// Frames of `agent_id` until its `status` `status`, inclusive.
async fn until_status(c: &mut Client, agent_id: &str, status: &str) -> Vec<Value> {
    c.recv_until(|f| {
        f["message_type"] == "status" && f["agent_id"] == agent_id && f["status"] == status
    })
    .await
}

/// The conversation as `GET /api/sessions/{agent_id}` shows it.
async fn summary(server: &TestServer, agent_id: &str) -> Value {
    let response = reqwest::get(server.url(&format!("/api/sessions/{agent_id}")))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// The stored frames of a conversation.
async fn history(server: &TestServer, agent_id: &str) -> Vec<Value> {
    let body: Value = reqwest::get(server.url(&format!("/api/sessions/{agent_id}/messages")))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["messages"].as_array().unwrap().clone()
}

/// The `status`es and prompts of a conversation's history, in order.
fn story(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .filter_map(|f| match f["message_type"].as_str()? {
            "status" => Some(format!("status {}", f["status"].as_str()?)),
            "user" => Some(format!(
                "user {}",
                f["message"]["message"]["content"].as_str()?
            )),
            "result" if f["message"]["is_error"] == true => Some("result error".into()),
            "result" => Some("result ok".into()),
            _ => None,
        })
        .collect()
}

/// Checks that `agent_id` waits no more and that its history after the first prompt is `after`.
async fn ended(server: &TestServer, agent_id: &str, after: &[&str]) {
    let shown = summary(server, agent_id).await;
    assert_eq!(shown["waiting_for_limit"], Value::Null, "{shown}");
    assert_eq!(story(&history(server, agent_id).await)[1..], *after);
}

/// Waits until `at` (RFC 3339) and a little more has passed: for checking that nothing
/// happens, which no frame can say.
async fn past(at: &str) {
    let at = chrono::DateTime::parse_from_rfc3339(at).unwrap();
    let left = (at.with_timezone(&chrono::Utc) - chrono::Utc::now())
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(left + Duration::from_millis(1500)).await;
}

/// The 429 ends the turn with the CLI's error result; the conversation stores
/// `waiting_for_limit` with the time, shows it over REST, then continues by itself exactly
/// once: the `limit_continued` mark and the `continue` turn are in its history.
#[cfg_attr(
    no_test_claude,
    ignore = "needs the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN), not configured here"
)]
#[tokio::test]
async fn a_rate_limited_turn_waits_and_continues_by_itself_once() {
    let Some(cli) = real_cli() else { return };
    let setup = RealSetup::with_config(CONFIG).await;
    let server = start_server(&setup.data_dir(), &cli, &setup.api, &setup.config).await;
    let mut c = server.client().await;

    let ack = chat_with(&mut c, "lim", &limited(3), json!({"auto_continue": true})).await;
    assert_eq!(ack["message_type"], "ack", "{ack}");
    let frames = c.until_result("lim").await;
    let result = &frames.last().unwrap()["message"];
    assert_eq!(result["is_error"], true, "{result}");
    assert_eq!(result["api_error_status"], 429, "{result}");
    let waiting = until_status(&mut c, "lim", "waiting_for_limit")
        .await
        .pop()
        .unwrap();
    assert!(waiting["seq"].is_i64(), "stored: {waiting}");
    let continue_at = waiting["continue_at"].as_str().unwrap().to_owned();
    assert!(waiting["resets_at"].is_string(), "{waiting}");
    assert_eq!(waiting["try"], 1);
    let shown = summary(&server, "lim").await;
    assert_eq!(shown["waiting_for_limit"], continue_at.as_str(), "{shown}");
    assert_eq!(shown["auto_continue"], true);

    // By itself: the mark, the `continue` prompt and its reply.
    until_status(&mut c, "lim", "limit_continued").await;
    let turn = c.until_result("lim").await;
    assert!(
        turn.iter().any(
            |f| f["message_type"] == "user" && f["message"]["message"]["content"] == "continue"
        ),
        "{turn:?}"
    );
    let reply = &turn.last().unwrap()["message"];
    assert_eq!(reply["is_error"], false, "{reply}");
    assert!(
        reply_text(&turn).ends_with("continue (history 1)"),
        "the model got the continue turn: {}",
        reply_text(&turn)
    );
    assert_eq!(
        summary(&server, "lim").await["waiting_for_limit"],
        Value::Null
    );
    for (outcome, count) in [("waiting", 1), ("continued", 1), ("cancelled", 0)] {
        let name = format!("agentmux_limit_waits_total{{outcome=\"{outcome}\"}}");
        assert_eq!(metric(&server, &name).await, count, "{name}");
    }
    past(&continue_at).await;
    assert_eq!(
        story(&history(&server, "lim").await),
        [
            format!("user {}", limited(3)),
            "result error".into(),
            "status waiting_for_limit".into(),
            "status limit_continued".into(),
            "user continue".into(),
            "result ok".into(),
        ],
        "one continue turn"
    );
    stop(server, &cli).await;
}

/// The wait is stored: a server stopped during it continues the conversation once it is up
/// again, with nobody connected.
#[cfg_attr(
    no_test_claude,
    ignore = "needs the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN), not configured here"
)]
#[tokio::test]
async fn a_wait_outlives_a_restart() {
    let Some(cli) = real_cli() else { return };
    let setup = RealSetup::with_config(&format!("{CONFIG}auto_continue = true\n")).await;
    let data_dir = setup.data_dir();
    let server = start_server(&data_dir, &cli, &setup.api, &setup.config).await;
    let mut c = server.client().await;
    // The server's default continues it.
    chat_ack(&mut c, "restarted", &limited(4)).await;
    let waiting = until_status(&mut c, "restarted", "waiting_for_limit")
        .await
        .pop()
        .unwrap();
    let seq = waiting["seq"].as_i64().unwrap();
    drop(c);
    stop(server, &cli).await;

    let server = start_server(&data_dir, &cli, &setup.api, &setup.config).await;
    let mut c = server.client().await;
    c.send(json!({"type": "subscribe", "agent_id": "restarted", "since_seq": seq}))
        .await;
    until_status(&mut c, "restarted", "limit_continued").await;
    let turn = c.until_result("restarted").await;
    assert_eq!(turn.last().unwrap()["message"]["is_error"], false);
    assert_eq!(
        story(&history(&server, "restarted").await)[2..],
        [
            "status waiting_for_limit",
            "status limit_continued",
            "user continue",
            "result ok"
        ]
    );
    stop(server, &cli).await;
}

/// An interrupt cancels the wait, of a live conversation (over the socket) and of one no node
/// runs after a restart (over REST): a stored `limit_wait_cancelled`, and nothing continues.
/// Another principal can't cancel it. A rewind that drops the rate-limited turn's wait ends it
/// too.
#[cfg_attr(
    no_test_claude,
    ignore = "needs the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN), not configured here"
)]
#[tokio::test]
async fn an_interrupt_cancels_the_wait() {
    let Some(cli) = real_cli() else { return };
    let setup = RealSetup::with_config(CONFIG).await;
    let data_dir = setup.data_dir();
    let tokens = [SUBSCRIPTION, ("AGENTMUX_TOKENS", "tok-a=alice,tok-b=bob")];
    let server = start_server_env(&data_dir, &cli, &setup.api, &setup.config, &tokens).await;
    let mut c = connect_as(&server.addr, "tok-a").await;
    let on = json!({"auto_continue": true});

    chat_with(&mut c, "live", &limited(3), on.clone()).await;
    let live_at = until_status(&mut c, "live", "waiting_for_limit")
        .await
        .pop()
        .unwrap()["continue_at"]
        .as_str()
        .unwrap()
        .to_owned();
    c.send(json!({"type": "interrupt", "agent_id": "live"}))
        .await;
    let cancelled = until_status(&mut c, "live", "limit_wait_cancelled").await;
    assert!(cancelled.last().unwrap()["seq"].is_i64(), "stored");

    // A rewind to the rate-limited turn's end drops the wait with the status that told it.
    chat_with(&mut c, "rewound", &limited(3), on.clone()).await;
    let frames = until_status(&mut c, "rewound", "waiting_for_limit").await;
    let rewound_at = frames.last().unwrap()["continue_at"]
        .as_str()
        .unwrap()
        .to_owned();
    let result = frames
        .iter()
        .find(|f| f["message_type"] == "result")
        .unwrap();
    c.send(json!({"type": "rewind", "agent_id": "rewound", "to_seq": result["seq"]}))
        .await;
    until_status(&mut c, "rewound", "rewound").await;

    chat_with(&mut c, "dormant", &limited(8), on).await;
    let dormant_at = until_status(&mut c, "dormant", "waiting_for_limit")
        .await
        .pop()
        .unwrap()["continue_at"]
        .as_str()
        .unwrap()
        .to_owned();
    drop(c);
    stop(server, &cli).await;
    let server = start_server_env(&data_dir, &cli, &setup.api, &setup.config, &tokens).await;
    let http = reqwest::Client::new();
    let interrupt = |token: &'static str| {
        http.post(server.url("/api/sessions/dormant/interrupt"))
            .bearer_auth(token)
            .send()
    };
    // Bob knows no such conversation, and the wait stays.
    assert_eq!(interrupt("tok-b").await.unwrap().status(), 404);
    let (_, listed) = get_as(&server, "tok-a", "/api/sessions/dormant").await;
    assert_eq!(listed["waiting_for_limit"], dormant_at.as_str());
    assert_eq!(listed["live"], false, "{listed}");
    let answer: Value = interrupt("tok-a").await.unwrap().json().await.unwrap();
    assert_eq!(
        answer,
        json!({"was_running": false, "cancelled_wait": true})
    );
    let again: Value = interrupt("tok-a").await.unwrap().json().await.unwrap();
    assert_eq!(again["cancelled_wait"], false, "nothing left to cancel");
    let cancelled = metric(&server, "agentmux_limit_waits_total{outcome=\"cancelled\"}").await;
    assert_eq!(cancelled, 1, "on this server");

    past(&live_at).await;
    past(&rewound_at).await;
    past(&dormant_at).await;
    for agent_id in ["live", "dormant"] {
        let path = format!("/api/sessions/{agent_id}/messages");
        let (_, frames) = get_as(&server, "tok-a", &path).await;
        let frames = frames["messages"].as_array().unwrap();
        assert_eq!(
            story(frames)[1..],
            [
                "result error",
                "status waiting_for_limit",
                "status limit_wait_cancelled"
            ],
            "{agent_id}: nothing continued"
        );
    }
    let (_, frames) = get_as(&server, "tok-a", "/api/sessions/rewound/messages").await;
    assert_eq!(
        story(frames["messages"].as_array().unwrap())[1..],
        ["result error", "status rewound"],
        "nothing continued the rewound conversation"
    );
    stop(server, &cli).await;
}

/// A "continue" turn that is refused ends the wait for good: refused by the live conversation
/// (over its spending cap set meanwhile), or before any starts it (the owner's live
/// conversations are at their limit after a restart); a stored `limit_gave_up` says why, the
/// summary no longer shows a wait, nothing continues, and the audit log has the refused turn.
#[cfg_attr(
    no_test_claude,
    ignore = "needs the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN), not configured here"
)]
#[tokio::test]
async fn a_refused_continue_turn_gives_the_wait_up() {
    let Some(cli) = real_cli() else { return };
    let setup = RealSetup::with_config(&format!(
        "{CONFIG}auto_continue = true
max_live_per_principal = 1
"
    ))
    .await;
    let data_dir = setup.data_dir();
    let server = start_server(&data_dir, &cli, &setup.api, &setup.config).await;
    let mut c = server.client().await;

    chat_ack(&mut c, "capped", &limited(3)).await;
    until_status(&mut c, "capped", "waiting_for_limit").await;
    let (status, answer) = rest(
        &server,
        None,
        "PUT",
        "/api/sessions/capped/budget",
        Some(json!({"budget_usd": 0})),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let gave_up = until_status(&mut c, "capped", "limit_gave_up")
        .await
        .pop()
        .unwrap();
    assert!(gave_up["seq"].is_i64(), "stored: {gave_up}");
    assert!(
        gave_up["detail"].as_str().unwrap().contains("refused"),
        "{gave_up}"
    );
    ended(
        &server,
        "capped",
        &[
            "result error",
            "status waiting_for_limit",
            "status budget_exceeded",
            "status limit_gave_up",
        ],
    )
    .await;
    let (_, audit) = rest(
        &server,
        None,
        "GET",
        "/api/audit?action=limit_continue",
        None,
    )
    .await;
    let entries = audit["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{audit}");
    assert_eq!(
        (
            entries[0]["agent_id"].as_str(),
            entries[0]["outcome"].as_str()
        ),
        (Some("capped"), Some("budget_exceeded")),
        "{audit}"
    );

    // Dormant after a restart, and refused before it starts: another is live meanwhile.
    drop(c);
    stop(server, &cli).await;
    let server = start_server(&data_dir, &cli, &setup.api, &setup.config).await;
    let mut c = server.client().await;
    chat_ack(&mut c, "crowded", &limited(15)).await;
    let waiting = until_status(&mut c, "crowded", "waiting_for_limit")
        .await
        .pop()
        .unwrap();
    drop(c);
    stop(server, &cli).await;
    let server = start_server(&data_dir, &cli, &setup.api, &setup.config).await;
    let mut c = server.client().await;
    c.send(json!({"type": "subscribe", "agent_id": "crowded", "since_seq": waiting["seq"]}))
        .await;
    chat_ack(&mut c, "other", "hello").await;
    c.until_result("other").await;
    until_status(&mut c, "crowded", "limit_gave_up").await;
    ended(
        &server,
        "crowded",
        &[
            "result error",
            "status waiting_for_limit",
            "status limit_gave_up",
        ],
    )
    .await;
    stop(server, &cli).await;
}

/// A chat that is refused (here the store fails to write it) leaves the wait as it was: only
/// a chat that is stored takes the wait's place.
#[cfg_attr(
    any(no_test_claude, not(test_store_postgres)),
    ignore = "PostgreSQL pass only (a running server's SQLite file takes no trigger from \
              outside), with the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN)"
)]
#[tokio::test]
async fn a_refused_chat_leaves_the_wait() {
    let Some(cli) = real_cli() else { return };
    let setup = RealSetup::with_config(&format!(
        "{CONFIG}auto_continue = true
"
    ))
    .await;
    let server = start_server(&setup.data_dir(), &cli, &setup.api, &setup.config).await;
    let mut c = server.client().await;
    chat_ack(&mut c, "kept", &limited(30)).await;
    let continue_at = until_status(&mut c, "kept", "waiting_for_limit")
        .await
        .pop()
        .unwrap()["continue_at"]
        .as_str()
        .unwrap()
        .to_owned();

    let db = server.db().await;
    refuse_rows(&db, "messages", "new.message_type = 'user'", true).await;
    let refused = chat_ack(&mut c, "kept", "meanwhile").await;
    assert_eq!(refused["code"], "store_unavailable", "{refused}");
    refuse_rows(&db, "messages", "", false).await;
    assert_eq!(
        summary(&server, "kept").await["waiting_for_limit"],
        continue_at.as_str(),
        "the wait is as it was"
    );
    // A stored chat ends it.
    chat_ack(&mut c, "kept", "now").await;
    c.until_result("kept").await;
    assert_eq!(
        summary(&server, "kept").await["waiting_for_limit"],
        Value::Null
    );
    stop(server, &cli).await;
}

/// Without `auto_continue` (and the server's default off) a rate-limited turn just ends:
/// nothing waits. A bad `auto_continue` is refused and creates nothing.
#[cfg_attr(
    no_test_claude,
    ignore = "needs the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN), not configured here"
)]
#[tokio::test]
async fn without_auto_continue_nothing_waits() {
    let Some(cli) = real_cli() else { return };
    let setup = RealSetup::with_config(CONFIG).await;
    let server = start_server(&setup.data_dir(), &cli, &setup.api, &setup.config).await;
    let mut c = server.client().await;

    for bad in [
        json!("true"),
        json!(1),
        json!("-1"),
        json!([true]),
        json!({}),
    ] {
        let refused = chat_with(&mut c, "bad", "hi", json!({"auto_continue": bad})).await;
        assert_eq!(refused["code"], "invalid_options", "{bad}: {refused}");
    }
    let missing = reqwest::get(server.url("/api/sessions/bad")).await.unwrap();
    assert_eq!(missing.status(), 404, "nothing was created");

    chat_ack(&mut c, "plain", &limited(1)).await;
    let frames = c.until_result("plain").await;
    assert_eq!(frames.last().unwrap()["message"]["api_error_status"], 429);
    // Switched off explicitly on a server whose default is off too.
    chat_with(&mut c, "off", &limited(1), json!({"auto_continue": false})).await;
    c.until_result("off").await;
    for agent_id in ["plain", "off"] {
        let shown = summary(&server, agent_id).await;
        assert_eq!(shown["waiting_for_limit"], Value::Null, "{shown}");
        assert_eq!(
            story(&history(&server, agent_id).await)[1..],
            ["result error"],
            "{agent_id}"
        );
    }
    assert_eq!(summary(&server, "off").await["auto_continue"], false);
    stop(server, &cli).await;
}

/// With an API key the CLI says no reset time: the wait is the back-off
/// (`session.auto_continue_backoff_secs`), and then it continues all the same.
#[cfg_attr(
    no_test_claude,
    ignore = "needs the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN), not configured here"
)]
#[tokio::test]
async fn without_a_reset_time_the_wait_backs_off() {
    let Some(cli) = real_cli() else { return };
    let setup = RealSetup::with_config(&format!(
        "{CONFIG}auto_continue = true\nauto_continue_backoff_secs = 1\n"
    ))
    .await;
    let key = [("ANTHROPIC_API_KEY", "dummy")];
    let server = start_server_env(&setup.data_dir(), &cli, &setup.api, &setup.config, &key).await;
    let mut c = server.client().await;
    chat_ack(&mut c, "backoff", "please RATELIMIT:1").await;
    let waiting = until_status(&mut c, "backoff", "waiting_for_limit")
        .await
        .pop()
        .unwrap();
    assert_eq!(waiting["resets_at"], Value::Null, "{waiting}");
    until_status(&mut c, "backoff", "limit_continued").await;
    let turn = c.until_result("backoff").await;
    assert_eq!(turn.last().unwrap()["message"]["is_error"], false);
    stop(server, &cli).await;
}

/// In a terminal, `agentmux chat` prints the wait with its time and that Ctrl-C cancels it;
/// Ctrl-C then cancels it (the client stays), and the next one quits. The fake CLI stands in
/// for the real one here: it reports a usage limit as the real one does (see `conformance`).
#[tokio::test]
async fn the_terminal_client_shows_the_wait_and_ctrl_c_cancels_it() {
    if !have_tmux() {
        return;
    }
    let fixture = Fixture::new("[session]\nauto_continue = true\n");
    let server = fixture.start(&[]).await;
    let term = Terminal::open_in(&format!("ws://{}/ws", server.addr), &[], None);
    term.wait_for("New session:", 1).await;
    term.type_line("please USAGELIMIT:600");
    let screen = term.wait_for("(Ctrl-C cancels the wait)", 1).await;
    assert!(
        screen.contains("[waiting_for_limit: ") && screen.contains("; continuing at "),
        "{screen}"
    );
    term.ctrl_c();
    let screen = term.wait_for("[limit_wait_cancelled: ", 1).await;
    assert!(
        !screen.contains("[exited"),
        "the first Ctrl-C only cancels: {screen}"
    );
    term.ctrl_c();
    term.wait_for("[exited 0]", 1).await;
}
