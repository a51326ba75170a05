//! The projects a principal may work in, and the sessions the user ran with the Claude CLI
//! itself in one of them: listed, imported as conversations the agent goes on with, and
//! synced when the CLI added turns afterwards.
//!
//! Transcripts are read as a stream of lines, never whole, from
//! `<claude home>/projects/<sanitized cwd>/<uuid>.jsonl` only: each step of that path must be
//! a real directory or file (never a symbolic link, nor a file with another hard link), the
//! file is opened without following one, and it may be at most `claude.max_transcript_bytes`
//! long, each line at most [`super::history::MAX_LINE_BYTES`]. Only the fields used are read
//! from a line, never the line as a tree. The CLI names the folder after the directory with
//! every character that is not a letter or digit made `-`, so several directories share one:
//! a transcript belongs to a directory only when the first of its lines that records a `cwd`
//! records that directory, and nothing of it is taken before that line. Unknown line types
//! and a line that is not JSON of the CLI's shape (a truncated last line) are skipped.

use std::borrow::Cow;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;
use tokio::io::AsyncReadExt as _;
use utoipa::ToSchema;

use super::Manager;
use super::errors::{store_error, store_failure, unknown_agent};
use super::history::{ContentText, ImportEnd, Lines, invalid, strict_json};
use super::slots::SlotState;
use crate::protocol::{self, AgentId, ErrorCode, SessionId, valid_session_id};
use crate::session::SessionError;
use crate::store::{NewMessage, SessionRecord};

/// Most CLI sessions listed for one project (the most recently changed).
const MAX_LISTED: usize = 200;

/// One project: a root or a directory directly under one.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Project {
    /// Its canonical path: what `options.cwd` names.
    pub path: String,
    /// Its directory name.
    pub name: String,
    /// The caller's conversations working in it.
    pub sessions: i64,
    /// Sessions the CLI keeps for it.
    pub cli_sessions: usize,
    /// The latest activity of a conversation or CLI session in it (RFC 3339), if any.
    pub last_active_at: Option<String>,
}

/// A session the user ran with the CLI in a project.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CliSession {
    /// The CLI's id of the session; an import keeps it as the conversation's `session_id`.
    pub cli_session_id: String,
    /// The start of its first user message.
    pub title: Option<String>,
    /// User and assistant messages in its transcript.
    pub message_count: u64,
    /// When its transcript last changed (RFC 3339).
    pub modified_at: String,
    /// The caller's conversation it was imported as, if any.
    #[schema(value_type = Option<String>)]
    pub imported_as: Option<AgentId>,
}

/// A transcript file, checked and open.
struct Transcript {
    /// The CLI's id of its session.
    id: String,
    file: tokio::fs::File,
}

fn rfc3339(time: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The directory of `cwd`'s sessions under the CLI home, when it is a real directory inside
/// it (no step a symbolic link).
async fn sessions_dir(home: &Path, cwd: &Path) -> Option<PathBuf> {
    let home = tokio::fs::canonicalize(home).await.ok()?;
    let projects = home.join("projects");
    let dir = crate::projects::sessions_dir(&home, cwd);
    for step in [&projects, &dir] {
        let meta = tokio::fs::symlink_metadata(step).await.ok()?;
        if !meta.is_dir() {
            return None;
        }
    }
    Some(dir)
}

/// Opens `path` for reading when it is a regular file with no other hard link, not through
/// a symbolic link (and without waiting on a FIFO); an agent may have put any of them where
/// its transcript was, to have another file read in its place.
pub(super) fn open_regular_file(
    path: &Path,
) -> std::io::Result<(std::fs::File, std::fs::Metadata)> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file = std::fs::File::from(rustix::fs::open(path, flags, Mode::empty())?);
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    if meta.nlink() > 1 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a file with other hard links",
        ));
    }
    Ok((file, meta))
}

