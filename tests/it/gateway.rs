//! The core gateway over a real socket: turns, fan-out, replay, errors, restarts.

use serde_json::json;

use crate::common::*;

/// A chat gets an ack, then the user frame, init, deltas, assistant and result, in seq order.
#[tokio::test]
async fn a_turn_streams_and_is_stored_in_order() {
    let server = TestServer::start().await;
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
    let types: Vec<&str> = frames
        .iter()
        .filter_map(|f| f["message_type"].as_str())
        .collect();
    assert_eq!(types.iter().filter(|t| **t == "user").count(), 1);
    assert!(types.contains(&"stream_event"));
    assert!(types.contains(&"assistant"));
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
}
