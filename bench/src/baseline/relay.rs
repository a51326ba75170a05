//! The baseline's `--relay-cli` mode: each conversation's `chat` goes to a CLI process of its
//! own, started on the first chat in stream-json mode, and every line the CLI writes on stdout
//! is sent on as it is, inside a frame tagged with its `agent_id` and `message_type`.
//!
//! Nothing is stored and no line is looked at beyond its `type`: this is the least any server
//! relaying a CLI does, so the `cli` scenario reads agentmux's latency as what it adds to it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{broadcast, mpsc};
use tokio_tungstenite::tungstenite::Utf8Bytes;

/// The flags that run a Claude-compatible CLI in stream-json mode with partial messages, as
/// agentmux runs it (also used by `warm` to drive the CLI without agentmux).
pub const STREAM_JSON_FLAGS: [&str; 7] = [
    "-p",
    "--input-format",
    "stream-json",
    "--output-format",
    "stream-json",
    "--verbose",
    "--include-partial-messages",
];

/// The baseline's CLI processes: how they are started, and each conversation's.
pub struct Relays {
    /// The CLI executable.
    bin: PathBuf,
    /// Its configuration directory and working directory (transcripts go there).
    dir: tempfile::TempDir,
    running: Mutex<HashMap<String, Relay>>,
}

/// One conversation's CLI: prompts are written to its stdin in order.
struct Relay {
    prompts: mpsc::UnboundedSender<String>,
}

impl Relays {
    /// Relays to processes of the CLI at `bin`.
    pub fn new(bin: PathBuf) -> anyhow::Result<Self> {
        anyhow::ensure!(bin.is_file(), "no CLI at {}", bin.display());
        Ok(Relays {
            bin,
            dir: tempfile::tempdir()?,
            running: Mutex::new(HashMap::new()),
        })
    }

    /// Sends `content` to the CLI of `agent_id` as its next user message, starting the CLI on
    /// the conversation's first chat; its stdout lines go to `frames`.
    pub fn chat(
        &self,
        agent_id: &str,
        frames: &broadcast::Sender<Utf8Bytes>,
        content: &str,
    ) -> std::io::Result<()> {
        let mut running = self.running.lock().expect("not poisoned");
        let relay = match running.entry(agent_id.to_owned()) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(self.start(agent_id, frames.clone())?)
            }
        };
        let line = serde_json::json!({
            "type": "user",
            "message": {"role": "user", "content": content},
        });
        let _ = relay.prompts.send(format!("{line}\n"));
        Ok(())
    }

    /// Starts the CLI of `agent_id`; its stdout lines go to `frames`.
    fn start(
        &self,
        agent_id: &str,
        frames: broadcast::Sender<Utf8Bytes>,
    ) -> std::io::Result<Relay> {
        let mut child = spawn(&self.bin, self.dir.path())?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (prompts, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_prompts(child, stdin, rx));
        tokio::spawn(relay_lines(stdout, agent_id.to_owned(), frames));
        Ok(Relay { prompts })
    }
}

/// The CLI in stream-json mode with partial messages, stamping each line it writes.
fn spawn(bin: &Path, dir: &Path) -> std::io::Result<Child> {
    Command::new(bin)
        .args(STREAM_JSON_FLAGS)
        .arg(format!("--session-id={}", uuid::Uuid::new_v4()))
        .current_dir(dir)
        .env("CLAUDE_CONFIG_DIR", dir)
        .env("FAKE_CLAUDE_STAMP", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
}

/// Writes each prompt to the CLI's stdin; the process is killed once its conversation's
/// sender is gone (when the baseline exits).
async fn write_prompts(
    _child: Child,
    mut stdin: ChildStdin,
    mut rx: mpsc::UnboundedReceiver<String>,
) {
    while let Some(line) = rx.recv().await {
        if stdin.write_all(line.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// The one field of a CLI line the relay reads.
#[derive(Deserialize)]
struct Line {
    #[serde(rename = "type")]
    kind: String,
}

/// Sends every stdout line of the CLI, as it is, in a frame of `agent_id`.
async fn relay_lines(stdout: ChildStdout, agent_id: String, frames: broadcast::Sender<Utf8Bytes>) {
    let tag = serde_json::to_string(&agent_id).expect("strings serialize");
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(Line { kind }) = serde_json::from_str::<Line>(&line) else {
            continue;
        };
        let kind = serde_json::to_string(&kind).expect("strings serialize");
        let frame = format!("{{\"message_type\":{kind},\"agent_id\":{tag},\"message\":{line}}}");
        let _ = frames.send(Utf8Bytes::from(frame));
    }
}
