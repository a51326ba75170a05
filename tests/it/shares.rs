//! Conversations shared between principals: the owner shares with a viewer or an editor, each
//! acts on it under an alias of their own as their role allows (a viewer follows, reads and
//! forks; an editor also chats), a revoked share ends the sharee's open streams at once, and
//! everyone else still gets the answers of an unknown conversation.

use serde_json::json;

use crate::common::*;
use crate::repos::rest;
use crate::rest::sse_until;
use crate::security::{TOKENS, connect_as, server_with};

/// Alice, Bob and Carol, each with a token.
fn config() -> String {
    format!("{TOKENS}\"tok-carol\" = \"carol\"\n")
}

/// Alice's conversation `plan` with one turn, shared with Bob as `role`; Bob's alias for it.
async fn shared(server: &TestServer, role: &str) -> String {
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    alice.chat("plan", "first").await;
    alice.until_result("plan").await;
    let (status, share) = rest(
        server,
        Some("tok-alice"),
        "PUT",
        "/api/sessions/plan/shares/bob",
        Some(json!({"role": role})),
    )
    .await;
    assert_eq!(status, 200, "{share}");
    assert_eq!(
        (share["principal"].as_str(), share["role"].as_str()),
        (Some("bob"), Some(role))
    );
    share["agent_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_viewer_follows_reads_and_forks_but_changes_nothing() {
    let (server, _cfg) = server_with(&config()).await;
    let alias = shared(&server, "viewer").await;
    assert!(alias.starts_with('~') && alias.len() == 17, "{alias}");

    // Bob sees it among the conversations shared with him, under his alias, with its owner.
    let (status, list) = get_as(&server, "tok-bob", "/api/shares").await;
    assert_eq!(status, 200, "{list}");
    let listed = &list["sessions"][0];
    assert_eq!(
        (
            listed["agent_id"].as_str(),
            listed["owner"].as_str(),
            listed["role"].as_str()
        ),
        (Some(alias.as_str()), Some("alice"), Some("viewer")),
        "{list}"
    );
    // He follows it: its history comes tagged with his alias, and so does Alice's next turn.
    let mut bob = connect_as(&server.addr, "tok-bob").await;
    bob.send(json!({"type": "subscribe", "agent_id": alias}))
        .await;
    let replayed = bob.until_result(&alias).await;
    assert!(
        replayed.iter().all(|f| f["agent_id"] == alias.as_str()),
        "{replayed:?}"
    );
    assert!(
        reply_text(&replayed).starts_with("Echo: first"),
        "{replayed:?}"
    );
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    alice.chat("plan", "second").await;
    let live = bob.until_result(&alias).await;
    assert!(reply_text(&live).starts_with("Echo: second"), "{live:?}");
    assert!(
        live.iter().all(|f| f["agent_id"] == alias.as_str()),
        "{live:?}"
    );
    let (status, page) = get_as(
        &server,
        "tok-bob",
        &format!("/api/sessions/{alias}/messages"),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page["messages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["agent_id"] == alias.as_str())
    );
    let export = reqwest::Client::new()
        .get(server.url(&format!("/api/sessions/{alias}/export")))
        .bearer_auth("tok-bob")
        .send()
        .await
        .unwrap();
    assert_eq!(export.status(), 200);
    assert!(export.text().await.unwrap().contains("second"));

    // Everything else is the owner's, or an editor's: forbidden, and nothing is stored.
    let (_, before) = get_as(&server, "tok-alice", "/api/sessions/plan").await;
    for frame in [
        json!({"type": "chat", "agent_id": alias, "content": "mine now"}),
        json!({"type": "interrupt", "agent_id": alias}),
        json!({"type": "rewind", "agent_id": alias, "to_seq": 4}),
        json!({"type": "permission_response", "agent_id": alias, "request_id": "r", "behavior": "allow"}),
    ] {
        bob.send(frame.clone()).await;
        let err = bob.recv_until(|v| v["message_type"] == "error").await;
        let err = err.last().unwrap();
        assert_eq!(
            (err["code"].as_str(), err["agent_id"].as_str()),
            (Some("forbidden"), Some(alias.as_str())),
            "{frame}: {err}"
        );
    }
    for (method, path, body) in [
        (
            "POST",
            format!("/api/sessions/{alias}/messages"),
            Some(json!({"content": "x"})),
        ),
        ("POST", format!("/api/sessions/{alias}/interrupt"), None),
        (
            "PATCH",
            format!("/api/sessions/{alias}"),
            Some(json!({"title": "taken"})),
        ),
        ("DELETE", format!("/api/sessions/{alias}"), None),
        (
            "PUT",
            format!("/api/sessions/{alias}/shares/carol"),
            Some(json!({"role": "editor"})),
        ),
        ("GET", format!("/api/sessions/{alias}/shares"), None),
    ] {
        let (status, err) = rest(&server, Some("tok-bob"), method, &path, body).await;
        assert_eq!(
            (status, err["code"].as_str()),
            (403, Some("forbidden")),
            "{method} {path}: {err}"
        );
    }
    let (_, after) = get_as(&server, "tok-alice", "/api/sessions/plan").await;
    assert_eq!(
        (&before["last_seq"], &before["title"]),
        (&after["last_seq"], &after["title"]),
        "nothing changed"
    );

    // A fork is Bob's own conversation.
    let (status, fork) = rest(
        &server,
        Some("tok-bob"),
        "POST",
        &format!("/api/sessions/{alias}/fork"),
        Some(json!({"new_agent_id": "my-plan"})),
    )
    .await;
    assert_eq!(status, 201, "{fork}");
    bob.chat("my-plan", "forked").await;
    assert!(reply_text(&bob.until_result("my-plan").await).starts_with("Echo: forked"));
    let (status, _) = get_as(&server, "tok-alice", "/api/sessions/my-plan").await;
    assert_eq!(status, 404, "the fork is not Alice's");
}

#[tokio::test]
async fn an_editor_chats_and_a_revoked_share_ends_the_stream_at_once() {
    let (server, _cfg) = server_with(&config()).await;
    let alias = shared(&server, "editor").await;
    // Bob's socket follows it by chatting to it (no subscribe).
    let mut bob = connect_as(&server.addr, "tok-bob").await;
    bob.send(
        json!({"type": "chat", "agent_id": alias, "content": "from bob", "client_msg_id": "b1"}),
    )
    .await;
    let frames = bob.until_result(&alias).await;
    let ack = frames.iter().find(|f| f["message_type"] == "ack").unwrap();
    assert_eq!(
        (ack["agent_id"].as_str(), ack["client_msg_id"].as_str()),
        (Some(alias.as_str()), Some("b1"))
    );
    assert!(
        reply_text(&frames).starts_with("Echo: from bob"),
        "{frames:?}"
    );
    // Alice sees Bob's turn in her conversation.
    let (_, page) = get_as(&server, "tok-alice", "/api/sessions/plan/messages").await;
    assert!(page.to_string().contains("from bob"), "{page}");
    // Options stay the owner's.
    bob.send(
        json!({"type": "chat", "agent_id": alias, "content": "x", "options": {"model": "other"}}),
    )
    .await;
    let err = bob.recv_until(|v| v["message_type"] == "error").await;
    assert_eq!(err.last().unwrap()["code"], "forbidden");

    // An event stream too; then the share ends: both streams say so, and nothing follows.
    let mut sse = reqwest::Client::new()
        .get(server.url(&format!("/api/sessions/{alias}/events")))
        .bearer_auth("tok-bob")
        .send()
        .await
        .unwrap();
    assert_eq!(sse.status(), 200);
    sse_until(&mut sse, |v| v["message_type"] == "result").await;
    let (status, _) = delete_as(&server, "tok-alice", "/api/sessions/plan/shares/bob").await;
    assert_eq!(status, 204);
    let revoked = bob
        .recv_until(|v| v["message_type"] == "status" && v["status"] == "access_revoked")
        .await;
    assert_eq!(revoked.last().unwrap()["agent_id"], alias.as_str());
    let ended = sse_until(&mut sse, |v| v["status"] == "access_revoked").await;
    assert_eq!(ended.last().unwrap().1["agent_id"], alias.as_str());
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    alice.chat("plan", "after").await;
    alice.until_result("plan").await;
    let after = bob.before_pong().await;
    assert!(
        after.iter().all(|f| f["agent_id"] != alias.as_str()),
        "{after:?}"
    );
    // And the alias is now unknown to him, everywhere.
    bob.send(json!({"type": "subscribe", "agent_id": alias}))
        .await;
    let err = bob.recv_until(|v| v["message_type"] == "error").await;
    assert_eq!(err.last().unwrap()["code"], "unknown_agent");
    let (status, _) = get_as(&server, "tok-bob", &format!("/api/sessions/{alias}")).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn shares_are_the_owners_alone_and_hostile_ones_are_refused() {
    let (server, _cfg) = server_with(&config()).await;
    let alias = shared(&server, "viewer").await;
    // Carol knows nothing of it: Bob's alias, Alice's id, a made-up alias are all unknown.
    for id in [alias.as_str(), "plan", "~aaaaaaaaaaaaaaaa"] {
        let (status, err) = get_as(&server, "tok-carol", &format!("/api/sessions/{id}")).await;
        assert_eq!(
            (status, err["code"].as_str()),
            (404, Some("unknown_agent")),
            "{id}: {err}"
        );
        let (status, _) = rest(
            &server,
            Some("tok-carol"),
            "PUT",
            &format!("/api/sessions/{id}/shares/carol"),
            Some(json!({"role": "editor"})),
        )
        .await;
        assert_eq!(status, 404, "{id}");
    }
    // Nobody creates a conversation under an alias-shaped id.
    let mut carol = connect_as(&server.addr, "tok-carol").await;
    carol
        .send(json!({"type": "chat", "agent_id": "~aaaaaaaaaaaaaaaa", "content": "hi"}))
        .await;
    let err = carol.recv_until(|v| v["message_type"] == "error").await;
    assert_eq!(err.last().unwrap()["code"], "unknown_agent");
    let (status, err) = rest(
        &server,
        Some("tok-alice"),
        "POST",
        "/api/sessions/plan/fork",
        Some(json!({"new_agent_id": "~bbbbbbbbbbbbbbbb"})),
    )
    .await;
    assert_eq!(
        (status, err["code"].as_str()),
        (400, Some("invalid_agent_id")),
        "{err}"
    );
    // Sharing with oneself, with nobody, with a role outside the set, or in bad shapes.
    for (who, body, code) in [
        ("alice", json!({"role": "viewer"}), "invalid_request"),
        ("mallory", json!({"role": "viewer"}), "invalid_request"),
        ("carol", json!({"role": "owner"}), "invalid_request"),
        (
            "carol",
            json!({"role": "viewer", "extra": 1}),
            "invalid_request",
        ),
        ("carol", json!(["viewer"]), "invalid_request"),
    ] {
        let (status, err) = rest(
            &server,
            Some("tok-alice"),
            "PUT",
            &format!("/api/sessions/plan/shares/{who}"),
            Some(body.clone()),
        )
        .await;
        assert_eq!(
            (status, err["code"].as_str()),
            (400, Some(code)),
            "{who} {body}: {err}"
        );
    }
    // Shares are listed for the owner; a second PUT changes the role and keeps the alias.
    let (_, again) = rest(
        &server,
        Some("tok-alice"),
        "PUT",
        "/api/sessions/plan/shares/bob",
        Some(json!({"role": "editor"})),
    )
    .await;
    assert_eq!(
        (again["agent_id"].as_str(), again["role"].as_str()),
        (Some(alias.as_str()), Some("editor"))
    );
    let (status, list) = get_as(&server, "tok-alice", "/api/sessions/plan/shares").await;
    assert_eq!(status, 200);
    assert_eq!(list["shares"].as_array().unwrap().len(), 1, "{list}");
    // Deleting the conversation takes its shares along.
    let (status, _) = delete_as(&server, "tok-alice", "/api/sessions/plan").await;
    assert_eq!(status, 204);
    let (_, list) = get_as(&server, "tok-bob", "/api/shares").await;
    assert_eq!(list["sessions"], json!([]), "{list}");
    let (status, _) = get_as(&server, "tok-bob", &format!("/api/sessions/{alias}")).await;
    assert_eq!(status, 404);
}
