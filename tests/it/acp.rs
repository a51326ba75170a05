//! Agent Client Protocol conversations against the fake ACP agent (which answers like the
//! recorded real adapter): agents by name, turns, permissions, interrupts, crashes, garbage,
//! resume, load and the fallback to a new session, and what ACP can't do.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::common::*;
use crate::projects::Layout;
use crate::real_cli::{cli_children, running, wait_gone};
use crate::rest::Rest;
use crate::security::{connect_as, http};

/// A server whose default agent is `demo`, with the fake ACP agent as `fake` (flags: extra
/// arguments of `fake-acp`), keeping its sessions in `state`.
pub struct AcpSetup {
    pub dir: tempfile::TempDir,
    pub config: String,
    _cfg: tempfile::TempDir,
}

impl AcpSetup {
    pub fn new(flags: &[&str]) -> Self {
        Self::with_config(flags, "")
    }

    /// With more settings (TOML) before the agent's table.
    pub fn with_config(flags: &[&str], extra: &str) -> Self {
        Self::with_agent_keys(flags, extra, "")
    }

    /// With more settings before the agent's table, and more keys in it.
    pub fn with_agent_keys(flags: &[&str], extra: &str, agent_keys: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("agent-state");
        let mut command = vec![
            sibling("fake-acp").to_string_lossy().into_owned(),
            "--state".to_owned(),
            state.to_string_lossy().into_owned(),
        ];
        command.extend(flags.iter().map(|f| f.to_string()));
        let command: Vec<String> = command.iter().map(|c| toml_string(c)).collect();
        let (cfg, config) = config_file(&format!(
            "{extra}\n[agents.fake]\nkind = \"acp\"\ncommand = [{}]\nenv = {{ FAKE_KEY = \"secret\" }}\n{agent_keys}",
            command.join(", ")
        ));
        AcpSetup {
            dir,
            config,
            _cfg: cfg,
        }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// What the agent was asked, one method (or permission outcome) per line.
    pub fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("agent-state/calls.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The `_meta` of each session the agent opened: method and value (`null` for none).
    pub fn metas(&self) -> Vec<(String, Value)> {
        std::fs::read_to_string(self.dir.path().join("agent-state/meta.log"))
            .unwrap_or_default()
            .lines()
            .map(|line| {
                let (method, meta) = line.split_once(' ').unwrap();
                (method.to_owned(), serde_json::from_str(meta).unwrap())
            })
            .collect()
    }

    /// Fails unless the agent got `call` (a line of its call log).
    pub fn assert_called(&self, call: &str) {
        let calls = self.calls();
        assert!(calls.iter().any(|c| c == call), "no `{call}` in {calls:?}");
    }

    /// A server whose default agent is the fake ACP agent.
    pub async fn start_as_default(&self) -> TestServer {
        TestServer::start_in(
            &self.data_dir(),
            &["--config", &self.config, "--backend", "fake"],
            &[],
        )
        .await
    }

    /// A server with a project root `root` beside the data dir, and that root's path.
    pub async fn start_in_a_root(&self) -> (TestServer, String) {
        let root = std::fs::canonicalize(self.dir.path()).unwrap().join("root");
        std::fs::create_dir(&root).unwrap();
        let root = root.to_string_lossy().into_owned();
        let server = TestServer::start_in(
            &self.data_dir(),
            &["--config", &self.config, "--project-root", &root],
            &[],
        )
        .await;
        (server, root)
    }

    pub async fn start(&self) -> TestServer {
        TestServer::start_in(
            &self.data_dir(),
            &["--demo-delay-ms", "0", "--config", &self.config],
            &[],
        )
        .await
    }
}

/// A turn with options: its chat is acknowledged, and its frames up to its `result`.
pub async fn turn_with(
    c: &mut Client,
    agent_id: &str,
    content: &str,
    options: Value,
) -> Vec<Value> {
    let ack = chat_with(c, agent_id, content, options).await;
    assert_eq!(ack["message_type"], "ack", "{ack}");
    c.until_result(agent_id).await
}

/// A chat whose options name a mode that runs tools without asking: `invalid_options` saying
/// it needs `agent.allow_bypass_permissions`.
async fn needs_the_operator(c: &mut Client, agent_id: &str, content: &str, options: Value) {
    let err = chat_with(c, agent_id, content, options).await;
    assert_eq!(err["code"], "invalid_options", "{err}");
    assert!(
        err["error"]
            .as_str()
            .unwrap()
            .contains("allow_bypass_permissions"),
        "{err}"
    );
}

/// Sends a chat with options and returns its ack (or error).
pub async fn chat_with(c: &mut Client, agent_id: &str, content: &str, options: Value) -> Value {
    chat_blocks(c, agent_id, json!(content), options).await
}

fn stored<'a>(frames: &'a [Value], kind: &str) -> Vec<&'a Value> {
    frames
        .iter()
        .filter(|f| f["message_type"] == kind && f["seq"].is_i64())
        .collect()
}

