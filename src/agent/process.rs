//! One agent process (the Claude CLI or an ACP agent): spawning it in its own process group
//! with a parent-death signal and an allow-listed environment, its pipes and stderr tail, and
//! stopping it (close stdin, SIGTERM, SIGKILL the group) and reaping it.

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::process::Stdio;

use rustix::process::{Pid, Signal, kill_process_group, set_parent_process_death_signal};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tracing::Instrument;

use super::lines::LineReader;

/// The part of stderr kept to explain an exit, in bytes.
const STDERR_TAIL_BYTES: usize = 4096;

/// How to start an agent process.
pub(crate) struct ProcSpec<'a> {
    /// The program (an absolute path; PATH is not searched).
    pub(crate) program: &'a Path,
    /// Its arguments.
    pub(crate) args: &'a [String],
    /// Its whole environment (nothing of the server's is inherited).
    pub(crate) env: Vec<(String, String)>,
    /// Its working directory.
    pub(crate) cwd: &'a Path,
    /// Whether to create `cwd` (0700) if missing: only for the server's own workspaces.
    pub(crate) create_cwd: bool,
    /// Longest stdout line accepted.
    pub(crate) max_line_bytes: usize,
    /// Names the process in logs and exit details (`the Claude CLI`, `the ACP agent`).
    pub(crate) label: &'static str,
}

/// One agent process and its pipes.
pub(crate) struct Proc {
    child: Child,
    pid: Option<i32>,
    stdin: Option<ChildStdin>,
    /// Its stdout, line by line.
    pub(crate) stdout: LineReader<ChildStdout>,
    stderr_tail: Arc<Mutex<String>>,
    /// Whether stdout has produced anything (a refusal at start produces nothing).
    pub(crate) spoke: bool,
    label: &'static str,
}

impl Proc {
    /// Starts the program with `args` in `cwd` (created if missing when `create_cwd` says so:
    /// a workspace of the server's; a project directory must exist), in its own process group,
    /// killed if the server dies. Its stderr is logged in the current span.
    pub(crate) fn start(spec: ProcSpec<'_>) -> io::Result<Proc> {
        let ProcSpec {
            program,
            args,
            env,
            cwd,
            create_cwd,
            max_line_bytes,
            label,
        } = spec;
        if create_cwd {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(cwd)?;
        }
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(cwd)
            .env_clear()
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        // SAFETY: prctl is async-signal-safe; the closure touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| Ok(set_parent_process_death_signal(Some(Signal::KILL))?));
        }
        let mut child = cmd.spawn()?;
        let pid = child.id().map(|p| p as i32);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let stderr_tail = Arc::new(Mutex::new(String::new()));
        tokio::spawn(log_stderr(stderr, stderr_tail.clone(), label).in_current_span());
        tracing::info!(pid, ?args, "started {label}");
        Ok(Proc {
            child,
            pid,
            stdin,
            stdout: LineReader::new(stdout, max_line_bytes),
            stderr_tail,
            spoke: false,
            label,
        })
    }

    /// Writes one JSON line to stdin.
    pub(crate) async fn write(&mut self, value: &Value) -> io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| io::Error::other("stdin is closed"))?;
        let mut line = serde_json::to_vec(value).map_err(io::Error::other)?;
        line.push(b'\n');
        stdin.write_all(&line).await?;
        stdin.flush().await
    }

    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for the exit and describes it with the end of stderr.
    pub(crate) async fn exit_detail(&mut self) -> String {
        let status = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        // Give the stderr reader a moment to take the last lines.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let tail = self.stderr_tail.lock().expect("stderr tail lock").clone();
        let status = match status {
            Ok(Ok(s)) => s.to_string(),
            _ => "no exit status".into(),
        };
        format!("{} exited ({status}): {}", self.label, tail.trim())
    }

    pub(crate) fn stderr_says(&self, needle: &str) -> bool {
        self.stderr_tail
            .lock()
            .expect("stderr tail lock")
            .contains(needle)
    }

    /// Stops the process and everything it started: close stdin, wait, SIGTERM the group,
    /// wait, SIGKILL the group.
    pub(crate) async fn stop(mut self, grace: Duration) {
        drop(self.stdin.take());
        let mut exited = tokio::time::timeout(grace, self.child.wait()).await.is_ok();
        if !exited {
            self.signal_group(Signal::TERM);
            exited = tokio::time::timeout(grace, self.child.wait()).await.is_ok();
        }
        if !exited {
            self.signal_group(Signal::KILL);
            let _ = self.child.wait().await;
        }
        // Children the CLI left behind in its group go too.
        self.signal_group(Signal::KILL);
    }

    /// Signals the child's own process group (it was started with `process_group(0)`).
    fn signal_group(&self, signal: Signal) {
        if let Some(pid) = self.pid.and_then(Pid::from_raw) {
            let _ = kill_process_group(pid, signal);
        }
    }
}

/// Logs each stderr line and keeps the last [`STDERR_TAIL_BYTES`] of them in `tail`.
async fn log_stderr(stderr: ChildStderr, tail: Arc<Mutex<String>>, label: &'static str) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!("{label}: {line}");
        let mut t = tail.lock().expect("stderr tail lock");
        t.push_str(&line);
        t.push('\n');
        if t.len() > STDERR_TAIL_BYTES {
            let cut = t.len() - STDERR_TAIL_BYTES;
            let cut = (cut..t.len())
                .find(|i| t.is_char_boundary(*i))
                .unwrap_or(t.len());
            t.drain(..cut);
        }
    }
}
