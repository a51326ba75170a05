//! Wire protocol v1: the JSON frames a client sends and the frames the server sends back.
//!
//! Plain data and pure functions, no I/O. Client frames are decoded by hand from a
//! [`serde_json::Value`] so that every kind of bad input maps to its own stable error code.
//! Server frames are serialized once into a [`Frame`] and shared by every subscriber.
//!
//! The typed frames here are the single source of truth for the wire format: the browser
//! client's TypeScript declarations (`web/protocol.d.ts`) are generated from them by a unit
//! test, which fails when the committed file is stale.

use axum::extract::ws::Utf8Bytes;
use serde::Serialize;
use serde_json::{Map, Value};

/// Longest accepted `agent_id`, in characters.
pub const MAX_AGENT_ID_CHARS: usize = 128;
/// Longest accepted `options.model`, in characters.
pub const MAX_MODEL_CHARS: usize = 64;
/// Permission modes the agent understands (`chat.options.permission_mode`).
pub const PERMISSION_MODES: &[&str] = &[
    "default",
    "acceptEdits",
    "bypassPermissions",
    "plan",
    "dontAsk",
    "auto",
    "manual",
];

/// Permission modes that let the agent run tools without asking anyone; a chat may choose
/// them only where the operator allows it.
pub const UNATTENDED_PERMISSION_MODES: &[&str] = &["bypassPermissions", "auto"];

/// Stable, snake_case error codes carried by `error` frames and REST errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, utoipa::ToSchema)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Not JSON, not an object, no `type`, a binary frame, or a field of the wrong type.
    BadFrame,
    /// A `type` this server does not know.
    UnknownType,
    /// A missing or malformed `agent_id`.
    InvalidAgentId,
    /// A missing, empty, too long or non-string `content`.
    InvalidContent,
    /// `options` that are not allowed.
    InvalidOptions,
    /// No conversation with that `agent_id` exists (for this principal).
    UnknownAgent,
    /// The agent could not be started.
    BackendUnavailable,
    /// A configured limit was hit (queue length, live sessions, ...).
    LimitExceeded,
    /// Too many frames per second on this socket.
    RateLimited,
    /// The store could not read or write.
    StoreUnavailable,
    /// Credentials are missing or wrong.
    Unauthorized,
    /// A `permission_response` names no pending request.
    UnknownRequest,
    /// A `seq` that does not name what the request needs (a rewind or fork point must be the
    /// `seq` of a stored `result`).
    InvalidSeq,
    /// The conversation is running or queueing a turn; the request needs it idle.
    Busy,
    /// Another conversation already has that `agent_id`.
    AgentExists,
    /// A REST request whose query, path or body is malformed.
    InvalidRequest,
    /// A browser page of another site sent the request (HTTP 403, on every route).
    ForbiddenOrigin,
    /// The request names a `Host` this server does not answer to (HTTP 421).
    ForbiddenHost,
    /// A request body that is not declared as JSON (HTTP 415).
    UnsupportedMediaType,
}

impl ErrorCode {
    /// The code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadFrame => "bad_frame",
            ErrorCode::UnknownType => "unknown_type",
            ErrorCode::InvalidAgentId => "invalid_agent_id",
            ErrorCode::InvalidContent => "invalid_content",
            ErrorCode::InvalidOptions => "invalid_options",
            ErrorCode::UnknownAgent => "unknown_agent",
            ErrorCode::BackendUnavailable => "backend_unavailable",
            ErrorCode::LimitExceeded => "limit_exceeded",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::StoreUnavailable => "store_unavailable",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::UnknownRequest => "unknown_request",
            ErrorCode::InvalidSeq => "invalid_seq",
            ErrorCode::Busy => "busy",
            ErrorCode::AgentExists => "agent_exists",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::ForbiddenOrigin => "forbidden_origin",
            ErrorCode::ForbiddenHost => "forbidden_host",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
        }
    }
}

/// A typed failure to act on a client frame; becomes an `error` frame.
#[derive(Debug, Clone, PartialEq)]
pub struct FrameError {
    /// Stable code.
    pub code: ErrorCode,
    /// Human-readable explanation.
    pub message: String,
    /// The frame's `agent_id`, when it had a readable one.
    pub agent_id: Option<String>,
    /// The frame's `client_msg_id`, when it had one.
    pub client_msg_id: Option<String>,
}

