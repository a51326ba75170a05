//! Server frames: each serialized once into a [`Frame`] that every subscriber shares, and the
//! builders of every frame the server sends.
//!
//! One job at about 700 lines: the frames' wire types and their builders belong together (a
//! builder fills every field of its type); the protocol's tests are in `tests.rs`.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ErrorCode, FrameError};

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

    fn unstored(kind: &'static str, text: String) -> Self {
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
    let header = serde_json::to_string(&SessionHeader {
        message_type,
        agent_id: tag.agent_id,
        session_id: tag.session_id,
        seq,
        timestamp,
        turn_cost_usd,
    })
    .expect("header serializes");
    let mut text = String::with_capacity(header.len() + payload.len() + 16);
    text.push_str(&header[..header.len() - 1]);
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

/// A server frame that is not an agent message, tagged by `message_type`.
#[derive(Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(tag = "message_type", rename_all = "snake_case")]
pub enum ControlFrame<'a> {
    /// A `chat` was stored.
    Ack(AckFrame<'a>),
    /// A client frame failed.
    Error(ErrorFrame<'a>),
    /// The answer to a `ping`.
    Pong(PongFrame<'a>),
    /// A conversation changed state.
    Status(StatusFrame<'a>),
    /// Something happened in one of the principal's conversations (to sockets that `watch`).
    Activity(ActivityFrame<'a>),
    /// Someone started or stopped viewing a conversation (to its followers).
    Viewers(ViewersFrame<'a>),
}

impl ControlFrame<'_> {
    fn to_frame(&self) -> Frame {
        let kind = match self {
            ControlFrame::Ack(_) => "ack",
            ControlFrame::Error(_) => "error",
            ControlFrame::Pong(_) => "pong",
            ControlFrame::Status(_) => "status",
            ControlFrame::Activity(_) => "activity",
            ControlFrame::Viewers(_) => "viewers",
        };
        Frame::unstored(
            kind,
            serde_json::to_string(self).expect("control frames serialize"),
        )
    }
}

/// Sent to the socket that sent a `chat` once the user message is stored.
#[derive(Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct AckFrame<'a> {
    /// The conversation.
    pub agent_id: &'a str,
    /// The server's conversation id.
    pub session_id: &'a str,
    /// RFC 3339.
    pub timestamp: &'a str,
    /// The `chat`'s `client_msg_id`, or null.
    pub client_msg_id: Option<&'a str>,
    /// The `seq` of the stored user message.
    pub seq: i64,
    /// Turns ahead of this one; 0 when it runs now.
    pub queue_position: usize,
}

/// A client frame that could not be acted on; the socket stays open.
#[derive(Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct ErrorFrame<'a> {
    /// RFC 3339.
    pub timestamp: &'a str,
    /// Stable code.
    pub code: ErrorCode,
    /// Human-readable explanation.
    pub error: &'a str,
    /// The failed frame's `agent_id`, when it had a readable one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub agent_id: Option<&'a str>,
    /// The failed frame's `client_msg_id`, when it had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub client_msg_id: Option<&'a str>,
}

/// The answer to a `ping`.
#[derive(Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct PongFrame<'a> {
    /// RFC 3339.
    pub timestamp: &'a str,
    /// The `ping`'s `ts`, or null.
    #[cfg_attr(test, ts(type = "unknown"))]
    pub ts: Option<&'a Value>,
}

/// A conversation's state: `creating`, `resuming`, `active`, `busy`, `idle`, `queued`,
/// `interrupted`, `crashed`, `evicted`, `lagged`, ...
#[derive(Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct StatusFrame<'a> {
    /// The conversation.
    pub agent_id: &'a str,
    /// The server's conversation id; absent when the conversation does not exist yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub session_id: Option<&'a str>,
    /// RFC 3339.
    pub timestamp: &'a str,
    /// The state.
    pub status: &'a str,
    /// Human-readable detail.
    pub detail: &'a str,
    /// For `forked`: the conversation this one was forked from.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub forked_from: Option<&'a str>,
    /// For `forked`: the `seq` the copied history ends at.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub at_seq: Option<i64>,
    /// For `changes`: what the conversation's worktree now differs from its base by.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub changes: Option<ChangeCounts>,
    /// For `creating`, `resuming` and `active` of a conversation in a git worktree of its
    /// own: where its agent runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub worktree: Option<WorktreeInfo<'a>>,
    /// For `interrupted` (and the stored `rewound`): the principal who asked for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub sender: Option<&'a str>,
}

/// The git worktree a conversation's agent runs in, as its `creating`, `resuming` and
/// `active` statuses say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct WorktreeInfo<'a> {
    /// The conversation's own branch.
    pub branch: &'a str,
    /// The branch (or commit) it started from and merges into.
    pub base: &'a str,
    /// The directory the agent runs in: the same place in the worktree as the conversation's
    /// directory was in the repository.
    pub path: &'a str,
}

