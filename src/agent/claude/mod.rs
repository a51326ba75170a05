//! The Claude Code CLI backend: one long-lived CLI process per live conversation, driven in
//! stream-json mode over stdin/stdout the way the official Agent SDKs drive it.
//!
//! Each agent is a task owning its process: it waits for a free process slot, starts the CLI
//! (or adopts the pre-warmed spare), sends `initialize`, then writes one `user` line per turn
//! and turns stdout lines into [`AgentEvent`]s. It holds an interrupt that arrives before the
//! turn has started until the CLI can act on it, answers permission requests on the user's
//! behalf, and when the CLI refuses to resume (its transcript is gone) starts a fresh
//! conversation instead. Processes run in their own process group with a parent-death signal,
//! and are stopped politely first: close stdin, wait, SIGTERM, wait, SIGKILL.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{Notify, mpsc};

use super::{
    AgentConn, AgentEvent, AgentInput, AgentMessage, Backend, EVENT_QUEUE, INPUT_QUEUE, Launch,
    SpawnError, SpawnSpec,
};
use crate::config::ClaudeConfig;
use crate::protocol::PermissionDecision;

/// The part of stderr kept to explain an exit, in bytes.
const STDERR_TAIL_BYTES: usize = 4096;
/// How often the spare process is checked for life.
const SPARE_CHECK: Duration = Duration::from_secs(1);

/// Settings of the backend: the configuration plus what it resolves to.
#[derive(Debug, Clone)]
pub struct ClaudeSettings {
    /// The `[claude]` configuration.
    pub config: ClaudeConfig,
    /// The CLI binary.
    pub bin: PathBuf,
    /// Root of the workspaces (`<data-dir>/workspaces`).
    pub workspaces: PathBuf,
}

impl ClaudeSettings {
    fn init_timeout(&self) -> Duration {
        Duration::from_secs(self.config.init_timeout_secs)
    }

    fn stop_grace(&self) -> Duration {
        Duration::from_secs(self.config.stop_grace_secs)
    }

    /// The CLI's command line for a launch, ids always in `--flag=value` form.
    pub fn args(
        &self,
        launch: &Launch,
        model: Option<&str>,
        permission_mode: Option<&str>,
    ) -> Vec<String> {
        let mut args: Vec<String> = [
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages",
            "--permission-prompt-tool",
            "stdio",
        ]
        .map(String::from)
        .into();
        match launch {
            Launch::New { session_id } => args.push(format!("--session-id={session_id}")),
            Launch::Resume { sdk_session_id } => args.push(format!("--resume={sdk_session_id}")),
            Launch::ResumeAt {
                sdk_session_id,
                at_message_uuid,
                new_session_id,
            } => args.extend([
                format!("--resume={sdk_session_id}"),
                format!("--resume-session-at={at_message_uuid}"),
                "--fork-session".into(),
                format!("--session-id={new_session_id}"),
            ]),
            Launch::Fork {
                sdk_session_id,
                new_session_id,
            } => args.extend([
                format!("--resume={sdk_session_id}"),
                "--fork-session".into(),
                format!("--session-id={new_session_id}"),
            ]),
        }
        if let Some(model) = model.or(self.config.model.as_deref()) {
            args.push(format!("--model={model}"));
        }
        if let Some(mode) = permission_mode.or(self.config.permission_mode.as_deref()) {
            args.push(format!("--permission-mode={mode}"));
        }
        args.extend(self.config.extra_args.iter().cloned());
        args
    }

    /// The CLI's environment: an allow-list of the server's, never its own secrets.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = std::env::vars()
            .filter(|(name, _)| {
                matches!(
                    name.as_str(),
                    "PATH" | "HOME" | "LANG" | "CLAUDE_CONFIG_DIR"
                ) || name.starts_with("ANTHROPIC_")
                    || (name.starts_with("CLAUDE_CODE_") && name != "CLAUDE_CODE_CHILD_SESSION")
                    || self.config.env_allow.iter().any(|allowed| allowed == name)
            })
            .collect();
        if let Some(dir) = &self.config.config_dir {
            env.retain(|(name, _)| name != "CLAUDE_CONFIG_DIR");
            env.push((
                "CLAUDE_CONFIG_DIR".into(),
                dir.to_string_lossy().into_owned(),
            ));
        }
        env
    }
}

