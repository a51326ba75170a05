//! A conversation's history for any transport: the list of conversations, pages of stored
//! frames, renaming, and export and import as JSON Lines.
//!
//! Both directions stream: an export is read from the store a page at a time while it is
//! sent, and an import is parsed line by line as it arrives and stored in bounded chunks, each
//! one ordinary append in the writer's queue, so other conversations' writes go on between
//! them. An import's conversation stays invisible until its last chunk is stored and is
//! removed if anything fails (`import.rs`). Imports and exports are capped per principal.

use std::borrow::Cow;
use std::sync::Arc;

use futures_util::Stream;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;

use super::errors::{store_error, store_failure, unknown_agent};
use super::replay::stored_frame;
use super::{Conversation, Manager};
use crate::limits::{QuotaExceeded, QuotaPermit};
use crate::protocol::{AgentId, ErrorCode, Frame, Principal, SessionId, StoredPayload};
use crate::session::SessionError;
use crate::store::{NewSession, PageSize, SessionPage, SessionQuery, SessionRecord};

mod import;

pub(super) use import::{ImportEnd, Lines};

/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// Stored messages read per page while exporting.
const EXPORT_PAGE: u32 = 1000;

/// One line of an export (JSON Lines), and of an import.
#[derive(Debug, Serialize, ToSchema)]
pub struct ExportLine {
    /// Position in the conversation.
    pub seq: i64,
    /// `user`, `system`, `assistant`, `result`, `status`, ...
    pub message_type: String,
    /// `user` or `assistant`, for messages that have a role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The message's text, for messages that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// The stored JSON object verbatim.
    #[schema(value_type = Object)]
    pub payload: Box<RawValue>,
}

impl ExportLine {
    /// The line of a stored message.
    fn new(seq: i64, message_type: &str, payload: &str) -> Self {
        let message = serde_json::from_str::<StoredPayload>(payload)
            .ok()
            .and_then(|p| p.message);
        let role = message
            .as_ref()
            .and_then(|m| m.role.as_deref().map(str::to_owned));
        let content = ContentText::of(message.and_then(|m| m.content)).text;
        let payload =
            RawValue::from_string(payload.to_owned()).unwrap_or_else(|_| RawValue::NULL.to_owned());
        ExportLine {
            seq,
            message_type: message_type.to_owned(),
            role,
            content,
            payload,
        }
    }
}

/// What a message's `content` says: its text (a string, or its `text` blocks joined) and
/// whether it holds a tool result. Read one block at a time, never as a tree.
#[derive(Default)]
pub(super) struct ContentText {
    pub text: Option<String>,
    pub tool_result: bool,
}

impl ContentText {
    /// What `content` says; nothing when it is absent or neither a string nor a list.
    pub(super) fn of(content: Option<&RawValue>) -> Self {
        content
            .and_then(|c| serde_json::from_str(c.get()).ok())
            .unwrap_or_default()
    }
}

/// The fields of a content block that [`ContentText`] reads.
#[derive(Deserialize)]
struct BlockFields<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

impl<'de> Deserialize<'de> for ContentText {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Reader;
        impl<'de> serde::de::Visitor<'de> for Reader {
            type Value = ContentText;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a list of blocks")
            }
            fn visit_str<E>(self, text: &str) -> Result<ContentText, E> {
                Ok(ContentText {
                    text: Some(text.to_owned()),
                    tool_result: false,
                })
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut blocks: A,
            ) -> Result<ContentText, A::Error> {
                let mut read = ContentText::default();
                while let Some(block) = blocks.next_element::<&RawValue>()? {
                    // A block that is not an object of this shape says nothing.
                    let Ok(block) = serde_json::from_str::<BlockFields>(block.get()) else {
                        continue;
                    };
                    match block.kind.as_deref() {
                        Some("tool_result") => read.tool_result = true,
                        Some("text") => {
                            if let Some(text) = block.text {
                                read.text.get_or_insert_default().push_str(&text);
                            }
                        }
                        _ => {}
                    }
                }
                Ok(read)
            }
        }
        deserializer.deserialize_any(Reader)
    }
}

/// The `limit_exceeded` of a principal's quota of `what` running at once.
fn quota_error(exceeded: QuotaExceeded, what: &str) -> SessionError {
    let max = match exceeded {
        QuotaExceeded::Principal(max) | QuotaExceeded::Total(max) => max,
    };
    SessionError::new(
        ErrorCode::LimitExceeded,
        format!("at most {max} {what} at once per principal; try again when one is done"),
    )
}

/// A malformed request about history (`invalid_request`).
pub(super) fn invalid(message: impl Into<String>) -> SessionError {
    SessionError::new(ErrorCode::InvalidRequest, message)
}

impl Manager {
    /// Looks up a conversation of `principal`.
    ///
    /// # Errors
    /// `store_unavailable`.
    pub async fn find(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
    ) -> Result<Option<SessionRecord>, SessionError> {
        self.shared
            .store
            .find_session(principal, agent_id)
            .await
            .map_err(|e| store_error(e, agent_id))
    }

    /// A conversation of `principal` that exists.
    ///
    /// # Errors
    /// `unknown_agent` or `store_unavailable`.
    pub async fn get(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
    ) -> Result<SessionRecord, SessionError> {
        self.find(principal, agent_id)
            .await?
            .ok_or_else(|| unknown_agent(agent_id))
    }

