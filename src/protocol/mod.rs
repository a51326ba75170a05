//! Wire protocol v1: the JSON frames a client sends and the frames the server sends back.
//!
//! Plain data and pure functions, no I/O. Client frames are decoded by hand from a
//! [`serde_json::Value`] so that every kind of bad input maps to its own stable error code.
//! Server frames are serialized once into a [`Frame`] and shared by every subscriber.
//!
//! The typed frames here are the single source of truth for the wire format: the browser
//! client's TypeScript declarations (`web/protocol.d.ts`) are generated from them by a unit
//! test, which fails when the committed file is stale.
//!
//! Most of this file's length is its tests of the whole protocol (decoding every frame kind
//! and building every server frame); the code above them is the error codes and re-exports.

mod client;
mod content;
mod ids;
mod server;
mod tools;

pub use client::*;
pub use content::{
    Content, ContentBlock, IMAGE_MEDIA_TYPES, ImageSource, MAX_BLOCKS, MAX_IMAGES, PayloadMessage,
    StoredPayload, strict_json,
};
pub use ids::{AgentId, Principal, Role, SessionId, valid_session_id};
pub use server::*;
pub use tools::{grants_whole_tool, valid_tool_pattern};

use serde::Serialize;

/// Longest accepted `agent_id`, in characters.
pub const MAX_AGENT_ID_CHARS: usize = 128;
/// Longest accepted principal name (a token's principal or a JWT's `sub`), in bytes.
pub const MAX_PRINCIPAL_BYTES: usize = 256;
/// Longest accepted `options.agent`, in characters.
pub const MAX_AGENT_NAME_CHARS: usize = 64;
/// Longest accepted `options.model`, in characters.
pub const MAX_MODEL_CHARS: usize = 64;
/// Longest accepted path (`options.cwd`, each of `options.add_dirs`), in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest accepted `options.system_prompt`, in bytes.
pub const MAX_SYSTEM_PROMPT_BYTES: usize = 64 << 10;
/// Most patterns in `options.allowed_tools` or `options.disallowed_tools`.
pub const MAX_TOOL_PATTERNS: usize = 64;
/// Longest accepted tool-name pattern, in characters.
pub const MAX_TOOL_PATTERN_CHARS: usize = 256;
/// Largest accepted `options.max_turns`.
pub const MAX_TURNS_LIMIT: u32 = 1000;
/// Highest spending cap anyone may set, in US dollars (more is taken for a mistake).
pub const MAX_CAP_USD: f64 = 1_000_000.0;
/// Most directories in `options.add_dirs`.
pub const MAX_ADD_DIRS: usize = 16;
/// Longest accepted `options.permission_mode`, in characters.
pub const MAX_MODE_CHARS: usize = 64;

/// Stable, snake_case error codes carried by `error` frames and REST errors.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize, utoipa::ToSchema,
)]
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
    /// An operation this conversation's agent can't do (`rewind` or `fork` of an Agent
    /// Client Protocol agent).
    Unsupported,
    /// A schedule whose timing or fields are not allowed (bad cron, `every_secs` 0, both or
    /// neither of them, a bad name or mode).
    InvalidSchedule,
    /// No schedule with that id exists (for this principal).
    UnknownSchedule,
    /// Another node of the cluster runs the conversation right now (or took it over from this
    /// one); try again there, or once it has stopped.
    OwnedElsewhere,
    /// The caller may not do this (HTTP 403): a route for the server's admins only, a
    /// conversation whose directory is no longer inside a project root the caller may use, or
    /// something the caller's role on a conversation shared with them does not allow.
    Forbidden,
    /// What was asked would change someone's work and was not done (HTTP 409): a merge with
    /// conflicts, or into a checkout with uncommitted changes.
    Conflict,
    /// No push subscription with that id exists (for this principal).
    UnknownSubscription,
    /// A search of conversations ran longer than the server allows and was stopped (HTTP
    /// 503); more or longer words find less and take less time.
    SearchTimeout,
    /// A turn would start over a spending cap (the principal's daily or monthly one, or the
    /// conversation's own) and did not run (HTTP 402); the message says which and by how much.
    BudgetExceeded,
    /// The agent runs on each principal's own credentials here and the caller has set none for
    /// it (HTTP 403); the message says which variables to set, and where.
    CredentialsRequired,
    /// No share link has that token: never made, revoked, or its secret is wrong (HTTP 404).
    UnknownLink,
    /// The share link expired or was used as many times as it may be (HTTP 410).
    LinkExpired,
}