/// The Claude Code CLI backend.
pub struct ClaudeBackend {
    settings: Arc<ClaudeSettings>,
    pool: Arc<Pool>,
    spare: Arc<Spare>,
}

impl ClaudeBackend {
    /// A backend; with `prewarm` set it starts keeping a spare process right away.
    pub fn new(settings: ClaudeSettings) -> Self {
        let settings = Arc::new(settings);
        let backend = ClaudeBackend {
            pool: Arc::new(Pool::new(settings.config.max_live_processes.max(1))),
            spare: Arc::new(Spare::default()),
            settings,
        };
        if backend.settings.config.prewarm {
            tokio::spawn(keep_spare(
                backend.settings.clone(),
                Arc::downgrade(&backend.spare),
            ));
        }
        backend
    }
}

#[async_trait]
impl Backend for ClaudeBackend {
    fn name(&self) -> &'static str {
        "claude"
    }

    async fn spawn(&self, spec: SpawnSpec) -> Result<AgentConn, SpawnError> {
        if !self.settings.bin.is_file() {
            return Err(SpawnError(format!(
                "the Claude CLI is not at {}",
                self.settings.bin.display()
            )));
        }
        let warm = match &spec.launch {
            Launch::New { session_id } => self.spare.claim(session_id),
            Launch::Resume { .. } | Launch::ResumeAt { .. } | Launch::Fork { .. } => None,
        };
        let (input_tx, input_rx) = mpsc::channel(INPUT_QUEUE);
        let (event_tx, event_rx) = mpsc::channel(EVENT_QUEUE);
        let task = AgentTask {
            settings: self.settings.clone(),
            pool: self.pool.clone(),
            spec,
            inputs: input_rx,
            events: event_tx,
            prompts: VecDeque::new(),
            tool_inputs: HashMap::new(),
            applied: (None, None),
            options_pending: 0,
            options_refused: None,
            reported_session_id: None,
        };
        tokio::spawn(task.run(warm));
        Ok(AgentConn {
            input: input_tx,
            events: event_rx,
        })
    }

    fn take_prewarmed(&self) -> Option<String> {
        self.spare.take()
    }
}

/// One CLI process and its pipes.
struct Proc {
    child: Child,
    pid: Option<i32>,
    stdin: Option<ChildStdin>,
    stdout: LineReader,
    stderr_tail: Arc<Mutex<String>>,
    /// Whether stdout has produced anything (a refusal at start produces nothing).
    spoke: bool,
}

impl Proc {
    fn start(
        settings: &ClaudeSettings,
        args: &[String],
        cwd: &std::path::Path,
        agent_id: &str,
    ) -> io::Result<Proc> {
        std::fs::create_dir_all(cwd)?;
        let mut cmd = Command::new(&settings.bin);
        cmd.args(args)
            .current_dir(cwd)
            .env_clear()
            .envs(settings.env())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        // SAFETY: prctl is async-signal-safe; the closure touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        let pid = child.id().map(|p| p as i32);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let stderr_tail = Arc::new(Mutex::new(String::new()));
        tokio::spawn(log_stderr(stderr, agent_id.to_owned(), stderr_tail.clone()));
        tracing::info!(agent_id, pid, ?args, "started the Claude CLI");
        Ok(Proc {
            child,
            pid,
            stdin,
            stdout: LineReader::new(stdout, settings.config.max_line_bytes),
            stderr_tail,
            spoke: false,
        })
    }

