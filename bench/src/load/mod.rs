//! The load scenarios, each run once against the baseline and once against agentmux with the
//! same client code and the same load, one row per load in the report.

mod cli;
mod cluster;
mod driver;
mod history;
mod idle;
mod replay;
mod run;
mod scenarios;
mod tally;
mod warm;

use std::time::Duration;

pub use self::cli::cli;
pub use self::cluster::{Load as ClusterLoad, cluster};
pub use self::history::{HistoryLoad, history};
pub use self::idle::idle;
pub use self::replay::{replay, replay_load};
pub use self::scenarios::{churn, fanout, many_sessions, sweep};
pub use self::warm::warm;

use self::driver::Plan;
use crate::Common;
use crate::report::{Report, Row};
use crate::servers::{Kind, Server, Tweaks};

/// Longest wait for set-up steps (connecting, warm-up turns, seeding, replays).
const SETUP_TIMEOUT: Duration = Duration::from_secs(120);
/// Connections opened at once while setting up many sockets.
const CONNECT_PARALLELISM: usize = 128;

/// The servers a scenario runs against, in order.
fn kinds(common: &Common) -> Vec<Kind> {
    if common.no_baseline {
        vec![Kind::Agentmux]
    } else {
        vec![Kind::Baseline, Kind::Agentmux]
    }
}

fn tweaks(common: &Common) -> Tweaks {
    Tweaks {
        max_batch: common.max_batch,
        ..Tweaks::default()
    }
}

/// Runs the same plans against each server and adds one row.
async fn compare(
    report: &mut Report,
    label: &str,
    common: &Common,
    tweaks: &Tweaks,
    plans: impl Fn(Kind) -> Vec<Plan>,
) -> anyhow::Result<()> {
    let mut baseline = None;
    let mut agentmux = None;
    for kind in kinds(common) {
        let mut server = Server::start(kind, tweaks).await?;
        let m = run::drive(&server, plans(kind), common.duration()).await?;
        server.kill().await;
        match kind {
            Kind::Baseline => baseline = Some(m),
            Kind::Agentmux => agentmux = Some(m),
        }
    }
    report
        .rows
        .push(Row::new(label, baseline, agentmux.expect("always run")));
    Ok(())
}