fn statuses(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .filter(|f| f["message_type"] == "status")
        .map(|f| f["status"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Two turns stream as deltas and are stored as one assistant and one result each; the
/// conversation's agent shows in REST and `GET /api/agents` lists it.
#[tokio::test]
async fn an_acp_conversation_streams_stores_and_remembers() {
    let setup = AcpSetup::new(&[]);
    let mut server = setup.start().await;
    let rest = Rest::new(&server);
    let (status, agents) = rest.get("/api/agents").await;
    assert_eq!(status, 200);
    assert_eq!(agents["default"], "demo");
    let fake = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "fake")
        .expect("the configured agent is listed");
    assert_eq!(fake["kind"], "acp");
    assert_eq!(fake["supports"]["rewind"], false);
    assert!(
        !agents.to_string().contains("secret"),
        "no env value leaks: {agents}"
    );

    let mut c = server.client().await;
    let ack = chat_with(&mut c, "a1", "hello one", json!({"agent": "fake"})).await;
    assert_eq!(ack["message_type"], "ack", "{ack}");
    let first = c.until_result("a1").await;
    assert_eq!(reply_text(&first), "Echo: hello one (history 1)");
    let deltas: String = first
        .iter()
        .filter(|f| f["message_type"] == "stream_event")
        .map(|f| f["message"]["event"]["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, "Echo: hello one (history 1)");
    let assistants = stored(&first, "assistant");
    assert_eq!(
        assistants.len(),
        1,
        "deltas are coalesced into one stored reply"
    );
    assert_eq!(
        assistants[0]["message"]["message"]["content"][0]["text"],
        "Echo: hello one (history 1)"
    );
    let result = stored(&first, "result")[0];
    assert_eq!(result["message"]["stop_reason"], "end_turn");
    assert_eq!(result["message"]["usage"]["output_tokens"], 5);
    let init = stored(&first, "system")[0];
    let agent_session = init["message"]["session_id"].as_str().unwrap().to_owned();

    chat_ack(&mut c, "a1", "hello two").await;
    assert_eq!(
        reply_text(&c.until_result("a1").await),
        "Echo: hello two (history 2)",
        "the same agent session carries on"
    );
    let (status, session) = rest.get("/api/sessions/a1").await;
    assert_eq!(status, 200);
    assert_eq!(session["backend"], "fake");
    let (_, agents) = rest.get("/api/agents").await;
    let fake = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "fake")
        .unwrap()
        .clone();
    assert_eq!(fake["supports"]["known"], true);
    assert_eq!(fake["supports"]["resume"], true);
    assert_eq!(fake["supports"]["modes"], true);
    // The models of its session's `model` option, by value and name.
    assert_eq!(fake["models"][3]["id"], "sonnet", "{fake}");
    assert!(fake["models"][3]["name"].is_string(), "{fake}");
    let db = server.stop_and_open_db().await;
    let (sdk,): (Option<String>,) =
        sqlx::query_as("SELECT sdk_session_id FROM session_info WHERE agent_id = 'a1'")
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!(sdk.as_deref(), Some(agent_session.as_str()));
}

/// Agent choice and options are checked before anything is created: an unknown or malformed
/// agent, another agent for an existing conversation, a mode or model the agent doesn't offer.
#[tokio::test]
async fn agent_and_options_are_validated() {
    let setup = AcpSetup::new(&[]);
    let server = setup.start().await;
    let rest = Rest::new(&server);
    let mut c = server.client().await;
    for bad in [
        json!("nope"),
        json!("../fake"),
        json!("-x"),
        json!(7),
        json!("a".repeat(65)),
    ] {
        let err = chat_with(&mut c, "v1", "hi", json!({"agent": bad})).await;
        assert_eq!(err["code"], "invalid_options", "{bad}: {err}");
        assert_eq!(err["agent_id"], "v1");
    }
    assert_eq!(
        rest.get("/api/sessions/v1").await.0,
        404,
        "nothing was created"
    );

    chat_with(&mut c, "v1", "hi", json!({"agent": "fake"})).await;
    c.until_result("v1").await;
    let err = chat_with(&mut c, "v1", "again", json!({"agent": "demo"})).await;
    assert_eq!(err["code"], "invalid_options", "{err}");
    let same = chat_with(&mut c, "v1", "again", json!({"agent": "fake"})).await;
    assert_eq!(same["message_type"], "ack");
    c.until_result("v1").await;

    // Once the agent has said what it offers, other values are refused up front.
    let err = chat_with(&mut c, "v1", "x", json!({"model": "no-such-model"})).await;
    assert_eq!(err["code"], "invalid_options", "{err}");
    assert!(err["error"].as_str().unwrap().contains("sonnet"), "{err}");
    let err = chat_with(
        &mut c,
        "v2",
        "x",
        json!({"agent": "fake", "permission_mode": "dontAsk"}),
    )
    .await;
    assert_eq!(err["code"], "invalid_options", "{err}");
    assert_eq!(rest.get("/api/sessions/v2").await.0, 404);

    // Offered ones reach the agent as set_mode / set_config_option.
    let ok = chat_with(
        &mut c,
        "v1",
        "x",
        json!({"model": "sonnet", "permission_mode": "plan"}),
    )
    .await;
    assert_eq!(ok["message_type"], "ack", "{ok}");
    c.until_result("v1").await;
    let calls = setup.calls();
    assert!(calls.contains(&"session/set_mode".to_owned()), "{calls:?}");
    assert!(
        calls.contains(&"session/set_config_option".to_owned()),
        "{calls:?}"
    );
}

/// `rewind` and `fork` of an ACP conversation answer `unsupported`, over the socket and REST.
#[tokio::test]
async fn rewind_and_fork_are_unsupported() {
    let setup = AcpSetup::new(&[]);
    let server = setup.start().await;
    let rest = Rest::new(&server);
    let mut c = server.client().await;
    chat_with(&mut c, "r1", "one", json!({"agent": "fake"})).await;
    let frames = c.until_result("r1").await;
    let result_seq = stored(&frames, "result")[0]["seq"].as_i64().unwrap();
    c.send(json!({"type": "rewind", "agent_id": "r1", "to_seq": result_seq}))
        .await;
    let err = c.recv_until(|v| v["message_type"] == "error").await;
    assert_eq!(err.last().unwrap()["code"], "unsupported");
    c.send(json!({"type": "fork", "agent_id": "r1", "new_agent_id": "r2"}))
        .await;
    let err = c.recv_until(|v| v["message_type"] == "error").await;
    assert_eq!(err.last().unwrap()["code"], "unsupported");
    let (status, body) = rest
        .post("/api/sessions/r1/rewind", json!({"to_seq": result_seq}))
        .await;
    assert_eq!((status, body["code"].as_str()), (422, Some("unsupported")));
    assert_eq!(rest.get("/api/sessions/r2").await.0, 404);
}

/// Allow runs the tool and stores its result; deny stores a failed result; both resolve the
/// request. A request open when the user interrupts is withdrawn: `cancelled` to the agent and
/// to the sockets, and the turn ends `aborted_streaming`.
#[tokio::test]
async fn permission_requests_are_answered_from_the_socket() {
    let setup = AcpSetup::new(&[]);
    let server = setup.start().await;
    let mut c = server.client().await;
    for (agent_id, behavior) in [("p-allow", "allow"), ("p-deny", "deny")] {
        chat_with(&mut c, agent_id, "PERMIT", json!({"agent": "fake"})).await;
        let asked = c
            .recv_until(|v| v["message_type"] == "permission_request")
            .await;
        let request = asked.last().unwrap();
        assert_eq!(request["tool_name"], "Bash");
        assert_eq!(request["input"]["command"], "touch a.txt");
        let tool_use = stored(&asked, "assistant");
        assert_eq!(
            tool_use.last().unwrap()["message"]["message"]["content"][0]["input"]["command"],
            "touch a.txt",
            "the tool call is stored with its input"
        );
        c.send(json!({"type": "permission_response", "agent_id": agent_id,
            "request_id": request["request_id"], "behavior": behavior}))
            .await;
        let rest = c.until_result(agent_id).await;
        let resolved = rest
            .iter()
            .find(|f| f["message_type"] == "permission_resolved")
            .unwrap();
        let tool_result = &stored(&rest, "user")[0]["message"]["message"]["content"][0];
        if behavior == "allow" {
            assert_eq!(resolved["outcome"], "allowed");
            assert_eq!(tool_result["content"], "ran");
            assert_eq!(tool_result["is_error"], false);
            assert_eq!(reply_text(&rest), "Tool said: ran");
        } else {
            assert_eq!(resolved["outcome"], "denied");
            assert_eq!(tool_result["is_error"], true);
            assert_eq!(
                reply_text(&rest),
                "Tool said: User refused permission to run tool"
            );
        }
    }
    let calls = setup.calls();
    assert!(calls.iter().any(|l| l.contains("allow-once")), "{calls:?}");
    assert!(calls.iter().any(|l| l.contains("\"reject\"")), "{calls:?}");

    // "always" picks allow_always where the agent offers it, and is refused when malformed.
    chat_with(
        &mut c,
        "p-always",
        "PERMIT ALWAYS",
        json!({"agent": "fake"}),
    )
    .await;
    let request = c
        .recv_until(|v| v["message_type"] == "permission_request")
        .await
        .pop()
        .unwrap();
    c.send(
        json!({"type": "permission_response", "agent_id": "p-always",
        "request_id": request["request_id"], "behavior": "allow", "always": "yes"}),
    )
    .await;
    let err = c.recv_until(|v| v["message_type"] == "error").await;
    assert_eq!(err.last().unwrap()["code"], "bad_frame");
    c.send(
        json!({"type": "permission_response", "agent_id": "p-always",
        "request_id": request["request_id"], "behavior": "allow", "always": true}),
    )
    .await;
    assert_eq!(
        reply_text(&c.until_result("p-always").await),
        "Tool said: ran"
    );
    assert!(
        setup.calls().iter().any(|l| l.contains("allow-always")),
        "{:?}",
        setup.calls()
    );

    chat_with(&mut c, "p-cancel", "PERMIT", json!({"agent": "fake"})).await;
    c.recv_until(|v| v["message_type"] == "permission_request")
        .await;
    c.send(json!({"type": "interrupt", "agent_id": "p-cancel"}))
        .await;
    let rest = c.until_result("p-cancel").await;
    let resolved = rest
        .iter()
        .find(|f| f["message_type"] == "permission_resolved")
        .expect("the open request is resolved");
    assert_eq!(resolved["outcome"], "cancelled");
    let result = stored(&rest, "result")[0];
    assert_eq!(result["message"]["terminal_reason"], "aborted_streaming");
    assert!(
        setup
            .calls()
            .iter()
            .any(|l| l.contains("permission") && l.contains("cancelled")),
        "the agent was told cancelled: {:?}",
        setup.calls()
    );
    chat_ack(&mut c, "p-cancel", "after").await;
    assert!(reply_text(&c.until_result("p-cancel").await).starts_with("Echo: after"));
}

/// An interrupt during a slow stream ends the turn at once as `aborted_streaming`; the next
/// turn runs on the same agent session.
#[tokio::test]
async fn interrupt_cancels_the_turn_and_the_next_one_works() {
    let setup = AcpSetup::new(&[]);
    let server = setup.start().await;
    let mut c = server.client().await;
    chat_with(&mut c, "i1", "SLOW", json!({"agent": "fake"})).await;
    c.recv_until(|v| v["message_type"] == "stream_event").await;
    c.send(json!({"type": "interrupt", "agent_id": "i1"})).await;
    let rest = c.until_result("i1").await;
    let result = stored(&rest, "result")[0];
    assert_eq!(result["message"]["terminal_reason"], "aborted_streaming");
    assert_eq!(result["message"]["stop_reason"], "cancelled");
    setup.assert_called("session/cancel");
    chat_ack(&mut c, "i1", "next").await;
    assert_eq!(
        reply_text(&c.until_result("i1").await),
        "Echo: next (history 2)"
    );
}

/// An agent that dies mid-turn: the turn ends `crashed`, and the next turn resumes the
/// agent's session in a new process.
#[tokio::test]
async fn a_crash_mid_turn_is_survived_and_the_session_resumed() {
    let setup = AcpSetup::new(&[]);
    let server = setup.start().await;
    let mut c = server.client().await;
    chat_with(&mut c, "c1", "first", json!({"agent": "fake"})).await;
    c.until_result("c1").await;
    chat_ack(&mut c, "c1", "CRASH").await;
    let frames = c.until_result("c1").await;
    assert!(
        statuses(&frames).contains(&"crashed".to_owned()),
        "{frames:?}"
    );
    assert_eq!(
        stored(&frames, "result")[0]["message"]["terminal_reason"],
        "crashed"
    );
    // The agent is started again at once, resuming, before anyone writes.
    let restart = c
        .recv_until(|f| f["agent_id"] == "c1" && f["status"] == "active")
        .await;
    let restart = statuses(&restart);
    assert!(restart.contains(&"respawning".to_owned()), "{restart:?}");
    assert!(restart.contains(&"resuming".to_owned()), "{restart:?}");
    chat_ack(&mut c, "c1", "again").await;
    let frames = c.until_result("c1").await;
    assert_eq!(reply_text(&frames), "Echo: again (history 2)");
    setup.assert_called("session/resume");
}

/// Lines that are not JSON-RPC are skipped with a warning; the turn and the next one work.
#[tokio::test]
async fn garbage_lines_are_skipped() {
    let setup = AcpSetup::new(&[]);
    let server = setup.start().await;
    let mut c = server.client().await;
    chat_with(&mut c, "g1", "GARBAGE", json!({"agent": "fake"})).await;
    let frames = c.until_result("g1").await;
    assert_eq!(reply_text(&frames), "Echo: GARBAGE (history 1)");
    let warnings = statuses(&frames)
        .into_iter()
        .filter(|s| s == "warning")
        .count();
    // One warning for each of the fake's five garbage lines.
    assert_eq!(warnings, 5, "{frames:?}");
    chat_ack(&mut c, "g1", "fine").await;
    assert_eq!(
        reply_text(&c.until_result("g1").await),
        "Echo: fine (history 2)"
    );
}

async fn restart(server: &mut TestServer, setup: &AcpSetup) -> TestServer {
    assert!(server.terminate().await.success());
    setup.start().await
}

/// An agent that offers `session/load` but not resume: after a restart the session is loaded,
/// its replayed updates are not stored again, and the agent remembers.
#[tokio::test]
async fn load_without_resume_drops_the_replay() {
    let setup = AcpSetup::new(&["--no-resume"]);
    let mut server = setup.start().await;
    let mut c = server.client().await;
    chat_with(&mut c, "l1", "first", json!({"agent": "fake"})).await;
    c.until_result("l1").await;
    drop(c);
    let server2 = restart(&mut server, &setup).await;
    let mut c = server2.client().await;
    chat_ack(&mut c, "l1", "second").await;
    let frames = c.until_result("l1").await;
    assert_eq!(reply_text(&frames), "Echo: second (history 2)");
    setup.assert_called("session/load");
    assert!(!setup.calls().contains(&"session/resume".to_owned()));
    c.send(json!({"type": "subscribe", "agent_id": "l1", "since_seq": 0}))
        .await;
    let all = c
        .recv_until(|v| {
            v["message_type"] == "result"
                && v["message"]["result"]
                    .as_str()
                    .is_some_and(|r| r.contains("second"))
        })
        .await;
    let replies: Vec<&str> = stored(&all, "assistant")
        .iter()
        .filter_map(|f| f["message"]["message"]["content"][0]["text"].as_str())
        .collect();
    assert_eq!(
        replies,
        ["Echo: first (history 1)", "Echo: second (history 2)"],
        "nothing replayed is stored twice"
    );
}

/// An agent that can neither resume nor load: after a restart a new agent session starts,
/// `resume_failed` says so, and the stored history is kept.
#[tokio::test]
async fn no_resume_no_load_starts_over_and_keeps_history() {
    let setup = AcpSetup::new(&["--no-resume", "--no-load"]);
    let mut server = setup.start().await;
    let mut c = server.client().await;
    chat_with(&mut c, "n1", "first", json!({"agent": "fake"})).await;
    let before = c.until_result("n1").await;
    let old_session = stored(&before, "system")[0]["message"]["session_id"].clone();
    drop(c);
    let server2 = restart(&mut server, &setup).await;
    let mut c = server2.client().await;
    // A refused chat to the dormant conversation wakes nothing up.
    let err = chat_with(&mut c, "n1", "x", json!({"agent": "demo"})).await;
    assert_eq!(err["code"], "invalid_options");
    let (_, summary) = Rest::new(&server2).get("/api/sessions/n1").await;
    assert_eq!(summary["live"], false, "{summary}");
    chat_ack(&mut c, "n1", "second").await;
    let frames = c.until_result("n1").await;
    assert!(
        statuses(&frames).contains(&"resume_failed".to_owned()),
        "{frames:?}"
    );
    assert_eq!(reply_text(&frames), "Echo: second (history 1)");
    let new_session = stored(&frames, "system")[0]["message"]["session_id"].clone();
    assert_ne!(old_session, new_session);
    let (status, page) = Rest::new(&server2).get("/api/sessions/n1/messages").await;
    assert_eq!(status, 200);
    assert!(
        page.to_string().contains("Echo: first (history 1)"),
        "history kept"
    );
}

/// The agent is started in the conversation's workspace, with the configured `env` and
/// nothing else of the server's secrets; `--backend` makes a configured agent the default.
#[tokio::test]
async fn backend_flag_picks_a_configured_agent() {
    let setup = AcpSetup::new(&[]);
    let server = TestServer::start_in(
        &setup.data_dir(),
        &["--config", &setup.config, "--backend", "fake"],
        &[],
    )
    .await;
    let mut c = server.client().await;
    chat_ack(&mut c, "d1", "plain").await;
    assert_eq!(
        reply_text(&c.until_result("d1").await),
        "Echo: plain (history 1)"
    );
    let (_, agents) = Rest::new(&server).get("/api/agents").await;
    assert_eq!(agents["default"], "fake");
}

/// A server whose agents can't run refuses to start, and says which: a missing program, a
/// malformed agent name, an unknown default agent, `launch_options` on an agent that is not
/// an ACP agent or naming something that is not a launch option.
#[tokio::test]
async fn bad_agent_settings_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |config: &str, extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
            .args(["serve", "--bind", "127.0.0.1:0", "--config", config])
            .args(extra)
            .arg("--data-dir")
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{config} {extra:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let (_cfg, config) =
        config_file("[agents.ghost]\nkind = \"acp\"\ncommand = [\"/nonexistent/agent\"]\n");
    let stderr = refused(&config, &[]);
    assert!(
        stderr.contains("ghost") && stderr.contains("does not exist"),
        "{stderr}"
    );
    let (_cfg, config) = config_file("[agents.empty]\nkind = \"acp\"\n");
    assert!(refused(&config, &[]).contains("`command` must name"));
    let (_cfg, config) =
        config_file("[agents.d]\nkind = \"demo\"\nlaunch_options = [\"max_turns\"]\n");
    assert!(refused(&config, &[]).contains("agents.d: `launch_options` is for ACP agents"));
    let (_cfg, config) = config_file(
        "[agents.a]\nkind = \"acp\"\ncommand = [\"/bin/true\"]\nlaunch_options = [\"cwd\"]\n",
    );
    assert!(refused(&config, &[]).contains("launch_options"));
    let fake = toml_string(&sibling("fake-acp").to_string_lossy());
    for bad in ["\"../x\"", "\"-x\"", "\"a b\"", "\".hidden\""] {
        let (_cfg, config) = config_file(&format!(
            "[agents.{bad}]\nkind = \"acp\"\ncommand = [{fake}]\n"
        ));
        let stderr = refused(&config, &[]);
        assert!(stderr.contains("agent name"), "{bad}: {stderr}");
    }
    let (_cfg, config) = config_file("");
    let stderr = refused(&config, &["--backend", "nope"]);
    assert!(
        stderr.contains("default agent `nope`") && stderr.contains("demo"),
        "{stderr}"
    );
}

/// A session that starts in a mode running tools without asking is switched to `default`,
/// unless the operator allows such modes.
#[tokio::test]
async fn an_unattended_starting_mode_is_switched_to_default() {
    for (allowed, switched) in [(false, true), (true, false)] {
        let setup = AcpSetup::with_config(
            &["--start-mode", "auto"],
            &format!("[agent]\nallow_bypass_permissions = {allowed}\n"),
        );
        let server = setup.start().await;
        let mut c = server.client().await;
        chat_with(&mut c, "m1", "hi", json!({"agent": "fake"})).await;
        c.until_result("m1").await;
        assert_eq!(
            setup.calls().contains(&"mode default".to_owned()),
            switched,
            "allowed={allowed}: {:?}",
            setup.calls()
        );
    }
}

/// A line over `acp.max_line_bytes` is skipped with a warning naming the limit; the turn ends
/// normally and the conversation goes on.
#[tokio::test]
async fn an_oversized_line_is_skipped() {
    let setup = AcpSetup::with_config(&[], "[acp]\nmax_line_bytes = 4096\n");
    let server = setup.start().await;
    let mut c = server.client().await;
    chat_with(&mut c, "h1", "HUGE", json!({"agent": "fake"})).await;
    let frames = c.until_result("h1").await;
    let warning = frames
        .iter()
        .find(|f| f["message_type"] == "status" && f["status"] == "warning")
        .expect("a warning");
    assert!(
        warning["detail"]
            .as_str()
            .unwrap()
            .contains("4096 byte limit"),
        "{warning}"
    );
    assert_eq!(reply_text(&frames), "Echo: HUGE (history 1)");
    assert!(
        !frames
            .to_vec()
            .iter()
            .any(|f| f.to_string().contains("xxxxxxxxxx"))
    );
    chat_ack(&mut c, "h1", "small").await;
    assert_eq!(
        reply_text(&c.until_result("h1").await),
        "Echo: small (history 2)"
    );
}

/// Agents report the session's cost so far, across processes: each turn's `result` counts only
/// its own share, and after a resume the first turn (whose share is unknown) adds nothing, so
/// the conversation's total is never counted twice.
#[tokio::test]
async fn turn_costs_come_from_the_agents_running_total() {
    let setup = AcpSetup::new(&[]);
    let mut server = setup.start().await;
    let mut c = server.client().await;
    chat_with(&mut c, "cost1", "one", json!({"agent": "fake"})).await;
    let first = c.until_result("cost1").await;
    chat_ack(&mut c, "cost1", "two").await;
    let second = c.until_result("cost1").await;
    let turn_cost = |frames: &[Value]| {
        stored(frames, "result")[0]["turn_cost_usd"]
            .as_f64()
            .unwrap()
    };
    assert!((turn_cost(&first) - 0.01).abs() < 1e-9, "{first:?}");
    assert!((turn_cost(&second) - 0.01).abs() < 1e-9, "{second:?}");
    drop(c);
    let server2 = restart(&mut server, &setup).await;
    let mut c = server2.client().await;
    chat_ack(&mut c, "cost1", "three").await;
    assert_eq!(turn_cost(&c.until_result("cost1").await), 0.0);
    chat_ack(&mut c, "cost1", "four").await;
    assert!((turn_cost(&c.until_result("cost1").await) - 0.01).abs() < 1e-9);
    let (_, session) = Rest::new(&server2).get("/api/sessions/cost1").await;
    assert!(
        (session["total_cost_usd"].as_f64().unwrap() - 0.03).abs() < 1e-9,
        "{session}"
    );
}

/// The agent runs in the conversation's workspace with `PATH`, `HOME`, `LANG` and its own `env`:
/// none of the server's other variables (its secrets) reach it.
#[tokio::test]
async fn the_agent_gets_its_workspace_and_an_allow_listed_environment() {
    let setup = AcpSetup::new(&[]);
    let server = TestServer::start_in(
        &setup.data_dir(),
        &["--config", &setup.config],
        &[
            ("AGENTMUX_TICKET_SECRET", "server-secret"),
            ("ANTHROPIC_API_KEY", "server-key"),
        ],
    )
    .await;
    let mut c = server.client().await;
    let ack = chat_with(&mut c, "e1", "hi", json!({"agent": "fake"})).await;
    c.until_result("e1").await;
    let env = std::fs::read_to_string(setup.dir.path().join("agent-state/env.log")).unwrap();
    let workspace = setup
        .data_dir()
        .join("workspaces")
        .join(ack["session_id"].as_str().unwrap());
    assert!(
        env.lines()
            .any(|l| l == format!("cwd={}", workspace.display())),
        "{env}"
    );
    assert!(env.lines().any(|l| l == "FAKE_KEY=secret"), "{env}");
    let names: Vec<&str> = env
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once('=').map(|(n, _)| n))
        .collect();
    for name in &names {
        assert!(
            ["PATH", "HOME", "LANG", "FAKE_KEY"].contains(name),
            "{name} leaked into the agent's environment"
        );
    }
    assert!(!env.contains("server-secret") && !env.contains("server-key"));
}

/// An agent that ignores `session/cancel` (and a closed stdin) is stopped once
/// `session.interrupt_timeout_secs` pass: the turn ends `interrupt_timeout`, the process is
/// gone, and the next turn resumes the session in a new one.
#[tokio::test]
async fn an_agent_that_ignores_cancel_is_stopped() {
    let setup = AcpSetup::with_config(
        &[],
        "[session]\ninterrupt_timeout_secs = 1\n[acp]\nstop_grace_secs = 1\n",
    );
    let server = setup.start().await;
    let mut c = server.client().await;
    chat_with(&mut c, "s1", "first", json!({"agent": "fake"})).await;
    c.until_result("s1").await;
    chat_ack(&mut c, "s1", "STUCK").await;
    c.recv_until(|v| v["message_type"] == "stream_event").await;
    let pids = fake_agents(&server);
    assert_eq!(pids.len(), 1);
    c.send(json!({"type": "interrupt", "agent_id": "s1"})).await;
    let frames = c.until_result("s1").await;
    assert_eq!(
        stored(&frames, "result")[0]["message"]["terminal_reason"],
        "interrupt_timeout"
    );
    wait_gone(&pids, std::time::Duration::from_secs(10)).await;
    chat_ack(&mut c, "s1", "again").await;
    let reply = reply_text(&c.until_result("s1").await);
    assert!(reply.starts_with("Echo: again (history "), "{reply}");
    setup.assert_called("session/resume");
}

/// The running `fake-acp` processes the server started.
fn fake_agents(server: &TestServer) -> Vec<u32> {
    cli_children(server, &sibling("fake-acp"))
}

/// Agents die with a server killed by -9 mid-turn (parent-death signal), and a graceful stop
/// leaves none behind.
#[tokio::test]
async fn agents_die_with_the_server() {
    let setup = AcpSetup::new(&[]);
    let mut server = setup.start().await;
    let mut c = server.client().await;
    chat_with(&mut c, "k1", "SLOW", json!({"agent": "fake"})).await;
    c.recv_until(|v| v["message_type"] == "stream_event").await;
    let pids = fake_agents(&server);
    assert_eq!(pids.len(), 1, "one agent for the conversation");
    server.kill9().await;
    wait_gone(&pids, std::time::Duration::from_secs(3)).await;

    let mut server = setup.start().await;
    let mut c = server.client().await;
    chat_ack(&mut c, "k1", "after").await;
    c.until_result("k1").await;
    let pids = fake_agents(&server);
    assert_eq!(pids.len(), 1);
    assert!(pids.iter().all(|p| running(*p)));
    assert!(server.terminate().await.success());
    wait_gone(&pids, std::time::Duration::from_secs(10)).await;
}

/// A configured `kind = "claude"` agent runs its own CLI program with its `env`, beside the
/// default demo agent, and keeps the CLI's rewind and fork.
#[tokio::test]
async fn a_configured_claude_agent_runs_its_own_cli() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("cli.log");
    let (_cfg, config) = config_file(&format!(
        "[claude]\nconfig_dir = {}\n[agents.cli]\nkind = \"claude\"\ncommand = [{}]\nenv = {{ FAKE_CLAUDE_LOG = {} }}\n",
        toml_string(&dir.path().join("home").to_string_lossy()),
        toml_string(&sibling("fake-claude").to_string_lossy()),
        toml_string(&log.to_string_lossy()),
    ));
    let server = TestServer::start_in(
        &dir.path().join("data"),
        &["--demo-delay-ms", "0", "--config", &config],
        &[],
    )
    .await;
    let mut c = server.client().await;
    chat_with(&mut c, "cli1", "hello", json!({"agent": "cli"})).await;
    assert_eq!(
        reply_text(&c.until_result("cli1").await),
        "Echo: hello (history 1)"
    );
    let spawned = std::fs::read_to_string(&log).unwrap();
    assert!(spawned.contains("\"argv\""), "{spawned}");
    chat_ack(&mut c, "demo1", "plain").await;
    assert_eq!(
        reply_text(&c.until_result("demo1").await),
        "Echo: plain (turn 1)",
        "the default agent is still demo"
    );
    let (_, agents) = Rest::new(&server).get("/api/agents").await;
    let cli = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "cli")
        .unwrap()
        .clone();
    assert_eq!(cli["kind"], "claude");
    assert_eq!(cli["supports"]["rewind"], true);
}

