//! The `idle` scenario: many sockets that only send WebSocket pings; resident memory per socket.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::sync::{Barrier, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use super::{CONNECT_PARALLELISM, SETUP_TIMEOUT, kinds, tweaks};
use crate::Common;
use crate::report::{Measurement, Report, Row};
use crate::servers::Server;
use crate::wire::connect;

/// Interval between WebSocket pings on an idle socket.
const IDLE_PING: Duration = Duration::from_secs(5);

/// Idle sockets pinging now and then: resident memory per socket.
pub async fn idle(sockets: usize, common: &Common) -> anyhow::Result<Report> {
    let mut report = Report::new(
        "idle",
        json!({"sockets": sockets, "secs": common.secs, "ping_secs": IDLE_PING.as_secs()}),
    );
    let mut results = Vec::new();
    for kind in kinds(common) {
        let mut server = Server::start(kind, &tweaks(common)).await?;
        results.push(hold_idle(&server, sockets, common.duration()).await?);
        server.kill().await;
    }
    let agentmux = results.pop().expect("always run");
    report.rows.push(Row::new(
        format!("{sockets} sockets"),
        results.pop(),
        agentmux,
    ));
    Ok(report)
}

async fn hold_idle(server: &Server, sockets: usize, secs: Duration) -> anyhow::Result<Measurement> {
    // One socket first, so that lazily allocated per-process state is not counted per socket.
    let mut first = connect(&server.addr).await?;
    first.send(Message::Ping(Vec::new().into())).await?;
    let _ = timeout(SETUP_TIMEOUT, first.next()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = server.rss_kib();
    let semaphore = Arc::new(Semaphore::new(CONNECT_PARALLELISM));
    let opened = Arc::new(Barrier::new(sockets + 1));
    let stop = CancellationToken::new();
    let mut tasks = JoinSet::new();
    for _ in 0..sockets {
        let (addr, semaphore, opened, stop) = (
            server.addr.clone(),
            semaphore.clone(),
            opened.clone(),
            stop.clone(),
        );
        tasks.spawn(async move {
            let ws = {
                let _permit = semaphore.acquire().await;
                connect(&addr).await
            };
            opened.wait().await;
            let mut ws = ws?;
            let mut ping = tokio::time::interval(IDLE_PING);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return anyhow::Ok(ws),
                    _ = ping.tick() => ws.send(Message::Ping(Vec::new().into())).await?,
                    msg = ws.next() => match msg {
                        Some(Ok(_)) => {}
                        _ => anyhow::bail!("the server closed an idle socket"),
                    },
                }
            }
        });
    }
    timeout(SETUP_TIMEOUT, opened.wait())
        .await
        .map_err(|_| anyhow::anyhow!("sockets did not open in time"))?;
    let cpu_before = server.cpu_secs();
    let started = Instant::now();
    tokio::time::sleep(secs).await;
    // Read while every socket is still open.
    let rss_kib = server.rss_kib();
    let cpu = server.cpu_secs() - cpu_before;
    stop.cancel();
    let mut held = Vec::with_capacity(sockets);
    let mut errors = 0;
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok(ws)) => held.push(ws),
            // A socket that failed to connect or was closed.
            _ => errors += 1,
        }
    }
    let open = held.len();
    drop(held);
    drop(first);
    Ok(Measurement {
        sockets: open,
        rss_kib,
        rss_per_socket_bytes: Some(
            (rss_kib.saturating_sub(before) as f64 * 1024.0) / open.max(1) as f64,
        ),
        errors,
        ..Measurement::empty(server.kind, started.elapsed().as_secs_f64())
    }
    .with_cpu(cpu))
}
