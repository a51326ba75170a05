//! Each configured limit answers with its typed error and leaves other sessions and sockets
//! alone.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use crate::common::*;
use crate::security::{TOKENS, connect_as, connect_with, refusal, server_with};

/// Chats `turns` times on `agent_id` and checks every reply is complete and in order.
async fn converse(c: &mut Client, agent_id: &str, turns: usize) {
    let mut last_seq = 0;
    for turn in 1..=turns {
        let content = format!("{agent_id} message {turn}");
        let ack = chat_ack(c, agent_id, &content).await;
        assert_eq!(ack["message_type"], "ack", "{ack}");
        let frames = c.until_result(agent_id).await;
        assert_eq!(
            reply_text(&frames),
            format!("Echo: {content} (turn {turn})")
        );
        let seqs = seqs(&frames);
        assert_eq!(seqs.first(), Some(&(last_seq + 1)));
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
        last_seq = *seqs.last().unwrap();
    }
}

/// A socket flooding 10,000 garbage frames gets typed errors, then `rate_limited`, then is
/// closed with 1008, while other sockets' conversations run complete and in order.
#[tokio::test]
async fn a_flooding_socket_is_rate_limited_and_closed_while_others_carry_on() {
    let (server, _cfg) =
        server_with("[socket]\nmax_frames_per_sec = 50\nmax_rate_limited = 20\n").await;
    let flooder = server.client().await;
    let (mut sink, mut stream) = flooder.ws.split();
    let flood = tokio::spawn(async move {
        for i in 0..10_000 {
            let garbage = Message::text(format!("garbage {i} {{"));
            if sink.feed(garbage).await.is_err() {
                return;
            }
            if i % 100 == 99 && sink.flush().await.is_err() {
                return;
            }
        }
        let _ = sink.flush().await;
    });
    let watch = tokio::spawn(async move {
        let (mut bad_frame, mut rate_limited) = (0, 0);
        loop {
            match tokio::time::timeout(WAIT, stream.next())
                .await
                .expect("frames in time")
            {
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(t.as_str()).unwrap();
                    match v["code"].as_str() {
                        Some("bad_frame") => bad_frame += 1,
                        Some("rate_limited") => rate_limited += 1,
                        other => panic!("unexpected frame {other:?}"),
                    }
                }
                Some(Ok(Message::Close(Some(close)))) => {
                    return (bad_frame, rate_limited, u16::from(close.code));
                }
                Some(Ok(_)) => {}
                other => panic!("socket ended without a close frame: {other:?}"),
            }
        }
    });
    let mut others = Vec::new();
    for n in 0..3 {
        let mut c = server.client().await;
        others.push(tokio::spawn(async move {
            converse(&mut c, &format!("calm-{n}"), 5).await;
        }));
    }
    let (bad_frame, rate_limited, code) = watch.await.unwrap();
    assert!(
        bad_frame >= 50,
        "the first second's worth is decoded: {bad_frame}"
    );
    // `max_rate_limited` refused frames are answered; the next one closes the socket.
    assert_eq!(rate_limited, 20);
    assert_eq!(code, 1008);
    for other in others {
        other.await.unwrap();
    }
    flood.await.unwrap();
}

/// A message is limited as a whole, not only per frame: a 100 KB chat sent in 3 KB fragments
/// (each under the 4 KB `max_frame_bytes`) closes the socket with 1009 before anything is
/// stored; another socket's conversation is unaffected.
#[tokio::test]
async fn a_message_in_many_small_fragments_is_limited_as_a_whole() {
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    let (server, _cfg) = server_with("[socket]\nmax_frame_bytes = 4096\n").await;
    let mut other = server.client().await;
    let mut c = server.client().await;
    let chat = json!({"type": "chat", "agent_id": "big", "content": "z".repeat(100_000)})
        .to_string()
        .into_bytes();
    let pieces: Vec<&[u8]> = chat.chunks(3000).collect();
    assert_eq!(pieces.len(), 34);
    for (i, piece) in pieces.iter().enumerate() {
        let opcode = match i {
            0 => OpCode::Data(Data::Text),
            _ => OpCode::Data(Data::Continue),
        };
        let frame = Frame::message(piece.to_vec(), opcode, i + 1 == pieces.len());
        // The server may close mid-message: later fragments then fail to send.
        if c.ws.send(Message::Frame(frame)).await.is_err() {
            break;
        }
    }
    assert_eq!(c.expect_close().await, 1009);
    converse(&mut other, "fine", 1).await;
    // Nothing of it was stored.
    let unknown = crate::security::http(&server.addr, "GET", "/api/sessions/big", None, None).await;
    assert_eq!(unknown.status, 404, "{unknown:?}");
}

