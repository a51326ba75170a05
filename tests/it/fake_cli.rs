//! Checks that the test fakes (`fake-claude`, `fake-anthropic`) behave like the real CLI and API.

use crate::common::sibling;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const TIMEOUT: Duration = Duration::from_secs(5);
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
const SWITCHES: &[&str] = &[
    "FAKE_CLAUDE_DELAY_MS",
    "FAKE_CLAUDE_LOG",
    "FAKE_CLAUDE_CRASH_AFTER_WORDS",
    "FAKE_CLAUDE_IGNORE_INTERRUPT",
    "FAKE_CLAUDE_UNKNOWN_TYPES",
    "FAKE_CLAUDE_HUGE_LINE_BYTES",
    "FAKE_CLAUDE_REFUSE_RESUME",
    "FAKE_CLAUDE_ENV_DUMP",
    "FAKE_CLAUDE_CANCEL_PERMISSION_MS",
    "FAKE_CLAUDE_INIT_DELAY_MS",
    "FAKE_CLAUDE_TURN_DELAY_MS",
    "FAKE_CLAUDE_IGNORE_EOF",
    "FAKE_CLAUDE_IGNORE_SIGTERM",
    "FAKE_CLAUDE_REFUSE_SET_MODEL",
];

/// A workspace and a config dir for fake CLI runs.
struct Home {
    _dir: tempfile::TempDir,
    workspace: PathBuf,
    config: PathBuf,
}

impl Home {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = dir.path().join("my_proj.v2");
        let config = dir.path().join("config");
        std::fs::create_dir_all(&workspace).expect("workspace");
        Home {
            _dir: dir,
            workspace,
            config,
        }
    }

    fn transcript(&self, session_id: &str) -> PathBuf {
        let folder: String = self
            .workspace
            .to_string_lossy()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        self.config
            .join("projects")
            .join(folder)
            .join(format!("{session_id}.jsonl"))
    }

    fn spawn(&self, args: &[&str], env: &[(&str, &str)]) -> Cli {
        let mut cmd = Command::new(sibling("fake-claude"));
        cmd.args(BASE_ARGS)
            .args(args)
            .current_dir(&self.workspace)
            .env("CLAUDE_CONFIG_DIR", &self.config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for name in SWITCHES {
            cmd.env_remove(name);
        }
        cmd.envs(env.iter().copied());
        let mut child = cmd.spawn().expect("spawn fake-claude");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Cli {
            child,
            stdin,
            stdout,
        }
    }
}

struct Cli {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Cli {
    async fn send(&mut self, frame: Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        let mut line = frame.to_string();
        line.push('\n');
        stdin.write_all(line.as_bytes()).await.expect("write");
        stdin.flush().await.expect("flush");
    }

    async fn prompt(&mut self, text: &str) {
        self.send(json!({"type": "user", "message": {"role": "user", "content": text}}))
            .await;
    }

    /// Writes a prompt to a CLI that may refuse to start: one that already exited closed the
    /// pipe, and that is its answer too.
    async fn offer(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        let line = json!({"type": "user", "message": {"role": "user", "content": text}});
        let written = stdin.write_all(format!("{line}\n").as_bytes()).await;
        match written.and(stdin.flush().await) {
            Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => panic!("write: {err}"),
            _ => {}
        }
    }

    async fn next(&mut self) -> Option<Value> {
        let line = tokio::time::timeout(TIMEOUT, self.stdout.next_line())
            .await
            .expect("timed out waiting for stdout")
            .expect("read stdout")?;
        Some(serde_json::from_str(&line).expect("stdout line is JSON"))
    }

    /// Frames up to and including the first one matching `done`.
    async fn until(&mut self, done: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self.next().await.expect("stdout closed early");
            let last = done(&frame);
            frames.push(frame);
            if last {
                return frames;
            }
        }
    }

    async fn turn(&mut self, text: &str) -> Vec<Value> {
        self.prompt(text).await;
        self.until(|f| f["type"] == "result").await
    }

