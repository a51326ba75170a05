//! Conformance: the fakes against what they stand in for. The same scripted scenarios run
//! against the fake CLI and the pinned real CLI (with the fake model API), each driven directly
//! over stdin/stdout, and the recorded exchanges with the pinned ACP adapter are replayed to the
//! fake ACP agent; what they say must have the same shape, so no fake can drift.

use crate::common::sibling;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::real_cli::{FakeApi, real_cli};

/// How long any one expected frame may take (the real CLI starts in about a second; a `SLOW`
/// reply streams for ten).
const FRAME_WAIT: Duration = Duration::from_secs(30);
const BASE_ARGS: &[&str] = &[
    "-p",
    "--input-format",
    "stream-json",
    "--output-format",
    "stream-json",
    "--verbose",
    "--include-partial-messages",
    "--permission-prompt-tool",
    "stdio",
];
const INTERRUPT_MARKER: &str = "[Request interrupted by user]";
/// How long the fake ACP agent may take to say what the adapter said.
const ACP_WAIT: Duration = Duration::from_secs(10);

/// One CLI binary with its own workspace, config dir and environment.
struct Target {
    name: &'static str,
    bin: PathBuf,
    _dir: tempfile::TempDir,
    workspace: PathBuf,
    env: Vec<(String, String)>,
}

impl Target {
    fn new(name: &'static str, bin: &Path, api: &FakeApi) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        let home = dir.path().join("home");
        let env = [
            ("PATH", std::env::var("PATH").unwrap_or_default()),
            ("HOME", home.to_string_lossy().into_owned()),
            (
                "CLAUDE_CONFIG_DIR",
                dir.path().join("claude").to_string_lossy().into_owned(),
            ),
            ("ANTHROPIC_BASE_URL", api.url.clone()),
            ("ANTHROPIC_API_KEY", "dummy".into()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
            ("CLAUDE_CODE_MAX_RETRIES", "0".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        Target {
            name,
            bin: bin.to_path_buf(),
            _dir: dir,
            workspace,
            env,
        }
    }

    fn spawn(&self, args: &[String], env: &[(&str, &str)]) -> Cli {
        let mut child = Command::new(&self.bin)
            .args(BASE_ARGS)
            .args(args)
            .current_dir(&self.workspace)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.bin.display()));
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Cli {
            child,
            stdin,
            stdout,
            frames: Vec::new(),
        }
    }
}

/// A running CLI and everything it printed so far.
struct Cli {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    frames: Vec<Value>,
}

impl Cli {
    /// Writes `frame` as a line. A CLI that refused its arguments may have exited before
    /// reading it (its exit code and stderr are what that scenario records): a closed pipe
    /// is not a failure.
    async fn send(&mut self, frame: Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        let mut line = frame.to_string();
        line.push('\n');
        let written = match stdin.write_all(line.as_bytes()).await {
            Ok(()) => stdin.flush().await,
            Err(err) => Err(err),
        };
        match written {
            Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
                panic!("writing to the CLI: {err}")
            }
            _ => {}
        }
    }

    async fn prompt(&mut self, text: &str) {
        self.send(json!({"type": "user", "message": {"role": "user", "content": text}}))
            .await;
    }

    async fn control(&mut self, request_id: &str, request: Value) {
        self.send(json!({"type": "control_request", "request_id": request_id, "request": request}))
            .await;
    }

    /// The next frame; None at the end of stdout.
    async fn next(&mut self) -> Option<Value> {
        let line = tokio::time::timeout(FRAME_WAIT, self.stdout.next_line())
            .await
            .expect("a frame in time")
            .unwrap()?;
        let frame: Value = serde_json::from_str(&line).expect("stdout lines are JSON");
        self.frames.push(frame.clone());
        Some(frame)
    }

    /// Frames until one matches `done`, which is returned.
    async fn until(&mut self, done: impl Fn(&Value) -> bool) -> Value {
        loop {
            let frame = self.next().await.expect("stdout ended early");
            if done(&frame) {
                return frame;
            }
        }
    }

