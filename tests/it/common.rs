//! Test support: a server process on port 0 with its own data dir, and a typed WebSocket client.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long a test waits for any one expected frame.
pub const WAIT: Duration = Duration::from_secs(15);

/// The workspace executable `name` (`agentmux-chat`, `agentmux-bench`), which `agentmux chat`
/// and `agentmux bench` run from next to `agentmux`. `cargo test` in the workspace root builds
/// it; a run limited to this package (`-p agentmux`) does not.
pub fn sibling(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_agentmux")).with_file_name(name);
    assert!(
        path.is_file(),
        "{} is missing: run the tests from the workspace root (`cargo test --all-targets`), \
         or `cargo build -p {name}` first",
        path.display()
    );
    path
}

/// A running `agentmux serve`; killed on drop.
pub struct TestServer {
    pub child: Child,
    pub addr: String,
    pub data_dir: PathBuf,
    pub args: Vec<String>,
    _tmp: Option<tempfile::TempDir>,
}

impl TestServer {
    /// Starts a demo-backed server with no per-word delay in a fresh data dir.
    pub async fn start() -> Self {
        Self::start_with(&["--demo-delay-ms", "0"]).await
    }

    /// Starts a server with extra `serve` arguments in a fresh data dir.
    pub async fn start_with(args: &[&str]) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let data_dir = tmp.path().to_path_buf();
        let mut server = Self::start_in(&data_dir, args, &[]).await;
        server._tmp = Some(tmp);
        server
    }

    /// Starts a server on an existing data dir (for restart tests).
    pub async fn start_in(data_dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentmux"));
        cmd.arg("serve")
            .arg("--bind")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(data_dir)
            .args(args)
            .env_remove("AGENTMUX_BACKEND")
            .env_remove("AGENTMUX_CLAUDE_BIN")
            .env_remove("AGENTMUX_CONFIG")
            .env("RUST_LOG", "agentmux=warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start agentmux");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("server prints its address in time")
            .unwrap()
            .expect("server printed a line");
        let addr = line
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line: {line}"))
            .to_owned();
        // Keep draining stdout so the server never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        TestServer {
            child,
            addr,
            data_dir: data_dir.to_path_buf(),
            args: args.iter().map(|s| s.to_string()).collect(),
            _tmp: None,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.addr).await
    }

    /// Sends SIGTERM and waits for the exit status.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().expect("running") as i32;
        unsafe_kill(pid, 15);
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("server exits after SIGTERM")
            .unwrap()
    }

    /// `kill -9`.
    pub async fn kill9(&mut self) {
        self.child.start_kill().unwrap();
        let _ = self.child.wait().await;
    }

    /// Opens the server's database read-only-ish for checks.
    pub async fn db(&self) -> sqlx::SqlitePool {
        open_db(&self.data_dir).await
    }
}

pub async fn open_db(data_dir: &Path) -> sqlx::SqlitePool {
    let opts = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(data_dir.join("agentmux.db"))
        .busy_timeout(Duration::from_secs(10));
    sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(opts)
        .await
        .unwrap()
}

fn unsafe_kill(pid: i32, sig: i32) {
    std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
}

