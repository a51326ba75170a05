//! A conversation's history for any transport: the list of conversations, pages of stored
//! frames, renaming, and export and import as JSON Lines.
//!
//! Both directions stream: an export is read from the store a page at a time while it is
//! sent, and an import is parsed line by line as it arrives and stored in bounded chunks, each
//! one ordinary append in the writer's queue, so other conversations' writes go on between
//! them. An import's conversation stays invisible until its last chunk is stored and is
//! removed if anything fails. Imports and exports are capped per principal.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;

use super::errors::{store_error, store_failure, unknown_agent};
use super::replay::stored_frame;
use super::{Conversation, Manager};
use crate::limits::{QuotaExceeded, QuotaPermit};
use crate::protocol::{self, AgentId, ErrorCode, Frame, Principal, SessionId, StoredPayload};
use crate::session::SessionError;
use crate::store::{
    NewMessage, NewSession, PageSize, RowId, SessionPage, SessionQuery, SessionRecord, Store,
};

/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// Stored messages read per page while exporting.
const EXPORT_PAGE: u32 = 1000;
/// Most imported messages stored in one append.
const IMPORT_CHUNK_ROWS: usize = 1000;
/// Most payload bytes of imported messages stored in one append.
const IMPORT_CHUNK_BYTES: usize = 1 << 20;

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

/// The fields of an import line that are read.
#[derive(Deserialize)]
struct ImportLine<'a> {
    #[serde(rename = "seq")]
    _seq: i64,
    #[serde(borrow)]
    message_type: Cow<'a, str>,
    #[serde(borrow)]
    payload: &'a RawValue,
}

/// The message of one line (numbered from 1) of an export.
fn import_line(n: usize, line: &str) -> Result<NewMessage, SessionError> {
    let line: ImportLine =
        serde_json::from_str(line).map_err(|e| invalid(format!("line {n}: {e}")))?;
    let Some(message_type) = stored_type(&line.message_type) else {
        return Err(invalid(format!(
            "line {n}: unknown message_type `{}`",
            protocol::truncate_chars(&line.message_type, 64)
        )));
    };
    let raw = line.payload.get();
    if !raw.starts_with('{') {
        return Err(invalid(format!("line {n}: `payload` must be an object")));
    }
    let payload =
        protocol::strict_json(raw).map_err(|e| invalid(format!("line {n}: `payload`: {e}")))?;
    let mut message = NewMessage::new(message_type, payload);
    // The user's own chat is the user message whose content is text, or text and images.
    if message_type == "user"
        && let Some(content) = protocol::Content::of_stored(&message.payload)
    {
        message.prompt = true;
        message.title = Some(protocol::truncate_chars(content.title_text().trim(), 50).to_owned());
    }
    message.sdk_uuid = serde_json::from_str::<StoredPayload>(&message.payload)
        .ok()
        .and_then(|p| p.uuid());
    Ok(message)
}

/// The stored `status` `imported` that ends an import of `count` messages.
fn imported_status(count: usize) -> NewMessage {
    NewMessage::new(
        "status",
        serde_json::json!({
            "status": "imported",
            "detail": format!("{count} message(s) imported; the agent starts fresh and does not remember them"),
        })
        .to_string(),
    )
}

/// How an import ends.
pub(super) struct ImportEnd {
    /// The stored status after the `count` imported messages.
    pub status: fn(usize) -> NewMessage,
    /// The agent's own id of the session (its `sdk_session_id`), when the agent has the
    /// transcript itself (a CLI session): the next chat resumes it, and the imported messages
    /// count as remembered.
    pub sdk_session_id: Option<String>,
}

/// Longest line of an import or of a CLI transcript, in bytes: a longer one is refused
/// without being held (reading it whole is what a bad line would cost).
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// Splits a body arriving in pieces into numbered lines, holding at most one line (and one
/// piece) at a time, and refusing a body over `max_bytes` or a line over [`MAX_LINE_BYTES`].
pub(super) struct Lines<S> {
    body: S,
    buf: BytesMut,
    /// Bytes of `buf` already searched for a newline.
    searched: usize,
    read: usize,
    max_bytes: usize,
    number: usize,
    done: bool,
}