    /// Closes stdin, drains stdout and returns the exit status with stderr.
    async fn finish(mut self) -> (ExitStatus, Vec<Value>, String) {
        self.stdin = None;
        let mut rest = Vec::new();
        while let Some(frame) = self.next().await {
            rest.push(frame);
        }
        let mut stderr = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            err.read_to_string(&mut stderr).await.expect("stderr");
        }
        let status = tokio::time::timeout(TIMEOUT, self.child.wait())
            .await
            .expect("timed out waiting for exit")
            .expect("wait");
        (status, rest, stderr)
    }
}

fn result(frames: &[Value]) -> &Value {
    frames
        .last()
        .filter(|f| f["type"] == "result")
        .expect("a result")
}

fn session_arg(id: &str) -> String {
    format!("--session-id={id}")
}

fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[tokio::test]
async fn fake_claude_keeps_history_across_turns_and_resume() {
    let home = Home::new();
    let id = new_id();
    let mut cli = home.spawn(&[&session_arg(&id)], &[]);

    let first = cli.turn("hello one").await;
    let kinds: Vec<&str> = first.iter().filter_map(|f| f["type"].as_str()).collect();
    assert_eq!(kinds[..2], ["system", "system"]);
    assert_eq!(first[0]["subtype"], "init");
    assert_eq!(first[0]["session_id"], id.as_str());
    assert_eq!(first[0]["model"], "claude-opus-5-5");
    assert_eq!(first[0]["claude_code_version"], "2.1.332");
    assert!(first.iter().all(|f| f["session_id"] == id.as_str()));
    let assistant = first.iter().position(|f| f["type"] == "assistant").unwrap();
    assert_eq!(first[assistant + 1]["event"]["type"], "content_block_stop");
    let streamed: String = first
        .iter()
        .filter_map(|f| f["event"]["delta"]["text"].as_str())
        .collect();
    assert_eq!(streamed, "Echo: hello one (history 1)");
    let res = result(&first);
    assert_eq!(res["subtype"], "success");
    assert_eq!(res["result"], "Echo: hello one (history 1)");
    assert_eq!(res["terminal_reason"], "completed");

    let second = cli.turn("hello two").await;
    assert_eq!(second[0]["subtype"], "init");
    assert_eq!(result(&second)["result"], "Echo: hello two (history 2)");
    assert_eq!(result(&second)["total_cost_usd"], 0.002);
    let (status, rest, _) = cli.finish().await;
    assert!(status.success());
    assert!(rest.is_empty());
    let lines = std::fs::read_to_string(home.transcript(&id)).expect("transcript");
    assert_eq!(lines.lines().count(), 4);

    // A new process resumes the conversation from disk.
    let mut cli = home.spawn(&[&format!("--resume={id}")], &[]);
    let third = cli.turn("hello three").await;
    assert_eq!(third[0]["session_id"], id.as_str());
    assert_eq!(result(&third)["result"], "Echo: hello three (history 3)");
    assert!(cli.finish().await.0.success());

    // Reusing the id of an existing session is refused.
    let cli = home.spawn(&[&session_arg(&id)], &[]);
    let (status, rest, stderr) = cli.finish().await;
    assert_eq!(status.code(), Some(1));
    assert!(rest.is_empty());
    assert_eq!(
        stderr.trim(),
        format!("Error: Session ID {id} is already in use.")
    );
}

#[tokio::test]
async fn fake_claude_forks_and_rewinds() {
    let home = Home::new();
    let id = new_id();
    let mut cli = home.spawn(&[&session_arg(&id)], &[]);
    let first = cli.turn("one").await;
    cli.turn("two").await;
    assert!(cli.finish().await.0.success());
    let first_answer = first
        .iter()
        .find(|f| f["type"] == "assistant")
        .and_then(|f| f["uuid"].as_str())
        .unwrap()
        .to_string();

    let fork = new_id();
    let mut cli = home.spawn(
        &[
            &format!("--resume={id}"),
            &format!("--resume-session-at={first_answer}"),
            "--fork-session",
            &session_arg(&fork),
        ],
        &[],
    );
    let frames = cli.turn("again").await;
    assert_eq!(frames[0]["session_id"], fork.as_str());
    assert_eq!(result(&frames)["result"], "Echo: again (history 2)");
    assert!(cli.finish().await.0.success());
    assert!(home.transcript(&fork).exists());

    let missing = new_id();
    let mut cli = home.spawn(
        &[
            &format!("--resume={id}"),
            &format!("--resume-session-at={missing}"),
        ],
        &[],
    );
    cli.prompt("x").await;
    let (status, rest, stderr) = cli.finish().await;
    assert_eq!(status.code(), Some(1));
    assert_eq!(rest[0]["is_error"], true);
    assert!(stderr.contains(&format!("No message found with message.uuid of: {missing}")));
}