    async fn write(&mut self, value: &Value) -> io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| io::Error::other("stdin is closed"))?;
        let mut line = serde_json::to_vec(value).map_err(io::Error::other)?;
        line.push(b'\n');
        stdin.write_all(&line).await?;
        stdin.flush().await
    }

    /// Sends `initialize` and waits for its answer: the CLI is then ready.
    async fn initialize(&mut self, timeout: Duration) -> Result<(), String> {
        let request = json!({
            "type": "control_request", "request_id": "init",
            "request": {"subtype": "initialize", "hooks": null},
        });
        self.write(&request)
            .await
            .map_err(|e| format!("cannot write to the CLI: {e}"))?;
        let wait = async {
            loop {
                match self.stdout.next().await {
                    Ok(Some(Line::Text(text))) => {
                        self.spoke = true;
                        let Ok(v) = serde_json::from_str::<Value>(&text) else {
                            continue;
                        };
                        if v["type"] == "control_response" && v["response"]["request_id"] == "init"
                        {
                            return if v["response"]["subtype"] == "success" {
                                Ok(())
                            } else {
                                Err(format!(
                                    "the CLI refused to initialize: {}",
                                    v["response"]["error"]
                                ))
                            };
                        }
                    }
                    Ok(Some(Line::TooLong(_))) => {}
                    Ok(None) | Err(_) => return Err(self.exit_detail().await),
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "the CLI did not answer initialize within {timeout:?}"
                ))
            })
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for the exit and describes it with the end of stderr.
    async fn exit_detail(&mut self) -> String {
        let status = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        // Give the stderr reader a moment to take the last lines.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let tail = self.stderr_tail.lock().expect("stderr tail lock").clone();
        let status = match status {
            Ok(Ok(s)) => s.to_string(),
            _ => "no exit status".into(),
        };
        format!("the CLI exited ({status}): {}", tail.trim())
    }

    fn stderr_says(&self, needle: &str) -> bool {
        self.stderr_tail
            .lock()
            .expect("stderr tail lock")
            .contains(needle)
    }

    /// Stops the process and everything it started: close stdin, wait, SIGTERM the group,
    /// wait, SIGKILL the group.
    async fn stop(mut self, grace: Duration) {
        drop(self.stdin.take());
        let mut exited = tokio::time::timeout(grace, self.child.wait()).await.is_ok();
        if !exited {
            self.signal_group(libc::SIGTERM);
            exited = tokio::time::timeout(grace, self.child.wait()).await.is_ok();
        }
        if !exited {
            self.signal_group(libc::SIGKILL);
            let _ = self.child.wait().await;
        }
        // Children the CLI left behind in its group go too.
        self.signal_group(libc::SIGKILL);
    }

    fn signal_group(&self, signal: i32) {
        if let Some(pid) = self.pid {
            // SAFETY: killpg only sends a signal; the group is the child's own (process_group(0)).
            unsafe {
                libc::killpg(pid, signal);
            }
        }
    }
}

async fn log_stderr(
    stderr: tokio::process::ChildStderr,
    agent_id: String,
    tail: Arc<Mutex<String>>,
) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(agent_id = %agent_id, "claude: {line}");
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

/// One stdout line.
enum Line {
    Text(String),
    /// A line over the cap, skipped; its length in bytes.
    TooLong(usize),
}

/// Reads newline-delimited lines with a length cap; a longer line is skipped, not fatal.
/// Cancel-safe: its only await point is `fill_buf`, and state changes after it returns.
struct LineReader {
    reader: BufReader<ChildStdout>,
    buf: Vec<u8>,
    cap: usize,
    /// Bytes of an over-long line skipped so far.
    skipping: Option<usize>,
}

impl LineReader {
    fn new(stdout: ChildStdout, cap: usize) -> Self {
        LineReader {
            reader: BufReader::with_capacity(64 << 10, stdout),
            buf: Vec::new(),
            cap,
            skipping: None,
        }
    }

    async fn next(&mut self) -> io::Result<Option<Line>> {
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                return Ok(None);
            }
            let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
                Some(i) => (&available[..i], i + 1),
                None => (available, available.len()),
            };
            let ended = done > chunk.len();
            match self.skipping.as_mut() {
                Some(skipped) => *skipped += chunk.len(),
                None if self.buf.len() + chunk.len() > self.cap => {
                    self.skipping = Some(self.buf.len() + chunk.len());
                    self.buf = Vec::new();
                }
                None => self.buf.extend_from_slice(chunk),
            }
            self.reader.consume(done);
            if ended {
                if let Some(skipped) = self.skipping.take() {
                    return Ok(Some(Line::TooLong(skipped)));
                }
                let line = std::mem::take(&mut self.buf);
                return Ok(Some(Line::Text(
                    String::from_utf8_lossy(&line).into_owned(),
                )));
            }
        }
    }
}

/// Where the running turn is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    Idle,
    /// The prompt was written; `started` once the turn's init arrived.
    Sent {
        started: bool,
    },
}

