//! Client frames: what a client may send, decoded by hand from JSON so that every kind of bad
//! input maps to its own stable error code.
//!
//! One job at about 800 lines: each frame's fields and their decoders, whose rules (options,
//! paths, tool patterns by way of `tools`) are read together with the errors they give.

use serde::Serialize;
use serde_json::{Map, Value};

use super::{
    AgentId, Content, ErrorCode, FrameError, MAX_ADD_DIRS, MAX_AGENT_ID_CHARS,
    MAX_AGENT_NAME_CHARS, MAX_MODE_CHARS, MAX_MODEL_CHARS, MAX_PATH_BYTES, MAX_SYSTEM_PROMPT_BYTES,
    MAX_TOOL_PATTERNS, MAX_TURNS_LIMIT, Principal, truncate_chars, valid_tool_pattern,
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

/// Options a `chat` may carry; only these reach the agent. An option left out (or `null`)
/// keeps the conversation's current value; a list given as `[]` clears it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct ChatOptions {
    /// Model name for the agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub model: Option<String>,
    /// Permission mode for the agent: one of the modes its agent offers (for the Claude CLI,
    /// its permission modes). The protocol checks only its form ([`valid_mode_id`]); the
    /// conversation's agent checks the id, and whether the server allows a mode that runs
    /// tools without asking.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub permission_mode: Option<String>,
    /// The agent's working directory: an absolute path of a directory inside a project root
    /// the principal may use. Only on a conversation's first chat (later chats may repeat it).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub cwd: Option<String>,
    /// Text appended to the agent's own system prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub system_prompt: Option<String>,
    /// Tool-name patterns the agent may use without asking (`Read`, `Bash(git:*)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub allowed_tools: Option<Vec<String>>,
    /// Tool-name patterns the agent may never use.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub disallowed_tools: Option<Vec<String>>,
    /// Most agentic turns (model calls) per user turn, 1 to [`MAX_TURNS_LIMIT`].
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub max_turns: Option<u32>,
    /// More directories the agent may read and change, each inside a project root the
    /// principal may use.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub add_dirs: Option<Vec<String>>,
    /// The agent (by name) of a new conversation; on a later chat it must name the
    /// conversation's own agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub agent: Option<String>,
    /// Whether a new conversation in a git repository works in a worktree of its own (on
    /// its own branch): `true`, `false`, or where it starts and which branch it makes. Only on
    /// a conversation's first chat (later chats may repeat it).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub worktree: Option<Box<WorktreeOption>>,
    /// The conversation's own spending cap in US dollars (0 to [`super::MAX_CAP_USD`]); only
    /// its owner may set it. A turn that would start with the conversation's spending at or
    /// over it is refused with `budget_exceeded`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional, as = "Option<f64>"))]
    pub budget_usd: Option<Box<Usd>>,

    /// Whether a turn the model API's rate limit ends continues by itself once the limit
    /// resets (a "continue" turn, after a `status` `waiting_for_limit`). Kept for the
    /// conversation's later turns; absent follows the server's `session.auto_continue`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub auto_continue: Option<bool>,
}

/// An amount of US dollars, checked to be a finite number (so that it compares whole).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, utoipa::ToSchema)]
#[serde(transparent)]
pub struct Usd(pub f64);

impl Eq for Usd {}

/// A chat's `options.worktree`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub enum WorktreeOption {
    /// A worktree from the repository's current branch on a new `agentmux/<agent_id>` branch,
    /// or none.
    On(bool),
    /// A worktree from `base` (a branch or a commit id; the current branch when absent) on
    /// branch `branch` (`agentmux/<agent_id>` when absent).
    From {
        /// A branch or commit of the repository.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[cfg_attr(test, ts(optional))]
        base: Option<String>,
        /// The new branch.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[cfg_attr(test, ts(optional))]
        branch: Option<String>,
    },
}

/// Longest `base` or `branch` of `options.worktree`, in bytes.
pub const MAX_WORKTREE_NAME_BYTES: usize = 200;

impl ChatOptions {
    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        *self == ChatOptions::default()
    }

    /// The launch options this chat sets (a list given as `[]` only clears, and sets none).
    pub fn launch_options(&self) -> Vec<LaunchOption> {
        LaunchOptions::default().updated(self).named()
    }
}

/// One of the [`LaunchOptions`], by its name in a chat's `options`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum LaunchOption {
    /// `system_prompt`.
    SystemPrompt,
    /// `allowed_tools`.
    AllowedTools,
    /// `disallowed_tools`.
    DisallowedTools,
    /// `max_turns`.
    MaxTurns,
    /// `add_dirs`.
    AddDirs,
}

