//! The Claude CLI backend, through the fake CLI that reproduces the real one's stream-json
//! behaviour: identity, resume, refusal, interrupts, crashes, permissions, the process cap,
//! the pre-warmed spare and process hygiene.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::*;

/// Every switch of the fake that a test may set through the server's environment.
const FAKE_SWITCHES: &[&str] = &[
    "FAKE_CLAUDE_DELAY_MS",
    "FAKE_CLAUDE_LOG",
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
    "FAKE_CLAUDE_FAIL_START_IF",
    "IS_SANDBOX",
];

/// A data dir, a CLI home and a log of everything the fake CLI saw.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub log: PathBuf,
    pub config: PathBuf,
}

impl Fixture {
    pub fn new(extra_toml: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("fake.log");
        let config = dir.path().join("agentmux.toml");
        let allow: Vec<String> = FAKE_SWITCHES.iter().map(|s| format!("\"{s}\"")).collect();
        let home = dir.path().join("claude-home");
        let toml = format!(
            "{extra_toml}\n[claude]\nconfig_dir = \"{}\"\nenv_allow = [{}]\nstop_grace_secs = 1\n",
            home.display(),
            allow.join(", ")
        );
        let toml = merge_claude_section(&toml);
        std::fs::write(&config, toml).unwrap();
        Fixture { log, config, dir }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub async fn start(&self, env: &[(&str, &str)]) -> TestServer {
        self.start_with(&[], env).await
    }

    /// [`Fixture::start`] with more arguments for `agentmux serve`.
    pub async fn start_with(&self, args: &[&str], env: &[(&str, &str)]) -> TestServer {
        let log = self.log.to_string_lossy().into_owned();
        let mut all: Vec<(&str, &str)> = vec![("FAKE_CLAUDE_LOG", &log)];
        all.extend_from_slice(env);
        let config = self.config.to_string_lossy().into_owned();
        let fake = sibling("fake-claude");
        let mut argv = vec![
            "--backend",
            "claude",
            "--claude-bin",
            fake.to_str().unwrap(),
            "--config",
            &config,
        ];
        argv.extend_from_slice(args);
        TestServer::start_in(&self.data_dir(), &argv, &all).await
    }

    pub fn entries(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Each process the server started: its argv and cwd.
    pub fn spawns(&self) -> Vec<Value> {
        self.entries()
            .into_iter()
            .filter(|e| e["argv"].is_array())
            .collect()
    }

    /// Every stdin line the fake got, with its pid.
    pub fn stdin(&self) -> Vec<(i64, Value)> {
        self.entries()
            .into_iter()
            .filter_map(|e| {
                Some((
                    e["pid"].as_i64()?,
                    serde_json::from_str(e["stdin"].as_str()?).ok()?,
                ))
            })
            .collect()
    }

    /// pids of the processes that got a user turn.
    pub fn prompt_pids(&self) -> Vec<i64> {
        self.stdin()
            .into_iter()
            .filter(|(_, v)| v["type"] == "user")
            .map(|(p, _)| p)
            .collect()
    }
}

/// Folds an extra `[claude]` table from the test into the fixture's own.
fn merge_claude_section(toml: &str) -> String {
    let mut value: toml_edit_free::Table = toml_edit_free::parse(toml);
    value.fold_claude();
    value.render()
}

/// Minimal TOML table merging for test configs: lines under repeated `[claude]` headers are
/// gathered under one.
mod toml_edit_free {
    pub struct Table {
        top: Vec<String>,
        sections: Vec<(String, Vec<String>)>,
    }

    pub fn parse(text: &str) -> Table {
        let mut table = Table {
            top: Vec::new(),
            sections: Vec::new(),
        };
        for line in text.lines() {
            if line.starts_with('[') {
                table.sections.push((line.to_owned(), Vec::new()));
            } else if let Some((_, lines)) = table.sections.last_mut() {
                lines.push(line.to_owned());
            } else {
                table.top.push(line.to_owned());
            }
        }
        table
    }

    impl Table {
        pub fn fold_claude(&mut self) {
            let mut merged: Vec<(String, Vec<String>)> = Vec::new();
            for (header, lines) in self.sections.drain(..) {
                match merged.iter_mut().find(|(h, _)| *h == header) {
                    Some((_, existing)) => existing.extend(lines),
                    None => merged.push((header, lines)),
                }
            }
            self.sections = merged;
        }

        pub fn render(&self) -> String {
            let mut out = self.top.join("\n");
            for (header, lines) in &self.sections {
                out.push_str(&format!("\n{header}\n{}\n", lines.join("\n")));
            }
            out
        }
    }
}

pub(crate) fn arg<'a>(spawn: &'a Value, prefix: &str) -> Option<&'a str> {
    spawn["argv"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix(prefix))
}

pub(crate) fn alive(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .chars()
                .next();
            state != Some('Z')
        })
        .unwrap_or(false)
}

/// No process the server started is still running.
async fn assert_no_leftovers(fixture: &Fixture) {
    for spawn in fixture.spawns() {
        let pid = spawn["pid"].as_i64().unwrap();
        let mut tries = 0;
        while alive(pid) && tries < 50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            tries += 1;
        }
        assert!(!alive(pid), "CLI process {pid} outlived the server");
    }
}

pub(crate) async fn stop(mut server: TestServer, fixture: &Fixture) {
    assert!(server.terminate().await.success());
    assert_no_leftovers(fixture).await;
}

