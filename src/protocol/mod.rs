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
//! This file holds the error codes, the limits and the re-exports; the tests of the whole
//! protocol (decoding every frame kind, building every server frame) are in `tests.rs`.

mod client;
mod content;
mod control;
mod ids;
mod options;
mod server;
mod tools;

pub use client::*;
pub use content::{
    Content, ContentBlock, IMAGE_MEDIA_TYPES, ImageSource, MAX_BLOCKS, MAX_IMAGES, PayloadMessage,
    StoredPayload, strict_json,
};
pub use control::*;
pub use ids::{AgentId, Principal, Role, SessionId, valid_session_id};
pub use options::*;
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
mod tests;
