//! The agent's stream-json line parser: any line either parses to a message whose frame
//! carries it verbatim as valid JSON, or is refused with an error. Never a panic.

#![no_main]

use agentmux::agent::AgentMessage;
use agentmux::protocol::{self, Tag};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(message) = AgentMessage::parse(line.to_owned()) else {
        return;
    };
    assert_eq!(message.raw, line);
    let tag = Tag {
        agent_id: "a",
        session_id: "s",
    };
    let frame = protocol::session_frame(tag, "assistant", Some(1), "t", &message.raw);
    let value: serde_json::Value =
        serde_json::from_str(frame.text.as_str()).expect("frames are JSON");
    let original: serde_json::Value = serde_json::from_str(line).expect("the line was JSON");
    assert_eq!(value["message"], original);
});