/// How the main loop ended.
enum End {
    /// The session dropped its input.
    Stopped,
    /// The process ended by itself; the detail says how.
    Exited(String),
    /// The process was stopped to free a slot for another conversation.
    Evicted,
    /// The CLI refused to resume or reuse the id; start a fresh conversation.
    Refused(String),
    /// The CLI refused a model or permission mode between turns: start it again, resuming,
    /// under the new settings.
    Restart(String),
}

struct AgentTask {
    settings: Arc<ClaudeSettings>,
    pool: Arc<Pool>,
    spec: SpawnSpec,
    inputs: mpsc::Receiver<AgentInput>,
    events: mpsc::Sender<AgentEvent>,
    /// Prompts not yet written to the CLI.
    prompts: VecDeque<String>,
    /// The proposed input of each open permission request (an `allow` without edits sends it back).
    tool_inputs: HashMap<String, Value>,
    /// The model and permission mode the running process was started with or switched to.
    applied: (Option<String>, Option<String>),
    /// `set_model` / `set_permission_mode` requests not answered yet; prompts wait for them.
    options_pending: usize,
    /// Why the CLI refused a change of settings, when it did.
    options_refused: Option<String>,
    /// The id the CLI reported in its last init: what a restart resumes.
    reported_session_id: Option<String>,
}

impl AgentTask {
    async fn emit(&self, event: AgentEvent) {
        let _ = self.events.send(event).await;
    }

    async fn status(&self, status: &'static str, detail: impl Into<String>) {
        self.emit(AgentEvent::Status {
            status,
            detail: detail.into(),
        })
        .await;
    }

    /// Handles an input that arrives while no process is ready. False when the session is gone.
    async fn buffer_input(&mut self, input: Option<AgentInput>) -> bool {
        match input {
            None => false,
            Some(AgentInput::Prompt(p)) => {
                self.prompts.push_back(p);
                true
            }
            Some(AgentInput::Interrupt) => {
                // The turn never reached the CLI: end it here.
                if self.prompts.pop_front().is_some() {
                    self.emit_aborted().await;
                }
                true
            }
            Some(AgentInput::Permission { .. }) => true,
            Some(AgentInput::SetOptions {
                model,
                permission_mode,
            }) => {
                self.spec.model = model;
                self.spec.permission_mode = permission_mode;
                true
            }
        }
    }

    /// The model and permission mode the session wants (the configured ones by default).
    fn wanted_options(&self) -> (Option<String>, Option<String>) {
        (
            self.spec
                .model
                .clone()
                .or_else(|| self.settings.config.model.clone()),
            self.spec
                .permission_mode
                .clone()
                .or_else(|| self.settings.config.permission_mode.clone()),
        )
    }

    /// Between turns: asks the CLI to switch to the settings the session now wants, through
    /// the control protocol. Prompts wait until the CLI has answered.
    async fn switch_options(&mut self, proc: &mut Proc) -> io::Result<()> {
        let wanted = self.wanted_options();
        if wanted.0 != self.applied.0 {
            let model = wanted.0.as_deref().unwrap_or("default");
            let request = json!({"type": "control_request", "request_id": "options_model",
                "request": {"subtype": "set_model", "model": model}});
            proc.write(&request).await?;
            self.options_pending += 1;
        }
        if wanted.1 != self.applied.1 {
            let mode = wanted.1.as_deref().unwrap_or("default");
            let request = json!({"type": "control_request", "request_id": "options_mode",
                "request": {"subtype": "set_permission_mode", "mode": mode}});
            proc.write(&request).await?;
            self.options_pending += 1;
        }
        self.applied = wanted;
        Ok(())
    }

    /// Counts an answer to [`Self::switch_options`]; a refusal is kept for the main loop.
    fn on_options_answer(&mut self, raw: &str) {
        let Ok(v) = serde_json::from_str::<Value>(raw) else {
            return;
        };
        let response = &v["response"];
        if !matches!(
            response["request_id"].as_str(),
            Some("options_model" | "options_mode")
        ) {
            return;
        }
        self.options_pending = self.options_pending.saturating_sub(1);
        if response["subtype"] == "error" {
            let why = response["error"].as_str().unwrap_or("refused");
            self.options_refused = Some(format!("the agent refused the new settings ({why})"));
        }
    }