/// A permission request nobody answers in `session.permission_timeout_secs` is resolved
/// `timed_out` for the sockets and answered `cancelled` to the agent: the tool does not run.
#[tokio::test]
async fn an_unanswered_permission_request_times_out_as_cancelled() {
    let setup = AcpSetup::with_config(&[], "[session]\npermission_timeout_secs = 1\n");
    let server = setup.start().await;
    let mut c = server.client().await;
    chat_with(&mut c, "t1", "PERMIT", json!({"agent": "fake"})).await;
    let frames = c.until_result("t1").await;
    let resolved = frames
        .iter()
        .find(|f| f["message_type"] == "permission_resolved")
        .expect("resolved");
    assert_eq!(resolved["outcome"], "timed_out");
    assert_eq!(
        stored(&frames, "result")[0]["message"]["stop_reason"],
        "cancelled"
    );
    assert!(
        setup
            .calls()
            .iter()
            .any(|l| l.starts_with("permission") && l.contains("cancelled")),
        "{:?}",
        setup.calls()
    );
    assert!(
        !frames
            .iter()
            .any(|f| f.to_string().contains("Tool said: ran"))
    );
}

/// An agent's own mode ids (Gemini CLI's here) are picked on a first chat and between turns;
/// once the agent has said what it offers, an id it lacks is `invalid_options` and creates
/// nothing; before that it is reported when the session opens. Its unattended mode (`yolo`)
/// needs the operator, on a first chat as on a later one.
#[tokio::test]
async fn an_agents_own_modes_are_picked_and_others_refused() {
    let setup = AcpSetup::new(&["--modes", "gemini"]);
    let server = setup.start().await;
    let rest = Rest::new(&server);
    let mut c = server.client().await;
    let modes = |agents: &Value, name: &str| -> Vec<String> {
        let agent = agents["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .unwrap()
            .clone();
        serde_json::from_value(agent["modes"].clone()).unwrap()
    };
    let (_, agents) = rest.get("/api/agents").await;
    assert_eq!(
        modes(&agents, "fake"),
        Vec::<String>::new(),
        "not known yet"
    );
    assert!(modes(&agents, "demo").contains(&"acceptEdits".to_owned()));

    // Before any process of the agent has started, its modes are not known yet: an id it
    // lacks is stored, and the session says so when it opens.
    let ack = chat_with(
        &mut c,
        "g0",
        "hi",
        json!({"agent": "fake", "permission_mode": "dontAsk"}),
    )
    .await;
    assert_eq!(ack["message_type"], "ack", "{ack}");
    let frames = c.until_result("g0").await;
    let warning = frames
        .iter()
        .find(|f| f["status"] == "warning")
        .unwrap_or_else(|| panic!("a warning: {frames:?}"));
    assert!(
        warning["detail"]
            .as_str()
            .unwrap()
            .contains("no mode `dontAsk`"),
        "{warning}"
    );

    turn_with(
        &mut c,
        "g1",
        "hi",
        json!({"agent": "fake", "permission_mode": "autoEdit"}),
    )
    .await;
    let (_, agents) = rest.get("/api/agents").await;
    assert_eq!(
        modes(&agents, "fake"),
        ["default", "autoEdit", "plan"],
        "the modes the agent offered, but `yolo`: it runs tools unasked, which this server refuses"
    );
    setup.assert_called("mode autoEdit");
    turn_with(&mut c, "g1", "next", json!({"permission_mode": "plan"})).await;
    setup.assert_called("mode plan");
    let (_, session) = rest.get("/api/sessions/g1").await;
    assert_eq!(session["permission_mode"], "plan", "{session}");

    // Now known: a Claude CLI mode this agent lacks, or an unknown id, is refused up front,
    // on a new conversation (nothing created) as on this one.
    for mode in ["acceptEdits", "nope"] {
        let err = chat_with(
            &mut c,
            "g2",
            "x",
            json!({"agent": "fake", "permission_mode": mode}),
        )
        .await;
        assert_eq!(err["code"], "invalid_options", "{mode}: {err}");
        assert!(err["error"].as_str().unwrap().contains("autoEdit"), "{err}");
        assert_eq!(rest.get("/api/sessions/g2").await.0, 404, "{mode}");
        let err = chat_with(&mut c, "g1", "x", json!({"permission_mode": mode})).await;
        assert_eq!(err["code"], "invalid_options", "{mode}: {err}");
    }
    // Gemini's own id picks on a first chat too.
    turn_with(
        &mut c,
        "g3",
        "hi",
        json!({"agent": "fake", "permission_mode": "plan"}),
    )
    .await;

    // `yolo` runs tools without asking: refused unless the operator allows it.
    needs_the_operator(
        &mut c,
        "g4",
        "x",
        json!({"agent": "fake", "permission_mode": "yolo"}),
    )
    .await;
    assert_eq!(rest.get("/api/sessions/g4").await.0, 404);
    let err = chat_with(&mut c, "g1", "x", json!({"permission_mode": "yolo"})).await;
    assert_eq!(err["code"], "invalid_options", "{err}");
    let (_, messages) = rest.get("/api/sessions/g1/messages").await;
    assert!(
        !messages.to_string().contains("\"x\""),
        "a refused chat stores nothing"
    );
    let ack = chat_with(&mut c, "g1", "after", json!({})).await;
    assert_eq!(
        ack["message_type"], "ack",
        "the conversation goes on: {ack}"
    );
    c.until_result("g1").await;
    assert!(!setup.calls().contains(&"mode yolo".to_owned()));

    let allowed = AcpSetup::with_config(
        &["--modes", "gemini"],
        "[agent]\nallow_bypass_permissions = true\n",
    );
    let server = allowed.start().await;
    let mut c = server.client().await;
    turn_with(
        &mut c,
        "y1",
        "hi",
        json!({"agent": "fake", "permission_mode": "yolo"}),
    )
    .await;
    allowed.assert_called("mode yolo");
}

/// Malformed mode ids never reach an agent: flag-like, path-like, overlong or odd ones are
/// `invalid_options` over the socket and REST, and create nothing.
#[tokio::test]
async fn malformed_mode_ids_are_refused() {
    let setup = AcpSetup::new(&["--modes", "gemini"]);
    let server = setup.start().await;
    let rest = Rest::new(&server);
    let mut c = server.client().await;
    for bad in [
        json!("-yolo"),
        json!("--dangerously-skip-permissions"),
        json!("../plan"),
        json!("pl an"),
        json!("plan;rm"),
        json!("m".repeat(65)),
        json!(""),
        json!(true),
    ] {
        let options = json!({"agent": "fake", "permission_mode": bad});
        let err = chat_with(&mut c, "bad", "hi", options.clone()).await;
        assert_eq!(err["code"], "invalid_options", "{bad}: {err}");
        let (status, body) = rest
            .post(
                "/api/sessions/bad/messages",
                json!({"content": "hi", "options": options}),
            )
            .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("invalid_options")),
            "{bad}"
        );
    }
    assert_eq!(rest.get("/api/sessions/bad").await.0, 404);
    assert!(
        setup.calls().is_empty(),
        "no agent started: {:?}",
        setup.calls()
    );
}