/// Opens transcript `id` of `dir` (see [`open_regular_file`]), refusing one over
/// `max_bytes`.
async fn open_transcript(
    dir: &Path,
    id: &str,
    max_bytes: usize,
) -> Result<Transcript, SessionError> {
    let path = dir.join(format!("{id}.jsonl"));
    let (file, meta) = open_regular_file(&path).map_err(|_| not_in_project(id))?;
    if meta.len() > max_bytes as u64 {
        return Err(SessionError::new(
            ErrorCode::InvalidRequest,
            format!(
                "the transcript of CLI session `{id}` is {} MiB, over the {} MiB limit; nothing was imported",
                meta.len() >> 20,
                max_bytes >> 20
            ),
        ));
    }
    Ok(Transcript {
        id: id.to_owned(),
        file: tokio::fs::File::from_std(file),
    })
}

/// `unknown_agent`: no CLI session `id` in this project (whether or not another directory
/// that shares its folder has one).
fn not_in_project(id: &str) -> SessionError {
    SessionError::new(
        ErrorCode::UnknownAgent,
        format!("no CLI session `{id}` in this project"),
    )
}

/// A file as a stream of pieces.
fn pieces(file: tokio::fs::File) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send {
    futures_util::stream::unfold(file, |mut file| async move {
        let mut buf = BytesMut::with_capacity(64 << 10);
        match file.read_buf(&mut buf).await {
            Ok(0) => None,
            Ok(_) => Some((Ok(buf.freeze()), file)),
            Err(e) => Some((Err(e), file)),
        }
    })
}

/// A transcript file as a stream of pieces, boxed.
type Pieces = Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

/// The fields of a transcript line that are read; everything else is skipped unread.
#[derive(Deserialize)]
struct Entry<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    uuid: Option<Cow<'a, str>>,
    #[serde(rename = "sessionId", borrow, default)]
    session_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    timestamp: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    cwd: Option<Cow<'a, str>>,
    #[serde(rename = "isSidechain", borrow, default)]
    is_sidechain: Option<&'a RawValue>,
    #[serde(rename = "isMeta", borrow, default)]
    is_meta: Option<&'a RawValue>,
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
}

/// The payload stored for a user or assistant entry, in the shape the agent streams it.
#[derive(Serialize)]
struct EntryPayload<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    message: Box<RawValue>,
    parent_tool_use_id: (),
    session_id: Option<&'a str>,
    uuid: Option<&'a str>,
}

/// The entries of a transcript that belong to one directory, as stored messages with the
/// uuid of each: user and assistant messages of the main thread (and a `result`, where one
/// is written). Other line types, side threads, meta messages and lines that are not JSON of
/// the CLI's shape are skipped.
struct Entries {
    lines: Lines<Pieces>,
    id: String,
    project: PathBuf,
    /// Whether the transcript's first recorded `cwd` is `project`, once a line recorded one.
    belongs: Option<bool>,
}

impl Entries {
    fn new(transcript: Transcript, project: &Path, max_bytes: usize) -> Self {
        Entries {
            lines: Lines::new(Box::pin(pieces(transcript.file)), max_bytes),
            id: transcript.id,
            project: project.to_owned(),
            belongs: None,
        }
    }

    /// The next entry and its uuid.
    ///
    /// # Errors
    /// `unknown_agent` when the transcript turns out not to belong to the directory (its first
    /// recorded `cwd` is another, or a message comes before any), `invalid_request` for a line
    /// over [`super::history::MAX_LINE_BYTES`] or a file that can't be read.
    async fn next(&mut self) -> Result<Option<(Option<String>, NewMessage)>, SessionError> {
        while let Some((_, line)) = self.lines.next().await? {
            let Ok(line) = std::str::from_utf8(&line) else {
                continue;
            };
            let Ok(entry) = serde_json::from_str::<Entry>(line) else {
                continue;
            };
            if self.belongs.is_none()
                && let Some(cwd) = &entry.cwd
            {
                self.belongs = Some(Path::new(cwd.as_ref()) == self.project);
            }
            let message = transcript_message(&entry, line);
            if self.belongs.is_none() && message.is_some() {
                self.belongs = Some(false);
            }
            if self.belongs == Some(false) {
                return Err(not_in_project(&self.id));
            }
            if let Some(message) = message {
                return Ok(Some((entry.uuid.map(Cow::into_owned), message)));
            }
        }
        Ok(None)
    }

