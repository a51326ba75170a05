//! The `kill -9` harness: repeat {start the server on one data directory, drive load on many
//! sessions while recording every stored frame received, `kill -9` at a random moment, check
//! the database file, restart on the same directory, verify against what the restarted server
//! replays} and report every violation found.
//!
//! The server is only ever seen from outside: what clients received is compared, byte for
//! byte, with what the restarted server replays, not with frames rebuilt by server code.

mod load;
mod verify;

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout};

use self::load::{Received, record_load};
use self::verify::Verified;
use crate::servers::{Server, Tweaks};

/// Shortest and longest load before the kill, milliseconds.
const KILL_AFTER_MS: (u64, u64) = (100, 1500);
/// How long every client has to connect and send its first chats.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The outcome of the whole run.
#[derive(Debug, Default, Serialize)]
pub struct Outcome {
    /// Cycles run.
    pub cycles: u32,
    /// Conversations checked.
    pub sessions: usize,
    /// Clients per cycle.
    pub clients: usize,
    /// Clients that could not connect or send their first chats while the server was up.
    pub clients_failed: u64,
    /// Frames with a `seq` received by clients, over all cycles.
    pub frames_received: u64,
    /// Received frames the restarted server did not replay.
    pub frames_lost: u64,
    /// Received frames the restarted server replayed as different text.
    pub frames_differing: u64,
    /// Breaks in a conversation's replayed seqs (or a `last_seq` that went backwards).
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
        self.clients_failed
            + self.frames_lost
            + self.frames_differing
            + self.seq_gaps
            + self.orphan_rows
            + self.integrity_errors
            + self.not_resumable
            == 0
            && self.violations.is_empty()
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
        clients,
        ..Outcome::default()
    };
    let mut verified = Verified::new();
    let mut received = Vec::new();
    let started = Instant::now();
    for cycle in 1..=cycles {
        let mut server = Server::start_in(dir.path(), &Tweaks::default()).await?;
        if cycle > 1 {
            verify::replay(&server.addr, &all, &received, &mut verified, &mut outcome).await?;
            verify::resumable(&server.addr, &all, &mut outcome).await;
        }
        let kill_after = Duration::from_millis(random_between(KILL_AFTER_MS));
        received = load_until_killed(&mut server, &ids, kill_after, &mut outcome).await?;
        outcome.frames_received += received.len() as u64;
        verify::database(dir.path(), &mut outcome).await?;
        println!(
            "cycle {cycle}/{cycles}: killed after {} ms, {} frames with seq received, violations so far {}",
            kill_after.as_millis(),
            received.len(),
            outcome.violations.len()
        );
        outcome.cycles = cycle;
    }
    // Once more, replaying every conversation from its start.
    let mut server = Server::start_in(dir.path(), &Tweaks::default()).await?;
    verify::replay(
        &server.addr,
        &all,
        &received,
        &mut Verified::new(),
        &mut outcome,
    )
    .await?;
    verify::resumable(&server.addr, &all, &mut outcome).await;
    server.kill().await;
    verify::database(dir.path(), &mut outcome).await?;
    println!(
        "{} cycles in {:.0} s: {} frames received, {} lost, {} differing, {} seq gaps, {} orphan rows, {} integrity errors, {} not resumable, {} clients failed",
        outcome.cycles,
        started.elapsed().as_secs_f64(),
        outcome.frames_received,
        outcome.frames_lost,
        outcome.frames_differing,
        outcome.seq_gaps,
        outcome.orphan_rows,
        outcome.integrity_errors,
        outcome.not_resumable,
        outcome.clients_failed
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

/// Starts every client, waits until each has connected and sent its first chats, lets the load
/// run for `kill_after`, kills the server and collects what every client received. A client
/// that failed is a violation, never silently left out.
async fn load_until_killed(
    server: &mut Server,
    ids: &[Vec<String>],
    kill_after: Duration,
    outcome: &mut Outcome,
) -> anyhow::Result<Vec<Received>> {
    let (started_tx, mut started_rx) = mpsc::channel(ids.len());
    let mut tasks = JoinSet::new();
    for client in ids {
        let (addr, client, started) = (server.addr.clone(), client.clone(), started_tx.clone());
        tasks.spawn(async move { record_load(&addr, &client, started).await });
    }
    drop(started_tx);
    // Every client either tells it started or drops its sender by failing.
    let _ = timeout(CONNECT_TIMEOUT, async {
        let mut waiting = ids.len();
        while waiting > 0 && started_rx.recv().await.is_some() {
            waiting -= 1;
        }
    })
    .await;
    tokio::time::sleep(kill_after).await;
    server.kill().await;
    let mut received = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined? {
            Ok(frames) => received.extend(frames),
            Err(err) => {
                outcome.clients_failed += 1;
                outcome.violation(format!("a client failed while the server was up: {err:#}"));
            }
        }
    }
    Ok(received)
}

/// A pseudo-random number in `[lo, hi]`, from a fresh UUID v4's random bits.
fn random_between((lo, hi): (u64, u64)) -> u64 {
    lo + (uuid::Uuid::new_v4().as_u128() % u128::from(hi - lo + 1)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_violation_makes_the_outcome_unclean() {
        assert!(Outcome::default().clean());
        let failed = Outcome {
            clients_failed: 1,
            ..Outcome::default()
        };
        assert!(!failed.clean());
        let mut noted = Outcome::default();
        noted.violation("the replay did not reach last_seq in time".into());
        assert!(!noted.clean());
    }

    #[test]
    fn kill_delays_stay_in_range() {
        for _ in 0..1000 {
            let ms = random_between(KILL_AFTER_MS);
            assert!((KILL_AFTER_MS.0..=KILL_AFTER_MS.1).contains(&ms));
        }
    }
}