/// Sends a chat with `content` (text or blocks) and returns its ack (or error).
async fn chat_blocks(c: &mut Client, agent_id: &str, content: Value, options: Value) -> Value {
    c.send(json!({"type": "chat", "agent_id": agent_id, "content": content, "options": options}))
        .await;
    let frames = c
        .recv_until(|v| v["message_type"] == "ack" || v["message_type"] == "error")
        .await;
    frames.last().unwrap().clone()
}

/// An agent that does not advertise image prompts never gets an image: once it has said so, a
/// chat with one is `unsupported` and stores nothing, on a new conversation as on a running
/// one; on the first start since the server started (when that is not known yet) the stored
/// turn ends at once with an `unsupported` result without reaching the agent. Either way the
/// conversation goes on. An agent that takes images gets them.
#[tokio::test]
async fn images_to_an_agent_that_cant_take_them_are_refused() {
    use crate::images::{PNG_1X1, image};
    let with_image =
        json!([{"type": "text", "text": "what is this?"}, image("image/png", PNG_1X1)]);
    let setup = AcpSetup::new(&["--no-images"]);
    let server = setup.start().await;
    let rest = Rest::new(&server);
    let mut c = server.client().await;

    let ack = chat_blocks(&mut c, "i1", with_image.clone(), json!({"agent": "fake"})).await;
    assert_eq!(ack["message_type"], "ack", "not known yet: {ack}");
    let frames = c.until_result("i1").await;
    let result = stored(&frames, "result")[0];
    assert_eq!(
        result["message"]["terminal_reason"], "unsupported",
        "{result}"
    );
    assert!(
        result["message"]["result"]
            .as_str()
            .unwrap()
            .contains("does not take images"),
        "{result}"
    );
    assert!(
        !setup.calls().iter().any(|l| l.contains("image")),
        "the agent never saw it: {:?}",
        setup.calls()
    );
    chat_ack(&mut c, "i1", "plain").await;
    assert_eq!(
        reply_text(&c.until_result("i1").await),
        "Echo: plain (history 1)"
    );

    let (_, agents) = rest.get("/api/agents").await;
    let fake = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "fake")
        .unwrap()
        .clone();
    assert_eq!(fake["supports"]["images"], false, "{fake}");
    assert_eq!(fake["supports"]["known"], true, "{fake}");

    let (_, before) = rest.get("/api/sessions/i1/messages").await;
    let err = chat_blocks(&mut c, "i1", with_image.clone(), json!({})).await;
    assert_eq!(err["code"], "unsupported", "{err}");
    assert_eq!(err["agent_id"], "i1");
    let (_, after) = rest.get("/api/sessions/i1/messages").await;
    assert_eq!(before, after, "nothing stored");
    let err = chat_blocks(&mut c, "i2", with_image.clone(), json!({"agent": "fake"})).await;
    assert_eq!(err["code"], "unsupported", "{err}");
    assert_eq!(rest.get("/api/sessions/i2").await.0, 404, "nothing created");
    let (status, body) = rest
        .post(
            "/api/sessions/i1/messages",
            json!({"content": with_image.clone()}),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("unsupported")),
        "{body}"
    );
    chat_ack(&mut c, "i1", "still here").await;
    assert_eq!(
        reply_text(&c.until_result("i1").await),
        "Echo: still here (history 2)"
    );
    assert!(!setup.calls().iter().any(|l| l.contains("image")));

    // The same agent with image prompts gets them.
    let able = AcpSetup::new(&[]);
    let server = able.start().await;
    let mut c = server.client().await;
    let ack = chat_blocks(&mut c, "i3", with_image, json!({"agent": "fake"})).await;
    assert_eq!(ack["message_type"], "ack", "{ack}");
    let frames = c.until_result("i3").await;
    assert_eq!(
        stored(&frames, "result")[0]["message"]["subtype"],
        "success"
    );
    able.assert_called("prompt with 1 image(s)");
}

