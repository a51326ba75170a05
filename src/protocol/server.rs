//! Server frames: each serialized once into a [`Frame`] that every subscriber shares, and the
//! conversation frames built around an agent's stored or streamed message (the server's own
//! frames are in `control.rs`; the protocol's tests in `tests.rs`).

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

/// One serialized server frame, shared cheaply between every socket that gets it.
#[derive(Debug, Clone)]
pub struct Frame {
    /// The stored sequence number, for frames that are stored.
    pub seq: Option<i64>,
    /// The frame's `message_type` (`other` for one this server does not name), for metrics.
    pub kind: &'static str,
    /// The JSON text sent on the wire.
    pub text: FrameText,
}

/// A frame's JSON text: UTF-8, shared between subscribers without copying.
#[derive(Debug, Clone)]
pub struct FrameText(Bytes);

impl FrameText {
    /// The text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("frame text is built from a String")
    }

    /// The text's bytes, shared.
    pub fn bytes(&self) -> Bytes {
        self.0.clone()
    }

    /// The text's bytes, this share of them.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }
}

impl From<String> for FrameText {
    fn from(text: String) -> Self {
        FrameText(Bytes::from(text))
    }
}

impl Frame {
    /// A frame another node built and sent on as it is (its `message_type`, its `seq` if
    /// stored, and its text).
    pub fn relayed(seq: Option<i64>, message_type: &str, text: String) -> Self {
        Frame {
            seq,
            kind: static_type(message_type),
            text: text.into(),
        }
    }

    pub(super) fn unstored(kind: &'static str, text: String) -> Self {
        Frame {
            seq: None,
            kind,
            text: text.into(),
        }
    }

    /// The frame as a principal the conversation is shared with gets it: tagged with the
    /// `agent_id` they know it by. Every conversation frame names its `agent_id` in its
    /// header, before its payload, and ids need no escapes, so the first one is replaced.
    pub fn retagged(&self, agent_id: &str) -> Frame {
        const KEY: &str = "\"agent_id\":\"";
        let text = self.text.as_str();
        let Some(start) = text.find(KEY).map(|at| at + KEY.len()) else {
            return self.clone();
        };
        let Some(len) = text[start..].find('"') else {
            return self.clone();
        };
        let mut out = String::with_capacity(text.len() + agent_id.len());
        out.push_str(&text[..start]);
        out.push_str(agent_id);
        out.push_str(&text[start + len..]);
        Frame {
            seq: self.seq,
            kind: self.kind,
            text: out.into(),
        }
    }
}

/// Which conversation a frame belongs to.
#[derive(Debug, Clone, Copy)]
pub struct Tag<'a> {
    /// The client's routing key.
    pub agent_id: &'a str,
    /// The server's conversation id.
    pub session_id: &'a str,
}

/// The fields every conversation frame built by [`session_frame`] starts with; the payload
/// follows.
#[derive(Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct SessionHeader<'a> {
    /// What the frame is.
    pub message_type: &'a str,
    /// The client's routing key.
    pub agent_id: &'a str,
    /// The server's conversation id.
    pub session_id: &'a str,
    /// The stored sequence number; absent on frames that are not stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub seq: Option<i64>,
    /// RFC 3339; for a stored frame, when it was stored.
    pub timestamp: &'a str,
    /// On a `result`: what this turn cost, in US dollars (the agent's own `total_cost_usd` is
    /// a running total of its process).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub turn_cost_usd: Option<f64>,
}

/// Message types whose stored payload is the agent's message, sent under `message`.
pub const AGENT_MESSAGE_TYPES: &[&str] = &["user", "system", "assistant", "result"];

/// Message types sent under `message` and never stored: token-streaming deltas, and agent
/// messages of types this server does not know.
pub const LIVE_AGENT_MESSAGE_TYPES: &[&str] = &["stream_event", "agent_event"];

/// Message types whose stored payload is the agent's message, sent under `message`.
pub fn is_agent_message(message_type: &str) -> bool {
    AGENT_MESSAGE_TYPES.contains(&message_type)
}

/// The keys of a [`SessionHeader`]: set by the server only, never by a spliced payload.
const HEADER_KEYS: &[&str] = &[
    "message_type",
    "agent_id",
    "session_id",
    "seq",
    "timestamp",
    "turn_cost_usd",
];