impl FrameError {
    /// An error with no frame context.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        FrameError {
            code,
            message: message.into(),
            agent_id: None,
            client_msg_id: None,
        }
    }

    /// Attaches the frame's `agent_id`.
    pub fn for_agent(mut self, agent_id: Option<&str>) -> Self {
        self.agent_id = agent_id.map(str::to_owned);
        self
    }
}

/// Options a `chat` may carry; only these reach the agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct ChatOptions {
    /// Model name for the agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub model: Option<String>,
    /// Permission mode for the agent, one of [`PERMISSION_MODES`].
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub permission_mode: Option<String>,
}

impl ChatOptions {
    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        self.model.is_none() && self.permission_mode.is_none()
    }
}

/// A user turn sent to a conversation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct Chat {
    /// Routing key of the conversation.
    pub agent_id: String,
    /// The user's message.
    pub content: String,
    /// Echoed in the `ack`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub client_msg_id: Option<String>,
    /// Validated agent options.
    #[serde(skip_serializing_if = "ChatOptions::is_empty")]
    #[cfg_attr(test, ts(as = "Option<ChatOptions>", optional))]
    pub options: ChatOptions,
}

/// A decoded client frame; serializing it gives the JSON text [`decode`] accepts.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientFrame {
    /// Send a user turn.
    Chat(Chat),
    /// Stop the running turn.
    Interrupt {
        /// The conversation.
        agent_id: String,
    },
    /// Application-level heartbeat; `ts` is echoed.
    Ping {
        /// Any JSON value, echoed in the `pong`.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[cfg_attr(test, ts(type = "unknown", optional))]
        ts: Option<Value>,
    },
    /// Replay stored frames after `since_seq`, then follow live ones.
    Subscribe {
        /// The conversation.
        agent_id: String,
        /// The last `seq` the client has; 0 for everything.
        since_seq: i64,
    },
    /// Stop following a conversation.
    Unsubscribe {
        /// The conversation.
        agent_id: String,
    },
    /// Answer a pending tool permission request.
    PermissionResponse {
        /// The conversation.
        agent_id: String,
        /// The request being answered.
        request_id: String,
        /// Allow (optionally with edited input) or deny (optionally with a message).
        #[serde(flatten)]
        decision: crate::agent::PermissionDecision,
    },
    /// Drop every stored message after `to_seq` (the `seq` of a `result`) and make the agent
    /// forget them.
    Rewind {
        /// The conversation.
        agent_id: String,
        /// The `seq` of the `result` that ends the turn to go back to.
        to_seq: i64,
    },
    /// Start conversation `new_agent_id` from `agent_id`'s history up to `at_seq`.
    Fork {
        /// The conversation to fork.
        agent_id: String,
        /// The new conversation's routing key.
        new_agent_id: String,
        /// The `seq` of the `result` to fork at; the latest when absent.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[cfg_attr(test, ts(optional))]
        at_seq: Option<i64>,
    },
}

/// Limits applied while decoding.
#[derive(Debug, Clone, Copy)]
pub struct DecodeLimits {
    /// Longest accepted `content`, in bytes.
    pub max_content_bytes: usize,
    /// Whether a chat may choose one of [`UNATTENDED_PERMISSION_MODES`].
    pub allow_bypass_permissions: bool,
}