impl<S, E> Lines<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    pub(super) fn new(body: S, max_bytes: usize) -> Self {
        Lines {
            body,
            buf: BytesMut::new(),
            searched: 0,
            read: 0,
            max_bytes,
            number: 0,
            done: false,
        }
    }

    /// The next line and its number, without its line break.
    ///
    /// # Errors
    /// `invalid_request`: the body is over its limit or could not be read, or the line is
    /// over [`MAX_LINE_BYTES`] (found before more than that is held).
    pub(super) async fn next(&mut self) -> Result<Option<(usize, Bytes)>, SessionError> {
        loop {
            if let Some(at) = self.buf[self.searched..].iter().position(|b| *b == b'\n') {
                let end = self.searched + at;
                self.check_line(end)?;
                let mut line = self.buf.split_to(end + 1).freeze();
                line.truncate(end);
                self.searched = 0;
                self.number += 1;
                return Ok(Some((self.number, line)));
            }
            self.check_line(self.buf.len())?;
            self.searched = self.buf.len();
            if self.done {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                self.number += 1;
                self.searched = 0;
                return Ok(Some((self.number, self.buf.split().freeze())));
            }
            match self.body.next().await {
                Some(Ok(mut piece)) => {
                    self.read += piece.len();
                    if self.read > self.max_bytes {
                        return Err(invalid(format!(
                            "an import is at most {} MiB",
                            self.max_bytes >> 20
                        )));
                    }
                    while piece.has_remaining() {
                        let chunk = piece.chunk();
                        self.buf.extend_from_slice(chunk);
                        let n = chunk.len();
                        piece.advance(n);
                    }
                }
                Some(Err(err)) => {
                    return Err(invalid(format!(
                        "the request body could not be read: {err}"
                    )));
                }
                None => self.done = true,
            }
        }
    }

    /// Refuses the next line once `len` of its bytes are known to be over the limit.
    fn check_line(&self, len: usize) -> Result<(), SessionError> {
        if len > MAX_LINE_BYTES {
            return Err(invalid(format!(
                "line {} is longer than {} MiB, the limit of a line",
                self.number + 1,
                MAX_LINE_BYTES >> 20
            )));
        }
        Ok(())
    }
}

/// An import whose conversation exists (invisibly) in the store: removed when dropped before
/// it is finished, e.g. when the client goes away mid-upload.
struct PendingImport {
    store: Arc<dyn Store>,
    row: RowId,
    armed: bool,
}

impl PendingImport {
    /// Removes the unfinished conversation now.
    async fn discard(mut self) {
        self.armed = false;
        if let Err(err) = self.store.discard_import(self.row).await {
            tracing::warn!(error = %err, "an unfinished import could not be removed; it goes at the next start");
        }
    }
}

impl Drop for PendingImport {
    fn drop(&mut self) {
        if self.armed {
            let (store, row) = (self.store.clone(), self.row);
            tokio::spawn(async move {
                if let Err(err) = store.discard_import(row).await {
                    tracing::warn!(error = %err, "an unfinished import could not be removed; it goes at the next start");
                }
            });
        }
    }
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