/// An ACP agent takes a model and a mode, not the launch options the Claude CLI takes
/// (`system_prompt`, `allowed_tools`, `disallowed_tools`, `max_turns`, `add_dirs`): a chat
/// that sets one is `unsupported` over the socket and REST, before anything is stored, on a
/// new conversation as on an existing one, so REST never shows an option that is not in force.
/// `GET /api/agents` says so, and an empty list (which clears) is fine.
#[tokio::test]
async fn launch_options_an_acp_agent_cant_honour_are_refused() {
    let setup = AcpSetup::new(&[]);
    let (server, root) = setup.start_in_a_root().await;
    let rest = Rest::new(&server);
    let mut c = server.client().await;
    let refused = [
        json!({"system_prompt": "be brief"}),
        json!({"allowed_tools": ["Bash(git log:*)"]}),
        json!({"disallowed_tools": ["WebFetch"]}),
        json!({"max_turns": 3}),
        json!({"add_dirs": [root]}),
    ];
    for options in &refused {
        let mut options = options.clone();
        options["agent"] = json!("fake");
        let err = chat_with(&mut c, "l1", "hi", options.clone()).await;
        assert_eq!(err["code"], "unsupported", "{options}: {err}");
        let (status, body) = rest
            .post(
                "/api/sessions/l2/messages",
                json!({"content": "hi", "options": options}),
            )
            .await;
        assert_eq!((status, body["code"].as_str()), (422, Some("unsupported")));
    }
    for agent_id in ["l1", "l2"] {
        assert_eq!(rest.get(&format!("/api/sessions/{agent_id}")).await.0, 404);
    }
    assert!(
        setup.calls().is_empty(),
        "no agent started: {:?}",
        setup.calls()
    );

    let options = json!({"agent": "fake", "allowed_tools": [], "add_dirs": []});
    turn_with(&mut c, "l1", "plain", options).await;
    let (_, before) = rest.get("/api/sessions/l1").await;
    let (_, messages) = rest.get("/api/sessions/l1/messages").await;
    for options in refused {
        let err = chat_with(&mut c, "l1", "again", options.clone()).await;
        assert_eq!(err["code"], "unsupported", "{options}: {err}");
        assert_eq!(err["agent_id"], "l1");
    }
    assert_eq!(
        rest.get("/api/sessions/l1").await.1,
        before,
        "no option stored"
    );
    assert_eq!(rest.get("/api/sessions/l1/messages").await.1, messages);
    assert!(before["system_prompt"].is_null() && before["max_turns"].is_null());
    assert_eq!(before["allowed_tools"], json!([]), "{before}");
    assert_eq!(before["add_dirs"], json!([]), "{before}");
    let (_, agents) = rest.get("/api/agents").await;
    let supports = |name: &str| {
        agents["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .unwrap()["supports"]["launch_options"]
            .clone()
    };
    assert_eq!(supports("fake"), json!([]));
    assert_eq!(
        supports("demo"),
        json!([
            "system_prompt",
            "allowed_tools",
            "disallowed_tools",
            "max_turns",
            "add_dirs"
        ])
    );
}

/// An ACP agent takes the launch options its `launch_options` lists and no other: a chat
/// setting another (alone or beside a listed one) is `unsupported` over the socket and REST
/// and stores nothing, on a new conversation as on an existing one; the listed ones reach the
/// agent in `_meta` exactly as set, and a change restarts it with the new `_meta` on
/// `session/resume`. `GET /api/agents` lists what it takes. A stored option the agent no
/// longer takes (the operator changed its list) is not sent, with a `warning`.
#[tokio::test]
async fn an_acp_agent_takes_only_the_launch_options_it_lists() {
    let setup = AcpSetup::with_agent_keys(
        &[],
        "",
        "launch_options = [\"max_turns\", \"system_prompt\"]\n",
    );
    let (server, root) = setup.start_in_a_root().await;
    let rest = Rest::new(&server);
    let mut c = server.client().await;
    let refused = [
        (
            "allowed_tools",
            json!({"allowed_tools": ["Bash(git log:*)"]}),
        ),
        (
            "disallowed_tools",
            json!({"disallowed_tools": ["WebFetch"]}),
        ),
        ("add_dirs", json!({"add_dirs": [root]})),
        (
            "allowed_tools",
            json!({"max_turns": 3, "allowed_tools": ["Read(/srv/a.md)"]}),
        ),
    ];
    for (field, options) in &refused {
        let mut options = options.clone();
        options["agent"] = json!("fake");
        let err = chat_with(&mut c, "l1", "hi", options.clone()).await;
        assert_eq!(err["code"], "unsupported", "{options}: {err}");
        assert!(
            err["error"]
                .as_str()
                .unwrap()
                .contains(&format!("`options.{field}`")),
            "{err}"
        );
        let (status, body) = rest
            .post(
                "/api/sessions/l2/messages",
                json!({"content": "hi", "options": options}),
            )
            .await;
        assert_eq!((status, body["code"].as_str()), (422, Some("unsupported")));
    }
    for agent_id in ["l1", "l2"] {
        assert_eq!(rest.get(&format!("/api/sessions/{agent_id}")).await.0, 404);
    }
    assert!(setup.calls().is_empty(), "{:?}", setup.calls());

    let options = json!({"agent": "fake", "system_prompt": "Be brief.", "max_turns": 3});
    turn_with(&mut c, "l1", "one", options).await;
    let sent = json!({"systemPrompt": {"append": "Be brief."},
        "claudeCode": {"options": {"maxTurns": 3}}});
    assert_eq!(setup.metas(), [("session/new".to_owned(), sent)]);
    let (_, before) = rest.get("/api/sessions/l1").await;
    assert_eq!(
        (&before["system_prompt"], &before["max_turns"]),
        (&json!("Be brief."), &json!(3))
    );
    let (_, messages) = rest.get("/api/sessions/l1/messages").await;
    for (_, options) in &refused {
        let err = chat_with(&mut c, "l1", "again", options.clone()).await;
        assert_eq!(err["code"], "unsupported", "{options}: {err}");
    }
    assert_eq!(
        rest.get("/api/sessions/l1").await.1,
        before,
        "nothing stored"
    );
    assert_eq!(rest.get("/api/sessions/l1/messages").await.1, messages);

    turn_with(&mut c, "l1", "two", json!({"max_turns": 5})).await;
    let resumed = json!({"systemPrompt": {"append": "Be brief."},
        "claudeCode": {"options": {"maxTurns": 5}}});
    assert_eq!(
        setup.metas().last().unwrap(),
        &("session/resume".to_owned(), resumed)
    );
    let (_, agents) = rest.get("/api/agents").await;
    let fake = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "fake")
        .unwrap();
    assert_eq!(
        fake["supports"]["launch_options"],
        json!(["system_prompt", "max_turns"])
    );

    // Once the operator takes `max_turns` off the list, the stored value is not sent, and
    // the conversation is told so.
    drop(c);
    let mut server = server;
    assert!(server.terminate().await.success());
    let toml = std::fs::read_to_string(&setup.config).unwrap();
    let fewer = toml.replace("\"max_turns\", ", "");
    assert_ne!(toml, fewer);
    std::fs::write(&setup.config, fewer).unwrap();
    let server = TestServer::start_in(
        &setup.data_dir(),
        &["--config", &setup.config, "--project-root", &root],
        &[],
    )
    .await;
    let mut c = server.client().await;
    chat_ack(&mut c, "l1", "three").await;
    let frames = c.until_result("l1").await;
    let warning = frames
        .iter()
        .find(|f| f["status"] == "warning")
        .expect("a warning");
    assert!(
        warning["detail"]
            .as_str()
            .unwrap()
            .contains("`options.max_turns`"),
        "{warning}"
    );
    let kept = json!({"systemPrompt": {"append": "Be brief."}});
    assert_eq!(
        setup.metas().last().unwrap(),
        &("session/resume".to_owned(), kept)
    );
}

