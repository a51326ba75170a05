//! What a scenario measured, as a table for people and JSON for the plot script.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::servers::Kind;

/// Latency percentiles, in microseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// Largest sample.
    pub max_us: u64,
}

impl From<&Histogram<u64>> for Percentiles {
    fn from(h: &Histogram<u64>) -> Self {
        Percentiles {
            count: h.len(),
            p50_us: h.value_at_quantile(0.5),
            p90_us: h.value_at_quantile(0.9),
            p99_us: h.value_at_quantile(0.99),
            max_us: h.max(),
        }
    }
}

/// One server's figures for one load.
#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    /// Which server.
    pub server: Kind,
    /// Measured seconds.
    pub secs: f64,
    /// Sockets open during the measurement.
    pub sockets: usize,
    /// Sessions driven.
    pub sessions: usize,
    /// Paced rate of turns asked for, when the load was paced (open loop).
    pub offered_turns_per_sec: Option<f64>,
    /// Turns completed (a `result` seen by the socket that sent the chat).
    pub turns: u64,
    /// Turns per second.
    pub turns_per_sec: f64,
    /// Frames received by all sockets.
    pub delivered_frames: u64,
    /// Frames received per second.
    pub delivered_fps: f64,
    /// Stored frames: committed by agentmux (`agentmux_stored_frames_total`), or, for the
    /// baseline, the stored-type frames it emitted (counted once per session).
    pub stored_frames: u64,
    /// Stored frames per second.
    pub stored_fps: f64,
    /// `chat` sent → first `stream_event` of its turn.
    pub first_token: Percentiles,
    /// `chat` sent → its `result`.
    pub result: Percentiles,
    /// Server resident memory at the end, KiB.
    pub rss_kib: u64,
    /// Resident memory added per open socket, bytes (idle scenario).
    pub rss_per_socket_bytes: Option<f64>,
    /// CPU time the server process used during the measurement (user + system), seconds.
    pub server_cpu_secs: f64,
    /// Delivered frames per second of server CPU time: what the server's work per frame
    /// costs, whatever share of the machine it got.
    pub frames_per_cpu_sec: Option<f64>,
    /// Error frames, failed connections and sockets closed early.
    pub errors: u64,
}

impl Measurement {
    /// A measurement of `server` over `secs` in which nothing was counted yet.
    pub fn empty(server: Kind, secs: f64) -> Self {
        Measurement {
            server,
            secs,
            sockets: 0,
            sessions: 0,
            offered_turns_per_sec: None,
            turns: 0,
            turns_per_sec: 0.0,
            delivered_frames: 0,
            delivered_fps: 0.0,
            stored_frames: 0,
            stored_fps: 0.0,
            first_token: Percentiles::default(),
            result: Percentiles::default(),
            rss_kib: 0,
            rss_per_socket_bytes: None,
            server_cpu_secs: 0.0,
            frames_per_cpu_sec: None,
            errors: 0,
        }
    }

    /// Records the server's CPU time over the measurement, and the frames per CPU-second.
    pub fn with_cpu(mut self, cpu_secs: f64) -> Self {
        self.server_cpu_secs = cpu_secs;
        self.frames_per_cpu_sec = (cpu_secs > 0.0 && self.delivered_frames > 0)
            .then(|| self.delivered_frames as f64 / cpu_secs);
        self
    }
}

/// Both servers under the same load, and agentmux as a ratio to the baseline.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// What the load was.
    pub label: String,
    /// The baseline's figures (absent with `--no-baseline`).
    pub baseline: Option<Measurement>,
    /// agentmux's figures.
    pub agentmux: Measurement,
    /// agentmux ÷ baseline per figure; `*_delta_ms` entries are differences instead.
    pub vs_baseline: BTreeMap<String, f64>,
}