    async fn emit_aborted(&self) {
        let raw = json!({
            "type": "result", "subtype": "error_during_execution", "is_error": true,
            "session_id": self.spec.session_id, "terminal_reason": "aborted_streaming",
            "result": "Interrupted before the agent started.", "num_turns": 0, "duration_ms": 0,
            "total_cost_usd": 0, "usage": {"input_tokens": 0, "output_tokens": 0}, "errors": [],
        })
        .to_string();
        if let Ok(message) = AgentMessage::parse(raw) {
            self.emit(AgentEvent::Message(message)).await;
        }
    }

    async fn run(mut self, warm: Option<Proc>) {
        let mut warm = warm;
        let Some(lease) = self.acquire().await else {
            return;
        };
        loop {
            let proc = match warm.take() {
                Some(mut proc) => {
                    self.adopt_options(&mut proc).await;
                    self.applied = self.wanted_options();
                    proc
                }
                None => match self.start().await {
                    Ok(Some(proc)) => proc,
                    Ok(None) => return,
                    Err(detail) => {
                        self.emit(AgentEvent::Exited { detail }).await;
                        return;
                    }
                },
            };
            match self.drive(proc, &lease).await {
                End::Stopped => return,
                End::Evicted => {
                    self.emit(AgentEvent::Exited {
                        detail: "stopped to free a process slot".into(),
                    })
                    .await;
                    return;
                }
                End::Exited(detail) => {
                    self.emit(AgentEvent::Exited { detail }).await;
                    return;
                }
                End::Restart(reason) => {
                    self.status(
                        "restarting",
                        format!(
                            "{reason}; restarting the agent with resume under the new settings"
                        ),
                    )
                    .await;
                    self.options_pending = 0;
                    if let Some(id) = self.reported_session_id.clone() {
                        self.spec.launch = Launch::Resume { sdk_session_id: id };
                    }
                }
                End::Refused(reason) => {
                    let fresh = uuid::Uuid::new_v4().to_string();
                    self.status(
                        "resume_failed",
                        format!("{reason}; continuing in a fresh agent conversation (the stored history is kept)"),
                    )
                    .await;
                    self.spec.launch = Launch::New { session_id: fresh };
                }
            }
        }
    }

    /// Waits for a process slot, buffering inputs meanwhile. None when the session went away.
    async fn acquire(&mut self) -> Option<Lease> {
        let pool = self.pool.clone();
        let acquire = pool.acquire();
        tokio::pin!(acquire);
        let mut told = false;
        loop {
            tokio::select! {
                lease = &mut acquire => return Some(lease),
                input = self.inputs.recv() => {
                    if !self.buffer_input(input).await {
                        return None;
                    }
                }
                _ = tokio::time::sleep(Duration::from_millis(50)), if !told => {
                    told = true;
                    let detail = format!(
                        "all {} agent processes are busy; this turn starts when one is free",
                        self.settings.config.max_live_processes
                    );
                    self.status("queued", detail).await;
                }
            }
        }
    }

    /// Starts and initializes a process, buffering inputs meanwhile.
    async fn start(&mut self) -> Result<Option<Proc>, String> {
        let args = self.settings.args(
            &self.spec.launch,
            self.spec.model.as_deref(),
            self.spec.permission_mode.as_deref(),
        );
        self.applied = self.wanted_options();
        let mut proc = Proc::start(&self.settings, &args, &self.spec.cwd, &self.spec.agent_id)
            .map_err(|e| format!("cannot start the Claude CLI: {e}"))?;
        let timeout = self.settings.init_timeout();
        let outcome = {
            let init = proc.initialize(timeout);
            tokio::pin!(init);
            loop {
                tokio::select! {
                    ready = &mut init => break Some(ready),
                    input = self.inputs.recv() => {
                        if !self.buffer_input(input).await {
                            break None;
                        }
                    }
                }
            }
        };
        match outcome {
            Some(Ok(())) => Ok(Some(proc)),
            Some(Err(detail)) => {
                proc.stop(self.settings.stop_grace()).await;
                Err(detail)
            }
            None => {
                proc.stop(self.settings.stop_grace()).await;
                Ok(None)
            }
        }
    }

