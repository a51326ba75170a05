//! End to end with the real Claude Code CLI (the pinned version `scripts/test.sh` installs),
//! talking to the fake Messages API on loopback: no network, no key.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::common::*;

/// The real CLI, from `AGENTMUX_TEST_CLAUDE_BIN`. Missing is a failure under CI.
pub fn real_cli() -> Option<PathBuf> {
    match std::env::var("AGENTMUX_TEST_CLAUDE_BIN") {
        Ok(path) if Path::new(&path).is_file() => Some(PathBuf::from(path)),
        _ if std::env::var("CI").as_deref() == Ok("true") => {
            panic!(
                "AGENTMUX_TEST_CLAUDE_BIN must name the Claude CLI under CI (scripts/test.sh installs it)"
            )
        }
        _ => {
            eprintln!(
                "skipping the real-CLI test: AGENTMUX_TEST_CLAUDE_BIN is not set (scripts/test.sh sets it)"
            );
            None
        }
    }
}

/// The fake Messages API, its URL and its request log.
pub struct FakeApi {
    _child: Child,
    pub url: String,
    log: PathBuf,
}

impl FakeApi {
    pub async fn start(dir: &Path) -> Self {
        let log = dir.join("api.log");
        let mut child = Command::new(sibling("fake-anthropic"))
            .args(["--port", "0", "--log"])
            .arg(&log)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let url = line.strip_prefix("listening on ").unwrap().to_owned();
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        FakeApi {
            _child: child,
            url,
            log,
        }
    }

    /// Every request body the model got.
    pub fn bodies(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect()
    }

    /// The `messages` of every request the model got.
    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|r| r["messages"].clone())
            .collect()
    }
}

/// A temporary directory holding the fake model API's log, the CLI's home and the server's
/// data, and a configuration that points the CLI at that home.
pub struct RealSetup {
    dir: tempfile::TempDir,
    pub api: FakeApi,
    pub config: String,
    _config_dir: tempfile::TempDir,
}

impl RealSetup {
    pub async fn new() -> Self {
        Self::with_config("").await
    }

    /// A setup whose configuration adds `extra` (TOML) after the `[claude]` table.
    pub async fn with_config(extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let api = FakeApi::start(dir.path()).await;
        let home = dir.path().join("claude-home");
        let (_config_dir, config) = config_file(&format!(
            "[claude]\nconfig_dir = \"{}\"\n{extra}",
            home.display()
        ));
        RealSetup {
            dir,
            api,
            config,
            _config_dir,
        }
    }

    /// The server's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }
}

/// The state letter and parent pid of a process, from `/proc/<pid>/stat`.
pub fn stat(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Whether a process is running (a zombie is not).
pub fn running(pid: u32) -> bool {
    stat(pid).is_some_and(|(state, _)| state != 'Z')
}

/// pids of the running `bin` processes the server started (other tests run CLIs too), but not
/// the ones asking the CLI about itself (`--version`, `auth status`), which the server runs
/// once at its start, beside the first conversations' CLIs.
pub fn cli_children(server: &TestServer, bin: &Path) -> Vec<u32> {
    let bin = bin.canonicalize().unwrap();
    let server = server.child.id().expect("the server runs");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| stat(*pid).is_some_and(|(state, ppid)| ppid == server && state != 'Z'))
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == bin))
        .filter(|pid| !asks_about_itself(*pid))
        .collect()
}

/// Whether a CLI process runs one of the server's questions about the CLI itself.
fn asks_about_itself(pid: u32) -> bool {
    matches!(
        args_of(pid).first().map(String::as_str),
        Some("--version" | "auth")
    )
}

/// The arguments process `pid` was started with (without the program), from
/// `/proc/<pid>/cmdline`; none once it is gone.
pub fn args_of(pid: u32) -> Vec<String> {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return Vec::new();
    };
    cmdline
        .split(|b| *b == 0)
        .skip(1)
        .filter(|arg| !arg.is_empty())
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect()
}

