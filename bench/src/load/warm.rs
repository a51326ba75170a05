//! `warm`: agentmux on the real Claude CLI against the fake model API (`fake-anthropic`): the
//! first token of a conversation's turn when its agent starts cold, when it is already running,
//! when it was respawned after a `kill -9`, and when a dormant conversation was warmed on open;
//! and, as the baseline, the same CLI driven over its stdio without agentmux.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;

use super::SETUP_TIMEOUT;
use crate::baseline::STREAM_JSON_FLAGS;
use crate::process;
use crate::report::Machine;
use crate::servers::{Server, Tweaks};
use crate::wire::{Socket, chat_text, connect, peek};

/// How long the person "types" after the warm-up or the respawn finished.
const THINK_TIME: Duration = Duration::from_secs(1);

/// First-token times of one case over the rounds, in milliseconds.
#[derive(Debug, Serialize)]
pub struct Case {
    /// What was measured.
    pub case: &'static str,
    /// Median.
    pub median_ms: f64,
    /// Smallest.
    pub min_ms: f64,
    /// Largest.
    pub max_ms: f64,
    /// Every round's figure, in order.
    pub samples_ms: Vec<f64>,
}

impl Case {
    fn new(case: &'static str, samples_ms: Vec<f64>) -> Self {
        let mut sorted = samples_ms.clone();
        sorted.sort_by(f64::total_cmp);
        Case {
            case,
            median_ms: sorted[sorted.len() / 2],
            min_ms: sorted[0],
            max_ms: sorted[sorted.len() - 1],
            samples_ms,
        }
    }
}

/// What `agentmux bench warm` measured.
#[derive(Debug, Serialize)]
pub struct WarmReport {
    /// Always `warm`.
    pub scenario: &'static str,
    /// Where it ran.
    pub machine: Machine,
    /// Conversations measured (one sample per case each).
    pub rounds: usize,
    /// chat → first `stream_event`, per case.
    pub cases: Vec<Case>,
}

impl WarmReport {
    /// The report as a small table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "scenario warm on {} ({} cores, {} MiB, Linux {}), {} rounds\n\
             chat -> first token           median ms    min ms    max ms\n",
            self.machine.cpu,
            self.machine.cores,
            self.machine.memory_mib,
            self.machine.kernel,
            self.rounds
        );
        for c in &self.cases {
            out.push_str(&format!(
                "{:<28} {:>10.1} {:>9.1} {:>9.1}\n",
                c.case, c.median_ms, c.min_ms, c.max_ms
            ));
        }
        out
    }
}

/// The fake model API, running until dropped.
struct FakeApi {
    _child: Child,
    url: String,
}

impl FakeApi {
    async fn start() -> anyhow::Result<Self> {
        let path = std::env::current_exe()?.with_file_name("fake-anthropic");
        anyhow::ensure!(
            path.is_file(),
            "no fake-anthropic at {}: build it (`cargo build --release -p agentmux-fakes`)",
            path.display()
        );
        let mut child = Command::new(&path)
            .args(["--port", "0"])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let line = timeout(SETUP_TIMEOUT, lines.next_line())
            .await
            .map_err(|_| anyhow::anyhow!("fake-anthropic did not start in time"))??
            .ok_or_else(|| anyhow::anyhow!("fake-anthropic exited"))?;
        let url = line
            .strip_prefix("listening on ")
            .ok_or_else(|| anyhow::anyhow!("unexpected first line from fake-anthropic: {line}"))?
            .to_owned();
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(FakeApi { _child: child, url })
    }
}

