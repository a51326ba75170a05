//! The core gateway over a real socket: turns, fan-out, replay, errors, restarts.

use std::collections::{BTreeMap, HashMap};

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::common::*;
use crate::inproc::InProcess;

/// A chat gets an ack, then the user frame, the agent's start, init, deltas, assistant and
/// result, in exactly that order; the store has the turn's exact cost and tokens.
#[tokio::test]
async fn a_turn_streams_and_is_stored_in_order() {
    let mut server = TestServer::start().await;
    let mut c = server.client().await;
    c.send(
        json!({"type": "chat", "agent_id": "a1", "content": "hello world", "client_msg_id": "m1"}),
    )
    .await;
    let ack = c.recv().await;
    assert_eq!(ack["message_type"], "ack");
    assert_eq!(ack["client_msg_id"], "m1");
    assert_eq!(ack["seq"], 1);
    assert_eq!(ack["queue_position"], 0);
    let frames = c.until_result("a1").await;
    // One delta per word of "Echo: hello world (turn 1)".
    let delta = "stream:content_block_delta";
    assert_eq!(
        kinds(&frames, "a1"),
        [
            "user",
            "status:creating",
            "status:active",
            "status:busy",
            "system",
            "stream:message_start",
            delta,
            delta,
            delta,
            delta,
            delta,
            "assistant",
            "stream:content_block_stop",
            "stream:message_stop",
            "result",
        ]
    );
    assert_eq!(kinds(&frames, "a1").len(), frames.len(), "{frames:?}");
    assert_eq!(reply_text(&frames), "Echo: hello world (turn 1)");
    assert_eq!(seqs(&frames), vec![1, 2, 3, 4]);
    let deltas: String = frames
        .iter()
        .filter(|f| f["message_type"] == "stream_event")
        .filter_map(|f| f["message"]["event"]["delta"]["text"].as_str())
        .collect();
    assert_eq!(deltas, "Echo: hello world (turn 1)");
    for f in &frames {
        assert_eq!(f["agent_id"], "a1");
        assert_eq!(f["session_id"], ack["session_id"]);
        assert!(f["timestamp"].is_string());
    }
    // The store has the conversation with its title and totals.
    let db = server.stop_and_open_db().await;
    let (title, count, results, cost, sdk, unified): (String, i64, i64, f64, String, i64) =
        sqlx::query_as(
            "select title, message_count, result_count, total_cost_usd, sdk_session_id,
           case when unified then 1 else 0 end from session_info where agent_id = 'a1'",
        )
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(title, "hello world");
    assert_eq!(count, 4);
    assert_eq!(results, 1);
    // The demo's turn costs $0.0001; tokens are words: 2 in, 5 out.
    assert_eq!(cost, 0.0001);
    let (input, output, duration): (i64, i64, i64) = sqlx::query_as(
        "select input_tokens, output_tokens, duration_ms from session_info where agent_id = 'a1'",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    let result = frames.last().unwrap();
    assert_eq!(
        (input, output, duration),
        (2, 5, result["message"]["duration_ms"].as_i64().unwrap())
    );
    assert_eq!(sdk, ack["session_id"].as_str().unwrap());
    assert_eq!(unified, 1);
}

/// The demo agent's reply to turn `n` of `content`.
fn demo_reply(content: &str, n: u32) -> String {
    format!("Echo: {content} (turn {n})")
}

/// The fake ACP agent's (and the fake CLI's) reply to turn `n` of `content`.
fn acp_reply(content: &str, n: u32) -> String {
    format!("Echo: {content} (history {n})")
}

/// One socket talks to several conversations; each keeps its own history and tags.
#[tokio::test]
async fn one_socket_switches_between_sessions() {
    switching(TestServer::start().await, demo_reply).await;
}

/// The same with Agent Client Protocol conversations.
#[tokio::test]
async fn one_socket_switches_between_acp_sessions() {
    let setup = crate::acp::AcpSetup::new(&[]);
    switching(setup.start_as_default().await, acp_reply).await;
}

async fn switching(server: TestServer, reply: fn(&str, u32) -> String) {
    let mut c = server.client().await;
    let mut sessions = HashMap::new();
    for round in 1..=2 {
        for agent in ["alpha", "beta", "gamma"] {
            let ack = chat_ack(&mut c, agent, &format!("{agent} {round}")).await;
            sessions
                .entry(agent)
                .or_insert_with(|| ack["session_id"].clone());
            assert_eq!(
                sessions[agent], ack["session_id"],
                "same session_id for the same agent_id"
            );
            let frames = c.until_result(agent).await;
            assert_eq!(
                reply_text(&frames),
                reply(&format!("{agent} {round}"), round)
            );
        }
    }
    let ids: std::collections::HashSet<_> = sessions.values().collect();
    assert_eq!(ids.len(), 3);
}

/// 50 sockets drive 20 conversations at once: every socket that chats with a conversation
/// sees only that conversation's frames, replies echo the right content, seqs have no gaps.
#[tokio::test]
async fn interleaved_turns_do_not_mix() {
    interleaved(TestServer::start().await, demo_reply).await;
}

/// The same with Agent Client Protocol conversations (20 agent processes).
#[tokio::test]
async fn interleaved_acp_turns_do_not_mix() {
    let setup = crate::acp::AcpSetup::new(&[]);
    interleaved(setup.start_as_default().await, acp_reply).await;
}

async fn interleaved(mut server: TestServer, reply: fn(&str, u32) -> String) {
    let mut tasks = Vec::new();
    for s in 0..50 {
        let addr = server.addr.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = Client::connect(&addr).await;
            let agent = format!("agent-{}", s % 20);
            let content = format!("from socket {s}");
            c.chat(&agent, &content).await;
            let mut frames = Vec::new();
            let mut my_result = false;
            // Wait until this socket's own turn has its result.
            let mut user_seq = None;
            while !my_result {
                let f = c.recv().await;
                assert_eq!(
                    f["agent_id"].as_str(),
                    Some(agent.as_str()),
                    "foreign or untagged frame on socket {s}: {f}"
                );
                if f["message_type"] == "ack" {
                    user_seq = f["seq"].as_i64();
                }
                // The conversation runs its turns in some order: this one is turn 1, 2 or 3
                // (20 conversations share 50 sockets).
                if f["message_type"] == "result"
                    && (1..=3).any(|n| f["message"]["result"] == reply(&content, n).as_str())
                {
                    my_result = true;
                }
                frames.push(f);
            }
            (agent, user_seq.unwrap(), frames)
        }));
    }
    for t in tasks {
        let (agent, user_seq, frames) = t.await.unwrap();
        let stored = seqs(&frames);
        assert!(
            stored.windows(2).all(|w| w[1] == w[0] + 1),
            "{agent}: gap in {stored:?}"
        );
        assert_eq!(stored[0], user_seq);
    }
    // In the store: 20 conversations, 50 turns, each conversation's seqs 1..=n.
    let db = server.stop_and_open_db().await;
    let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
        "select s.agent_id, s.last_seq, count(m.seq), max(m.seq) from session_info s join messages m on m.session_pk = s.id group by s.id",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    assert_eq!(rows.len(), 20);
    let mut prompts = 0;
    for (agent, last_seq, count, max) in rows {
        assert_eq!(count, last_seq, "{agent}");
        assert_eq!(max, last_seq, "{agent}");
        let payloads: Vec<String> = sqlx::query_scalar(
            "select payload from messages m join session_info s on s.id = m.session_pk
             where s.agent_id = $1 and m.prompt",
        )
        .bind(&agent)
        .fetch_all(&db)
        .await
        .unwrap();
        let contents: Vec<String> = payloads.iter().map(|p| prompt_text(p)).collect();
        let n: usize = agent.trim_start_matches("agent-").parse().unwrap();
        for content in &contents {
            let socket: usize = content.trim_start_matches("from socket ").parse().unwrap();
            assert_eq!(socket % 20, n, "{content} stored under {agent}");
        }
        prompts += contents.len();
    }
    assert_eq!(prompts, 50);
}