    async fn turn(&mut self, text: &str) -> Value {
        self.prompt(text).await;
        self.until(|f| f["type"] == "result").await
    }

    /// A turn whose tool calls should not be asked for: a permission request is denied (and
    /// shows in the transcript), so the turn ends either way.
    async fn unasked_turn(&mut self, text: &str) -> Value {
        self.prompt(text).await;
        loop {
            let frame = self
                .until(|f| f["type"] == "result" || f["type"] == "control_request")
                .await;
            if frame["type"] == "result" {
                return frame;
            }
            self.send(
                json!({"type": "control_response", "response": {"subtype": "success",
                "request_id": frame["request_id"],
                "response": {"behavior": "deny", "message": "should not be asked"}}}),
            )
            .await;
        }
    }

    /// Closes stdin, reads stdout to its end; the exit code and stderr.
    async fn finish(mut self) -> (Vec<Value>, Option<i32>, String) {
        self.stdin = None;
        while self.next().await.is_some() {}
        let mut stderr = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            let _ = tokio::time::timeout(FRAME_WAIT, err.read_to_string(&mut stderr)).await;
        }
        let status = tokio::time::timeout(FRAME_WAIT, self.child.wait())
            .await
            .expect("the CLI exits after stdin closes")
            .unwrap();
        (self.frames, status.code(), stderr)
    }
}

/// Names for the ids a scenario passed in, so shapes can say which id a frame carries.
#[derive(Default)]
struct Ids(HashMap<String, String>);

impl Ids {
    fn name(&mut self, id: &str, name: &str) {
        self.0.insert(id.to_owned(), name.to_owned());
    }

    /// `text` with every named id replaced by `<its name>`.
    fn redact(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (id, name) in &self.0 {
            text = text.replace(id.as_str(), &format!("<{name}>"));
        }
        text
    }

    fn label(&self, value: &Value) -> String {
        match value {
            Value::Null => "null".into(),
            Value::String(s) => self.0.get(s).cloned().unwrap_or_else(|| "other".into()),
            _ => "absent".into(),
        }
    }
}