#[tokio::test]
async fn fake_claude_refuses_unknown_resume_and_bad_input() {
    let home = Home::new();
    let unknown = new_id();
    let mut cli = home.spawn(&[&format!("--resume={unknown}")], &[]);
    cli.offer("hello").await;
    let (status, rest, stderr) = cli.finish().await;
    assert_eq!(status.code(), Some(1));
    let message = format!("No conversation found with session ID: {unknown}");
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0]["type"], "result");
    assert_eq!(rest[0]["subtype"], "error_during_execution");
    assert_eq!(rest[0]["is_error"], true);
    assert_eq!(rest[0]["num_turns"], 0);
    assert_eq!(rest[0]["errors"], json!([message]));
    assert_eq!(stderr.trim(), message);

    let cli = home.spawn(&["--session-id=not-a-uuid"], &[]);
    let (status, _, stderr) = cli.finish().await;
    assert_eq!(status.code(), Some(1));
    assert_eq!(
        stderr.trim(),
        "Error: Invalid session ID. Must be a valid UUID."
    );

    let mut cli = home.spawn(&[], &[]);
    cli.stdin
        .as_mut()
        .unwrap()
        .write_all(b"this is not json\n")
        .await
        .unwrap();
    let (status, rest, stderr) = cli.finish().await;
    assert_eq!(status.code(), Some(1));
    assert!(rest.is_empty());
    assert_eq!(
        stderr.trim(),
        "Error parsing streaming input line (type=unknown, 16 chars): SyntaxError"
    );
}

#[tokio::test]
async fn fake_claude_answers_control_requests() {
    let home = Home::new();
    let mut cli = home.spawn(&[], &[]);
    cli.send(json!({"type": "control_request", "request_id": "req_init", "request": {"subtype": "initialize", "hooks": null}}))
        .await;
    let init = cli.next().await.unwrap();
    assert_eq!(init["response"]["subtype"], "success");
    assert_eq!(init["response"]["request_id"], "req_init");
    assert_eq!(init["response"]["response"]["session_state"], "idle");
    assert_eq!(
        init["response"]["response"]["claude_code_version"],
        "2.1.332"
    );

    cli.send(json!({"type": "control_request", "request_id": "bogus", "request": {"subtype": "no_such_thing"}}))
        .await;
    let bogus = cli.next().await.unwrap();
    assert_eq!(
        bogus["response"],
        json!({"subtype": "error", "request_id": "bogus", "error": "Unsupported control request subtype: no_such_thing", "error_code": "unsupported_request"})
    );

    cli.send(json!({"type": "control_request", "request_id": "m", "request": {"subtype": "set_model", "model": "fake-model-1"}}))
        .await;
    cli.send(json!({"type": "control_request", "request_id": "p", "request": {"subtype": "set_permission_mode", "mode": "plan"}}))
        .await;
    let model = cli.next().await.unwrap();
    assert_eq!(model["response"]["subtype"], "success");
    assert_eq!(
        model["response"]["response"],
        json!({"model": "fake-model-1"})
    );
    let mode = cli.next().await.unwrap();
    assert_eq!(mode["response"]["response"], json!({"mode": "plan"}));
    let status = cli.next().await.unwrap();
    assert_eq!(
        (&status["type"], &status["subtype"]),
        (&json!("system"), &json!("status"))
    );
    // bypassPermissions only when the process was started with it.
    cli.send(json!({"type": "control_request", "request_id": "b", "request": {"subtype": "set_permission_mode", "mode": "bypassPermissions"}}))
        .await;
    let refused = cli.next().await.unwrap();
    assert_eq!(refused["response"]["subtype"], "error");
    assert_eq!(refused["response"]["error_code"], "bypass_not_launched");
    let frames = cli.turn("hi").await;
    assert_eq!(frames[0]["model"], "fake-model-1");
    assert_eq!(frames[0]["permissionMode"], "plan");
    assert!(cli.finish().await.0.success());
}