/// How many files and lines a conversation's worktree changed against where its branch left
/// its base (committed or not): what a `status` `changes` carries, for a badge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct ChangeCounts {
    /// Files that differ.
    pub files: u64,
    /// Lines added.
    pub additions: u64,
    /// Lines deleted.
    pub deletions: u64,
    /// Whether some of it is not committed on the branch.
    pub uncommitted: bool,
}

/// What a stored `status` `waiting_for_limit` carries besides `status` and `detail`: a rate
/// limit ended the turn, and the conversation continues by itself at `continue_at` unless an
/// interrupt cancels the wait.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct LimitWait {
    /// When the "continue" turn is due (RFC 3339).
    pub continue_at: String,
    /// When the limit resets, as the agent said (RFC 3339); null when it said nothing, and
    /// the wait is a back-off.
    pub resets_at: Option<String>,
    /// Rate-limited turns in a row, this one included.
    #[serde(rename = "try")]
    pub attempt: u32,
    /// Rate-limited turns in a row after which the conversation no longer continues by
    /// itself.
    pub max_tries: u32,
}

/// What happened in a conversation, for the sockets that `watch` their principal's activity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum Activity {
    /// A turn started (`seq`: its user message).
    TurnStarted,
    /// A turn ended (`seq`: its `result`; `is_error` as the result's).
    TurnEnded,
    /// A tool waits for approval (`seq`: the `permission_request`; `tool_name`).
    PermissionRequest,
    /// A permission request was answered, withdrawn or timed out (`seq`: the
    /// `permission_resolved`).
    PermissionResolved,
}

/// Sent to the sockets that `watch`: one line about one of the principal's conversations,
/// whether or not the socket follows it.
#[derive(Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct ActivityFrame<'a> {
    /// The conversation.
    pub agent_id: &'a str,
    /// The server's conversation id.
    pub session_id: &'a str,
    /// RFC 3339.
    pub timestamp: &'a str,
    /// What happened.
    pub activity: Activity,
    /// The `seq` of the stored message it is about.
    pub seq: i64,
    /// For `permission_request`: the tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub tool_name: Option<&'a str>,
    /// For `turn_ended`: whether the turn ended with an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub is_error: Option<bool>,
}

/// Whether a principal started or stopped viewing a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum Viewing {
    /// Their first socket or event stream started following it.
    Joined,
    /// Their last one stopped.
    Left,
}

/// Sent to a conversation's followers when a principal starts or stops viewing it: who, and
/// everyone viewing it now. Principals only: nothing about their sockets.
#[derive(Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct ViewersFrame<'a> {
    /// The conversation.
    pub agent_id: &'a str,
    /// The server's conversation id.
    pub session_id: &'a str,
    /// RFC 3339.
    pub timestamp: &'a str,
    /// Who joined or left.
    pub viewer: &'a str,
    /// Which of the two.
    pub event: Viewing,
    /// Everyone viewing it now, by name.
    pub viewers: &'a [&'a str],
}

/// A `viewers` frame about conversation `tag`.
pub fn viewers_frame(tag: Tag<'_>, viewer: &str, event: Viewing, viewers: &[&str]) -> Frame {
    ControlFrame::Viewers(ViewersFrame {
        agent_id: tag.agent_id,
        session_id: tag.session_id,
        timestamp: &now_rfc3339(),
        viewer,
        event,
        viewers,
    })
    .to_frame()
}

/// An `activity` frame about conversation `tag`.
pub fn activity_frame(
    tag: Tag<'_>,
    activity: Activity,
    seq: i64,
    tool_name: Option<&str>,
    is_error: Option<bool>,
) -> Frame {
    ControlFrame::Activity(ActivityFrame {
        agent_id: tag.agent_id,
        session_id: tag.session_id,
        timestamp: &now_rfc3339(),
        activity,
        seq,
        tool_name,
        is_error,
    })
    .to_frame()
}

/// The fields of a stored `permission_request` frame, after its [`SessionHeader`]: the agent
/// asks to use a tool and waits for a `permission_response`.
#[derive(Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct PermissionRequest<'a> {
    /// Echoed in the `permission_response`.
    pub request_id: &'a str,
    /// The tool, e.g. `Bash`.
    pub tool_name: &'a str,
    /// The tool's input as the agent proposes it.
    #[cfg_attr(test, ts(type = "Record<string, unknown>"))]
    pub input: &'a Value,
    /// Permission suggestions the agent offers.
    #[cfg_attr(test, ts(type = "unknown"))]
    pub suggestions: &'a Value,
}

/// The fields of a stored `permission_resolved` frame, after its [`SessionHeader`].
#[derive(Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct PermissionResolved<'a> {
    /// The request that ended.
    pub request_id: &'a str,
    /// `allowed`, `denied`, `timed_out` or `cancelled`.
    pub outcome: &'a str,
    /// For `allowed` and `denied`: the principal who answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub sender: Option<&'a str>,
}