/// A new conversation starts the CLI with the exact command line, our session_id as its id and
/// its own workspace; the init id is recorded as unified; two turns share one process.
#[tokio::test]
async fn new_conversation_is_unified_and_one_process_serves_many_turns() {
    let fx = Fixture::new("");
    let server = fx.start(&[]).await;
    let mut c = server.client().await;
    let ack = chat_ack(&mut c, "u1", "hello").await;
    let session_id = ack["session_id"].as_str().unwrap().to_owned();
    let first = c.until_result("u1").await;
    assert_eq!(reply_text(&first), "Echo: hello (history 1)");
    let init = first
        .iter()
        .find(|f| f["message_type"] == "system")
        .unwrap();
    assert_eq!(init["message"]["session_id"], session_id.as_str());
    chat_ack(&mut c, "u1", "again").await;
    assert_eq!(
        reply_text(&c.until_result("u1").await),
        "Echo: again (history 2)"
    );

    let spawns = fx.spawns();
    assert_eq!(spawns.len(), 1, "one process for both turns");
    let argv: Vec<&str> = spawns[0]["argv"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let expected = [
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
    assert_eq!(&argv[1..10], &expected);
    assert_eq!(argv[10], format!("--session-id={session_id}"));
    let cwd = Path::new(spawns[0]["cwd"].as_str().unwrap());
    assert_eq!(
        cwd,
        server
            .data_dir
            .join("workspaces")
            .join(&session_id)
            .canonicalize()
            .unwrap()
    );
    let prompts = fx.prompt_pids();
    assert_eq!(prompts.len(), 2);
    assert_eq!(prompts[0], prompts[1]);
    // initialize went first.
    let first_line = &fx.stdin()[0].1;
    assert_eq!(first_line["request"]["subtype"], "initialize");

    stop(server, &fx).await;
    let db = open_db(&fx.data_dir()).await;
    let (sdk, unified): (String, i64) = sqlx::query_as(
        "select sdk_session_id, case when unified then 1 else 0 end from session_info where agent_id = 'u1'",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!(sdk, session_id);
    assert_eq!(unified, 1);
}

/// After eviction and after a server restart the CLI is resumed with --resume=<reported id> in
/// the same workspace, and the model sees the earlier turns.
#[tokio::test]
async fn resume_after_eviction_and_restart() {
    let fx = Fixture::new("[session]\nidle_evict_secs = 1\n");
    let mut server = fx.start(&[]).await;
    let mut c = server.client().await;
    let ack = chat_ack(&mut c, "r", "one").await;
    let sid = ack["session_id"].as_str().unwrap().to_owned();
    c.until_result("r").await;
    c.recv_until(|f| f["status"] == "evicted").await;
    chat_ack(&mut c, "r", "two").await;
    assert_eq!(
        reply_text(&c.until_result("r").await),
        "Echo: two (history 2)"
    );
    assert!(server.terminate().await.success());

    let server2 = fx.start(&[]).await;
    let mut c = server2.client().await;
    chat_ack(&mut c, "r", "three").await;
    assert_eq!(
        reply_text(&c.until_result("r").await),
        "Echo: three (history 3)"
    );
    let spawns = fx.spawns();
    assert_eq!(spawns.len(), 3);
    assert_eq!(arg(&spawns[0], "--session-id="), Some(sid.as_str()));
    for s in &spawns[1..] {
        assert_eq!(arg(s, "--resume="), Some(sid.as_str()));
        assert_eq!(
            arg(s, "--session-id="),
            None,
            "--session-id is never reused"
        );
        assert_eq!(s["cwd"], spawns[0]["cwd"]);
    }
    stop(server2, &fx).await;
}

/// When the CLI can't find the conversation to resume, a fresh one starts under a new id, the
/// client is told, the new id is recorded, and the stored history stays.
#[tokio::test]
async fn refused_resume_starts_fresh() {
    let fx = Fixture::new("");
    let mut server = fx.start(&[]).await;
    let mut c = server.client().await;
    let ack = chat_ack(&mut c, "rf", "one").await;
    let sid = ack["session_id"].as_str().unwrap().to_owned();
    c.until_result("rf").await;
    assert!(server.terminate().await.success());

    let server2 = fx.start(&[("FAKE_CLAUDE_REFUSE_RESUME", "1")]).await;
    let mut c = server2.client().await;
    chat_ack(&mut c, "rf", "two").await;
    let frames = c.until_result("rf").await;
    assert!(
        frames.iter().any(|f| f["status"] == "resume_failed"),
        "{frames:?}"
    );
    assert_eq!(reply_text(&frames), "Echo: two (history 1)");
    assert!(
        !frames
            .iter()
            .any(|f| f["message_type"] == "result" && f["message"]["is_error"] == true)
    );
    let spawns = fx.spawns();
    let fresh = arg(spawns.last().unwrap(), "--session-id=")
        .unwrap()
        .to_owned();
    assert_ne!(fresh, sid);
    stop(server2, &fx).await;
    let db = open_db(&fx.data_dir()).await;
    let (sdk, unified, session_id, count): (String, i64, String, i64) = sqlx::query_as(
        "select sdk_session_id, case when unified then 1 else 0 end, session_id, message_count
         from session_info where agent_id = 'rf'",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!(
        (sdk.as_str(), unified, session_id.as_str()),
        (fresh.as_str(), 0, sid.as_str())
    );
    assert!(count > 4, "the stored history is kept");
}

/// An interrupt mid-stream ends the turn through the control protocol; the same process runs
/// the next turn.
#[tokio::test]
async fn interrupt_is_honoured() {
    let fx = Fixture::new("");
    let server = fx.start(&[("FAKE_CLAUDE_DELAY_MS", "100")]).await;
    let mut c = server.client().await;
    chat_ack(&mut c, "int", "a b c d e f g h i j k l m n o p").await;
    c.recv_until(|f| {
        f["message_type"] == "stream_event"
            && f["message"]["event"]["type"] == "content_block_delta"
    })
    .await;
    c.send(json!({"type": "interrupt", "agent_id": "int"}))
        .await;
    let frames = c.until_result("int").await;
    assert_eq!(
        frames.last().unwrap()["message"]["terminal_reason"],
        "aborted_streaming"
    );
    chat_ack(&mut c, "int", "next").await;
    assert_eq!(
        reply_text(&c.until_result("int").await),
        "Echo: next (history 2)"
    );
    assert_eq!(fx.spawns().len(), 1);
    let interrupts = fx
        .stdin()
        .iter()
        .filter(|(_, v)| v["request"]["subtype"] == "interrupt")
        .count();
    assert_eq!(interrupts, 1);
    stop(server, &fx).await;
}

/// An interrupt that reaches a running CLI after the prompt but before the turn's init (which
/// the CLI would ignore) is held and applied: the CLI itself ends the turn as interrupted, the
/// same process carries on, and the next turn reaches the model together with the interrupted
/// prompt, as the real CLI sends it.
#[tokio::test]
async fn early_interrupt_is_held() {
    let fx = Fixture::new("");
    let server = fx
        .start(&[
            ("FAKE_CLAUDE_DELAY_MS", "100"),
            ("FAKE_CLAUDE_TURN_DELAY_MS", "300"),
        ])
        .await;
    let mut c = server.client().await;
    chat_ack(&mut c, "early", "first").await;
    assert_eq!(
        reply_text(&c.until_result("early").await),
        "Echo: first (history 1)"
    );
    c.chat("early", "second a b c d e f g h").await;
    c.send(json!({"type": "interrupt", "agent_id": "early"}))
        .await;
    let frames = c.until_result("early").await;
    let result = &frames.last().unwrap()["message"];
    assert_eq!(result["terminal_reason"], "aborted_streaming", "{result}");
    assert!(
        result["errors"][0]
            .as_str()
            .is_some_and(|e| e.starts_with("[ede_diagnostic]")),
        "the CLI ended the turn, not the server: {result}"
    );
    chat_ack(&mut c, "early", "third").await;
    assert_eq!(
        reply_text(&c.until_result("early").await),
        "Echo: second a b c d e f g h\nthird (history 2)"
    );
    let pids = fx.prompt_pids();
    assert_eq!(pids.len(), 3);
    assert!(pids.iter().all(|p| *p == pids[0]), "one process: {pids:?}");
    stop(server, &fx).await;
}

/// An interrupt while the CLI is still starting (it takes about 0.65 s to answer `initialize`)
/// ends the turn before it reaches the CLI: the next turn starts with a clean slate on the same
/// process.
#[tokio::test]
async fn interrupt_during_startup_drops_the_turn() {
    let fx = Fixture::new("");
    let server = fx.start(&[("FAKE_CLAUDE_INIT_DELAY_MS", "700")]).await;
    let mut c = server.client().await;
    c.chat("boot", "never sent").await;
    c.send(json!({"type": "interrupt", "agent_id": "boot"}))
        .await;
    let frames = c.until_result("boot").await;
    let result = &frames.last().unwrap()["message"];
    assert_eq!(result["terminal_reason"], "aborted_streaming", "{result}");
    chat_ack(&mut c, "boot", "next").await;
    assert_eq!(
        reply_text(&c.until_result("boot").await),
        "Echo: next (history 1)"
    );
    let prompts: Vec<String> = fx
        .stdin()
        .into_iter()
        .filter(|(_, v)| v["type"] == "user")
        .map(|(_, v)| {
            v["message"]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(prompts, ["next"]);
    assert_eq!(fx.spawns().len(), 1);
    stop(server, &fx).await;
}

/// A chat with a new model or permission mode that the running CLI refuses (a model its API
/// check rejects; `bypassPermissions` in a process not started with it) restarts the CLI with
/// resume under the new settings: clients get `restarting`, the turn runs on the new process
/// and the conversation is remembered.
#[tokio::test]
async fn refused_settings_restart_with_resume() {
    let fx = Fixture::new("[agent]\nallow_bypass_permissions = true\n");
    let server = fx
        .start(&[("FAKE_CLAUDE_REFUSE_SET_MODEL", "1"), ("IS_SANDBOX", "1")])
        .await;
    let mut c = server.client().await;
    let ack = chat_ack(&mut c, "opt", "one").await;
    let sid = ack["session_id"].as_str().unwrap().to_owned();
    c.until_result("opt").await;

    c.send(json!({"type": "chat", "agent_id": "opt", "content": "two",
        "options": {"model": "fake-model-2"}}))
        .await;
    let frames = c.until_result("opt").await;
    let restarting = frames
        .iter()
        .find(|f| f["status"] == "restarting")
        .unwrap_or_else(|| panic!("a restarting status: {frames:?}"));
    assert!(
        restarting["detail"]
            .as_str()
            .unwrap()
            .contains("Unable to validate model"),
        "{restarting}"
    );
    assert_eq!(reply_text(&frames), "Echo: two (history 2)");
    let init = frames
        .iter()
        .find(|f| f["message"]["subtype"] == "init")
        .unwrap();
    assert_eq!(init["message"]["model"], "fake-model-2");
    let spawns = fx.spawns();
    assert_eq!(spawns.len(), 2);
    assert_eq!(arg(&spawns[1], "--resume="), Some(sid.as_str()));
    assert_eq!(arg(&spawns[1], "--model="), Some("fake-model-2"));

    // The next turn runs on the restarted process and remembers.
    chat_ack(&mut c, "opt", "three").await;
    assert_eq!(
        reply_text(&c.until_result("opt").await),
        "Echo: three (history 3)"
    );
    let second_pid = spawns[1]["pid"].as_i64().unwrap();
    assert_eq!(fx.prompt_pids().last(), Some(&second_pid));

    // bypassPermissions can only be had by starting the CLI with it.
    c.send(
        json!({"type": "chat", "agent_id": "opt", "content": "TOOL:curl+http://example.com",
        "options": {"permission_mode": "bypassPermissions"}}),
    )
    .await;
    let frames = c.until_result("opt").await;
    assert!(frames.iter().any(|f| f["status"] == "restarting"));
    assert!(
        !frames
            .iter()
            .any(|f| f["message_type"] == "permission_request"),
        "bypassPermissions asks nothing"
    );
    assert!(
        frames
            .iter()
            .any(|f| f.to_string().contains("ran: curl http://example.com"))
    );
    let spawns = fx.spawns();
    assert_eq!(spawns.len(), 3);
    assert_eq!(
        arg(&spawns[2], "--permission-mode="),
        Some("bypassPermissions")
    );
    assert_eq!(arg(&spawns[2], "--resume="), Some(sid.as_str()));
    chat_ack(&mut c, "opt", "four").await;
    assert_eq!(
        reply_text(&c.until_result("opt").await),
        "Echo: four (history 5)"
    );
    stop(server, &fx).await;
}

/// Stopping a CLI that ignores stdin EOF and SIGTERM goes the whole way: stdin closed, then
/// SIGTERM, then SIGKILL; the process is gone.
#[tokio::test]
async fn stop_escalates_to_term_then_kill() {
    let fx = Fixture::new("[session]\nidle_evict_secs = 1\n");
    let server = fx
        .start(&[
            ("FAKE_CLAUDE_IGNORE_EOF", "1"),
            ("FAKE_CLAUDE_IGNORE_SIGTERM", "1"),
        ])
        .await;
    let mut c = server.client().await;
    chat_ack(&mut c, "stuck", "hi").await;
    c.until_result("stuck").await;
    let pid = fx.spawns()[0]["pid"].as_i64().unwrap();
    c.recv_until(|f| f["status"] == "evicted").await;
    let mut tries = 0;
    while alive(pid) && tries < 100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        tries += 1;
    }
    assert!(!alive(pid), "the stuck CLI {pid} is gone");
    let events: Vec<Value> = fx
        .entries()
        .into_iter()
        .filter(|e| e["pid"] == pid && (e["event"].is_string() || e["signal"].is_string()))
        .collect();
    assert_eq!(
        events,
        [
            json!({"pid": pid, "event": "stdin_closed"}),
            json!({"pid": pid, "signal": "SIGTERM", "ignored": true}),
        ],
        "stdin was closed, then SIGTERM sent; only SIGKILL can have ended it"
    );
    stop(server, &fx).await;
}

/// A CLI that ignores the interrupt is stopped after the deadline; the next chat resumes it.
#[tokio::test]
async fn ignored_interrupt_escalates() {
    let fx = Fixture::new("[session]\ninterrupt_timeout_secs = 1\n");
    let server = fx
        .start(&[
            ("FAKE_CLAUDE_DELAY_MS", "100"),
            ("FAKE_CLAUDE_IGNORE_INTERRUPT", "1"),
        ])
        .await;
    let mut c = server.client().await;
    let ack = chat_ack(&mut c, "ig", &"word ".repeat(100)).await;
    c.recv_until(|f| f["message_type"] == "stream_event").await;
    c.send(json!({"type": "interrupt", "agent_id": "ig"})).await;
    let frames = c.until_result("ig").await;
    assert_eq!(
        frames.last().unwrap()["message"]["terminal_reason"],
        "interrupt_timeout"
    );
    let first_pid = fx.spawns()[0]["pid"].as_i64().unwrap();
    assert!(!alive(first_pid), "the stuck CLI was stopped");
    chat_ack(&mut c, "ig", "after").await;
    let next = c.until_result("ig").await;
    assert_eq!(reply_text(&next), "Echo: after (history 2)");
    let spawns = fx.spawns();
    assert_eq!(
        arg(spawns.last().unwrap(), "--resume="),
        ack["session_id"].as_str()
    );
    stop(server, &fx).await;
}

/// A CLI that dies mid-turn: `crashed`, an error result, and the next chat resumes.
#[tokio::test]
async fn crash_mid_turn_then_resume() {
    let fx = Fixture::new("");
    let server = fx.start(&[("FAKE_CLAUDE_DELAY_MS", "20")]).await;
    let mut c = server.client().await;
    let ack = chat_ack(&mut c, "cr", "first").await;
    c.until_result("cr").await;
    chat_ack(&mut c, "cr", "please CRASH now with many words here").await;
    let frames = c.until_result("cr").await;
    assert!(frames.iter().any(|f| f["status"] == "crashed"));
    assert_eq!(
        frames.last().unwrap()["message"]["terminal_reason"],
        "crashed"
    );
    chat_ack(&mut c, "cr", "third").await;
    let next = c.until_result("cr").await;
    assert_eq!(reply_text(&next), "Echo: third (history 3)");
    assert_eq!(
        arg(fx.spawns().last().unwrap(), "--resume="),
        ack["session_id"].as_str()
    );
    stop(server, &fx).await;
}

/// Tool permissions: allow (with edited input) and deny round-trip through the client; an
/// unanswered request times out to deny; a pending request is replayed to a new socket.
#[tokio::test]
async fn permissions_round_trip() {
    let fx = Fixture::new("[session]\npermission_timeout_secs = 2\n");
    let server = fx.start(&[]).await;
    let mut c = server.client().await;

    chat_ack(&mut c, "p", "please run TOOL:touch_x").await;
    let req = c
        .recv_until(|f| f["message_type"] == "permission_request")
        .await
        .pop()
        .unwrap();
    assert_eq!(req["tool_name"], "Bash");
    assert_eq!(req["input"]["command"], "touch_x");
    assert!(req["seq"].is_i64(), "permission requests are stored");
    c.send(
        json!({"type": "permission_response", "agent_id": "p", "request_id": req["request_id"],
        "behavior": "allow", "updated_input": {"command": "touch_y"}}),
    )
    .await;
    let frames = c.until_result("p").await;
    let resolved = frames
        .iter()
        .find(|f| f["message_type"] == "permission_resolved")
        .unwrap();
    assert_eq!(resolved["outcome"], "allowed");
    let tool_result = frames.iter().find(|f| f["message_type"] == "user").unwrap();
    assert!(
        tool_result.to_string().contains("ran: touch_y"),
        "{tool_result}"
    );

    chat_ack(&mut c, "p", "please run TOOL:rm_it").await;
    let req = c
        .recv_until(|f| f["message_type"] == "permission_request")
        .await
        .pop()
        .unwrap();
    c.send(
        json!({"type": "permission_response", "agent_id": "p", "request_id": req["request_id"],
        "behavior": "deny", "message": "not today"}),
    )
    .await;
    let frames = c.until_result("p").await;
    assert!(frames.iter().any(|f| f["outcome"] == "denied"));
    assert_eq!(reply_text(&frames), "Tool said: not today");

    // Unknown request ids are a typed error.
    c.send(json!({"type": "permission_response", "agent_id": "p", "request_id": "nope", "behavior": "allow"})).await;
    assert_eq!(
        c.recv_until(|f| f["message_type"] == "error")
            .await
            .pop()
            .unwrap()["code"],
        "unknown_request"
    );

    // Pending across a reconnect: a new socket subscribes, sees the request, answers it.
    let ack = chat_ack(&mut c, "p", "please run TOOL:ls_it").await;
    let req = c
        .recv_until(|f| f["message_type"] == "permission_request")
        .await
        .pop()
        .unwrap();
    drop(c);
    let mut c2 = server.client().await;
    c2.send(json!({"type": "subscribe", "agent_id": "p", "since_seq": ack["seq"].as_i64().unwrap() - 1})).await;
    let replayed = c2
        .recv_until(|f| f["message_type"] == "permission_request")
        .await
        .pop()
        .unwrap();
    assert_eq!(replayed, req);
    c2.send(json!({"type": "permission_response", "agent_id": "p", "request_id": req["request_id"], "behavior": "allow"}))
        .await;
    let frames = c2.until_result("p").await;
    assert!(frames.iter().any(|f| f.to_string().contains("ran: ls_it")));

    // Nobody answers: denied after the timeout.
    chat_ack(&mut c2, "p", "please run TOOL:wait_it").await;
    let frames = c2.until_result("p").await;
    assert!(
        frames.iter().any(|f| f["outcome"] == "timed_out"),
        "{frames:?}"
    );
    stop(server, &fx).await;
}

/// A request the CLI withdraws is resolved as cancelled.
#[tokio::test]
async fn cancelled_permission() {
    let fx = Fixture::new("");
    let server = fx
        .start(&[("FAKE_CLAUDE_CANCEL_PERMISSION_MS", "200")])
        .await;
    let mut c = server.client().await;
    chat_ack(&mut c, "pc", "please run TOOL:slow_one").await;
    let frames = c.until_result("pc").await;
    assert!(
        frames
            .iter()
            .any(|f| f["message_type"] == "permission_resolved" && f["outcome"] == "cancelled")
    );
    stop(server, &fx).await;
}

/// `acceptEdits` (configured) skips the prompt for file edits in the workspace, as the real CLI
/// does, but any other command is still asked for.
#[tokio::test]
async fn accept_edits_mode_skips_prompts() {
    let fx = Fixture::new("[claude]\npermission_mode = \"acceptEdits\"\n");
    let server = fx.start(&[]).await;
    let mut c = server.client().await;
    chat_ack(&mut c, "ae", "please run TOOL:touch+z.txt").await;
    let frames = c.until_result("ae").await;
    assert!(
        !frames
            .iter()
            .any(|f| f["message_type"] == "permission_request")
    );
    assert!(
        frames
            .iter()
            .any(|f| f.to_string().contains("ran: touch z.txt"))
    );
    chat_ack(&mut c, "ae", "please run TOOL:curl+http://example.com").await;
    let request = c
        .recv_until(|f| f["message_type"] == "permission_request")
        .await
        .pop()
        .unwrap();
    assert_eq!(request["input"]["command"], "curl http://example.com");
    c.send(
        json!({"type": "permission_response", "agent_id": "ae", "request_id": request["request_id"],
        "behavior": "deny", "message": "no network"}),
    )
    .await;
    let frames = c.until_result("ae").await;
    assert!(frames.iter().any(|f| f["outcome"] == "denied"));
    assert_eq!(
        arg(&fx.spawns()[0], "--permission-mode="),
        Some("acceptEdits")
    );
    stop(server, &fx).await;
}

/// Unknown message types are forwarded untouched; a line over the cap is a warning and the
/// session goes on; a large line under the cap passes.
#[tokio::test]
async fn unknown_types_and_huge_lines() {
    let fx = Fixture::new("[claude]\nmax_line_bytes = 100000\n");
    let server = fx
        .start(&[
            ("FAKE_CLAUDE_UNKNOWN_TYPES", "1"),
            ("FAKE_CLAUDE_HUGE_LINE_BYTES", "200000"),
        ])
        .await;
    let mut c = server.client().await;
    chat_ack(&mut c, "odd", "hi").await;
    let frames = c.until_result("odd").await;
    assert!(
        frames
            .iter()
            .any(|f| f["message_type"] == "agent_event"
                && f["message"]["type"] == "rate_limit_event")
    );
    assert!(frames.iter().any(|f| f["status"] == "warning"));
    assert_eq!(reply_text(&frames), "Echo: hi (history 1)");
    stop(server, &fx).await;

    let fx = Fixture::new("");
    let server = fx
        .start(&[("FAKE_CLAUDE_HUGE_LINE_BYTES", "17000000")])
        .await;
    let mut c = server.client().await;
    chat_ack(&mut c, "big", "hi").await;
    let frames = c.until_result("big").await;
    let huge = frames
        .iter()
        .find(|f| f["message"]["subtype"] == "huge")
        .expect("a 17 MB line passes");
    assert!(huge.to_string().len() > 17_000_000);
    stop(server, &fx).await;
}

/// The CLI's environment is an allow-list: model API settings reach it, server secrets don't.
#[tokio::test]
async fn environment_is_an_allow_list() {
    let fx = Fixture::new("");
    let dump = fx.dir.path().join("env.json");
    let dump_s = dump.to_string_lossy().into_owned();
    let server = fx
        .start(&[
            ("FAKE_CLAUDE_ENV_DUMP", &dump_s),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9"),
            ("AGENTMUX_SECRET_TOKEN", "hunter2"),
            ("AWS_SECRET_ACCESS_KEY", "nope"),
            ("CLAUDE_CODE_CHILD_SESSION", "1"),
        ])
        .await;
    let mut c = server.client().await;
    chat_ack(&mut c, "env", "hi").await;
    c.until_result("env").await;
    let env: Value = serde_json::from_str(&std::fs::read_to_string(&dump).unwrap()).unwrap();
    assert_eq!(env["ANTHROPIC_BASE_URL"], "http://127.0.0.1:9");
    assert!(
        env["CLAUDE_CONFIG_DIR"]
            .as_str()
            .unwrap()
            .ends_with("claude-home")
    );
    for secret in [
        "AGENTMUX_SECRET_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "CLAUDE_CODE_CHILD_SESSION",
    ] {
        assert!(env.get(secret).is_none(), "{secret} leaked to the CLI");
    }
    stop(server, &fx).await;
}

/// With a cap of two live processes, a third conversation evicts the least recently used idle
/// one, which resumes when it is used again.
#[tokio::test]
async fn live_process_cap_evicts_lru() {
    let fx = Fixture::new("[claude]\nmax_live_processes = 2\n");
    let server = fx.start(&[]).await;
    let mut c = server.client().await;
    let mut ids = std::collections::HashMap::new();
    for agent in ["a", "b", "c"] {
        let ack = chat_ack(&mut c, agent, "hi").await;
        ids.insert(agent, ack["session_id"].as_str().unwrap().to_owned());
        c.until_result(agent).await;
    }
    let live: Vec<i64> = fx
        .spawns()
        .iter()
        .filter_map(|s| s["pid"].as_i64())
        .filter(|p| alive(*p))
        .collect();
    assert_eq!(live.len(), 2, "at most two live CLIs");
    let a_pid = fx.spawns()[0]["pid"].as_i64().unwrap();
    assert!(!alive(a_pid), "the least recently used one was stopped");
    chat_ack(&mut c, "a", "back").await;
    assert_eq!(
        reply_text(&c.until_result("a").await),
        "Echo: back (history 2)"
    );
    assert_eq!(
        arg(fx.spawns().last().unwrap(), "--resume="),
        Some(ids["a"].as_str())
    );
    stop(server, &fx).await;
}

/// With pre-warming, a new conversation adopts the spare: its session_id is the spare's id and
/// its first turn starts no process.
#[tokio::test]
async fn prewarmed_spare_is_adopted() {
    let fx = Fixture::new("[claude]\nprewarm = true\n");
    let server = fx.start(&[]).await;
    let mut tries = 0;
    while fx.spawns().is_empty() && tries < 100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        tries += 1;
    }
    let spare = fx.spawns()[0].clone();
    let spare_pid = spare["pid"].as_i64().unwrap();
    // The spare is offered once it has answered `initialize`, its one exchange before a
    // conversation adopts it: wait until it was asked (it answers as soon as it reads the line,
    // well before this test's socket and chat reach the server).
    let mut tries = 0;
    while !fx
        .stdin()
        .iter()
        .any(|(pid, line)| *pid == spare_pid && line["request"]["subtype"] == "initialize")
        && tries < 100
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
        tries += 1;
    }
    assert!(tries < 100, "the spare was asked to initialize");
    let mut c = server.client().await;
    let ack = chat_ack(&mut c, "warm", "hi").await;
    assert_eq!(arg(&spare, "--session-id="), ack["session_id"].as_str());
    assert_eq!(
        reply_text(&c.until_result("warm").await),
        "Echo: hi (history 1)"
    );
    assert_eq!(fx.prompt_pids(), vec![spare["pid"].as_i64().unwrap()]);
    // A replacement spare is started right away.
    let mut tries = 0;
    while fx.spawns().len() < 2 && tries < 100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        tries += 1;
    }
    assert_eq!(fx.spawns().len(), 2);
    stop(server, &fx).await;
}

/// With a cap of two live processes, both busy, a third conversation's turn waits; as soon as
/// one of the two finishes its turn, that idle process is evicted for it and the waiting turn
/// runs (not only when the idle eviction, an hour away here, would have stopped it).
#[tokio::test]
async fn a_waiting_turn_starts_when_a_process_goes_idle() {
    let fx = Fixture::new(
        "[session]\nidle_evict_secs = 3600\npermission_timeout_secs = 3600\n\
         [claude]\nmax_live_processes = 2\n",
    );
    let server = fx.start(&[]).await;
    let mut c = server.client().await;
    // Turns that hold their process until the test answers their permission request.
    let mut requests = std::collections::HashMap::new();
    for agent in ["a", "b"] {
        chat_ack(&mut c, agent, &format!("please run TOOL:wait_{agent}")).await;
        let request = c
            .recv_until(|f| f["message_type"] == "permission_request" && f["agent_id"] == agent)
            .await
            .pop()
            .unwrap();
        requests.insert(agent, request["request_id"].clone());
    }
    chat_ack(&mut c, "c", "hi").await;
    c.recv_until(|f| f["agent_id"] == "c" && f["status"] == "queued")
        .await;
    assert_eq!(fx.spawns().len(), 2, "the third turn waits for a process");

    c.send(json!({"type": "permission_response", "agent_id": "a",
        "request_id": requests["a"], "behavior": "allow"}))
        .await;
    let mut frames = tokio::time::timeout(Duration::from_secs(10), c.until_result("c"))
        .await
        .expect("the waiting turn runs once a's turn has ended");
    assert_eq!(reply_text(&frames), "Echo: hi (history 1)");
    // a's process is free from the moment it wrote its result, so c's turn may end before
    // a's actor has stored that result and sent it on: it comes, before or after.
    let a_ended = |f: &Value| f["message_type"] == "result" && f["agent_id"] == "a";
    if !frames.iter().any(a_ended) {
        frames.extend(c.recv_until(a_ended).await);
    }
    let a_result = frames.iter().find(|f| a_ended(f)).unwrap();
    assert_eq!(a_result["message"]["result"], "Tool said: ran: wait_a");
    let spawns = fx.spawns();
    assert_eq!(spawns.len(), 3);
    let pid = |i: usize| spawns[i]["pid"].as_i64().unwrap();
    assert!(!alive(pid(0)), "a's idle process was stopped for c");
    assert!(alive(pid(1)), "b's busy process was left alone");

    c.send(json!({"type": "permission_response", "agent_id": "b",
        "request_id": requests["b"], "behavior": "allow"}))
        .await;
    assert_eq!(
        reply_text(&c.until_result("b").await),
        "Tool said: ran: wait_b",
        "b's turn ran its tool"
    );
    stop(server, &fx).await;
}

/// `agentmux serve` with the Claude backend and `args`, run in `cwd`; its exit status and
/// output when it exits at once.
async fn serve_claude(
    cwd: &Path,
    data_dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    tokio::time::timeout(
        WAIT,
        tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
            .args([
                "serve",
                "--bind",
                "127.0.0.1:0",
                "--backend",
                "claude",
                "--data-dir",
            ])
            .arg(data_dir)
            .args(args)
            .current_dir(cwd)
            .env_remove("AGENTMUX_BACKEND")
            .env_remove("AGENTMUX_CLAUDE_BIN")
            .env_remove("AGENTMUX_CONFIG")
            .envs(env.iter().copied())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("exits at once")
    .unwrap()
}

/// A Claude CLI path that names nothing, a directory or a file that is not executable is
/// refused at start, with a message naming the path and the setting, before anything is
/// created: no conversation ever starts only to fail with `backend_unavailable`.
#[tokio::test]
async fn a_claude_binary_that_cannot_run_is_refused_at_start() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-claude");
    let not_executable = dir.path().join("claude-script");
    std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&not_executable, std::fs::Permissions::from_mode(0o644)).unwrap();
    let directory = dir.path().join("claude-dir");
    std::fs::create_dir(&directory).unwrap();
    let data_dir = dir.path().join("data");
    for (bin, problem) in [
        (&missing, "does not exist"),
        (&not_executable, "is not executable"),
        (&directory, "is not a file"),
    ] {
        let path = bin.to_str().unwrap();
        for by_env in [false, true] {
            let output = if by_env {
                serve_claude(dir.path(), &data_dir, &[], &[("AGENTMUX_CLAUDE_BIN", path)]).await
            } else {
                serve_claude(dir.path(), &data_dir, &["--claude-bin", path], &[]).await
            };
            let stdout = String::from_utf8_lossy(&output.stdout);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(!output.status.success(), "{path}: {stderr}");
            assert!(!stdout.contains("listening on"), "{stdout}");
            for needle in [path, problem, "--claude-bin", "AGENTMUX_CLAUDE_BIN"] {
                assert!(stderr.contains(needle), "{needle:?} missing from: {stderr}");
            }
        }
    }
    assert!(
        !data_dir.join("agentmux.db").exists(),
        "refused before opening the store"
    );
}

