//! The ids of a conversation, each checked once where it enters the server and carried as its
//! own type from there on: [`AgentId`] (the client's routing key), [`SessionId`] (ours) and
//! the [`Principal`] whose namespace both live in.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{ErrorCode, FrameError, MAX_PRINCIPAL_BYTES, valid_agent_id};

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

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the id of a conversation shared with its user (see
    /// [`super::is_share_alias`]), not one of their own.
    pub fn is_share_alias(&self) -> bool {
        super::is_share_alias(&self.0)
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

/// What the store reads back is checked again, so a row changed behind the server's back
/// fails to decode instead of becoming an id.
impl TryFrom<String> for AgentId {
    type Error = FrameError;
    fn try_from(id: String) -> Result<Self, FrameError> {
        AgentId::parse(id)
    }
}

/// Literal ids in unit tests.
#[cfg(test)]
impl From<&str> for AgentId {
    fn from(id: &str) -> Self {
        AgentId::parse(id).expect("a valid agent_id")
    }
}

/// Whether `id` has the form of a session id: a UUID in its lowercase hyphenated form (what
/// the server mints, and what the Claude CLI names its sessions).
pub fn valid_session_id(id: &str) -> bool {
    uuid::Uuid::try_parse(id).is_ok_and(|u| u.hyphenated().to_string() == id)
}

/// A conversation's `session_id`: the server's own id of it, a UUID in its lowercase
/// hyphenated form. Minted when the conversation is created (or taken from the CLI session an
/// import copies); it names the conversation's workspace directory and is what a new agent is
/// first asked to use as its own session id. Not the agent's reported id (`sdk_session_id`),
/// which may differ and is the agent's to choose.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct SessionId(String);

impl SessionId {
    /// A new id: a random UUID (v4).
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        SessionId(uuid::Uuid::new_v4().hyphenated().to_string())
    }

    /// Checks `id`.
    ///
    /// # Errors
    /// `invalid_request` when it is not a UUID in its lowercase hyphenated form.
    pub fn parse(id: impl Into<String>) -> Result<Self, FrameError> {
        let id = id.into();
        if valid_session_id(&id) {
            Ok(SessionId(id))
        } else {
            Err(FrameError::new(
                ErrorCode::InvalidRequest,
                "a session id must be a UUID in its lowercase hyphenated form",
            ))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for SessionId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for SessionId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl AsRef<std::path::Path> for SessionId {
    fn as_ref(&self) -> &std::path::Path {
        std::path::Path::new(&self.0)
    }
}

impl Borrow<str> for SessionId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<SessionId> for String {
    fn from(id: SessionId) -> String {
        id.0
    }
}

impl PartialEq<str> for SessionId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for SessionId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// What the store reads back is checked again (see [`AgentId`]'s).
impl TryFrom<String> for SessionId {
    type Error = FrameError;
    fn try_from(id: String) -> Result<Self, FrameError> {
        SessionId::parse(id)
    }
}

/// Who acts: the principal a credential was checked for (an API token's configured name, a
/// JWT's `sub` after its prefix, or the one local principal with authentication off). Every
/// conversation lives in its principal's namespace. Made from a credential, or read from
/// another node, only through [`Principal::checked`]; names the config and the store already
/// hold come back through [`Principal::new`] and `From<String>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Principal(Arc<str>);

/// Read from the wire (another node's forward), it is checked as a credential's is.
impl<'de> Deserialize<'de> for Principal {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Principal::checked(&name).ok_or_else(|| {
            serde::de::Error::custom(format!("a principal is 1-{MAX_PRINCIPAL_BYTES} bytes"))
        })
    }
}

impl Principal {
    /// A principal named by a credential: non-empty and at most [`MAX_PRINCIPAL_BYTES`] bytes.
    pub fn checked(name: &str) -> Option<Self> {
        (!name.is_empty() && name.len() <= MAX_PRINCIPAL_BYTES).then(|| Principal(name.into()))
    }

    /// A principal the server already knows by `name` (a stored row's, a configured one's).
    pub fn new(name: &str) -> Self {
        Principal(name.into())
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for Principal {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for Principal {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Principal {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

/// A name the store read back: it was a principal when it was stored.
impl From<String> for Principal {
    fn from(name: String) -> Self {
        Principal(name.into())
    }
}

/// A name the server already knows as a principal (a configured one, a test's).
impl From<&str> for Principal {
    fn from(name: &str) -> Self {
        Principal(name.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0b6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f00";

    #[test]
    fn a_session_id_is_a_lowercase_hyphenated_uuid() {
        assert_eq!(SessionId::parse(ID).unwrap(), ID);
        let minted = SessionId::new();
        assert_eq!(SessionId::parse(minted.as_str()).unwrap(), minted);
        assert_ne!(SessionId::new(), minted, "each one is new");
        assert_eq!(
            uuid::Uuid::parse_str(&minted).unwrap().get_version_num(),
            4,
            "minted ids are random UUIDs"
        );
        for bad in [
            "",
            "0B6C3C1E-4A43-4A53-9D5C-3A3C7D2C1F00",
            "0b6c3c1e4a434a539d5c3a3c7d2c1f00",
            "{0b6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f00}",
            "urn:uuid:0b6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f00",
            " 0b6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f00",
            "0b6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f00\n",
            "0b6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f0",
            "-rf",
            "--session-id=0b6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f00",
            "../x",
            "../0b6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f00",
            "0b6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f00/..",
            "0b6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f00\0",
            "0b6c3c1e-4a43-4a53-9d5c\x003a3c7d2c1f00",
            &"a".repeat(129),
            &format!("{ID}{}", "0".repeat(129 - ID.len())),
        ] {
            let err = SessionId::parse(bad).expect_err(bad);
            assert_eq!(err.code, ErrorCode::InvalidRequest, "{bad:?}");
            assert!(SessionId::try_from(bad.to_owned()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ids_read_back_are_checked_again() {
        assert_eq!(
            AgentId::try_from("chat-1".to_owned()).unwrap(),
            AgentId::from("chat-1")
        );
        for bad in ["", "-rf x", "../x", "a\0b", &"a".repeat(129)] {
            let err = AgentId::try_from(bad.to_owned()).expect_err(bad);
            assert_eq!(err.code, ErrorCode::InvalidAgentId, "{bad:?}");
        }
    }

    #[test]
    fn ids_serialize_as_their_text() {
        let id = SessionId::parse(ID).unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), format!("\"{ID}\""));
        assert_eq!(id.to_string(), ID);
        assert_eq!(String::from(id), ID);
    }

    #[test]
    fn principals_are_checked_where_they_come_in() {
        use super::{MAX_PRINCIPAL_BYTES, Principal};
        assert!(Principal::checked("").is_none());
        assert!(Principal::checked(&"p".repeat(MAX_PRINCIPAL_BYTES + 1)).is_none());
        let longest = "p".repeat(MAX_PRINCIPAL_BYTES);
        assert_eq!(Principal::checked(&longest).unwrap(), longest.as_str());
        let read: Principal = serde_json::from_str("\"alice\"").unwrap();
        assert_eq!(read, "alice");
        assert!(serde_json::from_str::<Principal>("\"\"").is_err());
        let long = format!("\"{}\"", "p".repeat(MAX_PRINCIPAL_BYTES + 1));
        assert!(serde_json::from_str::<Principal>(&long).is_err());
    }
}

/// What a principal a conversation is shared with may do with it. The owner may do anything.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Follow it, read its history, export and fork it (the fork is the viewer's own).
    Viewer,
    /// Also chat, interrupt, answer permission prompts and rewind.
    Editor,
}

impl Role {
    /// How it is stored and sent.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Editor => "editor",
        }
    }

    /// The role stored as `text`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "viewer" => Some(Role::Viewer),
            "editor" => Some(Role::Editor),
            _ => None,
        }
    }
}