/// Builds a session frame: a header plus either `message: <payload>` (agent messages and
/// stream events) or the payload object's own fields (status and other server frames).
///
/// `payload` must be a JSON object. It is spliced in as text; only a spliced payload that
/// might hold a header key (say an imported transcript's) is re-parsed, and those keys are
/// dropped from it, so every frame has each header key once, with the server's value.
pub fn session_frame(
    tag: Tag<'_>,
    message_type: &str,
    seq: Option<i64>,
    timestamp: &str,
    payload: &str,
    turn_cost_usd: Option<f64>,
) -> Frame {
    // One buffer, sized for the header's fixed text and the payload: the header is written
    // into it (checked as UTF-8 on its own), its closing brace taken off, and the payload
    // spliced in after it.
    let mut header = Vec::with_capacity(
        192 + tag.agent_id.len() + tag.session_id.len() + timestamp.len() + payload.len(),
    );
    serde_json::to_writer(
        &mut header,
        &SessionHeader {
            message_type,
            agent_id: tag.agent_id,
            session_id: tag.session_id,
            seq,
            timestamp,
            turn_cost_usd,
        },
    )
    .expect("header serializes");
    header.pop();
    let mut text = String::from_utf8(header).expect("serde_json writes UTF-8");
    if is_agent_message(message_type) || LIVE_AGENT_MESSAGE_TYPES.contains(&message_type) {
        text.push_str(",\"message\":");
        text.push_str(payload);
        text.push('}');
    } else {
        let inner = payload.trim();
        let inner = inner
            .strip_prefix('{')
            .and_then(|s| s.strip_suffix('}'))
            .unwrap_or("");
        // A key can hide behind an escape (`"se\u0071"`), so a backslash is a maybe too.
        if inner.contains('\\') || names_a_header_key(inner) {
            push_fields_but_header(&mut text, payload);
        } else if !inner.trim().is_empty() {
            text.push(',');
            text.push_str(inner);
        }
        text.push('}');
    }
    Frame {
        seq,
        kind: static_type(message_type),
        text: text.into(),
    }
}

/// Whether `json` holds a header key as a string (`"seq"`; a key or, harmlessly, a value).
fn names_a_header_key(json: &str) -> bool {
    HEADER_KEYS.iter().any(|key| {
        json.match_indices(key)
            .any(|(at, _)| json[..at].ends_with('"') && json[at + key.len()..].starts_with('"'))
    })
}

/// Appends `,"key":value` for each field of the object `payload` except the header's keys
/// (nothing when `payload` is not a JSON object).
fn push_fields_but_header(text: &mut String, payload: &str) {
    let Ok(fields) = serde_json::from_str::<serde_json::Map<String, Value>>(payload) else {
        return;
    };
    for (key, value) in fields
        .iter()
        .filter(|(key, _)| !HEADER_KEYS.contains(&key.as_str()))
    {
        text.push(',');
        text.push_str(&serde_json::to_string(key).expect("strings serialize"));
        text.push(':');
        text.push_str(&serde_json::to_string(value).expect("JSON values serialize"));
    }
}

/// Session frame types, as the static strings metrics are labelled with.
const SESSION_TYPES: &[&str] = &[
    "user",
    "system",
    "assistant",
    "result",
    "stream_event",
    "status",
    "agent_event",
    "permission_request",
    "permission_resolved",
    "viewers",
];

fn static_type(message_type: &str) -> &'static str {
    SESSION_TYPES
        .iter()
        .find(|t| **t == message_type)
        .copied()
        .unwrap_or("other")
}

/// The current time as RFC 3339 with milliseconds, in UTC.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The `result` message that closes a turn which ended without the agent's own result (it
/// crashed, was stopped, or the server went down), in the shape of the CLI's error results.
pub fn error_result(session_id: &str, terminal_reason: &str) -> String {
    serde_json::json!({
        "type": "result",
        "subtype": "error_during_execution",
        "is_error": true,
        "session_id": session_id,
        "terminal_reason": terminal_reason,
        "result": format!("The turn ended without a reply ({terminal_reason})."),
        "errors": [terminal_reason],
        "num_turns": 0,
        "duration_ms": 0,
        "total_cost_usd": 0,
        "usage": { "input_tokens": 0, "output_tokens": 0 },
    })
    .to_string()
}