#[tokio::test]
async fn fake_claude_interrupts_a_streaming_turn() {
    let home = Home::new();
    let mut cli = home.spawn(&[], &[("FAKE_CLAUDE_DELAY_MS", "100")]);
    cli.prompt("please stream a long answer").await;
    cli.until(|f| f["event"]["type"] == "content_block_delta")
        .await;
    cli.send(json!({"type": "control_request", "request_id": "req_1", "request": {"subtype": "interrupt"}}))
        .await;
    let frames = cli.until(|f| f["type"] == "result").await;
    let ack = frames
        .iter()
        .position(|f| f["type"] == "control_response")
        .unwrap();
    assert_eq!(
        frames[ack]["response"],
        json!({"subtype": "success", "request_id": "req_1", "response": {"still_queued": []}})
    );
    let aborted = frames.iter().position(|f| f["aborted"] == true).unwrap();
    assert!(aborted > ack);
    assert_eq!(frames[aborted]["type"], "assistant");
    assert_eq!(
        frames[aborted + 1]["message"]["content"][0]["text"],
        "[Request interrupted by user]"
    );
    let res = result(&frames);
    assert_eq!(res["subtype"], "error_during_execution");
    assert_eq!(res["is_error"], true);
    assert_eq!(res["terminal_reason"], "aborted_streaming");

    let next = cli.turn("and now").await;
    assert_eq!(result(&next)["result"], "Echo: and now (history 2)");
    assert!(cli.finish().await.0.success());
}

#[tokio::test]
async fn fake_claude_asks_permission_for_tools() {
    let home = Home::new();
    let log = home.workspace.join("calls.jsonl");
    let log_path = log.to_string_lossy().into_owned();
    let mut cli = home.spawn(&[], &[("FAKE_CLAUDE_LOG", &log_path)]);
    cli.prompt("please run TOOL:touch_x").await;
    let frames = cli.until(|f| f["type"] == "control_request").await;
    let tool_use = frames
        .iter()
        .find(|f| f["type"] == "assistant")
        .map(|f| &f["message"]["content"][0])
        .unwrap();
    assert_eq!(tool_use["type"], "tool_use");
    assert_eq!(tool_use["name"], "Bash");
    let request = frames.last().unwrap();
    assert_eq!(request["request"]["subtype"], "can_use_tool");
    assert_eq!(request["request"]["input"]["command"], "touch_x");
    assert_eq!(request["request"]["tool_use_id"], tool_use["id"]);
    cli.send(json!({"type": "control_response", "response": {
        "subtype": "success",
        "request_id": request["request_id"],
        "response": {"behavior": "allow", "updatedInput": {"command": "touch_y"}},
    }}))
    .await;
    let frames = cli.until(|f| f["type"] == "result").await;
    let tool_result = frames
        .iter()
        .find(|f| f["type"] == "user")
        .map(|f| &f["message"]["content"][0])
        .unwrap();
    assert_eq!(tool_result["type"], "tool_result");
    assert_eq!(tool_result["content"], "ran: touch_y");
    assert_eq!(tool_result["is_error"], false);
    let res = result(&frames);
    assert_eq!(res["subtype"], "success");
    assert_eq!(res["result"], "Tool said: ran: touch_y");
    assert!(cli.finish().await.0.success());

    let calls: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(calls[0]["argv"][1], "-p");
    assert_eq!(
        Path::new(calls[0]["cwd"].as_str().unwrap()),
        home.workspace.canonicalize().unwrap()
    );
    assert!(calls[1]["stdin"].as_str().unwrap().contains("TOOL:touch_x"));
}