/// Checks a spending cap someone sets: a number of US dollars from 0 to [`MAX_CAP_USD`].
///
/// # Errors
/// Says what is wrong with `usd`, naming it `what`.
pub fn check_cap(what: &str, usd: f64) -> Result<(), String> {
    if !usd.is_finite() || !(0.0..=MAX_CAP_USD).contains(&usd) {
        return Err(format!(
            "`{what}` must be a number of US dollars from 0 to {MAX_CAP_USD}"
        ));
    }
    Ok(())
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
            ErrorCode::Unsupported => "unsupported",
            ErrorCode::InvalidSchedule => "invalid_schedule",
            ErrorCode::UnknownSchedule => "unknown_schedule",
            ErrorCode::OwnedElsewhere => "owned_elsewhere",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::Conflict => "conflict",
            ErrorCode::UnknownSubscription => "unknown_subscription",
            ErrorCode::SearchTimeout => "search_timeout",
            ErrorCode::BudgetExceeded => "budget_exceeded",
            ErrorCode::CredentialsRequired => "credentials_required",
            ErrorCode::UnknownLink => "unknown_link",
            ErrorCode::LinkExpired => "link_expired",
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

/// The first `n` Unicode scalar values of `s`.
pub fn truncate_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod typescript;

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    const LIMITS: DecodeLimits = DecodeLimits {
        max_content_bytes: 1024,
    };

    fn code(text: &str) -> ErrorCode {
        decode(text, LIMITS).unwrap_err().code
    }

    /// Numbers in an approved tool input reach the agent as the client wrote them. Found by
    /// fuzzing: a long number was read one unit off in its last binary place, so the frame,
    /// written out and read again, no longer meant the same.
    #[test]
    fn numbers_in_an_approved_input_are_kept_exactly() {
        let long = "881111111111111111111111111111111111111111111111111111111111110000000000000000000000015374090981363322423";
        let text = format!(
            r#"{{"type":"permission_response","agent_id":"a","request_id":"4f2c","behavior":"allow","updated_input":{{"n":{long},"f":8.811111111111109e+104}}}}"#
        );
        let frame = decode(&text, LIMITS).unwrap();
        let ClientFrame::PermissionResponse {
            decision:
                PermissionDecision::Allow {
                    updated_input: Some(input),
                    ..
                },
            ..
        } = &frame
        else {
            panic!("{frame:?}");
        };
        assert_eq!(input["n"].as_f64(), Some(long.parse::<f64>().unwrap()));
        assert_eq!(input["f"].as_f64(), Some(8.811111111111109e104));
        let again = serde_json::to_string(&frame).unwrap();
        assert_eq!(decode(&again, LIMITS).unwrap(), frame);
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
                content: Content::Text("hi".into()),
                client_msg_id: Some("c1".into()),
                options: ChatOptions {
                    model: Some("m1".into()),
                    ..ChatOptions::default()
                },
                sender: None,
            })
        );
        assert_eq!(
            decode(r#"{"type":"subscribe","agent_id":"x"}"#, LIMITS).unwrap(),
            ClientFrame::Subscribe {
                agent_id: "x".into(),
                since_seq: 0,
                warm: false,
            }
        );
        assert_eq!(
            decode(r#"{"type":"subscribe","agent_id":"x","warm":true}"#, LIMITS).unwrap(),
            ClientFrame::Subscribe {
                agent_id: "x".into(),
                since_seq: 0,
                warm: true,
            }
        );
        for bad in [r#""yes""#, "1", "[]", "{}"] {
            let err = decode(
                &format!(r#"{{"type":"subscribe","agent_id":"x","warm":{bad}}}"#),
                LIMITS,
            )
            .unwrap_err();
            assert_eq!(err.code, ErrorCode::BadFrame, "{bad}");
            assert_eq!(err.message, "`warm` must be a boolean");
            assert_eq!(err.agent_id.as_deref(), Some("x"));
        }
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
    fn agent_options_are_checked_one_by_one() {
        let chat = |options: &str| {
            decode(
                &format!(r#"{{"type":"chat","agent_id":"a","content":"hi","options":{options}}}"#),
                LIMITS,
            )
        };
        for bad in [
            r#"{"cwd":"relative/dir"}"#,
            r#"{"cwd":""}"#,
            r#"{"cwd":"/a\nb"}"#,
            r#"{"cwd":7}"#,
            r#"{"system_prompt":""}"#,
            r#"{"system_prompt":"a\u0000b"}"#,
            r#"{"allowed_tools":"Read"}"#,
            r#"{"allowed_tools":["-Read"]}"#,
            r#"{"allowed_tools":["Read,Write"]}"#,
            r#"{"allowed_tools":["Bash(git"]}"#,
            r#"{"disallowed_tools":["Bash(a)(b)"]}"#,
            r#"{"disallowed_tools":[""]}"#,
            r#"{"disallowed_tools":["Bash()"]}"#,
            r#"{"max_turns":0}"#,
            r#"{"max_turns":1001}"#,
            r#"{"max_turns":"3"}"#,
            r#"{"max_turns":2.5}"#,
            r#"{"budget_usd":-1}"#,
            r#"{"budget_usd":"5"}"#,
            r#"{"budget_usd":1e7}"#,
            r#"{"add_dirs":["rel"]}"#,
            r#"{"add_dirs":"/abs"}"#,
            r#"{"auto_continue":"true"}"#,
            r#"{"auto_continue":1}"#,
            r#"{"auto_continue":[true]}"#,
            r#"{"auto_continue":{}}"#,
        ] {
            let err = chat(bad).expect_err(bad);
            assert_eq!(err.code, ErrorCode::InvalidOptions, "{bad}");
        }
        for (text, on) in [("true", Some(true)), ("false", Some(false)), ("null", None)] {
            let ClientFrame::Chat(ok) = chat(&format!(r#"{{"auto_continue":{text}}}"#)).unwrap()
            else {
                panic!("a chat")
            };
            assert_eq!(ok.options.auto_continue, on, "{text}");
        }
        let too_many: Vec<String> = (0..65).map(|i| format!("\"T{i}\"")).collect();
        assert!(chat(&format!(r#"{{"allowed_tools":[{}]}}"#, too_many.join(","))).is_err());
        let ClientFrame::Chat(ok) = chat(
            r#"{"cwd":"/p","system_prompt":"-x","allowed_tools":["mcp__srv__*","Bash(npm run test:*)"],"disallowed_tools":[],"max_turns":1000,"add_dirs":[]}"#,
        )
        .unwrap() else {
            panic!("a chat")
        };
        assert_eq!(ok.options.system_prompt.as_deref(), Some("-x"));
        assert_eq!(ok.options.disallowed_tools, Some(vec![]));
        assert_eq!(ok.options.max_turns, Some(1000));
    }

    #[test]
    fn launch_options_take_what_a_chat_sets() {
        let stored = LaunchOptions {
            system_prompt: Some("old".into()),
            allowed_tools: vec!["Read".into()],
            max_turns: Some(2),
            ..LaunchOptions::default()
        };
        let chat = ChatOptions {
            allowed_tools: Some(vec![]),
            add_dirs: Some(vec!["/d".into()]),
            ..ChatOptions::default()
        };
        let next = stored.updated(&chat);
        assert_eq!(next.system_prompt.as_deref(), Some("old"));
        assert!(next.allowed_tools.is_empty(), "[] clears");
        assert_eq!(next.max_turns, Some(2));
        assert_eq!(next.add_dirs, ["/d"]);
        assert_eq!(
            chat.launch_options(),
            [LaunchOption::AddDirs],
            "[] sets none"
        );
        assert_eq!(
            next.named(),
            [
                LaunchOption::SystemPrompt,
                LaunchOption::MaxTurns,
                LaunchOption::AddDirs
            ]
        );
        let kept = next.only(&[LaunchOption::MaxTurns].into());
        assert_eq!(kept.named(), [LaunchOption::MaxTurns]);
        assert_eq!(kept.max_turns, Some(2));
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

    /// A permission mode is decoded by its form only (the agent knows its own ids): CLI names
    /// and other agents' ids pass, flag-like, path-like, overlong or odd ones don't.
    #[test]
    fn permission_modes_are_checked_by_form() {
        let chat = |mode: Value| {
            let frame = json!({"type": "chat", "agent_id": "a", "content": "hi",
                "client_msg_id": "m", "options": {"permission_mode": mode}});
            decode(&frame.to_string(), LIMITS)
        };
        let m64 = "m".repeat(MAX_MODE_CHARS);
        for good in [
            "acceptEdits",
            "yolo",
            "autoEdit",
            "read-only",
            "full_access",
            "v2.mode:x",
            &m64,
        ] {
            let Ok(ClientFrame::Chat(ok)) = chat(json!(good)) else {
                panic!("{good} decodes");
            };
            assert_eq!(ok.options.permission_mode.as_deref(), Some(good));
        }
        let m65 = "m".repeat(MAX_MODE_CHARS + 1);
        let bad = [
            json!("-x"),
            json!("--dangerously-skip-permissions"),
            json!(".hidden"),
            json!("_x"),
            json!("../x"),
            json!("a/b"),
            json!("a b"),
            json!("plan\n"),
            json!("mod\u{e9}"),
            json!(""),
            json!(m65),
            json!(7),
            json!(["plan"]),
        ];
        for bad in bad {
            let err = chat(bad.clone()).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidOptions, "{bad}");
            assert_eq!(err.agent_id.as_deref(), Some("a"));
            assert_eq!(err.client_msg_id.as_deref(), Some("m"));
        }
    }

    #[test]
    fn options_agent_is_a_plain_name() {
        let chat = |agent: &str| {
            let frame = json!({"type": "chat", "agent_id": "a", "content": "hi",
                "options": {"agent": serde_json::from_str::<Value>(agent).unwrap()}});
            decode(&frame.to_string(), LIMITS)
        };
        let Ok(ClientFrame::Chat(ok)) = chat("\"codex-acp\"") else {
            panic!("a plain name decodes");
        };
        assert_eq!(ok.options.agent.as_deref(), Some("codex-acp"));
        let long = format!("\"{}\"", "a".repeat(MAX_AGENT_NAME_CHARS + 1));
        let bad = [
            "\"\"", "\"../x\"", "\"-x\"", "\".x\"", "\"a/b\"", "\"a b\"", "7", "[]",
        ];
        for bad in bad.iter().copied().chain([long.as_str()]) {
            let err = chat(bad).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidOptions, "{bad}");
            assert_eq!(err.agent_id.as_deref(), Some("a"));
        }
    }

    #[test]
    fn serialized_client_frames_decode_to_themselves() {
        let frames = [
            ClientFrame::Chat(Chat {
                agent_id: "a".into(),
                content: Content::Text("hi".into()),
                client_msg_id: Some("c".into()),
                options: ChatOptions {
                    model: Some("m".into()),
                    permission_mode: Some("plan".into()),
                    cwd: Some("/srv/project".into()),
                    system_prompt: Some("-- be brief".into()),
                    allowed_tools: Some(vec!["Read".into(), "Bash(git log:*)".into()]),
                    disallowed_tools: Some(vec![]),
                    max_turns: Some(3),
                    add_dirs: Some(vec!["/srv/other".into()]),
                    agent: Some("gemini".into()),
                    worktree: Some(Box::new(WorktreeOption::From {
                        base: Some("main".into()),
                        branch: None,
                    })),
                    budget_usd: Some(Box::new(Usd(2.5))),
                    auto_continue: Some(true),
                },
                sender: None,
            }),
            ClientFrame::Chat(Chat {
                agent_id: "a".into(),
                content: Content::Text("hi".into()),
                client_msg_id: None,
                options: ChatOptions::default(),
                sender: None,
            }),
            ClientFrame::Interrupt {
                agent_id: "a".into(),
            },
            ClientFrame::Ping { ts: Some(7.into()) },
            ClientFrame::Ping { ts: None },
            ClientFrame::Subscribe {
                agent_id: "a".into(),
                since_seq: 4,
                warm: false,
            },
            ClientFrame::Subscribe {
                agent_id: "a".into(),
                since_seq: 0,
                warm: true,
            },
            ClientFrame::Unsubscribe {
                agent_id: "a".into(),
            },
            ClientFrame::PermissionResponse {
                agent_id: "a".into(),
                request_id: "r".into(),
                decision: PermissionDecision::Allow {
                    updated_input: Some(serde_json::json!({"command": "ls"})),
                    always: false,
                },
            },
            ClientFrame::PermissionResponse {
                agent_id: "a".into(),
                request_id: "r".into(),
                decision: PermissionDecision::Allow {
                    updated_input: None,
                    always: true,
                },
            },
            ClientFrame::PermissionResponse {
                agent_id: "a".into(),
                request_id: "r".into(),
                decision: PermissionDecision::Deny {
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
            code(r#"{"type":"chat","agent_id":"a","content":"x","options":{"workdir":"/"}}"#),
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
        let f = session_frame(
            tag,
            "assistant",
            Some(3),
            "t",
            r#"{"type":"assistant"}"#,
            None,
        );
        let v: Value = serde_json::from_str(f.text.as_str()).unwrap();
        assert_eq!(v["message"]["type"], "assistant");
        assert_eq!(v["seq"], 3);
        assert!(v.get("turn_cost_usd").is_none());
        let f = session_frame(
            tag,
            "result",
            Some(5),
            "t",
            r#"{"type":"result"}"#,
            Some(0.25),
        );
        let v: Value = serde_json::from_str(f.text.as_str()).unwrap();
        assert_eq!(v["turn_cost_usd"], 0.25);
        let f = session_frame(
            tag,
            "status",
            Some(4),
            "t",
            r#"{"status":"rewound","dropped_after_seq":2}"#,
            None,
        );
        let v: Value = serde_json::from_str(f.text.as_str()).unwrap();
        assert_eq!(v["status"], "rewound");
        assert_eq!(v["dropped_after_seq"], 2);
        assert_eq!(v["agent_id"], "a");
        // Ids with escapes and characters of every width come out as they went in.
        let agent_id = "ä \"q\" \\ ☃\u{1F600}\n";
        let tag = Tag {
            agent_id,
            session_id: "s",
        };
        let f = session_frame(tag, "user", Some(1), "t", r#"{"type":"user"}"#, None);
        let v: Value = serde_json::from_str(f.text.as_str()).unwrap();
        assert_eq!(
            (v["agent_id"].as_str(), &v["message"]),
            (Some(agent_id), &serde_json::json!({"type": "user"}))
        );
    }

    #[test]
    fn spliced_payloads_never_set_header_keys() {
        use serde_json::json;
        let tag = Tag {
            agent_id: "a",
            session_id: "s",
        };
        for payload in [
            r#"{"status":"x","agent_id":"victim","session_id":"v","seq":99,"message_type":"result","timestamp":"z","turn_cost_usd":9}"#,
            r#"{"status":"x","agent_\u0069d":"victim","s\u0065q":99}"#,
        ] {
            let f = session_frame(tag, "status", Some(4), "t", payload, None);
            let text = f.text.as_str();
            assert!(!text.contains("turn_cost_usd"), "{text}");
            for key in ["message_type", "agent_id", "session_id", "seq", "timestamp"] {
                assert_eq!(
                    text.matches(&format!("\"{key}\"")).count(),
                    1,
                    "{key}: {text}"
                );
            }
            let v: Value = serde_json::from_str(text).unwrap();
            assert_eq!(
                (
                    &v["agent_id"],
                    &v["session_id"],
                    &v["seq"],
                    &v["message_type"]
                ),
                (&json!("a"), &json!("s"), &json!(4), &json!("status")),
            );
            assert_eq!(v["timestamp"], "t");
            assert_eq!(v["status"], "x");
        }
        // Our own payloads are spliced verbatim.
        let f = session_frame(
            tag,
            "status",
            Some(6),
            "t",
            r#"{"status":"rewound","dropped_after_seq":2}"#,
            None,
        );
        assert!(
            f.text
                .as_str()
                .ends_with(r#","status":"rewound","dropped_after_seq":2}"#)
        );
        // Nested keys are the payload's own business.
        let f = session_frame(
            tag,
            "permission_request",
            Some(5),
            "t",
            r#"{"request_id":"r","input":{"seq":1,"agent_id":"b"}}"#,
            None,
        );
        let v: Value = serde_json::from_str(f.text.as_str()).unwrap();
        assert_eq!(v["input"], json!({"seq": 1, "agent_id": "b"}));
        assert_eq!((&v["agent_id"], &v["seq"]), (&json!("a"), &json!(5)));
    }

    #[test]
    fn truncates_on_scalar_values() {
        assert_eq!(truncate_chars("héllo", 2), "hé");
        assert_eq!(truncate_chars("hi", 5), "hi");
    }
}
