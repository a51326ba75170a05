//! One measured run of socket plans against one server (or the nodes of a cluster together):
//! connect, warm up, follow, then the measured window, with the servers' CPU time, memory and
//! stored frames read around it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Barrier, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout};

use super::driver::{Driver, Plan};
use super::tally::Tally;
use super::{CONNECT_PARALLELISM, SETUP_TIMEOUT};
use crate::report::{Measurement, Percentiles};
use crate::servers::{Kind, Server};
use crate::wire::connect;

/// Runs `plans` (one socket each) against `server` for `secs` and measures.
pub async fn drive(
    server: &Server,
    plans: Vec<Plan>,
    secs: Duration,
) -> anyhow::Result<Measurement> {
    let plans = plans
        .into_iter()
        .map(|plan| (server.addr.clone(), plan))
        .collect();
    drive_on(&[server], plans, secs).await
}

/// Runs each plan on a socket to its address (`host:port`) for `secs`, and measures
/// `servers` as one: their CPU time, memory and stored frames added up.
pub async fn drive_on(
    servers: &[&Server],
    plans: Vec<(String, Plan)>,
    secs: Duration,
) -> anyhow::Result<Measurement> {
    anyhow::ensure!(
        !servers.is_empty() && !plans.is_empty(),
        "no server or no socket"
    );
    let sessions: usize = plans.iter().map(|(_, p)| p.drive.len()).sum();
    let offered = plans[0]
        .1
        .pace
        .map(|pace| sessions as f64 / pace.as_secs_f64());
    let sockets = plans.len();
    // Every socket waits three times: warmed up, following, measuring.
    let phases = Arc::new(Barrier::new(sockets + 1));
    let mut tasks = JoinSet::new();
    let semaphore = Arc::new(Semaphore::new(CONNECT_PARALLELISM));
    for (addr, plan) in plans {
        let phases = phases.clone();
        let semaphore = semaphore.clone();
        tasks.spawn(async move {
            let ws = {
                let _permit = semaphore.acquire().await?;
                connect(&addr).await?
            };
            let mut driver = Driver::new(ws, plan);
            driver.warm_up().await?;
            phases.wait().await;
            driver.follow().await?;
            phases.wait().await;
            phases.wait().await;
            driver.measure(Instant::now() + secs).await?;
            anyhow::Ok(driver.into_tally())
        });
    }
    for _ in 0..2 {
        wait_phase(&phases, &mut tasks).await?;
    }
    let stored_before = stored_total(servers).await;
    let cpu_before = cpu_total(servers);
    let started = Instant::now();
    phases.wait().await;
    let mut total = Tally::default();
    while let Some(joined) = timeout(secs + SETUP_TIMEOUT, tasks.join_next())
        .await
        .map_err(|_| anyhow::anyhow!("sockets did not finish in time"))?
    {
        total.add(&joined??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_total(servers) - cpu_before;
    let rss_kib = servers.iter().map(|s| s.rss_kib()).sum();
    let stored = match stored_before {
        Some(before) => stored_total(servers).await.unwrap_or(before) - before,
        None => total.stored,
    };
    Ok(Measurement {
        sockets,
        sessions,
        offered_turns_per_sec: offered,
        turns: total.turns,
        turns_per_sec: total.turns as f64 / elapsed,
        delivered_frames: total.frames,
        delivered_fps: total.frames as f64 / elapsed,
        stored_frames: stored,
        stored_fps: stored as f64 / elapsed,
        first_token: Percentiles::from(&total.first_token),
        result: Percentiles::from(&total.result),
        rss_kib,
        errors: total.errors,
        ..Measurement::empty(servers[0].kind, elapsed)
    }
    .with_cpu(cpu))
}

/// Waits for every socket to reach the next phase, failing if one of them fails first.
async fn wait_phase(
    phases: &Barrier,
    tasks: &mut JoinSet<anyhow::Result<Tally>>,
) -> anyhow::Result<()> {
    timeout(SETUP_TIMEOUT, async {
        tokio::select! {
            _ = phases.wait() => Ok(()),
            Some(joined) = tasks.join_next() => match joined? {
                Err(e) => Err(e),
                Ok(_) => Err(anyhow::anyhow!("a socket ended during set-up")),
            },
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("set-up did not finish in time"))?
}

/// CPU seconds `servers` used so far, added up.
fn cpu_total(servers: &[&Server]) -> f64 {
    servers.iter().map(|s| s.cpu_secs()).sum()
}

/// `agentmux_stored_frames_total` of agentmux servers, added up; None for the baseline (or
/// when a server's metrics can't be read).
async fn stored_total(servers: &[&Server]) -> Option<u64> {
    let mut total = 0;
    for server in servers {
        total += match server.kind {
            Kind::Baseline => return None,
            Kind::Agentmux => server.metric("agentmux_stored_frames_total").await.ok()? as u64,
        };
    }
    Some(total)
}
