//! The audit log: each action on a conversation and its shares is appended in order with who
//! did it and how it went; an owner reads their conversations' entries, an admin everyone's;
//! filters and pages; nothing changes an entry through the API; bad filters are refused.

use serde_json::{Value, json};

use crate::common::*;
use crate::repos::rest;
use crate::security::{TOKENS, connect_as, server_with};
use crate::teams::share;

/// Alice, Bob and Carol, each with a token; Carol is an admin.
fn config() -> String {
    format!("{TOKENS}\"tok-carol\" = \"carol\"\n\n[auth]\nadmins = [\"carol\"]\n")
}

/// The audit page `query` gives `token`'s principal.
async fn audit(server: &TestServer, token: &str, query: &str) -> (u16, Value) {
    rest(
        server,
        Some(token),
        "GET",
        &format!("/api/audit{query}"),
        None,
    )
    .await
}

/// `(principal, action, outcome)` of each entry, oldest first.
fn actions(page: &Value) -> Vec<(String, String, String)> {
    let mut out: Vec<_> = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (s("principal"), s("action"), s("outcome"))
        })
        .collect();
    out.reverse();
    out
}

fn entry(principal: &str, action: &str, outcome: &str) -> (String, String, String) {
    (principal.into(), action.into(), outcome.into())
}