/// Measures `rounds` conversations, each through the four cases.
pub async fn warm(claude_bin: &Path, rounds: usize) -> anyhow::Result<WarmReport> {
    let claude_bin = claude_bin
        .canonicalize()
        .map_err(|e| anyhow::anyhow!("--claude-bin {}: {e}", claude_bin.display()))?;
    let api = FakeApi::start().await?;
    let tweaks = Tweaks {
        claude_bin: Some(claude_bin.clone()),
        env: vec![
            ("ANTHROPIC_BASE_URL".into(), api.url.clone()),
            ("ANTHROPIC_API_KEY".into(), "bench".into()),
            (
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
                "1".into(),
            ),
            ("CLAUDE_CODE_MAX_RETRIES".into(), "0".into()),
        ],
        ..Tweaks::default()
    };
    let data = tempfile::tempdir()?;
    let ids: Vec<String> = (0..rounds).map(|i| format!("warm-{i}")).collect();
    let (mut cold, mut running, mut respawned, mut warmed) = (vec![], vec![], vec![], vec![]);

    let mut server = Server::start_in(data.path(), &tweaks).await?;
    let mut ws = connect(&server.addr).await?;
    for id in &ids {
        let before = process::children(server.pid(), &claude_bin);
        cold.push(turn(&mut ws, id).await?);
        running.push(turn(&mut ws, id).await?);
        let started: Vec<u32> = process::children(server.pid(), &claude_bin)
            .into_iter()
            .filter(|pid| !before.contains(pid))
            .collect();
        let [pid] = started[..] else {
            anyhow::bail!("expected one new CLI process for {id}, found {started:?}");
        };
        process::kill9(pid);
        until_status(&mut ws, id, "ready").await?;
        tokio::time::sleep(THINK_TIME).await;
        respawned.push(turn(&mut ws, id).await?);
    }
    drop(ws);
    server.kill().await;

    // Every conversation is dormant after a restart; open each with `warm`, then type.
    let mut server = Server::start_in(data.path(), &tweaks).await?;
    let mut ws = connect(&server.addr).await?;
    for id in &ids {
        let subscribe = json!({"type": "subscribe", "agent_id": id, "since_seq": 0, "warm": true});
        ws.send(Message::text(subscribe.to_string())).await?;
        until_status(&mut ws, id, "ready").await?;
        tokio::time::sleep(THINK_TIME).await;
        warmed.push(turn(&mut ws, id).await?);
    }
    server.kill().await;

    // The same CLI without agentmux, driven over its stdio by this process: what a resumed
    // process's first turn costs by itself, and its second.
    let (mut alone_first, mut alone_later) = (vec![], vec![]);
    let config_dir = data.path().join("claude");
    for _ in 0..rounds {
        let (first, later) = cli_alone(&claude_bin, &config_dir, &api.url).await?;
        alone_first.push(first);
        alone_later.push(later);
    }
    Ok(WarmReport {
        scenario: "warm",
        machine: Machine::this(),
        rounds,
        cases: vec![
            Case::new("cold start", cold),
            Case::new("running agent", running),
            Case::new("respawned after kill -9", respawned),
            Case::new("warmed on open", warmed),
            Case::new("CLI alone: resumed, 1st turn", alone_first),
            Case::new("CLI alone: resumed, 2nd turn", alone_later),
        ],
    })
}

