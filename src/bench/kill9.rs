//! The `kill -9` harness: repeat {start the server on one data directory, drive load on many
//! sessions while recording every frame received, `kill -9` at a random moment, restart on the
//! same directory, verify} and report every violation found.
//!
//! Verified after each restart: every frame a client received with a `seq` is stored and, rebuilt
//! from its row, is byte-for-byte the frame the client got; every conversation's seqs run
//! 1..=`last_seq` without gaps; no message row lacks its conversation; `PRAGMA integrity_check`
//! is `ok`; and every conversation answers a new chat.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde_json::json;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection, SqliteConnection};
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout};
use tokio_tungstenite::tungstenite::Message;

use agentmux::protocol::{self, Tag};

use super::load::{AGENT_ID, MESSAGE_TYPE, connect, seq_field, string_field};
use super::server::{Server, Tweaks};

/// Shortest and longest load before the kill, milliseconds.
const KILL_AFTER_MS: (u64, u64) = (100, 1500);
/// How long every conversation has to answer the chat that proves it resumable.
const RESUME_TIMEOUT: Duration = Duration::from_secs(60);

/// A frame a client received that carries a `seq`.
struct Received {
    agent_id: String,
    seq: i64,
    text: String,
}

/// The outcome of the whole run.
#[derive(Debug, Default, Serialize)]
pub struct Outcome {
    /// Cycles run.
    pub cycles: u32,
    /// Conversations checked.
    pub sessions: usize,
    /// Frames with a `seq` received by clients, over all cycles.
    pub frames_received: u64,
    /// Received frames missing from the store.
    pub frames_lost: u64,
    /// Received frames whose stored row rebuilds to different text.
    pub frames_differing: u64,
    /// Conversations whose seqs are not exactly 1..=last_seq.
    pub seq_gaps: u64,
    /// Message rows without a conversation.
    pub orphan_rows: u64,
    /// `integrity_check` results other than `ok`.
    pub integrity_errors: u64,
    /// Conversations that did not answer a chat after a restart.
    pub not_resumable: u64,
    /// One line per violation (at most a few hundred).
    pub violations: Vec<String>,
}

impl Outcome {
    fn violation(&mut self, what: String) {
        if self.violations.len() < 200 {
            self.violations.push(what);
        }
    }

    /// Whether nothing was lost or broken.
    pub fn clean(&self) -> bool {
        self.frames_lost
            + self.frames_differing
            + self.seq_gaps
            + self.orphan_rows
            + self.integrity_errors
            + self.not_resumable
            == 0
    }
}