/// A relative `--claude-bin` means the file relative to where the server was started, though
/// each CLI runs in its own workspace.
#[tokio::test]
async fn a_relative_claude_bin_is_found_from_the_servers_directory() {
    use tokio::io::AsyncBufReadExt as _;
    let fx = Fixture::new("");
    let fake = sibling("fake-claude");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--backend",
            "claude",
            "--data-dir",
        ])
        .arg(fx.data_dir())
        .arg("--config")
        .arg(&fx.config)
        .args(["--claude-bin", "./fake-claude"])
        .current_dir(fake.parent().unwrap())
        .env_remove("AGENTMUX_BACKEND")
        .env_remove("AGENTMUX_CLAUDE_BIN")
        .env_remove("AGENTMUX_CONFIG")
        .env("FAKE_CLAUDE_LOG", &fx.log)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("the server starts")
        .unwrap()
        .expect("it prints its address");
    let addr = line.strip_prefix("listening on http://").expect(&line);
    let mut c = Client::connect(addr).await;
    c.chat("rel", "hello").await;
    let turn = c.until_result("rel").await;
    assert_eq!(reply_text(&turn), "Echo: hello (history 1)");
    let spawn = &fx.spawns()[0];
    assert_eq!(spawn["argv"][0], fake.to_str().unwrap());
    child.start_kill().unwrap();
    let _ = child.wait().await;
}