/// The shape of one frame: its kind, the ids it carries (by name) and the fields that tell a
/// host how the turn went; not the text or the numbers.
fn shape(frame: &Value, ids: &Ids) -> String {
    let kind = frame["type"].as_str().unwrap_or("?");
    let mut parts = vec![kind.to_owned()];
    let field = |name: &str| frame.get(name).map_or("absent".into(), |v| ids.label(v));
    match kind {
        "system" => {
            parts.push(frame["subtype"].as_str().unwrap_or("?").to_owned());
            if frame["subtype"] == "status" {
                parts.push(format!("status={}", frame["status"]));
            }
            if frame["subtype"] == "init" {
                let has_bash = frame["tools"]
                    .as_array()
                    .is_some_and(|tools| tools.iter().any(|t| t == "Bash"));
                parts.push(format!("bash={has_bash}"));
            }
            if frame["subtype"] == "permission_denied" {
                parts.push(format!(
                    "tool={} message={}",
                    frame["tool_name"], frame["message"]
                ));
            }
        }
        "stream_event" => {
            let event = &frame["event"];
            parts.push(event["type"].as_str().unwrap_or("?").to_owned());
            if let Some(delta) = event["delta"]["type"].as_str() {
                parts.push(delta.to_owned());
            }
            if let Some(block) = event["content_block"]["type"].as_str() {
                parts.push(block.to_owned());
            }
        }
        "assistant" => {
            let blocks: Vec<&str> = frame["message"]["content"]
                .as_array()
                .map(|b| b.iter().filter_map(|b| b["type"].as_str()).collect())
                .unwrap_or_default();
            parts.push(blocks.join("+"));
            if frame["aborted"] == true {
                parts.push("aborted".into());
            }
            if frame["message"]["model"] == "<synthetic>" {
                parts.push(format!(
                    "synthetic error={} status={}",
                    frame["error"], frame["api_error_status"]
                ));
            }
            if let Some(id) = frame["message"]["content"][0]["id"].as_str() {
                parts.push(format!("tool_use_id={}", ids.label(&json!(id))));
            }
        }
        "user" => {
            let content = &frame["message"]["content"];
            let blocks: Vec<String> = content
                .as_array()
                .map(|b| {
                    b.iter()
                        .map(|b| match b["type"].as_str() {
                            Some("text") if b["text"] == INTERRUPT_MARKER => "marker".into(),
                            // A tool's output differs (the fake never runs it); a refusal is
                            // the CLI's own text, and must be the same.
                            Some("tool_result") if b["is_error"] == true => format!(
                                "tool_result(is_error=true, tool_use_id={}, content={})",
                                ids.label(&b["tool_use_id"]),
                                b["content"]
                            ),
                            Some("tool_result") => format!(
                                "tool_result(is_error={}, tool_use_id={})",
                                b["is_error"],
                                ids.label(&b["tool_use_id"])
                            ),
                            other => other.unwrap_or("?").to_owned(),
                        })
                        .collect()
                })
                .unwrap_or_else(|| vec!["string".into()]);
            parts.push(blocks.join("+"));
        }
        "result" => {
            parts.push(frame["subtype"].as_str().unwrap_or("?").to_owned());
            parts.push(format!(
                "is_error={} terminal_reason={} api_error_status={} num_turns={} denials={} \
                 errors={}",
                frame["is_error"],
                frame["terminal_reason"],
                frame["api_error_status"],
                frame["num_turns"],
                frame["permission_denials"].as_array().map_or(0, Vec::len),
                ids.redact(&frame["errors"].to_string()),
            ));
            let text = frame["result"].as_str().unwrap_or_default();
            // A tool's output differs (the fake never runs it), and so does the time a usage
            // limit resets at (the two run at different times); every other reply is the fake
            // model API's, and must be the same.
            let text = if text.starts_with("Tool said:") {
                "Tool said: …".to_owned()
            } else if let Some((limit, _)) = text.split_once(" · resets ") {
                format!("{limit} · resets …")
            } else {
                without_image_paths(text)
            };
            parts.push(format!("result={text:?}"));
        }
        "control_response" => {
            let response = &frame["response"];
            parts.push(response["subtype"].as_str().unwrap_or("?").to_owned());
            parts.push(format!("request_id={}", ids.label(&response["request_id"])));
            if let Some(code) = response["error_code"].as_str() {
                parts.push(format!("error_code={code}"));
            }
            if let Some(body) = response["response"].as_object() {
                let mut keys: Vec<&str> = body.keys().map(String::as_str).collect();
                keys.sort_unstable();
                if keys.len() <= 2 {
                    parts.push(format!("response={}", response["response"]));
                }
            }
        }
        "control_request" => {
            let request = &frame["request"];
            parts.push(request["subtype"].as_str().unwrap_or("?").to_owned());
            parts.push(format!(
                "tool={} tool_use_id={}",
                request["tool_name"],
                ids.label(&request["tool_use_id"])
            ));
        }
        _ => {}
    }
    if kind != "control_response" && kind != "control_request" {
        parts.push(format!("session_id={}", field("session_id")));
        parts.push(format!(
            "uuid={}",
            if frame["uuid"].is_string() {
                "yes"
            } else {
                "no"
            }
        ));
    }
    parts.join(" ")
}

/// The shapes of a scenario's frames; runs of the same shape count once (how many words a
/// reply streams in is not part of the contract), deltas that raced an interrupt's answer are
/// dropped, and a tool permission request is put where it may race to.
fn shapes(frames: &[Value], ids: &Ids) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for frame in frames {
        let s = shape(frame, ids);
        if out.last() == Some(&s) {
            continue;
        }
        if s.starts_with("stream_event content_block_delta")
            && out
                .last()
                .is_some_and(|l| l.starts_with("control_response"))
        {
            continue;
        }
        out.push(s);
    }
    // The CLI asks for a tool's permission as soon as the tool call's block is complete, while
    // the rest of the model's message still streams: where the request falls among that
    // message's last `stream_event`s is a race, not part of the contract. It goes right after
    // the tool call's `content_block_stop`, in both transcripts.
    let mut i = 0;
    while i < out.len() {
        if out[i].starts_with("control_request can_use_tool") {
            let mut at = i;
            while at > 0
                && out[at - 1].starts_with("stream_event")
                && !out[at - 1].starts_with("stream_event content_block_stop")
            {
                at -= 1;
            }
            let request = out.remove(i);
            out.insert(at, request);
        }
        i += 1;
    }
    out
}

