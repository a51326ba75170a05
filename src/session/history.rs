//! A conversation's history for any transport: the list of conversations, pages of stored
//! frames, renaming, and export and import as JSON Lines.

use futures_util::Stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::replay::stored_frame;
use super::{Manager, SessionRef, store_error, store_failure, unknown_agent};
use crate::protocol::{self, ErrorCode, Frame, FrameError};
use crate::store::{NewMessage, NewSession, SessionQuery, SessionRecord};

/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// Stored messages read per page while exporting.
const EXPORT_PAGE: u32 = 1000;

/// One line of an export (JSON Lines), and of an import.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
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
    pub payload: Value,
}

impl ExportLine {
    /// The line of a stored message.
    fn new(seq: i64, message_type: &str, payload: &str) -> Self {
        let payload: Value = serde_json::from_str(payload).unwrap_or(Value::Null);
        let message = &payload["message"];
        let role = message["role"].as_str().map(str::to_owned);
        let content = match &message["content"] {
            Value::String(s) => Some(s.clone()),
            Value::Array(blocks) => {
                let text: Vec<&str> = blocks
                    .iter()
                    .filter(|b| b["type"] == "text")
                    .filter_map(|b| b["text"].as_str())
                    .collect();
                (!text.is_empty()).then(|| text.join(""))
            }
            _ => None,
        };
        ExportLine {
            seq,
            message_type: message_type.to_owned(),
            role,
            content,
            payload,
        }
    }
}

/// A malformed request about history (`invalid_request`).
fn invalid(message: impl Into<String>) -> FrameError {
    FrameError::new(ErrorCode::InvalidRequest, message)
}

/// The stored type of an imported line, for the types a conversation can hold.
fn stored_type(message_type: &str) -> Option<&'static str> {
    Some(match message_type {
        "user" => "user",
        "system" => "system",
        "assistant" => "assistant",
        "result" => "result",
        "status" => "status",
        "permission_request" => "permission_request",
        "permission_resolved" => "permission_resolved",
        _ => return None,
    })
}

/// The messages of an export, checked line by line, plus a stored `status` `imported`.
fn import_messages(text: &str) -> Result<Vec<NewMessage>, FrameError> {
    let mut messages = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let line: ExportLine =
            serde_json::from_str(line).map_err(|e| invalid(format!("line {}: {e}", i + 1)))?;
        let Some(message_type) = stored_type(&line.message_type) else {
            return Err(invalid(format!(
                "line {}: unknown message_type `{}`",
                i + 1,
                protocol::truncate_chars(&line.message_type, 64)
            )));
        };
        if !line.payload.is_object() {
            return Err(invalid(format!(
                "line {}: `payload` must be an object",
                i + 1
            )));
        }
        let mut message = NewMessage::new(message_type, line.payload.to_string());
        // The user's own chat is the user message whose content is plain text.
        if let ("user", Value::String(text)) = (message_type, &line.payload["message"]["content"]) {
            message.prompt = true;
            message.title = Some(protocol::truncate_chars(text.trim(), 50).to_owned());
        }
        message.sdk_uuid = line.payload["uuid"].as_str().map(str::to_owned);
        messages.push(message);
    }
    if messages.is_empty() {
        return Err(invalid("the body holds no message"));
    }
    let count = messages.len();
    messages.push(NewMessage::new(
        "status",
        serde_json::json!({
            "status": "imported",
            "detail": format!("{count} message(s) imported; the agent starts fresh and does not remember them"),
        })
        .to_string(),
    ));
    Ok(messages)
}