/// `--claude-bin NAME` looks NAME up in the server's PATH once, at start, and logs the path it
/// found; the CLI is then run from that path. A PATH without it refuses to start, naming it, even
/// when the directory the server starts in has such a file (an empty PATH entry is skipped, not
/// read as the current directory).
#[tokio::test]
async fn a_bare_claude_bin_is_looked_up_in_path_once_at_start() {
    use tokio::io::AsyncBufReadExt as _;
    let fx = Fixture::new("");
    let fake = sibling("fake-claude");
    let fake_dir = fake.parent().unwrap().to_str().unwrap().to_owned();
    let elsewhere = tempfile::tempdir().unwrap();

    let refused = serve_claude(
        fake.parent().unwrap(),
        &fx.data_dir(),
        &["--claude-bin", "fake-claude"],
        &[("PATH", &format!(":{}", elsewhere.path().display()))],
    )
    .await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    for needle in [
        "`fake-claude` is not in any directory of PATH",
        "--claude-bin",
    ] {
        assert!(stderr.contains(needle), "{needle:?} missing from: {stderr}");
    }

    let path = format!("{}:{fake_dir}:/usr/bin:/bin", elsewhere.path().display());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
        .args(["serve", "--bind", "127.0.0.1:0", "--backend", "claude"])
        .arg("--data-dir")
        .arg(fx.data_dir())
        .arg("--config")
        .arg(&fx.config)
        .args(["--claude-bin", "fake-claude"])
        .current_dir(elsewhere.path())
        .env_remove("AGENTMUX_BACKEND")
        .env_remove("AGENTMUX_CLAUDE_BIN")
        .env_remove("AGENTMUX_CONFIG")
        .env("PATH", &path)
        .env("RUST_LOG", "agentmux=info")
        .env("FAKE_CLAUDE_LOG", &fx.log)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("the server starts")
        .unwrap()
        .expect("it prints its address");
    let addr = line.strip_prefix("listening on http://").expect(&line);
    // Logged before the address is printed.
    let mut log = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let found = format!("`fake-claude` is {} (found in PATH)", fake.display());
    loop {
        let line = tokio::time::timeout(WAIT, log.next_line())
            .await
            .expect("the server logs the path it found")
            .unwrap()
            .expect("the log goes on until the path found");
        if line.contains(&found) {
            break;
        }
    }
    let mut c = Client::connect(addr).await;
    c.chat("named", "hello").await;
    assert_eq!(
        reply_text(&c.until_result("named").await),
        "Echo: hello (history 1)"
    );
    assert_eq!(fx.spawns()[0]["argv"][0], fake.to_str().unwrap());
    child.start_kill().unwrap();
    let _ = child.wait().await;
}

