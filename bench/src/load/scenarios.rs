//! The scenarios that drive turns: `fanout`, `many-sessions`, `sweep` (paced) and `churn`.

use std::time::Duration;

use serde_json::json;

use super::driver::Plan;
use super::{compare, tweaks};
use crate::Common;
use crate::report::Report;
use crate::servers::{Kind, Tweaks};

pub(super) fn session_ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Spreads `ids` over `sockets` plans, round robin.
pub(super) fn spread(ids: &[String], sockets: usize) -> Vec<Plan> {
    let sockets = sockets.max(1);
    let mut plans = vec![Plan::default(); sockets];
    for (i, id) in ids.iter().enumerate() {
        plans[i % sockets].drive.push(id.clone());
    }
    plans
}

/// `sockets` plans on `ids`: the first socket of each session drives it, the rest follow it.
fn fan_out(ids: &[String], sockets: usize) -> Vec<Plan> {
    (0..sockets.max(ids.len()))
        .map(|i| {
            let id = ids[i % ids.len()].clone();
            if i < ids.len() {
                Plan {
                    drive: vec![id],
                    ..Plan::default()
                }
            } else {
                Plan {
                    follow: vec![id],
                    ..Plan::default()
                }
            }
        })
        .collect()
}

/// Many sockets on few sessions: each session's turns in a closed loop, or started `pace`
/// apart.
pub async fn fanout(
    sessions: usize,
    sockets: usize,
    pace: Option<Duration>,
    common: &Common,
) -> anyhow::Result<Report> {
    let mut report = Report::new(
        "fanout",
        json!({"sessions": sessions, "sockets": sockets, "pace_ms": pace.map(|p| p.as_millis()), "secs": common.secs, "max_batch": common.max_batch}),
    );
    let ids = session_ids("fan", sessions);
    let label = match pace {
        Some(pace) => format!("{sockets}x{sessions} every {} ms", pace.as_millis()),
        None => format!("{sockets}x{sessions}"),
    };
    compare(&mut report, &label, common, &tweaks(common), |_| {
        let mut plans = fan_out(&ids, sockets);
        for p in &mut plans {
            p.pace = pace;
        }
        plans
    })
    .await?;
    Ok(report)
}

/// A few sockets, hundreds of sessions, one turn in flight on each.
pub async fn many_sessions(
    sessions: usize,
    sockets: usize,
    common: &Common,
) -> anyhow::Result<Report> {
    let mut report = Report::new(
        "many-sessions",
        json!({"sessions": sessions, "sockets": sockets, "secs": common.secs, "max_batch": common.max_batch}),
    );
    let ids = session_ids("many", sessions);
    let label = format!("{sessions} sessions");
    compare(&mut report, &label, common, &tweaks(common), |_| {
        spread(&ids, sockets)
    })
    .await?;
    Ok(report)
}

/// `many-sessions` closed loop (the peak), then paced at `fractions` of agentmux's peak.
pub async fn sweep(
    sessions: usize,
    sockets: usize,
    fractions: &[f64],
    common: &Common,
) -> anyhow::Result<Report> {
    let mut report = Report::new(
        "sweep",
        json!({"sessions": sessions, "sockets": sockets, "fractions": fractions, "secs": common.secs, "max_batch": common.max_batch}),
    );
    let ids = session_ids("sweep", sessions);
    compare(&mut report, "peak", common, &tweaks(common), |_| {
        spread(&ids, sockets)
    })
    .await?;
    let peak = report.rows[0].agentmux.turns_per_sec;
    for &fraction in fractions {
        let rate = peak * fraction;
        let pace = Duration::from_secs_f64(sessions as f64 / rate.max(1.0));
        let label = format!("{:.0}% of peak", fraction * 100.0);
        compare(&mut report, &label, common, &tweaks(common), |_| {
            let mut plans = spread(&ids, sockets);
            for p in &mut plans {
                p.pace = Some(pace);
            }
            plans
        })
        .await?;
    }
    Ok(report)
}

/// Sessions evicted as soon as they are idle: every turn after the first resumes its session.
pub async fn churn(sessions: usize, common: &Common) -> anyhow::Result<Report> {
    let mut report = Report::new(
        "churn",
        json!({"sessions": sessions, "secs": common.secs, "idle_evict_secs": 0}),
    );
    let ids = session_ids("churn", sessions);
    let tweaks = Tweaks {
        idle_evict_secs: Some(0),
        ..tweaks(common)
    };
    let label = format!("{sessions} sessions");
    compare(&mut report, &label, common, &tweaks, |kind| {
        let mut plans = spread(&ids, 2);
        for p in &mut plans {
            // The baseline never evicts.
            p.wait_evicted = kind == Kind::Agentmux;
        }
        plans
    })
    .await?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_spread_round_robin() {
        let ids = session_ids("s", 5);
        let plans = spread(&ids, 2);
        assert_eq!(plans[0].drive, ["s-0", "s-2", "s-4"]);
        assert_eq!(plans[1].drive, ["s-1", "s-3"]);
    }

    #[test]
    fn fan_out_drives_each_session_once_and_follows_with_the_rest() {
        let ids = session_ids("f", 2);
        let plans = fan_out(&ids, 5);
        assert_eq!(plans.len(), 5);
        let driven: Vec<&Vec<String>> = plans.iter().map(|p| &p.drive).collect();
        assert_eq!(driven[0], &["f-0"]);
        assert_eq!(driven[1], &["f-1"]);
        let followed: Vec<String> = plans[2..].iter().flat_map(|p| p.follow.clone()).collect();
        assert_eq!(followed, ["f-0", "f-1", "f-0"]);
        assert_eq!(fan_out(&ids, 1).len(), 2, "at least one socket per session");
    }
}