    /// A pre-warmed process runs with the default model and mode; switch if asked otherwise.
    async fn adopt_options(&self, proc: &mut Proc) {
        if let Some(model) = &self.spec.model
            && self.settings.config.model.as_ref() != Some(model)
        {
            let request = json!({"type": "control_request", "request_id": "set_model",
                "request": {"subtype": "set_model", "model": model}});
            let _ = proc.write(&request).await;
        }
        if let Some(mode) = &self.spec.permission_mode
            && self.settings.config.permission_mode.as_ref() != Some(mode)
        {
            let request = json!({"type": "control_request", "request_id": "set_permission_mode",
                "request": {"subtype": "set_permission_mode", "mode": mode}});
            let _ = proc.write(&request).await;
        }
    }

    /// Runs turns on a ready process until it ends or the session stops it.
    async fn drive(&mut self, mut proc: Proc, lease: &Lease) -> End {
        let mut turn = Turn::Idle;
        let mut interrupt_held = false;
        let mut interrupts = 0u64;
        let mut seen_init = false;
        let mut current: Option<String> = None;
        let end = loop {
            if turn == Turn::Idle
                && self.wanted_options() != self.applied
                && let Err(e) = self.switch_options(&mut proc).await
            {
                break End::Exited(format!(
                    "cannot write to the CLI: {e}; {}",
                    proc.exit_detail().await
                ));
            }
            if turn == Turn::Idle
                && self.options_pending == 0
                && let Some(prompt) = self.prompts.pop_front()
            {
                let line = json!({
                    "type": "user", "message": {"role": "user", "content": prompt},
                    "parent_tool_use_id": null, "session_id": "default",
                });
                if let Err(e) = proc.write(&line).await {
                    break End::Exited(format!(
                        "cannot write to the CLI: {e}; {}",
                        proc.exit_detail().await
                    ));
                }
                current = Some(prompt);
                turn = Turn::Sent { started: false };
                lease.set_busy(true);
            }
            let idle = turn == Turn::Idle;
            tokio::select! {
                input = self.inputs.recv() => match input {
                    None => break End::Stopped,
                    Some(AgentInput::Prompt(p)) => self.prompts.push_back(p),
                    Some(AgentInput::SetOptions { model, permission_mode }) => {
                        self.spec.model = model;
                        self.spec.permission_mode = permission_mode;
                    }
                    Some(AgentInput::Interrupt) => match turn {
                        Turn::Sent { started: true } => {
                            interrupts += 1;
                            let request = json!({"type": "control_request", "request_id": format!("interrupt_{interrupts}"),
                                "request": {"subtype": "interrupt"}});
                            let _ = proc.write(&request).await;
                        }
                        // The CLI ignores an interrupt before the turn's init: hold it until then.
                        Turn::Sent { started: false } => interrupt_held = true,
                        Turn::Idle => {
                            if self.prompts.pop_front().is_some() {
                                self.emit_aborted().await;
                            }
                        }
                    },
                    Some(AgentInput::Permission { request_id, decision }) => {
                        let original = self.tool_inputs.remove(&request_id).unwrap_or(Value::Null);
                        let response = match decision {
                            PermissionDecision::Allow { updated_input } => {
                                json!({"behavior": "allow", "updatedInput": updated_input.unwrap_or(original)})
                            }
                            PermissionDecision::Deny { message } => json!({"behavior": "deny", "message": message}),
                        };
                        let answer = json!({"type": "control_response",
                            "response": {"subtype": "success", "request_id": request_id, "response": response}});
                        let _ = proc.write(&answer).await;
                    }
                },
                line = proc.stdout.next() => match line {
                    Ok(Some(Line::Text(text))) => {
                        proc.spoke = true;
                        match self.on_line(&mut proc, text, &mut turn, &mut seen_init).await {
                            Some(refusal) => break End::Refused(refusal),
                            None if self.options_refused.is_some() => {
                                break End::Restart(self.options_refused.take().unwrap_or_default());
                            }
                            None => {
                                if turn == (Turn::Sent { started: true }) && interrupt_held {
                                    interrupt_held = false;
                                    interrupts += 1;
                                    let request = json!({"type": "control_request", "request_id": format!("interrupt_{interrupts}"),
                                        "request": {"subtype": "interrupt"}});
                                    let _ = proc.write(&request).await;
                                }
                                if turn == Turn::Idle {
                                    current = None;
                                    lease.set_busy(false);
                                }
                            }
                        }
                    }
                    Ok(Some(Line::TooLong(bytes))) => {
                        self.status("warning", format!(
                            "the agent wrote a line of {bytes} bytes, over the {} byte limit; it was skipped",
                            self.settings.config.max_line_bytes
                        )).await;
                    }
                    Ok(None) | Err(_) => {
                        if !proc.spoke && proc.stderr_says("already in use") {
                            break End::Refused("the agent's conversation id is already in use".into());
                        }
                        break End::Exited(proc.exit_detail().await);
                    }
                },
                _ = lease.evict.notified(), if idle && self.prompts.is_empty() => break End::Evicted,
            }
        };
        if let End::Refused(_) = end
            && let Some(prompt) = current
        {
            self.prompts.push_front(prompt);
        }
        proc.stop(self.settings.stop_grace()).await;
        end
    }