    /// Creates conversation `agent_id` from an export (JSON Lines) arriving as `body`, at
    /// most `max_bytes` long. Its messages keep their order and content (`seq`s are assigned
    /// anew from 1); its agent starts fresh, and a stored `status` `imported` says so.
    ///
    /// Lines are parsed as they arrive and stored in chunks of at most
    /// [`IMPORT_CHUNK_ROWS`] messages, so neither the body nor the transcript is held in
    /// memory and other conversations' writes go on between chunks. The conversation is
    /// invisible until the last chunk is stored, and removed on any failure (a bad line, a
    /// body that breaks off or stalls, a full store, the client going away).
    ///
    /// # Errors
    /// `limit_exceeded` (the principal's imports and exports), `invalid_request` (a malformed
    /// line, an unreadable or too large body), `agent_exists` or `store_unavailable`.
    pub async fn import<S, E>(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
        body: S,
        max_bytes: usize,
    ) -> Result<SessionRecord, SessionError>
    where
        S: Stream<Item = Result<Bytes, E>> + Send,
        E: std::fmt::Display,
    {
        let _transfer = self.acquire_transfer(principal)?;
        let lines = Lines::new(Box::pin(body), max_bytes);
        let messages = futures_util::stream::try_unfold(lines, |mut lines| async move {
            while let Some((n, line)) = lines.next().await? {
                let text = std::str::from_utf8(&line)
                    .map_err(|_| invalid(format!("line {n} is not UTF-8")))?;
                if !text.trim().is_empty() {
                    return Ok(Some((import_line(n, text)?, lines)));
                }
            }
            Ok(None)
        });
        let new = self.new_session(principal, agent_id, SessionId::new())?;
        let end = ImportEnd {
            status: imported_status,
            sdk_session_id: None,
        };
        self.store_import(new, messages, end).await
    }

    /// Stores conversation `new` from `messages` as they come, in chunks of at most
    /// [`IMPORT_CHUNK_ROWS`] messages (each one ordinary append in the writer's queue), then
    /// `end`'s status. The conversation is invisible until the last chunk is stored, and
    /// removed on any failure; a source with no message is refused.
    ///
    /// # Errors
    /// What `messages` yields, `invalid_request` for an empty source, `agent_exists` or
    /// `store_unavailable`.
    pub(super) async fn store_import<M>(
        &self,
        new: NewSession,
        messages: M,
        end: ImportEnd,
    ) -> Result<SessionRecord, SessionError>
    where
        M: Stream<Item = Result<NewMessage, SessionError>> + Send,
    {
        let store = &self.shared.store;
        // Checked when `new` was made from a request.
        let (principal, agent_id) = (new.principal.clone(), new.agent_id.clone());
        let agent_id = &agent_id;
        let mut messages = std::pin::pin!(messages);
        let mut new = Some(new);
        let mut chunk: Vec<NewMessage> = Vec::new();
        let mut chunk_bytes = 0;
        let mut count = 0;
        let mut pending: Option<PendingImport> = None;
        let ImportEnd {
            status,
            sdk_session_id,
        } = end;
        let outcome: Result<(), SessionError> = async {
            loop {
                let message = messages.next().await.transpose()?;
                let last = message.is_none();
                if let Some(message) = message {
                    if let Some(new) = new.take() {
                        // The first message takes the agent_id (invisibly).
                        let record = store
                            .begin_import(new)
                            .await
                            .map_err(|e| store_error(e, agent_id))?;
                        pending = Some(PendingImport {
                            store: store.clone(),
                            row: record.row,
                            armed: true,
                        });
                    }
                    chunk_bytes += message.payload.len();
                    chunk.push(message);
                    count += 1;
                }
                let Some(row) = pending.as_ref().map(|p| p.row) else {
                    return Err(invalid("the body holds no message"));
                };
                if last {
                    chunk.push(status(count));
                } else if chunk.len() < IMPORT_CHUNK_ROWS && chunk_bytes < IMPORT_CHUNK_BYTES {
                    continue;
                }
                store
                    .append(row, std::mem::take(&mut chunk))
                    .await
                    .map_err(|e| store_error(e, agent_id))?;
                chunk_bytes = 0;
                if last {
                    if let Some(sdk_id) = &sdk_session_id {
                        store
                            .record_agent_session(row, sdk_id, true)
                            .await
                            .map_err(|e| store_error(e, agent_id))?;
                    }
                    return store
                        .finish_import(row, sdk_session_id.is_some())
                        .await
                        .map_err(|e| store_error(e, agent_id));
                }
            }
        }
        .await;
        match (outcome, pending) {
            (Ok(()), Some(mut pending)) => {
                pending.armed = false;
                self.get(&principal, agent_id).await
            }
            (Ok(()), None) => unreachable!("a finished import stored its conversation"),
            (Err(err), pending) => {
                if let Some(pending) = pending {
                    pending.discard().await;
                }
                Err(err)
            }
        }
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
