//! The session core's error: a stable code and what happened, naming no request; the edge
//! that received the request makes it an error frame or an HTTP error, attaching the request's
//! own ids once. Also the errors that more than one part of the core gives.

use crate::protocol::{ErrorCode, FrameError};
use crate::store::StoreError;

/// A typed failure of the session core.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionError {
    /// Stable code.
    pub code: ErrorCode,
    /// Human-readable explanation.
    pub message: String,
    /// The files concerned, for a `conflict` (a merge that would conflict in them).
    pub paths: Vec<String>,
}

impl SessionError {
    /// An error with its code and explanation.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        SessionError {
            code,
            message: message.into(),
            paths: Vec::new(),
        }
    }

    /// The `error` frame that answers a client's frame for conversation `agent_id` (with its
    /// `client_msg_id`, for a chat).
    pub fn into_frame(self, agent_id: &str, client_msg_id: Option<String>) -> FrameError {
        FrameError {
            code: self.code,
            message: self.message,
            agent_id: Some(agent_id.to_owned()),
            client_msg_id,
        }
    }
}

/// What the core gets from the protocol's checks (an id it parses, a stored chat it decodes):
/// their code and explanation.
impl From<FrameError> for SessionError {
    fn from(err: FrameError) -> Self {
        SessionError::new(err.code, err.message)
    }
}

pub(super) fn unknown_agent(agent_id: &str) -> SessionError {
    SessionError::new(
        ErrorCode::UnknownAgent,
        format!("no conversation with agent_id `{agent_id}`"),
    )
}

/// A failed store call that concerns no one conversation, as a typed error.
pub(super) fn store_failure(err: StoreError) -> SessionError {
    if let StoreError::SearchTimeout(_) = err {
        return SessionError::new(ErrorCode::SearchTimeout, err.to_string());
    }
    tracing::warn!(error = %err, "store unavailable");
    SessionError::new(
        ErrorCode::StoreUnavailable,
        "the store is unavailable; try again",
    )
}

pub(super) fn store_error(err: StoreError, agent_id: &str) -> SessionError {
    match err {
        StoreError::UnknownSession => unknown_agent(agent_id),
        StoreError::InvalidSeq(detail) => SessionError::new(ErrorCode::InvalidSeq, detail),
        StoreError::AgentExists => SessionError::new(
            ErrorCode::AgentExists,
            format!("a conversation with agent_id `{agent_id}` already exists"),
        ),
        StoreError::Importing => SessionError::new(
            ErrorCode::Busy,
            format!("conversation `{agent_id}` is being imported; try again once it is done"),
        ),
        StoreError::OwnedElsewhere(node) => SessionError::new(
            ErrorCode::OwnedElsewhere,
            format!(
                "conversation `{agent_id}` is live on node `{node}`; send it there, or again once that node has stopped"
            ),
        ),
        StoreError::Fenced => moved(agent_id),
        err @ (StoreError::Unavailable(_) | StoreError::SearchTimeout(_)) => store_failure(err),
    }
}

/// The answer to a command for a conversation that another node took over from this one.
pub(super) fn moved(agent_id: &str) -> SessionError {
    SessionError::new(
        ErrorCode::OwnedElsewhere,
        format!("conversation `{agent_id}` was taken over by another node; send it again"),
    )
}

pub(super) fn stopped() -> SessionError {
    SessionError::new(ErrorCode::BackendUnavailable, "the conversation stopped")
}
