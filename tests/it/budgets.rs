//! Spending caps and usage with the demo agent (each turn costs $0.0001): a principal's daily
//! and monthly caps and a conversation's own cap refuse the turn that would start over them
//! (402 `budget_exceeded`, nothing stored but the refusal's status), an admin or the owner
//! raises them, and the usage report sums exactly what the turns reported, on either engine.

use serde_json::{Value, json};

use crate::common::*;
use crate::repos::rest;
use crate::security::{TOKENS, connect_as, server_with};

/// Alice, Bob and the admin Root, with `extra` tables.
fn config(extra: &str) -> String {
    format!("[auth]\nadmins = [\"root\"]\n{TOKENS}\"tok-root\" = \"root\"\n{extra}")
}

/// Sends a chat and returns the error frame that refuses it.
async fn refused(c: &mut Client, agent_id: &str, content: &str, options: Value) -> Value {
    c.send(json!({"type": "chat", "agent_id": agent_id, "content": content, "options": options}))
        .await;
    c.recv_until(|f| f["message_type"] == "error")
        .await
        .pop()
        .unwrap()
}

/// One turn that runs to its result.
async fn turn(c: &mut Client, agent_id: &str, content: &str) -> Vec<Value> {
    chat_ack(c, agent_id, content).await;
    c.until_result(agent_id).await
}

/// The stored frames of a conversation.
async fn stored(server: &TestServer, token: &str, agent_id: &str) -> Vec<Value> {
    let (status, page) = rest(
        server,
        Some(token),
        "GET",
        &format!("/api/sessions/{agent_id}/messages"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    page["messages"].as_array().unwrap().clone()
}

fn of_type<'a>(frames: &'a [Value], kind: &str) -> Vec<&'a Value> {
    frames
        .iter()
        .filter(|f| f["message_type"] == kind)
        .collect()
}

#[tokio::test]
async fn a_daily_cap_refuses_the_next_turn_until_an_admin_raises_it() {
    let (server, _cfg) = server_with(&config("[budgets]\ndaily_usd = 0.0002\n")).await;
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    turn(&mut alice, "work", "one").await;
    turn(&mut alice, "work", "two").await;

    // The third turn would start at the cap: refused, with the figures, and nothing of it
    // stored but the refusal's status.
    let err = refused(&mut alice, "work", "three", json!({})).await;
    assert_eq!(err["code"], "budget_exceeded", "{err}");
    assert!(err["error"].as_str().unwrap().contains("daily"), "{err}");
    let (status, body) = rest(
        &server,
        Some("tok-alice"),
        "POST",
        "/api/sessions/work/messages",
        Some(json!({"content": "three again"})),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (402, Some("budget_exceeded")),
        "{body}"
    );
    let frames = stored(&server, "tok-alice", "work").await;
    assert_eq!(of_type(&frames, "user").len(), 2, "{frames:?}");
    let refusals: Vec<&Value> = frames
        .iter()
        .filter(|f| f["status"] == "budget_exceeded")
        .collect();
    assert_eq!(refusals.len(), 2, "{frames:?}");
    let status = refusals[0];
    assert_eq!(
        (
            status["cap"].as_str(),
            status["limit_usd"].as_f64(),
            status["spent_usd"].as_f64()
        ),
        (Some("daily"), Some(0.0002), Some(0.0002)),
        "{status}"
    );
    // A new conversation is not even created.
    let err = refused(&mut alice, "fresh", "hello", json!({})).await;
    assert_eq!(err["code"], "budget_exceeded", "{err}");
    let (status, _) = rest(
        &server,
        Some("tok-alice"),
        "GET",
        "/api/sessions/fresh",
        None,
    )
    .await;
    assert_eq!(status, 404);
    // Caps are each principal's own.
    let mut bob = connect_as(&server.addr, "tok-bob").await;
    turn(&mut bob, "bobs", "hello").await;

    // Anyone sees their own budget; only an admin sees or sets another's.
    let (status, budget) = rest(&server, Some("tok-alice"), "GET", "/api/budgets/me", None).await;
    assert_eq!(status, 200, "{budget}");
    assert_eq!(
        (
            budget["principal"].as_str(),
            budget["daily_usd"].as_f64(),
            budget["daily_spent_usd"].as_f64()
        ),
        (Some("alice"), Some(0.0002), Some(0.0002)),
        "{budget}"
    );
    for token in ["tok-bob", "tok-alice"] {
        let (status, body) = rest(
            &server,
            Some(token),
            "PUT",
            "/api/budgets/alice",
            Some(json!({"daily_usd": 100})),
        )
        .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("forbidden")),
            "{body}"
        );
    }
    let (status, _) = rest(&server, Some("tok-bob"), "GET", "/api/budgets/alice", None).await;
    assert_eq!(status, 403);
    // Caps out of reason are refused and change nothing.
    for bad in [
        json!({"daily_usd": -1}),
        json!({"daily_usd": 1e12}),
        json!({"daily_usd": "5"}),
        json!({"daily_usd": 1, "hourly_usd": 1}),
        json!([1]),
    ] {
        let (status, body) = rest(
            &server,
            Some("tok-root"),
            "PUT",
            "/api/budgets/alice",
            Some(bad.clone()),
        )
        .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("invalid_request")),
            "{bad}: {body}"
        );
    }
    let err = refused(&mut alice, "work", "still capped", json!({})).await;
    assert_eq!(err["code"], "budget_exceeded", "{err}");

    // An admin raises it: the next turn runs.
    let (status, budget) = rest(
        &server,
        Some("tok-root"),
        "PUT",
        "/api/budgets/alice",
        Some(json!({"daily_usd": 0.001, "monthly_usd": 0.0003})),
    )
    .await;
    assert_eq!(
        (status, budget["overridden"].as_bool()),
        (200, Some(true)),
        "{budget}"
    );
    let reply = reply_text(&turn(&mut alice, "work", "three at last").await);
    assert!(reply.starts_with("Echo: three at last"), "{reply}");
    // Now the month's cap is reached ($0.0003 spent).
    let err = refused(&mut alice, "work", "four", json!({})).await;
    assert_eq!(err["code"], "budget_exceeded", "{err}");
    assert!(err["error"].as_str().unwrap().contains("monthly"), "{err}");
    // Back to the configured defaults: the daily cap again.
    let (status, budget) = rest(
        &server,
        Some("tok-root"),
        "DELETE",
        "/api/budgets/alice",
        None,
    )
    .await;
    assert_eq!(
        (status, budget["daily_usd"].as_f64()),
        (200, Some(0.0002)),
        "{budget}"
    );
    let err = refused(&mut alice, "work", "five", json!({})).await;
    assert!(err["error"].as_str().unwrap().contains("daily"), "{err}");
}

