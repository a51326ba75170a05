//! The harness's checks. Against the restarted server: it replays every conversation with
//! gap-free seqs, every frame a client received is replayed byte for byte, and every
//! conversation answers a new chat. Against the database file while no server runs: SQLite's
//! `integrity_check`, and no message row without its conversation.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;

use super::Outcome;
use super::load::Received;
use crate::wire::{chat_text, connect, http_get, peek, seq_field, subscribe_text};

/// How long a replay, or every conversation's answer to a chat, may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(60);

/// Where each conversation has been verified up to: its seqs `1..=n` were replayed without
/// gaps.
pub type Verified = HashMap<String, i64>;

/// A conversation being replayed: the next seq expected and the last one stored.
struct Replaying {
    next: i64,
    last: i64,
}

/// Replays every conversation in `ids` from where it was verified up to, on the server at
/// `addr`: seqs must follow each other up to the conversation's `last_seq`, and each frame in
/// `received` must come back as the same text.
pub async fn replay(
    addr: &str,
    ids: &[String],
    received: &[Received],
    verified: &mut Verified,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let mut expected: HashMap<&str, HashMap<i64, &str>> = HashMap::new();
    for r in received {
        expected
            .entry(r.agent_id.as_str())
            .or_default()
            .insert(r.seq, r.text.as_str());
    }
    let mut ws = connect(addr).await?;
    let mut replaying: HashMap<String, Replaying> = HashMap::new();
    for id in ids {
        let from = verified.get(id).copied().unwrap_or(0);
        let last = last_seq(addr, id).await?;
        if last < from {
            outcome.seq_gaps += 1;
            outcome.violation(format!(
                "{id}: last_seq {last}, but seqs up to {from} were seen"
            ));
        } else if last > from {
            ws.send(Message::text(subscribe_text(id, from))).await?;
            replaying.insert(
                id.clone(),
                Replaying {
                    next: from + 1,
                    last,
                },
            );
        }
    }
    let read = timeout(CHECK_TIMEOUT, async {
        while !replaying.is_empty() {
            let text = match ws.next().await {
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(_)) => continue,
                _ => anyhow::bail!("the server closed the socket during the replay"),
            };
            let text = text.as_str();
            let p = peek(text);
            let (Some(seq), Some(r)) = (seq_field(text), replaying.get_mut(p.agent_id)) else {
                continue;
            };
            if seq != r.next {
                outcome.seq_gaps += 1;
                outcome.violation(format!(
                    "{}: replay went from seq {} to {seq}",
                    p.agent_id,
                    r.next - 1
                ));
            }
            r.next = seq + 1;
            if let Some(got) = expected
                .get_mut(p.agent_id)
                .and_then(|frames| frames.remove(&seq))
                && got != text
            {
                outcome.frames_differing += 1;
                outcome.violation(format!(
                    "{} seq {seq}: replayed frame differs from the one received",
                    p.agent_id
                ));
            }
            if seq >= r.last {
                verified.insert(p.agent_id.to_owned(), r.last);
                replaying.remove(p.agent_id);
            }
        }
        anyhow::Ok(())
    })
    .await;
    match read {
        Ok(done) => done?,
        Err(_) => {
            for id in replaying.keys() {
                outcome.violation(format!("{id}: the replay did not reach last_seq in time"));
            }
        }
    }
    for (agent_id, frames) in expected {
        for seq in frames.keys() {
            outcome.frames_lost += 1;
            outcome.violation(format!("{agent_id} seq {seq}: received but not replayed"));
        }
    }
    Ok(())
}

/// `last_seq` of `agent_id`'s conversation from the REST API; 0 when it does not exist.
async fn last_seq(addr: &str, agent_id: &str) -> anyhow::Result<i64> {
    let (status, body) = http_get(addr, &format!("/api/sessions/{agent_id}")).await?;
    match status {
        404 => Ok(0),
        200 => serde_json::from_str::<serde_json::Value>(&body)?["last_seq"]
            .as_i64()
            .ok_or_else(|| anyhow::anyhow!("no last_seq for {agent_id}: {body}")),
        _ => anyhow::bail!("GET /api/sessions/{agent_id}: {status} {body}"),
    }
}

/// Sends one chat to every conversation and waits for each successful `result`.
pub async fn resumable(addr: &str, ids: &[String], outcome: &mut Outcome) {
    let mut pending: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let attempt = timeout(CHECK_TIMEOUT, async {
        let mut ws = connect(addr).await?;
        for id in ids {
            ws.send(Message::text(chat_text(id, "still there?")))
                .await?;
        }
        while !pending.is_empty() {
            let Some(Ok(msg)) = ws.next().await else {
                anyhow::bail!("socket closed");
            };
            if let Message::Text(text) = msg
                && peek(text.as_str()).kind == "result"
                && text.as_str().contains("\"is_error\":false")
            {
                pending.remove(peek(text.as_str()).agent_id);
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

/// Checks the database file in `dir` while no server has it open.
pub async fn database(dir: &Path, outcome: &mut Outcome) -> anyhow::Result<()> {
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
    db.close().await?;
    Ok(())
}
