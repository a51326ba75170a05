//! The servers under test, each in its own process: start, address, memory, CPU time,
//! metrics, kill.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::process;
use crate::wire::http_get;

/// How long a server may take to print its address.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The `agentmux` executable under test, when not the one next to this executable.
static AGENTMUX_BIN: OnceLock<PathBuf> = OnceLock::new();

/// Makes `path` the `agentmux` executable under test.
pub fn set_agentmux_bin(path: PathBuf) {
    let _ = AGENTMUX_BIN.set(path);
}

/// The `agentmux` executable under test: as set, else the one next to this executable.
fn agentmux_bin() -> anyhow::Result<PathBuf> {
    if let Some(path) = AGENTMUX_BIN.get() {
        return Ok(path.clone());
    }
    let path = std::env::current_exe()?.with_file_name("agentmux");
    anyhow::ensure!(
        path.is_file(),
        "no agentmux executable at {}: build it (`cargo build --release -p agentmux`) or pass \
         --agentmux-bin",
        path.display()
    );
    Ok(path)
}

/// Which server a measurement is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// `agentmux-bench baseline`: a WebSocket server and the demo's frames, nothing else.
    Baseline,
    /// `agentmux serve --demo-delay-ms 0`.
    Agentmux,
}

impl Kind {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Baseline => "baseline",
            Kind::Agentmux => "agentmux",
        }
    }
}

/// Settings of the server under test that scenarios change.
#[derive(Debug, Clone, Default)]
pub struct Tweaks {
    /// agentmux's `store.max_batch`.
    pub max_batch: Option<usize>,
    /// agentmux's `session.idle_evict_secs`.
    pub idle_evict_secs: Option<u64>,
    /// Start the baseline with `--keep-history`.
    pub keep_history: bool,
    /// Run agentmux with the Claude backend on this CLI (the fake one, stamping its lines, or
    /// the real one) instead of the demo agent, and the baseline relaying it (`--relay-cli`).
    pub claude_bin: Option<PathBuf>,
    /// More environment for agentmux (and, where its allow-list lets it, the CLI).
    pub env: Vec<(String, String)>,
}

/// A running server process; killed on drop.
pub struct Server {
    /// Which server.
    pub kind: Kind,
    /// `host:port` it listens on.
    pub addr: String,
    child: Child,
    /// The agentmux server's data directory, when this server owns it (removed on drop).
    _data: Option<tempfile::TempDir>,
}

impl Server {
    /// Starts a server of `kind`; agentmux gets a fresh temporary data directory.
    pub async fn start(kind: Kind, tweaks: &Tweaks) -> anyhow::Result<Self> {
        match kind {
            Kind::Baseline => {
                let mut args = vec!["baseline".to_owned()];
                if tweaks.keep_history {
                    args.push("--keep-history".to_owned());
                }
                if let Some(cli) = &tweaks.claude_bin {
                    args.push(format!("--relay-cli={}", cli.display()));
                }
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let (child, addr) = spawn(&std::env::current_exe()?, &args, &[]).await?;
                Ok(Server {
                    kind,
                    addr,
                    child,
                    _data: None,
                })
            }
            Kind::Agentmux => {
                let data = tempfile::tempdir()?;
                let (child, addr) = start_agentmux(data.path(), tweaks).await?;
                Ok(Server {
                    kind,
                    addr,
                    child,
                    _data: Some(data),
                })
            }
        }
    }

    /// Starts agentmux on an existing data directory that the caller owns.
    pub async fn start_in(data_dir: &Path, tweaks: &Tweaks) -> anyhow::Result<Self> {
        let (child, addr) = start_agentmux(data_dir, tweaks).await?;
        Ok(Server {
            kind: Kind::Agentmux,
            addr,
            child,
            _data: None,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// Resident memory of the process, in KiB.
    pub fn rss_kib(&self) -> u64 {
        process::rss_kib(self.pid())
    }

    /// CPU time the process has used so far, in seconds (0 when it can't be read).
    pub fn cpu_secs(&self) -> f64 {
        process::cpu_secs(self.pid()).unwrap_or(0.0)
    }

    /// A counter or gauge from `/metrics` (agentmux only), summed over its labels.
    pub async fn metric(&self, name: &str) -> anyhow::Result<f64> {
        let (_, text) = http_get(&self.addr, "/metrics").await?;
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }

    /// `kill -9`, then reaps the process.
    pub async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// Data dir, config file and arguments of an agentmux server under test.
async fn start_agentmux(data_dir: &Path, tweaks: &Tweaks) -> anyhow::Result<(Child, String)> {
    let config = config_file(data_dir, tweaks)?;
    let data = data_dir.to_string_lossy();
    let config = config.to_string_lossy();
    let mut args = vec!["serve", "--data-dir", &data, "--config", &config];
    let mut env: Vec<(&str, &str)> = tweaks
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let claude_bin;
    match &tweaks.claude_bin {
        Some(bin) => {
            claude_bin = bin.to_string_lossy();
            args.extend(["--backend", "claude", "--claude-bin", &claude_bin]);
            env.push(("FAKE_CLAUDE_STAMP", "1"));
        }
        None => args.extend(["--demo-delay-ms", "0", "--backend", "demo"]),
    }
    spawn(&agentmux_bin()?, &args, &env).await
}

fn config_file(data_dir: &Path, tweaks: &Tweaks) -> anyhow::Result<PathBuf> {
    // A load generator is one client sending far more than a browser would: no frame-rate limit.
    let mut text = String::from("[socket]\nmax_frames_per_sec = 0\n[store]\n");
    if let Some(n) = tweaks.max_batch {
        text.push_str(&format!("max_batch = {n}\n"));
    }
    text.push_str("[session]\n");
    if let Some(secs) = tweaks.idle_evict_secs {
        text.push_str(&format!("idle_evict_secs = {secs}\n"));
    }
    if tweaks.claude_bin.is_some() {
        let claude_dir = data_dir.join("claude");
        std::fs::create_dir_all(&claude_dir)?;
        text.push_str(&format!(
            "[claude]\nenv_allow = [\"FAKE_CLAUDE_STAMP\"]\nconfig_dir = {}\n",
            toml_string(&claude_dir.to_string_lossy())
        ));
    }
    std::fs::create_dir_all(data_dir)?;
    let path = data_dir.join("bench.toml");
    std::fs::write(&path, text)?;
    Ok(path)
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

/// Runs `exe` with `args`, `env` and bind port 0, and reads the address it prints.
async fn spawn(exe: &Path, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<(Child, String)> {
    let mut child = Command::new(exe)
        .args(args)
        .envs(env.iter().copied())
        .args(["--bind", "127.0.0.1:0"])
        .env("RUST_LOG", "warn")
        .env_remove("AGENTMUX_CONFIG")
        .env_remove("AGENTMUX_CLAUDE_BIN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", exe.display()))?;
    let stdout = child.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(START_TIMEOUT, lines.next_line())
        .await
        .map_err(|_| anyhow::anyhow!("{args:?} did not print its address in time"))??
        .ok_or_else(|| anyhow::anyhow!("{args:?} exited before listening"))?;
    let addr = line
        .strip_prefix("listening on http://")
        .ok_or_else(|| anyhow::anyhow!("unexpected first line from {args:?}: {line}"))?
        .to_owned();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, addr))
}
