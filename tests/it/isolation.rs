//! Isolation between principals, swept: every route and frame that lists, searches, reads or
//! counts, asked by each of two principals whose conversations share an id, a search word and
//! a project, with the other's turn running. Nothing of the other principal's comes back.

use serde_json::{Value, json};

use crate::common::*;
use crate::rest::sse_until;
use crate::security::{TOKENS, connect_as, http};

/// One principal's side of the sweep.
struct Side {
    token: &'static str,
    /// Words only this principal wrote.
    secret: &'static str,
    session_id: String,
    /// Its schedule's id.
    schedule: String,
    /// Its `status` in lists: alice's second turn waits at its gate.
    status: &'static str,
}

/// A route of the sweep: its path, the status it answers, and what its body must hold.
type Row<'a> = (String, u16, Box<dyn Fn(&Value) + 'a>);

/// Both principals call their conversation this.
const ID: &str = "notes";
/// Both principals' first messages contain this.
const WORD: &str = "shared-word";

/// `path` as `token`'s holder: the status and the body as JSON (a JSON Lines export as an
/// array of its lines).
async fn get(addr: &str, token: &str, path: &str) -> (u16, Value) {
    let resp = http(addr, "GET", path, Some(token), None).await;
    let body = serde_json::from_str(&resp.body).unwrap_or_else(|_| {
        resp.body
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|_| json!(l)))
            .collect()
    });
    (resp.status, body)
}

/// What `me` reads of `ID` must be its own, whole: every frame of its session, up to `last_seq`.
fn only_mine(frames: &[Value], me: &Side, other: &Side, last_seq: i64) {
    let text = serde_json::to_string(frames).unwrap();
    assert!(!text.contains(other.secret), "{text}");
    assert!(!text.contains(&other.session_id), "{text}");
    assert!(text.contains(me.secret), "{text}");
    let stored: Vec<&Value> = frames.iter().filter(|f| f["seq"].is_i64()).collect();
    assert!(
        stored
            .iter()
            .all(|f| f["session_id"] == me.session_id.as_str()),
        "{text}"
    );
    assert_eq!(
        stored.last().map(|f| f["seq"].as_i64().unwrap()),
        Some(last_seq)
    );
}