    /// Whether the transcript belongs to the directory, reading no further than needed.
    async fn belongs(mut self) -> bool {
        while self.belongs.is_none() && matches!(self.next().await, Ok(Some(_))) {}
        self.belongs == Some(true)
    }

    /// The messages, as a stream.
    fn messages(self) -> impl Stream<Item = Result<NewMessage, SessionError>> + Send {
        futures_util::stream::try_unfold(self, |mut entries| async move {
            Ok(entries.next().await?.map(|(_, message)| (message, entries)))
        })
    }
}

/// The stored message of one transcript entry (read from `line`), in the shape the agent
/// streams it.
fn transcript_message(entry: &Entry, line: &str) -> Option<NewMessage> {
    let set = |flag: Option<&RawValue>| flag.is_some_and(|f| f.get() == "true");
    if set(entry.is_sidechain) || set(entry.is_meta) {
        return None;
    }
    let kind: &'static str = match entry.kind.as_deref()? {
        "user" => "user",
        "assistant" => "assistant",
        "result" => "result",
        _ => return None,
    };
    if kind == "result" {
        return Some(NewMessage::new("result", strict_json(line).ok()?));
    }
    let message = entry.message.filter(|m| m.get().starts_with('{'))?;
    let payload = EntryPayload {
        kind,
        message: RawValue::from_string(strict_json(message.get()).ok()?).ok()?,
        parent_tool_use_id: (),
        session_id: entry.session_id.as_deref(),
        uuid: entry.uuid.as_deref(),
    };
    let mut stored = NewMessage::new(kind, serde_json::to_string(&payload).ok()?);
    if let Some(at) = entry.timestamp.as_deref()
        && chrono::DateTime::parse_from_rfc3339(at).is_ok()
    {
        stored.created_at = at.to_owned();
    }
    if kind == "user" {
        // A user prompt: a string, or the text blocks of a message without tool results.
        let fields = serde_json::from_str::<protocol::PayloadMessage>(message.get()).ok();
        let content = ContentText::of(fields.and_then(|f| f.content));
        if let Some(text) = content.text.filter(|_| !content.tool_result) {
            stored.prompt = true;
            stored.title = Some(protocol::truncate_chars(text.trim(), 50).to_owned());
        }
    }
    stored.sdk_uuid = entry.uuid.as_deref().map(str::to_owned);
    Some(stored)
}

/// The stored status that ends an import of a CLI session.
fn cli_imported_status(count: usize) -> NewMessage {
    NewMessage::new(
        "status",
        json!({
            "status": "imported",
            "detail": format!("{count} message(s) imported from a CLI session; the agent remembers them and goes on from there"),
        })
        .to_string(),
    )
}

impl Manager {
    /// The CLI's config dir, or `invalid_request` when none is known.
    fn cli_home(&self) -> Result<PathBuf, SessionError> {
        self.shared
            .config
            .claude
            .home()
            .ok_or_else(|| invalid("the Claude CLI's config dir is unknown: set claude.config_dir"))
    }

    /// Resolves a project path a client named (see [`crate::projects::resolve_dir`]).
    async fn project_dir(&self, principal: &str, raw: &str) -> Result<PathBuf, SessionError> {
        crate::projects::resolve_dir(&self.shared.config.projects.roots, principal, raw)
            .await
            .map_err(|why| invalid(format!("`cwd`: {why}")))
    }

