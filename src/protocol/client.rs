//! Client frames: what a client may send, decoded by hand from JSON so that every kind of bad
//! input maps to its own stable error code.

use serde::Serialize;
use serde_json::{Map, Value};

use super::{
    ErrorCode, FrameError, MAX_AGENT_ID_CHARS, MAX_AGENT_NAME_CHARS, MAX_MODEL_CHARS,
    PERMISSION_MODES, UNATTENDED_PERMISSION_MODES, truncate_chars,
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

/// Options a `chat` may carry; only these reach the agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
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
    /// The agent (by name) of a new conversation; on a later chat it must name the
    /// conversation's own agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub agent: Option<String>,
}

impl ChatOptions {
    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        self.model.is_none() && self.permission_mode.is_none() && self.agent.is_none()
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
        decision: PermissionDecision,
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
///
/// # Errors
/// As [`decode`], but for the JSON syntax.
pub fn decode_object(
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
            let agent_id = agent_id(obj).map_err(fail)?;
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
            Ok(ClientFrame::Subscribe {
                agent_id,
                since_seq,
            })
        }
        "unsubscribe" => Ok(ClientFrame::Unsubscribe {
            agent_id: agent_id(obj).map_err(fail)?,
        }),
        "permission_response" => {
            let agent_id = agent_id(obj).map_err(fail)?;
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
            Ok(ClientFrame::PermissionResponse {
                agent_id,
                request_id,
                decision,
            })
        }
        "rewind" => Ok(ClientFrame::Rewind {
            agent_id: agent_id(obj).map_err(fail)?,
            to_seq: seq_field(obj, "to_seq").map_err(fail)?.ok_or_else(|| {
                fail(FrameError::new(
                    ErrorCode::InvalidSeq,
                    "`to_seq` is missing",
                ))
            })?,
        }),
        "fork" => {
            let agent_id = agent_id(obj).map_err(fail)?;
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
                at_seq: seq_field(obj, "at_seq").map_err(fail)?,
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
            ("agent", Value::String(a)) if valid_agent_name(a) => options.agent = Some(a.clone()),
            ("agent", _) => {
                return Err(FrameError::new(
                    ErrorCode::InvalidOptions,
                    format!(
                        "`options.agent` must be 1-{MAX_AGENT_NAME_CHARS} characters of \
                         [A-Za-z0-9._-], not starting with `-` or `.`"
                    ),
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
