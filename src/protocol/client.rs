//! Client frames: what a client may send, decoded by hand from JSON so that every kind of bad
//! input maps to its own stable error code.
//!
//! A chat's options, their types and decoding, are in `options.rs`.

use serde::Serialize;
use serde_json::{Map, Value};

use super::options::{ChatOptions, chat_options};
use super::{
    AgentId, Content, ErrorCode, FrameError, MAX_AGENT_ID_CHARS, MAX_AGENT_NAME_CHARS,
    MAX_MODE_CHARS, MAX_MODEL_CHARS, MAX_PATH_BYTES, Principal, truncate_chars,
};

/// The answer to a tool permission request; on the wire, `behavior` says which.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(tag = "behavior", rename_all = "snake_case")]
pub enum PermissionDecision {
    /// Run the tool, with the input as the user edited it (or as asked).
    Allow {
        /// The edited tool input, when the user changed it.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[cfg_attr(test, ts(type = "Record<string, unknown>", optional))]
        updated_input: Option<Value>,
        /// Allow this tool for the rest of the conversation, where the agent offers that (an
        /// Agent Client Protocol agent's `allow_always`); otherwise the same as once.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        #[cfg_attr(test, ts(type = "boolean", optional))]
        always: bool,
    },
    /// Don't run the tool; the agent is told why.
    Deny {
        /// Shown to the agent.
        message: String,
    },
}

/// A user turn sent to a conversation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct Chat {
    /// Routing key of the conversation.
    #[cfg_attr(test, ts(as = "String"))]
    pub agent_id: AgentId,
    /// The user's message.
    pub content: Content,
    /// Echoed in the `ack`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub client_msg_id: Option<String>,
    /// Validated agent options.
    #[serde(skip_serializing_if = "ChatOptions::is_empty")]
    #[cfg_attr(test, ts(as = "Option<ChatOptions>", optional))]
    pub options: ChatOptions,
    /// Who sent it: set by the server from the credentials it came with, never read from a
    /// frame, and recorded in the stored `user` message.
    #[serde(skip)]
    #[cfg_attr(test, ts(skip))]
    pub sender: Option<Principal>,
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
        #[cfg_attr(test, ts(as = "String"))]
        agent_id: AgentId,
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
        #[cfg_attr(test, ts(as = "String"))]
        agent_id: AgentId,
        /// The last `seq` the client has; 0 for everything.
        since_seq: i64,
        /// Start the conversation's agent in the background if it is not running, so that the
        /// next chat skips its start-up (a hint: refused by limits, a `status` says so).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        #[cfg_attr(test, ts(optional, as = "Option<bool>"))]
        warm: bool,
    },
    /// Stop following a conversation.
    Unsubscribe {
        /// The conversation.
        #[cfg_attr(test, ts(as = "String"))]
        agent_id: AgentId,
    },
    /// Get an `activity` frame whenever a turn starts or ends or a tool waits for approval in
    /// any of the principal's conversations, followed or not.
    Watch,
    /// Stop the `activity` frames.
    Unwatch,
    /// Which conversation this socket's page shows: Web Push sends nothing about a conversation
    /// that a visible page of its principal shows. Until a socket sends one, and after it
    /// closes, it shows nothing.
    Presence {
        /// Whether the page is visible (not a background tab, not a locked phone).
        visible: bool,
        /// The conversation open in the page, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[cfg_attr(test, ts(as = "Option<String>", optional))]
        agent_id: Option<AgentId>,
    },
    /// Answer a pending tool permission request.
    PermissionResponse {
        /// The conversation.
        #[cfg_attr(test, ts(as = "String"))]
        agent_id: AgentId,
        /// The request being answered.
        request_id: String,
        /// Allow (optionally with edited input) or deny (optionally with a message).
        #[serde(flatten)]
        decision: PermissionDecision,
    },
    /// Drop every stored message after `to_seq` (the `seq` of a `result`) and make the agent
    /// forget them.
    Rewind {
        /// The conversation.
        #[cfg_attr(test, ts(as = "String"))]
        agent_id: AgentId,
        /// The `seq` of the `result` that ends the turn to go back to.
        to_seq: i64,
    },
    /// Start conversation `new_agent_id` from `agent_id`'s history up to `at_seq`.
    Fork {
        /// The conversation to fork.
        #[cfg_attr(test, ts(as = "String"))]
        agent_id: AgentId,
        /// The new conversation's routing key.
        #[cfg_attr(test, ts(as = "String"))]
        new_agent_id: AgentId,
        /// The `seq` of the `result` to fork at; the latest when absent.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[cfg_attr(test, ts(optional))]
        at_seq: Option<i64>,
    },
}

