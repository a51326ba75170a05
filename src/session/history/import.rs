//! Importing a conversation from its export: the body read line by line, each line checked
//! and stored in bounded chunks, the conversation invisible until its last chunk is stored.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::invalid;
use crate::protocol::{self, AgentId, Principal, SessionId, StoredPayload};
use crate::session::errors::store_error;
use crate::session::{Manager, SessionError};
use crate::store::{NewMessage, NewSession, RowId, SessionRecord, Store};

/// Most imported messages stored in one append.
const IMPORT_CHUNK_ROWS: usize = 1000;
/// Most payload bytes of imported messages stored in one append.
const IMPORT_CHUNK_BYTES: usize = 1 << 20;

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
pub(in crate::session) struct ImportEnd {
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
pub(in crate::session) struct Lines<S> {
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
    pub(in crate::session) fn new(body: S, max_bytes: usize) -> Self {
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
    pub(in crate::session) async fn next(
        &mut self,
    ) -> Result<Option<(usize, Bytes)>, SessionError> {
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
    pub(in crate::session) async fn store_import<M>(
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
}