#[tokio::test]
async fn a_conversation_cap_holds_until_its_owner_raises_it() {
    let (server, _cfg) = server_with(&config("")).await;
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    alice
        .send(
            json!({"type": "chat", "agent_id": "capped", "content": "one",
            "options": {"budget_usd": 0.0001}}),
        )
        .await;
    alice.until_result("capped").await;
    let err = refused(&mut alice, "capped", "two", json!({})).await;
    assert_eq!(err["code"], "budget_exceeded", "{err}");
    assert!(
        err["error"].as_str().unwrap().contains("conversation"),
        "{err}"
    );
    // Caps out of reason are refused as options.
    for bad in [json!(-1), json!("1"), json!(1e7), json!({})] {
        let err = refused(&mut alice, "capped", "x", json!({"budget_usd": bad})).await;
        assert_eq!(err["code"], "invalid_options", "{bad}: {err}");
    }

    // Shared with Bob as an editor: he may chat, not raise its cap.
    let (status, share) = rest(
        &server,
        Some("tok-alice"),
        "PUT",
        "/api/sessions/capped/shares/bob",
        Some(json!({"role": "editor"})),
    )
    .await;
    assert_eq!(status, 200, "{share}");
    let alias = share["agent_id"].as_str().unwrap().to_owned();
    let mut bob = connect_as(&server.addr, "tok-bob").await;
    let err = refused(&mut bob, &alias, "raise", json!({"budget_usd": 5})).await;
    assert_eq!(err["code"], "forbidden", "{err}");
    let err = refused(&mut bob, &alias, "plain", json!({})).await;
    assert_eq!(err["code"], "budget_exceeded", "{err}");
    let (status, _) = rest(
        &server,
        Some("tok-bob"),
        "PUT",
        "/api/sessions/capped/budget",
        Some(json!({"budget_usd": 5})),
    )
    .await;
    assert_eq!(status, 404, "Bob has no conversation of that name");
    let (status, _) = rest(
        &server,
        Some("tok-bob"),
        "PUT",
        "/api/sessions/capped/budget?principal=alice",
        Some(json!({"budget_usd": 5})),
    )
    .await;
    assert_eq!(status, 403);

    // The owner raises it (a bad value first changes nothing); the next turn runs. An admin
    // may too, naming the owner.
    for bad in [
        json!({"budget_usd": -0.5}),
        json!({"budget_usd": "5"}),
        json!({}),
    ] {
        let (status, body) = rest(
            &server,
            Some("tok-alice"),
            "PUT",
            "/api/sessions/capped/budget",
            Some(bad.clone()),
        )
        .await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let (status, body) = rest(
        &server,
        Some("tok-alice"),
        "PUT",
        "/api/sessions/capped/budget",
        Some(json!({"budget_usd": 0.0002})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    turn(&mut alice, "capped", "two again").await;
    let (status, _) = rest(
        &server,
        Some("tok-root"),
        "PUT",
        "/api/sessions/capped/budget?principal=alice",
        Some(json!({"budget_usd": 1})),
    )
    .await;
    assert_eq!(status, 200);
    turn(&mut alice, "capped", "three").await;
}

/// The figures every result frame reported: `(cost, input tokens, output tokens)`.
fn figures(frames: &[Value]) -> (f64, i64, i64) {
    let results = of_type(frames, "result");
    (
        results
            .iter()
            .map(|r| r["turn_cost_usd"].as_f64().unwrap())
            .sum(),
        results
            .iter()
            .map(|r| r["message"]["usage"]["input_tokens"].as_i64().unwrap())
            .sum(),
        results
            .iter()
            .map(|r| r["message"]["usage"]["output_tokens"].as_i64().unwrap())
            .sum(),
    )
}

async fn usage(server: &TestServer, token: &str, query: &str) -> (u16, Value) {
    rest(
        server,
        Some(token),
        "GET",
        &format!("/api/usage{query}"),
        None,
    )
    .await
}

#[tokio::test]
async fn usage_sums_exactly_what_the_turns_reported() {
    let (server, _cfg) = server_with(&config("")).await;
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    let mut frames = Vec::new();
    for (id, text) in [
        ("u1", "a"),
        ("u1", "b"),
        ("u2", "c"),
        ("u1", "d"),
        ("u2", "e"),
    ] {
        frames.extend(turn(&mut alice, id, text).await);
    }
    let mut bob = connect_as(&server.addr, "tok-bob").await;
    turn(&mut bob, "b1", "bob's").await;
    let (cost, input, output) = figures(&frames);
    assert!(cost > 0.0 && input > 0 && output > 0);

    for group in ["day", "conversation", "agent", "model"] {
        let (status, report) = usage(&server, "tok-alice", &format!("?group_by={group}")).await;
        assert_eq!(status, 200, "{report}");
        let total = &report["total"];
        assert_eq!(total["turns"], 5, "{group}: {report}");
        assert!(
            (total["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-12,
            "{group}: {report}"
        );
        assert_eq!(
            (
                total["input_tokens"].as_i64(),
                total["output_tokens"].as_i64()
            ),
            (Some(input), Some(output)),
            "{report}"
        );
    }
    let (_, by_conversation) = usage(&server, "tok-alice", "?group_by=conversation").await;
    let mut turns: Vec<(String, i64)> = by_conversation["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["agent_id"].as_str().unwrap().to_owned(),
                r["turns"].as_i64().unwrap(),
            )
        })
        .collect();
    turns.sort();
    assert_eq!(turns, [("u1".to_owned(), 3), ("u2".to_owned(), 2)]);
    let (_, by_agent) = usage(&server, "tok-alice", "?group_by=agent").await;
    assert_eq!(by_agent["rows"][0]["key"], "demo", "{by_agent}");
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let (_, by_day) = usage(&server, "tok-alice", "").await;
    assert_eq!(by_day["rows"][0]["key"], today.as_str(), "{by_day}");

    // What was spent stays spent: deleting a conversation leaves its turns in the report.
    let (status, _) = rest(
        &server,
        Some("tok-alice"),
        "DELETE",
        "/api/sessions/u2",
        None,
    )
    .await;
    assert_eq!(status, 204);
    let (_, after) = usage(&server, "tok-alice", "").await;
    assert_eq!(after["total"]["turns"], 5, "{after}");

    // Only an admin sees another's, or everyone's.
    for query in ["?principal=alice", "?principal=*"] {
        let (status, body) = usage(&server, "tok-bob", query).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("forbidden")),
            "{query}"
        );
    }
    let (_, everyone) = usage(&server, "tok-root", "?principal=*&group_by=conversation").await;
    assert_eq!(everyone["total"]["turns"], 6, "{everyone}");
    let (_, hers) = usage(&server, "tok-root", "?principal=alice").await;
    assert_eq!(hers["total"]["turns"], 5, "{hers}");
    // Bad queries are refused.
    for query in [
        "?from=2026-13-01",
        "?from=yesterday",
        "?from=2026-11-02&to=2026-11-01",
        "?from=2020-01-01&to=2026-01-01",
        "?group_by=principal",
        "?colour=blue",
        "?from=-1",
    ] {
        let (status, body) = usage(&server, "tok-alice", query).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("invalid_request")),
            "{query}: {body}"
        );
    }

    // The metrics count cost and tokens by agent and model, naming no principal.
    let metrics = reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("agentmux_cost_usd_total{agent=\"demo\""))
        .unwrap_or_else(|| panic!("{metrics}"));
    let counted: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(counted >= cost, "{line}");
    assert!(
        metrics.contains("agentmux_tokens_total{agent=\"demo\""),
        "{metrics}"
    );
    assert!(
        !metrics.contains("alice") && !metrics.contains("bob"),
        "{metrics}"
    );
}

