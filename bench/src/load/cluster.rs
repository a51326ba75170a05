//! `cluster`: closed-loop chats on one node, then on three nodes sharing a PostgreSQL database
//! and a NATS server with every chat sent to a node that does not run its conversation (node 1
//! runs them all; nodes 2 and 3 forward each chat to it and relay its frames back): what
//! forwarding costs in throughput, and what it adds to a chat's latency.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::json;
use tokio::time::timeout;

use super::driver::{Driver, Plan};
use super::run;
use super::scenarios::{session_ids, spread};
use super::{SETUP_TIMEOUT, tweaks};
use crate::Common;
use crate::engines::{Nats, PgServer, in_database};
use crate::report::{Machine, Measurement, Percentiles, table_header, table_line, title};
use crate::servers::Server;
use crate::wire::connect;

/// What `agentmux bench cluster` measured.
#[derive(Debug, Serialize)]
pub struct ClusterReport {
    /// Always `cluster`.
    pub scenario: &'static str,
    /// Where it ran.
    pub machine: Machine,
    /// The scenario's parameters, and the databases the run created (and dropped).
    pub params: serde_json::Value,
    /// One node running every conversation, its sockets' chats local.
    pub one_node: Measurement,
    /// Three nodes: node 1 runs every conversation, the sockets are on nodes 2 and 3. CPU time
    /// and memory are the three nodes' together (PostgreSQL's and NATS's not counted).
    pub three_nodes: Measurement,
    /// Commands nodes 2 and 3 forwarded to node 1 over the three-node run (warm-up included).
    pub forwarded_commands: u64,
    /// Frames of node 1's conversations nodes 2 and 3 relayed to their sockets (warm-up
    /// included).
    pub relayed_frames: u64,
    /// Three nodes ÷ one node: `turns_per_sec`, `delivered_fps`, `frames_per_cpu_sec`.
    pub ratio: BTreeMap<String, f64>,
    /// What a forwarded chat adds to a local one, in ms (three nodes − one node):
    /// `first_token_p50`, `first_token_p99`, `result_p50`, `result_p99`.
    pub added_ms: BTreeMap<String, f64>,
}

