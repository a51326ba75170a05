//! `agentmux chat` driven like a person would: in a terminal (tmux), through `/resume`, a
//! turn, a Ctrl-C interrupt and, after a server restart, `/resume --last`; in a project on a
//! server with authentication (tool calls, permission prompts, `/import`); and
//! non-interactively with `--resume --last`, piped input, a refused token or directory.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use serde_json::{Value, json};

use crate::claude::Fixture;
use crate::common::*;
use crate::projects::{transcript_line, write_transcript};
use crate::rest::turn;
use crate::security::{TOKENS, http};

/// A tmux server of its own running one `agentmux chat`; killed on drop.
pub(crate) struct Terminal {
    socket: String,
}

impl Terminal {
    pub(crate) fn tmux(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .env("TERM", "xterm")
            .output()
            .expect("run tmux")
    }

    /// Starts `agentmux chat --url <url>` in a detached 200x50 terminal.
    fn open(url: &str) -> Self {
        Self::open_in(url, &[], None)
    }

    /// Starts `agentmux chat --url <url> <args>` in a detached 200x50 terminal, in directory
    /// `dir` when given.
    pub(crate) fn open_in(url: &str, args: &[&str], dir: Option<&Path>) -> Self {
        sibling("agentmux-chat");
        let term = Terminal {
            socket: format!("agentmux-test-{}", uuid::Uuid::new_v4().simple()),
        };
        // Keep the pane after the client exits so its last words can still be read.
        let command = format!(
            "{} chat --url {url} {}; echo \"[exited $?]\"; sleep 600",
            env!("CARGO_BIN_EXE_agentmux"),
            args.join(" ")
        );
        let dir = dir.map(|d| d.to_string_lossy().into_owned());
        let mut tmux_args = vec!["new-session", "-d", "-s", "chat", "-x", "200", "-y", "50"];
        if let Some(dir) = &dir {
            tmux_args.extend(["-c", dir.as_str()]);
        }
        tmux_args.push(&command);
        let out = term.tmux(&tmux_args);
        assert!(
            out.status.success(),
            "tmux: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        term
    }

    pub(crate) fn screen(&self) -> String {
        let out = self.tmux(&["capture-pane", "-p", "-J", "-S", "-200", "-t", "chat"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Types `text` and presses Enter.
    pub(crate) fn type_line(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "chat", "-l", text]);
        self.tmux(&["send-keys", "-t", "chat", "Enter"]);
    }

    pub(crate) fn ctrl_c(&self) {
        self.tmux(&["send-keys", "-t", "chat", "C-c"]);
    }

    /// Waits until the screen shows `text` `times` times.
    pub(crate) async fn wait_for(&self, text: &str, times: usize) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if screen.matches(text).count() >= times {
                return screen;
            }
            assert!(
                start.elapsed() < WAIT,
                "never saw {text:?} (x{times}); screen:\n{screen}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}

pub(crate) fn have_tmux() -> bool {
    let found = std::process::Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "tmux is required under CI"
        );
        eprintln!("tmux is not installed: skipping (scripts/test.sh installs it)");
    }
    found
}

/// In a terminal: `/resume` lists the stored session, picking it shows its history; a turn
/// streams; Ctrl-C interrupts a long turn and the client stays usable; once the turn ended,
/// one Ctrl-C quits. After a server restart, `/resume --last` brings the session back.
#[tokio::test]
async fn terminal_client_resumes_chats_interrupts_and_resumes_after_restart() {
    if !have_tmux() {
        return;
    }
    // Turns 1 and 2 run through; turn 3 stops after its first word until it is interrupted.
    let gates = Gates::new("");
    gates.open_all("cli-1", 1..=2);
    let mut server = gates.start().await;
    let mut c = server.client().await;
    turn(&mut c, "cli-1", "first question").await;
    let url = format!("ws://{}/ws", server.addr);

    let term = Terminal::open(&url);
    term.wait_for("New session:", 1).await;
    term.type_line("/resume");
    let screen = term.wait_for("Pick a number", 1).await;
    assert!(screen.contains("1. first question  [cli-1]"), "{screen}");
    term.type_line("1");
    term.wait_for("Resumed session: cli-1 (4 messages loaded)", 1)
        .await;
    term.wait_for("Echo: first question (turn 1)", 1).await;

    term.type_line("second one");
    term.wait_for("Echo: second one (turn 2)", 1).await;

    term.type_line(
        "please give me a very long answer that streams for quite some time so it can be stopped",
    );
    // The third "Echo:" is turn 3's first word, held at its gate.
    term.wait_for("Echo:", 3).await;
    term.ctrl_c();
    term.wait_for("^C interrupting", 1).await;
    let screen = term.wait_for("[turn ended: aborted_streaming]", 1).await;
    assert!(
        !screen.contains("(turn 3)"),
        "the turn was cut short:\n{screen}"
    );
    term.type_line("/help");
    term.wait_for("/resume --last", 1).await;
    term.ctrl_c();
    term.wait_for("[exited 0]", 1).await;
    drop(term);

    server.terminate().await;
    let restarted = TestServer::start_in(&server.data_dir, &["--demo-delay-ms", "0"], &[]).await;
    let url = format!("ws://{}/ws", restarted.addr);
    let term = Terminal::open(&url);
    term.wait_for("New session:", 1).await;
    let (_, stored) = crate::rest::Rest::new(&restarted)
        .get("/api/sessions/cli-1")
        .await;
    term.type_line("/resume --last");
    let loaded = format!(
        "Resumed session: cli-1 ({} messages loaded)",
        stored["message_count"]
    );
    term.wait_for(&loaded, 1).await;
    term.type_line("after restart");
    term.wait_for("Echo: after restart (turn 4)", 1).await;
    term.type_line("/rename Renamed chat");
    term.wait_for("Renamed to: Renamed chat", 1).await;
    term.type_line("/list");
    term.wait_for("1. Renamed chat  [cli-1]", 1).await;
    term.type_line("/new");
    term.wait_for("New session: chat-", 2).await;
    term.type_line("/resume cli");
    term.wait_for("Resumed session: cli-1", 2).await;
}

/// As the README and `/help` say: with no turn running, one Ctrl-C quits.
#[tokio::test]
async fn one_ctrl_c_quits_when_no_turn_runs() {
    if !have_tmux() {
        return;
    }
    let server = TestServer::start().await;
    let term = Terminal::open(&format!("ws://{}/ws", server.addr));
    term.wait_for("New session:", 1).await;
    term.type_line("/help");
    let help = term.wait_for("/quit", 1).await;
    assert!(
        help.contains("with no turn") && help.contains("running, Ctrl-C quits"),
        "{help}"
    );
    term.ctrl_c();
    term.wait_for("[exited 0]", 1).await;
}

/// `agentmux chat --resume --last` with piped input: resumes, sends each line as a turn, and
/// exits after the last reply.
#[tokio::test]
async fn chat_resume_last_works_non_interactively() {
    sibling("agentmux-chat");
    let server = TestServer::start().await;
    let mut c = server.client().await;
    turn(&mut c, "older", "old").await;
    turn(&mut c, "newer", "new").await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
        .args([
            "chat",
            "--url",
            &format!("ws://{}/ws", server.addr),
            "--resume",
            "--last",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"piped one\npiped two\n").await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("the client exits after the last reply")
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("Resumed session: newer (4 messages loaded)"),
        "{text}"
    );
    assert!(text.contains("Echo: new (turn 1)"), "{text}");
    assert!(text.contains("Echo: piped one (turn 2)"), "{text}");
    assert!(text.contains("Echo: piped two (turn 3)"), "{text}");
}

/// A project root with project `app` and a server (fake CLI, tokens for alice and bob) that
/// opens it; the CLI config dir is the fixture's.
fn project_server_fixture() -> (tempfile::TempDir, std::path::PathBuf, Fixture) {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap().join("root");
    let app = root.join("app");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::create_dir_all(tmp.path().join("outside")).unwrap();
    let fx = Fixture::new(&format!(
        "{TOKENS}\n[projects]\nroots = [{{ path = {} }}]\n[session]\npermission_timeout_secs = 3600\n",
        toml_string(&root.to_string_lossy())
    ));
    (tmp, app, fx)
}

async fn get(server: &TestServer, path: &str, token: &str) -> Value {
    let r = http(&server.addr, "GET", path, Some(token), None).await;
    assert_eq!(r.status, 200, "{path}: {}", r.body);
    serde_json::from_str(&r.body).unwrap()
}

/// In a terminal, started inside a project of a server with authentication on and only a
/// token: the new conversation works in that project (REST shows its cwd); each tool call
/// shows as one line; permission prompts are answered `y` (the tool runs), `n` (refused) and
/// `a` (runs, and the next request of that tool is allowed without asking); `/import` lists
/// the project's CLI sessions, imports the picked one, shows its history and continues it.
#[tokio::test]
async fn terminal_client_works_in_a_project_with_a_token_and_answers_permissions() {
    if !have_tmux() {
        return;
    }
    let (_tmp, app, fx) = project_server_fixture();
    let server = fx.start(&[]).await;
    let url = format!("ws://{}/ws", server.addr);
    let term = Terminal::open_in(&url, &["--token", "tok-alice"], Some(&app));
    let screen = term.wait_for("New session: chat-", 1).await;
    assert!(
        screen.contains(&format!(" in {}", app.display())),
        "{screen}"
    );

    term.type_line("please run TOOL:touch+one");
    term.wait_for("\u{2699} Bash: touch one", 1).await;
    term.wait_for("? Allow Bash: touch one  [y]es / [n]o / [a]lways", 1)
        .await;
    term.type_line("y");
    term.wait_for("Tool said: ran: touch one", 1).await;

    term.type_line("now TOOL:touch+two");
    term.wait_for("? Allow Bash: touch two", 1).await;
    term.type_line("maybe");
    term.wait_for("answer y (allow), n (deny) or a", 1).await;
    term.type_line("n");
    term.wait_for("Tool said: The user said no in the terminal.", 1)
        .await;

    term.type_line("then TOOL:touch+three");
    term.wait_for("? Allow Bash: touch three", 1).await;
    term.type_line("a");
    term.wait_for("Tool said: ran: touch three", 1).await;
    term.type_line("last TOOL:touch+four");
    let screen = term.wait_for("Tool said: ran: touch four", 1).await;
    assert!(
        !screen.contains("? Allow Bash: touch four"),
        "always allowed, not asked again:\n{screen}"
    );
    assert!(
        screen.contains("(allowed touch four: Bash is always allowed)"),
        "{screen}"
    );

    // The conversation works in the project, and it is alice's.
    let list = get(&server, "/api/sessions?total=true", "tok-alice").await;
    assert_eq!(list["total"], 1, "{list}");
    assert_eq!(list["sessions"][0]["cwd"], app.to_string_lossy().as_ref());
    let agent_id = list["sessions"][0]["agent_id"].as_str().unwrap().to_owned();
    let one = get(&server, &format!("/api/sessions/{agent_id}"), "tok-alice").await;
    assert_eq!(one["cwd"], app.to_string_lossy().as_ref());
    assert_eq!(
        get(&server, "/api/sessions?total=true", "tok-bob").await["total"],
        0
    );
    let spawns = fx.spawns();
    assert_eq!(spawns.len(), 1, "{spawns:?}");
    assert_eq!(spawns[0]["cwd"], app.to_string_lossy().as_ref());

    // A session the user ran with the CLI in the project, imported from the terminal.
    let id = "2f0a5e1c-4a43-4a53-9d5c-3a3c7d2c1f00";
    let transcript = [
        transcript_line("user", "u1", id, &app, json!("what is in this repo")),
        transcript_line(
            "assistant",
            "a1",
            id,
            &app,
            json!([{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls -la"}}]),
        ),
        transcript_line(
            "user",
            "u2",
            id,
            &app,
            json!([{"type": "tool_result", "tool_use_id": "t1", "content": "README.md"}]),
        ),
        transcript_line(
            "assistant",
            "a2",
            id,
            &app,
            json!([{"type": "text", "text": "Only a README so far."}]),
        ),
    ]
    .join("\n");
    write_transcript(&fx.dir.path().join("claude-home"), &app, id, &transcript);
    term.type_line("/import");
    let screen = term
        .wait_for("Pick a number or a session id to import", 1)
        .await;
    assert!(
        screen.contains(&format!("1. what is in this repo  [{id}]")),
        "{screen}"
    );
    term.type_line("1");
    term.wait_for(&format!("Imported CLI session {id} as {id}"), 1)
        .await;
    term.wait_for(&format!("Resumed session: {id}"), 1).await;
    term.wait_for("\u{2699} Bash: ls -la", 1).await;
    term.wait_for("Only a README so far.", 1).await;
    term.type_line("and now?");
    term.wait_for("Echo: and now?", 1).await;
    let imported = get(&server, &format!("/api/sessions/{id}"), "tok-alice").await;
    assert_eq!(imported["cwd"], app.to_string_lossy().as_ref());
    assert_eq!(imported["session_id"], id);
    let resumed = fx.spawns().pop().unwrap();
    assert!(
        resumed["argv"]
            .as_array()
            .unwrap()
            .contains(&json!(format!("--resume={id}"))),
        "{resumed}"
    );
    // Picking it again opens the imported conversation instead of importing twice.
    term.type_line("/import 1");
    term.wait_for(&format!("already imported as {id}"), 1).await;
    term.wait_for(&format!("Resumed session: {id}"), 2).await;
}

/// Runs `agentmux chat <args>` with `input` piped in; its exit code, stdout and stderr.
pub(crate) async fn chat_piped(args: &[&str], input: &str) -> (Option<i32>, String, String) {
    sibling("agentmux-chat");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
        .arg("chat")
        .args(args)
        .env_remove("AGENTMUX_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("the client exits")
        .unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Against a server with authentication on: no token and a wrong token are clear errors,
/// `AGENTMUX_TOKEN`-less `--token` works; `--cwd` outside every root (or a link out of it) is
/// refused by the server and creates nothing; `--cwd` inside one reaches the conversation.
#[tokio::test]
async fn chat_with_a_token_and_a_cwd_non_interactively() {
    let (tmp, app, fx) = project_server_fixture();
    let server = fx.start(&[]).await;
    let url = format!("ws://{}/ws", server.addr);

    let (code, _, err) = chat_piped(&["--url", &url], "hi\n").await;
    assert_eq!(code, Some(1));
    assert!(
        err.contains("needs a token: pass --token or set AGENTMUX_TOKEN"),
        "{err}"
    );
    let (code, _, err) = chat_piped(&["--url", &url, "--token", "tok-nobody"], "hi\n").await;
    assert_eq!(code, Some(1));
    assert!(err.contains("refused the token"), "{err}");

    let outside = std::fs::canonicalize(tmp.path().join("outside")).unwrap();
    std::os::unix::fs::symlink(&outside, app.join("link-out")).unwrap();
    for refused in [outside.clone(), app.join("link-out")] {
        let (code, out, _) = chat_piped(
            &[
                "--url",
                &url,
                "--token",
                "tok-bob",
                "--cwd",
                &refused.to_string_lossy(),
            ],
            "hi\n",
        )
        .await;
        assert_eq!(code, Some(0), "{out}");
        assert!(out.contains("error (invalid_options)"), "{out}");
    }
    assert_eq!(
        get(&server, "/api/sessions?total=true", "tok-bob").await["total"],
        0
    );
    assert!(fx.spawns().is_empty(), "no agent started");

    let (code, out, _) = chat_piped(
        &[
            "--url",
            &url,
            "--token",
            "tok-bob",
            "--cwd",
            &app.to_string_lossy(),
        ],
        "hello there\n",
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("Echo: hello there"), "{out}");
    let list = get(&server, "/api/sessions", "tok-bob").await;
    assert_eq!(list["sessions"][0]["cwd"], app.to_string_lossy().as_ref());
}

/// `--agent` picks the agent of new conversations: the server reports it; an agent the server
/// doesn't have is refused and creates nothing.
#[tokio::test]
async fn chat_runs_new_sessions_on_the_agent_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agents.toml");
    std::fs::write(&config, "[agents.helper]\nkind = \"demo\"\n").unwrap();
    let config = config.to_string_lossy();
    let server = TestServer::start_with(&["--config", &config, "--demo-delay-ms", "0"]).await;
    let url = format!("ws://{}/ws", server.addr);
    let rest = crate::rest::Rest::new(&server);

    for refused in ["--agent=nosuch", "--agent=-rf", "--agent=../demo"] {
        let (code, out, _) = chat_piped(&["--url", &url, refused], "hi\n").await;
        assert_eq!(code, Some(0), "{refused}: {out}");
        assert!(out.contains("error (invalid_options)"), "{refused}: {out}");
    }
    assert_eq!(rest.get("/api/sessions?total=true").await.1["total"], 0);

    // The agent's models are listed and one is picked for the next messages; one it does not
    // list is refused before anything is sent.
    let (code, out, _) = chat_piped(
        &["--url", &url, "--agent", "helper"],
        "/model\n/model nosuch\n/model demo-2\nwith a model\n",
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("demo-2  (Demo 2)"), "{out}");
    assert!(out.contains("the agent has no model `nosuch`"), "{out}");
    assert!(out.contains("Echo: with a model (turn 1)"), "{out}");
    let list = rest.get("/api/sessions").await.1;
    assert_eq!(list["sessions"][0]["model"], "demo-2", "{list}");
    rest.delete(&format!(
        "/api/sessions/{}",
        list["sessions"][0]["agent_id"].as_str().unwrap()
    ))
    .await;

    let (code, out, _) = chat_piped(&["--url", &url, "--agent", "helper"], "hello helper\n").await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("Echo: hello helper (turn 1)"), "{out}");
    let list = rest.get("/api/sessions?total=true").await.1;
    assert_eq!(
        (&list["total"], &list["sessions"][0]["backend"]),
        (&json!(1), &json!("helper"))
    );
}