#[tokio::test]
async fn fake_claude_switches() {
    let home = Home::new();
    let mut cli = home.spawn(
        &[],
        &[
            ("FAKE_CLAUDE_UNKNOWN_TYPES", "1"),
            ("FAKE_CLAUDE_HUGE_LINE_BYTES", "200000"),
        ],
    );
    let frames = cli.turn("hello").await;
    assert!(frames.iter().any(|f| f["type"] == "rate_limit_event"));
    assert!(frames.iter().any(|f| f["type"] == "command_lifecycle"));
    let huge = frames.iter().find(|f| f["subtype"] == "huge").unwrap();
    assert_eq!(huge.to_string().len(), 200_000);
    let (status, rest, _) = cli.finish().await;
    assert!(status.success());
    assert!(rest.iter().any(|f| f["subtype"] == "session_state_changed"));

    let mut cli = home.spawn(&[], &[("FAKE_CLAUDE_CRASH_AFTER_WORDS", "2")]);
    cli.prompt("one two three four").await;
    let (status, rest, stderr) = cli.finish().await;
    assert_eq!(status.code(), Some(1));
    let deltas = rest
        .iter()
        .filter(|f| f["event"]["type"] == "content_block_delta")
        .count();
    assert_eq!(deltas, 2);
    assert!(rest.iter().all(|f| f["type"] != "result"));
    assert!(!stderr.is_empty());
}

/// Sends one raw HTTP/1.1 request and returns the status code and the de-chunked body.
async fn http(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    tokio::time::timeout(TIMEOUT, stream.read_to_end(&mut raw))
        .await
        .expect("response in time")
        .expect("read");
    let raw = String::from_utf8(raw).expect("utf-8");
    let (head, mut rest) = raw.split_once("\r\n\r\n").expect("headers");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return (status, rest.to_string());
    }
    let mut body = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").expect("chunk size");
        let size = usize::from_str_radix(size.trim(), 16).expect("hex size");
        if size == 0 {
            return (status, body);
        }
        body.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
}

