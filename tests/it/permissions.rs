//! Tool permission requests seen by several subscribers, through the fake Claude CLI (a prompt
//! with `TOOL:<command>` asks to run `<command>`): the first answer wins, and a request still
//! open when its turn ends is resolved `cancelled`.

use serde_json::{Value, json};

use crate::claude::Fixture;
use crate::common::*;

/// Two sockets follow a conversation; both get its permission request and both answer it at
/// once, one allowing, one denying. Exactly one answer wins: the other gets `unknown_request`,
/// both sockets get the one `permission_resolved` with the winner's outcome, and the tool ran
/// (or not) as the winner said.
#[tokio::test]
async fn the_first_answer_to_a_permission_request_wins() {
    let fx = Fixture::new("[session]\npermission_timeout_secs = 3600\n");
    let server = fx.start(&[]).await;
    let mut a = server.client().await;
    let mut b = server.client().await;
    chat_ack(&mut a, "two", "hello").await;
    let first = a.until_result("two").await;
    let last = *seqs(&first).last().unwrap();
    a.recv_until(|f| f["status"] == "idle").await;
    b.send(json!({"type": "subscribe", "agent_id": "two", "since_seq": last}))
        .await;
    assert_eq!(b.before_pong().await, Vec::<Value>::new());

    for round in 0..3 {
        chat_ack(&mut a, "two", &format!("please run TOOL:touch_{round}")).await;
        let is_request = |f: &Value| f["message_type"] == "permission_request";
        let request = a.recv_until(is_request).await.pop().unwrap();
        assert_eq!(b.recv_until(is_request).await.pop().unwrap(), request);
        let answer = |behavior: &str| {
            json!({"type": "permission_response", "agent_id": "two",
                "request_id": request["request_id"], "behavior": behavior})
        };
        // Both answers are on their way before either is handled.
        let (allow, deny) = (answer("allow"), answer("deny"));
        tokio::join!(a.send(allow), b.send(deny));
        // The loser's error is the direct answer to its frame: in before the pong of a ping
        // sent after it.
        let mut from_a = a.until_result("two").await;
        from_a.extend(a.before_pong().await);
        let mut from_b = b.until_result("two").await;
        from_b.extend(b.before_pong().await);
        let errors: Vec<&Value> = from_a
            .iter()
            .chain(&from_b)
            .filter(|f| f["message_type"] == "error")
            .collect();
        assert_eq!(errors.len(), 1, "round {round}: {errors:?}");
        assert_eq!(errors[0]["code"], "unknown_request");
        let a_lost = from_a.iter().any(|f| f["message_type"] == "error");
        let winner = if a_lost { "denied" } else { "allowed" };
        for (who, frames) in [("a", &from_a), ("b", &from_b)] {
            let resolved: Vec<&Value> = frames
                .iter()
                .filter(|f| f["message_type"] == "permission_resolved")
                .collect();
            assert_eq!(resolved.len(), 1, "round {round}, socket {who}: {frames:?}");
            assert_eq!(resolved[0]["request_id"], request["request_id"]);
            assert_eq!(resolved[0]["outcome"], winner, "round {round}");
        }
        let stored = |frames: &[Value]| -> Vec<Value> {
            frames
                .iter()
                .filter(|f| f["seq"].is_i64())
                .cloned()
                .collect()
        };
        assert_eq!(stored(&from_a), stored(&from_b));
        let expected = if winner == "allowed" {
            format!("Tool said: ran: touch_{round}")
        } else {
            "Tool said: The user denied this tool use.".to_owned()
        };
        assert_eq!(reply_text(&from_a), expected, "round {round}");
    }
}

/// A request still waiting when its turn ends (here: interrupted) is resolved `cancelled`,
/// stored, and seen by every subscriber; answering it afterwards is `unknown_request`.
#[tokio::test]
async fn a_request_open_when_its_turn_ends_is_cancelled() {
    let fx = Fixture::new("[session]\npermission_timeout_secs = 3600\n");
    let server = fx.start(&[]).await;
    let mut a = server.client().await;
    let mut b = server.client().await;
    chat_ack(&mut a, "end", "hello").await;
    let first = a.until_result("end").await;
    let last = *seqs(&first).last().unwrap();
    // The turn is over once its `idle` is out too: nothing of it may reach B live.
    a.recv_until(|f| f["status"] == "idle").await;
    b.send(json!({"type": "subscribe", "agent_id": "end", "since_seq": last}))
        .await;
    assert_eq!(b.before_pong().await, Vec::<Value>::new());

    chat_ack(&mut a, "end", "please run TOOL:never_answered").await;
    let is_request = |f: &Value| f["message_type"] == "permission_request";
    let request = a.recv_until(is_request).await.pop().unwrap();
    b.recv_until(is_request).await;
    b.send(json!({"type": "interrupt", "agent_id": "end"}))
        .await;
    for (who, c) in [("a", &mut a), ("b", &mut b)] {
        let mut frames = c.until_result("end").await;
        let result = frames.last().unwrap().clone();
        // The turn's open questions are closed with it (stored right after its result).
        frames.extend(
            c.recv_until(|f| f["message_type"] == "permission_resolved")
                .await,
        );
        frames.extend(c.before_pong().await);
        let resolved: Vec<&Value> = frames
            .iter()
            .filter(|f| f["message_type"] == "permission_resolved")
            .collect();
        assert_eq!(resolved.len(), 1, "socket {who}: {frames:?}");
        assert_eq!(resolved[0]["request_id"], request["request_id"]);
        assert_eq!(resolved[0]["outcome"], "cancelled");
        assert!(resolved[0]["seq"].as_i64() > request["seq"].as_i64());
        assert_eq!(result["message"]["is_error"], true);
    }
    a.send(json!({"type": "permission_response", "agent_id": "end",
        "request_id": request["request_id"], "behavior": "allow"}))
        .await;
    // The late answer is refused, and changes nothing (a `status` of the ended turn may still
    // be on its way to this socket).
    let answer: Vec<Value> = a
        .before_pong()
        .await
        .into_iter()
        .filter(|f| f["message_type"] != "status")
        .collect();
    assert_eq!(answer.len(), 1, "{answer:?}");
    assert_eq!(answer[0]["code"], "unknown_request");
    // A later subscriber sees the request and how it ended.
    let mut late = server.client().await;
    late.send(json!({"type": "subscribe", "agent_id": "end", "since_seq": last}))
        .await;
    let history = late.before_pong().await;
    let outcomes: Vec<(&str, &Value)> = history
        .iter()
        .filter(|f| f["request_id"] == request["request_id"])
        .map(|f| (f["message_type"].as_str().unwrap(), &f["outcome"]))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("permission_request", &Value::Null),
            ("permission_resolved", &json!("cancelled"))
        ]
    );
}