/// Live conversations are capped per principal and in total with `limit_exceeded`; live ones
/// keep working, and an evicted one frees its place.
#[tokio::test]
async fn live_conversations_are_capped_per_principal_and_in_total() {
    let (server, _cfg) = server_with(&format!(
        "{TOKENS}\"tok-carol\" = \"carol\"\n\n[session]\nmax_live_per_principal = 2\nmax_live_total = 3\nidle_evict_secs = 2\n"
    ))
    .await;
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    converse(&mut alice, "a1", 1).await;
    converse(&mut alice, "a2", 1).await;
    let refused = chat_ack(&mut alice, "a3", "one too many").await;
    assert_eq!(refused["code"], "limit_exceeded");
    assert_eq!(refused["agent_id"], "a3");
    // Refused: nothing was created or stored.
    let unknown = crate::security::http(
        &server.addr,
        "GET",
        "/api/sessions/a3",
        Some("tok-alice"),
        None,
    )
    .await;
    assert_eq!(unknown.status, 404, "{unknown:?}");

    let mut bob = connect_as(&server.addr, "tok-bob").await;
    converse(&mut bob, "b1", 1).await;
    let mut carol = connect_as(&server.addr, "tok-carol").await;
    let refused = chat_ack(&mut carol, "c1", "server is full").await;
    assert_eq!(refused["code"], "limit_exceeded");
    let listed = crate::security::http(
        &server.addr,
        "GET",
        "/api/sessions?total=true",
        Some("tok-carol"),
        None,
    )
    .await;
    assert_eq!(
        serde_json::from_str::<Value>(&listed.body).unwrap()["total"],
        0
    );

    // The live ones are unaffected.
    chat_ack(&mut alice, "a1", "still here").await;
    assert_eq!(
        reply_text(&alice.until_result("a1").await),
        "Echo: still here (turn 2)"
    );
    // Once alice's conversations are evicted, she may start another.
    let mut evicted = 0;
    while evicted < 2 {
        let f = alice.recv().await;
        if f["message_type"] == "status" && f["status"] == "evicted" {
            evicted += 1;
        }
    }
    converse(&mut alice, "a3", 1).await;
}