/// Sends SIGKILL to a process the server started.
fn kill9(pid: i64) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits (at most `within`) until the fake has been spawned `count` times; returns the spawns.
pub(crate) async fn spawned(fx: &Fixture, count: usize, within: Duration) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let spawns = fx.spawns();
        if spawns.len() >= count || tokio::time::Instant::now() >= deadline {
            return spawns;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An agent killed between turns is started again at once with resume, without any chat; the
/// next turn runs on that process and remembers; the respawn stores nothing.
#[tokio::test]
async fn a_killed_agent_is_respawned_with_resume() {
    let fx = Fixture::new("");
    let server = fx.start(&[]).await;
    let mut c = server.client().await;
    let ack = chat_ack(&mut c, "rs", "first").await;
    let session_id = ack["session_id"].as_str().unwrap().to_owned();
    c.until_result("rs").await;
    let first_pid = fx.spawns()[0]["pid"].as_i64().unwrap();
    kill9(first_pid);

    let spawns = spawned(&fx, 2, Duration::from_secs(3)).await;
    assert_eq!(spawns.len(), 2, "a new process within 3 s, without a chat");
    assert_eq!(arg(&spawns[1], "--resume="), Some(session_id.as_str()));
    let respawned = spawns[1]["pid"].as_i64().unwrap();
    assert!(alive(respawned));
    let told = c
        .recv_until(|f| f["agent_id"] == "rs" && f["status"] == "ready")
        .await;
    let statuses: Vec<&str> = told.iter().filter_map(|f| f["status"].as_str()).collect();
    assert_eq!(
        statuses[statuses.len().saturating_sub(4)..],
        ["respawning", "resuming", "active", "ready"],
        "{told:?}"
    );

    chat_ack(&mut c, "rs", "second").await;
    assert_eq!(
        reply_text(&c.until_result("rs").await),
        "Echo: second (history 2)",
        "the respawned agent remembers the first turn"
    );
    assert_eq!(fx.prompt_pids().last(), Some(&respawned), "same process");
    assert_eq!(fx.spawns().len(), 2);
    stop(server, &fx).await;
    let db = open_db(&fx.data_dir()).await;
    let statuses: i64 = sqlx::query_scalar(
        "select count(*) from messages m join session_info s on s.id = m.session_pk
         where s.agent_id = 'rs' and m.message_type = 'status'",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!(statuses, 0, "respawn statuses are not stored");
}

/// A CLI that fails at start every time is restarted with back-off a bounded number of times,
/// then given up on with `respawn_failed`; the next chat starts it as usual once it can start.
#[tokio::test]
async fn a_cli_that_cannot_start_is_given_up_on() {
    let fx = Fixture::new("[session]\nrespawn_backoff_ms = 100\nmax_respawns = 3\n");
    let fail = fx.dir.path().join("fail-start");
    let fail_str = fail.to_string_lossy().into_owned();
    let server = fx.start(&[("FAKE_CLAUDE_FAIL_START_IF", &fail_str)]).await;
    let mut c = server.client().await;
    chat_ack(&mut c, "cl", "first").await;
    c.until_result("cl").await;
    std::fs::write(&fail, "").unwrap();
    kill9(fx.spawns()[0]["pid"].as_i64().unwrap());

    let frames = c
        .recv_until(|f| f["agent_id"] == "cl" && f["status"] == "respawn_failed")
        .await;
    let respawning = frames
        .iter()
        .filter(|f| f["status"] == "respawning")
        .count();
    assert_eq!(respawning, 3, "three restarts: {frames:?}");
    // The kill and three failed starts: one process and three restarts, no more.
    assert_eq!(fx.spawns().len(), 4);
    // Nothing the server does after giving up can be awaited, so the wait is the assertion:
    // a fourth restart would come 400 ms after the third failed start (100 ms doubled per
    // exit); none comes within twice that. The back-off's schedule itself is checked with a
    // paused clock by the unit tests of `Respawns`.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(fx.spawns().len(), 4, "no restart after giving up");

    std::fs::remove_file(&fail).unwrap();
    chat_ack(&mut c, "cl", "again").await;
    assert_eq!(
        reply_text(&c.until_result("cl").await),
        "Echo: again (history 2)"
    );
    stop(server, &fx).await;
}

/// A Claude conversation takes only the CLI's permission modes: another agent's id (Gemini's
/// `autoEdit`, `yolo`) is `invalid_options` before any CLI starts or anything is stored, on a
/// first chat and on a later one; `bypassPermissions` still needs the operator.
#[tokio::test]
async fn a_claude_conversation_refuses_modes_the_cli_lacks() {
    let fx = Fixture::new("");
    let server = fx.start(&[]).await;
    let mut c = server.client().await;
    for mode in ["autoEdit", "yolo", "bypassPermissions"] {
        c.send(json!({"type": "chat", "agent_id": "m", "content": "hi",
            "options": {"permission_mode": mode}}))
            .await;
        let err = c.recv().await;
        assert_eq!(err["code"], "invalid_options", "{mode}: {err}");
        assert_eq!(err["agent_id"], "m");
    }
    assert!(fx.spawns().is_empty(), "no CLI started");
    let (status, _) = crate::rest::Rest::new(&server).get("/api/sessions/m").await;
    assert_eq!(status, 404, "nothing stored");

    chat_ack(&mut c, "m", "one").await;
    c.until_result("m").await;
    let err =
        crate::acp::chat_with(&mut c, "m", "two", json!({"permission_mode": "autoEdit"})).await;
    assert_eq!(err["code"], "invalid_options", "{err}");
    assert!(
        err["error"].as_str().unwrap().contains("acceptEdits"),
        "{err}"
    );
    let ack = crate::acp::chat_with(
        &mut c,
        "m",
        "three",
        json!({"permission_mode": "acceptEdits"}),
    )
    .await;
    assert_eq!(ack["message_type"], "ack", "{ack}");
    assert_eq!(
        reply_text(&c.until_result("m").await),
        "Echo: three (history 2)"
    );
    assert_eq!(fx.spawns().len(), 1);
    stop(server, &fx).await;
}