/// An ACP agent that lists every launch option gets them through the same checks as the
/// Claude CLI: for bob, an `add_dirs` entry outside the roots he may use (`..` out, a link
/// out, outside every root, alice's root, relative, `-rf`) and, without
/// `agent.allow_bypass_permissions`, an `allowed_tools` pattern granting a whole tool are
/// `invalid_options`, starting and storing nothing. Alice's options, a directory of her own
/// root among them, reach the agent in `_meta` exactly, on `session/new` and again on
/// `session/resume` after a restart; once that directory is swapped for a link out of every
/// root, her next chat is `forbidden` and the agent is not started.
#[tokio::test]
async fn acp_launch_options_pass_the_clis_checks_and_reach_the_agent() {
    let layout = Layout::new();
    let setup = AcpSetup::with_agent_keys(
        &[],
        &layout.toml(),
        "launch_options = [\"system_prompt\", \"allowed_tools\", \"disallowed_tools\", \
         \"max_turns\", \"add_dirs\"]\n",
    );
    let mut server = setup.start().await;
    let mut bob = connect_as(&server.addr, "tok-bob").await;
    let s = Layout::s;
    let refused = [
        json!({"add_dirs": [format!("{}/../outside", s(&layout.root))]}),
        json!({"add_dirs": [s(&layout.root.join("out"))]}),
        json!({"add_dirs": [s(&layout.outside)]}),
        json!({"add_dirs": [s(&layout.private.join("secret"))]}),
        json!({"add_dirs": ["app"]}),
        json!({"add_dirs": ["-rf"]}),
        json!({"allowed_tools": ["Bash"]}),
        json!({"allowed_tools": ["Bash(*)"]}),
        json!({"allowed_tools": ["Bash(sh:*)"]}),
    ];
    for options in &refused {
        let mut options = options.clone();
        options["agent"] = json!("fake");
        let err = chat_with(&mut bob, "b1", "hi", options.clone()).await;
        assert_eq!(err["code"], "invalid_options", "{options}: {err}");
        let chat = json!({"content": "hi", "options": options});
        let path = "/api/sessions/b1/messages";
        let r = http(&server.addr, "POST", path, Some("tok-bob"), Some(&chat)).await;
        assert_eq!(r.status, 400, "{options}: {}", r.body);
    }
    let r = http(
        &server.addr,
        "GET",
        "/api/sessions/b1",
        Some("tok-bob"),
        None,
    )
    .await;
    assert_eq!(r.status, 404);
    assert!(setup.calls().is_empty(), "{:?}", setup.calls());

    let secret = layout.private.join("secret");
    let options = json!({"agent": "fake", "cwd": s(&layout.app), "system_prompt": "Be brief.",
        "allowed_tools": ["Bash(git log:*)"], "disallowed_tools": ["WebFetch", "Bash(rm:*)"],
        "max_turns": 4, "add_dirs": [s(&secret)]});
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    turn_with(&mut alice, "a1", "one", options).await;
    let sent = json!({"systemPrompt": {"append": "Be brief."},
        "claudeCode": {"options": {"allowedTools": ["Bash(git log:*)"],
        "disallowedTools": ["WebFetch", "Bash(rm:*)"], "maxTurns": 4,
        "additionalDirectories": [s(&secret)]}}});
    assert_eq!(setup.metas(), [("session/new".to_owned(), sent.clone())]);

    drop((alice, bob));
    let server2 = restart(&mut server, &setup).await;
    let mut alice = connect_as(&server2.addr, "tok-alice").await;
    chat_ack(&mut alice, "a1", "two").await;
    assert_eq!(
        reply_text(&alice.until_result("a1").await),
        "Echo: two (history 2)"
    );
    assert_eq!(setup.metas()[1], ("session/resume".to_owned(), sent));

    drop(alice);
    let mut server2 = server2;
    assert!(server2.terminate().await.success());
    std::fs::remove_dir(&secret).unwrap();
    std::os::unix::fs::symlink(&layout.outside, &secret).unwrap();
    let server3 = setup.start().await;
    let mut alice = connect_as(&server3.addr, "tok-alice").await;
    let err = chat_with(&mut alice, "a1", "three", json!({})).await;
    assert_eq!(err["code"], "forbidden", "{err}");
    assert_eq!(setup.metas().len(), 2, "the agent was not started");
}