pub async fn start_server(data_dir: &Path, cli: &Path, api: &FakeApi, config: &str) -> TestServer {
    start_server_env(
        data_dir,
        cli,
        api,
        config,
        &[("ANTHROPIC_API_KEY", "dummy")],
    )
    .await
}

/// [`start_server`] with the credentials, and any other variables, in `env`.
pub async fn start_server_env(
    data_dir: &Path,
    cli: &Path,
    api: &FakeApi,
    config: &str,
    env: &[(&str, &str)],
) -> TestServer {
    let mut vars = vec![
        ("ANTHROPIC_BASE_URL", api.url.as_str()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ("CLAUDE_CODE_MAX_RETRIES", "0"),
    ];
    vars.extend_from_slice(env);
    TestServer::start_in(
        data_dir,
        &[
            "--backend",
            "claude",
            "--claude-bin",
            cli.to_str().unwrap(),
            "--config",
            config,
        ],
        &vars,
    )
    .await
}

/// Waits up to `deadline` for every process in `pids` to be gone.
pub async fn wait_gone(pids: &[u32], deadline: Duration) {
    let start = std::time::Instant::now();
    while pids.iter().any(|p| running(*p)) && start.elapsed() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left: Vec<u32> = pids.iter().copied().filter(|p| running(*p)).collect();
    assert!(left.is_empty(), "CLI processes left: {left:?}");
}

/// Stops the server gracefully and checks that its CLIs went with it.
pub async fn stop(mut server: TestServer, cli: &Path) {
    let pids = cli_children(&server, cli);
    assert!(server.terminate().await.success());
    wait_gone(&pids, Duration::from_secs(10)).await;
}

/// Two turns on one process with our session_id as the CLI's id; an interrupt during a slow
/// stream; a tool call approved through permission_request/permission_response; a restart that
/// resumes with the earlier turns sent to the model; no CLI left when the server stops.
#[cfg_attr(
    no_test_claude,
    ignore = "needs the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN), not configured here"
)]
#[tokio::test]
async fn real_cli_end_to_end() {
    let Some(cli) = real_cli() else { return };
    let setup = RealSetup::new().await;
    let (api, config) = (&setup.api, &setup.config);
    let data_dir = setup.data_dir();
    let server = start_server(&data_dir, &cli, api, config).await;
    let mut c = server.client().await;

    let ack = chat_ack(&mut c, "real", "hello one").await;
    let session_id = ack["session_id"].as_str().unwrap().to_owned();
    let first = c.until_result("real").await;
    assert_eq!(reply_text(&first), "Echo: hello one (history 1)");
    let init = first
        .iter()
        .find(|f| f["message_type"] == "system" && f["message"]["subtype"] == "init")
        .unwrap();
    assert_eq!(
        init["message"]["session_id"],
        session_id.as_str(),
        "the CLI adopted our id"
    );
    assert!(
        first.iter().any(|f| f["message_type"] == "stream_event"),
        "partial messages stream"
    );
    // A turn with an image: the model gets the image block as it was sent.
    let image = crate::images::image("image/png", crate::images::PNG_1X1);
    c.send(json!({"type": "chat", "agent_id": "real",
        "content": [{"type": "text", "text": "hello two"}, image]}))
        .await;
    // The CLI saves the image to a file and adds a text block naming it, after ours.
    let reply = reply_text(&c.until_result("real").await);
    assert!(
        reply.starts_with("Echo: hello two\n[Image: source: ")
            && reply.ends_with(".png] (history 2)"),
        "{reply}"
    );
    let request = api.requests().pop().unwrap();
    let last = request.as_array().unwrap().last().unwrap();
    assert!(
        last["content"].as_array().unwrap().contains(&image),
        "the image reached the model: {last}"
    );
    let pids = cli_children(&server, &cli);
    assert_eq!(pids.len(), 1, "one live process across turns");

    // Interrupt during a slow stream: the CLI ends the turn as interrupted, the same process
    // carries on, and the next turn remembers everything, the interrupted prompt too.
    chat_ack(&mut c, "real", "SLOW story please").await;
    c.recv_until(|f| {
        f["message_type"] == "stream_event"
            && f["message"]["event"]["type"] == "content_block_delta"
    })
    .await;
    c.send(json!({"type": "interrupt", "agent_id": "real"}))
        .await;
    let interrupted = c.until_result("real").await;
    let result = &interrupted.last().unwrap()["message"];
    assert_eq!(result["is_error"], true, "{result}");
    assert_eq!(result["terminal_reason"], "aborted_streaming", "{result}");
    assert!(
        !interrupted.iter().any(|f| f["status"] == "crashed"),
        "{interrupted:?}"
    );
    chat_ack(&mut c, "real", "after the stop").await;
    assert_eq!(
        reply_text(&c.until_result("real").await),
        "Echo: after the stop (history 4)"
    );
    assert_eq!(cli_children(&server, &cli), pids, "the same process");

    // A tool call that needs approval round-trips through the client.
    chat_ack(&mut c, "real", "TOOL:touch+made_by_tool.txt").await;
    let request = c
        .recv_until(|f| f["message_type"] == "permission_request")
        .await
        .pop()
        .unwrap();
    assert_eq!(request["tool_name"], "Bash");
    c.send(json!({"type": "permission_response", "agent_id": "real", "request_id": request["request_id"], "behavior": "allow"}))
        .await;
    let tool_turn = c.until_result("real").await;
    assert!(
        tool_turn
            .iter()
            .any(|f| f["message_type"] == "permission_resolved" && f["outcome"] == "allowed")
    );
    assert!(
        data_dir
            .join("workspaces")
            .join(&session_id)
            .join("made_by_tool.txt")
            .exists(),
        "the tool ran in the workspace"
    );

    stop(server, &cli).await;

    // Restart: the conversation resumes and the model gets the earlier turns.
    let server = start_server(&data_dir, &cli, api, config).await;
    let mut c = server.client().await;
    let ack = chat_ack(&mut c, "real", "hello three").await;
    assert_eq!(ack["session_id"], session_id.as_str());
    let reply = reply_text(&c.until_result("real").await);
    assert!(reply.starts_with("Echo: hello three (history "), "{reply}");
    let last = api.requests().pop().unwrap().to_string();
    assert!(
        last.contains("hello one") && last.contains("hello two"),
        "earlier turns reached the model"
    );
    stop(server, &cli).await;
}

