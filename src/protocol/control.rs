//! The server's own frames (not an agent's message): `ack`, `error`, `pong`, `status`,
//! `activity` and `viewers`, their wire types and the builders that fill every field of them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ErrorCode, Frame, FrameError, Tag, now_rfc3339};

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