/// A client that reconnects and subscribes with the last seq it saw gets exactly the frames it
/// missed, and other subscribers see every frame of the conversation.
#[tokio::test]
async fn subscribe_replays_exactly_the_missed_frames() {
    replaying(TestServer::start().await, demo_reply).await;
}

/// The same with an Agent Client Protocol conversation.
#[tokio::test]
async fn subscribe_replays_exactly_the_missed_acp_frames() {
    let setup = crate::acp::AcpSetup::new(&[]);
    replaying(setup.start_as_default().await, acp_reply).await;
}

async fn replaying(mut server: TestServer, reply: fn(&str, u32) -> String) {
    let mut a = server.client().await;
    chat_ack(&mut a, "r1", "first").await;
    let first = a.until_result("r1").await;
    let last_seen = *seqs(&first).last().unwrap();
    drop(a);

    let mut b = server.client().await;
    chat_ack(&mut b, "r1", "second").await;
    let second = b.until_result("r1").await;
    let missed = seqs(&second);

    let mut a = server.client().await;
    a.send(json!({"type": "subscribe", "agent_id": "r1", "since_seq": last_seen}))
        .await;
    let replay = a.until_result("r1").await;
    assert_eq!(seqs(&replay), missed);
    // Identical to the live frames, timestamps included.
    let live: Vec<&Value> = second
        .iter()
        .filter(|f| f["seq"].is_i64() && f["message_type"] != "ack")
        .collect();
    let replayed: Vec<&Value> = replay.iter().filter(|f| f["seq"].is_i64()).collect();
    assert_eq!(live, replayed);

    // A subscriber sees the next turn live, alongside the chatting socket.
    let mut watcher = server.client().await;
    watcher
        .send(json!({"type": "subscribe", "agent_id": "r1", "since_seq": *missed.last().unwrap()}))
        .await;
    chat_ack(&mut b, "r1", "third").await;
    let from_b = b.until_result("r1").await;
    let from_watcher = watcher.until_result("r1").await;
    assert_eq!(seqs(&from_watcher), seqs(&from_b));
    assert_eq!(reply_text(&from_watcher), reply("third", 3));

    // Subscribing to an unknown conversation is a typed error and starts nothing.
    watcher
        .send(json!({"type": "subscribe", "agent_id": "nobody"}))
        .await;
    let err = watcher
        .recv_until(|f| f["message_type"] == "error")
        .await
        .pop()
        .unwrap();
    assert_eq!(err["code"], "unknown_agent");
    assert_eq!(err["agent_id"], "nobody");
    let db = server.stop_and_open_db().await;
    let n: i64 = sqlx::query_scalar("select count(*) from session_info where agent_id = 'nobody'")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(n, 0);
}