    /// The projects `principal` may work in, with their conversations and CLI sessions.
    /// Counting the CLI sessions reads the start of every transcript (each line at most
    /// [`super::history::MAX_LINE_BYTES`]), so it takes one of the principal's places for
    /// imports and exports, as a listing of CLI sessions does.
    ///
    /// # Errors
    /// `limit_exceeded` or `store_unavailable`.
    pub async fn projects(&self, principal: &str) -> Result<Vec<Project>, SessionError> {
        let activity: HashMap<String, (i64, String)> = self
            .shared
            .store
            .project_activity(principal)
            .await
            .map_err(store_failure)?
            .into_iter()
            .map(|(cwd, count, last)| (cwd, (count, last)))
            .collect();
        let home = self.shared.config.claude.home();
        let _transfer = match home {
            Some(_) => Some(self.acquire_transfer(principal)?),
            None => None,
        };
        let max_bytes = self.shared.config.claude.max_transcript_bytes;
        let mut projects = Vec::new();
        for path in crate::projects::list(&self.shared.config.projects.roots, principal).await {
            let key = path.to_string_lossy().into_owned();
            let (sessions, mut last) = activity
                .get(&key)
                .map(|(n, at)| (*n, Some(at.clone())))
                .unwrap_or((0, None));
            let mut cli_sessions = 0;
            if let Some(home) = &home
                && let Some(dir) = sessions_dir(home, &path).await
            {
                for (id, modified) in transcript_files(&dir).await {
                    let Ok(transcript) = open_transcript(&dir, &id, max_bytes).await else {
                        continue;
                    };
                    if !Entries::new(transcript, &path, max_bytes).belongs().await {
                        continue;
                    }
                    cli_sessions += 1;
                    let at = rfc3339(modified);
                    if last.as_ref().is_none_or(|l| *l < at) {
                        last = Some(at);
                    }
                }
            }
            projects.push(Project {
                name: path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| key.clone()),
                path: key,
                sessions,
                cli_sessions,
                last_active_at: last,
            });
        }
        Ok(projects)
    }

    /// The CLI sessions of project `cwd`, most recently changed first. Reading them takes one
    /// of the principal's places for imports and exports.
    ///
    /// # Errors
    /// `invalid_request` (a path outside the principal's roots, no CLI home),
    /// `limit_exceeded` or `store_unavailable`.
    pub async fn cli_sessions(
        &self,
        principal: &str,
        cwd: &str,
    ) -> Result<Vec<CliSession>, SessionError> {
        let cwd = self.project_dir(principal, cwd).await?;
        let home = self.cli_home()?;
        let _transfer = self.acquire_transfer(principal)?;
        let Some(dir) = sessions_dir(&home, &cwd).await else {
            return Ok(Vec::new());
        };
        let max_bytes = self.shared.config.claude.max_transcript_bytes;
        let mut files = transcript_files(&dir).await;
        files.sort_by_key(|f| std::cmp::Reverse(f.1));
        let mut sessions = Vec::new();
        for (id, modified) in files {
            if sessions.len() == MAX_LISTED {
                break;
            }
            let Ok(transcript) = open_transcript(&dir, &id, max_bytes).await else {
                continue;
            };
            let mut title = None;
            let mut message_count = 0;
            let mut entries = Entries::new(transcript, &cwd, max_bytes);
            // A line that can't be read ends the count; the import says why.
            while let Ok(Some((_, message))) = entries.next().await {
                if matches!(message.message_type, "user" | "assistant") {
                    message_count += 1;
                }
                if title.is_none() && message.prompt {
                    title = message.title;
                }
            }
            if entries.belongs != Some(true) {
                continue;
            }
            let imported_as = self
                .shared
                .store
                .find_by_session_id(&id)
                .await
                .map_err(store_failure)?
                .filter(|r| r.principal == principal)
                .map(|r| r.agent_id);
            sessions.push(CliSession {
                cli_session_id: id,
                title,
                message_count,
                modified_at: rfc3339(modified),
                imported_as,
            });
        }
        Ok(sessions)
    }

    /// Imports CLI session `cli_session_id` of project `cwd` as conversation `agent_id` (the
    /// session id when none is given): its `session_id` is the CLI's, it works in `cwd`, its
    /// transcript becomes stored frames, and its next chat resumes the CLI session, so the
    /// agent remembers everything. Nothing is left of a failed import.
    ///
    /// # Errors
    /// `invalid_request` (a bad path or id, a transcript over the limit or with no message),
    /// `unknown_agent` (no such CLI session), `agent_exists` (imported already, or the
    /// `agent_id` is taken), `limit_exceeded` or `store_unavailable`.
    pub async fn import_cli_session(
        &self,
        principal: &str,
        cwd: &str,
        cli_session_id: &str,
        agent_id: Option<&str>,
    ) -> Result<SessionRecord, SessionError> {
        let session_id = SessionId::parse(cli_session_id)
            .map_err(|_| invalid("`cli_session_id` must be a UUID"))?;
        let agent_id = &AgentId::parse(agent_id.unwrap_or(cli_session_id))?;
        let cwd = self.project_dir(principal, cwd).await?;
        let home = self.cli_home()?;
        let _transfer = self.acquire_transfer(principal)?;
        let dir = sessions_dir(&home, &cwd)
            .await
            .ok_or_else(|| not_in_project(cli_session_id))?;
        let max_bytes = self.shared.config.claude.max_transcript_bytes;
        let transcript = open_transcript(&dir, cli_session_id, max_bytes).await?;
        if let Some(existing) = self
            .shared
            .store
            .find_by_session_id(cli_session_id)
            .await
            .map_err(store_failure)?
        {
            let message = if existing.principal == principal {
                format!(
                    "CLI session `{cli_session_id}` is already imported as `{}`; sync it instead",
                    existing.agent_id
                )
            } else {
                format!("CLI session `{cli_session_id}` is already imported")
            };
            return Err(SessionError::new(ErrorCode::AgentExists, message));
        }
        let mut new = self.new_session(principal, agent_id, session_id);
        new.cwd = cwd.to_string_lossy().into_owned();
        let messages = Entries::new(transcript, &cwd, max_bytes).messages();
        let end = ImportEnd {
            status: cli_imported_status,
            sdk_session_id: Some(cli_session_id.to_owned()),
        };
        self.store_import(new, messages, end).await
    }

    /// Appends what the CLI added to the transcript of conversation `agent_id` since its
    /// last stored message the transcript holds (the user went on with the CLI), and stops
    /// its idle agent so that the next turn resumes with them. Returns the conversation and
    /// how many messages were appended. It takes one of the principal's places for imports
    /// and exports while it reads.
    ///
    /// # Errors
    /// `unknown_agent` (no such conversation, or no transcript of its directory for it),
    /// `busy` (a turn is running or queued), `invalid_request` (a transcript or a line over
    /// the limit, no CLI home), `limit_exceeded` or `store_unavailable`.
    pub async fn sync_cli_session(
        &self,
        principal: &str,
        agent_id: &AgentId,
    ) -> Result<(SessionRecord, usize), SessionError> {
        let home = self.cli_home()?;
        let _transfer = self.acquire_transfer(principal)?;
        let (slot, mut guard) = self.existing_slot(principal, agent_id).await?;
        if slot.busy.load(std::sync::atomic::Ordering::Acquire) {
            return Err(SessionError::new(
                ErrorCode::Busy,
                "a turn is running or queued; sync once it has ended",
            ));
        }
        let record = self.get(principal, agent_id).await?;
        self.check_dirs(&record, &record.launch_options().add_dirs)
            .await?;
        let no_transcript = || {
            SessionError::new(
                ErrorCode::UnknownAgent,
                format!("conversation `{agent_id}` has no CLI transcript to sync from"),
            )
        };
        let sdk_id = record
            .sdk_session_id
            .clone()
            .filter(|id| valid_session_id(id))
            .ok_or_else(no_transcript)?;
        let dir = sessions_dir(&home, Path::new(&record.cwd))
            .await
            .ok_or_else(no_transcript)?;
        // Another directory's transcript in the same folder is none of this conversation's.
        let read_error = |e: SessionError| match e.code {
            ErrorCode::UnknownAgent => no_transcript(),
            _ => e,
        };
        let max_bytes = self.shared.config.claude.max_transcript_bytes;
        let transcript = open_transcript(&dir, &sdk_id, max_bytes)
            .await
            .map_err(read_error)?;
        let known = self
            .shared
            .store
            .stored_uuids(record.row)
            .await
            .map_err(|e| store_error(e, agent_id))?;
        // Everything after the last entry the conversation holds is new.
        let mut fresh = Vec::new();
        let mut entries = Entries::new(transcript, Path::new(&record.cwd), max_bytes);
        while let Some((uuid, message)) = entries.next().await.map_err(read_error)? {
            if uuid.as_ref().is_some_and(|u| known.contains(u)) {
                fresh.clear();
            } else {
                fresh.push(message);
            }
        }
        let count = fresh.len();
        if count == 0 {
            return Ok((record, 0));
        }
        // The live agent knows nothing of them: stop it, so the next turn resumes the
        // transcript. The held slot keeps a chat from starting it meanwhile.
        if let SlotState::Live(handle) = std::mem::replace(&mut *guard, SlotState::Dormant) {
            let (reply, rx) = tokio::sync::oneshot::channel();
            if handle
                .tx
                .send(super::actor::Input::Stop { reply })
                .await
                .is_ok()
            {
                let _ = rx.await;
            }
        }
        fresh.push(NewMessage::new(
            "status",
            json!({
                "status": "synced",
                "detail": format!("{count} message(s) the CLI added were appended"),
            })
            .to_string(),
        ));
        let first = self
            .shared
            .store
            .append(record.row, fresh.clone())
            .await
            .map_err(|e| store_error(e, agent_id))?;
        let conversation = slot.conversation.get().expect("set by existing_slot");
        for (seq, message) in (first..).zip(&fresh) {
            let _ = slot.events.send(protocol::session_frame(
                conversation.tag(),
                message.message_type,
                Some(seq),
                &message.created_at,
                &message.payload,
                None,
            ));
        }
        drop(guard);
        let record = self
            .find(principal, agent_id)
            .await?
            .ok_or_else(|| unknown_agent(agent_id))?;
        Ok((record, count))
    }
}