#[tokio::test]
async fn each_action_is_appended_in_order_and_each_reader_sees_what_is_theirs() {
    let (server, _cfg) = server_with(&config()).await;
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    alice.chat("plan", "first").await;
    alice.until_result("plan").await;
    let alias = share(&server, "alice", "plan", "bob", "viewer").await;
    let mut bob = connect_as(&server.addr, "tok-bob").await;
    // A viewer's chat is refused, and that is recorded too.
    bob.send(json!({"type": "chat", "agent_id": alias, "content": "x"}))
        .await;
    bob.recv_until(|f| f["message_type"] == "error").await;
    let (status, _) = rest(
        &server,
        Some("tok-alice"),
        "PATCH",
        "/api/sessions/plan",
        Some(json!({"title": "The plan"})),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = rest(
        &server,
        Some("tok-alice"),
        "DELETE",
        "/api/sessions/plan/shares/bob",
        None,
    )
    .await;
    assert_eq!(status, 204);
    // Bob's own conversation: not Alice's to read.
    bob.chat("mine", "hello").await;
    bob.until_result("mine").await;

    let (status, page) = audit(&server, "tok-alice", "").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        actions(&page),
        vec![
            entry("alice", "chat", "ok"),
            entry("alice", "share", "ok"),
            entry("bob", "chat", "forbidden"),
            entry("alice", "rename", "ok"),
            entry("alice", "unshare", "ok"),
        ],
        "{page}"
    );
    let share_entry = &page["entries"][3];
    assert_eq!(
        (
            share_entry["owner"].as_str(),
            share_entry["agent_id"].as_str(),
            &share_entry["detail"]
        ),
        (
            Some("alice"),
            Some("plan"),
            &json!({"with": "bob", "role": "viewer"})
        )
    );
    assert!(page["entries"][0]["at"].as_str().unwrap().ends_with('Z'));
    let (_, bobs) = audit(&server, "tok-bob", "").await;
    assert_eq!(actions(&bobs), vec![entry("bob", "chat", "ok")], "{bobs}");
    // An admin reads everyone's, and filters by principal, action, conversation and time.
    let (_, all) = audit(&server, "tok-carol", "").await;
    assert_eq!(all["entries"].as_array().unwrap().len(), 6, "{all}");
    let (_, by_bob) = audit(&server, "tok-carol", "?principal=bob").await;
    assert_eq!(
        actions(&by_bob),
        vec![
            entry("bob", "chat", "forbidden"),
            entry("bob", "chat", "ok")
        ]
    );
    let (_, shares) = audit(&server, "tok-carol", "?action=share&owner=alice").await;
    assert_eq!(actions(&shares), vec![entry("alice", "share", "ok")]);
    let (_, mine) = audit(&server, "tok-carol", "?agent_id=mine").await;
    assert_eq!(actions(&mine), vec![entry("bob", "chat", "ok")]);
    let (_, future) = audit(&server, "tok-carol", "?since=2999-01-01T00:00:00Z").await;
    assert_eq!(future["entries"], json!([]));
    let (_, past) = audit(&server, "tok-carol", "?until=2000-01-01T00:00:00%2B02:00").await;
    assert_eq!(past["entries"], json!([]));

    // Pages by cursor: two at a time, newest first, all six once.
    let mut seen = Vec::new();
    let mut query = "?limit=2".to_owned();
    loop {
        let (status, page) = audit(&server, "tok-carol", &query).await;
        assert_eq!(status, 200, "{page}");
        let ids: Vec<i64> = page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_i64().unwrap())
            .collect();
        assert!(ids.len() <= 2);
        seen.extend(ids);
        match page["next_before"].as_i64() {
            Some(before) => query = format!("?limit=2&before={before}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 6);
    assert!(seen.windows(2).all(|w| w[0] > w[1]), "{seen:?}");

    // Not another owner's entries for a non-admin; bad filters are refused.
    let (status, err) = audit(&server, "tok-bob", "?owner=alice").await;
    assert_eq!((status, err["code"].as_str()), (403, Some("forbidden")));
    for query in [
        "?limit=0",
        "?limit=501",
        "?limit=-1",
        "?before=0",
        "?before=x",
        "?since=yesterday",
        "?until=-1",
        "?action=DROP%20TABLE",
        "?action=-chat",
        "?agent_id=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "?agent_id=a%20b",
        "?principal=",
    ] {
        let (status, err) = audit(&server, "tok-carol", query).await;
        assert_eq!(status, 400, "{query}: {err}");
    }
    // Entries are never changed or deleted through the API.
    for method in ["DELETE", "PUT", "PATCH", "POST"] {
        let (status, _) = rest(&server, Some("tok-carol"), method, "/api/audit", None).await;
        assert_eq!(status, 405, "{method}");
    }
    let (_, again) = audit(&server, "tok-carol", "").await;
    assert_eq!(again["entries"], all["entries"]);
}

/// A conversation's cap set (by its owner, or refused to someone else) is recorded; the
/// particulars of an entry stay bounded: a rename refused for its overlong title keeps only
/// the title's start.
#[tokio::test]
async fn caps_are_recorded_and_particulars_stay_bounded() {
    let (server, _cfg) = server_with(&config()).await;
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    alice.chat("plan", "first").await;
    alice.until_result("plan").await;
    // A name with a NUL (which PostgreSQL's text refuses) is recorded all the same, without
    // failing the batch of rows it is stored with.
    for (token, query, want) in [
        ("tok-alice", "", 200),
        ("tok-bob", "?principal=alice", 403),
        ("tok-bob", "?principal=al%00ice", 403),
    ] {
        let (status, answer) = rest(
            &server,
            Some(token),
            "PUT",
            &format!("/api/sessions/plan/budget{query}"),
            Some(json!({"budget_usd": 2.5})),
        )
        .await;
        assert_eq!(status, want, "{token}: {answer}");
    }
    let long = "t".repeat(5000);
    let (status, _) = rest(
        &server,
        Some("tok-alice"),
        "PATCH",
        "/api/sessions/plan",
        Some(json!({ "title": long })),
    )
    .await;
    assert_eq!(status, 400);

    let (_, page) = audit(&server, "tok-alice", "").await;
    assert_eq!(
        actions(&page)[1..],
        [
            entry("alice", "conversation_budget", "ok"),
            entry("bob", "conversation_budget", "forbidden"),
            entry("alice", "rename", "invalid_request"),
        ],
        "{page}"
    );
    assert_eq!(page["entries"][2]["detail"], json!({"budget_usd": 2.5}));
    let (_, bobs) = audit(&server, "tok-carol", "?principal=bob").await;
    let owners: Vec<&str> = bobs["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["owner"].as_str())
        .collect();
    assert_eq!(owners, ["al\u{FFFD}ice", "alice"], "{bobs}");
    alice.chat("plan", "second").await;
    alice.until_result("plan").await;
    let title = page["entries"][0]["detail"]["title"].as_str().unwrap();
    assert_eq!(title, format!("{}…", &long[..200]));
}