/// The terminal client: `/budget` caps the session, the next turn's refusal shows with its
/// figures, and `/usage` prints the day's line and the total.
#[tokio::test]
async fn the_terminal_client_caps_a_session_and_shows_the_usage() {
    use crate::cli_chat::{Terminal, have_tmux};
    if !have_tmux() {
        return;
    }
    let server = TestServer::start().await;
    let term = Terminal::open_in(&format!("ws://{}/ws", server.addr), &[], None);
    term.wait_for("New session", 1).await;
    term.type_line("first");
    term.wait_for("Echo: first (turn 1)", 1).await;
    term.type_line("/budget lots");
    term.wait_for("usage: /budget <US dollars>", 1).await;
    term.type_line("/budget 0.0001");
    term.wait_for("This session's cap is now $0.0001.", 1).await;
    term.type_line("second");
    term.wait_for(
        "[budget_exceeded: this conversation's spending cap of $0.0001 is reached",
        1,
    )
    .await;
    term.type_line("/usage bogus");
    term.wait_for("usage: /usage [day|conversation|agent|model]", 1)
        .await;
    term.type_line("/usage");
    let screen = term.wait_for("total ", 1).await;
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let day = screen
        .lines()
        .find(|l| l.starts_with(&today))
        .unwrap_or_else(|| panic!("{screen}"));
    assert!(
        day.contains("$0.0001") && day.trim_end().ends_with(" 1"),
        "{day}"
    );
    term.type_line("/usage model");
    let screen = term.wait_for("total ", 2).await;
    assert!(
        screen.lines().any(|l| l.starts_with("default ")),
        "{screen}"
    );
    assert!(!screen.contains("Echo: second"), "{screen}");
}