    /// Routes one stdout line. Returns the reason when the CLI refused to resume.
    async fn on_line(
        &mut self,
        proc: &mut Proc,
        text: String,
        turn: &mut Turn,
        seen_init: &mut bool,
    ) -> Option<String> {
        let trimmed = text.trim_start();
        if !trimmed.starts_with('{') {
            if !trimmed.is_empty() {
                tracing::debug!(agent_id = %self.spec.agent_id, line = %trimmed, "non-JSON line from the CLI");
            }
            return None;
        }
        let message = match AgentMessage::parse(text) {
            Ok(m) => m,
            Err(e) => {
                self.status(
                    "warning",
                    format!("the agent wrote a line that is not a JSON message ({e})"),
                )
                .await;
                return None;
            }
        };
        match message.kind.as_str() {
            "control_response" => {
                self.on_options_answer(&message.raw);
                None
            }
            "control_request" => {
                self.on_control_request(proc, &message.raw).await;
                None
            }
            "control_cancel_request" => {
                if let Ok(v) = serde_json::from_str::<Value>(&message.raw)
                    && let Some(id) = v["request_id"].as_str()
                {
                    self.tool_inputs.remove(id);
                    self.emit(AgentEvent::PermissionCancelled {
                        request_id: id.to_owned(),
                    })
                    .await;
                }
                None
            }
            "system" if message.subtype.as_deref() == Some("init") => {
                *seen_init = true;
                self.reported_session_id.clone_from(&message.session_id);
                if *turn == (Turn::Sent { started: false }) {
                    *turn = Turn::Sent { started: true };
                }
                self.emit(AgentEvent::Message(message)).await;
                None
            }
            "result" => {
                if !*seen_init
                    && !matches!(self.spec.launch, Launch::New { .. })
                    && (message.raw.contains("No conversation found")
                        || message.raw.contains("No message found"))
                {
                    return Some("the agent could not find the conversation to resume".into());
                }
                *turn = Turn::Idle;
                self.emit(AgentEvent::Message(message)).await;
                None
            }
            _ => {
                self.emit(AgentEvent::Message(message)).await;
                None
            }
        }
    }

    async fn on_control_request(&mut self, proc: &mut Proc, raw: &str) {
        let Ok(v) = serde_json::from_str::<Value>(raw) else {
            return;
        };
        let request_id = v["request_id"].as_str().unwrap_or_default().to_owned();
        let request = &v["request"];
        if request["subtype"] == "can_use_tool" {
            let input = request["input"].clone();
            self.tool_inputs.insert(request_id.clone(), input.clone());
            self.emit(AgentEvent::PermissionRequest {
                request_id,
                tool_name: request["tool_name"].as_str().unwrap_or_default().to_owned(),
                input,
                suggestions: request
                    .get("permission_suggestions")
                    .cloned()
                    .unwrap_or_else(|| json!([])),
            })
            .await;
            return;
        }
        let subtype = request["subtype"].as_str().unwrap_or("unknown");
        let answer = json!({"type": "control_response", "response": {"subtype": "error", "request_id": request_id,
            "error": format!("Unsupported control request subtype: {subtype}")}});
        let _ = proc.write(&answer).await;
    }
}