impl Row {
    /// A row comparing `agentmux` with `baseline`.
    pub fn new(
        label: impl Into<String>,
        baseline: Option<Measurement>,
        agentmux: Measurement,
    ) -> Self {
        let mut vs = BTreeMap::new();
        if let Some(b) = &baseline {
            let a = &agentmux;
            let mut ratio = |name: &str, x: f64, y: f64| {
                if y > 0.0 {
                    vs.insert(name.to_owned(), x / y);
                }
            };
            ratio("turns_per_sec", a.turns_per_sec, b.turns_per_sec);
            ratio("delivered_fps", a.delivered_fps, b.delivered_fps);
            ratio("stored_fps", a.stored_fps, b.stored_fps);
            if let (Some(x), Some(y)) = (a.frames_per_cpu_sec, b.frames_per_cpu_sec) {
                ratio("frames_per_cpu_sec", x, y);
            }
            ratio(
                "first_token_p50",
                a.first_token.p50_us as f64,
                b.first_token.p50_us as f64,
            );
            ratio(
                "first_token_p99",
                a.first_token.p99_us as f64,
                b.first_token.p99_us as f64,
            );
            ratio("result_p99", a.result.p99_us as f64, b.result.p99_us as f64);
            ratio("rss", a.rss_kib as f64, b.rss_kib as f64);
            if let (Some(x), Some(y)) = (a.rss_per_socket_bytes, b.rss_per_socket_bytes) {
                ratio("rss_per_socket", x, y);
            }
            if a.first_token.count > 0 && b.first_token.count > 0 {
                vs.insert(
                    "first_token_p99_delta_ms".into(),
                    (a.first_token.p99_us as f64 - b.first_token.p99_us as f64) / 1000.0,
                );
            }
        }
        Row {
            label: label.into(),
            baseline,
            agentmux,
            vs_baseline: vs,
        }
    }
}

/// The machine a report was made on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPU model.
    pub cpu: String,
    /// Cores available to this process.
    pub cores: usize,
    /// Memory, MiB.
    pub memory_mib: u64,
    /// Kernel release.
    pub kernel: String,
}

impl Machine {
    /// Reads this machine's description from `/proc`.
    pub fn this() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let meminfo = read("/proc/meminfo");
        Machine {
            cpu: cpuinfo
                .lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
                .unwrap_or_default(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_mib: meminfo
                .lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .map_or(0, |kib| kib / 1024),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
        }
    }
}

/// A scenario's report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Where it ran.
    pub machine: Machine,
    /// The scenario's parameters.
    pub params: serde_json::Value,
    /// One row per load.
    pub rows: Vec<Row>,
}

impl Report {
    /// An empty report of `scenario`.
    pub fn new(scenario: &str, params: serde_json::Value) -> Self {
        Report {
            scenario: scenario.to_owned(),
            machine: Machine::this(),
            params,
            rows: Vec::new(),
        }
    }

    /// The report as a fixed-width table.
    pub fn table(&self) -> String {
        let mut out = title(&self.scenario, &self.machine, &self.params);
        out.push_str(&table_header());
        for row in &self.rows {
            for m in row.baseline.iter().chain([&row.agentmux]) {
                out.push_str(&table_line(&row.label, m.server.name(), m));
            }
            if !row.vs_baseline.is_empty() {
                let ratios: Vec<String> = row
                    .vs_baseline
                    .iter()
                    .map(|(k, v)| format!("{k}={v:.2}"))
                    .collect();
                let _ = writeln!(out, "{:<18} vs baseline: {}", row.label, ratios.join(" "));
            }
        }
        out
    }
}

/// The first lines of a report's table: the scenario, the machine and the parameters.
pub fn title(scenario: &str, m: &Machine, params: &serde_json::Value) -> String {
    format!(
        "scenario {scenario} on {} ({} cores, {} MiB, Linux {})\n{params}\n",
        m.cpu, m.cores, m.memory_mib, m.kernel
    )
}

