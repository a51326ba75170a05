//! `agentmux-bench` (also run as `agentmux bench`): load scenarios run against a bare
//! WebSocket baseline and against a real agentmux server in the same run (each in its own
//! process), and the `kill -9` fault harness.
//!
//! Every figure is reported for both servers and as a ratio to the baseline, because these
//! machines are noisy and the ratio is what carries over between runs. The server under test is
//! only ever driven from outside, as a separate process: this crate does not link agentmux.

mod baseline;
mod engines;
mod kill9;
mod load;
mod process;
mod report;
mod servers;
mod wire;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::report::Report;

/// The chat every scenario sends. Its echo is 23 words, so a turn emits about as many
/// streamed frames per stored one as a short real reply does.
const PROMPT: &str = "please repeat these words back so that the benchmark sees a reply of a \
     realistic length with many streamed deltas";

#[derive(Parser)]
#[command(
    name = "agentmux-bench",
    version,
    about = "Measure agentmux against a bare WebSocket baseline, or run the kill -9 fault harness"
)]
struct Cli {
    /// The agentmux executable to measure [default: the one next to this executable]
    #[arg(long, global = true, env = "AGENTMUX_BENCH_SERVER")]
    agentmux_bin: Option<PathBuf>,
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// Many sockets subscribed to few sessions.
    Fanout {
        /// Sessions with a turn always in flight.
        #[arg(long, default_value_t = 4)]
        sessions: usize,
        /// Sockets, spread evenly over the sessions.
        #[arg(long, default_value_t = 200)]
        sockets: usize,
        /// Start each session's turns this many milliseconds apart instead of each right
        /// after the last one's result (a paced load: latency at a set rate).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        pace_ms: Option<u64>,
        #[command(flatten)]
        common: Common,
    },
    /// A few sockets driving hundreds of sessions.
    ManySessions {
        /// Sessions, each with a turn always in flight.
        #[arg(long, default_value_t = 400)]
        sessions: usize,
        /// Sockets the sessions are spread over.
        #[arg(long, default_value_t = 2)]
        sockets: usize,
        #[command(flatten)]
        common: Common,
    },
    /// `many-sessions` at a paced rate of turns, from a tenth of the server's peak to 90 %:
    /// latency percentiles against load.
    Sweep {
        /// Sessions the paced turns are spread over.
        #[arg(long, default_value_t = 400)]
        sessions: usize,
        /// Sockets the sessions are spread over.
        #[arg(long, default_value_t = 2)]
        sockets: usize,
        /// Fractions of the peak to pace at (each above 0 and at most 1), comma-separated.
        #[arg(long, value_delimiter = ',', default_values_t = [0.1, 0.25, 0.5, 0.75, 0.9])]
        fractions: Vec<f64>,
        #[command(flatten)]
        common: Common,
    },
    /// Idle sockets that only send WebSocket pings: memory per socket.
    Idle {
        /// Sockets to hold open.
        #[arg(long, default_value_t = 19_000)]
        sockets: usize,
        #[command(flatten)]
        common: Common,
    },
    /// `subscribe` from seq 0 on a session with many stored frames.
    Replay {
        /// Stored frames in the session.
        #[arg(long, default_value_t = 100_000)]
        messages: u64,
        #[command(flatten)]
        common: Common,
    },
    /// Paced live turns alone, then while many sockets replay a long session from seq 0 over
    /// and over (agentmux only; the row's "baseline" is the live turns alone).
    ReplayLoad {
        /// Stored frames in the replayed session.
        #[arg(long, default_value_t = 100_000)]
        messages: u64,
        /// Sockets replaying at once.
        #[arg(long, default_value_t = 16)]
        replayers: usize,
        /// Sessions with live turns.
        #[arg(long, default_value_t = 100)]
        sessions: usize,
        /// Live turns per second, in all.
        #[arg(long, default_value_t = 100.0)]
        turns_per_sec: f64,
        #[command(flatten)]
        common: Common,
    },
    /// Create, evict and resume sessions over and over (sessions are evicted as soon as idle).
    Churn {
        /// Sessions cycling at once.
        #[arg(long, default_value_t = 100)]
        sessions: usize,
        #[command(flatten)]
        common: Common,
    },
    /// One node, then three nodes on PostgreSQL and NATS with every chat sent to a node that
    /// does not run its conversation: throughput, and the latency forwarding adds.
    Cluster {
        /// A PostgreSQL server URL; the run creates its databases there and drops them at the
        /// end (the user needs `createdb`).
        #[arg(long, env = "AGENTMUX_TEST_PG_URL", hide_env_values = true)]
        store_server_url: String,
        /// The nats-server executable (the run starts its own on a free loopback port).
        #[arg(long, env = "AGENTMUX_TEST_NATS_BIN", default_value = "nats-server")]
        nats_bin: PathBuf,
        /// Sessions, each with a turn always in flight.
        #[arg(long, default_value_t = 100)]
        sessions: usize,
        /// Sockets the sessions are spread over (on three nodes, half on node 2, half on 3).
        #[arg(long, default_value_t = 2)]
        sockets: usize,
        #[command(flatten)]
        common: Common,
    },
    /// Listing and searching conversations as the stored history grows: p50/p99 of the first
    /// page, a page by cursor, and searches (a rare word, a word in none, common words,
    /// prefixes), on SQLite and, given a PostgreSQL server, on PostgreSQL (agentmux only).
    History {
        /// Stored messages to measure at, ascending, comma-separated (each size grows the
        /// store of the one before).
        #[arg(long, value_delimiter = ',', default_values_t = [10_000, 100_000, 1_000_000])]
        messages: Vec<u64>,
        /// Messages per conversation, prompts and replies in turn.
        #[arg(long, default_value_t = 100)]
        per_conversation: u64,
        /// Requests timed per request and size, one at a time.
        #[arg(long, default_value_t = 100)]
        samples: usize,
        /// A PostgreSQL server URL: the same run again on a database the run creates there
        /// (and drops at the end); without it, SQLite only.
        #[arg(long, env = "AGENTMUX_TEST_PG_URL", hide_env_values = true)]
        store_server_url: Option<String>,
        /// Also write the report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// agentmux on the Claude backend with the fake CLI streaming as fast as it can: latency
    /// from a CLI stdout line to its frame on the socket.
    Cli {
        /// Conversations, each with its own CLI process.
        #[arg(long, default_value_t = 4)]
        sessions: usize,
        /// Words per reply (one streamed delta each).
        #[arg(long, default_value_t = 200)]
        words: usize,
        #[command(flatten)]
        common: Common,
    },
    /// agentmux on the real Claude CLI against the fake model API: first token of a turn when
    /// the agent starts cold, is running, was respawned after `kill -9`, or was warmed on open.
    Warm {
        /// The Claude CLI executable.
        #[arg(long, env = "AGENTMUX_BENCH_CLAUDE_BIN")]
        claude_bin: PathBuf,
        /// Conversations measured (one sample of each case per conversation).
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Also write the report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Repeat {start the server, drive load, kill -9 at a random moment, restart, verify}.
    Kill9 {
        /// Cycles to run.
        #[arg(long, default_value_t = 50)]
        cycles: u32,
        /// Clients driving load, each on its own sessions.
        #[arg(long, default_value_t = 4)]
        clients: usize,
        /// Sessions per client.
        #[arg(long, default_value_t = 8)]
        sessions: usize,
        /// Write the outcome as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Run the bare baseline server (the scenarios start it themselves).
    Baseline {
        /// Address to listen on; port 0 picks a free port.
        #[arg(long, default_value = "127.0.0.1:0")]
        bind: std::net::SocketAddr,
        /// Keep every stored-type frame in memory so that `subscribe` can replay it.
        #[arg(long)]
        keep_history: bool,
        /// Answer each conversation's chats with a process of this CLI (stream-json), relaying
        /// its stdout lines as they are.
        #[arg(long)]
        relay_cli: Option<PathBuf>,
    },
}

impl Scenario {
    /// Rejects sizes no load can be built from.
    fn check(&self) -> anyhow::Result<()> {
        let sizes: &[(&str, usize)] = match self {
            Scenario::Fanout {
                sessions, sockets, ..
            }
            | Scenario::ManySessions {
                sessions, sockets, ..
            } => &[("--sessions", *sessions), ("--sockets", *sockets)],
            Scenario::Sweep {
                sessions,
                sockets,
                fractions,
                ..
            } => {
                anyhow::ensure!(
                    !fractions.is_empty() && fractions.iter().all(|f| *f > 0.0 && *f <= 1.0),
                    "--fractions takes fractions of the peak above 0 and at most 1, e.g. 0.5,0.9"
                );
                &[("--sessions", *sessions), ("--sockets", *sockets)]
            }
            Scenario::Idle { sockets, .. } => &[("--sockets", *sockets)],
            Scenario::Replay { messages, .. } => &[("--messages", *messages as usize)],
            Scenario::Churn { sessions, .. } => &[("--sessions", *sessions)],
            Scenario::ReplayLoad {
                messages,
                replayers,
                sessions,
                ..
            } => &[
                ("--messages", *messages as usize),
                ("--replayers", *replayers),
                ("--sessions", *sessions),
            ],
            Scenario::Cli {
                sessions, words, ..
            } => &[("--sessions", *sessions), ("--words", *words)],
            Scenario::Cluster {
                sessions,
                sockets,
                common,
                ..
            } => {
                anyhow::ensure!(
                    !common.no_baseline,
                    "cluster compares one node with three and has no baseline server: \
                     --no-baseline does not apply"
                );
                &[("--sessions", *sessions), ("--sockets", *sockets)]
            }
            Scenario::Kill9 {
                clients, sessions, ..
            } => &[("--clients", *clients), ("--sessions", *sessions)],
            Scenario::Warm { rounds, .. } => &[("--rounds", *rounds)],
            Scenario::History {
                messages,
                per_conversation,
                samples,
                ..
            } => {
                anyhow::ensure!(
                    !messages.is_empty() && messages.windows(2).all(|w| w[0] < w[1]),
                    "--messages takes sizes in ascending order, e.g. 10000,100000"
                );
                anyhow::ensure!(
                    messages[0] >= *per_conversation,
                    "--messages must each hold at least one conversation (--per-conversation)"
                );
                &[
                    ("--per-conversation", *per_conversation as usize),
                    ("--samples", *samples),
                ]
            }
            Scenario::Baseline { .. } => &[],
        };
        for (flag, value) in sizes {
            anyhow::ensure!(*value > 0, "{flag} must be at least 1");
        }
        Ok(())
    }
}

/// Options every load scenario takes.
#[derive(Args, Clone)]
struct Common {
    /// Seconds of measured load (after warm-up).
    #[arg(long, default_value_t = 10)]
    secs: u64,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// `store.max_batch` of the measured server (1 turns group commit off).
    #[arg(long)]
    max_batch: Option<usize>,
    /// Run only against agentmux, without the baseline.
    #[arg(long)]
    no_baseline: bool,
}

impl Common {
    fn duration(&self) -> Duration {
        Duration::from_secs(self.secs)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = tokio::runtime::Runtime::new()
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(run(cli)));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    process::raise_fd_limit();
    if let Some(path) = cli.agentmux_bin {
        servers::set_agentmux_bin(path);
    }
    cli.scenario.check()?;
    let (report, json) = match cli.scenario {
        Scenario::Baseline {
            bind,
            keep_history,
            relay_cli,
        } => {
            return baseline::serve(bind, keep_history, relay_cli).await;
        }
        Scenario::Kill9 {
            cycles,
            clients,
            sessions,
            json,
        } => return kill9::run(cycles, clients, sessions, json).await,
        Scenario::Fanout {
            sessions,
            sockets,
            pace_ms,
            common,
        } => {
            let pace = pace_ms.map(Duration::from_millis);
            (
                load::fanout(sessions, sockets, pace, &common).await?,
                common.json,
            )
        }
        Scenario::ManySessions {
            sessions,
            sockets,
            common,
        } => (
            load::many_sessions(sessions, sockets, &common).await?,
            common.json,
        ),
        Scenario::Sweep {
            sessions,
            sockets,
            fractions,
            common,
        } => (
            load::sweep(sessions, sockets, &fractions, &common).await?,
            common.json,
        ),
        Scenario::Idle { sockets, common } => (load::idle(sockets, &common).await?, common.json),
        Scenario::Replay { messages, common } => {
            (load::replay(messages, &common).await?, common.json)
        }
        Scenario::Cli {
            sessions,
            words,
            common,
        } => {
            let report = load::cli(sessions, words, &common).await?;
            return write_json(&report.table(), &report, common.json.as_deref());
        }
        Scenario::Cluster {
            store_server_url,
            nats_bin,
            sessions,
            sockets,
            common,
        } => {
            let load = load::ClusterLoad { sessions, sockets };
            let report = load::cluster(&store_server_url, &nats_bin, load, &common).await?;
            return write_json(&report.table(), &report, common.json.as_deref());
        }
        Scenario::History {
            messages,
            per_conversation,
            samples,
            store_server_url,
            json,
        } => {
            let load = load::HistoryLoad {
                messages,
                per_conversation,
                samples,
            };
            let report = load::history(&load, store_server_url.as_deref()).await?;
            return write_json(&report.table(), &report, json.as_deref());
        }
        Scenario::Warm {
            claude_bin,
            rounds,
            json,
        } => {
            let report = load::warm(&claude_bin, rounds).await?;
            return write_json(&report.table(), &report, json.as_deref());
        }
        Scenario::ReplayLoad {
            messages,
            replayers,
            sessions,
            turns_per_sec,
            common,
        } => (
            load::replay_load(messages, replayers, sessions, turns_per_sec, &common).await?,
            common.json,
        ),
        Scenario::Churn { sessions, common } => {
            (load::churn(sessions, &common).await?, common.json)
        }
    };
    finish(&report, json.as_deref())
}

fn finish(report: &Report, json: Option<&std::path::Path>) -> anyhow::Result<()> {
    write_json(&report.table(), report, json)
}

/// Prints `table`, and writes `report` as JSON to `json` when given.
fn write_json(
    table: &str,
    report: &impl serde::Serialize,
    json: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    print!("{table}");
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(report)?)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        println!("report written to {}", path.display());
    }
    Ok(())
}
