//! Working on a shared conversation together: every prompt, permission answer, interrupt and
//! rewind says who sent it (live, in the replay and over REST), and its followers hear who
//! starts and stops viewing it.

use serde_json::{Value, json};

use crate::claude::Fixture;
use crate::common::*;
use crate::repos::rest;
use crate::security::{TOKENS, connect_as, server_with};

/// Shares `owner`'s conversation `agent_id` with `with` as `role`; their alias for it.
pub async fn share(
    server: &TestServer,
    owner: &str,
    agent_id: &str,
    with: &str,
    role: &str,
) -> String {
    let (status, share) = rest(
        server,
        Some(&format!("tok-{owner}")),
        "PUT",
        &format!("/api/sessions/{agent_id}/shares/{with}"),
        Some(json!({"role": role})),
    )
    .await;
    assert_eq!(status, 200, "{share}");
    share["agent_id"].as_str().unwrap().to_owned()
}

/// Whether `frame` is the `user` message of prompt `text`.
fn prompt(frame: &Value, text: &str) -> bool {
    frame["message_type"] == "user" && frame["message"]["message"]["content"] == text
}

/// The `sender` of the first frame of `frames` that `pred` picks.
fn sender_of(frames: &[Value], pred: impl Fn(&Value) -> bool) -> Value {
    let frame = frames.iter().find(|f| pred(f)).expect("the frame");
    match frame["message_type"].as_str() {
        Some("user") => frame["message"]["sender"].clone(),
        _ => frame["sender"].clone(),
    }
}

/// Through the fake Claude CLI (a prompt with `TOOL:<command>` asks to run it): Alice's turn
/// asks for a tool and Bob, an editor, allows it; Bob's own prompt, his interrupt and his
/// rewind carry him as their sender, live and replayed, and Alice's prompt carries her.
#[tokio::test]
async fn an_editor_answers_the_owners_prompt_and_every_frame_says_who_sent_it() {
    let fx = Fixture::new(&format!(
        "{TOKENS}\n[session]\npermission_timeout_secs = 3600\n"
    ));
    let server = fx.start(&[]).await;
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    chat_ack(&mut alice, "plan", "hello").await;
    let first = alice.until_result("plan").await;
    assert_eq!(sender_of(&first, |f| prompt(f, "hello")), "alice");
    let alias = share(&server, "alice", "plan", "bob", "editor").await;
    let mut bob = connect_as(&server.addr, "tok-bob").await;
    bob.send(json!({"type": "subscribe", "agent_id": alias}))
        .await;
    bob.until_result(&alias).await;

    // Alice's turn asks; Bob answers.
    chat_ack(&mut alice, "plan", "please run TOOL:touch_x").await;
    let request = bob
        .recv_until(|f| f["message_type"] == "permission_request")
        .await
        .pop()
        .unwrap();
    bob.send(json!({"type": "permission_response", "agent_id": alias,
        "request_id": request["request_id"], "behavior": "allow"}))
        .await;
    let turn = alice.until_result("plan").await;
    let resolved = |f: &Value| f["message_type"] == "permission_resolved";
    assert_eq!(sender_of(&turn, resolved), "bob", "{turn:?}");
    assert_eq!(reply_text(&turn), "Tool said: ran: touch_x");
    bob.until_result(&alias).await;

    // Bob's own prompt.
    bob.send(json!({"type": "chat", "agent_id": alias, "content": "from bob"}))
        .await;
    let mine = bob.until_result(&alias).await;
    assert_eq!(sender_of(&mine, |f| prompt(f, "from bob")), "bob");
    let rewind_to = *seqs(&first).last().unwrap();

    // His rewind; and the stored history says the same as the live frames did.
    bob.send(json!({"type": "rewind", "agent_id": alias, "to_seq": rewind_to}))
        .await;
    let rewound = bob.recv_until(|f| f["status"] == "rewound").await;
    assert_eq!(sender_of(&rewound, |f| f["status"] == "rewound"), "bob");
    let (status, page) = rest(
        &server,
        Some("tok-alice"),
        "GET",
        "/api/sessions/plan/messages",
        None,
    )
    .await;
    assert_eq!(status, 200);
    let stored = page["messages"].as_array().unwrap();
    assert_eq!(sender_of(stored, |f| prompt(f, "hello")), "alice");
    assert_eq!(sender_of(stored, |f| f["status"] == "rewound"), "bob");
    let replayed = {
        let mut again = connect_as(&server.addr, "tok-bob").await;
        again
            .send(json!({"type": "subscribe", "agent_id": alias}))
            .await;
        again.recv_until(|f| f["status"] == "rewound").await
    };
    assert_eq!(sender_of(&replayed, |f| f["status"] == "rewound"), "bob");

    // His interrupt of a turn that waits for an answer.
    chat_ack(&mut alice, "plan", "please run TOOL:touch_y").await;
    bob.recv_until(|f| f["message_type"] == "permission_request")
        .await;
    bob.send(json!({"type": "interrupt", "agent_id": alias}))
        .await;
    let stopped = alice.recv_until(|f| f["status"] == "interrupted").await;
    assert_eq!(sender_of(&stopped, |f| f["status"] == "interrupted"), "bob");
}