#[tokio::test]
async fn fake_anthropic_streams_messages() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let mut server = Command::new(sibling("fake-anthropic"))
        .args(["--port", "0", "--log"])
        .arg(&log)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn fake-anthropic");
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(TIMEOUT, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let port: u16 = first
        .strip_prefix("listening on http://127.0.0.1:")
        .expect("listening line")
        .parse()
        .unwrap();

    let request = json!({
        "model": "fake-model-1",
        "stream": true,
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>context</system-reminder>"},
                {"type": "text", "text": "hello one"},
            ]},
            {"role": "system", "content": "environment"},
            {"role": "assistant", "content": [{"type": "text", "text": "Echo: hello one (history 1)"}]},
            {"role": "user", "content": [{"type": "text", "text": "hello two"}]},
        ],
    });
    let (status, body) = http(port, "POST", "/v1/messages?beta=true", &request.to_string()).await;
    assert_eq!(status, 200);
    let events: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let mut kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    kinds.dedup();
    assert_eq!(
        kinds,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(events[0]["message"]["model"], "fake-model-1");
    let text: String = events
        .iter()
        .filter_map(|e| e["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "Echo: hello two (history 2)");
    assert_eq!(events[events.len() - 2]["delta"]["stop_reason"], "end_turn");

    let tool = json!({"model": "m", "stream": false, "messages": [
        {"role": "user", "content": "please TOOL:touch_x"},
    ]});
    let (status, body) = http(port, "POST", "/v1/messages", &tool.to_string()).await;
    assert_eq!(status, 200);
    let message: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(message["stop_reason"], "tool_use");
    assert_eq!(message["content"][0]["input"]["command"], "touch_x");

    assert_eq!(http(port, "HEAD", "/", "").await.0, 200);
    assert_eq!(http(port, "GET", "/v1/models", "").await.0, 404);

    let logged = std::fs::read_to_string(&log).unwrap();
    assert_eq!(logged.lines().count(), 2);
    let first_logged: Value = serde_json::from_str(logged.lines().next().unwrap()).unwrap();
    assert_eq!(first_logged, request);
    server.kill().await.unwrap();
}

/// What the real CLI refuses, the fake refuses the same way (no stdout, the message on
/// stderr, exit code 1): a flag it does not have, `--resume-session-at` without `--resume`,
/// a user line without its role (even after a turn).
#[tokio::test]
async fn fake_claude_refuses_what_the_real_cli_refuses() {
    let home = Home::new();
    let at = new_id();
    for (args, stderr_says) in [
        (
            vec!["--no-such-flag=1"],
            "error: unknown option '--no-such-flag=1'",
        ),
        (vec!["-x"], "error: unknown option '-x'"),
        (
            vec![&format!("--resume-session-at={at}") as &str],
            "Error: --resume-session-at requires --resume",
        ),
    ] {
        let mut cli = home.spawn(&args, &[]);
        cli.offer("hello").await;
        let (status, frames, stderr) = cli.finish().await;
        assert_eq!(status.code(), Some(1), "{args:?}");
        assert!(frames.is_empty(), "{args:?}: {frames:?}");
        assert!(stderr.contains(stderr_says), "{args:?}: {stderr}");
    }
    let mut cli = home.spawn(&[&session_arg(&new_id())], &[]);
    cli.turn("hello").await;
    cli.send(json!({"type": "user", "message": {"content": "no role"}}))
        .await;
    let (status, frames, stderr) = cli.finish().await;
    assert_eq!(status.code(), Some(1));
    assert!(frames.is_empty(), "{frames:?}");
    assert!(
        stderr.contains("Error: Expected message role 'user', got 'undefined'"),
        "{stderr}"
    );
}

/// Agent options take effect: a command `--allowedTools` covers runs without asking, one a
/// `--disallowedTools` pattern covers is denied without asking, a tool it names bare is gone,
/// `--max-turns=1` ends a turn whose tool result needs a second request with
/// `error_max_turns`, and an interrupt written at start-up stops the first turn (exit code 1,
/// the last result being an error).
#[tokio::test]
async fn fake_claude_applies_tool_options() {
    let home = Home::new();
    let mut cli = home.spawn(
        &[
            &session_arg(&new_id()),
            "--allowedTools=Bash(touch:*),Read",
            "--disallowedTools=Bash(rm:*)",
        ],
        &[],
    );
    let frames = cli.turn("TOOL:touch+a.txt").await;
    assert!(!frames.iter().any(|f| f["type"] == "control_request"));
    assert_eq!(result(&frames)["result"], "Tool said: ran: touch a.txt");
    let frames = cli.turn("TOOL:rm+a.txt").await;
    assert!(!frames.iter().any(|f| f["type"] == "control_request"));
    let denied = "Permission to use Bash with command rm a.txt has been denied.";
    assert!(
        frames
            .iter()
            .any(|f| f["subtype"] == "permission_denied" && f["message"] == denied)
    );
    assert_eq!(
        result(&frames)["permission_denials"][0]["tool_name"],
        "Bash"
    );
    cli.finish().await;

    let mut cli = home.spawn(&[&session_arg(&new_id()), "--disallowedTools=Bash"], &[]);
    let frames = cli.turn("TOOL:echo+hi").await;
    assert!(
        !frames[0]["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("Bash"))
    );
    let text = result(&frames)["result"].as_str().unwrap().to_owned();
    assert!(text.contains("No such tool available: Bash"), "{text}");
    cli.finish().await;

    let mut cli = home.spawn(&[&session_arg(&new_id()), "--max-turns=1"], &[]);
    let res = result(&cli.turn("TOOL:echo+hi").await).clone();
    assert_eq!(res["subtype"], "error_max_turns");
    assert_eq!(res["terminal_reason"], "max_turns");
    assert_eq!(res["errors"][0], "Reached maximum number of turns (1)");
    let res = result(&cli.turn("go on").await).clone();
    assert_eq!(
        res["result"], "Tool said: ran: echo hi",
        "the model answers the tool"
    );
    assert_eq!(cli.finish().await.0.code(), Some(0));

    let mut cli = home.spawn(&[&session_arg(&new_id())], &[]);
    cli.prompt("stopped").await;
    cli.send(
        json!({"type": "control_request", "request_id": "i", "request": {"subtype": "interrupt"}}),
    )
    .await;
    let (status, frames, _) = cli.finish().await;
    let res = result(&frames);
    assert_eq!(res["terminal_reason"], "aborted_streaming", "{res}");
    assert!(!frames.iter().any(|f| f["type"] == "assistant"));
    assert_eq!(status.code(), Some(1));
}