/// The transcripts of a sessions directory (regular files named `<uuid>.jsonl`), with the
/// time each last changed.
async fn transcript_files(dir: &Path) -> Vec<(String, std::time::SystemTime)> {
    let mut found = Vec::new();
    let Ok(mut entries) = tokio::fs::read_dir(dir).await else {
        return found;
    };
    while let Ok(Some(entry)) = entries.next_entry().await {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_suffix(".jsonl") else {
            continue;
        };
        if !valid_session_id(id) {
            continue;
        }
        // `DirEntry::metadata` does not follow a symbolic link.
        if let Ok(meta) = entry.metadata().await
            && meta.is_file()
        {
            found.push((
                id.to_owned(),
                meta.modified().unwrap_or(std::time::UNIX_EPOCH),
            ));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stored message of a transcript line, as [`Entries`] reads it.
    fn message(line: &serde_json::Value) -> Option<NewMessage> {
        let line = line.to_string();
        transcript_message(&serde_json::from_str(&line).unwrap(), &line)
    }

    #[test]
    fn transcript_entries_become_stored_messages() {
        let prompt = json!({"type":"user","uuid":"u1","sessionId":"s","timestamp":"2026-01-02T03:04:05.000Z",
            "message":{"role":"user","content":"list the files"}});
        let m = message(&prompt).unwrap();
        assert_eq!(m.message_type, "user");
        assert!(m.prompt);
        assert_eq!(m.title.as_deref(), Some("list the files"));
        assert_eq!(m.sdk_uuid.as_deref(), Some("u1"));
        assert_eq!(m.created_at, "2026-01-02T03:04:05.000Z");
        let stored: serde_json::Value = serde_json::from_str(&m.payload).unwrap();
        assert_eq!(
            stored,
            json!({"type":"user","message":{"role":"user","content":"list the files"},
                "parent_tool_use_id":null,"session_id":"s","uuid":"u1"})
        );
        let result = json!({"type":"user","uuid":"u2","message":{"role":"user",
            "content":[{"type":"tool_result","tool_use_id":"t","content":"a.txt"}]}});
        assert!(!message(&result).unwrap().prompt);
        let tool_use = json!({"type":"assistant","uuid":"a1","message":{"role":"assistant",
            "content":[{"type":"tool_use","id":"t","name":"Bash","input":{}}]}});
        assert_eq!(message(&tool_use).unwrap().message_type, "assistant");
        for skipped in [
            json!({"type":"queue-operation"}),
            json!({"type":"attachment","message":{}}),
            json!({"type":"user","isSidechain":true,"message":{"content":"x"}}),
            json!({"type":"user","isMeta":true,"message":{"content":"x"}}),
            json!({"type":"user"}),
            json!({"type":"user","message":"x"}),
        ] {
            assert!(message(&skipped).is_none(), "{skipped}");
        }
    }
}
