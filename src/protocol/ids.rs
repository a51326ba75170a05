//! `AgentId`: a client's routing key for a conversation, checked once where it enters the
//! server (a frame, a URL, a schedule, an import) and carried as its own type from there on.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

use serde::Serialize;

use super::{ErrorCode, FrameError, valid_agent_id};

/// A conversation's `agent_id`: 1–128 characters of `[A-Za-z0-9._:-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct AgentId(String);

impl AgentId {
    /// Checks `id`.
    ///
    /// # Errors
    /// `invalid_agent_id` when it is not 1–128 characters of `[A-Za-z0-9._:-]`.
    pub fn parse(id: impl Into<String>) -> Result<Self, FrameError> {
        let id = id.into();
        if valid_agent_id(&id) {
            Ok(AgentId(id))
        } else {
            Err(FrameError::new(
                ErrorCode::InvalidAgentId,
                "`agent_id` must be 1-128 characters of [A-Za-z0-9._:-]",
            ))
        }
    }

    /// An id the store holds: it was checked when it was stored.
    pub fn stored(id: String) -> Self {
        AgentId(id)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for AgentId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for AgentId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for AgentId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<AgentId> for String {
    fn from(id: AgentId) -> String {
        id.0
    }
}

impl PartialEq<str> for AgentId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for AgentId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// Literal ids in unit tests.
#[cfg(test)]
impl From<&str> for AgentId {
    fn from(id: &str) -> Self {
        AgentId::parse(id).expect("a valid agent_id")
    }
}