/// A `status` frame of conversation `agent_id` (`session_id`: none for one the recipient no
/// longer has) stamped `timestamp`, that says only `status` and `detail`: what every `status`
/// builder starts from.
fn plain_status<'a>(
    agent_id: &'a str,
    session_id: Option<&'a str>,
    timestamp: &'a str,
    status: &'a str,
    detail: &'a str,
) -> StatusFrame<'a> {
    StatusFrame {
        agent_id,
        session_id,
        timestamp,
        status,
        detail,
        forked_from: None,
        at_seq: None,
        changes: None,
        worktree: None,
        sender: None,
    }
}

/// The `status` of an agent starting or running (`creating`, `resuming`, `active`) in a
/// conversation with a worktree of its own, naming it.
pub fn worktree_status_frame(
    tag: Tag<'_>,
    status: &str,
    detail: &str,
    worktree: WorktreeInfo<'_>,
) -> Frame {
    let now = now_rfc3339();
    ControlFrame::Status(StatusFrame {
        worktree: Some(worktree),
        ..plain_status(tag.agent_id, Some(tag.session_id), &now, status, detail)
    })
    .to_frame()
}

/// A `status` frame (not stored).
pub fn status_frame(tag: Tag<'_>, status: &str, detail: &str) -> Frame {
    let now = now_rfc3339();
    let frame = plain_status(tag.agent_id, Some(tag.session_id), &now, status, detail);
    ControlFrame::Status(frame).to_frame()
}

/// A `status` frame (not stored) about what principal `sender` asked for.
pub fn sent_status_frame(tag: Tag<'_>, status: &str, detail: &str, sender: &str) -> Frame {
    let now = now_rfc3339();
    ControlFrame::Status(StatusFrame {
        sender: Some(sender),
        ..plain_status(tag.agent_id, Some(tag.session_id), &now, status, detail)
    })
    .to_frame()
}

/// The `status` `access_revoked` a principal gets for a conversation shared with them once the
/// share ended: nothing more of it follows.
pub fn access_revoked_frame(alias: &str) -> Frame {
    let now = now_rfc3339();
    let detail = "this conversation is no longer shared with you";
    let frame = plain_status(alias, None, &now, "access_revoked", detail);
    ControlFrame::Status(frame).to_frame()
}

/// The `status` `changes` (not stored) after a turn changed files in the conversation's
/// worktree: what it now differs from its base by.
pub fn changes_frame(tag: Tag<'_>, changes: ChangeCounts) -> Frame {
    let plural = if changes.files == 1 { "" } else { "s" };
    let detail = format!(
        "{} file{plural} changed (+{} \u{2212}{})",
        changes.files, changes.additions, changes.deletions
    );
    let now = now_rfc3339();
    ControlFrame::Status(StatusFrame {
        changes: Some(changes),
        ..plain_status(tag.agent_id, Some(tag.session_id), &now, "changes", &detail)
    })
    .to_frame()
}

/// The `status` `forked` answering a `fork`: tagged with the new conversation, it names the
/// original and the `seq` the copied history ends at (the fork's own `last_seq`).
pub fn forked_frame(fork: Tag<'_>, last_seq: i64, forked_from: &str) -> Frame {
    let detail = format!("forked from `{forked_from}` at seq {last_seq}");
    let now = now_rfc3339();
    ControlFrame::Status(StatusFrame {
        forked_from: Some(forked_from),
        at_seq: Some(last_seq),
        ..plain_status(
            fork.agent_id,
            Some(fork.session_id),
            &now,
            "forked",
            &detail,
        )
    })
    .to_frame()
}

/// The `ack` frame sent to the socket that sent a `chat`.
pub fn ack_frame(
    tag: Tag<'_>,
    client_msg_id: Option<&str>,
    seq: i64,
    queue_position: usize,
) -> Frame {
    ControlFrame::Ack(AckFrame {
        agent_id: tag.agent_id,
        session_id: tag.session_id,
        timestamp: &now_rfc3339(),
        client_msg_id,
        seq,
        queue_position,
    })
    .to_frame()
}

/// The `error` frame for a failed client frame.
pub fn error_frame(err: &FrameError) -> Frame {
    ControlFrame::Error(ErrorFrame {
        timestamp: &now_rfc3339(),
        code: err.code,
        error: &err.message,
        agent_id: err.agent_id.as_deref(),
        client_msg_id: err.client_msg_id.as_deref(),
    })
    .to_frame()
}

/// The `pong` answering a `ping`.
pub fn pong_frame(ts: Option<&Value>) -> Frame {
    ControlFrame::Pong(PongFrame {
        timestamp: &now_rfc3339(),
        ts,
    })
    .to_frame()
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
