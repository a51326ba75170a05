//! `agentmux-bench baseline` over a real socket: a chat is answered with one demo-shaped turn,
//! `subscribe` replays the stored frames byte for byte, and `ping` is answered.

use std::process::Stdio;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite::Message;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

const WAIT: Duration = Duration::from_secs(20);

/// Starts the baseline with history kept; the process and its address.
async fn start() -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentmux-bench"))
        .args(["baseline", "--keep-history", "--bind", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let addr = line
        .strip_prefix("listening on http://")
        .unwrap()
        .to_owned();
    (child, addr)
}

async fn next_text(ws: &mut Socket) -> String {
    loop {
        let msg = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a frame in time")
            .expect("the socket stays open")
            .unwrap();
        if let Message::Text(text) = msg {
            return text.as_str().to_owned();
        }
    }
}

#[tokio::test]
async fn a_chat_gets_a_demo_turn_that_subscribe_replays() {
    let (_child, addr) = start().await;
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
        .await
        .unwrap();
    let chat =
        json!({"type": "chat", "agent_id": "a-1", "content": "hello there", "client_msg_id": "c1"});
    ws.send(Message::text(chat.to_string())).await.unwrap();
    let mut frames = Vec::new();
    loop {
        let text = next_text(&mut ws).await;
        let v: Value = serde_json::from_str(&text).unwrap();
        let done = v["message_type"] == "result";
        frames.push((text, v));
        if done {
            break;
        }
    }
    let kinds: Vec<&str> = frames
        .iter()
        .map(|(_, v)| v["message_type"].as_str().unwrap())
        .collect();
    // "Echo: hello there (turn 1)" is 5 words: message_start, 5 deltas and 2 stops.
    let mut expected = vec!["user", "system"];
    expected.extend(["stream_event"; 6]);
    expected.extend(["assistant", "stream_event", "stream_event", "result"]);
    let without_ack: Vec<&str> = kinds.iter().copied().filter(|k| *k != "ack").collect();
    assert_eq!(without_ack, expected);
    let ack = &frames
        .iter()
        .find(|(_, v)| v["message_type"] == "ack")
        .unwrap()
        .1;
    assert_eq!(ack["client_msg_id"], "c1");
    assert_eq!(ack["seq"], 1);
    let stored: Vec<&(String, Value)> = frames.iter().filter(|(_, v)| v["seq"].is_i64()).collect();
    let seqs: Vec<i64> = stored
        .iter()
        .filter(|(_, v)| v["message_type"] != "ack")
        .map(|(_, v)| v["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
    assert_eq!(
        frames.last().unwrap().1["message"]["result"],
        "Echo: hello there (turn 1)"
    );

    let (mut other, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
        .await
        .unwrap();
    let subscribe = json!({"type": "subscribe", "agent_id": "a-1", "since_seq": 1});
    other
        .send(Message::text(subscribe.to_string()))
        .await
        .unwrap();
    for (text, v) in stored
        .iter()
        .filter(|(_, v)| v["message_type"] != "ack")
        .skip(1)
    {
        assert_eq!(&next_text(&mut other).await, text, "{v}");
    }
    other
        .send(Message::text(json!({"type": "ping", "ts": 42}).to_string()))
        .await
        .unwrap();
    let pong: Value = serde_json::from_str(&next_text(&mut other).await).unwrap();
    assert_eq!(pong["message_type"], "pong");
    assert_eq!(pong["ts"], 42);
}