impl LaunchOption {
    /// Every launch option.
    pub const ALL: [LaunchOption; 5] = [
        LaunchOption::SystemPrompt,
        LaunchOption::AllowedTools,
        LaunchOption::DisallowedTools,
        LaunchOption::MaxTurns,
        LaunchOption::AddDirs,
    ];

    /// Its name in a chat's `options`.
    pub fn name(self) -> &'static str {
        match self {
            LaunchOption::SystemPrompt => "system_prompt",
            LaunchOption::AllowedTools => "allowed_tools",
            LaunchOption::DisallowedTools => "disallowed_tools",
            LaunchOption::MaxTurns => "max_turns",
            LaunchOption::AddDirs => "add_dirs",
        }
    }
}

impl std::fmt::Display for LaunchOption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The options an agent can only take when it starts; a change between turns restarts it
/// (resuming its conversation). Stored per conversation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct LaunchOptions {
    /// Text appended to the agent's own system prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Tool-name patterns the agent may use without asking.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_tools: Vec<String>,
    /// Tool-name patterns the agent may never use.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disallowed_tools: Vec<String>,
    /// Most agentic turns per user turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// More directories the agent may use (canonical paths).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub add_dirs: Vec<String>,
}

impl LaunchOptions {
    /// These options with those a chat sets replacing them.
    pub fn updated(&self, chat: &ChatOptions) -> LaunchOptions {
        LaunchOptions {
            system_prompt: chat
                .system_prompt
                .clone()
                .or_else(|| self.system_prompt.clone()),
            allowed_tools: chat
                .allowed_tools
                .clone()
                .unwrap_or_else(|| self.allowed_tools.clone()),
            disallowed_tools: chat
                .disallowed_tools
                .clone()
                .unwrap_or_else(|| self.disallowed_tools.clone()),
            max_turns: chat.max_turns.or(self.max_turns),
            add_dirs: chat
                .add_dirs
                .clone()
                .unwrap_or_else(|| self.add_dirs.clone()),
        }
    }

    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        *self == LaunchOptions::default()
    }

    /// The options that are set.
    pub fn named(&self) -> Vec<LaunchOption> {
        LaunchOption::ALL
            .into_iter()
            .filter(|option| match option {
                LaunchOption::SystemPrompt => self.system_prompt.is_some(),
                LaunchOption::AllowedTools => !self.allowed_tools.is_empty(),
                LaunchOption::DisallowedTools => !self.disallowed_tools.is_empty(),
                LaunchOption::MaxTurns => self.max_turns.is_some(),
                LaunchOption::AddDirs => !self.add_dirs.is_empty(),
            })
            .collect()
    }

    /// These options with only those in `kept` left set.
    pub fn only(&self, kept: &std::collections::BTreeSet<LaunchOption>) -> LaunchOptions {
        let keeps = |option| kept.contains(&option);
        let list = |option, values: &Vec<String>| {
            if keeps(option) {
                values.clone()
            } else {
                Vec::new()
            }
        };
        LaunchOptions {
            system_prompt: (self.system_prompt.clone())
                .filter(|_| keeps(LaunchOption::SystemPrompt)),
            allowed_tools: list(LaunchOption::AllowedTools, &self.allowed_tools),
            disallowed_tools: list(LaunchOption::DisallowedTools, &self.disallowed_tools),
            max_turns: self.max_turns.filter(|_| keeps(LaunchOption::MaxTurns)),
            add_dirs: list(LaunchOption::AddDirs, &self.add_dirs),
        }
    }
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
        Some(Value::String(id)) if valid_agent_id(id) && *agent_id != id.as_str() => {
            AgentId::parse(id.as_str())?
        }
        _ => {
            return Err(FrameError::new(
                ErrorCode::InvalidAgentId,
                "`new_agent_id` must be 1-128 characters of [A-Za-z0-9._:-], other than `agent_id`",
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

fn chat_options(value: Option<&Value>) -> Result<ChatOptions, FrameError> {
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
            ("permission_mode", Value::String(m)) if valid_mode_id(m) => {
                options.permission_mode = Some(m.clone());
            }
            ("permission_mode", _) => {
                return Err(invalid_option(format!(
                    "`options.permission_mode` must be 1-{MAX_MODE_CHARS} characters of \
                     [A-Za-z0-9._:-], starting with a letter or digit"
                )));
            }
            ("cwd", Value::String(path)) if valid_path_form(path) => {
                options.cwd = Some(path.clone());
            }
            ("cwd", _) => {
                return Err(invalid_option(format!(
                    "`options.cwd` must be an absolute path (at most {MAX_PATH_BYTES} bytes, no control characters)"
                )));
            }
            ("system_prompt", Value::String(text))
                if !text.trim().is_empty()
                    && text.len() <= MAX_SYSTEM_PROMPT_BYTES
                    && !text.contains('\0') =>
            {
                options.system_prompt = Some(text.clone());
            }
            ("system_prompt", _) => {
                return Err(invalid_option(format!(
                    "`options.system_prompt` must be a non-empty string of at most {MAX_SYSTEM_PROMPT_BYTES} bytes without NUL"
                )));
            }
            ("allowed_tools" | "disallowed_tools", value) => {
                let patterns = tool_patterns(key, value)?;
                if key == "allowed_tools" {
                    options.allowed_tools = Some(patterns);
                } else {
                    options.disallowed_tools = Some(patterns);
                }
            }
            ("max_turns", Value::Number(n))
                if n.as_u64()
                    .is_some_and(|n| (1..=u64::from(MAX_TURNS_LIMIT)).contains(&n)) =>
            {
                options.max_turns = n.as_u64().map(|n| n as u32);
            }
            ("max_turns", _) => {
                return Err(invalid_option(format!(
                    "`options.max_turns` must be an integer from 1 to {MAX_TURNS_LIMIT}"
                )));
            }
            ("add_dirs", Value::Array(items))
                if items.len() <= MAX_ADD_DIRS
                    && items
                        .iter()
                        .all(|v| v.as_str().is_some_and(valid_path_form)) =>
            {
                options.add_dirs = Some(
                    items
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect(),
                );
            }
            ("add_dirs", _) => {
                return Err(invalid_option(format!(
                    "`options.add_dirs` must be a list of at most {MAX_ADD_DIRS} absolute paths"
                )));
            }
            ("worktree", value) => options.worktree = Some(Box::new(worktree_option(value)?)),
            ("budget_usd", value) => {
                let usd = value.as_f64().unwrap_or(f64::NAN);
                super::check_cap("options.budget_usd", usd).map_err(invalid_option)?;
                options.budget_usd = Some(Box::new(Usd(usd)));
            }
            ("auto_continue", Value::Bool(on)) => options.auto_continue = Some(*on),
            ("auto_continue", _) => {
                return Err(invalid_option(
                    "`options.auto_continue` must be true or false".into(),
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

/// `options.worktree`: a boolean, or an object of at most `base` and `branch`, each a string
/// of 1 to [`MAX_WORKTREE_NAME_BYTES`] bytes without control characters (git's own rules for
/// them are checked where the worktree is made).
fn worktree_option(value: &Value) -> Result<WorktreeOption, FrameError> {
    let bad = || {
        invalid_option(format!(
            "`options.worktree` must be true, false or {{\"base\": …, \"branch\": …}} with \
             names of 1-{MAX_WORKTREE_NAME_BYTES} bytes"
        ))
    };
    let name = |v: Option<&Value>| match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s))
            if !s.is_empty()
                && s.len() <= MAX_WORKTREE_NAME_BYTES
                && !s.chars().any(char::is_control) =>
        {
            Ok(Some(s.clone()))
        }
        Some(_) => Err(bad()),
    };
    match value {
        Value::Bool(on) => Ok(WorktreeOption::On(*on)),
        Value::Object(obj) if obj.keys().all(|k| k == "base" || k == "branch") => {
            Ok(WorktreeOption::From {
                base: name(obj.get("base"))?,
                branch: name(obj.get("branch"))?,
            })
        }
        _ => Err(bad()),
    }
}

fn invalid_option(message: String) -> FrameError {
    FrameError::new(ErrorCode::InvalidOptions, message)
}

/// A list of tool-name patterns (see [`valid_tool_pattern`]).
fn tool_patterns(key: &str, value: &Value) -> Result<Vec<String>, FrameError> {
    let bad = || {
        invalid_option(format!(
            "`options.{key}` must be a list of at most {MAX_TOOL_PATTERNS} tool-name patterns \
             such as `Read` or `Bash(git:*)` (a name of letters, digits, `_.*-`, optionally \
             followed by a specifier in parentheses without commas)"
        ))
    };
    let Value::Array(items) = value else {
        return Err(bad());
    };
    if items.len() > MAX_TOOL_PATTERNS {
        return Err(bad());
    }
    items
        .iter()
        .map(|v| match v.as_str() {
            Some(p) if valid_tool_pattern(p) => Ok(p.to_owned()),
            _ => Err(bad()),
        })
        .collect()
}