/// Limits applied while decoding.
#[derive(Debug, Clone, Copy)]
pub struct DecodeLimits {
    /// Longest accepted `content` text, in bytes (images are bounded by the frame size).
    pub max_content_bytes: usize,
}

/// Checks an `agent_id`: 1–128 characters of `[A-Za-z0-9._:-]`.
pub fn valid_agent_id(id: &str) -> bool {
    is_share_alias(id)
        || (!id.is_empty()
            && id.len() <= MAX_AGENT_ID_CHARS
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-')))
}

/// Letters and digits after the `~` of a shared conversation's `agent_id`.
pub const SHARE_ALIAS_CHARS: usize = 16;

/// Whether `id` has the form of the `agent_id` a principal knows a conversation shared with
/// them by: `~` and 16 lowercase letters and digits. No conversation of one's own can have it
/// (`~` is not among their characters), so the two never collide.
pub fn is_share_alias(id: &str) -> bool {
    id.strip_prefix('~').is_some_and(|rest| {
        rest.len() == SHARE_ALIAS_CHARS
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    })
}

/// Checks an agent name: 1–64 characters of `[A-Za-z0-9._-]`, not starting with `-` or `.`.
pub fn valid_agent_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_AGENT_NAME_CHARS
        && !name.starts_with(['-', '.'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
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

/// Checks the form of a permission mode id: 1–64 characters of `[A-Za-z0-9._:-]`, starting
/// with a letter or digit. Which ids exist is for the conversation's agent to say.
pub fn valid_mode_id(mode: &str) -> bool {
    !mode.is_empty()
        && mode.len() <= MAX_MODE_CHARS
        && mode.starts_with(|c: char| c.is_ascii_alphanumeric())
        && mode
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Checks the form of a path a chat names (`cwd`, `add_dirs`): absolute, at most
/// [`MAX_PATH_BYTES`] bytes, without control characters. Whether it names a directory a
/// principal may use is for the server to find out.
pub fn valid_path_form(path: &str) -> bool {
    path.starts_with('/') && path.len() <= MAX_PATH_BYTES && !path.chars().any(char::is_control)
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
    decode_object(&obj, limits)
}

/// Decodes a client frame that is already a JSON object (see [`decode`]).
fn decode_object(
    obj: &Map<String, Value>,
    limits: DecodeLimits,
) -> Result<ClientFrame, FrameError> {
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
    let client_msg_id = client_msg_id(obj).map_err(|e| e.for_agent(raw_agent))?;
    let fail = |e: FrameError| FrameError {
        agent_id: e.agent_id.or_else(|| raw_agent.map(str::to_owned)),
        client_msg_id: client_msg_id.clone(),
        ..e
    };
    match ty {
        "chat" => {
            let agent_id = agent_id(obj).map_err(fail)?;
            Ok(ClientFrame::Chat(
                decode_chat(agent_id, obj, limits).map_err(fail)?,
            ))
        }
        "interrupt" => Ok(ClientFrame::Interrupt {
            agent_id: agent_id(obj).map_err(fail)?,
        }),
        "ping" => Ok(ClientFrame::Ping {
            ts: obj.get("ts").cloned(),
        }),
        "subscribe" => {
            let agent_id = agent_id(obj).map_err(fail)?;
            let since_seq = match obj.get("since_seq") {
                None | Some(Value::Null) => 0,
                Some(v) => v.as_i64().filter(|n| *n >= 0).ok_or_else(|| {
                    fail(FrameError::new(
                        ErrorCode::BadFrame,
                        "`since_seq` must be a non-negative integer",
                    ))
                })?,
            };
            let warm = match obj.get("warm") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return Err(fail(FrameError::new(
                        ErrorCode::BadFrame,
                        "`warm` must be a boolean",
                    )));
                }
            };
            Ok(ClientFrame::Subscribe {
                agent_id,
                since_seq,
                warm,
            })
        }
        "unsubscribe" => Ok(ClientFrame::Unsubscribe {
            agent_id: agent_id(obj).map_err(fail)?,
        }),
        "watch" => Ok(ClientFrame::Watch),
        "unwatch" => Ok(ClientFrame::Unwatch),
        "presence" => {
            let Some(Value::Bool(visible)) = obj.get("visible") else {
                return Err(fail(FrameError::new(
                    ErrorCode::BadFrame,
                    "`visible` must be a boolean",
                )));
            };
            let agent_id = match obj.get("agent_id") {
                None | Some(Value::Null) => None,
                Some(_) => Some(agent_id(obj).map_err(fail)?),
            };
            Ok(ClientFrame::Presence {
                visible: *visible,
                agent_id,
            })
        }
        "permission_response" => {
            let agent_id = agent_id(obj).map_err(fail)?;
            let (request_id, decision) = decode_permission_response(obj).map_err(fail)?;
            Ok(ClientFrame::PermissionResponse {
                agent_id,
                request_id,
                decision,
            })
        }
        "rewind" => Ok(ClientFrame::Rewind {
            agent_id: agent_id(obj).map_err(fail)?,
            to_seq: decode_rewind(obj).map_err(fail)?,
        }),
        "fork" => {
            let agent_id = agent_id(obj).map_err(fail)?;
            let (new_agent_id, at_seq) = decode_fork(&agent_id, obj).map_err(fail)?;
            Ok(ClientFrame::Fork {
                agent_id,
                new_agent_id,
                at_seq,
            })
        }
        other => Err(fail(FrameError::new(
            ErrorCode::UnknownType,
            format!("unknown frame type `{}`", truncate_chars(other, 64)),
        ))),
    }
}

/// The fields of a `chat` frame for `agent_id` (a REST body has the same ones): its content,
/// options and `client_msg_id`, checked as [`decode`] checks them.
///
/// # Errors
/// As [`decode`].
pub fn decode_chat(
    agent_id: AgentId,
    obj: &Map<String, Value>,
    limits: DecodeLimits,
) -> Result<Chat, FrameError> {
    let client_msg_id = client_msg_id(obj)?;
    let content = super::content::decode(obj.get("content"), limits.max_content_bytes)?;
    let options = chat_options(obj.get("options"))?;
    Ok(Chat {
        agent_id,
        content,
        client_msg_id,
        options,
        sender: None,
    })
}

/// The `client_msg_id` of a frame, if any.
fn client_msg_id(obj: &Map<String, Value>) -> Result<Option<String>, FrameError> {
    match obj.get("client_msg_id") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(FrameError::new(
            ErrorCode::BadFrame,
            "`client_msg_id` must be a string",
        )),
    }
}

/// The fields of a `permission_response` frame (a REST body has the same ones): the request
/// answered and the decision.
///
/// # Errors
/// As [`decode`].
pub fn decode_permission_response(
    obj: &Map<String, Value>,
) -> Result<(String, PermissionDecision), FrameError> {
    let bad = |m: &str| FrameError::new(ErrorCode::BadFrame, m);
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
        Some("allow") => PermissionDecision::Allow {
            updated_input: match obj.get("updated_input") {
                None | Some(Value::Null) => None,
                Some(v @ Value::Object(_)) => Some(v.clone()),
                Some(_) => return Err(bad("`updated_input` must be an object")),
            },
            always: match obj.get("always") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(bad("`always` must be a boolean")),
            },
        },
        Some("deny") => PermissionDecision::Deny {
            message: message.unwrap_or_else(|| "The user denied this tool use.".into()),
        },
        _ => return Err(bad("`behavior` must be \"allow\" or \"deny\"")),
    };
    Ok((request_id, decision))
}