/// `text` with the path in each `[Image: source: <path>]` left out (where the CLI saves a
/// prompt's images differs between the two).
fn without_image_paths(text: &str) -> String {
    const MARK: &str = "[Image: source: ";
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at + MARK.len()]);
        rest = &rest[at + MARK.len()..];
        let end = rest.find(']').unwrap_or(rest.len());
        out.push('…');
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The first line of stderr with the named ids replaced (what a refusal says).
fn stderr_line(stderr: &str, ids: &Ids) -> String {
    let line = stderr
        .lines()
        .find(|l| !l.contains("[claude-code:"))
        .unwrap_or_default();
    ids.redact(line)
}

fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// What a scenario saw, to compare between the two CLIs.
type Transcript = Vec<String>;

/// Runs every scenario against `target`, one after the other (later ones resume earlier
/// conversations); each scenario's shapes, with its exit code.
async fn run_scenarios(t: &Target) -> Vec<(&'static str, Transcript)> {
    let mut out = Vec::new();
    let session = new_id();
    let mut ids = Ids::default();
    ids.name(&session, "SESSION");
    for id in ["init", "model", "mode", "bypass", "int"] {
        ids.name(id, &format!("sent:{id}"));
    }

    // Two turns on a new conversation, with the control requests a host sends between turns.
    let mut cli = t.spawn(&[format!("--session-id={session}")], &[]);
    cli.control("init", json!({"subtype": "initialize", "hooks": null}))
        .await;
    cli.until(|f| f["type"] == "control_response").await;
    cli.control(
        "model",
        json!({"subtype": "set_model", "model": "fake-model-2"}),
    )
    .await;
    cli.until(|f| f["type"] == "control_response").await;
    cli.control(
        "mode",
        json!({"subtype": "set_permission_mode", "mode": "acceptEdits"}),
    )
    .await;
    cli.until(|f| f["type"] == "control_response").await;
    cli.control(
        "bypass",
        json!({"subtype": "set_permission_mode", "mode": "bypassPermissions"}),
    )
    .await;
    cli.until(|f| f["type"] == "control_response").await;
    cli.turn("hello one").await;
    cli.turn("hello two").await;
    let first_answer = cli
        .frames
        .iter()
        .find(|f| f["type"] == "assistant")
        .and_then(|f| f["uuid"].as_str())
        .expect("an assistant message")
        .to_owned();
    ids.name(&first_answer, "FIRST_ANSWER");
    let (frames, code, _) = cli.finish().await;
    out.push(("two turns", with_exit(shapes(&frames, &ids), code)));

    // An interrupt while the reply streams; the same process carries on.
    let mut cli = t.spawn(&[format!("--resume={session}")], &[]);
    cli.prompt("SLOW story please").await;
    cli.until(|f| f["event"]["delta"]["type"] == "text_delta")
        .await;
    cli.control("int", json!({"subtype": "interrupt"})).await;
    cli.until(|f| f["type"] == "result").await;
    cli.turn("after the stop").await;
    let (frames, code, _) = cli.finish().await;
    out.push((
        "interrupt mid-stream",
        with_exit(shapes(&frames, &ids), code),
    ));

    // An interrupt after the turn's init, before the reply begins.
    let mut cli = t.spawn(&[format!("--resume={session}")], &[]);
    cli.prompt("LATE reply").await;
    cli.until(|f| f["subtype"] == "init").await;
    cli.control("int", json!({"subtype": "interrupt"})).await;
    cli.until(|f| f["type"] == "result").await;
    cli.turn("once more").await;
    let (frames, code, _) = cli.finish().await;
    out.push((
        "interrupt before the reply",
        with_exit(shapes(&frames, &ids), code),
    ));

    // Tool permissions: one allowed, one denied, one a read-only command never asked for.
    let mut cli = t.spawn(&[format!("--resume={session}")], &[]);
    for (prompt, behavior) in [
        ("TOOL:touch+allowed.txt", "allow"),
        ("TOOL:touch+denied.txt", "deny"),
    ] {
        cli.prompt(prompt).await;
        let request = cli.until(|f| f["type"] == "control_request").await;
        let tool_use_id = request["request"]["tool_use_id"].as_str().unwrap();
        ids.name(tool_use_id, "TOOL_USE");
        let response = if behavior == "allow" {
            json!({"behavior": "allow", "updatedInput": request["request"]["input"]})
        } else {
            json!({"behavior": "deny", "message": "not this one"})
        };
        cli.send(
            json!({"type": "control_response", "response": {"subtype": "success",
            "request_id": request["request_id"], "response": response}}),
        )
        .await;
        cli.until(|f| f["type"] == "result").await;
    }
    cli.turn("TOOL:echo+hi").await;
    let (frames, code, _) = cli.finish().await;
    out.push(("tool permissions", with_exit(shapes(&frames, &ids), code)));

    // Fork at the first answer under a new id.
    let fork = new_id();
    ids.name(&fork, "FORK");
    let mut cli = t.spawn(
        &[
            format!("--resume={session}"),
            format!("--resume-session-at={first_answer}"),
            "--fork-session".into(),
            format!("--session-id={fork}"),
        ],
        &[],
    );
    cli.turn("in the fork").await;
    let (frames, code, _) = cli.finish().await;
    out.push(("fork at a message", with_exit(shapes(&frames, &ids), code)));

    // The original conversation resumes with everything it had, the fork's turn not included.
    let mut cli = t.spawn(&[format!("--resume={session}")], &[]);
    cli.turn("back on the main line").await;
    let (frames, code, _) = cli.finish().await;
    out.push(("resume", with_exit(shapes(&frames, &ids), code)));

    // A prompt with an image: the CLI saves it and names the file in a text block of its own.
    let mut cli = t.spawn(&[format!("--resume={session}")], &[]);
    let image = crate::images::image("image/png", crate::images::PNG_1X1);
    cli.send(json!({"type": "user", "message": {"role": "user",
        "content": [{"type": "text", "text": "look at this"}, image]}}))
        .await;
    cli.until(|f| f["type"] == "result").await;
    let (frames, code, _) = cli.finish().await;
    out.push(("an image", with_exit(shapes(&frames, &ids), code)));

    // Refusals: an unknown conversation, an unknown message to fork at, an id in use, a flag
    // the CLI does not have, a message to fork at without a conversation to resume, a user
    // line without its role.
    let unknown = new_id();
    ids.name(&unknown, "UNKNOWN");
    let prompt = json!({"type": "user", "message": {"role": "user", "content": "hello?"}});
    for (name, args, line) in [
        (
            "refused resume",
            vec![format!("--resume={unknown}")],
            &prompt,
        ),
        (
            "refused resume at",
            vec![
                format!("--resume={session}"),
                format!("--resume-session-at={unknown}"),
                "--fork-session".into(),
            ],
            &prompt,
        ),
        (
            "id in use",
            vec![format!("--session-id={session}")],
            &prompt,
        ),
        ("unknown flag", vec!["--no-such-flag=1".into()], &prompt),
        (
            "resume at without resume",
            vec![format!("--resume-session-at={first_answer}")],
            &prompt,
        ),
        (
            "user line without a role",
            vec![],
            &json!({"type": "user", "message": {"content": "hello?"}}),
        ),
    ] {
        let mut cli = t.spawn(&args, &[]);
        cli.send(line.clone()).await;
        let (frames, code, stderr) = cli.finish().await;
        let mut seen = with_exit(shapes(&frames, &ids), code);
        seen.push(format!("stderr: {}", stderr_line(&stderr, &ids)));
        out.push((name, seen));
    }

    // Model API errors: one not retried, then a turn that works; one retried once.
    let errors = new_id();
    ids.name(&errors, "ERRORS");
    let mut cli = t.spawn(&[format!("--session-id={errors}")], &[]);
    cli.turn("HTTPERR:400").await;
    cli.turn("after the error").await;
    let (frames, code, _) = cli.finish().await;
    out.push((
        "API error, then a turn",
        with_exit(shapes(&frames, &ids), code),
    ));
    let retried = new_id();
    ids.name(&retried, "RETRIED");
    let mut cli = t.spawn(
        &[format!("--session-id={retried}")],
        &[("CLAUDE_CODE_MAX_RETRIES", "1")],
    );
    cli.turn("HTTPERR:529").await;
    let (frames, code, _) = cli.finish().await;
    out.push(("API error retried", with_exit(shapes(&frames, &ids), code)));
    // Signed in with a subscription, whose usage limit says when it resets.
    let limited = new_id();
    ids.name(&limited, "LIMITED");
    let mut cli = t.spawn(
        &[format!("--session-id={limited}")],
        &[
            ("ANTHROPIC_API_KEY", ""),
            ("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-fake"),
        ],
    );
    cli.turn("USAGELIMIT:3").await;
    let (frames, code, _) = cli.finish().await;
    out.push(("usage limit", with_exit(shapes(&frames, &ids), code)));

    // Tool rules: a command `--allowedTools` covers runs without asking, one a
    // `--disallowedTools` pattern covers is denied without asking.
    let rules = new_id();
    ids.name(&rules, "RULES");
    let mut cli = t.spawn(
        &[
            format!("--session-id={rules}"),
            "--allowedTools=Bash(touch:*)".into(),
            "--disallowedTools=Bash(rm:*)".into(),
        ],
        &[],
    );
    cli.unasked_turn("TOOL:touch+by-rule.txt").await;
    cli.unasked_turn("TOOL:rm+by-rule.txt").await;
    let (frames, code, _) = cli.finish().await;
    out.push(("tool rules", with_exit(shapes(&frames, &ids), code)));

    // A tool `--disallowedTools` names bare is gone: not offered, and a call to it fails.
    let removed = new_id();
    ids.name(&removed, "REMOVED");
    let mut cli = t.spawn(
        &[
            format!("--session-id={removed}"),
            "--disallowedTools=Bash".into(),
        ],
        &[],
    );
    cli.unasked_turn("TOOL:echo+hi").await;
    let (frames, code, _) = cli.finish().await;
    out.push(("a removed tool", with_exit(shapes(&frames, &ids), code)));

    // `--max-turns`: a tool call's result would take a second model request; the next turn
    // answers it.
    let limited = new_id();
    ids.name(&limited, "LIMITED");
    let mut cli = t.spawn(
        &[format!("--session-id={limited}"), "--max-turns=1".into()],
        &[],
    );
    cli.turn("TOOL:echo+hi").await;
    cli.turn("after the limit").await;
    let (frames, code, _) = cli.finish().await;
    out.push(("the turn limit", with_exit(shapes(&frames, &ids), code)));

    // An interrupt written at start-up, right after the first prompt, stops that turn; the
    // last result being an error, the exit code is 1.
    let early = new_id();
    ids.name(&early, "EARLY");
    let mut cli = t.spawn(&[format!("--session-id={early}")], &[]);
    cli.prompt("stopped at start-up").await;
    cli.control("int", json!({"subtype": "interrupt"})).await;
    let (frames, code, _) = cli.finish().await;
    out.push((
        "interrupt at start-up",
        with_exit(shapes(&frames, &ids), code),
    ));
    out
}

