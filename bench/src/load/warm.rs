//! `warm`: agentmux on the real Claude CLI against the fake model API (`fake-anthropic`): the
//! first token of a conversation's turn when its agent starts cold, when it is already running,
//! when it was respawned after a `kill -9`, and when a dormant conversation was warmed on open.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;

use super::SETUP_TIMEOUT;
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
    Ok(WarmReport {
        scenario: "warm",
        machine: Machine::this(),
        rounds,
        cases: vec![
            Case::new("cold start", cold),
            Case::new("running agent", running),
            Case::new("respawned after kill -9", respawned),
            Case::new("warmed on open", warmed),
        ],
    })
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
