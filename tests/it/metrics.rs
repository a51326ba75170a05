//! `GET /metrics` after real traffic: every family a dashboard needs is there and moved.

use std::collections::HashMap;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

use crate::common::*;

/// The body of `GET path`.
pub async fn http_get(addr: &str, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(WAIT, stream.read_to_string(&mut response))
        .await
        .expect("response in time")
        .unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// Samples of `/metrics`, keyed by name with labels (`name{label="v"}`).
async fn scrape(server: &TestServer) -> HashMap<String, f64> {
    http_get(&server.addr, "/metrics")
        .await
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (name, value) = l.rsplit_once(' ').expect("name value");
            (name.to_owned(), value.parse().expect("a number"))
        })
        .collect()
}

fn get(m: &HashMap<String, f64>, key: &str) -> f64 {
    *m.get(key)
        .unwrap_or_else(|| panic!("/metrics has no {key}"))
}

/// Two turns and a bad frame move sockets, sessions, frames in and out by type, the store's
/// commit and batch histograms, agent spawns and errors by code.
#[tokio::test]
async fn metrics_move_with_traffic() {
    let server = TestServer::start().await;
    let before = scrape(&server).await;
    assert_eq!(get(&before, "agentmux_sockets"), 0.0);
    assert_eq!(get(&before, "agentmux_stored_frames_total"), 0.0);

    let mut c = server.client().await;
    c.chat("m1", "hello there").await;
    c.until_result("m1").await;
    c.chat("m2", "hi").await;
    c.until_result("m2").await;
    c.send_raw(Message::text("not json")).await;
    let err = c.recv_until(|v| v["message_type"] == "error").await;
    assert_eq!(err.last().unwrap()["code"], "bad_frame");

    let m = scrape(&server).await;
    assert_eq!(get(&m, "agentmux_sockets"), 1.0);
    assert_eq!(get(&m, "agentmux_live_sessions"), 2.0);
    assert_eq!(get(&m, "agentmux_queued_turns"), 0.0);
    assert_eq!(get(&m, "agentmux_store_queue"), 0.0);
    assert_eq!(get(&m, r#"agentmux_frames_in_total{type="chat"}"#), 2.0);
    assert_eq!(get(&m, r#"agentmux_frames_in_total{type="invalid"}"#), 1.0);
    assert_eq!(get(&m, r#"agentmux_frames_out_total{type="ack"}"#), 2.0);
    assert_eq!(get(&m, r#"agentmux_frames_out_total{type="result"}"#), 2.0);
    assert_eq!(get(&m, r#"agentmux_frames_out_total{type="error"}"#), 1.0);
    assert_eq!(
        get(&m, r#"agentmux_frames_out_total{type="stream_event"}"#),
        15.0
    );
    // Per turn: the user message, init, assistant and result.
    assert_eq!(get(&m, "agentmux_stored_frames_total"), 8.0);
    let commits = get(&m, "agentmux_store_commit_seconds_count");
    assert!(commits >= 2.0, "{commits} commits");
    assert_eq!(
        get(&m, r#"agentmux_store_commit_seconds_bucket{le="+Inf"}"#),
        commits
    );
    assert!(get(&m, "agentmux_store_commit_seconds_sum") > 0.0);
    assert_eq!(get(&m, "agentmux_store_batch_rows_count"), commits);
    assert_eq!(get(&m, "agentmux_store_batch_rows_sum"), 8.0);
    assert_eq!(
        get(&m, r#"agentmux_store_batch_rows_bucket{le="1024"}"#),
        commits
    );
    assert_eq!(get(&m, "agentmux_agent_spawns_total"), 2.0);
    assert_eq!(get(&m, "agentmux_agent_resumes_total"), 0.0);
    assert_eq!(get(&m, "agentmux_agent_crashes_total"), 0.0);
    assert_eq!(get(&m, r#"agentmux_errors_total{code="bad_frame"}"#), 1.0);

    drop(c);
    let mut closed = scrape(&server).await;
    for _ in 0..50 {
        if get(&closed, "agentmux_sockets") == 0.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        closed = scrape(&server).await;
    }
    assert_eq!(get(&closed, "agentmux_sockets"), 0.0);
}

/// An evicted conversation that gets a new chat counts as a resume, and eviction lowers the
/// live session gauge.
#[tokio::test]
async fn metrics_count_resumes_and_evictions() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("evict.toml");
    std::fs::write(&config, "[session]\nidle_evict_secs = 0\n").unwrap();
    let server =
        TestServer::start_with(&["--demo-delay-ms", "0", "--config", config.to_str().unwrap()])
            .await;
    let mut c = server.client().await;
    c.chat("r1", "first").await;
    c.recv_until(|v| v["status"] == "evicted").await;
    c.chat("r1", "second").await;
    let frames = c.until_result("r1").await;
    assert_eq!(reply_text(&frames), "Echo: second (turn 2)");
    c.recv_until(|v| v["status"] == "evicted").await;
    let m = scrape(&server).await;
    assert_eq!(get(&m, "agentmux_agent_spawns_total"), 1.0);
    assert_eq!(get(&m, "agentmux_agent_resumes_total"), 1.0);
    assert_eq!(get(&m, "agentmux_live_sessions"), 0.0);
}