/// Claude CLIs and ACP agents share one cap on live processes (`agent.max_live_processes`):
/// with room for one, an ACP conversation and a Claude CLI conversation each stop the other's
/// idle process, and both resume with their history; a running turn is never stopped for
/// another (its turn waits, `queued`, until the running one ends).
#[tokio::test]
async fn acp_and_cli_processes_share_one_cap() {
    let home = tempfile::tempdir().unwrap();
    let log = home.path().join("cli.log");
    let setup = AcpSetup::with_config(
        &[],
        &format!(
            "[agent]\nmax_live_processes = 1\n[session]\npermission_timeout_secs = 3600\n\
             [claude]\nconfig_dir = {}\n\
             [agents.cli]\nkind = \"claude\"\ncommand = [{}]\nenv = {{ FAKE_CLAUDE_LOG = {} }}\n",
            toml_string(&home.path().join("home").to_string_lossy()),
            toml_string(&sibling("fake-claude").to_string_lossy()),
            toml_string(&log.to_string_lossy()),
        ),
    );
    let server = setup.start().await;
    let cli_procs = || cli_children(&server, &sibling("fake-claude"));
    let mut c = server.client().await;

    chat_with(&mut c, "acp1", "one", json!({"agent": "fake"})).await;
    assert_eq!(
        reply_text(&c.until_result("acp1").await),
        "Echo: one (history 1)"
    );
    assert_eq!(fake_agents(&server).len(), 1);

    chat_with(&mut c, "cli1", "one", json!({"agent": "cli"})).await;
    assert_eq!(
        reply_text(&c.until_result("cli1").await),
        "Echo: one (history 1)"
    );
    assert_eq!(cli_procs().len(), 1);
    assert!(
        fake_agents(&server).is_empty(),
        "the idle ACP agent made room"
    );

    chat_ack(&mut c, "acp1", "two").await;
    assert_eq!(
        reply_text(&c.until_result("acp1").await),
        "Echo: two (history 2)"
    );
    setup.assert_called("session/resume");
    assert!(cli_procs().is_empty(), "the idle CLI made room");
    assert_eq!(fake_agents(&server).len(), 1);

    chat_ack(&mut c, "cli1", "two").await;
    assert_eq!(
        reply_text(&c.until_result("cli1").await),
        "Echo: two (history 2)"
    );
    let spawns = std::fs::read_to_string(&log).unwrap();
    assert!(spawns.contains("--resume="), "the CLI resumed: {spawns}");
    assert!(fake_agents(&server).is_empty());

    // An ACP turn waiting for a permission answer is running: the CLI's turn waits for it.
    chat_ack(&mut c, "acp1", "PERMIT").await;
    let asked = c
        .recv_until(|f| f["agent_id"] == "acp1" && f["message_type"] == "permission_request")
        .await;
    let request_id = asked.last().unwrap()["request_id"]
        .as_str()
        .unwrap()
        .to_owned();
    chat_ack(&mut c, "cli1", "three").await;
    c.recv_until(|f| f["agent_id"] == "cli1" && f["status"] == "queued")
        .await;
    assert_eq!(
        fake_agents(&server).len(),
        1,
        "the running turn keeps its process"
    );
    assert!(cli_procs().is_empty());
    c.send(json!({"type": "permission_response", "agent_id": "acp1",
        "request_id": request_id, "behavior": "allow"}))
        .await;
    let mut frames = c.until_result("acp1").await;
    // The ACP agent's process is free once it answered, so the CLI's turn may end before
    // acp1's result is stored and sent on.
    let ended = |f: &Value| f["message_type"] == "result" && f["agent_id"] == "cli1";
    if !frames.iter().any(ended) {
        frames.extend(c.until_result("cli1").await);
    }
    let of = |agent_id: &str| -> Vec<Value> {
        let frames = frames.iter().filter(|f| f["agent_id"] == agent_id);
        frames.cloned().collect()
    };
    let acp1 = of("acp1");
    assert_eq!(stored(&acp1, "result")[0]["message"]["subtype"], "success");
    assert_eq!(reply_text(&acp1), "Tool said: ran");
    assert_eq!(reply_text(&of("cli1")), "Echo: three (history 3)");
    assert!(fake_agents(&server).is_empty());
}