/// A server of the fake CLI whose tool prompts wait an hour, alice's socket, and REST clients
/// as alice and as bob.
async fn alice_and_bob() -> (
    Fixture,
    TestServer,
    Client,
    crate::rest::Rest,
    crate::rest::Rest,
) {
    use crate::rest::Rest;
    use crate::security::{TOKENS, connect_as};
    let fx = Fixture::new(&format!(
        "{TOKENS}\n[session]\npermission_timeout_secs = 3600\n"
    ));
    let server = fx.start(&[]).await;
    let a = connect_as(&server.addr, "tok-alice").await;
    let (alice, bob) = (
        Rest::with_token(&server, "tok-alice"),
        Rest::with_token(&server, "tok-bob"),
    );
    (fx, server, a, alice, bob)
}

/// A client without a socket answers a tool prompt over REST, with the socket frame's fields:
/// another principal's answer and an unknown `request_id` are refused and change nothing,
/// a malformed answer gets the frame's typed error, and the owner's answer runs the tool.
#[tokio::test]
async fn a_permission_prompt_is_answered_over_rest() {
    let (_fx, _server, mut a, alice, bob) = alice_and_bob().await;
    chat_ack(&mut a, "rp", "please run TOOL:touch_rest").await;
    let request = a
        .recv_until(|f| f["message_type"] == "permission_request")
        .await
        .pop()
        .unwrap();
    let path = "/api/sessions/rp/permission-response";
    let allow = json!({"request_id": request["request_id"], "behavior": "allow"});
    let (status, body) = bob.post(path, allow.clone()).await;
    assert_eq!(
        (status, &body["code"]),
        (404, &json!("unknown_agent")),
        "{body}"
    );
    let unknown = json!({"request_id": "no-such-request", "behavior": "allow"});
    let (status, body) = alice.post(path, unknown).await;
    assert_eq!(
        (status, &body["code"]),
        (404, &json!("unknown_request")),
        "{body}"
    );
    let malformed = json!({"request_id": request["request_id"], "behavior": "maybe"});
    let (status, body) = alice.post(path, malformed).await;
    assert_eq!(
        (status, &body["code"]),
        (400, &json!("bad_frame")),
        "{body}"
    );
    // None of that answered the prompt: the owner's answer does.
    let (status, body) = alice.post(path, allow.clone()).await;
    assert_eq!(status, 204, "{body}");
    let frames = a.until_result("rp").await;
    let resolved: Vec<&Value> = frames
        .iter()
        .filter(|f| f["message_type"] == "permission_resolved")
        .collect();
    assert_eq!(resolved.len(), 1, "{frames:?}");
    assert_eq!(resolved[0]["outcome"], "allowed");
    assert_eq!(reply_text(&frames), "Tool said: ran: touch_rest");
    // Answered once: a second answer finds nothing pending.
    let (status, body) = alice.post(path, allow).await;
    assert_eq!(
        (status, &body["code"]),
        (404, &json!("unknown_request")),
        "{body}"
    );
}

/// A running turn is stopped over REST: another principal's interrupt is refused as an
/// unknown conversation and stops nothing; the owner's says a turn was running and the turn
/// ends; an interrupt with nothing running says so.
#[tokio::test]
async fn a_turn_is_interrupted_over_rest() {
    let (_fx, _server, mut a, alice, bob) = alice_and_bob().await;
    // A turn waiting for a tool prompt runs until it is answered or stopped.
    chat_ack(&mut a, "ri", "please run TOOL:never_answered").await;
    a.recv_until(|f| f["message_type"] == "permission_request")
        .await;
    let path = "/api/sessions/ri/interrupt";
    let (status, body) = bob.post(path, json!({})).await;
    assert_eq!(
        (status, &body["code"]),
        (404, &json!("unknown_agent")),
        "{body}"
    );
    let (status, body) = alice.get("/api/sessions/ri").await;
    assert_eq!((status, &body["status"]), (200, &json!("busy")), "{body}");
    let (status, body) = alice.post(path, json!({})).await;
    assert_eq!(
        (status, &body["was_running"]),
        (200, &json!(true)),
        "{body}"
    );
    let frames = a.until_result("ri").await;
    assert_eq!(frames.last().unwrap()["message"]["is_error"], true);
    a.recv_until(|f| f["status"] == "idle").await;
    let (status, body) = alice.post(path, json!({})).await;
    assert_eq!(
        (status, &body["was_running"]),
        (200, &json!(false)),
        "{body}"
    );
    let (status, body) = alice
        .post("/api/sessions/nothing-here/interrupt", json!({}))
        .await;
    assert_eq!(
        (status, &body["code"]),
        (404, &json!("unknown_agent")),
        "{body}"
    );
}
