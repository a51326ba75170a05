//! The baseline's frames, built here with serde_json: one conversation's turn in the shape and
//! sizes of agentmux's demo agent (user, `system` init, a `stream_event` per word between
//! `message_start` and the two stop events, `assistant`, `result`), and the `ack`, `pong` and
//! `error` control frames. Written from the protocol documentation, not from agentmux's code.

use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

/// The model the demo agent reports.
const MODEL: &str = "demo";
/// The cost the demo agent reports per turn, in US dollars.
const COST_PER_TURN_USD: f64 = 0.0001;

/// One server frame: its `seq` when it is stored, and its JSON text.
#[derive(Debug, Clone)]
pub struct Built {
    pub seq: Option<i64>,
    pub text: String,
}

/// The fields every conversation frame starts with; the payload follows under `message`.
#[derive(Serialize)]
struct Header<'a> {
    message_type: &'a str,
    agent_id: &'a str,
    session_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    seq: Option<i64>,
    timestamp: &'a str,
}

/// RFC 3339 UTC with milliseconds, as every frame's `timestamp`.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A conversation the baseline answers from memory.
pub struct Conversation {
    agent_id: String,
    session_id: String,
    /// Random half of the ids this conversation hands out; the other half counts up, so ids
    /// are unique and as long as UUIDs without a system call each.
    id_seed: u64,
    ids_issued: u64,
    turns: u64,
    last_seq: i64,
    cost_usd: f64,
}

impl Conversation {
    /// A new conversation behind `agent_id`, with a fresh `session_id`.
    pub fn new(agent_id: &str) -> Self {
        let random = Uuid::new_v4();
        Conversation {
            agent_id: agent_id.to_owned(),
            session_id: random.to_string(),
            id_seed: random.as_u64_pair().1,
            ids_issued: 0,
            turns: 0,
            last_seq: 0,
            cost_usd: 0.0,
        }
    }

    fn next_id(&mut self) -> Uuid {
        self.ids_issued += 1;
        Uuid::from_u64_pair(self.id_seed, self.ids_issued)
    }

    /// A frame of this conversation with `payload` (a JSON object) under `message`.
    fn frame(&self, message_type: &str, seq: Option<i64>, timestamp: &str, payload: &str) -> Built {
        let header = serde_json::to_string(&Header {
            message_type,
            agent_id: &self.agent_id,
            session_id: &self.session_id,
            seq,
            timestamp,
        })
        .expect("a header serializes");
        let mut text = String::with_capacity(header.len() + payload.len() + 12);
        text.push_str(&header[..header.len() - 1]);
        text.push_str(",\"message\":");
        text.push_str(payload);
        text.push('}');
        Built { seq, text }
    }

    /// A stored frame: the next `seq`.
    fn stored(&mut self, message_type: &str, timestamp: &str, payload: &str) -> Built {
        self.last_seq += 1;
        self.frame(message_type, Some(self.last_seq), timestamp, payload)
    }

    /// A `stream_event` wrapping `event`.
    fn stream(&mut self, timestamp: &str, event: serde_json::Value) -> Built {
        let payload = json!({
            "type": "stream_event", "session_id": self.session_id, "uuid": self.next_id(),
            "parent_tool_use_id": null, "event": event,
        });
        self.frame("stream_event", None, timestamp, &payload.to_string())
    }

    /// The frames answering a chat of `content`, in order; the first is the stored user
    /// message, whose `seq` the `ack` carries.
    pub fn answer(&mut self, content: &str) -> Vec<Built> {
        let ts = now_rfc3339();
        self.turns += 1;
        let sid = self.session_id.clone();
        let msg_id = format!("msg_demo_{}", self.next_id().simple());
        let reply = format!("Echo: {content} (turn {})", self.turns);
        let words: Vec<&str> = reply.split(' ').collect();
        let mut frames = Vec::with_capacity(words.len() + 8);

        let user = json!({"type": "user", "message": {"role": "user", "content": content}});
        frames.push(self.stored("user", &ts, &user.to_string()));
        let system = json!({
            "type": "system", "subtype": "init", "session_id": sid, "uuid": self.next_id(),
            "model": MODEL, "tools": [], "permissionMode": "default", "apiKeySource": "none",
            "claude_code_version": "demo",
        });
        frames.push(self.stored("system", &ts, &system.to_string()));
        frames.push(self.stream(
            &ts,
            json!({"type": "message_start", "message": {"id": msg_id, "model": MODEL}}),
        ));
        for (i, word) in words.iter().enumerate() {
            let piece = if i + 1 < words.len() {
                format!("{word} ")
            } else {
                (*word).to_owned()
            };
            let text = serde_json::to_string(&piece).expect("a string serializes");
            let uuid = self.next_id();
            let delta = format!(
                r#"{{"event":{{"delta":{{"text":{text},"type":"text_delta"}},"index":0,"type":"content_block_delta"}},"parent_tool_use_id":null,"session_id":"{sid}","type":"stream_event","uuid":"{uuid}"}}"#
            );
            frames.push(self.frame("stream_event", None, &ts, &delta));
        }
        let usage = json!({
            "input_tokens": content.split_whitespace().count(),
            "output_tokens": words.len(),
        });
        let assistant = json!({
            "type": "assistant", "session_id": sid, "uuid": self.next_id(), "parent_tool_use_id": null,
            "message": {
                "id": msg_id, "type": "message", "role": "assistant", "model": MODEL,
                "content": [{"type": "text", "text": reply}],
                "stop_reason": null, "usage": usage,
            },
        });
        frames.push(self.stored("assistant", &ts, &assistant.to_string()));
        frames.push(self.stream(&ts, json!({"type": "content_block_stop", "index": 0})));
        frames.push(self.stream(&ts, json!({"type": "message_stop"})));
        self.cost_usd += COST_PER_TURN_USD;
        let result = json!({
            "type": "result", "subtype": "success", "is_error": false, "result": reply,
            "session_id": sid, "uuid": self.next_id(), "num_turns": 1, "duration_ms": 0,
            "duration_api_ms": 0, "total_cost_usd": self.cost_usd, "stop_reason": "end_turn",
            "terminal_reason": "completed", "usage": usage,
        });
        frames.push(self.stored("result", &ts, &result.to_string()));
        frames
    }