fn with_exit(mut shapes: Vec<String>, code: Option<i32>) -> Vec<String> {
    shapes.push(format!("exit code {code:?}"));
    shapes
}

/// The fake CLI prints what the pinned real CLI prints, scenario by scenario.
#[cfg_attr(
    no_test_claude,
    ignore = "needs the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN), not configured here"
)]
#[tokio::test]
async fn fake_cli_matches_the_real_cli() {
    let Some(real) = real_cli() else { return };
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApi::start(dir.path()).await;
    let fake = Target::new("fake", &sibling("fake-claude"), &api);
    let real = Target::new("real", &real, &api);
    let from_fake = run_scenarios(&fake).await;
    let from_real = run_scenarios(&real).await;
    let mut report = String::new();
    for ((name, fake_shapes), (_, real_shapes)) in from_fake.iter().zip(&from_real) {
        if fake_shapes != real_shapes {
            report.push_str(&format!(
                "\n== {name}\n-- {}:\n{}\n-- {}:\n{}\n",
                fake.name,
                fake_shapes.join("\n"),
                real.name,
                real_shapes.join("\n")
            ));
        }
    }
    assert!(
        report.is_empty(),
        "the fake CLI differs from the real one:{report}"
    );
}

/// The fake ACP agent, driven over stdin/stdout.
struct Acp {
    _child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Acp {
    fn spawn(state: &Path) -> Self {
        let mut child = Command::new(sibling("fake-acp"))
            .arg("--state")
            .arg(state)
            .current_dir(state)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn fake-acp");
        Acp {
            stdin: child.stdin.take().unwrap(),
            stdout: BufReader::new(child.stdout.take().unwrap()).lines(),
            _child: child,
        }
    }

    async fn send(&mut self, line: &str) {
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.write_all(b"\n").await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// Messages until one like `last` (the same answer, request or update kind); `Err` with
    /// the messages so far when none comes.
    async fn until_like(&mut self, last: &Value) -> Result<Vec<Value>, Vec<Value>> {
        let mut got = Vec::new();
        loop {
            let Ok(Ok(Some(line))) = tokio::time::timeout(ACP_WAIT, self.stdout.next_line()).await
            else {
                return Err(got);
            };
            let message: Value = serde_json::from_str(&line).expect("JSON-RPC lines");
            let alike = match (last.get("method"), last.get("id")) {
                (None, Some(id)) => message.get("method").is_none() && &message["id"] == id,
                (Some(method), Some(_)) => {
                    &message["method"] == method && message["id"].is_number()
                }
                _ => {
                    message["params"]["update"]["sessionUpdate"]
                        == last["params"]["update"]["sessionUpdate"]
                }
            };
            got.push(message);
            if alike {
                return Ok(got);
            }
        }
    }
}

/// The shape of an agent's select config options: id, category, current value, values.
fn options_shape(options: &Value) -> String {
    let options: Vec<String> = options
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            let values: Vec<&str> = o["options"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v["value"].as_str())
                .collect();
            format!(
                "{}({})={}{values:?}",
                o["id"].as_str().unwrap_or("?"),
                o["category"].as_str().unwrap_or("-"),
                o["currentValue"].as_str().unwrap_or("?")
            )
        })
        .collect();
    options.join(" ")
}

