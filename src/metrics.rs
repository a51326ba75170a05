//! Process-wide counters and histograms, rendered as Prometheus text at `GET /metrics`.
//!
//! Written by hand rather than with an exporter crate, on measurement: counting a frame by
//! type cost about 1.5 times as much (1.1 to 2.7 over twelve runs) with `prometheus-client`'s
//! labelled family, and about 3.5 times as much (2.5 to 8.6) with `metrics` and
//! `metrics-exporter-prometheus`, as the map below; and neither writes the same text
//! (`prometheus-client` writes OpenMetrics: `# TYPE` without `_total`, a `# EOF` line; the
//! exporter leaves out a family until it has a sample, and the `metrics` macros write to one
//! recorder per process, where each server here counts its own).

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use dashmap::DashMap;

/// Upper bounds (seconds) of the store commit latency histogram.
const COMMIT_BUCKETS: [f64; 10] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0,
];
/// Upper bounds (rows) of the store batch size histogram.
const BATCH_BUCKETS: [u64; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

/// Cheap cloneable handle to the server's metrics.
#[derive(Clone, Default)]
pub struct Metrics {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    sockets: AtomicI64,
    live_sessions: AtomicI64,
    slots: AtomicI64,
    queued_turns: AtomicI64,
    frames_in: DashMap<&'static str, AtomicU64>,
    frames_out: DashMap<&'static str, AtomicU64>,
    stored_frames: AtomicU64,
    store_queue: AtomicI64,
    commits: AtomicU64,
    commit_seconds_sum_us: AtomicU64,
    commit_buckets: [AtomicU64; COMMIT_BUCKETS.len()],
    batch_buckets: [AtomicU64; BATCH_BUCKETS.len()],
    agent_spawns: AtomicU64,
    agent_resumes: AtomicU64,
    agent_crashes: AtomicU64,
    errors: DashMap<&'static str, AtomicU64>,
    scheduled_runs: DashMap<&'static str, AtomicU64>,
    limit_waits: DashMap<&'static str, AtomicU64>,
    leases_held: AtomicI64,
    fence_rejections: AtomicU64,
    forwarded_commands: AtomicU64,
    relayed_frames: AtomicU64,
    cluster_refusals: DashMap<&'static str, AtomicU64>,
    pushes: DashMap<&'static str, AtomicU64>,
    /// What turns cost, by agent and model.
    spend: std::sync::Mutex<std::collections::BTreeMap<(String, String), Spent>>,
}

/// The most agent and model pairs counted apart; turns of others count as model `other`.
const MAX_SPEND_SERIES: usize = 256;

/// What the turns of one agent and model cost.
#[derive(Default, Clone, Copy)]
struct Spent {
    cost_usd: f64,
    input_tokens: u64,
    output_tokens: u64,
    cache_read_tokens: u64,
    cache_creation_tokens: u64,
}

impl Metrics {
    /// A socket opened (`+1`) or closed (`-1`).
    pub fn sockets(&self, delta: i64) {
        self.inner.sockets.fetch_add(delta, Relaxed);
    }

    /// A turn of agent `agent` on `model` cost `usage` (no principal is named).
    pub fn turn_usage(&self, agent: &str, model: &str, usage: &crate::store::usage::TurnUsage) {
        let mut spend = self.inner.spend.lock().expect("spend lock");
        let mut key = (label_value(agent), label_value(model));
        if !spend.contains_key(&key) && spend.len() >= MAX_SPEND_SERIES {
            key.1 = "other".into();
        }
        let s = spend.entry(key).or_default();
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        s.cost_usd += usage.cost_usd.max(0.0);
        s.input_tokens += count(usage.input_tokens);
        s.output_tokens += count(usage.output_tokens);
        s.cache_read_tokens += count(usage.cache_read_tokens);
        s.cache_creation_tokens += count(usage.cache_creation_tokens);
    }

    /// A live session started (`+1`) or was evicted (`-1`).
    pub fn live_sessions(&self, delta: i64) {
        self.inner.live_sessions.fetch_add(delta, Relaxed);
    }

    /// A conversation's slot was made (`+1`) or dropped from memory (`-1`).
    pub fn slots(&self, delta: i64) {
        self.inner.slots.fetch_add(delta, Relaxed);
    }

    /// Turns queued behind a running one changed by `delta`.
    pub fn queued_turns(&self, delta: i64) {
        self.inner.queued_turns.fetch_add(delta, Relaxed);
    }

    /// A client frame of type `kind` arrived.
    pub fn frame_in(&self, kind: &'static str) {
        bump(&self.inner.frames_in, kind, 1);
    }

    /// A frame of type `kind` was written to a socket.
    pub fn frame_out(&self, kind: &'static str) {
        bump(&self.inner.frames_out, kind, 1);
    }

    /// Frames a socket wrote in one go, counted by type: adds them and empties `counted`.
    pub fn frames_out(&self, counted: &mut FramesOut) {
        for (kind, n) in counted.0.drain(..) {
            bump(&self.inner.frames_out, kind, n);
        }
    }

    /// Append requests waiting for the store writer right now.
    pub fn store_queue(&self, depth: usize) {
        self.inner.store_queue.store(depth as i64, Relaxed);
    }

    /// This node now owns `held` conversations (several nodes on one PostgreSQL store).
    pub fn leases_held(&self, held: usize) {
        self.inner.leases_held.store(held as i64, Relaxed);
    }

    /// A command went to the node that runs its conversation.
    pub fn forwarded_command(&self) {
        self.inner.forwarded_commands.fetch_add(1, Relaxed);
    }

    /// A frame another node published reached this node's followers.
    pub fn relayed_frame(&self) {
        self.inner.relayed_frames.fetch_add(1, Relaxed);
    }

    /// A message on the cluster bus was refused, for `reason`.
    pub fn cluster_refusal(&self, reason: &'static str) {
        bump(&self.inner.cluster_refusals, reason, 1);
    }

    /// An append of a conversation that another node took over was refused.
    pub fn fence_rejection(&self) {
        self.inner.fence_rejections.fetch_add(1, Relaxed);
    }

    /// One store commit of `rows` rows took `elapsed`.
    pub fn record_commit(&self, elapsed: Duration, rows: usize) {
        let i = &self.inner;
        i.commits.fetch_add(1, Relaxed);
        i.stored_frames.fetch_add(rows as u64, Relaxed);
        i.commit_seconds_sum_us
            .fetch_add(elapsed.as_micros() as u64, Relaxed);
        let secs = elapsed.as_secs_f64();
        if let Some(b) = COMMIT_BUCKETS.iter().position(|le| secs <= *le) {
            i.commit_buckets[b].fetch_add(1, Relaxed);
        }
        if let Some(b) = BATCH_BUCKETS.iter().position(|le| rows as u64 <= *le) {
            i.batch_buckets[b].fetch_add(1, Relaxed);
        }
    }

    /// An agent process was started, fresh (`resumed == false`) or resuming.
    pub fn agent_spawned(&self, resumed: bool) {
        let c = if resumed {
            &self.inner.agent_resumes
        } else {
            &self.inner.agent_spawns
        };
        c.fetch_add(1, Relaxed);
    }

    /// An agent died unexpectedly.
    pub fn agent_crashed(&self) {
        self.inner.agent_crashes.fetch_add(1, Relaxed);
    }

    /// An error frame with `code` was sent.
    pub fn error(&self, code: &'static str) {
        bump(&self.inner.errors, code, 1);
    }

    /// A schedule's tick or run-now ended as `outcome` (`started`, `skipped`, `limited`,
    /// `paused`, `refused`).
    pub fn scheduled_run(&self, outcome: &'static str) {
        bump(&self.inner.scheduled_runs, outcome, 1);
    }

    /// A wait for a rate limit began or ended as `outcome` (`waiting`, `gave_up`, `continued`,
    /// `cancelled`, `refused`: its continue turn was refused).
    pub fn limit_wait(&self, outcome: &'static str) {
        bump(&self.inner.limit_waits, outcome, 1);
    }

    /// A Web Push ended as `outcome` (`sent`, `failed`, `gone`: its subscription was deleted,
    /// `dropped`: the queue was full).
    pub fn push(&self, outcome: &'static str) {
        bump(&self.inner.pushes, outcome, 1);
    }

    /// Renders every metric in the Prometheus text format.
    pub fn render(&self) -> String {
        let i = &self.inner;
        let mut out = String::with_capacity(2048);
        gauge(
            &mut out,
            "agentmux_sockets",
            "Open WebSockets.",
            i.sockets.load(Relaxed),
        );
        gauge(
            &mut out,
            "agentmux_live_sessions",
            "Sessions with a live actor.",
            i.live_sessions.load(Relaxed),
        );
        gauge(
            &mut out,
            "agentmux_session_slots",
            "Conversations held in memory (live, followed, or being worked on).",
            i.slots.load(Relaxed),
        );
        gauge(
            &mut out,
            "agentmux_queued_turns",
            "Turns waiting behind a running turn.",
            i.queued_turns.load(Relaxed),
        );
        gauge(
            &mut out,
            "agentmux_store_queue",
            "Append requests waiting for the store writer.",
            i.store_queue.load(Relaxed),
        );
        labelled(
            &mut out,
            "agentmux_frames_in_total",
            "Client frames received, by type.",
            "type",
            &i.frames_in,
        );
        labelled(
            &mut out,
            "agentmux_frames_out_total",
            "Frames written to sockets, by message_type.",
            "type",
            &i.frames_out,
        );
        gauge(
            &mut out,
            "agentmux_leases_held",
            "Conversations this node owns among the nodes sharing its store.",
            i.leases_held.load(Relaxed),
        );
        counter(
            &mut out,
            "agentmux_fence_rejections_total",
            "Appends refused because another node took the conversation over.",
            i.fence_rejections.load(Relaxed),
        );
        counter(
            &mut out,
            "agentmux_forwarded_commands_total",
            "Commands sent to the node that runs their conversation.",
            i.forwarded_commands.load(Relaxed),
        );
        counter(
            &mut out,
            "agentmux_relayed_frames_total",
            "Frames of conversations other nodes run, relayed to this node's followers.",
            i.relayed_frames.load(Relaxed),
        );
        labelled(
            &mut out,
            "agentmux_cluster_refused_messages_total",
            "Messages on the cluster bus refused (not sealed with the cluster secret, stale, \
             replayed or malformed), by reason.",
            "reason",
            &i.cluster_refusals,
        );
        labelled(
            &mut out,
            "agentmux_pushes_total",
            "Web Push notifications by outcome: sent, failed (refused, or still failing after the \
             retries), gone (the service no longer knows the subscription: deleted) or dropped \
             (the queue was full).",
            "outcome",
            &i.pushes,
        );
        counter(
            &mut out,
            "agentmux_stored_frames_total",
            "Frames committed to the store.",
            i.stored_frames.load(Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP agentmux_store_commit_seconds Store commit latency (one commit per batch)."
        );
        let _ = writeln!(out, "# TYPE agentmux_store_commit_seconds histogram");
        let mut cumulative = 0;
        for (le, b) in COMMIT_BUCKETS.iter().zip(&i.commit_buckets) {
            cumulative += b.load(Relaxed);
            let _ = writeln!(
                out,
                "agentmux_store_commit_seconds_bucket{{le=\"{le}\"}} {cumulative}"
            );
        }
        let commits = i.commits.load(Relaxed);
        let _ = writeln!(
            out,
            "agentmux_store_commit_seconds_bucket{{le=\"+Inf\"}} {commits}"
        );
        let sum = i.commit_seconds_sum_us.load(Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "agentmux_store_commit_seconds_sum {sum}");
        let _ = writeln!(out, "agentmux_store_commit_seconds_count {commits}");
        let _ = writeln!(
            out,
            "# HELP agentmux_store_batch_rows Rows stored per commit (group commit batch size)."
        );
        let _ = writeln!(out, "# TYPE agentmux_store_batch_rows histogram");
        let mut cumulative = 0;
        for (le, b) in BATCH_BUCKETS.iter().zip(&i.batch_buckets) {
            cumulative += b.load(Relaxed);
            let _ = writeln!(
                out,
                "agentmux_store_batch_rows_bucket{{le=\"{le}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "agentmux_store_batch_rows_bucket{{le=\"+Inf\"}} {commits}"
        );
        let _ = writeln!(
            out,
            "agentmux_store_batch_rows_sum {}",
            i.stored_frames.load(Relaxed)
        );
        let _ = writeln!(out, "agentmux_store_batch_rows_count {commits}");
        counter(
            &mut out,
            "agentmux_agent_spawns_total",
            "Agents started fresh.",
            i.agent_spawns.load(Relaxed),
        );
        counter(
            &mut out,
            "agentmux_agent_resumes_total",
            "Agents started with resume.",
            i.agent_resumes.load(Relaxed),
        );
        counter(
            &mut out,
            "agentmux_agent_crashes_total",
            "Agents that died unexpectedly.",
            i.agent_crashes.load(Relaxed),
        );
        labelled(
            &mut out,
            "agentmux_errors_total",
            "Error frames sent, by code.",
            "code",
            &i.errors,
        );
        labelled(
            &mut out,
            "agentmux_scheduled_runs_total",
            "Runs of schedules, by outcome (started, skipped, refused).",
            "outcome",
            &i.scheduled_runs,
        );
        self.render_spend(&mut out);
        labelled(
            &mut out,
            "agentmux_limit_waits_total",
            "Waits for a rate limit, by outcome (waiting, gave_up, continued, cancelled, refused).",
            "outcome",
            &i.limit_waits,
        );
        out
    }

    /// The cost and token counters, by agent and model.
    fn render_spend(&self, out: &mut String) {
        let spend = self.inner.spend.lock().expect("spend lock").clone();
        let _ = writeln!(
            out,
            "# HELP agentmux_cost_usd_total What turns cost in US dollars, as their agents reported it, by agent and model.\n# TYPE agentmux_cost_usd_total counter"
        );
        for ((agent, model), s) in &spend {
            let _ = writeln!(
                out,
                "agentmux_cost_usd_total{{agent=\"{agent}\",model=\"{model}\"}} {}",
                s.cost_usd
            );
        }
        let _ = writeln!(
            out,
            "# HELP agentmux_tokens_total Tokens of turns, by agent, model and kind (input, output, cache_read, cache_creation).\n# TYPE agentmux_tokens_total counter"
        );
        for ((agent, model), s) in &spend {
            for (kind, n) in [
                ("input", s.input_tokens),
                ("output", s.output_tokens),
                ("cache_read", s.cache_read_tokens),
                ("cache_creation", s.cache_creation_tokens),
            ] {
                let _ = writeln!(
                    out,
                    "agentmux_tokens_total{{agent=\"{agent}\",model=\"{model}\",kind=\"{kind}\"}} {n}"
                );
            }
        }
    }
}

/// A name as a label value: letters, digits and `._:/@-` only (others become `_`), at most 64.
fn label_value(name: &str) -> String {
    name.chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._:/@-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn bump(map: &DashMap<&'static str, AtomicU64>, key: &'static str, n: u64) {
    if let Some(c) = map.get(key) {
        c.fetch_add(n, Relaxed);
        return;
    }
    map.entry(key).or_default().fetch_add(n, Relaxed);
}

/// Frames one socket wrote, by type, before they are added to the server's counters: a socket
/// adds them once per batch it writes rather than once per frame (the shared counters are
/// contended between threads).
#[derive(Default)]
pub struct FramesOut(Vec<(&'static str, u64)>);

impl FramesOut {
    /// One more frame of type `kind`.
    pub fn add(&mut self, kind: &'static str) {
        match self.0.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => self.0.push((kind, 1)),
        }
    }
}

fn gauge(out: &mut String, name: &str, help: &str, value: i64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
    );
}

fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
    );
}

fn labelled(
    out: &mut String,
    name: &str,
    help: &str,
    label: &str,
    map: &DashMap<&'static str, AtomicU64>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    let mut rows: Vec<_> = map
        .iter()
        .map(|e| (*e.key(), e.value().load(Relaxed)))
        .collect();
    rows.sort_unstable();
    for (key, value) in rows {
        let _ = writeln!(out, "{name}{{{label}=\"{key}\"}} {value}");
    }
}