/// An agent's own `unattended_modes` replaces `acp.unattended_modes` for it: the modes it
/// names need the operator, and the default list's no longer do.
#[tokio::test]
async fn an_agents_own_unattended_modes_replace_the_default_list() {
    let setup = AcpSetup::with_agent_keys(
        &["--modes", "gemini"],
        "",
        "unattended_modes = [\"autoEdit\"]\n",
    );
    let server = setup.start().await;
    let mut c = server.client().await;
    needs_the_operator(
        &mut c,
        "u1",
        "hi",
        json!({"agent": "fake", "permission_mode": "autoEdit"}),
    )
    .await;
    turn_with(
        &mut c,
        "u1",
        "hi",
        json!({"agent": "fake", "permission_mode": "yolo"}),
    )
    .await;
    setup.assert_called("mode yolo");
}

/// With room for one process, a conversation with a turn queued behind its running one and
/// another conversation waiting for a place: when the running turn ends, whichever gets the
/// process first, every turn runs to its own reply; none is lost or reported crashed (the
/// queued turn handed to an agent that was just asked to go is given to the next one).
#[tokio::test]
async fn a_turn_sent_to_an_agent_that_made_room_runs_on_the_next_one() {
    let setup = AcpSetup::with_config(
        &[],
        "[agent]\nmax_live_processes = 1\n[session]\npermission_timeout_secs = 3600\n",
    );
    let server = setup.start().await;
    let mut c = server.client().await;
    chat_with(&mut c, "qa", "PERMIT", json!({"agent": "fake"})).await;
    let asked = c
        .recv_until(|f| f["agent_id"] == "qa" && f["message_type"] == "permission_request")
        .await;
    let request_id = asked.last().unwrap()["request_id"]
        .as_str()
        .unwrap()
        .to_owned();
    chat_ack(&mut c, "qa", "second").await;
    chat_with(&mut c, "qb", "other", json!({"agent": "fake"})).await;
    c.recv_until(|f| f["agent_id"] == "qb" && f["status"] == "queued")
        .await;
    c.send(json!({"type": "permission_response", "agent_id": "qa",
        "request_id": request_id, "behavior": "allow"}))
        .await;
    let mut replies = std::collections::BTreeMap::new();
    let mut seen = Vec::new();
    while replies.len() < 3 {
        let f = c.recv().await;
        seen.push(f.clone());
        if f["message_type"] == "result" {
            let agent = f["agent_id"].as_str().unwrap().to_owned();
            let text = f["message"]["result"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            replies.insert(format!("{agent}:{}", replies.len()), text);
        }
    }
    assert!(!statuses(&seen).contains(&"crashed".to_owned()), "{seen:?}");
    let mut got: Vec<String> = replies.into_values().collect();
    got.sort();
    assert_eq!(
        got,
        [
            "Echo: other (history 1)",
            "Echo: second (history 2)",
            "Tool said: ran"
        ],
        "{seen:?}"
    );
}

/// A session that starts in a mode that never asks, in an agent offering no mode that asks,
/// runs no turn unless the operator allows such modes: each ends at once with an `unsupported`
/// result, and the agent never gets the prompt.
#[tokio::test]
async fn an_agent_that_can_only_run_unattended_gets_no_turn() {
    let keys = "unattended_modes = [\"default\", \"autoEdit\", \"yolo\", \"plan\"]\n";
    for allowed in [false, true] {
        let setup = AcpSetup::with_agent_keys(
            &["--modes", "gemini", "--start-mode", "yolo"],
            &format!("[agent]\nallow_bypass_permissions = {allowed}\n"),
            keys,
        );
        let server = setup.start().await;
        let mut c = server.client().await;
        chat_with(&mut c, "y", "hi", json!({"agent": "fake"})).await;
        let frames = c.until_result("y").await;
        let result = &stored(&frames, "result")[0]["message"];
        let prompted = setup.calls().contains(&"session/prompt".to_owned());
        if allowed {
            assert_eq!(reply_text(&frames), "Echo: hi (history 1)");
            assert!(prompted);
        } else {
            assert_eq!(result["terminal_reason"], "unsupported", "{result}");
            assert!(
                result["result"]
                    .as_str()
                    .unwrap()
                    .contains("allow_bypass_permissions"),
                "{result}"
            );
            assert!(!prompted, "{:?}", setup.calls());
            assert!(
                !setup.calls().contains(&"session/set_mode".to_owned()),
                "no mode to switch to"
            );
        }
    }
}

/// An agent that switches itself into a mode that runs tools without asking (as the Claude
/// adapter does when the model leaves plan mode) is switched back before the next turn: the
/// server follows the adapter's `config_option_update` as well as another agent's
/// `current_mode_update`, so the next tool call is asked for.
#[tokio::test]
async fn an_agent_that_switches_itself_to_run_unattended_is_switched_back() {
    for (flags, unattended) in [
        (&[][..], "bypassPermissions"),
        (&["--modes", "gemini"][..], "yolo"),
    ] {
        let setup = AcpSetup::new(flags);
        let server = setup.start().await;
        let mut c = server.client().await;
        chat_with(
            &mut c,
            "s1",
            &format!("MODE:{unattended}"),
            json!({"agent": "fake"}),
        )
        .await;
        c.until_result("s1").await;
        setup.assert_called(&format!("switched itself to {unattended}"));
        chat_ack(&mut c, "s1", "TOOL:touch+x.txt").await;
        let frames = c
            .recv_until(|f| {
                f["message_type"] == "permission_request"
                    || (f["message_type"] == "result" && f["agent_id"] == "s1")
            })
            .await;
        assert_eq!(
            frames.last().unwrap()["message_type"],
            "permission_request",
            "{flags:?}: the tool call is asked for: {frames:?}"
        );
        let calls = setup.calls();
        let switched = calls
            .iter()
            .position(|c| c.starts_with("switched itself"))
            .unwrap();
        assert!(
            calls[switched..].contains(&"mode default".to_owned()),
            "{flags:?}: {calls:?}"
        );
    }
}
