//! Unit tests of the demo agent.

use super::*;
use serde_json::{Value, json};

/// Runs one turn of a fresh demo agent on `text`, interrupted at its first word when
/// `interrupt`, and returns what it sent.
async fn one_turn(text: &str, interrupt: bool) -> Vec<AgentMessage> {
    let (events, mut got) = mpsc::channel(EVENT_QUEUE);
    let (input_tx, mut input) = mpsc::channel(INPUT_QUEUE);
    let mut agent = DemoAgent {
        session_id: "s-1".into(),
        delta_tail: delta_tail("s-1"),
        gate: None,
        model: "demo".into(),
        permission_mode: "default".into(),
        turns: 0,
        cumulative_cost: 0.0,
        word_delay: Duration::ZERO,
        events,
    };
    if interrupt {
        input_tx.send(AgentInput::Interrupt).await.unwrap();
    }
    let mut pending = std::collections::VecDeque::new();
    agent
        .turn(&Content::Text(text.into()), &mut input, &mut pending)
        .await;
    drop(agent);
    let mut sent = Vec::new();
    while let Some(AgentEvent::Message(m)) = got.recv().await {
        sent.push(m);
    }
    sent
}

/// Each line's routing fields, as the CLI backend would read them from the text.
fn check_routing(sent: &[AgentMessage]) -> Vec<Value> {
    let mut uuids = std::collections::HashSet::new();
    sent.iter()
        .map(|m| {
            let read = AgentMessage::parse(m.raw.clone()).unwrap();
            assert_eq!(
                (&read.kind, &read.subtype, &read.uuid, &read.session_id),
                (&m.kind, &m.subtype, &m.uuid, &m.session_id),
                "{}",
                m.raw
            );
            assert!(uuids.insert(m.uuid.clone().unwrap()), "uuids differ");
            let mut line: Value = serde_json::from_str(&m.raw).unwrap();
            // The uuids and the timing are fresh each run; the rest is the CLI's shape.
            line.as_object_mut().unwrap().remove("uuid");
            for at in ["/message/id", "/event/message/id"] {
                if let Some(id) = line.pointer_mut(at).filter(|id| id.is_string()) {
                    assert!(id.as_str().unwrap().starts_with("msg_demo_"));
                    *id = json!("msg");
                }
            }
            if line["type"] == "result" {
                assert!(line["duration_ms"].is_u64());
                line["duration_ms"] = json!(0);
            }
            line
        })
        .collect()
}

fn stream(event: Value) -> Value {
    json!({"type": "stream_event", "session_id": "s-1", "parent_tool_use_id": null, "event": event})
}

fn delta(text: &str) -> Value {
    stream(
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
    )
}

#[tokio::test]
async fn a_turn_sends_the_lines_of_the_cli_in_their_order() {
    let sent = one_turn("say \"hi\"", false).await;
    let lines = check_routing(&sent);
    let reply = "Echo: say \"hi\" (turn 1)";
    let mut expected = vec![
        json!({"type": "system", "subtype": "init", "session_id": "s-1", "model": "demo", "tools": [],
            "permissionMode": "default", "apiKeySource": "none", "claude_code_version": "demo"}),
        stream(json!({"type": "message_start", "message": {"id": "msg", "model": "demo"}})),
    ];
    expected.extend(
        ["Echo: ", "say ", "\"hi\" ", "(turn ", "1)"]
            .into_iter()
            .map(delta),
    );
    let usage = json!({"input_tokens": 2, "output_tokens": 5});
    expected.extend([
        json!({"type": "assistant", "session_id": "s-1", "parent_tool_use_id": null, "message": {
            "id": "msg", "type": "message", "role": "assistant", "model": "demo",
            "content": [{"type": "text", "text": reply}], "stop_reason": null, "usage": usage}}),
        stream(json!({"type": "content_block_stop", "index": 0})),
        stream(json!({"type": "message_stop"})),
        json!({"type": "result", "subtype": "success", "is_error": false, "result": reply,
            "session_id": "s-1", "num_turns": 1, "duration_ms": 0, "duration_api_ms": 0,
            "total_cost_usd": COST_PER_TURN_USD, "stop_reason": "end_turn",
            "terminal_reason": "completed", "usage": usage}),
    ]);
    assert_eq!(lines, expected);
}

#[tokio::test]
async fn an_interrupted_turn_says_so_as_the_cli_does() {
    let sent = one_turn("stop me", true).await;
    let lines = check_routing(&sent);
    let usage = json!({"input_tokens": 2, "output_tokens": 0});
    assert_eq!(
        lines[2..],
        [
            json!({"type": "assistant", "session_id": "s-1", "parent_tool_use_id": null, "aborted": true,
                "message": {"id": "msg", "type": "message", "role": "assistant", "model": "demo",
                "content": [{"type": "text", "text": ""}], "stop_reason": null, "usage": usage}}),
            json!({"type": "user", "session_id": "s-1", "message": {"role": "user",
                "content": [{"type": "text", "text": "[Request interrupted by user]"}]}}),
            stream(json!({"type": "content_block_stop", "index": 0})),
            stream(json!({"type": "message_stop"})),
            json!({"type": "result", "subtype": "error_during_execution", "is_error": true,
                "session_id": "s-1", "num_turns": 1, "duration_ms": 0, "duration_api_ms": 0,
                "total_cost_usd": COST_PER_TURN_USD, "stop_reason": null,
                "terminal_reason": "aborted_streaming", "usage": usage, "errors": []}),
        ]
    );
}