impl Manager {
    /// Looks up a conversation of `principal`.
    ///
    /// # Errors
    /// `store_unavailable`.
    pub async fn find(
        &self,
        principal: &str,
        agent_id: &str,
    ) -> Result<Option<SessionRecord>, FrameError> {
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
    pub async fn get(&self, principal: &str, agent_id: &str) -> Result<SessionRecord, FrameError> {
        self.find(principal, agent_id)
            .await?
            .ok_or_else(|| unknown_agent(agent_id))
    }

    /// A page of `principal`'s conversations, newest activity first, and how many match.
    ///
    /// # Errors
    /// `store_unavailable`.
    pub async fn list(
        &self,
        principal: &str,
        query: &SessionQuery,
    ) -> Result<(Vec<SessionRecord>, i64), FrameError> {
        self.shared
            .store
            .list_sessions(principal, query)
            .await
            .map_err(store_failure)
    }

    /// Up to `limit` stored frames after `after_seq`, each exactly as a subscriber gets it,
    /// and whether more follow.
    ///
    /// # Errors
    /// `unknown_agent` or `store_unavailable`.
    pub async fn messages(
        &self,
        principal: &str,
        agent_id: &str,
        after_seq: i64,
        limit: u32,
    ) -> Result<(Vec<Frame>, bool), FrameError> {
        let record = self.get(principal, agent_id).await?;
        let session = SessionRef::from_record(&record);
        // One more than asked tells whether more follow.
        let rows = self
            .shared
            .store
            .messages_after(record.id, after_seq, limit + 1)
            .await
            .map_err(|e| store_error(e, agent_id))?;
        let has_more = rows.len() > limit as usize;
        let frames = rows
            .iter()
            .take(limit as usize)
            .map(|row| stored_frame(&session, row))
            .collect();
        Ok((frames, has_more))
    }

    /// Gives a conversation a new title (1 to [`MAX_TITLE_CHARS`] characters, trimmed).
    ///
    /// # Errors
    /// `invalid_request`, `unknown_agent` or `store_unavailable`.
    pub async fn rename(
        &self,
        principal: &str,
        agent_id: &str,
        title: &str,
    ) -> Result<SessionRecord, FrameError> {
        let title = title.trim();
        if title.is_empty() || title.chars().count() > MAX_TITLE_CHARS {
            return Err(invalid(format!(
                "`title` must be 1-{MAX_TITLE_CHARS} characters"
            )));
        }
        let record = self.get(principal, agent_id).await?;
        self.shared
            .store
            .rename_session(record.id, title)
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
        principal: &str,
        agent_id: &str,
    ) -> Result<impl Stream<Item = Result<String, FrameError>> + Send + 'static, FrameError> {
        let record = self.get(principal, agent_id).await?;
        let store = self.shared.store.clone();
        let agent_id = agent_id.to_owned();
        Ok(futures_util::stream::unfold(Some(0), move |after| {
            let store = store.clone();
            let agent_id = agent_id.clone();
            async move {
                let after = after?;
                match store.messages_after(record.id, after, EXPORT_PAGE).await {
                    Err(err) => Some((Err(store_error(err, &agent_id)), None)),
                    Ok(rows) if rows.is_empty() => None,
                    Ok(rows) => {
                        let more = rows.len() == EXPORT_PAGE as usize;
                        let last = rows.last().map(|r| r.seq);
                        let mut page = String::new();
                        for row in &rows {
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

    /// Creates conversation `agent_id` from an export (JSON Lines). Its messages keep their
    /// order and content (`seq`s are assigned anew from 1); its agent starts fresh, and a
    /// stored `status` `imported` says so.
    ///
    /// # Errors
    /// `invalid_request` (a malformed line), `agent_exists` or `store_unavailable`.
    pub async fn import(
        &self,
        principal: &str,
        agent_id: &str,
        export: &str,
    ) -> Result<SessionRecord, FrameError> {
        let messages = import_messages(export)?;
        let new = self.new_session(principal, agent_id, uuid::Uuid::new_v4().to_string());
        let (_slot, _guard) = self.lock_slot(&Self::key(principal, agent_id)).await;
        self.shared
            .store
            .import_session(new, messages)
            .await
            .map_err(|e| store_error(e, agent_id))
    }

    /// The row of a new conversation of `principal` under `agent_id`, with this server's
    /// backend, in its own workspace named by `session_id`.
    pub(super) fn new_session(
        &self,
        principal: &str,
        agent_id: &str,
        session_id: String,
    ) -> NewSession {
        let cwd = self.shared.config.workspaces_dir().join(&session_id);
        NewSession {
            principal: principal.to_owned(),
            agent_id: agent_id.to_owned(),
            session_id,
            backend: self.shared.backend.name().to_owned(),
            cwd: cwd.to_string_lossy().into_owned(),
            model: None,
            permission_mode: None,
        }
    }
}