/// Runs `cycles` kill -9 cycles with `clients` clients of `sessions` sessions each.
///
/// # Errors
/// When a server can't be started or the database can't be read; violations are not errors
/// but make the command fail after the report.
pub async fn run(
    cycles: u32,
    clients: usize,
    sessions: usize,
    json: Option<PathBuf>,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ids: Vec<Vec<String>> = (0..clients)
        .map(|c| (0..sessions).map(|s| format!("k{c}-{s}")).collect())
        .collect();
    let all: Vec<String> = ids.iter().flatten().cloned().collect();
    let mut outcome = Outcome {
        sessions: all.len(),
        ..Outcome::default()
    };
    let started = Instant::now();
    for cycle in 1..=cycles {
        let mut server = Server::start_in(dir.path(), &Tweaks::default()).await?;
        if cycle > 1 {
            check_resumable(&server.addr, &all, &mut outcome).await;
        }
        let kill_after = Duration::from_millis(random_between(KILL_AFTER_MS));
        let mut tasks = JoinSet::new();
        for client in &ids {
            let (addr, client) = (server.addr.clone(), client.clone());
            tasks.spawn(async move { record_load(&addr, &client).await });
        }
        tokio::time::sleep(kill_after).await;
        server.kill().await;
        let mut received = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            received.extend(joined?);
        }
        outcome.frames_received += received.len() as u64;
        // Right after the kill, before start-up closes the unfinished turns: nothing a client
        // saw may be missing. The last check below runs after a restart.
        verify(dir.path(), &received, &mut outcome).await?;
        println!(
            "cycle {cycle}/{cycles}: killed after {} ms, {} frames with seq received, violations so far {}",
            kill_after.as_millis(),
            received.len(),
            outcome.violations.len()
        );
        outcome.cycles = cycle;
    }
    let mut server = Server::start_in(dir.path(), &Tweaks::default()).await?;
    check_resumable(&server.addr, &all, &mut outcome).await;
    server.kill().await;
    verify(dir.path(), &[], &mut outcome).await?;
    println!(
        "{} cycles in {:.0} s: {} frames received, {} lost, {} differing, {} seq gaps, {} orphan rows, {} integrity errors, {} not resumable",
        outcome.cycles,
        started.elapsed().as_secs_f64(),
        outcome.frames_received,
        outcome.frames_lost,
        outcome.frames_differing,
        outcome.seq_gaps,
        outcome.orphan_rows,
        outcome.integrity_errors,
        outcome.not_resumable
    );
    for v in &outcome.violations {
        println!("  {v}");
    }
    if let Some(path) = json {
        std::fs::write(&path, serde_json::to_string_pretty(&outcome)?)?;
    }
    anyhow::ensure!(outcome.clean(), "the fault harness found violations");
    Ok(())
}

/// A pseudo-random number in `[lo, hi]`, from a fresh UUID v4's random bits.
fn random_between((lo, hi): (u64, u64)) -> u64 {
    lo + (uuid::Uuid::new_v4().as_u128() % u128::from(hi - lo + 1)) as u64
}

/// Drives closed-loop turns on `sessions` until the server dies; returns every frame with a seq.
async fn record_load(addr: &str, sessions: &[String]) -> Vec<Received> {
    let mut got = Vec::new();
    let Ok(mut ws) = connect(addr).await else {
        return got;
    };
    let chats: HashMap<&str, String> = sessions
        .iter()
        .map(|id| {
            let chat = json!({"type": "chat", "agent_id": id, "content": super::PROMPT});
            (id.as_str(), chat.to_string())
        })
        .collect();
    for chat in chats.values() {
        if ws.send(Message::text(chat.clone())).await.is_err() {
            return got;
        }
    }
    while let Some(Ok(msg)) = ws.next().await {
        let Message::Text(text) = msg else { continue };
        let text = text.as_str();
        let Some(agent_id) = protocol_agent(text) else {
            continue;
        };
        let kind = message_type(text);
        if protocol::is_agent_message(kind)
            && let Some(seq) = seq_field(text)
        {
            got.push(Received {
                agent_id: agent_id.to_owned(),
                seq,
                text: text.to_owned(),
            });
        }
        if kind == "result"
            && let Some(chat) = chats.get(agent_id)
            && ws.send(Message::text(chat.clone())).await.is_err()
        {
            break;
        }
    }
    got
}

fn message_type(text: &str) -> &str {
    string_field(text, MESSAGE_TYPE).unwrap_or("")
}

fn protocol_agent(text: &str) -> Option<&str> {
    string_field(text, AGENT_ID)
}

/// Sends one chat to every conversation and waits for each `result`.
async fn check_resumable(addr: &str, ids: &[String], outcome: &mut Outcome) {
    let mut pending: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
    let attempt = timeout(RESUME_TIMEOUT, async {
        let mut ws = connect(addr).await?;
        for id in ids {
            let chat = json!({"type": "chat", "agent_id": id, "content": "still there?"});
            ws.send(Message::text(chat.to_string())).await?;
        }
        while !pending.is_empty() {
            let Some(Ok(msg)) = ws.next().await else {
                anyhow::bail!("socket closed");
            };
            if let Message::Text(text) = msg
                && message_type(text.as_str()) == "result"
                && text.as_str().contains("\"is_error\":false")
                && let Some(id) = protocol_agent(text.as_str())
            {
                pending.remove(id);
            }
        }
        anyhow::Ok(())
    })
    .await;
    if let Ok(Err(e)) = &attempt {
        outcome.violation(format!("resume check failed: {e}"));
    }
    for id in pending {
        outcome.not_resumable += 1;
        outcome.violation(format!("{id}: no successful reply after a restart"));
    }
}

