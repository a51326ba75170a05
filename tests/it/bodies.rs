//! Request bodies and event streams count against their principal's connection limit, and
//! end when they stall: a body at its deadline (however steadily it trickles), an event stream
//! at the idle timeout.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::*;
use crate::refused::{fds, fds_settle, import_head, status_of};
use crate::security::{TOKENS, connect_as, server_with};

/// 200 request bodies that stall after a few bytes: all but the principal's
/// `socket.max_per_principal` are refused with 429 at once, the admitted ones are dropped at
/// their read deadline, every descriptor is given back, and another principal is unaffected
/// meanwhile.
#[tokio::test]
async fn stalled_bodies_are_capped_per_principal_and_dropped_at_their_deadline() {
    let (mut server, _cfg) = server_with(&format!(
        "{TOKENS}\n[socket]\nmax_per_principal = 4\nbody_timeout_secs = 2\n\n[session]\nmax_transfers_per_principal = 0\n"
    ))
    .await;
    // Bob's socket and the store's connections are open before counting.
    let mut bob = connect_as(&server.addr, "tok-bob").await;
    assert_eq!(
        chat_ack(&mut bob, "b", "hello").await["message_type"],
        "ack"
    );
    bob.until_result("b").await;
    let baseline = fds(&server);
    let mut stalled = Vec::new();
    for i in 0..200 {
        let mut s = TcpStream::connect(&server.addr).await.unwrap();
        let head = import_head(&server.addr, &format!("s{i}"), "tok-alice", (64 << 20) - 1);
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(b"{\"seq\": 1, \"message_type\": \"user\", ")
            .await
            .unwrap();
        stalled.push(s);
    }
    // Bob is not held up by alice's stalled bodies.
    assert_eq!(
        chat_ack(&mut bob, "b", "again").await["message_type"],
        "ack"
    );
    let statuses = futures_util::future::join_all(stalled.iter_mut().map(status_of)).await;
    let refused = statuses.iter().filter(|s| **s == Some(429)).count();
    let timed_out = statuses.iter().filter(|s| **s == Some(400)).count();
    assert_eq!(refused, 196, "{statuses:?}");
    assert_eq!(timed_out, 4, "{statuses:?}");
    drop(stalled);
    let after = fds_settle(&server, |n| n <= baseline + 2).await;
    eprintln!("stalled bodies: descriptors {baseline} -> {after}");
    assert!(after <= baseline + 2, "descriptors {baseline} -> {after}");
    // Nothing of the abandoned imports is left.
    let db = server.stop_and_open_db().await;
    let left: i64 =
        sqlx::query_scalar("select count(*) from session_info where agent_id like 's%'")
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!(left, 0);
}

/// A body that keeps trickling in, a byte well within `socket.body_timeout_secs` of the last,
/// but takes longer than that in all, is cut off at the deadline: the import is answered
/// `400 invalid_request` while the client is still sending, and leaves nothing behind.
#[tokio::test]
async fn a_trickling_body_is_cut_off_at_its_deadline() {
    let (mut server, _cfg) =
        server_with(&format!("{TOKENS}\n[socket]\nbody_timeout_secs = 2\n")).await;
    let line = json!({"seq": 1, "message_type": "user",
        "payload": {"type": "user", "message": {"role": "user", "content": "hi"}}})
    .to_string()
        + "\n";
    let stream = TcpStream::connect(&server.addr).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let head = import_head(&server.addr, "trickled", "tok-alice", line.len());
    write.write_all(head.as_bytes()).await.unwrap();
    // A byte every 200 ms: the whole line would take about 20 s.
    let sender = tokio::spawn(async move {
        let mut pace = tokio::time::interval(Duration::from_millis(200));
        for byte in line.bytes() {
            pace.tick().await;
            if write.write_all(&[byte]).await.is_err() {
                return false;
            }
        }
        true
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") || !answer.ends_with(b"}") {
        let n = tokio::time::timeout(Duration::from_secs(60), read.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.contains(r#""code":"invalid_request""#), "{answer}");
    assert!(answer.contains("body_timeout_secs"), "{answer}");
    sender.abort();
    let db = server.stop_and_open_db().await;
    let left: i64 =
        sqlx::query_scalar("select count(*) from session_info where agent_id = 'trickled'")
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!(left, 0);
}

/// Opens an event stream as `token` and returns the connection once the headers came.
pub async fn open_events(addr: &str, token: &str, agent_id: &str) -> (u16, TcpStream) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET /api/sessions/{agent_id}/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let status = status_of(&mut s).await.expect("an answer");
    (status, s)
}

/// A REST request as `token`: `(status, body)`.
pub async fn rest_as(server: &TestServer, token: &str, method: &str, path: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .request(method.parse().unwrap(), server.url(path))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(if method == "POST" {
            json!({"content": "hi"}).to_string()
        } else {
            String::new()
        })
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// Event streams count against the principal's connection limit: with two open, a third
/// request is refused with 429 while another principal is served; closing one frees its place.
#[tokio::test]
async fn event_streams_count_against_the_principal() {
    let (server, _cfg) = server_with(&format!("{TOKENS}\n[socket]\nmax_per_principal = 2\n")).await;
    let (status, _) = rest_as(&server, "tok-alice", "POST", "/api/sessions/a/messages").await;
    assert_eq!(status, 202);
    let (s1, first) = open_events(&server.addr, "tok-alice", "a").await;
    let (s2, _second) = open_events(&server.addr, "tok-alice", "a").await;
    assert_eq!((s1, s2), (200, 200));
    let (status, body) = rest_as(&server, "tok-alice", "GET", "/api/sessions").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (429, Some("limit_exceeded"))
    );
    let (s3, _) = open_events(&server.addr, "tok-alice", "a").await;
    assert_eq!(s3, 429);
    let (status, _) = rest_as(&server, "tok-bob", "GET", "/api/sessions").await;
    assert_eq!(status, 200);
    drop(first);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, _) = rest_as(&server, "tok-alice", "GET", "/api/sessions").await;
        if status == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the place frees up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An event stream that has sent nothing for `socket.idle_timeout_secs` is ended (the client
/// reconnects with `Last-Event-ID`), giving its place back.
#[tokio::test]
async fn an_idle_event_stream_is_ended() {
    let (server, _cfg) = server_with("[socket]\nidle_timeout_secs = 1\n").await;
    let mut c = server.client().await;
    chat_ack(&mut c, "quiet", "hello").await;
    c.until_result("quiet").await;
    let (status, mut stream) = open_events(&server.addr, "none", "quiet").await;
    assert_eq!(status, 200);
    let mut rest = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut rest))
        .await
        .expect("the idle stream ends")
        .unwrap();
    let text = String::from_utf8_lossy(&rest);
    assert!(
        text.ends_with("0\r\n\r\n"),
        "the stream ended cleanly: {text}"
    );
}