impl ClusterReport {
    /// The report as a table.
    pub fn table(&self) -> String {
        let mut out = title(self.scenario, &self.machine, &self.params);
        out.push_str(&table_header());
        let label = format!("{} sessions", self.one_node.sessions);
        out.push_str(&table_line(&label, "1 node", &self.one_node));
        out.push_str(&table_line(&label, "3 nodes", &self.three_nodes));
        let list = |map: &BTreeMap<String, f64>, sign: bool| {
            map.iter()
                .map(|(k, v)| match sign {
                    true => format!("{k}={v:+.2}"),
                    false => format!("{k}={v:.2}"),
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        out.push_str(&format!(
            "3 nodes ÷ 1 node: {}\na forwarded chat adds (ms): {}\nnodes 2 and 3 forwarded \
             {} commands to node 1 and relayed {} of its frames (warm-up included)\n",
            list(&self.ratio, false),
            list(&self.added_ms, true),
            self.forwarded_commands,
            self.relayed_frames
        ));
        out
    }
}

/// The load: conversations, and the sockets driving them (all on the one node; on three nodes,
/// taking turns between nodes 2 and 3).
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Conversations, each with a turn always in flight.
    pub sessions: usize,
    /// Sockets the conversations are spread over.
    pub sockets: usize,
}

/// Runs the scenario: `load` on one node, then on three, each setup in a database of its own
/// on `store_server_url` (dropped at the end) and on a NATS server run from `nats_bin`.
pub async fn cluster(
    store_server_url: &str,
    nats_bin: &Path,
    load: Load,
    common: &Common,
) -> anyhow::Result<ClusterReport> {
    let pg = PgServer::parse(store_server_url)?;
    let nats = Nats::start(nats_bin).await?;
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let databases = [
        format!("agentmux_bench_{run_id}_one"),
        format!("agentmux_bench_{run_id}_three"),
    ];
    let ids = session_ids("cluster", load.sessions);
    let local = in_database(&pg, &databases[0], async |url: &str| {
        one_node(url, &nats, &ids, load.sockets, common).await
    })
    .await?;
    let three = in_database(&pg, &databases[1], async |url: &str| {
        three_nodes(url, &nats, &ids, load.sockets, common).await
    })
    .await?;
    let (ratio, added_ms) = compare(&local, &three.measurement);
    Ok(ClusterReport {
        scenario: "cluster",
        machine: Machine::this(),
        params: json!({
            "sessions": load.sessions,
            "sockets": load.sockets,
            "secs": common.secs,
            "max_batch": common.max_batch,
            "databases": databases,
        }),
        one_node: local,
        three_nodes: three.measurement,
        forwarded_commands: three.forwarded,
        relayed_frames: three.relayed,
        ratio,
        added_ms,
    })
}

/// Starts node `name` on database `url` and `nats`, in data directory `data` (which the nodes
/// of one cluster share, as their conversations' working directories must be shared).
async fn node(
    data: &Path,
    url: &str,
    nats: &Nats,
    name: &str,
    common: &Common,
) -> anyhow::Result<Server> {
    let mut tweaks = tweaks(common);
    // The URL may hold a password: the environment, not the command line.
    tweaks.env.extend([
        ("AGENTMUX_STORE_URL".to_owned(), url.to_owned()),
        ("AGENTMUX_NODE_ID".to_owned(), name.to_owned()),
        ("AGENTMUX_CLUSTER_NATS".to_owned(), nats.url()),
        (
            "AGENTMUX_CLUSTER_SECRET".to_owned(),
            nats.cluster_secret().to_owned(),
        ),
    ]);
    Server::start_in(data, &tweaks).await
}

/// One node: its sockets chat on the conversations it runs.
async fn one_node(
    url: &str,
    nats: &Nats,
    ids: &[String],
    sockets: usize,
    common: &Common,
) -> anyhow::Result<Measurement> {
    let data = tempfile::tempdir()?;
    let mut node = node(data.path(), url, nats, "solo", common).await?;
    let measured = run::drive(&node, spread(ids, sockets), common.duration()).await;
    node.kill().await;
    measured
}

/// What the three-node setup measured.
struct Forwarded {
    measurement: Measurement,
    forwarded: u64,
    relayed: u64,
}

/// Three nodes: every conversation started through node 1, then driven through nodes 2 and 3.
async fn three_nodes(
    url: &str,
    nats: &Nats,
    ids: &[String],
    sockets: usize,
    common: &Common,
) -> anyhow::Result<Forwarded> {
    let data = tempfile::tempdir()?;
    let mut nodes = Vec::new();
    for name in ["node-1", "node-2", "node-3"] {
        nodes.push(node(data.path(), url, nats, name, common).await?);
    }
    let measured = forwarded(&nodes, ids, sockets, common).await;
    for node in &mut nodes {
        node.kill().await;
    }
    measured
}

/// Every conversation started through node 1, then measured through nodes 2 and 3.
async fn forwarded(
    nodes: &[Server],
    ids: &[String],
    sockets: usize,
    common: &Common,
) -> anyhow::Result<Forwarded> {
    // A turn on each conversation through node 1: node 1 takes every lease.
    let plan = Plan {
        drive: ids.to_vec(),
        ..Plan::default()
    };
    let mut starter = Driver::new(connect(&nodes[0].addr).await?, plan);
    timeout(SETUP_TIMEOUT, starter.warm_up())
        .await
        .map_err(|_| anyhow::anyhow!("starting the conversations on node 1 took too long"))??;
    drop(starter);
    let others: Vec<String> = nodes[1..].iter().map(|n| n.addr.clone()).collect();
    let plans = taking_turns(spread(ids, sockets), &others);
    let servers: Vec<&Server> = nodes.iter().collect();
    let measurement = run::drive_on(&servers, plans, common.duration()).await?;
    let mut held = Vec::new();
    for node in nodes {
        held.push(node.metric("agentmux_leases_held").await? as usize);
    }
    anyhow::ensure!(
        held == [ids.len(), 0, 0],
        "the conversations' leases moved: nodes 1, 2 and 3 hold {held:?} of {} (every one \
         should have stayed on node 1)",
        ids.len()
    );
    let mut forwarded = 0.0;
    let mut relayed = 0.0;
    for node in &nodes[1..] {
        forwarded += node.metric("agentmux_forwarded_commands_total").await?;
        relayed += node.metric("agentmux_relayed_frames_total").await?;
    }
    Ok(Forwarded {
        measurement,
        forwarded: forwarded as u64,
        relayed: relayed as u64,
    })
}

/// Each plan with the address its socket connects to: `addrs` in turn.
fn taking_turns(plans: Vec<Plan>, addrs: &[String]) -> Vec<(String, Plan)> {
    plans
        .into_iter()
        .zip(addrs.iter().cycle())
        .map(|(plan, addr)| (addr.clone(), plan))
        .collect()
}

/// Three nodes against one: ratios of the throughput figures, and the latency added (ms).
fn compare(
    one: &Measurement,
    three: &Measurement,
) -> (BTreeMap<String, f64>, BTreeMap<String, f64>) {
    let mut ratio = BTreeMap::new();
    let mut add_ratio = |name: &str, x: f64, y: f64| {
        if y > 0.0 {
            ratio.insert(name.to_owned(), x / y);
        }
    };
    add_ratio("turns_per_sec", three.turns_per_sec, one.turns_per_sec);
    add_ratio("delivered_fps", three.delivered_fps, one.delivered_fps);
    if let (Some(x), Some(y)) = (three.frames_per_cpu_sec, one.frames_per_cpu_sec) {
        add_ratio("frames_per_cpu_sec", x, y);
    }
    let mut added = BTreeMap::new();
    let mut add = |name: &str, x: &Percentiles, y: &Percentiles| {
        if x.count > 0 && y.count > 0 {
            added.insert(
                format!("{name}_p50"),
                (x.p50_us as f64 - y.p50_us as f64) / 1000.0,
            );
            added.insert(
                format!("{name}_p99"),
                (x.p99_us as f64 - y.p99_us as f64) / 1000.0,
            );
        }
    };
    add("first_token", &three.first_token, &one.first_token);
    add("result", &three.result, &one.result);
    (ratio, added)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::servers::Kind;

    fn measured(turns_per_sec: f64, first_p50_us: u64, first_p99_us: u64) -> Measurement {
        let latency = Percentiles {
            count: 10,
            p50_us: first_p50_us,
            p99_us: first_p99_us,
            ..Percentiles::default()
        };
        Measurement {
            sessions: 4,
            turns_per_sec,
            delivered_fps: turns_per_sec * 33.0,
            first_token: latency.clone(),
            result: latency,
            ..Measurement::empty(Kind::Agentmux, 1.0)
        }
    }

    #[test]
    fn sockets_take_turns_between_the_nodes_that_forward() {
        let ids = session_ids("c", 5);
        let addrs = ["n2".to_owned(), "n3".to_owned()];
        let plans = taking_turns(spread(&ids, 3), &addrs);
        let on: Vec<(&str, usize)> = plans
            .iter()
            .map(|(addr, plan)| (addr.as_str(), plan.drive.len()))
            .collect();
        assert_eq!(on, [("n2", 2), ("n3", 2), ("n2", 1)]);
    }

    #[test]
    fn forwarding_is_reported_as_ratios_and_added_milliseconds() {
        let (ratio, added) = compare(
            &measured(100.0, 2_000, 9_000),
            &measured(80.0, 3_500, 8_000),
        );
        assert_eq!(ratio["turns_per_sec"], 0.8);
        assert_eq!(ratio["delivered_fps"], 0.8);
        assert!(
            !ratio.contains_key("frames_per_cpu_sec"),
            "no CPU time read"
        );
        assert_eq!(added["first_token_p50"], 1.5);
        assert_eq!(added["first_token_p99"], -1.0);
        assert_eq!(added["result_p50"], 1.5);
    }

    #[test]
    fn nothing_measured_means_no_figures() {
        let none = Measurement::empty(Kind::Agentmux, 1.0);
        let (ratio, added) = compare(&none, &measured(80.0, 3_500, 8_000));
        assert!(ratio.is_empty());
        assert!(added.is_empty());
    }

    #[test]
    fn the_table_names_both_setups_and_what_forwarding_adds() {
        let one = measured(100.0, 2_000, 9_000);
        let three = measured(80.0, 3_500, 8_000);
        let (ratio, added_ms) = compare(&one, &three);
        let report = ClusterReport {
            scenario: "cluster",
            machine: Machine::this(),
            params: json!({"sessions": 4}),
            one_node: one,
            three_nodes: three,
            forwarded_commands: 123,
            relayed_frames: 4567,
            ratio,
            added_ms,
        };
        let table = report.table();
        for needle in [
            "4 sessions",
            "1 node",
            "3 nodes",
            "turns_per_sec=0.80",
            "first_token_p50=+1.50",
            "first_token_p99=-1.00",
            "forwarded 123 commands",
            "relayed 4567",
        ] {
            assert!(table.contains(needle), "{needle} missing in:\n{table}");
        }
    }
}