/// Sockets are capped per principal with 429 `limit_exceeded` before the upgrade; other
/// principals are unaffected and a closed socket frees its place.
#[tokio::test]
async fn sockets_are_capped_per_principal() {
    let (server, _cfg) = server_with(&format!("{TOKENS}\n[socket]\nmax_per_principal = 2\n")).await;
    let bearer = |t: &str| format!("Bearer {t}");
    let mut first = connect_as(&server.addr, "tok-alice").await;
    let _second = connect_as(&server.addr, "tok-alice").await;
    let (status, body) =
        refusal(connect_with(&server.addr, "", &[("authorization", &bearer("tok-alice"))]).await);
    assert_eq!(status, 429);
    assert_eq!(body["code"], "limit_exceeded");
    let mut bob = connect_as(&server.addr, "tok-bob").await;
    converse(&mut bob, "b", 1).await;

    first.ws.close(None).await.unwrap();
    while first.ws.next().await.is_some() {}
    // The server notices the close on its own schedule; retry until the place is free.
    let mut again = None;
    for _ in 0..100 {
        if let Ok((c, _)) =
            connect_with(&server.addr, "", &[("authorization", &bearer("tok-alice"))]).await
        {
            again = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    converse(&mut again.expect("a place frees up"), "a", 1).await;
}

/// Turns queued behind a running one (held at its gate) are capped with `limit_exceeded`; the
/// queued ones run, and the refused one is neither stored nor run.
#[tokio::test]
async fn queued_turns_are_capped() {
    let gates = Gates::new("[session]\nmax_queued_turns = 2\n");
    let mut server = gates.start().await;
    gates.open_all("q", 2..=4);
    let mut c = server.client().await;
    for n in 0..4 {
        c.send(json!({"type": "chat", "agent_id": "q", "content": format!("m{n}"), "client_msg_id": format!("c{n}")}))
            .await;
    }
    let frames = c.recv_until(|v| v["message_type"] == "error").await;
    let err = frames.last().unwrap();
    assert_eq!(err["code"], "limit_exceeded");
    assert_eq!(err["client_msg_id"], "c3");
    let acks: Vec<_> = frames
        .iter()
        .filter(|f| f["message_type"] == "ack")
        .map(|f| f["queue_position"].as_u64().unwrap())
        .collect();
    assert_eq!(acks, vec![0, 1, 2]);
    gates.open("q", 1);
    // The conversation goes idle after three turns: a fourth would have started instead.
    let frames = c
        .recv_until(|f| f["agent_id"] == "q" && f["status"] == "idle")
        .await;
    let results: Vec<&str> = frames
        .iter()
        .filter(|f| f["message_type"] == "result")
        .map(|f| f["message"]["result"].as_str().unwrap())
        .collect();
    assert_eq!(
        results,
        [
            "Echo: m0 (turn 1)",
            "Echo: m1 (turn 2)",
            "Echo: m2 (turn 3)"
        ]
    );
    let db = server.stop_and_open_db().await;
    let stored: Vec<String> =
        sqlx::query_scalar("select payload from messages where prompt order by seq")
            .fetch_all(&db)
            .await
            .unwrap();
    let stored: Vec<String> = stored
        .iter()
        .map(|p| crate::common::prompt_text(p))
        .collect();
    assert_eq!(stored, ["m0", "m1", "m2"]);
    let (prompts, results): (i64, i64) =
        sqlx::query_as("select prompt_count, result_count from session_info where agent_id = 'q'")
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!((prompts, results), (3, 3));
}

/// A connection that never completes its request head is dropped after the handshake
/// timeout, while a prompt client still gets through.
#[tokio::test]
async fn a_stalled_handshake_is_dropped() {
    let (server, _cfg) = server_with("[socket]\nhandshake_timeout_secs = 1\n").await;
    let mut stalled = TcpStream::connect(&server.addr).await.unwrap();
    stalled
        .write_all(b"GET /ws HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(WAIT, stalled.read_to_end(&mut answer))
        .await
        .expect("the server drops the connection");
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    let mut c = server.client().await;
    converse(&mut c, "prompt", 1).await;
}

/// Rewinding a dormant conversation needs no live place: with the principal at
/// `session.max_live_per_principal`, a dormant conversation is still rewound (over REST and
/// over the socket), while chatting to it is refused; its agent forgets the dropped turns.
#[tokio::test]
async fn a_dormant_conversation_rewinds_at_the_live_limit() {
    let (_cfg_dir, cfg) = config_file("[session]\nmax_live_per_principal = 1\n");
    let data = tempfile::tempdir().unwrap();
    let args = ["--config", cfg.as_str(), "--demo-delay-ms", "0"];
    let mut server = TestServer::start_in(data.path(), &args, &[]).await;
    let mut c = server.client().await;
    chat_ack(&mut c, "old", "one").await;
    let first = c.until_result("old").await.last().unwrap()["seq"]
        .as_i64()
        .unwrap();
    chat_ack(&mut c, "old", "two").await;
    c.until_result("old").await;
    chat_ack(&mut c, "old", "three").await;
    let third = c.until_result("old").await;
    assert_eq!(reply_text(&third), "Echo: three (turn 3)");
    let second = third.last().unwrap()["seq"].as_i64().unwrap() - 4;
    assert!(server.terminate().await.success());

    // "old" is dormant after the restart; "new" takes the principal's only live place.
    let server = TestServer::start_in(data.path(), &args, &[]).await;
    let rest = crate::rest::Rest::new(&server);
    let mut c = server.client().await;
    chat_ack(&mut c, "new", "hello").await;
    c.until_result("new").await;
    let refused = chat_ack(&mut c, "old", "not now").await;
    assert_eq!(refused["code"], "limit_exceeded");

    let (status, rewound) = rest
        .post("/api/sessions/old/rewind", json!({"to_seq": second}))
        .await;
    assert_eq!(status, 200, "{rewound}");
    assert_eq!(rewound["status"], "rewound");
    assert_eq!(rewound["dropped_after_seq"], second);
    c.send(json!({"type": "rewind", "agent_id": "old", "to_seq": first}))
        .await;
    let answer = c
        .recv_until(|v| v["agent_id"] == "old" && v["message_type"] != "ack")
        .await;
    let answer = answer.last().unwrap();
    assert_eq!(
        (&answer["status"], &answer["dropped_after_seq"]),
        (&json!("rewound"), &json!(first)),
        "{answer}"
    );
    let (_, old) = rest.get("/api/sessions/old").await;
    assert_eq!(old["turn_count"], 1);
    assert_eq!(old["status"], "dormant");
    drop(c);
    drop(server);

    // Its agent forgot turns 2 and 3.
    let server = TestServer::start_in(data.path(), &args, &[]).await;
    let mut c = server.client().await;
    chat_ack(&mut c, "old", "again").await;
    assert_eq!(
        reply_text(&c.until_result("old").await),
        "Echo: again (turn 2)"
    );
}