/// Checks an `agent_id`: 1–128 characters of `[A-Za-z0-9._:-]`.
pub fn valid_agent_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_AGENT_ID_CHARS
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Checks a model name: 1–64 characters of `[A-Za-z0-9._:-]`, not starting with `-`.
pub fn valid_model(model: &str) -> bool {
    !model.is_empty()
        && model.len() <= MAX_MODEL_CHARS
        && !model.starts_with('-')
        && !model.contains("..")
        && model
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Decodes one text frame from a client.
///
/// # Errors
/// A [`FrameError`] whose code says what was wrong; it never panics on any input.
pub fn decode(text: &str, limits: DecodeLimits) -> Result<ClientFrame, FrameError> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        FrameError::new(ErrorCode::BadFrame, format!("frame is not valid JSON: {e}"))
    })?;
    let Value::Object(obj) = value else {
        return Err(FrameError::new(
            ErrorCode::BadFrame,
            "frame must be a JSON object",
        ));
    };
    let ty = match obj.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(_) => {
            return Err(FrameError::new(
                ErrorCode::BadFrame,
                "`type` must be a string",
            ));
        }
        None => return Err(FrameError::new(ErrorCode::BadFrame, "frame has no `type`")),
    };
    let raw_agent = obj.get("agent_id").and_then(Value::as_str);
    let client_msg_id = match obj.get("client_msg_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            return Err(
                FrameError::new(ErrorCode::BadFrame, "`client_msg_id` must be a string")
                    .for_agent(raw_agent),
            );
        }
    };
    let fail = |e: FrameError| FrameError {
        agent_id: e.agent_id.or_else(|| raw_agent.map(str::to_owned)),
        client_msg_id: client_msg_id.clone(),
        ..e
    };
    match ty {
        "chat" => {
            let agent_id = agent_id(&obj).map_err(fail)?;
            let content = match obj.get("content") {
                Some(Value::String(s)) if s.trim().is_empty() => {
                    return Err(fail(FrameError::new(
                        ErrorCode::InvalidContent,
                        "`content` is empty",
                    )));
                }
                Some(Value::String(s)) if s.len() > limits.max_content_bytes => {
                    return Err(fail(FrameError::new(
                        ErrorCode::InvalidContent,
                        format!(
                            "`content` is longer than {} bytes",
                            limits.max_content_bytes
                        ),
                    )));
                }
                Some(Value::String(s)) => s.clone(),
                Some(_) => {
                    return Err(fail(FrameError::new(
                        ErrorCode::InvalidContent,
                        "`content` must be a string",
                    )));
                }
                None => {
                    return Err(fail(FrameError::new(
                        ErrorCode::InvalidContent,
                        "`content` is missing",
                    )));
                }
            };
            let options = chat_options(obj.get("options"), limits).map_err(fail)?;
            Ok(ClientFrame::Chat(Chat {
                agent_id,
                content,
                client_msg_id: client_msg_id.clone(),
                options,
            }))
        }
        "interrupt" => Ok(ClientFrame::Interrupt {
            agent_id: agent_id(&obj).map_err(fail)?,
        }),
        "ping" => Ok(ClientFrame::Ping {
            ts: obj.get("ts").cloned(),
        }),
        "subscribe" => {
            let agent_id = agent_id(&obj).map_err(fail)?;
            let since_seq = match obj.get("since_seq") {
                None | Some(Value::Null) => 0,
                Some(v) => v.as_i64().filter(|n| *n >= 0).ok_or_else(|| {
                    fail(FrameError::new(
                        ErrorCode::BadFrame,
                        "`since_seq` must be a non-negative integer",
                    ))
                })?,
            };
            Ok(ClientFrame::Subscribe {
                agent_id,
                since_seq,
            })
        }
        "unsubscribe" => Ok(ClientFrame::Unsubscribe {
            agent_id: agent_id(&obj).map_err(fail)?,
        }),
        "permission_response" => {
            let agent_id = agent_id(&obj).map_err(fail)?;
            let bad = |m: &str| fail(FrameError::new(ErrorCode::BadFrame, m));
            let request_id = match obj.get("request_id") {
                Some(Value::String(id)) if !id.is_empty() && id.len() <= 256 => id.clone(),
                _ => return Err(bad("`request_id` must be a non-empty string")),
            };
            let message = match obj.get("message") {
                None | Some(Value::Null) => None,
                Some(Value::String(m)) => Some(m.clone()),
                Some(_) => return Err(bad("`message` must be a string")),
            };
            let decision = match obj.get("behavior").and_then(Value::as_str) {
                Some("allow") => crate::agent::PermissionDecision::Allow {
                    updated_input: match obj.get("updated_input") {
                        None | Some(Value::Null) => None,
                        Some(v @ Value::Object(_)) => Some(v.clone()),
                        Some(_) => return Err(bad("`updated_input` must be an object")),
                    },
                },
                Some("deny") => crate::agent::PermissionDecision::Deny {
                    message: message.unwrap_or_else(|| "The user denied this tool use.".into()),
                },
                _ => return Err(bad("`behavior` must be \"allow\" or \"deny\"")),
            };
            Ok(ClientFrame::PermissionResponse {
                agent_id,
                request_id,
                decision,
            })
        }
        "rewind" => Ok(ClientFrame::Rewind {
            agent_id: agent_id(&obj).map_err(fail)?,
            to_seq: seq_field(&obj, "to_seq").map_err(fail)?.ok_or_else(|| {
                fail(FrameError::new(
                    ErrorCode::InvalidSeq,
                    "`to_seq` is missing",
                ))
            })?,
        }),
        "fork" => {
            let agent_id = agent_id(&obj).map_err(fail)?;
            let new_agent_id = match obj.get("new_agent_id") {
                Some(Value::String(id)) if valid_agent_id(id) && *id != agent_id => id.clone(),
                _ => {
                    return Err(fail(FrameError::new(
                        ErrorCode::InvalidAgentId,
                        "`new_agent_id` must be 1-128 characters of [A-Za-z0-9._:-], other than `agent_id`",
                    )));
                }
            };
            Ok(ClientFrame::Fork {
                agent_id,
                new_agent_id,
                at_seq: seq_field(&obj, "at_seq").map_err(fail)?,
            })
        }
        other => Err(fail(FrameError::new(
            ErrorCode::UnknownType,
            format!("unknown frame type `{}`", truncate_chars(other, 64)),
        ))),
    }
}