/// The column headings of [`table_line`].
pub fn table_header() -> String {
    format!(
        "{:<18} {:<9} {:>9} {:>11} {:>10} {:>7} {:>12} {:>17} {:>17} {:>8} {:>9} {:>6}\n",
        "load",
        "server",
        "turns/s",
        "delivered/s",
        "stored/s",
        "CPU s",
        "frames/CPU-s",
        "first p50/p99 ms",
        "result p50/p99 ms",
        "RSS MiB",
        "B/socket",
        "errors"
    )
}

/// One measurement as a table line: `label` names the load, `server` what served it.
pub fn table_line(label: &str, server: &str, m: &Measurement) -> String {
    format!(
        "{:<18} {:<9} {:>9.0} {:>11.0} {:>10.0} {:>7.2} {:>12} {:>17} {:>17} {:>8.1} {:>9} {:>6}\n",
        label,
        server,
        m.turns_per_sec,
        m.delivered_fps,
        m.stored_fps,
        m.server_cpu_secs,
        m.frames_per_cpu_sec
            .map_or("-".to_owned(), |f| format!("{f:.0}")),
        pair(&m.first_token),
        pair(&m.result),
        m.rss_kib as f64 / 1024.0,
        m.rss_per_socket_bytes
            .map_or("-".to_owned(), |b| format!("{b:.0}")),
        m.errors
    )
}

fn pair(p: &Percentiles) -> String {
    if p.count == 0 {
        return "-".to_owned();
    }
    format!(
        "{:.2}/{:.2}",
        p.p50_us as f64 / 1000.0,
        p.p99_us as f64 / 1000.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_histogram() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 1_000_000, 3).unwrap();
        for us in 1..=1000 {
            h.record(us).unwrap();
        }
        let p = Percentiles::from(&h);
        assert_eq!(p.count, 1000);
        assert_eq!(p.p50_us, 500);
        assert_eq!(p.p90_us, 900);
        assert_eq!(p.p99_us, 990);
        assert_eq!(p.max_us, 1000);
        assert_eq!(
            Percentiles::from(&Histogram::<u64>::new(3).unwrap()).count,
            0
        );
    }

    fn measured(server: Kind, frames: u64, cpu_secs: f64) -> Measurement {
        Measurement {
            delivered_frames: frames,
            delivered_fps: frames as f64 / 10.0,
            ..Measurement::empty(server, 10.0)
        }
        .with_cpu(cpu_secs)
    }

    #[test]
    fn frames_per_cpu_second_and_its_ratio() {
        let baseline = measured(Kind::Baseline, 1_000_000, 4.0);
        let agentmux = measured(Kind::Agentmux, 200_000, 8.0);
        assert_eq!(baseline.frames_per_cpu_sec, Some(250_000.0));
        assert_eq!(agentmux.frames_per_cpu_sec, Some(25_000.0));
        let row = Row::new("load", Some(baseline), agentmux);
        assert_eq!(row.vs_baseline["frames_per_cpu_sec"], 0.1);
        assert_eq!(row.vs_baseline["delivered_fps"], 0.2);
        let table = Report {
            scenario: "test".into(),
            machine: Machine::this(),
            params: serde_json::json!({}),
            rows: vec![row],
        }
        .table();
        assert!(table.contains("frames/CPU-s"), "{table}");
        assert!(table.contains("250000"), "{table}");
        assert!(table.contains("frames_per_cpu_sec=0.10"), "{table}");
    }

    #[test]
    fn no_cpu_time_means_no_frames_per_cpu_second() {
        assert_eq!(measured(Kind::Agentmux, 100, 0.0).frames_per_cpu_sec, None);
        assert_eq!(measured(Kind::Agentmux, 0, 1.0).frames_per_cpu_sec, None);
        let row = Row::new(
            "load",
            Some(measured(Kind::Baseline, 100, 0.0)),
            measured(Kind::Agentmux, 100, 1.0),
        );
        assert!(!row.vs_baseline.contains_key("frames_per_cpu_sec"));
    }
}
