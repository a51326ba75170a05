//! `cli`: agentmux on its Claude backend, driving the fake CLI (`fake-claude`) that streams each
//! reply as fast as it can and stamps every stdout line with the time it wrote it; measured is
//! how long a line takes from the CLI's stdout to its frame on the client's socket, side by side
//! with the baseline relaying the same CLI's lines as they are: what agentmux adds is the
//! difference.

use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;

use super::SETUP_TIMEOUT;
use crate::Common;
use crate::report::{Machine, Percentiles};
use crate::servers::{Kind, Server, Tweaks};
use crate::wire::{Socket, chat_text, connect, is_stored, peek};

/// What `agentmux bench cli` measured: the baseline relaying the same CLI (unless
/// `--no-baseline`), then agentmux.
#[derive(Debug, Serialize)]
pub struct CliReport {
    /// Always `cli`.
    pub scenario: &'static str,
    /// Where it ran.
    pub machine: Machine,
    /// Conversations, each with its own CLI process.
    pub sessions: usize,
    /// Words the prompt has; the fake's reply echoes them, one streamed delta each.
    pub words: usize,
    /// The baseline relaying the CLI's lines as they are.
    pub baseline: Option<CliRun>,
    /// agentmux on its Claude backend.
    pub agentmux: CliRun,
    /// What agentmux adds to the baseline's latency, in ms: p50 and p99 of `stream_event` and
    /// of stored frames.
    pub added_ms: Option<Added>,
}

/// One server's run of the scenario.
#[derive(Debug, Serialize)]
pub struct CliRun {
    /// Seconds measured.
    pub secs: f64,
    /// Turns completed while measured.
    pub turns: u64,
    /// Stamped lines received as frames, per second.
    pub lines_per_sec: f64,
    /// Server CPU seconds over the measured window.
    pub server_cpu_secs: f64,
    /// Line written → frame received, for `stream_event` frames (not stored), in µs.
    pub live: Percentiles,
    /// The same for stored frames (`system`, `assistant`, `result`): includes their commit.
    pub stored: Percentiles,
    /// `error` frames received.
    pub errors: u64,
}

/// agentmux's latency less the baseline's, in ms.
#[derive(Debug, Serialize)]
pub struct Added {
    pub live_p50: f64,
    pub live_p99: f64,
    pub stored_p50: f64,
    pub stored_p99: f64,
}

impl Added {
    fn between(baseline: &CliRun, agentmux: &CliRun) -> Self {
        let ms = |a: u64, b: u64| (a as f64 - b as f64) / 1000.0;
        Added {
            live_p50: ms(agentmux.live.p50_us, baseline.live.p50_us),
            live_p99: ms(agentmux.live.p99_us, baseline.live.p99_us),
            stored_p50: ms(agentmux.stored.p50_us, baseline.stored.p50_us),
            stored_p99: ms(agentmux.stored.p99_us, baseline.stored.p99_us),
        }
    }
}

impl CliReport {
    /// The report as a small table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "scenario cli on {} ({} cores, {} MiB, Linux {})\n\
             {} conversations, {} words per reply\n\
             {:<9} {:<13} {:>6} {:>9} {:>7} {:>8} {:>9} {:>9} {:>9} {:>9} {:>6}\n",
            self.machine.cpu,
            self.machine.cores,
            self.machine.memory_mib,
            self.machine.kernel,
            self.sessions,
            self.words,
            "server",
            "line->frame",
            "turns",
            "lines/s",
            "CPU s",
            "frames",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "max ms",
            "errors",
        );
        let runs = [
            ("baseline", self.baseline.as_ref()),
            ("agentmux", Some(&self.agentmux)),
        ];
        for (name, run) in runs {
            let Some(run) = run else { continue };
            for (kind, p) in [("stream_event", &run.live), ("stored", &run.stored)] {
                out.push_str(&format!(
                    "{name:<9} {kind:<13} {:>6} {:>9.0} {:>7.2} {:>8} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>6}\n",
                    run.turns,
                    run.lines_per_sec,
                    run.server_cpu_secs,
                    p.count,
                    p.p50_us as f64 / 1000.0,
                    p.p90_us as f64 / 1000.0,
                    p.p99_us as f64 / 1000.0,
                    p.max_us as f64 / 1000.0,
                    run.errors,
                ));
            }
        }
        if let Some(a) = &self.added_ms {
            out.push_str(&format!(
                "agentmux adds: stream_event p50 {:+.3} ms, p99 {:+.3} ms; stored p50 {:+.3} ms, p99 {:+.3} ms\n",
                a.live_p50, a.live_p99, a.stored_p50, a.stored_p99
            ));
        }
        out
    }
}

/// The fake CLI next to this executable.
fn fake_claude() -> anyhow::Result<PathBuf> {
    let path = std::env::current_exe()?.with_file_name("fake-claude");
    anyhow::ensure!(
        path.is_file(),
        "no fake-claude at {}: build it (`cargo build --release -p agentmux-fakes`)",
        path.display()
    );
    Ok(path)
}