/// Checks the database in `dir` against the frames clients received.
async fn verify(dir: &Path, received: &[Received], outcome: &mut Outcome) -> anyhow::Result<()> {
    let url = format!("sqlite://{}", dir.join("agentmux.db").display());
    let mut db = SqliteConnectOptions::from_str(&url)?
        .busy_timeout(Duration::from_secs(30))
        .connect()
        .await?;
    let integrity: Vec<String> = sqlx::query_scalar("pragma integrity_check")
        .fetch_all(&mut db)
        .await?;
    if integrity != ["ok"] {
        outcome.integrity_errors += integrity.len() as u64;
        outcome.violation(format!("integrity_check: {integrity:?}"));
    }
    let orphans: i64 = sqlx::query_scalar(
        "select count(*) from messages where session_pk not in (select id from session_info)",
    )
    .fetch_one(&mut db)
    .await?;
    if orphans > 0 {
        outcome.orphan_rows += orphans as u64;
        outcome.violation(format!("{orphans} message rows without a conversation"));
    }
    let gaps: Vec<(String, i64, i64, i64, Option<i64>)> = sqlx::query_as(
        "select s.agent_id, s.last_seq, count(m.seq), coalesce(min(m.seq), 1), max(m.seq)
         from session_info s left join messages m on m.session_pk = s.id
         group by s.id
         having count(m.seq) != s.last_seq or coalesce(max(m.seq), 0) != s.last_seq
             or coalesce(min(m.seq), 1) != 1",
    )
    .fetch_all(&mut db)
    .await?;
    for (agent, last, count, min, max) in gaps {
        outcome.seq_gaps += 1;
        outcome.violation(format!(
            "{agent}: last_seq {last} but {count} rows from {min} to {max:?}"
        ));
    }
    compare_frames(&mut db, received, outcome).await?;
    db.close().await?;
    Ok(())
}

/// Rebuilds each received frame from its stored row and compares the text.
async fn compare_frames(
    db: &mut SqliteConnection,
    received: &[Received],
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let sessions: HashMap<String, (i64, String)> = sqlx::query_as::<_, (String, i64, String)>(
        "select agent_id, id, session_id from session_info",
    )
    .fetch_all(&mut *db)
    .await?
    .into_iter()
    .map(|(agent, id, sid)| (agent, (id, sid)))
    .collect();
    for r in received {
        let Some((pk, session_id)) = sessions.get(&r.agent_id) else {
            outcome.frames_lost += 1;
            outcome.violation(format!("{}: conversation missing", r.agent_id));
            continue;
        };
        let row: Option<(String, String, String)> = sqlx::query_as(
            "select message_type, created_at, payload from messages where session_pk = ? and seq = ?",
        )
        .bind(pk)
        .bind(r.seq)
        .fetch_optional(&mut *db)
        .await?;
        let Some((message_type, created_at, payload)) = row else {
            outcome.frames_lost += 1;
            outcome.violation(format!(
                "{} seq {}: received but not stored",
                r.agent_id, r.seq
            ));
            continue;
        };
        let tag = Tag {
            agent_id: &r.agent_id,
            session_id,
        };
        let rebuilt =
            protocol::session_frame(tag, &message_type, Some(r.seq), &created_at, &payload);
        if rebuilt.text.as_str() != r.text {
            outcome.frames_differing += 1;
            outcome.violation(format!(
                "{} seq {}: stored frame differs",
                r.agent_id, r.seq
            ));
        }
    }
    Ok(())
}