fn agent_id(obj: &Map<String, Value>) -> Result<String, FrameError> {
    match obj.get("agent_id") {
        Some(Value::String(id)) if valid_agent_id(id) => Ok(id.clone()),
        Some(Value::String(_)) => Err(FrameError::new(
            ErrorCode::InvalidAgentId,
            "`agent_id` must be 1-128 characters of [A-Za-z0-9._:-]",
        )),
        Some(_) => Err(FrameError::new(
            ErrorCode::InvalidAgentId,
            "`agent_id` must be a string",
        )),
        None => Err(FrameError::new(
            ErrorCode::InvalidAgentId,
            "`agent_id` is missing",
        )),
    }
}

/// An optional positive `seq` field.
fn seq_field(obj: &Map<String, Value>, name: &str) -> Result<Option<i64>, FrameError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_i64().filter(|n| *n > 0).map(Some).ok_or_else(|| {
            FrameError::new(
                ErrorCode::InvalidSeq,
                format!("`{name}` must be a positive integer"),
            )
        }),
    }
}

fn chat_options(value: Option<&Value>, limits: DecodeLimits) -> Result<ChatOptions, FrameError> {
    let obj = match value {
        None | Some(Value::Null) => return Ok(ChatOptions::default()),
        Some(Value::Object(obj)) => obj,
        Some(_) => {
            return Err(FrameError::new(
                ErrorCode::InvalidOptions,
                "`options` must be an object",
            ));
        }
    };
    let mut options = ChatOptions::default();
    for (key, value) in obj {
        match (key.as_str(), value) {
            (_, Value::Null) => {}
            ("model", Value::String(m)) if valid_model(m) => options.model = Some(m.clone()),
            ("model", _) => {
                return Err(FrameError::new(
                    ErrorCode::InvalidOptions,
                    "`options.model` must be 1-64 characters of [A-Za-z0-9._:-]",
                ));
            }
            ("permission_mode", Value::String(m))
                if UNATTENDED_PERMISSION_MODES.contains(&m.as_str())
                    && !limits.allow_bypass_permissions =>
            {
                return Err(FrameError::new(
                    ErrorCode::InvalidOptions,
                    format!(
                        "`options.permission_mode` `{m}` lets the agent run tools without asking; \
                         this server does not allow it (agent.allow_bypass_permissions)"
                    ),
                ));
            }
            ("permission_mode", Value::String(m)) if PERMISSION_MODES.contains(&m.as_str()) => {
                options.permission_mode = Some(m.clone());
            }
            ("permission_mode", _) => {
                return Err(FrameError::new(
                    ErrorCode::InvalidOptions,
                    format!(
                        "`options.permission_mode` must be one of {}",
                        PERMISSION_MODES.join(", ")
                    ),
                ));
            }
            (other, _) => {
                return Err(FrameError::new(
                    ErrorCode::InvalidOptions,
                    format!("unknown option `{}`", truncate_chars(other, 64)),
                ));
            }
        }
    }
    Ok(options)
}

