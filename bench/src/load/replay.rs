//! The `replay` scenario: `subscribe` from seq 0 on a session holding many stored frames,
//! seeded on both servers the same way, by chatting with them.

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