/// A model API error reaches the client as the CLI's error `result` (not a crash); the same
/// process runs the next turn, which the model gets together with the failed one.
#[cfg_attr(
    no_test_claude,
    ignore = "needs the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN), not configured here"
)]
#[tokio::test]
async fn real_cli_api_error_is_an_error_result() {
    let Some(cli) = real_cli() else { return };
    let setup = RealSetup::new().await;
    let (api, config) = (&setup.api, &setup.config);
    let server = start_server(&setup.data_dir(), &cli, api, config).await;
    let mut c = server.client().await;

    chat_ack(&mut c, "apierr", "HTTPERR:500").await;
    let frames = c.until_result("apierr").await;
    let result = &frames.last().unwrap()["message"];
    assert_eq!(result["is_error"], true, "{result}");
    assert_eq!(result["terminal_reason"], "api_error", "{result}");
    assert_eq!(result["api_error_status"], 500, "{result}");
    assert!(
        result["result"]
            .as_str()
            .is_some_and(|r| r.starts_with("API Error: 500")),
        "{result}"
    );
    assert!(
        !frames.iter().any(|f| f["status"] == "crashed"),
        "{frames:?}"
    );
    let pids = cli_children(&server, &cli);
    assert_eq!(pids.len(), 1);

    chat_ack(&mut c, "apierr", "and now").await;
    assert_eq!(
        reply_text(&c.until_result("apierr").await),
        "Echo: HTTPERR:500\nand now (history 1)"
    );
    assert_eq!(cli_children(&server, &cli), pids, "the same process");
    stop(server, &cli).await;
}