/// A conversation's followers hear who joins and leaves it: principals only, once each
/// however many sockets they have, under the name each follower knows it by.
#[tokio::test]
async fn followers_hear_who_starts_and_stops_viewing() {
    let (server, _cfg) = server_with(TOKENS).await;
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    alice.chat("plan", "first").await;
    alice.until_result("plan").await;
    let alias = share(&server, "alice", "plan", "bob", "viewer").await;

    let viewers = |f: &Value| f["message_type"] == "viewers";
    let mut bob = connect_as(&server.addr, "tok-bob").await;
    bob.send(json!({"type": "subscribe", "agent_id": alias}))
        .await;
    let joined = alice.recv_until(viewers).await.pop().unwrap();
    assert_eq!(
        (
            joined["agent_id"].as_str(),
            joined["viewer"].as_str(),
            joined["event"].as_str()
        ),
        (Some("plan"), Some("bob"), Some("joined"))
    );
    assert_eq!(joined["viewers"], json!(["alice", "bob"]));
    let own = bob.recv_until(viewers).await.pop().unwrap();
    assert_eq!(
        (own["agent_id"].as_str(), &own["viewers"]),
        (Some(alias.as_str()), &json!(["alice", "bob"]))
    );
    assert!(
        own.as_object()
            .unwrap()
            .keys()
            .all(|k| !k.contains("socket")),
        "{own}"
    );

    // A second socket of Bob's changes nothing; closing both is one `left`.
    let mut bob2 = connect_as(&server.addr, "tok-bob").await;
    bob2.send(json!({"type": "subscribe", "agent_id": alias}))
        .await;
    bob2.before_pong().await;
    drop(bob2);
    bob.send(json!({"type": "unsubscribe", "agent_id": alias}))
        .await;
    let left = alice.recv_until(viewers).await.pop().unwrap();
    assert_eq!(
        (left["viewer"].as_str(), left["event"].as_str()),
        (Some("bob"), Some("left"))
    );
    assert_eq!(left["viewers"], json!(["alice"]));
    let rest_of = alice.before_pong().await;
    assert!(!rest_of.iter().any(viewers), "{rest_of:?}");
}

/// On two nodes of a cluster (PostgreSQL and NATS): Bob, viewing Alice's conversation through
/// node B, is seen joining by Alice on node A; when Alice, on A, ends the share, Bob's socket
/// on B is told at once and nothing more of it follows, and Alice sees him leave.
#[cfg_attr(
    any(no_test_pg, no_test_nats),
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL) and nats-server (AGENTMUX_TEST_NATS_BIN), not configured here"
)]
#[tokio::test]
async fn presence_and_revocations_cross_the_nodes_of_a_cluster() {
    use crate::cluster::{Cluster, LONG_LEASE_SECS, Nats};
    let Some(nats) = Nats::start().await else {
        return;
    };
    let Some(mut cluster) = Cluster::configured(LONG_LEASE_SECS, &format!("\n{TOKENS}")).await
    else {
        return;
    };
    cluster.nats = Some(nats);
    cluster.gates.open_all("plan", 1..=2);
    let (a, _b, mut alice, mut bob, alias) = viewing_through_two_nodes(&cluster).await;
    let viewers = |f: &Value| f["message_type"] == "viewers" && f["viewer"] == "bob";

    let (status, _) = rest(
        &a,
        Some("tok-alice"),
        "DELETE",
        "/api/sessions/plan/shares/bob",
        None,
    )
    .await;
    assert_eq!(status, 204);
    let revoked = bob
        .recv_until(|f| f["status"] == "access_revoked")
        .await
        .pop()
        .unwrap();
    assert_eq!(revoked["agent_id"], alias.as_str());
    let left = alice.recv_until(viewers).await.pop().unwrap();
    assert_eq!(
        (left["event"].as_str(), &left["viewers"]),
        (Some("left"), &json!(["alice"])),
        "{left}"
    );
    alice.chat("plan", "second").await;
    alice.until_result("plan").await;
    let after = bob.before_pong().await;
    assert!(
        after.iter().all(|f| f["agent_id"] != alias.as_str()),
        "{after:?}"
    );
}

