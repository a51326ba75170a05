//! The agent's stream-json line parser: any line either parses to a message that every frame
//! type carrying an agent message (`user`, `system`, `assistant`, `result`, `stream_event`,
//! `agent_event`; stored with a `seq` or live without) carries verbatim, in a frame that is
//! JSON with its documented header; or is refused with an error. Never a panic.

#![no_main]

use agentmux::agent::AgentMessage;
use agentmux::protocol::{self, Tag};
use libfuzzer_sys::fuzz_target;

const FRAME_TYPES: &[&str] = &[
    "user",
    "system",
    "assistant",
    "result",
    "stream_event",
    "agent_event",
];

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(message) = AgentMessage::parse(line.to_owned()) else {
        return;
    };
    assert_eq!(message.raw, line);
    let original: serde_json::Value = serde_json::from_str(line).expect("the line was JSON");
    assert!(original.is_object(), "an agent message is an object");
    let tag = Tag {
        agent_id: "a",
        session_id: "s",
    };
    for message_type in FRAME_TYPES {
        for seq in [Some(7), None] {
            let frame = protocol::session_frame(
                tag,
                message_type,
                seq,
                "2026-01-01T00:00:00.000Z",
                &message.raw,
                None,
            );
            let value: serde_json::Value =
                serde_json::from_str(frame.text.as_str()).expect("frames are JSON");
            assert_eq!(value["message_type"], *message_type);
            assert_eq!(value["agent_id"], "a");
            assert_eq!(value["session_id"], "s");
            assert_eq!(value["timestamp"], "2026-01-01T00:00:00.000Z");
            assert_eq!(value.get("seq").and_then(|s| s.as_i64()), seq);
            assert_eq!(value["message"], original);
            assert_eq!(
                value.as_object().unwrap().len(),
                5 + usize::from(seq.is_some())
            );
        }
    }
});