/// A WebSocket client speaking protocol v1.
pub struct Client {
    pub ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl Client {
    pub async fn connect(addr: &str) -> Self {
        let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
            .max_message_size(Some(64 << 20))
            .max_frame_size(Some(64 << 20));
        let url = format!("ws://{addr}/ws");
        let (ws, _) = tokio_tungstenite::connect_async_with_config(url, Some(config), false)
            .await
            .expect("connect");
        Client { ws }
    }

    pub async fn send(&mut self, frame: Value) {
        self.ws
            .send(Message::text(frame.to_string()))
            .await
            .unwrap();
    }

    pub async fn send_raw(&mut self, msg: Message) {
        self.ws.send(msg).await.unwrap();
    }

    pub async fn chat(&mut self, agent_id: &str, content: &str) {
        self.send(json!({"type": "chat", "agent_id": agent_id, "content": content}))
            .await;
    }

    /// The next text frame as JSON.
    pub async fn recv(&mut self) -> Value {
        loop {
            let msg = tokio::time::timeout(WAIT, self.ws.next())
                .await
                .expect("a frame in time")
                .expect("socket open")
                .expect("no socket error");
            match msg {
                Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
                Message::Close(c) => panic!("socket closed: {c:?}"),
                _ => continue,
            }
        }
    }

    /// Frames until (and including) the first that matches `pred`.
    pub async fn recv_until(&mut self, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut got = Vec::new();
        loop {
            let v = self.recv().await;
            let done = pred(&v);
            got.push(v);
            if done {
                return got;
            }
        }
    }

    /// Frames until the `result` of `agent_id`, inclusive.
    pub async fn until_result(&mut self, agent_id: &str) -> Vec<Value> {
        self.recv_until(|v| v["message_type"] == "result" && v["agent_id"] == agent_id)
            .await
    }

    /// Waits for the close frame and returns its code.
    pub async fn expect_close(&mut self) -> u16 {
        loop {
            match tokio::time::timeout(WAIT, self.ws.next())
                .await
                .expect("close in time")
            {
                Some(Ok(Message::Close(Some(frame)))) => return frame.code.into(),
                Some(Ok(Message::Close(None))) | None => return 1005,
                Some(Ok(_)) => continue,
                Some(Err(e)) => panic!("socket error instead of close: {e}"),
            }
        }
    }
}

/// The text of the final assistant reply in a list of frames.
pub fn reply_text(frames: &[Value]) -> String {
    frames
        .iter()
        .rev()
        .find(|f| f["message_type"] == "result")
        .and_then(|f| f["message"]["result"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// `seq`s of the stored frames in `frames`.
pub fn seqs(frames: &[Value]) -> Vec<i64> {
    frames
        .iter()
        .filter(|f| f["message_type"] != "ack")
        .filter_map(|f| f["seq"].as_i64())
        .collect()
}

/// Writes a TOML config into a temp file that lives as long as the returned guard.
pub fn config_file(toml: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agentmux.toml");
    std::fs::write(&path, toml).unwrap();
    let path = path.to_string_lossy().into_owned();
    (dir, path)
}

/// Sends a chat and returns its ack.
pub async fn chat_ack(c: &mut Client, agent_id: &str, content: &str) -> Value {
    c.chat(agent_id, content).await;
    let frames = c
        .recv_until(|v| v["message_type"] == "ack" || v["message_type"] == "error")
        .await;
    frames.last().unwrap().clone()
}

impl Client {
    /// Sends a ping and returns every frame that arrived before its pong: what the server had
    /// for this socket by the time it read the ping.
    pub async fn before_pong(&mut self) -> Vec<Value> {
        let marker = format!("mark-{}", uuid::Uuid::new_v4());
        self.send(json!({"type": "ping", "ts": marker})).await;
        let mut got = self
            .recv_until(|v| v["message_type"] == "pong" && v["ts"] == marker.as_str())
            .await;
        got.pop();
        got
    }
}

/// Gates of the demo agent (`demo.gate_dir`): after its first word, turn N of `agent_id` waits
/// until the test calls `open(agent_id, N)`, so no test depends on how long a turn takes.
pub struct Gates {
    pub dir: PathBuf,
    /// The config file that turns the gates on (plus the test's own settings).
    pub config: String,
    _tmp: tempfile::TempDir,
}

impl Gates {
    /// Gates, with `extra_toml` (tables other than `[demo]`) in the same config file.
    pub fn new(extra_toml: &str) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("gates");
        std::fs::create_dir(&dir).unwrap();
        let config = tmp.path().join("gated.toml");
        std::fs::write(
            &config,
            format!(
                "{extra_toml}\n[demo]\ngate_dir = {}\n",
                toml_string(&dir.to_string_lossy())
            ),
        )
        .unwrap();
        Gates {
            dir,
            config: config.to_string_lossy().into_owned(),
            _tmp: tmp,
        }
    }

    /// Lets turn `turn` of `agent_id` finish (now, or at once when it gets there).
    pub fn open(&self, agent_id: &str, turn: u32) {
        std::fs::write(self.dir.join(format!("{agent_id}.{turn}")), b"").unwrap();
    }

    /// Opens turns `turns` of `agent_id`.
    pub fn open_all(&self, agent_id: &str, turns: std::ops::RangeInclusive<u32>) {
        for turn in turns {
            self.open(agent_id, turn);
        }
    }

    /// A server with these gates and no per-word delay, in a fresh data dir.
    pub async fn start(&self) -> TestServer {
        TestServer::start_with(&["--config", &self.config, "--demo-delay-ms", "0"]).await
    }
}

/// A TOML basic string.
pub fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// The frames of `agent_id` in `frames`, as `message_type` (and `status` for statuses).
pub fn kinds(frames: &[Value], agent_id: &str) -> Vec<String> {
    frames
        .iter()
        .filter(|f| f["agent_id"] == agent_id)
        .map(|f| match f["message_type"].as_str().unwrap() {
            "status" => format!("status:{}", f["status"].as_str().unwrap()),
            "stream_event" => format!("stream:{}", f["message"]["event"]["type"].as_str().unwrap()),
            other => other.to_owned(),
        })
        .collect()
}