/// A turn queued behind one that reaches the cap is refused when its turn comes: the running
/// turn finishes, the queued one's prompt stays with an error result and a `budget_exceeded`
/// status, and the turn after the cap is raised runs.
#[tokio::test]
async fn a_queued_turn_finds_the_cap_reached_by_the_turn_before_it() {
    let gates = Gates::new("[budgets]\ndaily_usd = 0.0001\n");
    let server = gates.start().await;
    let mut c = server.client().await;
    chat_ack(&mut c, "q", "first").await;
    let ack = chat_ack(&mut c, "q", "queued").await;
    assert_eq!(ack["queue_position"], 1, "{ack}");
    gates.open("q", 1);
    c.until_result("q").await;
    let frames = c.recv_until(|f| f["message_type"] == "result").await;
    let refusal = frames
        .iter()
        .find(|f| f["message_type"] == "error")
        .unwrap_or_else(|| panic!("{frames:?}"));
    assert_eq!(refusal["code"], "budget_exceeded", "{refusal}");
    let status = frames
        .iter()
        .find(|f| f["status"] == "budget_exceeded")
        .unwrap_or_else(|| panic!("{frames:?}"));
    assert_eq!(
        (status["cap"].as_str(), status["spent_usd"].as_f64()),
        (Some("daily"), Some(0.0001))
    );
    let result = frames.last().unwrap();
    assert_eq!(result["message"]["is_error"], true, "{result}");
    assert!(
        !frames.iter().any(|f| f["message_type"] == "assistant"),
        "{frames:?}"
    );

    let (status, _) = rest(
        &server,
        None,
        "PUT",
        "/api/budgets/local",
        Some(json!({"daily_usd": 1})),
    )
    .await;
    assert_eq!(status, 200);
    chat_ack(&mut c, "q", "after").await;
    gates.open("q", 2);
    let reply = reply_text(&c.until_result("q").await);
    assert!(reply.starts_with("Echo: after"), "{reply}");
}