/// The `to_seq` of a `rewind` frame (a REST body has the same field).
///
/// # Errors
/// `invalid_seq`.
pub fn decode_rewind(obj: &Map<String, Value>) -> Result<i64, FrameError> {
    seq_field(obj, "to_seq")?
        .ok_or_else(|| FrameError::new(ErrorCode::InvalidSeq, "`to_seq` is missing"))
}

/// The `new_agent_id` and `at_seq` of a `fork` of `agent_id` (a REST body has the same
/// fields).
///
/// # Errors
/// `invalid_agent_id`, `invalid_seq`.
pub fn decode_fork(
    agent_id: &AgentId,
    obj: &Map<String, Value>,
) -> Result<(AgentId, Option<i64>), FrameError> {
    let new_agent_id = match obj.get("new_agent_id") {
        // The fork is the caller's own conversation: never named like a shared one's alias.
        Some(Value::String(id))
            if valid_agent_id(id) && !is_share_alias(id) && *agent_id != id.as_str() =>
        {
            AgentId::parse(id.as_str())?
        }
        _ => {
            return Err(FrameError::new(
                ErrorCode::InvalidAgentId,
                "`new_agent_id` must be 1-128 characters of [A-Za-z0-9._:-] (not starting with \
                 `~`), other than `agent_id`",
            ));
        }
    };
    Ok((new_agent_id, seq_field(obj, "at_seq")?))
}

fn agent_id(obj: &Map<String, Value>) -> Result<AgentId, FrameError> {
    match obj.get("agent_id") {
        Some(Value::String(id)) => AgentId::parse(id.as_str()),
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
