//! `agentmux chat` driven like a person would: in a terminal (tmux), through `/resume`, a
//! turn, a Ctrl-C interrupt and, after a server restart, `/resume --last`; and
//! non-interactively with `--resume --last` and piped input.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use crate::common::*;
use crate::rest::turn;

/// A tmux server of its own running one `agentmux chat`; killed on drop.
struct Terminal {
    socket: String,
}

impl Terminal {
    fn tmux(&self, args: &[&str]) -> std::process::Output {
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
        sibling("agentmux-chat");
        let term = Terminal {
            socket: format!("agentmux-test-{}", uuid::Uuid::new_v4().simple()),
        };
        // Keep the pane after the client exits so its last words can still be read.
        let command = format!(
            "{} chat --url {url}; echo \"[exited $?]\"; sleep 600",
            env!("CARGO_BIN_EXE_agentmux")
        );
        let out = term.tmux(&[
            "new-session",
            "-d",
            "-s",
            "chat",
            "-x",
            "200",
            "-y",
            "50",
            &command,
        ]);
        assert!(
            out.status.success(),
            "tmux: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        term
    }

    fn screen(&self) -> String {
        let out = self.tmux(&["capture-pane", "-p", "-J", "-S", "-200", "-t", "chat"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Types `text` and presses Enter.
    fn type_line(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "chat", "-l", text]);
        self.tmux(&["send-keys", "-t", "chat", "Enter"]);
    }

    fn ctrl_c(&self) {
        self.tmux(&["send-keys", "-t", "chat", "C-c"]);
    }

    /// Waits until the screen shows `text` `times` times.
    async fn wait_for(&self, text: &str, times: usize) -> String {
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

fn have_tmux() -> bool {
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