/// When the server is killed with -9 mid-turn, its CLI dies with it (parent-death signal),
/// instead of streaming on with nobody listening.
#[cfg_attr(
    no_test_claude,
    ignore = "needs the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN), not configured here"
)]
#[tokio::test]
async fn real_cli_dies_with_a_killed_server() {
    let Some(cli) = real_cli() else { return };
    let setup = RealSetup::new().await;
    let (api, config) = (&setup.api, &setup.config);
    let mut server = start_server(&setup.data_dir(), &cli, api, config).await;
    let mut c = server.client().await;
    chat_ack(&mut c, "orphan", "SLOW story please").await;
    c.recv_until(|f| {
        f["message_type"] == "stream_event"
            && f["message"]["event"]["type"] == "content_block_delta"
    })
    .await;
    let pids = cli_children(&server, &cli);
    assert_eq!(pids.len(), 1, "one CLI for the conversation");
    server.kill9().await;
    wait_gone(&pids, Duration::from_secs(3)).await;
}

/// The real CLI killed between turns is started again with `--resume` within 3 s, without a
/// chat; the next turn runs on that process and the model gets the earlier turn.
#[cfg_attr(
    no_test_claude,
    ignore = "needs the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN), not configured here"
)]
#[tokio::test]
async fn real_cli_killed_between_turns_is_respawned() {
    let Some(cli) = real_cli() else { return };
    let setup = RealSetup::new().await;
    let (api, config) = (&setup.api, &setup.config);
    let server = start_server(&setup.data_dir(), &cli, api, config).await;
    let mut c = server.client().await;
    let ack = chat_ack(&mut c, "rk", "hello one").await;
    let session_id = ack["session_id"].as_str().unwrap().to_owned();
    c.until_result("rk").await;
    let first = cli_children(&server, &cli);
    assert_eq!(first.len(), 1);
    std::process::Command::new("kill")
        .args(["-9", &first[0].to_string()])
        .status()
        .unwrap();

    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let respawned = loop {
        let now: Vec<u32> = cli_children(&server, &cli)
            .into_iter()
            .filter(|p| *p != first[0])
            .collect();
        if let [pid] = now[..] {
            break Some(pid);
        }
        if std::time::Instant::now() >= deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let respawned = respawned.expect("a new CLI within 3 s, without a chat");
    let args = args_of(respawned);
    assert!(
        args.iter().any(|a| *a == format!("--resume={session_id}")),
        "{args:?}"
    );

    chat_ack(&mut c, "rk", "hello two").await;
    assert_eq!(
        reply_text(&c.until_result("rk").await),
        "Echo: hello two (history 2)",
        "the respawned CLI remembers"
    );
    assert_eq!(
        cli_children(&server, &cli),
        vec![respawned],
        "the same process"
    );
    stop(server, &cli).await;
}

/// `agentmux bench warm` on the real CLI: every case (cold, running, respawned, warmed on open,
/// and the CLI alone) completes a turn and is reported, in the table and the JSON.
#[cfg_attr(
    no_test_claude,
    ignore = "needs the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN), not configured here"
)]
#[tokio::test]
async fn the_warm_benchmark_measures_every_case() {
    let Some(cli) = real_cli() else { return };
    sibling("fake-anthropic");
    let cli = cli.to_str().unwrap();
    let (stdout, report) =
        crate::bench::run_bench(&["warm", "--rounds", "1", "--claude-bin", cli]).await;
    let cases: Vec<&str> = report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["case"].as_str().unwrap())
        .collect();
    assert_eq!(
        cases,
        [
            "cold start",
            "running agent",
            "respawned after kill -9",
            "warmed on open",
            "CLI alone: resumed, 1st turn",
            "CLI alone: resumed, 2nd turn"
        ]
    );
    for case in report["cases"].as_array().unwrap() {
        assert_eq!(case["samples_ms"].as_array().unwrap().len(), 1, "{case}");
        assert!(stdout.contains(case["case"].as_str().unwrap()), "{stdout}");
    }
}