/// The CLI driven over its stdio by this process.
struct Alone {
    child: Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Alone {
    /// Starts the CLI with `launch` (`--session-id=…` or `--resume=…`) and initializes it.
    async fn start(
        bin: &Path,
        config_dir: &Path,
        cwd: &Path,
        api_url: &str,
        launch: &str,
    ) -> anyhow::Result<Self> {
        let mut child = Command::new(bin)
            .args(STREAM_JSON_FLAGS)
            .args(["--permission-prompt-tool", "stdio", launch])
            .current_dir(cwd)
            .env("CLAUDE_CONFIG_DIR", config_dir)
            .env("ANTHROPIC_BASE_URL", api_url)
            .env("ANTHROPIC_API_KEY", "bench")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("CLAUDE_CODE_MAX_RETRIES", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", bin.display()))?;
        let stdin = child.stdin.take().expect("piped");
        let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let mut alone = Alone {
            child,
            stdin,
            lines,
        };
        alone
            .write(json!({"type": "control_request", "request_id": "init",
                "request": {"subtype": "initialize", "hooks": null}}))
            .await?;
        alone
            .until(|line| line.contains("\"control_response\""))
            .await
            .map_err(|e| anyhow::anyhow!("initialize: {e}"))?;
        Ok(alone)
    }

    async fn write(&mut self, line: serde_json::Value) -> anyhow::Result<()> {
        Ok(self.stdin.write_all(format!("{line}\n").as_bytes()).await?)
    }

    /// Reads lines up to one that `done` accepts (it sees every line).
    async fn until(&mut self, mut done: impl FnMut(&str) -> bool) -> anyhow::Result<()> {
        timeout(SETUP_TIMEOUT, async {
            while let Some(line) = self.lines.next_line().await? {
                if done(&line) {
                    return Ok(());
                }
            }
            anyhow::bail!("the CLI exited")
        })
        .await
        .map_err(|_| anyhow::anyhow!("the CLI did not answer in time"))?
    }

    /// A turn: milliseconds to its first `stream_event` line.
    async fn turn(&mut self) -> anyhow::Result<f64> {
        let sent = Instant::now();
        self.write(json!({"type": "user",
            "message": {"role": "user", "content": "Say something short."},
            "parent_tool_use_id": null, "session_id": "default"}))
            .await?;
        let mut first = None;
        self.until(|line| {
            let at = sent.elapsed();
            // Key order varies between the CLI's message types: read the type properly.
            let kind = serde_json::from_str::<serde_json::Value>(line)
                .map(|v| v["type"].as_str().unwrap_or_default().to_owned())
                .unwrap_or_default();
            if first.is_none() && kind == "stream_event" {
                first = Some(at);
            }
            kind == "result"
        })
        .await?;
        let first = first.ok_or_else(|| anyhow::anyhow!("the CLI's turn streamed nothing"))?;
        Ok(first.as_secs_f64() * 1000.0)
    }

    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// A conversation of the CLI's own: one turn, then a new process resuming it, initialized and
/// left alone for a moment as a warmed one is; the first and the second turn of that process.
async fn cli_alone(bin: &Path, config_dir: &Path, api_url: &str) -> anyhow::Result<(f64, f64)> {
    let cwd = tempfile::tempdir()?;
    let id = uuid::Uuid::new_v4();
    let mut first = Alone::start(
        bin,
        config_dir,
        cwd.path(),
        api_url,
        &format!("--session-id={id}"),
    )
    .await?;
    first.turn().await?;
    first.stop().await;
    let mut resumed = Alone::start(
        bin,
        config_dir,
        cwd.path(),
        api_url,
        &format!("--resume={id}"),
    )
    .await?;
    tokio::time::sleep(THINK_TIME).await;
    let times = (resumed.turn().await?, resumed.turn().await?);
    resumed.stop().await;
    Ok(times)
}

/// Sends a chat and waits for its `result`: milliseconds to the first `stream_event`.
async fn turn(ws: &mut Socket, agent_id: &str) -> anyhow::Result<f64> {
    let sent = Instant::now();
    ws.send(Message::text(chat_text(agent_id, "Say something short.")))
        .await?;
    let mut first = None;
    timeout(SETUP_TIMEOUT, async {
        loop {
            let text = next_text(ws).await?;
            let header = peek(&text);
            if header.agent_id != agent_id {
                continue;
            }
            match header.kind {
                "stream_event" if first.is_none() => first = Some(sent.elapsed()),
                "error" => anyhow::bail!("error frame: {text}"),
                "result" => return anyhow::Ok(()),
                _ => {}
            }
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("the turn of {agent_id} did not end in time"))??;
    let first = first.ok_or_else(|| anyhow::anyhow!("a turn of {agent_id} streamed nothing"))?;
    Ok(first.as_secs_f64() * 1000.0)
}

/// Reads frames until a `status` `status` of `agent_id`.
async fn until_status(ws: &mut Socket, agent_id: &str, status: &str) -> anyhow::Result<()> {
    let wanted = format!("\"status\":\"{status}\"");
    timeout(SETUP_TIMEOUT, async {
        loop {
            let text = next_text(ws).await?;
            let header = peek(&text);
            if header.kind == "status" && header.agent_id == agent_id && text.contains(&wanted) {
                return anyhow::Ok(());
            }
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("no `{status}` for {agent_id} in time"))?
}

async fn next_text(ws: &mut Socket) -> anyhow::Result<String> {
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(t))) => return Ok(t.as_str().to_owned()),
            Some(Ok(_)) => continue,
            _ => anyhow::bail!("the server closed the socket"),
        }
    }
}
