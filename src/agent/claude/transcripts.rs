//! The Claude CLI's own session files: the folder of a directory's transcripts, opening and
//! listing them safely, and reading their lines as the messages the CLI streamed.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::io::AsyncReadExt as _;

use crate::agent::records::open_regular_file;
use crate::protocol::{strict_json, valid_session_id};

/// The folder name the CLI gives the sessions of working directory `cwd`: every character
/// that is not an ASCII letter or digit becomes `-`, so several directories share one.
fn sanitize(cwd: &Path) -> String {
    cwd.to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// Where the CLI whose config dir is `home` keeps the sessions it ran in `cwd`.
pub fn folder(home: &Path, cwd: &Path) -> PathBuf {
    home.join("projects").join(sanitize(cwd))
}

/// The directory of `cwd`'s sessions under the CLI home, when it is a real directory inside
/// it (no step a symbolic link).
pub async fn sessions_dir(home: &Path, cwd: &Path) -> Option<PathBuf> {
    let home = tokio::fs::canonicalize(home).await.ok()?;
    let projects = home.join("projects");
    let dir = folder(&home, cwd);
    for step in [&projects, &dir] {
        let meta = tokio::fs::symlink_metadata(step).await.ok()?;
        if !meta.is_dir() {
            return None;
        }
    }
    Some(dir)
}

/// A transcript file, checked and open.
pub struct Transcript {
    /// The CLI's id of its session.
    pub id: String,
    file: tokio::fs::File,
}

/// Why a transcript was not opened.
#[derive(Debug)]
pub enum OpenError {
    /// No regular file of that id with no other hard link (see [`open_regular_file`]).
    Missing,
    /// The file is over the limit; its length in bytes.
    TooLarge(u64),
}

/// A transcript file as a stream of pieces, boxed.
pub type Pieces = Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

impl Transcript {
    /// Opens transcript `id` of sessions directory `dir` (see [`open_regular_file`]),
    /// refusing one over `max_bytes`.
    ///
    /// # Errors
    /// [`OpenError`].
    pub fn open(dir: &Path, id: &str, max_bytes: usize) -> Result<Self, OpenError> {
        let path = dir.join(format!("{id}.jsonl"));
        let (file, meta) = open_regular_file(&path).map_err(|_| OpenError::Missing)?;
        if meta.len() > max_bytes as u64 {
            return Err(OpenError::TooLarge(meta.len()));
        }
        Ok(Transcript {
            id: id.to_owned(),
            file: tokio::fs::File::from_std(file),
        })
    }

    /// The file as a stream of pieces.
    pub fn pieces(self) -> Pieces {
        Box::pin(futures_util::stream::unfold(
            self.file,
            |mut file| async move {
                let mut buf = BytesMut::with_capacity(64 << 10);
                match file.read_buf(&mut buf).await {
                    Ok(0) => None,
                    Ok(_) => Some((Ok(buf.freeze()), file)),
                    Err(e) => Some((Err(e), file)),
                }
            },
        ))
    }
}

/// The transcripts of a sessions directory (regular files named `<uuid>.jsonl`), with the
/// time each last changed.
pub async fn list(dir: &Path) -> Vec<(String, std::time::SystemTime)> {
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

/// The payload of a user or assistant entry, in the shape the agent streams it.
#[derive(Serialize)]
struct EntryPayload<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    message: Box<RawValue>,
    parent_tool_use_id: (),
    session_id: Option<&'a str>,
    uuid: Option<&'a str>,
}

/// One message of a transcript, in the shape the agent streams it.
#[derive(Debug)]
pub struct Message {
    /// `user`, `assistant` or `result`.
    pub kind: &'static str,
    /// The JSON object the agent streams: a user or assistant entry rewritten in the stream's
    /// shape, a `result` line as it is (written again compactly).
    pub payload: String,
    /// The uuid of the line, which a later read of the same transcript finds again.
    pub line_uuid: Option<String>,
    /// The agent's uuid of a user or assistant message.
    pub uuid: Option<String>,
    /// When a user or assistant message was written (RFC 3339), when the line says so.
    pub created_at: Option<String>,
}

/// The message of one transcript entry (read from `line`): user and assistant messages of
/// the main thread, and a `result` where one is written. Other line types, side threads and
/// meta messages have none.
fn transcript_message(entry: &Entry, line: &str) -> Option<Message> {
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
    let line_uuid = entry.uuid.as_deref().map(str::to_owned);
    if kind == "result" {
        return Some(Message {
            kind,
            payload: strict_json(line).ok()?,
            line_uuid,
            uuid: None,
            created_at: None,
        });
    }
    let message = entry.message.filter(|m| m.get().starts_with('{'))?;
    let payload = EntryPayload {
        kind,
        message: RawValue::from_string(strict_json(message.get()).ok()?).ok()?,
        parent_tool_use_id: (),
        session_id: entry.session_id.as_deref(),
        uuid: entry.uuid.as_deref(),
    };
    let created_at = entry
        .timestamp
        .as_deref()
        .filter(|at| chrono::DateTime::parse_from_rfc3339(at).is_ok())
        .map(str::to_owned);
    Some(Message {
        kind,
        payload: serde_json::to_string(&payload).ok()?,
        uuid: line_uuid.clone(),
        line_uuid,
        created_at,
    })
}

/// The transcript does not belong to the directory it was read for.
#[derive(Debug)]
pub struct NotInProject;

/// Reads the lines of a transcript, in order, for one directory. The CLI names the folder
/// after the directory with every character that is not a letter or digit made `-`, so
/// several directories share one: a transcript belongs to a directory only when the first of
/// its lines that records a `cwd` records that directory, and nothing of it is taken before
/// that line. Unknown line types and a line that is not JSON of the CLI's shape (a truncated
/// last line) are skipped; only the fields used are read from a line, never the line as a
/// tree.
pub struct Reader {
    project: PathBuf,
    /// Whether the transcript's first recorded `cwd` is `project`, once a line recorded one.
    belongs: Option<bool>,
}

impl Reader {
    /// A reader of a transcript of directory `project`.
    pub fn new(project: &Path) -> Self {
        Reader {
            project: project.to_owned(),
            belongs: None,
        }
    }

    /// Whether the transcript belongs to the directory, once the lines read tell.
    pub fn belongs(&self) -> Option<bool> {
        self.belongs
    }

    /// The message of the next line, if it has one.
    ///
    /// # Errors
    /// When the transcript turns out not to belong to the directory (its first recorded
    /// `cwd` is another, or a message comes before any).
    pub fn read(&mut self, line: &[u8]) -> Result<Option<Message>, NotInProject> {
        let Ok(line) = std::str::from_utf8(line) else {
            return Ok(None);
        };
        let Ok(entry) = serde_json::from_str::<Entry>(line) else {
            return Ok(None);
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
            return Err(NotInProject);
        }
        Ok(message)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn folder_names_match_the_cli() {
        assert_eq!(sanitize(Path::new("/srv/my_proj.v2")), "-srv-my-proj-v2");
        assert_eq!(
            folder(Path::new("/h"), Path::new("/a b")),
            Path::new("/h/projects/-a-b")
        );
    }

    /// The message of a transcript line, as [`Reader`] reads it.
    fn message(line: &serde_json::Value) -> Option<Message> {
        let line = line.to_string();
        transcript_message(&serde_json::from_str(&line).unwrap(), &line)
    }

    #[test]
    fn transcript_entries_become_streamed_messages() {
        let prompt = json!({"type":"user","uuid":"u1","sessionId":"s","timestamp":"2026-01-02T03:04:05.000Z",
            "message":{"role":"user","content":"list the files"}});
        let m = message(&prompt).unwrap();
        assert_eq!(m.kind, "user");
        assert_eq!(m.uuid.as_deref(), Some("u1"));
        assert_eq!(m.created_at.as_deref(), Some("2026-01-02T03:04:05.000Z"));
        let stored: serde_json::Value = serde_json::from_str(&m.payload).unwrap();
        assert_eq!(
            stored,
            json!({"type":"user","message":{"role":"user","content":"list the files"},
                "parent_tool_use_id":null,"session_id":"s","uuid":"u1"})
        );
        let tool_use = json!({"type":"assistant","uuid":"a1","message":{"role":"assistant",
            "content":[{"type":"tool_use","id":"t","name":"Bash","input":{}}]}});
        assert_eq!(message(&tool_use).unwrap().kind, "assistant");
        let result = message(&json!({"type":"result","uuid":"r1","subtype":"success"})).unwrap();
        assert_eq!(
            (result.line_uuid.as_deref(), result.uuid),
            (Some("r1"), None)
        );
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