    /// A page of `principal`'s conversations, newest activity first. A search takes one of the
    /// principal's places for searches while it runs.
    ///
    /// # Errors
    /// `limit_exceeded` when the principal runs as many searches as it may,
    /// `search_timeout` for a search stopped at its time limit, `store_unavailable`.
    pub async fn list(
        &self,
        principal: &Principal,
        query: &SessionQuery,
    ) -> Result<SessionPage, SessionError> {
        let _searching = match query.search {
            Some(_) => Some(
                self.shared
                    .searches
                    .try_acquire(principal)
                    .map_err(|exceeded| quota_error(exceeded, "searches"))?,
            ),
            None => None,
        };
        self.shared
            .store
            .list_sessions(principal, query)
            .await
            .map_err(store_failure)
    }

    /// Up to `limit` stored frames after `after_seq` (fewer when they hold more than
    /// `session.page_bytes`, but at least one), each exactly as a subscriber gets it, and
    /// whether more follow.
    ///
    /// # Errors
    /// `unknown_agent` or `store_unavailable`.
    pub async fn messages(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
        after_seq: i64,
        limit: u32,
    ) -> Result<(Vec<Frame>, bool), SessionError> {
        let record = self.get(principal, agent_id).await?;
        let conversation = Conversation::from_record(&record);
        let size = PageSize {
            rows: limit,
            bytes: self.shared.config.session.page_bytes,
        };
        let page = self
            .shared
            .store
            .messages_after(record.row, after_seq, size)
            .await
            .map_err(|e| store_error(e, agent_id))?;
        let frames = page
            .rows
            .iter()
            .map(|row| stored_frame(&conversation, row))
            .collect();
        Ok((frames, page.more))
    }

    /// Gives a conversation a new title (1 to [`MAX_TITLE_CHARS`] characters, trimmed).
    ///
    /// # Errors
    /// `invalid_request`, `unknown_agent` or `store_unavailable`.
    pub async fn rename(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
        title: &str,
    ) -> Result<SessionRecord, SessionError> {
        let title = title.trim();
        if title.is_empty() || title.chars().count() > MAX_TITLE_CHARS {
            return Err(invalid(format!(
                "`title` must be 1-{MAX_TITLE_CHARS} characters"
            )));
        }
        let record = self.get(principal, agent_id).await?;
        self.shared
            .store
            .rename_session(record.row, title)
            .await
            .map_err(|e| store_error(e, agent_id))?;
        self.get(principal, agent_id).await
    }

    /// A conversation as JSON Lines, one stored message a line, read from the store a page at
    /// a time while the lines are sent.
    ///
    /// # Errors
    /// `unknown_agent` or `store_unavailable` before the first line; a later store failure
    /// ends the stream with an error.
    pub async fn export(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
    ) -> Result<impl Stream<Item = Result<String, SessionError>> + Send + 'static, SessionError>
    {
        let transfer = self.acquire_transfer(principal)?;
        let record = self.get(principal, agent_id).await?;
        let store = self.shared.store.clone();
        let size = PageSize {
            rows: EXPORT_PAGE,
            bytes: self.shared.config.session.page_bytes,
        };
        let agent_id = agent_id.to_owned();
        // The stream holds the principal's transfer place until it is done or dropped.
        let transfer = Arc::new(transfer);
        Ok(futures_util::stream::unfold(Some(0), move |after| {
            let store = store.clone();
            let agent_id = agent_id.clone();
            let _transfer = transfer.clone();
            async move {
                let after = after?;
                match store.messages_after(record.row, after, size).await {
                    Err(err) => Some((Err(store_error(err, &agent_id)), None)),
                    Ok(rows) if rows.rows.is_empty() => None,
                    Ok(rows) => {
                        let more = rows.more;
                        let last = rows.rows.last().map(|r| r.seq);
                        let mut page = String::new();
                        for row in &rows.rows {
                            let line = ExportLine::new(row.seq, &row.message_type, &row.payload);
                            page.push_str(&serde_json::to_string(&line).expect("serializes"));
                            page.push('\n');
                        }
                        Some((Ok(page), if more { last } else { None }))
                    }
                }
            }
        }))
    }

    /// Takes one of the principal's places for imports and exports (CLI sessions' listings
    /// and syncs included: they read whole transcripts), or fails with `limit_exceeded`.
    pub(super) fn acquire_transfer(
        &self,
        principal: &Principal,
    ) -> Result<QuotaPermit, SessionError> {
        self.shared
            .transfers
            .try_acquire(principal)
            .map_err(|exceeded| {
                quota_error(
                    exceeded,
                    "imports, exports, syncs and listings of CLI sessions or projects",
                )
            })
    }

    /// The row of a new conversation of `principal` under `agent_id`, with this server's
    /// backend, in its own workspace named by `session_id`.
    ///
    /// # Errors
    /// `invalid_agent_id` for the alias of a conversation shared with them: never one of
    /// their own.
    pub(super) fn new_session(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
        session_id: SessionId,
    ) -> Result<NewSession, SessionError> {
        if agent_id.is_share_alias() {
            return Err(SessionError::new(
                ErrorCode::InvalidAgentId,
                format!(
                    "`{agent_id}` has the form of a conversation shared with you; a conversation \
                     of your own needs an `agent_id` without `~`"
                ),
            ));
        }
        let cwd = self.shared.config.workspaces_dir().join(&session_id);
        Ok(NewSession {
            principal: principal.to_owned(),
            agent_id: agent_id.clone(),
            session_id,
            backend: self.shared.agents.default_name().to_owned(),
            cwd: cwd.to_string_lossy().into_owned(),
            model: None,
            permission_mode: None,
            launch_options: Default::default(),
            worktree: None,
        })
    }
}