/// The first `n` Unicode scalar values of `s`.
pub fn truncate_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// One serialized server frame, shared cheaply between every socket that gets it.
#[derive(Debug, Clone)]
pub struct Frame {
    /// The stored sequence number, for frames that are stored.
    pub seq: Option<i64>,
    /// The frame's `message_type` (`other` for one this server does not name), for metrics.
    pub kind: &'static str,
    /// The JSON text sent on the wire.
    pub text: Utf8Bytes,
}

impl Frame {
    fn unstored(kind: &'static str, text: String) -> Self {
        Frame {
            seq: None,
            kind,
            text: text.into(),
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

/// Builds a session frame: a header plus either `message: <payload>` (agent messages and
/// stream events) or the payload object's own fields (status and other server frames).
///
/// `payload` must be a JSON object; it is spliced in as text, never re-parsed.
pub fn session_frame(
    tag: Tag<'_>,
    message_type: &str,
    seq: Option<i64>,
    timestamp: &str,
    payload: &str,
) -> Frame {
    let header = serde_json::to_string(&SessionHeader {
        message_type,
        agent_id: tag.agent_id,
        session_id: tag.session_id,
        seq,
        timestamp,
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
        if !inner.trim().is_empty() {
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
}

impl ControlFrame<'_> {
    fn to_frame(&self) -> Frame {
        let kind = match self {
            ControlFrame::Ack(_) => "ack",
            ControlFrame::Error(_) => "error",
            ControlFrame::Pong(_) => "pong",
            ControlFrame::Status(_) => "status",
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
}

/// A `status` frame (not stored).
pub fn status_frame(tag: Tag<'_>, status: &str, detail: &str) -> Frame {
    ControlFrame::Status(StatusFrame {
        agent_id: tag.agent_id,
        session_id: Some(tag.session_id),
        timestamp: &now_rfc3339(),
        status,
        detail,
        forked_from: None,
        at_seq: None,
    })
    .to_frame()
}

/// A `status` frame for an `agent_id` that has no conversation yet.
pub fn bare_status_frame(agent_id: &str, status: &str, detail: &str) -> Frame {
    ControlFrame::Status(StatusFrame {
        agent_id,
        session_id: None,
        timestamp: &now_rfc3339(),
        status,
        detail,
        forked_from: None,
        at_seq: None,
    })
    .to_frame()
}

/// The `status` `forked` answering a `fork`: tagged with the new conversation, it names the
/// original and the `seq` the copied history ends at (the fork's own `last_seq`).
pub fn forked_frame(fork: &crate::store::SessionRecord, forked_from: &str) -> Frame {
    ControlFrame::Status(StatusFrame {
        agent_id: &fork.agent_id,
        session_id: Some(&fork.session_id),
        timestamp: &now_rfc3339(),
        status: "forked",
        detail: &format!("forked from `{forked_from}` at seq {}", fork.last_seq),
        forked_from: Some(forked_from),
        at_seq: Some(fork.last_seq),
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

#[cfg(test)]
mod typescript;

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: DecodeLimits = DecodeLimits {
        max_content_bytes: 1024,
        allow_bypass_permissions: false,
    };

    fn code(text: &str) -> ErrorCode {
        decode(text, LIMITS).unwrap_err().code
    }

    #[test]
    fn decodes_every_client_frame() {
        let chat = decode(
            r#"{"type":"chat","agent_id":"a-1","content":"hi","client_msg_id":"c1","options":{"model":"m1"},"extra":1}"#,
            LIMITS,
        )
        .unwrap();
        assert_eq!(
            chat,
            ClientFrame::Chat(Chat {
                agent_id: "a-1".into(),
                content: "hi".into(),
                client_msg_id: Some("c1".into()),
                options: ChatOptions {
                    model: Some("m1".into()),
                    permission_mode: None
                },
            })
        );
        assert_eq!(
            decode(r#"{"type":"subscribe","agent_id":"x"}"#, LIMITS).unwrap(),
            ClientFrame::Subscribe {
                agent_id: "x".into(),
                since_seq: 0
            }
        );
        assert_eq!(
            decode(r#"{"type":"ping","ts":5}"#, LIMITS).unwrap(),
            ClientFrame::Ping { ts: Some(5.into()) }
        );
        assert_eq!(
            decode(r#"{"type":"rewind","agent_id":"x","to_seq":4}"#, LIMITS).unwrap(),
            ClientFrame::Rewind {
                agent_id: "x".into(),
                to_seq: 4
            }
        );
        assert_eq!(
            decode(
                r#"{"type":"fork","agent_id":"x","new_agent_id":"y"}"#,
                LIMITS
            )
            .unwrap(),
            ClientFrame::Fork {
                agent_id: "x".into(),
                new_agent_id: "y".into(),
                at_seq: None
            }
        );
    }

    #[test]
    fn bad_rewind_and_fork_frames_have_their_codes() {
        assert_eq!(
            code(r#"{"type":"rewind","agent_id":"x"}"#),
            ErrorCode::InvalidSeq
        );
        assert_eq!(
            code(r#"{"type":"rewind","agent_id":"x","to_seq":"3"}"#),
            ErrorCode::InvalidSeq
        );
        assert_eq!(
            code(r#"{"type":"fork","agent_id":"x","new_agent_id":"x"}"#),
            ErrorCode::InvalidAgentId
        );
        assert_eq!(
            code(r#"{"type":"fork","agent_id":"x","new_agent_id":"y","at_seq":0}"#),
            ErrorCode::InvalidSeq
        );
    }

    #[test]
    fn serialized_client_frames_decode_to_themselves() {
        let frames = [
            ClientFrame::Chat(Chat {
                agent_id: "a".into(),
                content: "hi".into(),
                client_msg_id: Some("c".into()),
                options: ChatOptions {
                    model: Some("m".into()),
                    permission_mode: Some("plan".into()),
                },
            }),
            ClientFrame::Chat(Chat {
                agent_id: "a".into(),
                content: "hi".into(),
                client_msg_id: None,
                options: ChatOptions::default(),
            }),
            ClientFrame::Interrupt {
                agent_id: "a".into(),
            },
            ClientFrame::Ping { ts: Some(7.into()) },
            ClientFrame::Ping { ts: None },
            ClientFrame::Subscribe {
                agent_id: "a".into(),
                since_seq: 4,
            },
            ClientFrame::Unsubscribe {
                agent_id: "a".into(),
            },
            ClientFrame::PermissionResponse {
                agent_id: "a".into(),
                request_id: "r".into(),
                decision: crate::agent::PermissionDecision::Allow {
                    updated_input: Some(serde_json::json!({"command": "ls"})),
                },
            },
            ClientFrame::PermissionResponse {
                agent_id: "a".into(),
                request_id: "r".into(),
                decision: crate::agent::PermissionDecision::Deny {
                    message: "no".into(),
                },
            },
            ClientFrame::Rewind {
                agent_id: "a".into(),
                to_seq: 3,
            },
            ClientFrame::Fork {
                agent_id: "a".into(),
                new_agent_id: "b".into(),
                at_seq: Some(3),
            },
            ClientFrame::Fork {
                agent_id: "a".into(),
                new_agent_id: "b".into(),
                at_seq: None,
            },
        ];
        for frame in frames {
            let text = serde_json::to_string(&frame).unwrap();
            assert_eq!(decode(&text, LIMITS).unwrap(), frame, "{text}");
        }
    }

    #[test]
    fn control_frames_have_their_fields() {
        let tag = Tag {
            agent_id: "a",
            session_id: "s",
        };
        let v: Value = serde_json::from_str(ack_frame(tag, None, 3, 1).text.as_str()).unwrap();
        assert_eq!(v["message_type"], "ack");
        assert_eq!(v["client_msg_id"], Value::Null);
        assert_eq!(
            (v["seq"].as_i64(), v["queue_position"].as_i64()),
            (Some(3), Some(1))
        );
        let err = FrameError::new(ErrorCode::UnknownAgent, "no such agent").for_agent(Some("a"));
        let v: Value = serde_json::from_str(error_frame(&err).text.as_str()).unwrap();
        assert_eq!(v["code"], "unknown_agent");
        assert_eq!(v["agent_id"], "a");
        assert!(v.get("client_msg_id").is_none());
        let v: Value =
            serde_json::from_str(status_frame(tag, "idle", "done").text.as_str()).unwrap();
        assert_eq!(
            (&v["status"], &v["session_id"]),
            (&"idle".into(), &"s".into())
        );
        let v: Value =
            serde_json::from_str(bare_status_frame("a", "evicted", "").text.as_str()).unwrap();
        assert!(v.get("session_id").is_none());
        let v: Value = serde_json::from_str(pong_frame(Some(&5.into())).text.as_str()).unwrap();
        assert_eq!((&v["message_type"], &v["ts"]), (&"pong".into(), &5.into()));
    }

    #[test]
    fn every_bad_input_has_its_code() {
        assert_eq!(code("not json"), ErrorCode::BadFrame);
        assert_eq!(code("[1,2]"), ErrorCode::BadFrame);
        assert_eq!(code(r#"{"agent_id":"a"}"#), ErrorCode::BadFrame);
        assert_eq!(code(r#"{"type":7}"#), ErrorCode::BadFrame);
        assert_eq!(
            code(r#"{"type":"dance","agent_id":"a"}"#),
            ErrorCode::UnknownType
        );
        assert_eq!(
            code(r#"{"type":"chat","content":"x"}"#),
            ErrorCode::InvalidAgentId
        );
        assert_eq!(
            code(r#"{"type":"chat","agent_id":"a b","content":"x"}"#),
            ErrorCode::InvalidAgentId
        );
        assert_eq!(
            code(r#"{"type":"chat","agent_id":5,"content":"x"}"#),
            ErrorCode::InvalidAgentId
        );
        let long = "a".repeat(129);
        assert_eq!(
            code(&format!(
                r#"{{"type":"chat","agent_id":"{long}","content":"x"}}"#
            )),
            ErrorCode::InvalidAgentId
        );
        assert_eq!(
            code(r#"{"type":"chat","agent_id":"a","content":"  "}"#),
            ErrorCode::InvalidContent
        );
        assert_eq!(
            code(r#"{"type":"chat","agent_id":"a","content":3}"#),
            ErrorCode::InvalidContent
        );
        let big = "x".repeat(1025);
        assert_eq!(
            code(&format!(
                r#"{{"type":"chat","agent_id":"a","content":"{big}"}}"#
            )),
            ErrorCode::InvalidContent
        );
        assert_eq!(
            code(
                r#"{"type":"chat","agent_id":"a","content":"x","options":{"model":"--dangerously-skip-permissions"}}"#
            ),
            ErrorCode::InvalidOptions
        );
        assert_eq!(
            code(r#"{"type":"chat","agent_id":"a","content":"x","options":{"model":"../../etc"}}"#),
            ErrorCode::InvalidOptions
        );
        assert_eq!(
            code(r#"{"type":"chat","agent_id":"a","content":"x","options":{"cwd":"/"}}"#),
            ErrorCode::InvalidOptions
        );
        assert_eq!(
            code(
                r#"{"type":"chat","agent_id":"a","content":"x","options":{"permission_mode":"yolo"}}"#
            ),
            ErrorCode::InvalidOptions
        );
        assert_eq!(
            code(r#"{"type":"subscribe","agent_id":"a","since_seq":-1}"#),
            ErrorCode::BadFrame
        );
    }

    #[test]
    fn errors_echo_agent_and_client_msg_id() {
        let err = decode(
            r#"{"type":"chat","agent_id":"a","content":"","client_msg_id":"m"}"#,
            LIMITS,
        )
        .unwrap_err();
        assert_eq!(err.agent_id.as_deref(), Some("a"));
        assert_eq!(err.client_msg_id.as_deref(), Some("m"));
    }

    #[test]
    fn session_frames_splice_payloads() {
        let tag = Tag {
            agent_id: "a",
            session_id: "s",
        };
        let f = session_frame(tag, "assistant", Some(3), "t", r#"{"type":"assistant"}"#);
        let v: Value = serde_json::from_str(f.text.as_str()).unwrap();
        assert_eq!(v["message"]["type"], "assistant");
        assert_eq!(v["seq"], 3);
        let f = session_frame(
            tag,
            "status",
            Some(4),
            "t",
            r#"{"status":"rewound","dropped_after_seq":2}"#,
        );
        let v: Value = serde_json::from_str(f.text.as_str()).unwrap();
        assert_eq!(v["status"], "rewound");
        assert_eq!(v["dropped_after_seq"], 2);
        assert_eq!(v["agent_id"], "a");
    }

    #[test]
    fn truncates_on_scalar_values() {
        assert_eq!(truncate_chars("héllo", 2), "hé");
        assert_eq!(truncate_chars("hi", 5), "hi");
    }
}