#[tokio::test]
async fn every_listing_search_read_and_count_shows_only_the_callers_own() {
    let projects = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(projects.path()).unwrap();
    let (shared, private) = (base.join("shared"), base.join("alice-only"));
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(&private).unwrap();
    let s = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let gates = Gates::new(&format!(
        "{TOKENS}\n[[projects.roots]]\npath = {}\n\n[[projects.roots]]\npath = {}\nprincipals = [\"alice\"]\n",
        toml_string(&s(&shared)),
        toml_string(&s(&private)),
    ));
    let server = gates.start().await;
    let addr = server.addr.clone();
    gates.open(ID, 1);

    // Both watch from the start; each writes in the shared project under the same id.
    let mut sides = Vec::new();
    let mut sockets = Vec::new();
    for (token, secret, status) in [
        ("tok-alice", "alice-secret", "busy"),
        ("tok-bob", "bob-words", "idle"),
    ] {
        let mut watcher = connect_as(&addr, token).await;
        watcher.send(json!({"type": "watch"})).await;
        assert_eq!(watcher.before_pong().await, Vec::<Value>::new());
        let mut c = connect_as(&addr, token).await;
        c.send(
            json!({"type": "chat", "agent_id": ID, "content": format!("{WORD} {secret}"),
                      "options": {"cwd": s(&shared)}}),
        )
        .await;
        let frames = c.until_result(ID).await;
        let session_id = frames[0]["session_id"].as_str().unwrap().to_owned();
        let (code, schedule) = {
            let resp = http(
                &addr,
                "POST",
                "/api/schedules",
                Some(token),
                Some(&json!({"name": secret, "agent_id": ID, "content": secret,
                             "every_secs": 3600})),
            )
            .await;
            (
                resp.status,
                serde_json::from_str::<Value>(&resp.body).unwrap(),
            )
        };
        assert_eq!(code, 201, "{schedule}");
        sides.push(Side {
            token,
            secret,
            session_id,
            schedule: schedule["id"].as_str().unwrap().to_owned(),
            status,
        });
        sockets.push((watcher, c));
    }
    // Alice's second turn runs (held at its gate) through the whole sweep.
    sockets[0].1.chat(ID, "alice-secret again").await;
    sockets[0]
        .1
        .recv_until(|f| f["message_type"] == "stream_event")
        .await;

    // Bob's `notes` is done once its turn has ended (its result can come a moment before).
    eventually("bob's turn has ended", || async {
        let (_, own) = get(&addr, "tok-bob", &format!("/api/sessions/{ID}")).await;
        (own["status"] == "idle").then_some(())
    })
    .await;

    for (me, other) in [(&sides[0], &sides[1]), (&sides[1], &sides[0])] {
        let (_, own) = get(&addr, me.token, &format!("/api/sessions/{ID}")).await;
        let last_seq = own["last_seq"].as_i64().unwrap();
        // What a list or a count of `me`'s must hold: exactly its own `notes`.
        let just_mine = |body: &Value| {
            assert_eq!(body["total"], 1, "{body}");
            let list = body["sessions"].as_array().unwrap();
            assert_eq!(list.len(), 1, "{body}");
            assert_eq!(list[0]["session_id"], me.session_id.as_str());
            assert_eq!(list[0]["status"], me.status, "{body}");
        };
        let table: Vec<Row> = vec![
            ("/api/sessions?total=true".into(), 200, Box::new(just_mine)),
            (
                format!("/api/sessions?q={WORD}&total=true"),
                200,
                Box::new(just_mine),
            ),
            (
                format!("/api/sessions?q={}&total=true", me.secret),
                200,
                Box::new(just_mine),
            ),
            (
                format!("/api/sessions?q={}&total=true", other.secret),
                200,
                Box::new(|b: &Value| {
                    assert_eq!(b["total"], 0, "{b}");
                    assert_eq!(b["sessions"], json!([]));
                }),
            ),
            (
                "/api/sessions?limit=1&offset=1&total=true".into(),
                200,
                Box::new(|b: &Value| {
                    assert_eq!(b["total"], 1, "{b}");
                    assert_eq!(b["sessions"], json!([]));
                }),
            ),
            (
                format!("/api/sessions/{ID}"),
                200,
                Box::new(|b: &Value| {
                    assert_eq!(b["session_id"], me.session_id.as_str());
                    assert_eq!(b["status"], me.status);
                    assert_eq!(b["turn_count"], if me.status == "busy" { 2 } else { 1 });
                }),
            ),
            (
                format!("/api/sessions/{ID}/messages?limit=1000"),
                200,
                Box::new(|b: &Value| {
                    only_mine(b["messages"].as_array().unwrap(), me, other, last_seq)
                }),
            ),
            (
                format!("/api/sessions/{ID}/export"),
                200,
                Box::new(|b: &Value| {
                    // The stored frames, as stored: those of the agent carry its session.
                    let lines: Vec<&Value> = b
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|l| l["seq"].is_i64())
                        .collect();
                    assert_eq!(lines.last().unwrap()["seq"], last_seq);
                    assert!(lines.iter().all(|l| {
                        let session = &l["payload"]["session_id"];
                        session.is_null() || session == me.session_id.as_str()
                    }));
                    assert!(b.to_string().contains(me.secret));
                }),
            ),
            (
                "/api/schedules".into(),
                200,
                Box::new(|b: &Value| {
                    let ids: Vec<&str> = b["schedules"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|s| s["id"].as_str().unwrap())
                        .collect();
                    assert_eq!(ids, [me.schedule.as_str()]);
                }),
            ),
            (
                format!("/api/schedules/{}", me.schedule),
                200,
                Box::new(|b: &Value| assert_eq!(b["name"], me.secret)),
            ),
            (
                format!("/api/schedules/{}", other.schedule),
                404,
                Box::new(|b: &Value| assert_eq!(b["code"], "unknown_schedule", "{b}")),
            ),
            (
                "/api/schedules?all=true".into(),
                403,
                Box::new(|b: &Value| assert_eq!(b["code"], "forbidden", "{b}")),
            ),
            (
                "/api/projects".into(),
                200,
                Box::new(|b: &Value| {
                    let projects = b["projects"].as_array().unwrap();
                    let listed: Vec<&str> = projects
                        .iter()
                        .map(|p| p["path"].as_str().unwrap())
                        .collect();
                    let mine_only = match me.status {
                        "busy" => vec![s(&shared), s(&private)],
                        _ => vec![s(&shared)],
                    };
                    assert_eq!(listed, mine_only, "{b}");
                    // The shared project counts the caller's conversation, not the other's.
                    assert_eq!(projects[0]["sessions"], 1, "{b}");
                }),
            ),
        ];
        for (path, status, check) in &table {
            let (got, body) = get(&addr, me.token, path).await;
            assert_eq!(got, *status, "{} {path}: {body}", me.token);
            let text = body.to_string();
            assert!(!text.contains(other.secret), "{path}: {text}");
            assert!(!text.contains(&other.session_id), "{path}: {text}");
            check(&body);
        }
        // The other's private root is no project of `me`'s, like a path outside every root.
        if me.status == "idle" {
            let (got, body) = get(
                &addr,
                me.token,
                &format!("/api/projects/cli-sessions?cwd={}", s(&private)),
            )
            .await;
            let (outside, refused) = get(
                &addr,
                me.token,
                &format!("/api/projects/cli-sessions?cwd={}", s(&base)),
            )
            .await;
            assert_eq!((got, &body["code"]), (outside, &refused["code"]));
            assert_eq!((got, &body["code"]), (400, &json!("invalid_request")));
        }

        // A socket's replay and an event stream's replay of `ID` are `me`'s alone.
        let mut c = connect_as(&addr, me.token).await;
        c.send(json!({"type": "subscribe", "agent_id": ID, "since_seq": 0}))
            .await;
        let replay = c.recv_until(|f| f["seq"] == last_seq).await;
        only_mine(&replay, me, other, last_seq);
        let mut events = reqwest::Client::new()
            .get(server.url(&format!("/api/sessions/{ID}/events?since_seq=0")))
            .bearer_auth(me.token)
            .send()
            .await
            .unwrap();
        assert_eq!(events.status(), 200);
        let streamed: Vec<Value> = sse_until(&mut events, |f| f["seq"] == last_seq)
            .await
            .into_iter()
            .map(|(_, data)| data)
            .collect();
        only_mine(&streamed, me, other, last_seq);
    }

    // Live: alice's second turn ends while bob follows his `notes` (socket and event stream)
    // and watches; then bob's second turn. Bob sees his own turn and nothing of hers.
    let bob = &sides[1];
    let (_, own) = get(&addr, bob.token, &format!("/api/sessions/{ID}")).await;
    let mut follower = connect_as(&addr, bob.token).await;
    follower
        .send(json!({"type": "subscribe", "agent_id": ID, "since_seq": own["last_seq"]}))
        .await;
    assert_eq!(follower.before_pong().await, Vec::<Value>::new());
    let mut events = reqwest::Client::new()
        .get(server.url(&format!(
            "/api/sessions/{ID}/events?since_seq={}",
            own["last_seq"]
        )))
        .bearer_auth(bob.token)
        .send()
        .await
        .unwrap();
    gates.open(ID, 2);
    sockets[0].1.until_result(ID).await;
    chat_ack(&mut sockets[1].1, ID, "bob-words twice").await;
    let live = follower.until_result(ID).await;
    let streamed: Vec<Value> = sse_until(&mut events, |f| f["message_type"] == "result")
        .await
        .into_iter()
        .map(|(_, data)| data)
        .collect();
    for frames in [&live, &streamed] {
        assert_eq!(reply_text(frames), "Echo: bob-words twice (turn 2)");
        assert!(
            frames
                .iter()
                .all(|f| f["session_id"] == bob.session_id.as_str()),
            "{frames:?}"
        );
    }
    // Each watcher saw its own turns: alice two, bob two, none of the other's.
    for (side, (watcher, _)) in sides.iter().zip(sockets.iter_mut()) {
        let mut ended = 0;
        while ended < 2 {
            let f = watcher.recv().await;
            assert_eq!(f["message_type"], "activity", "{f}");
            assert_eq!(f["session_id"], side.session_id.as_str(), "{f}");
            ended += usize::from(f["activity"] == "turn_ended");
        }
        assert_eq!(watcher.before_pong().await, Vec::<Value>::new());
    }
}