/// The shape of what an ACP agent said, as far as a client reads it; None for what agentmux
/// does not read (the adapter's commands, session titles, usage without a cost, auth status).
fn acp_shape(message: &Value) -> Option<String> {
    if let Some(error) = message.get("error") {
        return Some(format!(
            "error {} {} {}",
            error["code"], error["message"], error["data"]
        ));
    }
    if let Some(result) = message.get("result") {
        if let Some(reason) = result.get("stopReason") {
            return Some(format!("answer stopReason={reason}"));
        }
        if let Some(caps) = result.get("agentCapabilities") {
            return Some(format!(
                "answer initialize loadSession={} resume={} image={}",
                caps["loadSession"],
                caps["sessionCapabilities"].get("resume").is_some(),
                caps["promptCapabilities"]["image"]
            ));
        }
        if result.get("modes").is_some() || result.get("configOptions").is_some() {
            let modes: Vec<&str> = result["modes"]["availableModes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m["id"].as_str())
                .collect();
            return Some(format!(
                "answer mode={} modes={modes:?} options: {}",
                result["modes"]["currentModeId"],
                options_shape(&result["configOptions"])
            ));
        }
        let mut keys: Vec<&str> = result
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        keys.sort_unstable();
        return Some(format!("answer keys={keys:?}"));
    }
    match message["method"].as_str() {
        Some("session/request_permission") => {
            let kinds: Vec<&str> = message["params"]["options"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|o| o["kind"].as_str())
                .collect();
            Some(format!("request_permission options={kinds:?}"))
        }
        Some("session/update") => {
            let update = &message["params"]["update"];
            let kind = update["sessionUpdate"].as_str().unwrap_or("?");
            match kind {
                "agent_message_chunk" | "user_message_chunk" => Some(kind.to_owned()),
                "tool_call" | "tool_call_update" => Some(format!(
                    "{kind} status={}",
                    update["status"].as_str().unwrap_or("-")
                )),
                "config_option_update" => Some(format!(
                    "{kind} {}",
                    options_shape(&update["configOptions"])
                )),
                "current_mode_update" => Some(format!("{kind} mode={}", update["currentModeId"])),
                "usage_update" if update.get("cost").is_some() => Some("usage_update cost".into()),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The shapes of what an agent said in answer to one client message (runs of the same shape
/// count once), and the reply's text when the turn ended normally.
fn acp_shapes(messages: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for shape in messages.iter().filter_map(acp_shape) {
        if out.last() != Some(&shape) {
            out.push(shape);
        }
    }
    if out.iter().any(|s| s == "answer stopReason=\"end_turn\"") {
        let text: String = messages
            .iter()
            .filter(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
            .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
            .collect();
        out.push(format!("reply {text:?}"));
    }
    out
}

/// Replays a recording of the pinned adapter to the fake ACP agent: every line the client sent
/// goes to the fake (with the fake's session and request ids), and what the fake says until
/// it has said what the adapter said last before the client's next line must have the same
/// shapes. A `## restart` or `## load` note starts a new process on the same state.
async fn replay(name: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/fixtures/acp")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let state = tempfile::tempdir().unwrap();
    let mut agent = Acp::spawn(state.path());
    let mut ids: Vec<(String, String)> = Vec::new();
    let mut report = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with("## restart") || line.starts_with("## load") {
            agent = Acp::spawn(state.path());
            continue;
        }
        let Some(sent) = line.strip_prefix("-> ") else {
            continue;
        };
        let mut sent = sent.to_owned();
        for (recorded, fake) in &ids {
            sent = sent.replace(recorded.as_str(), fake);
        }
        agent.send(&sent).await;
        let expected: Vec<Value> = lines[i + 1..]
            .iter()
            .take_while(|l| l.starts_with("<- "))
            .map(|l| serde_json::from_str(&l[3..]).unwrap())
            .collect();
        let Some(last) = expected.last() else {
            continue;
        };
        let (got, complete) = match agent.until_like(last).await {
            Ok(got) => (got, true),
            Err(got) => (got, false),
        };
        // The ids the fake chose stand for the recorded ones from now on.
        if let (Some(recorded), Some(fake)) = (
            last["result"]["sessionId"].as_str(),
            got.last().and_then(|m| m["result"]["sessionId"].as_str()),
        ) {
            ids.push((recorded.to_owned(), fake.to_owned()));
        }
        let (want, have) = (acp_shapes(&expected), acp_shapes(&got));
        if want != have || !complete {
            report.push(format!(
                "after {sent}\n-- recorded:\n{}\n-- fake{}:\n{}",
                want.join("\n"),
                if complete { "" } else { " (then nothing more)" },
                have.join("\n")
            ));
        }
        if !complete {
            break;
        }
    }
    report
}

/// The fake ACP agent answers as the recorded adapter did, exchange by exchange: turns, tool
/// calls with and without asking, cancels, modes and config options, resume, load, and methods
/// it does not have.
#[tokio::test]
async fn fake_acp_matches_the_recordings() {
    let mut report = Vec::new();
    for name in [
        "claude-agent-acp-0.101.0-turns-resume-load.txt",
        "claude-agent-acp-0.101.0-permissions.txt",
        "claude-agent-acp-0.101.0-methods.txt",
    ] {
        for difference in replay(name).await {
            report.push(format!("== {name}: {difference}"));
        }
    }
    assert!(
        report.is_empty(),
        "the fake ACP agent differs from the recordings:\n{}",
        report.join("\n\n")
    );
}