/// Every bad input gets its typed error, the socket stays open, and another session on the
/// same socket is undisturbed.
#[tokio::test]
async fn bad_input_gets_typed_errors_and_the_socket_stays_open() {
    let mut server = TestServer::start().await;
    let mut c = server.client().await;
    let long_id = "x".repeat(129);
    let cases: Vec<(Message, &str)> = vec![
        (Message::text("{not json"), "bad_frame"),
        (Message::text("[1,2,3]"), "bad_frame"),
        (Message::text("\"chat\""), "bad_frame"),
        (
            Message::text(r#"{"agent_id":"a","content":"x"}"#),
            "bad_frame",
        ),
        (
            Message::text(r#"{"type":"dance","agent_id":"a"}"#),
            "unknown_type",
        ),
        (
            Message::text(r#"{"type":"chat","content":"x"}"#),
            "invalid_agent_id",
        ),
        (
            Message::text(r#"{"type":"chat","agent_id":"has space","content":"x"}"#),
            "invalid_agent_id",
        ),
        (
            Message::text(format!(
                r#"{{"type":"chat","agent_id":"{long_id}","content":"x"}}"#
            )),
            "invalid_agent_id",
        ),
        (
            Message::text(r#"{"type":"chat","agent_id":42,"content":"x"}"#),
            "invalid_agent_id",
        ),
        (
            Message::text(r#"{"type":"chat","agent_id":"a","content":""}"#),
            "invalid_content",
        ),
        (
            Message::text(r#"{"type":"chat","agent_id":"a"}"#),
            "invalid_content",
        ),
        (
            Message::text(r#"{"type":"chat","agent_id":"a","content":["x"]}"#),
            "invalid_content",
        ),
        (
            Message::text(
                r#"{"type":"chat","agent_id":"a","content":"x","options":{"model":"--dangerously-skip-permissions"}}"#,
            ),
            "invalid_options",
        ),
        (
            Message::text(r#"{"type":"chat","agent_id":"a","content":"x","options":"fast"}"#),
            "invalid_options",
        ),
        (
            Message::text(r#"{"type":"subscribe","agent_id":"a","since_seq":"zero"}"#),
            "bad_frame",
        ),
        (Message::text(r#"{"type":"interrupt"}"#), "invalid_agent_id"),
        (Message::binary(vec![1u8, 2, 3]), "bad_frame"),
    ];
    for (msg, code) in cases {
        let shown = format!("{msg:?}");
        c.send_raw(msg).await;
        let err = c.recv().await;
        assert_eq!(err["message_type"], "error", "{shown}");
        assert_eq!(err["code"], code, "{shown}");
        assert!(err["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
    // The error echoes agent_id and client_msg_id.
    c.send(json!({"type":"chat","agent_id":"ok-1","content":"  ","client_msg_id":"c9"}))
        .await;
    let err = c.recv().await;
    assert_eq!(
        (err["agent_id"].as_str(), err["client_msg_id"].as_str()),
        (Some("ok-1"), Some("c9"))
    );
    // Nothing was stored for the bad frames, and the same socket still works.
    chat_ack(&mut c, "ok-1", "still here").await;
    assert_eq!(
        reply_text(&c.until_result("ok-1").await),
        "Echo: still here (turn 1)"
    );
    // Ping/pong echoes ts.
    c.send(json!({"type": "ping", "ts": 12345})).await;
    let pong = c
        .recv_until(|f| f["message_type"] == "pong")
        .await
        .pop()
        .unwrap();
    assert_eq!(pong["ts"], 12345);
    let db = server.stop_and_open_db().await;
    let n: i64 = sqlx::query_scalar("select count(*) from session_info")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(n, 1);
}

/// Unicode agent ids are refused, unicode content round-trips, titles cut at 50 characters.
#[tokio::test]
async fn unicode_and_long_content() {
    let mut server = TestServer::start().await;
    let mut c = server.client().await;
    c.chat("agént", "x").await;
    assert_eq!(c.recv().await["code"], "invalid_agent_id");
    let content = "日本語のテキスト 🚀 ".repeat(10);
    chat_ack(&mut c, "uni", &content).await;
    let frames = c.until_result("uni").await;
    assert_eq!(reply_text(&frames), format!("Echo: {content} (turn 1)"));
    let long = "word ".repeat(40_000);
    chat_ack(&mut c, "long", &long).await;
    let frames = c.until_result("long").await;
    assert_eq!(reply_text(&frames), format!("Echo: {long} (turn 1)"));
    let too_long = "y".repeat(300_000);
    c.chat("long", &too_long).await;
    let err = c
        .recv_until(|f| f["message_type"] == "error")
        .await
        .pop()
        .unwrap();
    assert_eq!(err["code"], "invalid_content");
    let db = server.stop_and_open_db().await;
    let title: String = sqlx::query_scalar("select title from session_info where agent_id = 'uni'")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(title.chars().count(), 50);
    assert!(content.starts_with(&title));
}

/// A frame over the configured maximum closes the socket with 1009; others are unaffected.
#[tokio::test]
async fn oversized_frame_closes_with_1009() {
    let (_dir, cfg) = config_file("[socket]\nmax_frame_bytes = 4096\nmax_content_bytes = 2048\n");
    let server = TestServer::start_with(&["--config", &cfg, "--demo-delay-ms", "0"]).await;
    let mut other = server.client().await;
    let mut c = server.client().await;
    c.chat("big", &"z".repeat(10_000)).await;
    assert_eq!(c.expect_close().await, 1009);
    chat_ack(&mut other, "fine", "hi").await;
    assert_eq!(
        reply_text(&other.until_result("fine").await),
        "Echo: hi (turn 1)"
    );
}

/// A socket that sends nothing for the idle timeout is closed with 1000.
#[tokio::test]
async fn idle_socket_is_closed() {
    let server = InProcess::start("[socket]\nidle_timeout_secs = 1\n").await;
    let mut c = server.client().await;
    assert_eq!(c.expect_close().await, 1000);
}

/// A chat sent while a turn runs is acked with its queue position and runs after, in order.
/// The first turn holds at its gate until all three are acked.
#[tokio::test]
async fn queued_turns_run_in_order() {
    let gates = Gates::new("");
    let server = gates.start().await;
    gates.open_all("q", 2..=3);
    let mut c = server.client().await;
    for i in 0..3 {
        c.send(json!({"type":"chat","agent_id":"q","content":format!("msg {i}"),"client_msg_id":format!("c{i}")})).await;
    }
    let mut acks = BTreeMap::new();
    let mut results = Vec::new();
    while results.len() < 3 {
        if acks.len() == 3 {
            gates.open("q", 1);
        }
        let f = c.recv().await;
        match f["message_type"].as_str() {
            Some("ack") => {
                acks.insert(
                    f["client_msg_id"].as_str().unwrap().to_owned(),
                    f["queue_position"].as_i64().unwrap(),
                );
            }
            Some("result") => results.push(f["message"]["result"].as_str().unwrap().to_owned()),
            _ => {}
        }
    }
    assert_eq!(
        acks.into_iter().collect::<Vec<_>>(),
        vec![("c0".into(), 0), ("c1".into(), 1), ("c2".into(), 2)]
    );
    assert_eq!(
        results,
        vec![
            "Echo: msg 0 (turn 1)",
            "Echo: msg 1 (turn 2)",
            "Echo: msg 2 (turn 3)"
        ]
    );
}

/// Interrupt stops the running turn (status interrupted, an error result), the next queued turn
/// runs, and an interrupt with nothing running is answered `idle`, directly.
#[tokio::test]
async fn interrupt_mid_turn() {
    let gates = Gates::new("");
    let server = gates.start().await;
    gates.open("i1", 2);
    let mut c = server.client().await;
    let long = "one two three four five six seven eight nine ten eleven twelve";
    let ack = chat_ack(&mut c, "i1", long).await;
    // The first turn says its first word and waits at its gate, which never opens.
    c.recv_until(|f| f["message"]["event"]["type"] == "content_block_delta")
        .await;
    let queued = chat_ack(&mut c, "i1", "after").await;
    assert_eq!(queued["queue_position"], 1);
    c.send(json!({"type": "interrupt", "agent_id": "i1"})).await;
    let frames = c.until_result("i1").await;
    assert!(
        frames
            .iter()
            .any(|f| f["message_type"] == "status" && f["status"] == "interrupted")
    );
    let result = frames.last().unwrap();
    assert_eq!(result["message"]["is_error"], true);
    assert_eq!(result["message"]["terminal_reason"], "aborted_streaming");
    let partial = frames
        .iter()
        .rfind(|f| f["message_type"] == "assistant")
        .and_then(|f| f["message"]["message"]["content"][0]["text"].as_str())
        .unwrap()
        .to_owned();
    assert_eq!(partial, "Echo: ", "the reply was cut after its first word");
    // The queued turn runs next and the session remembers both turns.
    let next = c.until_result("i1").await;
    assert_eq!(reply_text(&next), "Echo: after (turn 2)");
    // The end of that turn is broadcast as `idle`; once it is in, the only `idle` that can
    // come is the direct answer to the interrupt, before the pong of the ping sent after it.
    c.recv_until(|f| f["agent_id"] == "i1" && f["status"] == "idle")
        .await;
    c.send(json!({"type": "interrupt", "agent_id": "i1"})).await;
    let answer = c.before_pong().await;
    assert_eq!(answer.len(), 1, "{answer:?}");
    assert_eq!(
        (
            answer[0]["message_type"].as_str(),
            answer[0]["status"].as_str(),
            answer[0]["agent_id"].as_str(),
            &answer[0]["session_id"],
        ),
        (Some("status"), Some("idle"), Some("i1"), &ack["session_id"])
    );
    c.send(json!({"type": "interrupt", "agent_id": "never-seen"}))
        .await;
    let answer = c.before_pong().await;
    assert_eq!(answer.len(), 1, "{answer:?}");
    assert_eq!(answer[0]["code"], "unknown_agent");
    assert_eq!(answer[0]["agent_id"], "never-seen");
}

/// 100 concurrent first chats to one new agent_id make one conversation, one agent, 100 turns.
#[tokio::test]
async fn creation_is_single_flight() {
    let (_dir, cfg) = config_file("[session]\nmax_queued_turns = 200\n");
    let mut server = TestServer::start_with(&["--config", &cfg, "--demo-delay-ms", "0"]).await;
    let mut tasks = Vec::new();
    for i in 0..100 {
        let addr = server.addr.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = Client::connect(&addr).await;
            let ack = chat_ack(&mut c, "same", &format!("hello {i}")).await;
            assert_eq!(ack["message_type"], "ack", "{ack}");
            ack["session_id"].as_str().unwrap().to_owned()
        }));
    }
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        ids.insert(t.await.unwrap());
    }
    assert_eq!(ids.len(), 1);
    // One agent: its turn counter runs 1..=100 over the whole queue.
    let mut c = server.client().await;
    c.send(json!({"type": "subscribe", "agent_id": "same"}))
        .await;
    let mut turns = Vec::new();
    while turns.len() < 100 {
        let f = c.recv().await;
        if f["message_type"] == "result" {
            let text = f["message"]["result"].as_str().unwrap();
            let n: usize = text
                .rsplit("(turn ")
                .next()
                .unwrap()
                .trim_end_matches(')')
                .parse()
                .unwrap();
            turns.push(n);
        }
    }
    assert_eq!(turns, (1..=100).collect::<Vec<_>>());
    let db = server.stop_and_open_db().await;
    let rows: i64 = sqlx::query_scalar("select count(*) from session_info")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(rows, 1);
}

/// A socket that stops reading does not stall the conversation or other sockets; when it reads
/// again it is told it lagged and gets every stored frame, in order, without gaps.
#[tokio::test]
async fn a_stalled_socket_lags_and_catches_up() {
    let (_dir, cfg) = config_file("[socket]\nsession_buffer_frames = 16\n");
    let server = TestServer::start_with(&["--config", &cfg, "--demo-delay-ms", "0"]).await;
    let mut driver = server.client().await;
    chat_ack(&mut driver, "lag", "warm up").await;
    driver.until_result("lag").await;
    let mut stalled = server.client().await;
    stalled
        .send(json!({"type": "subscribe", "agent_id": "lag", "since_seq": 0}))
        .await;
    // Large turns, so the stalled socket's buffers fill up while it reads nothing.
    let big = "data ".repeat(40_000);
    for _ in 0..15 {
        chat_ack(&mut driver, "lag", &big).await;
        driver.until_result("lag").await;
    }
    let (status, session) = crate::rest::Rest::new(&server)
        .get("/api/sessions/lag")
        .await;
    assert_eq!(status, 200, "{session}");
    let last_seq = session["last_seq"].as_i64().unwrap();
    let mut got = Vec::new();
    let mut lagged = false;
    while got.last() != Some(&last_seq) {
        let f = stalled.recv().await;
        if f["message_type"] == "status" && f["status"] == "lagged" {
            lagged = true;
        }
        if let Some(seq) = f["seq"].as_i64() {
            got.push(seq);
        }
    }
    assert!(lagged, "the stalled socket was told it lagged");
    assert_eq!(got, (1..=last_seq).collect::<Vec<_>>());
}

/// Idle conversations are evicted and resume with the same session_id and their history.
#[tokio::test]
async fn idle_sessions_are_evicted_and_resumed() {
    let server = InProcess::start("[session]\nidle_evict_secs = 1\n").await;
    let mut c = server.client().await;
    let ack = chat_ack(&mut c, "ev", "one").await;
    c.until_result("ev").await;
    let evicted = c
        .recv_until(|f| f["message_type"] == "status" && f["status"] != "idle")
        .await
        .pop()
        .unwrap();
    assert_eq!(evicted["status"], "evicted");
    let ack2 = chat_ack(&mut c, "ev", "two").await;
    assert_eq!(ack2["session_id"], ack["session_id"]);
    let frames = c.until_result("ev").await;
    assert!(frames.iter().any(|f| f["status"] == "resuming"));
    assert_eq!(reply_text(&frames), "Echo: two (turn 2)");
    let init = frames
        .iter()
        .find(|f| f["message_type"] == "system")
        .unwrap();
    assert_eq!(
        init["message"]["session_id"], ack["session_id"],
        "resumed with the reported id"
    );
}

/// A SIGTERM the moment the server has printed its address is a graceful shutdown (exit 0),
/// not the default kill: the handler is in place before the address is printed.
#[tokio::test]
async fn sigterm_right_after_start_is_graceful() {
    for _ in 0..10 {
        let mut server = TestServer::start().await;
        let status = server.terminate().await;
        assert!(status.success(), "graceful shutdown exits 0: {status:?}");
    }
}

/// A restart on the same data dir resumes with the same session_id, continues seq, and keeps
/// the agent's memory; SIGTERM exits 0 and closes sockets with 1001.
#[tokio::test]
async fn restart_resumes_and_continues_seq() {
    let mut server = TestServer::start().await;
    let mut c = server.client().await;
    let ack = chat_ack(&mut c, "rs", "before").await;
    let before = c.until_result("rs").await;
    let last = *seqs(&before).last().unwrap();
    let status = server.terminate().await;
    assert!(status.success(), "graceful shutdown exits 0: {status:?}");
    assert_eq!(c.expect_close().await, 1001);

    let server2 = TestServer::start_in(&server.data_dir, &["--demo-delay-ms", "0"], &[]).await;
    let mut c = server2.client().await;
    let ack2 = chat_ack(&mut c, "rs", "after").await;
    assert_eq!(ack2["session_id"], ack["session_id"]);
    assert_eq!(ack2["seq"].as_i64().unwrap(), last + 1);
    let after = c.until_result("rs").await;
    assert_eq!(reply_text(&after), "Echo: after (turn 2)");
    let init = after
        .iter()
        .find(|f| f["message_type"] == "system")
        .unwrap();
    assert_eq!(init["message"]["session_id"], ack["session_id"]);
    assert_ne!(
        init["message"]["session_id"], "rs",
        "never resumed with the agent_id"
    );
}

/// After kill -9 mid-turn every frame a client had received is in the store, the unfinished
/// turn is closed with a server_restart result, and the conversation goes on.
#[tokio::test]
async fn kill9_mid_turn_loses_no_received_frame() {
    let gates = Gates::new("");
    let mut server = gates.start().await;
    gates.open("k9", 1);
    let mut c = server.client().await;
    chat_ack(&mut c, "k9", "done turn").await;
    let mut received = c.until_result("k9").await;
    chat_ack(
        &mut c,
        "k9",
        "a long turn that will never finish because the server dies",
    )
    .await;
    // Its first word is out; the turn waits at its gate, which never opens.
    received.extend(
        c.recv_until(|f| f["message"]["event"]["type"] == "content_block_delta")
            .await,
    );
    server.kill9().await;

    let mut server2 = TestServer::start_in(&server.data_dir, &["--demo-delay-ms", "0"], &[]).await;
    let mut c = server2.client().await;
    c.send(json!({"type": "subscribe", "agent_id": "k9"})).await;
    let replay = c.until_result("k9").await;
    let replay = [replay, c.until_result("k9").await].concat();
    for frame in received
        .iter()
        .filter(|f| f["seq"].is_i64() && f["message_type"] != "ack")
    {
        assert!(replay.contains(frame), "lost after kill -9: {frame}");
    }
    let closing = replay.last().unwrap();
    assert_eq!(closing["message"]["terminal_reason"], "server_restart");
    let seqs = seqs(&replay);
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
    chat_ack(&mut c, "k9", "next").await;
    assert_eq!(
        reply_text(&c.until_result("k9").await),
        "Echo: next (turn 3)"
    );
    assert!(server2.terminate().await.success());
    if let Some(check) = server2.integrity().await {
        assert_eq!(check, "ok");
    }
}

/// Every socket the server accepts has `TCP_NODELAY` set, or each small frame written while
/// another is unacknowledged waits for the client's delayed ACK. Checked on the server's own
/// descriptor, taken from the running process with `pidfd_getfd`.
#[tokio::test]
async fn accepted_sockets_have_nodelay() {
    let server = TestServer::start().await;
    let client = std::net::TcpStream::connect(&server.addr).unwrap();
    let ours = client.local_addr().unwrap();
    let pid = server.child.id().unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    let nodelay = loop {
        if let Some(value) = peer_nodelay(pid, ours) {
            break value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server never accepted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(nodelay, "TCP_NODELAY on the accepted socket");
}

/// Whether the socket in process `pid` whose peer is `peer` has `TCP_NODELAY`; `None` while
/// there is no such socket.
fn peer_nodelay(pid: u32, peer: std::net::SocketAddr) -> Option<bool> {
    use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags, pidfd_getfd, pidfd_open};
    let raw = i32::try_from(pid).ok().and_then(Pid::from_raw).unwrap();
    let pidfd = pidfd_open(raw, PidfdFlags::empty()).expect("pidfd_open");
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if !target.to_string_lossy().starts_with("socket:") {
            continue;
        }
        let Ok(remote) = entry.file_name().to_string_lossy().parse() else {
            continue;
        };
        let Ok(fd) = pidfd_getfd(&pidfd, remote, PidfdGetfdFlags::empty()) else {
            continue;
        };
        let address = rustix::net::getpeername(&fd).ok().flatten();
        if address.and_then(|a| std::net::SocketAddr::try_from(a).ok()) != Some(peer) {
            continue;
        }
        return Some(rustix::net::sockopt::tcp_nodelay(&fd).expect("getsockopt"));
    }
    None
}

/// A graceful shutdown ends the running turn and the queued one with results that say so,
/// and sockets get those results before the 1001 close; nothing is left for the next start to
/// close.
#[tokio::test]
async fn shutdown_ends_turns_with_server_shutdown_before_closing() {
    let server = InProcess::start("[demo]\ndelay_ms = 50\n").await;
    let data_dir = server.data_dir.clone();
    let mut c = server.client().await;
    chat_ack(&mut c, "sd", &"word ".repeat(200)).await;
    let queued = chat_ack(&mut c, "sd", "queued").await;
    assert_eq!(queued["queue_position"], 1);
    c.recv_until(|f| f["message_type"] == "stream_event").await;
    let stopping = tokio::spawn(server.shutdown());
    let mut results = Vec::new();
    let code = loop {
        match tokio::time::timeout(WAIT, c.ws.next())
            .await
            .expect("a frame in time")
        {
            Some(Ok(Message::Text(text))) => {
                let frame: Value = serde_json::from_str(&text).unwrap();
                if frame["message_type"] == "result" {
                    results.push(frame);
                }
            }
            Some(Ok(Message::Close(Some(frame)))) => break u16::from(frame.code),
            other => panic!("expected frames then a close, got {other:?}"),
        }
    };
    assert_eq!(code, 1001);
    let reasons: Vec<&Value> = results
        .iter()
        .map(|r| &r["message"]["terminal_reason"])
        .collect();
    assert_eq!(
        reasons,
        ["server_shutdown", "server_shutdown"],
        "{results:?}"
    );
    let _data = stopping.await.unwrap();

    // The next start has nothing to close: every acked turn has its result.
    let db = open_db(&data_dir).await;
    let restarts: i64 = sqlx::query_scalar(
        "select count(*) from messages where message_type = 'result' and payload like '%server_restart%'",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    let (prompts, results): (i64, i64) =
        sqlx::query_as("select prompt_count, result_count from session_info")
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!((restarts, prompts, results), (0, 2, 2));
}

/// Application pings and WebSocket pings each keep a socket open past the idle timeout; once
/// the client falls silent, the socket is closed with 1000.
#[tokio::test]
async fn pings_keep_a_socket_from_the_idle_timeout() {
    let (_dir, cfg) = config_file("[socket]\nidle_timeout_secs = 2\n");
    let server = TestServer::start_with(&["--config", &cfg]).await;
    let mut c = server.client().await;
    let pause = std::time::Duration::from_millis(200);
    // 5 s of application pings, each answered, then 5 s of WebSocket pings only.
    for n in 0..25 {
        c.send(json!({"type": "ping", "ts": n})).await;
        assert_eq!(
            c.recv().await["ts"],
            n,
            "the socket is open after {n} pings"
        );
        tokio::time::sleep(pause).await;
    }
    for _ in 0..25 {
        c.send_raw(Message::Ping(b"still here".to_vec().into()))
            .await;
        tokio::time::sleep(pause).await;
    }
    c.send(json!({"type": "ping", "ts": "last"})).await;
    let pong = c.recv_until(|f| f["message_type"] == "pong").await;
    assert_eq!(pong.last().unwrap()["ts"], "last");
    assert_eq!(c.expect_close().await, 1000);
}

/// After `unsubscribe` a socket gets nothing more of a conversation; a later `subscribe` from
/// the last seq it saw gives it exactly what it missed.
#[tokio::test]
async fn unsubscribe_stops_following() {
    let server = TestServer::start().await;
    let mut a = server.client().await;
    let mut b = server.client().await;
    chat_ack(&mut a, "u", "first").await;
    let first = a.until_result("u").await;
    a.recv_until(|f| f["agent_id"] == "u" && f["status"] == "idle")
        .await;
    a.send(json!({"type": "unsubscribe", "agent_id": "u"}))
        .await;
    assert_eq!(a.before_pong().await, Vec::<Value>::new());

    chat_ack(&mut b, "u", "second").await;
    let second = b.until_result("u").await;
    assert_eq!(reply_text(&second), "Echo: second (turn 2)");
    // Every frame of that turn was published before b got its result; a socket still
    // following would have them in its queue. Several round trips give it every chance.
    for _ in 0..20 {
        let got = a.before_pong().await;
        assert!(got.is_empty(), "an unsubscribed socket got {got:?}");
    }
    a.send(
        json!({"type": "subscribe", "agent_id": "u", "since_seq": *seqs(&first).last().unwrap()}),
    )
    .await;
    let missed = a.until_result("u").await;
    assert_eq!(seqs(&missed), seqs(&second));
    assert_eq!(reply_text(&missed), "Echo: second (turn 2)");
}

/// `subscribe` to a dormant conversation (evicted, or after a restart) replays its history and
/// starts no agent: it stays dormant, and no agent is created or resumed.
#[tokio::test]
async fn subscribe_to_a_dormant_conversation_starts_no_agent() {
    let (_dir, cfg) = config_file("[session]\nidle_evict_secs = 1\n");
    let mut server = TestServer::start_with(&["--config", &cfg, "--demo-delay-ms", "0"]).await;
    let rest = crate::rest::Rest::new(&server);
    let mut c = server.client().await;
    chat_ack(&mut c, "d", "hello").await;
    let turn = c.until_result("d").await;
    c.recv_until(|f| f["status"] == "evicted").await;
    let (_, before) = rest.get("/api/sessions/d").await;
    assert_eq!(before["live"], false);

    let check = |server: &TestServer| {
        let addr = server.addr.clone();
        let rest = crate::rest::Rest::new(server);
        let turn = turn.clone();
        async move {
            let mut s = Client::connect(&addr).await;
            s.send(json!({"type": "subscribe", "agent_id": "d", "since_seq": 0}))
                .await;
            let mut got = s.until_result("d").await;
            got.extend(s.before_pong().await);
            let stored: Vec<&Value> = turn.iter().filter(|f| f["seq"].is_i64()).collect();
            let replayed: Vec<&Value> = got.iter().collect();
            assert_eq!(replayed, stored, "the history and nothing else");
            let (_, now) = rest.get("/api/sessions/d").await;
            assert_eq!(now["live"], false, "{now}");
            let metrics = crate::metrics::http_get(&addr, "/metrics").await;
            let count = |family: &str| -> f64 {
                metrics
                    .lines()
                    .find_map(|l| l.strip_prefix(&format!("{family} ")))
                    .unwrap_or_else(|| panic!("no {family}"))
                    .parse()
                    .unwrap()
            };
            (
                count("agentmux_agent_spawns_total"),
                count("agentmux_agent_resumes_total"),
            )
        }
    };
    // The one spawn is the first chat's.
    assert_eq!(check(&server).await, (1.0, 0.0));

    assert!(server.terminate().await.success());
    let server = TestServer::start_in(&server.data_dir, &["--demo-delay-ms", "0"], &[]).await;
    assert_eq!(check(&server).await, (0.0, 0.0));
}

/// An agent that can't be started: the chat is acked (its message is stored), then the turn
/// fails with a `backend_unavailable` error and a stored error result saying why; the socket
/// and other conversations carry on.
#[tokio::test]
async fn an_agent_that_cannot_start_is_backend_unavailable() {
    // The CLI is there at start (a missing one is refused then) and gone by the first chat.
    let dir = tempfile::tempdir().unwrap();
    let claude = dir.path().join("claude");
    std::fs::copy("/bin/true", &claude).unwrap();
    let server = TestServer::start_with(&[
        "--backend",
        "claude",
        "--claude-bin",
        claude.to_str().unwrap(),
    ])
    .await;
    std::fs::remove_file(&claude).unwrap();
    let mut c = server.client().await;
    let ack = chat_ack(&mut c, "nb", "hello").await;
    assert_eq!(ack["message_type"], "ack", "{ack}");
    let frames = c.until_result("nb").await;
    let errors: Vec<&Value> = frames
        .iter()
        .filter(|f| f["message_type"] == "error")
        .collect();
    assert_eq!(errors.len(), 1, "{frames:?}");
    assert_eq!(errors[0]["code"], "backend_unavailable");
    assert_eq!(errors[0]["agent_id"], "nb");
    let result = frames.last().unwrap();
    assert_eq!(result["seq"], ack["seq"].as_i64().unwrap() + 1);
    assert_eq!(result["message"]["is_error"], true);
    assert_eq!(result["message"]["terminal_reason"], "backend_unavailable");
    let (status, stored) = crate::rest::Rest::new(&server)
        .get("/api/sessions/nb/messages")
        .await;
    assert_eq!(status, 200);
    let types: Vec<&str> = stored["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["message_type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["user", "result"]);
    assert_eq!(stored["messages"][1], *result);
    c.send(json!({"type": "ping", "ts": 1})).await;
    assert_eq!(c.recv_until(|f| f["message_type"] == "pong").await.len(), 1);
}

/// The same with a cap of 4 agent processes for 20 conversations, on the fake CLI and on the
/// fake ACP agent: processes are evicted and resumed between turns, and still every turn runs
/// exactly once (a turn that ended in the same batch as its agent's release was once run a
/// second time on the next agent).
#[tokio::test]
async fn interleaved_turns_under_a_small_process_cap_run_once_each() {
    let fx = crate::claude::Fixture::new("[agent]\nmax_live_processes = 4\n");
    interleaved(fx.start(&[]).await, acp_reply).await;
    let setup = crate::acp::AcpSetup::with_config(&[], "[agent]\nmax_live_processes = 4\n");
    interleaved(setup.start_as_default().await, acp_reply).await;
}
