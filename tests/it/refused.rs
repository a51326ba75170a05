//! Refused work costs nothing: chats refused by a limit and subscriptions beyond a socket's
//! cap leave no memory and no conversation slot behind. Also the helpers of `bodies` and
//! `imports` (memory and descriptors of the server process, raw HTTP).

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::common::*;
use crate::security::server_with;

/// The bound a user would expect refused work to stay within.
const MIB: u64 = 1024;

pub fn pid(server: &TestServer) -> u32 {
    server.child.id().expect("server running")
}

/// Resident memory of the server, in KiB (`VmRSS` of `/proc/<pid>/status`).
pub fn rss_kib(server: &TestServer) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid(server))).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

/// Open file descriptors of the server, but for its store's own files: each connection of the
/// store's pools and readers holds the database and its WAL open, and their number grows with
/// concurrent use, up to the pools' limits, and stays.
pub fn fds(server: &TestServer) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", pid(server)))
        .unwrap()
        .flatten()
        .filter(|fd| {
            std::fs::read_link(fd.path()).map_or(true, |target| {
                !target
                    .file_name()
                    .is_some_and(|n| n == "agentmux.db" || n == "agentmux.db-wal")
            })
        })
        .count()
}

/// Waits (at most `WAIT`) until `pred` holds for the server's descriptor count; returns it.
pub async fn fds_settle(server: &TestServer, pred: impl Fn(usize) -> bool) -> usize {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let n = fds(server);
        if pred(n) || tokio::time::Instant::now() > deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An export of `n` messages (user and assistant in turn), one line each.
pub fn export_of(n: usize) -> String {
    let mut out = String::with_capacity(n * 120);
    for i in 1..=n {
        let line = if i % 2 == 1 {
            json!({"seq": i, "message_type": "user",
                   "payload": {"type": "user", "message": {"role": "user", "content": format!("question {i}")}}})
        } else {
            json!({"seq": i, "message_type": "assistant",
                   "payload": {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": format!("answer {i}")}]}}})
        };
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out
}

/// Sends `frames` over `c` in batches, each followed by a ping, and returns the error codes
/// that came back.
async fn send_all(c: &mut Client, frames: impl Iterator<Item = Value>) -> Vec<String> {
    let frames: Vec<Value> = frames.collect();
    let mut codes = Vec::new();
    for (b, batch) in frames.chunks(500).enumerate() {
        for f in batch {
            c.send(f.clone()).await;
        }
        c.send(json!({"type": "ping", "ts": b})).await;
        for f in c
            .recv_until(|v| v["message_type"] == "pong" && v["ts"] == b)
            .await
        {
            if let Some(code) = f["code"].as_str() {
                codes.push(code.to_owned());
            }
        }
    }
    codes
}

/// 10,000 chats refused by the live-conversation limit leave the server's memory where it
/// was and leave no conversation slot behind.
#[tokio::test]
async fn refused_chats_cost_no_memory() {
    let (server, _cfg) =
        server_with("[socket]\nmax_frames_per_sec = 0\n\n[session]\nmax_live_total = 1\n").await;
    let mut c = server.client().await;
    chat_ack(&mut c, "the-one", "hello").await;
    c.until_result("the-one").await;
    // Warm up the allocator and the socket's buffers.
    let warm = send_all(
        &mut c,
        (0..500).map(|i| json!({"type": "chat", "agent_id": format!("warm-{i}"), "content": "hi"})),
    )
    .await;
    assert_eq!(warm.len(), 500);
    let before = rss_kib(&server);
    let codes = send_all(
        &mut c,
        (0..10_000)
            .map(|i| json!({"type": "chat", "agent_id": format!("refused-{i}"), "content": "hi"})),
    )
    .await;
    let after = rss_kib(&server);
    assert_eq!(codes.len(), 10_000);
    assert!(codes.iter().all(|c| c == "limit_exceeded"), "{codes:?}");
    eprintln!("refused chats: VmRSS {before} KiB -> {after} KiB");
    assert!(
        after < before + 50 * MIB,
        "10,000 refused chats took VmRSS from {before} KiB to {after} KiB"
    );
    assert_eq!(
        metric(&server, "agentmux_session_slots").await,
        1,
        "only the live conversation has a slot"
    );
    // The live one carries on.
    chat_ack(&mut c, "the-one", "still here").await;
    assert_eq!(
        reply_text(&c.until_result("the-one").await),
        "Echo: still here (turn 2)"
    );
}

/// Subscriptions are capped per socket (`socket.max_subscriptions`, 1,000 by default) with
/// `limit_exceeded`, and 10,000 subscribe frames on one socket leave memory where it was.
#[tokio::test]
async fn subscriptions_are_capped_per_socket_and_cost_little() {
    let (mut server, _cfg) = server_with("[socket]\nmax_frames_per_sec = 0\n").await;
    // 10,000 stored conversations, written straight into the database.
    let db = server.stop_and_open_db().await;
    let mut tx = db.begin().await.unwrap();
    for i in 0..10_000 {
        sqlx::query(
            "insert into session_info (principal, agent_id, session_id, backend, cwd, created_at, last_active_at)
             values ('local', $1, $2, 'demo', '/tmp/none', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')",
        )
        .bind(format!("s-{i}"))
        .bind(uuid::Uuid::new_v4().to_string())
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    db.close().await;
    server.restart().await;
    let mut c = server.client().await;
    let before = rss_kib(&server);
    let codes = send_all(
        &mut c,
        (0..10_000).map(|i| json!({"type": "subscribe", "agent_id": format!("s-{i}")})),
    )
    .await;
    let after = rss_kib(&server);
    eprintln!("subscriptions: VmRSS {before} KiB -> {after} KiB");
    assert_eq!(codes.len(), 9_000, "all but the first 1,000 are refused");
    assert!(codes.iter().all(|c| c == "limit_exceeded"), "{codes:?}");
    assert!(
        after < before + 50 * MIB,
        "10,000 subscribe frames took VmRSS from {before} KiB to {after} KiB"
    );
    // Unsubscribing makes room again.
    let codes = send_all(
        &mut c,
        [
            json!({"type": "unsubscribe", "agent_id": "s-0"}),
            json!({"type": "subscribe", "agent_id": "s-9999"}),
            json!({"type": "subscribe", "agent_id": "s-9998"}),
        ]
        .into_iter(),
    )
    .await;
    assert_eq!(codes, vec!["limit_exceeded"]);
}

/// The head of a request with a JSON Lines body of `len` bytes, as alice.
pub fn import_head(addr: &str, agent_id: &str, token: &str, len: usize) -> String {
    format!(
        "POST /api/sessions/import?agent_id={agent_id} HTTP/1.1\r\nHost: {addr}\r\n\
         Authorization: Bearer {token}\r\nContent-Type: application/x-ndjson\r\n\
         Content-Length: {len}\r\n\r\n"
    )
}

/// Reads an HTTP response's status line (and whatever came with it) within `WAIT`.
pub async fn status_of(stream: &mut TcpStream) -> Option<u16> {
    let mut buf = vec![0u8; 4096];
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while !got.windows(2).any(|w| w == b"\r\n") {
        let n = tokio::time::timeout_at(deadline, stream.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got)
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
}