    /// The `ack` of a chat whose user message got `seq`.
    pub fn ack(&self, client_msg_id: Option<&str>, seq: i64) -> String {
        json!({
            "message_type": "ack", "agent_id": self.agent_id, "session_id": self.session_id,
            "timestamp": now_rfc3339(), "client_msg_id": client_msg_id, "seq": seq,
            "queue_position": 0,
        })
        .to_string()
    }
}

/// The `pong` answering a `ping` that carried `ts`.
pub fn pong(ts: Option<&serde_json::Value>) -> String {
    json!({"message_type": "pong", "timestamp": now_rfc3339(), "ts": ts}).to_string()
}

/// An `error` frame for a client frame the baseline could not read.
pub fn error(code: &str, message: &str) -> String {
    json!({
        "message_type": "error", "timestamp": now_rfc3339(), "code": code, "error": message,
        "agent_id": null, "client_msg_id": null,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    const PROMPT: &str = "please repeat these words back";

    fn parse(b: &Built) -> Value {
        serde_json::from_str(&b.text).expect("valid JSON")
    }

    #[test]
    fn a_turn_has_the_demo_agents_frames() {
        let mut c = Conversation::new("a-1");
        let frames = c.answer(PROMPT);
        let kinds: Vec<String> = frames
            .iter()
            .map(|f| parse(f)["message_type"].as_str().unwrap().to_owned())
            .collect();
        // "Echo: please repeat these words back (turn 1)": 8 words.
        let mut expected = vec!["user", "system", "stream_event"];
        expected.extend(["stream_event"; 8]);
        expected.extend(["assistant", "stream_event", "stream_event", "result"]);
        assert_eq!(kinds, expected);
        let seqs: Vec<i64> = frames.iter().filter_map(|f| f.seq).collect();
        assert_eq!(seqs, [1, 2, 3, 4]);
        for f in &frames {
            let v = parse(f);
            assert_eq!(v["agent_id"], "a-1");
            assert_eq!(v["seq"].as_i64(), f.seq);
            assert!(v["timestamp"].as_str().unwrap().ends_with('Z'));
            assert!(v["message"].is_object());
        }
        let streamed: String = frames
            .iter()
            .map(parse)
            .filter_map(|v| {
                v["message"]["event"]["delta"]["text"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        assert_eq!(streamed, "Echo: please repeat these words back (turn 1)");
        let result = parse(frames.last().unwrap());
        assert_eq!(result["message"]["result"], streamed.as_str());
        assert_eq!(result["message"]["is_error"], false);
        let user = parse(&frames[0]);
        assert_eq!(user["message"]["message"]["content"], PROMPT);
    }

    #[test]
    fn turns_continue_the_seqs_and_count() {
        let mut c = Conversation::new("a-1");
        c.answer(PROMPT);
        let second = c.answer("two");
        let seqs: Vec<i64> = second.iter().filter_map(|f| f.seq).collect();
        assert_eq!(seqs, [5, 6, 7, 8]);
        let result = parse(second.last().unwrap());
        assert_eq!(result["message"]["result"], "Echo: two (turn 2)");
        let ack: Value = serde_json::from_str(&c.ack(Some("c1"), 5)).unwrap();
        assert_eq!(ack["message_type"], "ack");
        assert_eq!(ack["seq"], 5);
        assert_eq!(ack["client_msg_id"], "c1");
        assert_eq!(ack["session_id"], parse(&second[0])["session_id"]);
    }

    #[test]
    fn ids_are_unique_and_uuid_sized() {
        let mut c = Conversation::new("a");
        let frames = c.answer(PROMPT);
        let uuids: std::collections::HashSet<String> = frames
            .iter()
            .map(parse)
            .filter_map(|v| v["message"]["uuid"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(
            uuids.len(),
            frames.len() - 1,
            "every message but the user's has one"
        );
        assert!(uuids.iter().all(|u| u.len() == 36));
    }

    #[test]
    fn control_frames() {
        let pong: Value = serde_json::from_str(&pong(Some(&json!(7)))).unwrap();
        assert_eq!(pong["message_type"], "pong");
        assert_eq!(pong["ts"], 7);
        let err: Value = serde_json::from_str(&error("invalid_json", "bad")).unwrap();
        assert_eq!(err["code"], "invalid_json");
    }
}
