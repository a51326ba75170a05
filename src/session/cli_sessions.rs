//! The projects a principal may work in, and the sessions the user ran with the Claude CLI in one of them: listed, imported as conversations the agent goes on with, and synced when the CLI added turns afterwards (the CLI's files themselves are read by [`crate::agent::claude::transcripts`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use futures_util::Stream;
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use super::Manager;
use super::errors::{store_error, store_failure, unknown_agent};
use super::history::{ContentText, ImportEnd, Lines, invalid};
use super::slots::SlotState;
use crate::agent::claude::transcripts::{self, OpenError, Pieces, Reader, Transcript};
use crate::protocol::{self, AgentId, ErrorCode, Principal, SessionId, valid_session_id};
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
    /// Whether it is in a git repository lying in its root (it has a `.git` entry, or its
    /// root has), so a conversation there can ask for a worktree of its own.
    pub git: bool,
    /// Whether a conversation started here gets a worktree unless its first chat says
    /// `worktree: false` (a git repository under a root with `worktrees = true`).
    pub worktree_default: bool,
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

fn rfc3339(time: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Opens transcript `id` of `dir` (see [`Transcript::open`]).
///
/// # Errors
/// `unknown_agent` when there is none, `invalid_request` when it is over `max_bytes`.
fn open_transcript(dir: &Path, id: &str, max_bytes: usize) -> Result<Transcript, SessionError> {
    Transcript::open(dir, id, max_bytes).map_err(|e| match e {
        OpenError::Missing => not_in_project(id),
        OpenError::TooLarge(len) => SessionError::new(
            ErrorCode::InvalidRequest,
            format!(
                "the transcript of CLI session `{id}` is {} MiB, over the {} MiB limit; nothing was imported",
                len >> 20,
                max_bytes >> 20
            ),
        ),
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

/// The messages of a transcript that belong to one directory (see [`Reader`]), as stored
/// messages with the uuid of each line, read as a stream of lines, never whole.
struct Entries {
    lines: Lines<Pieces>,
    id: String,
    reader: Reader,
}

impl Entries {
    fn new(transcript: Transcript, project: &Path, max_bytes: usize) -> Self {
        Entries {
            id: transcript.id.clone(),
            lines: Lines::new(transcript.pieces(), max_bytes),
            reader: Reader::new(project),
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
            let read = self.reader.read(&line);
            if let Some(message) = read.map_err(|_| not_in_project(&self.id))? {
                return Ok(Some((message.line_uuid.clone(), stored(message))));
            }
        }
        Ok(None)
    }

    /// Whether the transcript belongs to the directory, reading no further than needed.
    async fn belongs(mut self) -> bool {
        while self.reader.belongs().is_none() && matches!(self.next().await, Ok(Some(_))) {}
        self.reader.belongs() == Some(true)
    }

    /// The messages, as a stream.
    fn messages(self) -> impl Stream<Item = Result<NewMessage, SessionError>> + Send {
        futures_util::stream::try_unfold(self, |mut entries| async move {
            Ok(entries.next().await?.map(|(_, message)| (message, entries)))
        })
    }
}

/// The stored message of a transcript's message: a user message whose content is a string,
/// or text blocks without tool results, is the user's prompt.
fn stored(message: transcripts::Message) -> NewMessage {
    let mut stored = NewMessage::new(message.kind, message.payload);
    if let Some(at) = message.created_at {
        stored.created_at = at;
    }
    if message.kind == "user" {
        let fields = serde_json::from_str::<protocol::StoredPayload>(&stored.payload).ok();
        let content = ContentText::of(fields.and_then(|f| f.message).and_then(|m| m.content));
        if let Some(text) = content.text.filter(|_| !content.tool_result) {
            stored.prompt = true;
            stored.title = Some(protocol::truncate_chars(text.trim(), 50).to_owned());
        }
    }
    stored.sdk_uuid = message.uuid;
    stored
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
    async fn project_dir(&self, principal: &Principal, raw: &str) -> Result<PathBuf, SessionError> {
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
    pub async fn projects(&self, principal: &Principal) -> Result<Vec<Project>, SessionError> {
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
        let roots = &self.shared.config.projects.roots;
        for crate::projects::Listed { path, git } in crate::projects::list(roots, principal).await {
            let key = path.to_string_lossy().into_owned();
            let (sessions, mut last) = activity
                .get(&key)
                .map(|(n, at)| (*n, Some(at.clone())))
                .unwrap_or((0, None));
            let mut cli_sessions = 0;
            if let Some(home) = &home
                && let Some(dir) = transcripts::sessions_dir(home, &path).await
            {
                for (id, modified) in transcripts::list(&dir).await {
                    let Ok(transcript) = open_transcript(&dir, &id, max_bytes) else {
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
                git,
                worktree_default: git
                    && crate::projects::worktrees_by_default(roots, principal, &path),
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
        principal: &Principal,
        cwd: &str,
    ) -> Result<Vec<CliSession>, SessionError> {
        let cwd = self.project_dir(principal, cwd).await?;
        let home = self.cli_home()?;
        let _transfer = self.acquire_transfer(principal)?;
        let Some(dir) = transcripts::sessions_dir(&home, &cwd).await else {
            return Ok(Vec::new());
        };
        let max_bytes = self.shared.config.claude.max_transcript_bytes;
        let mut files = transcripts::list(&dir).await;
        files.sort_by_key(|f| std::cmp::Reverse(f.1));
        let mut sessions = Vec::new();
        for (id, modified) in files {
            if sessions.len() == MAX_LISTED {
                break;
            }
            let Ok(transcript) = open_transcript(&dir, &id, max_bytes) else {
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
            if entries.reader.belongs() != Some(true) {
                continue;
            }
            let imported_as = self
                .shared
                .store
                .find_by_session_id(&id)
                .await
                .map_err(store_failure)?
                .filter(|r| r.principal == *principal)
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
        principal: &Principal,
        cwd: &str,
        cli_session_id: &str,
        agent_id: Option<AgentId>,
    ) -> Result<SessionRecord, SessionError> {
        let session_id = SessionId::parse(cli_session_id)
            .map_err(|_| invalid("`cli_session_id` must be a UUID"))?;
        let agent_id = &match agent_id {
            Some(agent_id) => agent_id,
            None => AgentId::parse(cli_session_id)?,
        };
        let cwd = self.project_dir(principal, cwd).await?;
        let home = self.cli_home()?;
        let _transfer = self.acquire_transfer(principal)?;
        let dir = transcripts::sessions_dir(&home, &cwd)
            .await
            .ok_or_else(|| not_in_project(cli_session_id))?;
        let max_bytes = self.shared.config.claude.max_transcript_bytes;
        let transcript = open_transcript(&dir, cli_session_id, max_bytes)?;
        if let Some(existing) = self
            .shared
            .store
            .find_by_session_id(cli_session_id)
            .await
            .map_err(store_failure)?
        {
            let message = if existing.principal == *principal {
                format!(
                    "CLI session `{cli_session_id}` is already imported as `{}`; sync it instead",
                    existing.agent_id
                )
            } else {
                format!("CLI session `{cli_session_id}` is already imported")
            };
            return Err(SessionError::new(ErrorCode::AgentExists, message));
        }
        let mut new = self.new_session(principal, agent_id, session_id)?;
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
        principal: &Principal,
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
        let dir = transcripts::sessions_dir(&home, Path::new(&record.cwd))
            .await
            .ok_or_else(no_transcript)?;
        // Another directory's transcript in the same folder is none of this conversation's.
        let read_error = |e: SessionError| match e.code {
            ErrorCode::UnknownAgent => no_transcript(),
            _ => e,
        };
        let max_bytes = self.shared.config.claude.max_transcript_bytes;
        let transcript = open_transcript(&dir, &sdk_id, max_bytes).map_err(read_error)?;
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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// The stored message of a transcript line of directory `/p`.
    fn message(mut line: Value) -> Option<NewMessage> {
        line["cwd"] = json!("/p");
        let mut reader = Reader::new(Path::new("/p"));
        reader
            .read(line.to_string().as_bytes())
            .unwrap()
            .map(stored)
    }

    #[test]
    fn transcript_messages_are_stored_with_the_users_prompts_marked() {
        let prompt = json!({"type":"user","uuid":"u1","sessionId":"s","timestamp":"2026-01-02T03:04:05.000Z",
            "message":{"role":"user","content":"list the files"}});
        let m = message(prompt).unwrap();
        assert_eq!(m.message_type, "user");
        assert!(m.prompt);
        assert_eq!(m.title.as_deref(), Some("list the files"));
        assert_eq!(m.sdk_uuid.as_deref(), Some("u1"));
        assert_eq!(m.created_at, "2026-01-02T03:04:05.000Z");
        let result = json!({"type":"user","uuid":"u2","message":{"role":"user",
            "content":[{"type":"tool_result","tool_use_id":"t","content":"a.txt"}]}});
        assert!(!message(result).unwrap().prompt);
        let end = message(json!({"type":"result","uuid":"r1"})).unwrap();
        assert_eq!((end.message_type, end.sdk_uuid), ("result", None));
    }
}