/// The cap on live processes, with least-recently-used eviction of idle ones.
struct Pool {
    max: usize,
    state: Mutex<PoolState>,
    freed: Notify,
}

#[derive(Default)]
struct PoolState {
    next: u64,
    entries: HashMap<u64, PoolEntry>,
}

struct PoolEntry {
    busy: bool,
    last_used: Instant,
    evict: Arc<Notify>,
}

/// A live process's place in the pool; dropping it frees the place.
struct Lease {
    pool: Arc<Pool>,
    id: u64,
    evict: Arc<Notify>,
}

impl Pool {
    fn new(max: usize) -> Self {
        Pool {
            max,
            state: Mutex::new(PoolState::default()),
            freed: Notify::new(),
        }
    }

    async fn acquire(self: &Arc<Self>) -> Lease {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut state = self.state.lock().expect("pool lock");
                if state.entries.len() < self.max {
                    state.next += 1;
                    let id = state.next;
                    let evict = Arc::new(Notify::new());
                    state.entries.insert(
                        id,
                        PoolEntry {
                            busy: false,
                            last_used: Instant::now(),
                            evict: evict.clone(),
                        },
                    );
                    return Lease {
                        pool: self.clone(),
                        id,
                        evict,
                    };
                }
                if let Some(lru) = state
                    .entries
                    .values()
                    .filter(|e| !e.busy)
                    .min_by_key(|e| e.last_used)
                {
                    lru.evict.notify_one();
                }
            }
            freed.await;
        }
    }
}

impl Lease {
    fn set_busy(&self, busy: bool) {
        let mut state = self.pool.state.lock().expect("pool lock");
        if let Some(entry) = state.entries.get_mut(&self.id) {
            entry.busy = busy;
            entry.last_used = Instant::now();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.pool
            .state
            .lock()
            .expect("pool lock")
            .entries
            .remove(&self.id);
        self.pool.freed.notify_waiters();
    }
}

/// The pre-warmed spare: an initialized process started with a fresh `--session-id`.
#[derive(Default)]
struct Spare {
    /// The spare waiting for a conversation.
    ready: Mutex<Option<(String, Proc)>>,
    /// Spares handed out by id, waiting for their conversation's first spawn.
    claimed: Mutex<HashMap<String, Proc>>,
    /// Wakes the keeper to start a new spare.
    refill: Arc<Notify>,
}

impl Spare {
    fn take(&self) -> Option<String> {
        let (id, proc) = self.ready.lock().expect("spare lock").take()?;
        self.claimed
            .lock()
            .expect("spare lock")
            .insert(id.clone(), proc);
        self.refill.notify_one();
        Some(id)
    }

    fn claim(&self, session_id: &str) -> Option<Proc> {
        let mut proc = self
            .claimed
            .lock()
            .expect("spare lock")
            .remove(session_id)?;
        proc.alive().then_some(proc)
    }
}

/// Keeps one spare ready while the backend exists; a spare that dies is replaced at once.
async fn keep_spare(settings: Arc<ClaudeSettings>, spare: std::sync::Weak<Spare>) {
    loop {
        let Some(slot) = spare.upgrade() else { return };
        let needs_one = {
            let mut ready = slot.ready.lock().expect("spare lock");
            let alive = ready.as_mut().is_some_and(|(_, proc)| proc.alive());
            if !alive {
                *ready = None;
            }
            !alive
        };
        if needs_one {
            let id = uuid::Uuid::new_v4().to_string();
            let cwd = settings.workspaces.join(&id);
            let args = settings.args(
                &Launch::New {
                    session_id: id.clone(),
                },
                None,
                None,
            );
            match Proc::start(&settings, &args, &cwd, "spare") {
                Ok(mut proc) => match proc.initialize(settings.init_timeout()).await {
                    Ok(()) => *slot.ready.lock().expect("spare lock") = Some((id, proc)),
                    Err(e) => {
                        tracing::warn!(error = %e, "the spare CLI did not start");
                        proc.stop(settings.stop_grace()).await;
                        let _ = std::fs::remove_dir(&cwd);
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        continue;
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the spare CLI");
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    continue;
                }
            }
        }
        let refill = slot.refill.clone();
        drop(slot);
        let _ = tokio::time::timeout(SPARE_CHECK, refill.notified()).await;
    }
}
