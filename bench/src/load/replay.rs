//! The `replay` scenario: `subscribe` from seq 0 on a session holding many stored frames,
//! seeded on both servers the same way, by chatting with them; and `replay-load`: live turns
//! while many sockets replay at once.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::time::{Instant, timeout};
use tokio_tungstenite::tungstenite::Message;

use super::tally::{histogram, record};
use super::{SETUP_TIMEOUT, kinds, tweaks};
use crate::report::{Measurement, Percentiles, Report, Row};
use crate::servers::{Server, Tweaks};
use crate::wire::{chat_text, connect, peek, seq_field, subscribe_text};
use crate::{Common, PROMPT};

/// The agent id of the replayed session.
const REPLAY_AGENT: &str = "replay";
/// Stored frames per demo turn: user, system, assistant, result.
const STORED_PER_TURN: u64 = 4;
/// Chats in flight while seeding: within agentmux's queue per session, and few enough that
/// their frames fit the baseline's buffer (a baseline socket that lags drops frames, and a
/// lost `result` would stall the seeding).
const SEED_WINDOW: u64 = 16;
/// Longest time a seeded turn may take on average.
const SEED_TURN_TIMEOUT: Duration = Duration::from_millis(20);

/// `subscribe` from seq 0 on a session holding `messages` stored frames.
pub async fn replay(messages: u64, common: &Common) -> anyhow::Result<Report> {
    let mut report = Report::new("replay", json!({"messages": messages}));
    let mut measured = Vec::new();
    let tweaks = Tweaks {
        keep_history: true,
        ..tweaks(common)
    };
    for kind in kinds(common) {
        let mut server = Server::start(kind, &tweaks).await?;
        let m = async {
            seed(&server, messages).await?;
            time_replay(&server, messages).await
        }
        .await;
        server.kill().await;
        measured.push(m?);
    }
    let agentmux = measured.pop().expect("always run");
    report
        .rows
        .push(Row::new("subscribe from 0", measured.pop(), agentmux));
    Ok(report)
}

/// Gives the server at least `messages` stored frames on [`REPLAY_AGENT`] by chatting.
async fn seed(server: &Server, messages: u64) -> anyhow::Result<()> {
    let mut ws = connect(&server.addr).await?;
    let turns = messages.div_ceil(STORED_PER_TURN);
    let chat = chat_text(REPLAY_AGENT, PROMPT);
    let (mut sent, mut results) = (0, 0);
    let limit = SETUP_TIMEOUT.max(SEED_TURN_TIMEOUT * u32::try_from(turns).unwrap_or(u32::MAX));
    timeout(limit, async {
        while results < turns {
            while sent < turns && sent - results < SEED_WINDOW {
                ws.send(Message::text(chat.clone())).await?;
                sent += 1;
            }
            match ws.next().await {
                Some(Ok(Message::Text(t))) => match peek(t.as_str()).kind {
                    "result" => results += 1,
                    "error" => anyhow::bail!("seeding failed: {t}"),
                    _ => {}
                },
                Some(Ok(_)) => {}
                _ => anyhow::bail!("the server closed the socket while seeding"),
            }
        }
        anyhow::Ok(())
    })
    .await
    .map_err(|_| anyhow::anyhow!("seeding took too long"))??;
    Ok(())
}

async fn time_replay(server: &Server, messages: u64) -> anyhow::Result<Measurement> {
    let mut ws = connect(&server.addr).await?;
    let cpu_before = server.cpu_secs();
    let started = Instant::now();
    ws.send(Message::text(subscribe_text(REPLAY_AGENT, 0)))
        .await?;
    let mut frames = 0u64;
    let mut errors = 0;
    let mut first = histogram();
    timeout(SETUP_TIMEOUT, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) => {
                    let text = t.as_str();
                    if frames == 0 {
                        record(&mut first, started.elapsed());
                    }
                    frames += 1;
                    if peek(text).kind == "error" {
                        errors += 1;
                    }
                    if seq_field(text).is_some_and(|s| s as u64 >= messages) {
                        return anyhow::Ok(());
                    }
                }
                Some(Ok(_)) => {}
                _ => anyhow::bail!("the server closed the socket during the replay"),
            }
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("the replay took too long"))??;
    let secs = started.elapsed().as_secs_f64();
    let cpu = server.cpu_secs() - cpu_before;
    Ok(Measurement {
        sockets: 1,
        sessions: 1,
        delivered_frames: frames,
        delivered_fps: frames as f64 / secs,
        stored_frames: frames,
        stored_fps: frames as f64 / secs,
        first_token: Percentiles::from(&first),
        rss_kib: server.rss_kib(),
        errors,
        ..Measurement::empty(server.kind, secs)
    }
    .with_cpu(cpu))
}

/// Live turns on `sessions` sessions paced at `turns_per_sec` in all, first alone, then while
/// `replayers` sockets replay a session of `messages` stored frames from seq 0 over and over:
/// how much replays slow live turns. One row, whose "baseline" is the live turns alone.
pub async fn replay_load(
    messages: u64,
    replayers: usize,
    sessions: usize,
    turns_per_sec: f64,
    common: &Common,
) -> anyhow::Result<Report> {
    let mut report = Report::new(
        "replay-load",
        json!({"messages": messages, "replayers": replayers, "sessions": sessions,
               "turns_per_sec": turns_per_sec, "secs": common.secs}),
    );
    let mut server = Server::start(crate::servers::Kind::Agentmux, &tweaks(common)).await?;
    let outcome = async {
        seed(&server, messages).await?;
        let pace = Duration::from_secs_f64(sessions as f64 / turns_per_sec.max(0.1));
        let plans = |prefix: &str| {
            let mut plans = vec![super::driver::Plan::default(); 2];
            for i in 0..sessions {
                plans[i % 2].drive.push(format!("{prefix}-{i}"));
            }
            for p in &mut plans {
                p.pace = Some(pace);
            }
            plans
        };
        let alone = super::run::drive(&server, plans("alone"), common.duration()).await?;
        let stop = stop_flag();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..replayers {
            let addr = server.addr.clone();
            let stop = stop.clone();
            tasks.spawn(async move {
                let mut replays = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    replay_once(&addr, messages).await?;
                    replays += 1;
                }
                anyhow::Ok(replays)
            });
        }
        let loaded = super::run::drive(&server, plans("loaded"), common.duration()).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut replays = 0;
        while let Some(done) = tasks.join_next().await {
            replays += done??;
        }
        anyhow::Ok((alone, loaded?, replays))
    }
    .await;
    server.kill().await;
    let (alone, loaded, replays) = outcome?;
    report.rows.push(Row::new(
        format!("{replayers} replayers ({replays} replays of {messages})"),
        Some(alone),
        loaded,
    ));
    Ok(report)
}

/// A flag the replayers stop at.
fn stop_flag() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false))
}

/// One `subscribe` from seq 0 on [`REPLAY_AGENT`], read until its `messages`th frame.
async fn replay_once(addr: &str, messages: u64) -> anyhow::Result<()> {
    let mut ws = connect(addr).await?;
    ws.send(Message::text(subscribe_text(REPLAY_AGENT, 0)))
        .await?;
    timeout(SETUP_TIMEOUT, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) => {
                    if seq_field(t.as_str()).is_some_and(|s| s as u64 >= messages) {
                        return anyhow::Ok(());
                    }
                }
                Some(Ok(_)) => {}
                _ => anyhow::bail!("the server closed the socket during a replay"),
            }
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("a replay took too long"))?
}