/// Node A, where Alice follows her `plan` after a turn, and node B, where Bob follows it as a
/// viewer under his alias: checked that Alice sees him join. The nodes, their sockets, the alias.
async fn viewing_through_two_nodes(
    cluster: &crate::cluster::Cluster,
) -> (TestServer, TestServer, Client, Client, String) {
    let a = cluster.node("node-a").await;
    let b = cluster.node("node-b").await;
    let mut alice = connect_as(&a.addr, "tok-alice").await;
    alice.chat("plan", "first").await;
    let last = *seqs(&alice.until_result("plan").await).last().unwrap();
    alice
        .send(json!({"type": "subscribe", "agent_id": "plan", "since_seq": last}))
        .await;
    let alias = share(&a, "alice", "plan", "bob", "viewer").await;
    let mut bob = connect_as(&b.addr, "tok-bob").await;
    bob.send(json!({"type": "subscribe", "agent_id": alias}))
        .await;
    bob.until_result(&alias).await;
    let joined = alice
        .recv_until(|f| f["message_type"] == "viewers" && f["viewer"] == "bob")
        .await
        .pop()
        .unwrap();
    assert_eq!(
        (joined["agent_id"].as_str(), joined["event"].as_str()),
        (Some("plan"), Some("joined")),
        "{joined}"
    );
    assert_eq!(joined["viewers"], json!(["alice", "bob"]), "{joined}");
    (a, b, alice, bob, alias)
}

/// Bob views Alice's conversation through node B, and node B is killed: once its lease is
/// over, Alice (on node A) sees him leave, as though he had closed it.
#[cfg_attr(
    any(no_test_pg, no_test_nats),
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL) and nats-server (AGENTMUX_TEST_NATS_BIN), not configured here"
)]
#[tokio::test]
async fn viewers_through_a_node_that_is_gone_are_seen_leaving() {
    use crate::cluster::{Cluster, Nats};
    let Some(nats) = Nats::start().await else {
        return;
    };
    // Short leases: node B is gone two seconds after it stops renewing.
    let Some(mut cluster) = Cluster::configured(2, &format!("\n{TOKENS}")).await else {
        return;
    };
    cluster.nats = Some(nats);
    cluster.gates.open_all("plan", 1..=1);
    let (_a, mut b, mut alice, _bob, _) = viewing_through_two_nodes(&cluster).await;
    let viewers = |f: &Value| f["message_type"] == "viewers" && f["viewer"] == "bob";

    b.kill9().await;
    let left = alice.recv_until(viewers).await.pop().unwrap();
    assert_eq!(
        (left["event"].as_str(), &left["viewers"]),
        (Some("left"), &json!(["alice"])),
        "{left}"
    );
}

/// In a terminal, Bob's `/resume` lists Alice's conversation shared with him, with its owner
/// and his role, and picking it resumes it under his alias with its history.
#[tokio::test]
async fn the_terminal_client_resumes_a_conversation_shared_with_you() {
    use crate::cli_chat::{Terminal, have_tmux};
    if !have_tmux() {
        return;
    }
    let (server, _cfg) = server_with(TOKENS).await;
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    alice.chat("plan", "the plan").await;
    alice.until_result("plan").await;
    let alias = share(&server, "alice", "plan", "bob", "viewer").await;

    let url = format!("ws://{}/ws", server.addr);
    let term = Terminal::open_in(&url, &["--token", "tok-bob"], None);
    term.wait_for("New session:", 1).await;
    term.type_line("/resume");
    let screen = term.wait_for("Pick a number", 1).await;
    let line = screen
        .lines()
        .find(|l| l.contains(&format!("1. the plan  [{alias}]")))
        .unwrap_or_else(|| panic!("{screen}"));
    assert!(
        line.ends_with("4 messages  (shared by alice, you are viewer)"),
        "{line}"
    );
    term.type_line("1");
    term.wait_for(&format!("Resumed session: {alias} (4 messages loaded)"), 1)
        .await;
    term.wait_for("Echo: the plan (turn 1)", 1).await;
}