/// Nanoseconds since the Unix epoch (the clock the fake stamps its lines with).
fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The `stamp_ns` a stamped line carries (the first one in the frame: the agent message's).
fn stamp(text: &str) -> Option<u128> {
    let start = text.find("\"stamp_ns\":")? + "\"stamp_ns\":".len();
    let digits = &text[start..];
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

/// Runs the scenario on the baseline relaying the fake CLI (unless `--no-baseline`), then on
/// agentmux.
pub async fn cli(sessions: usize, words: usize, common: &Common) -> anyhow::Result<CliReport> {
    let tweaks = Tweaks {
        max_batch: common.max_batch,
        claude_bin: Some(fake_claude()?),
        ..Tweaks::default()
    };
    let baseline = match common.no_baseline {
        true => None,
        false => Some(run(Kind::Baseline, &tweaks, sessions, words, common).await?),
    };
    let agentmux = run(Kind::Agentmux, &tweaks, sessions, words, common).await?;
    Ok(CliReport {
        scenario: "cli",
        machine: Machine::this(),
        sessions,
        words,
        added_ms: baseline.as_ref().map(|b| Added::between(b, &agentmux)),
        baseline,
        agentmux,
    })
}

/// Runs `sessions` conversations on one socket of a server of `kind`, closed loop: each reply
/// of `words` streamed words, the next chat as soon as its `result` arrives.
async fn run(
    kind: Kind,
    tweaks: &Tweaks,
    sessions: usize,
    words: usize,
    common: &Common,
) -> anyhow::Result<CliRun> {
    let mut server = Server::start(kind, tweaks).await?;
    let mut ws = connect(&server.addr).await?;
    let ids: Vec<String> = (0..sessions).map(|i| format!("cli-{i}")).collect();
    let prompt: String = (0..words)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    // Warm-up: every conversation's CLI started and one turn done.
    for id in &ids {
        ws.send(Message::text(chat_text(id, &prompt))).await?;
    }
    let mut tally = Tally::default();
    timeout(SETUP_TIMEOUT, async {
        let mut done = 0;
        while done < ids.len() {
            if tally.next(&mut ws, false).await?.is_some() {
                done += 1;
            }
        }
        anyhow::Ok(())
    })
    .await
    .map_err(|_| anyhow::anyhow!("the CLIs did not answer in time"))??;
    let mut tally = Tally::default();
    let cpu_before = server.cpu_secs();
    let started = Instant::now();
    let deadline = started + common.duration();
    for id in &ids {
        ws.send(Message::text(chat_text(id, &prompt))).await?;
    }
    let mut open = ids.len();
    timeout(common.duration() + SETUP_TIMEOUT, async {
        while open > 0 {
            if let Some(agent_id) = tally.next(&mut ws, true).await? {
                tally.turns += 1;
                if Instant::now() < deadline {
                    ws.send(Message::text(chat_text(&agent_id, &prompt)))
                        .await?;
                } else {
                    open -= 1;
                }
            }
        }
        anyhow::Ok(())
    })
    .await
    .map_err(|_| anyhow::anyhow!("the turns did not end in time"))??;
    let secs = started.elapsed().as_secs_f64();
    let cpu = server.cpu_secs() - cpu_before;
    server.kill().await;
    Ok(CliRun {
        secs,
        turns: tally.turns,
        lines_per_sec: (tally.live.len() + tally.stored.len()) as f64 / secs,
        server_cpu_secs: cpu,
        live: Percentiles::from(&tally.live),
        stored: Percentiles::from(&tally.stored),
        errors: tally.errors,
    })
}

/// Latencies of stamped frames, in µs.
struct Tally {
    live: Histogram<u64>,
    stored: Histogram<u64>,
    turns: u64,
    errors: u64,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            live: super::tally::histogram(),
            stored: super::tally::histogram(),
            turns: 0,
            errors: 0,
        }
    }
}

impl Tally {
    /// Reads one frame, recording its latency when `measure` is set; returns the `agent_id`
    /// of a `result`.
    async fn next(&mut self, ws: &mut Socket, measure: bool) -> anyhow::Result<Option<String>> {
        let text = match ws.next().await {
            Some(Ok(Message::Text(t))) => t,
            Some(Ok(_)) => return Ok(None),
            _ => anyhow::bail!("the server closed the socket"),
        };
        let now = unix_nanos();
        let text = text.as_str();
        let header = peek(text);
        if header.kind == "error" {
            self.errors += 1;
            anyhow::bail!("error frame: {text}");
        }
        if measure && let Some(at) = stamp(text) {
            let micros = u64::try_from(now.saturating_sub(at) / 1000).unwrap_or(u64::MAX);
            let h = if header.kind == "stream_event" {
                &mut self.live
            } else if is_stored(header.kind) {
                &mut self.stored
            } else {
                return Ok(None);
            };
            h.saturating_record(micros.max(1));
        }
        Ok((header.kind == "result").then(|| header.agent_id.to_owned()))
    }
}
