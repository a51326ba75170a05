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

/// The PostgreSQL server the tests may use (`AGENTMUX_TEST_PG_URL`, a URL of its maintenance
/// database; `scripts/test.sh` and `scripts/pg.sh` start one). None when unset, unless `CI` is
/// `true`: there a missing server fails the test.
pub fn pg_url() -> Option<String> {
    match std::env::var("AGENTMUX_TEST_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "AGENTMUX_TEST_PG_URL is not set (scripts/test.sh starts PostgreSQL and sets it)"
            );
            None
        }
    }
}

/// The `nats-server` executable the tests may run (`AGENTMUX_TEST_NATS_BIN`; `scripts/test.sh`
/// installs one). None (after saying so) when unset, unless `CI` is `true`: there a missing
/// server fails the test.
pub fn nats_bin() -> Option<String> {
    match std::env::var("AGENTMUX_TEST_NATS_BIN") {
        Ok(bin) if !bin.is_empty() => Some(bin),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "AGENTMUX_TEST_NATS_BIN is not set (scripts/test.sh installs nats-server)"
            );
            eprintln!("skipped: AGENTMUX_TEST_NATS_BIN is not set");
            None
        }
    }
}

/// Whether every test server runs on PostgreSQL (`AGENTMUX_TEST_STORE=postgres`). The build
/// script reads the same variable into `cfg(test_store_postgres)`, which ignores the tests
/// about the SQLite file: both must agree.
pub fn on_postgres() -> bool {
    let on = std::env::var("AGENTMUX_TEST_STORE").as_deref() == Ok("postgres");
    assert_eq!(
        on,
        cfg!(test_store_postgres),
        "AGENTMUX_TEST_STORE changed since the tests were built: build them again"
    );
    if on {
        assert!(
            std::env::var("AGENTMUX_TEST_PG_URL").is_ok_and(|u| !u.is_empty()),
            "AGENTMUX_TEST_STORE=postgres needs AGENTMUX_TEST_PG_URL (see scripts/pg.sh)"
        );
    }
    on
}

/// `url` (a PostgreSQL server URL) naming database `name` instead of its own.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let (scheme, rest) = base.split_once("://").expect("a URL");
    let authority = rest.split('/').next().unwrap();
    format!("{scheme}://{authority}/{name}{query}")
}

/// Creates database `name` on the test server (nothing when it exists); returns its URL.
pub async fn create_database(server_url: &str, name: &str) -> String {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(server_url)
        .await
        .expect("connect to the test PostgreSQL");
    match sqlx::query(&format!("create database \"{name}\""))
        .execute(&mut conn)
        .await
    {
        Ok(_) => {}
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P04") => {}
        Err(e) => panic!("create database {name}: {e}"),
    }
    let _ = conn.close().await;
    with_database(server_url, name)
}

/// Drops database `name` of the test server, disconnecting whoever still uses it. Blocking:
/// for `Drop`s.
pub fn drop_database(server_url: &str, name: &str) {
    let (url, db) = (server_url.to_owned(), name.to_owned());
    let dropped = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&url).await?;
            sqlx::query(&format!("drop database if exists \"{db}\" with (force)"))
                .execute(&mut conn)
                .await?;
            conn.close().await
        })
    })
    .join();
    if let Ok(Err(e)) = dropped {
        eprintln!("could not drop test database {name}: {e}");
    }
}

/// The database of the servers on data dir `data_dir` in the PostgreSQL pass: one per data dir,
/// so that a restart on the same dir finds its conversations.
pub fn database_for(data_dir: &Path) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data_dir.hash(&mut h);
    format!("agentmux_it_{:016x}", h.finish())
}

/// A running `agentmux serve`; killed on drop.
pub struct TestServer {
    pub child: Child,
    pub addr: String,
    pub data_dir: PathBuf,
    pub args: Vec<String>,
    /// The database URL it stores in, when it runs on PostgreSQL.
    pub store_url: Option<String>,
    _tmp: Option<tempfile::TempDir>,
}

impl Drop for TestServer {
    /// A server that owns its data dir takes its PostgreSQL database along.
    fn drop(&mut self) {
        if self._tmp.is_some()
            && self.store_url.is_some()
            && let Some(url) = pg_url()
        {
            let _ = self.child.start_kill();
            drop_database(&url, &database_for(&self.data_dir));
        }
    }
}

impl TestServer {
    /// Starts a demo-backed server with no per-word delay in a fresh data dir.
    pub async fn start() -> Self {
        Self::start_with(&["--demo-delay-ms", "0"]).await
    }

    /// Starts a server with extra `serve` arguments in a fresh data dir.
    pub async fn start_with(args: &[&str]) -> Self {
        Self::start_with_env(args, &[]).await
    }

    /// [`Self::start_with`] with extra environment variables.
    pub async fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let data_dir = tmp.path().to_path_buf();
        let mut server = Self::start_in(&data_dir, args, env).await;
        server._tmp = Some(tmp);
        server
    }

    /// Starts a server on an existing data dir (for restart tests). In the PostgreSQL pass it
    /// stores in the data dir's own database.
    pub async fn start_in(data_dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_in_limited(data_dir, args, env, None).await
    }

    /// [`Self::start_in`] with the server's files unable to grow past `file_bytes`
    /// (`RLIMIT_FSIZE`): a write beyond fails with `EFBIG` as a write to a full disk fails
    /// (`SIGXFSZ`, which would kill the server instead, is ignored).
    pub async fn start_in_limited(
        data_dir: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        file_bytes: Option<u64>,
    ) -> Self {
        Self::launch(data_dir, args, env, file_bytes, Stdio::inherit()).await
    }

    /// [`Self::start_in`] with the server's log (its stderr) written to `log`.
    pub async fn start_in_logged(
        data_dir: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        log: std::fs::File,
    ) -> Self {
        Self::launch(data_dir, args, env, None, log.into()).await
    }

    async fn launch(
        data_dir: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        file_bytes: Option<u64>,
        stderr: Stdio,
    ) -> Self {
        let store_url = match on_postgres() {
            true => Some(create_database(&pg_url().unwrap(), &database_for(data_dir)).await),
            false => None,
        };
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
            .env_remove("AGENTMUX_STORE_URL")
            .env_remove("AGENTMUX_CLUSTER_SECRET")
            .env("RUST_LOG", "agentmux=warn")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true);
        if let Some(url) = &store_url {
            cmd.env("AGENTMUX_STORE_URL", url);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some(bytes) = file_bytes {
            // SAFETY: between fork and exec the child only makes two system calls, which are
            // async-signal-safe; an ignored signal stays ignored across exec.
            unsafe {
                cmd.pre_exec(move || {
                    let limit = Some(bytes);
                    let limit = rustix::process::Rlimit {
                        current: limit,
                        maximum: limit,
                    };
                    rustix::process::setrlimit(rustix::process::Resource::Fsize, limit)?;
                    libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                    Ok(())
                });
            }
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
            store_url,
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

    /// Stops the server (SIGTERM; it must exit cleanly) and opens its database for checks. A
    /// running server holds its SQLite file alone (no other process can open it), so the file
    /// is read once the server has stopped; [`Self::restart`] starts it again.
    pub async fn stop_and_open_db(&mut self) -> sqlx::AnyPool {
        let status = self.terminate().await;
        assert!(status.success(), "the server stops cleanly: {status:?}");
        self.db().await
    }

    /// Starts a stopped server again on its data dir, with its arguments.
    pub async fn restart(&mut self) {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let mut next = Self::start_in(&self.data_dir, &args, &[]).await;
        next._tmp = self._tmp.take();
        *self = next;
    }

    /// SQLite's verdict on the database file of the stopped server (`pragma integrity_check`);
    /// None on PostgreSQL, which checks its own pages.
    pub async fn integrity(&self) -> Option<String> {
        if on_postgres() {
            return None;
        }
        let db = self.db().await;
        let verdict: String = sqlx::query_scalar("pragma integrity_check")
            .fetch_one(&db)
            .await
            .unwrap();
        db.close().await;
        Some(verdict)
    }

    /// Opens the database of the stopped server for checks: its SQLite file, or its PostgreSQL
    /// database in the PostgreSQL pass. The SQL must suit both (`$1` parameters, no engine's
    /// own functions).
    pub async fn db(&self) -> sqlx::AnyPool {
        open_db(&self.data_dir).await
    }
}

/// The database of the servers on `data_dir` (see [`TestServer::db`]).
pub async fn open_db(data_dir: &Path) -> sqlx::AnyPool {
    sqlx::any::install_default_drivers();
    let url = match on_postgres() {
        true => create_database(&pg_url().unwrap(), &database_for(data_dir)).await,
        false => format!(
            "sqlite://{}",
            data_dir.join("agentmux.db").to_str().expect("a UTF-8 path")
        ),
    };
    sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap()
}

/// `GET path` as `token`'s principal: the status, and the JSON answer (null when none).
pub async fn get_as(server: &TestServer, token: &str, path: &str) -> (u16, Value) {
    crate::repos::rest(server, Some(token), "GET", path, None).await
}

/// `DELETE path` as `token`'s principal: the status, and the JSON answer (null when none).
pub async fn delete_as(server: &TestServer, token: &str, path: &str) -> (u16, Value) {
    crate::repos::rest(server, Some(token), "DELETE", path, None).await
}

/// Makes the database behind `pool` refuse each new row of `table` for which `condition` (SQL
/// on `new`) holds, or (`refuse` false) no longer: a failing write the server can't tell from
/// a real one, on either engine.
pub async fn refuse_rows(pool: &sqlx::AnyPool, table: &str, condition: &str, refuse: bool) {
    let postgres = pool.acquire().await.unwrap().backend_name() == "PostgreSQL";
    let name = format!("refuse_{table}");
    let sql = match (postgres, refuse) {
        (false, true) => format!(
            "create trigger {name} before insert on {table} when {condition} \
             begin select raise(abort, 'refused'); end"
        ),
        (false, false) => format!("drop trigger {name}"),
        (true, true) => format!(
            "create function {name}() returns trigger language plpgsql as \
             $$ begin if {condition} then raise exception 'refused'; end if; return new; end $$; \
             create trigger {name} before insert on {table} \
             for each row execute function {name}()"
        ),
        (true, false) => format!("drop trigger {name} on {table}; drop function {name}()"),
    };
    sqlx::raw_sql(&sql).execute(pool).await.unwrap();
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

/// The text of a stored prompt's payload (`message.content`).
pub fn prompt_text(payload: &str) -> String {
    let v: Value = serde_json::from_str(payload).expect("a JSON payload");
    v["message"]["content"]
        .as_str()
        .expect("a text prompt")
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

/// The output of `agentmux serve` with `args` and `env` (and a fresh data dir) once it exits by
/// itself, or after it was stopped with SIGTERM once it listened; and whether it listened.
pub async fn serve_output(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    use tokio::io::AsyncReadExt;
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmux"));
    cmd.arg("serve")
        .args([
            "--bind",
            "127.0.0.1:0",
            "--demo-delay-ms",
            "0",
            "--data-dir",
        ])
        .arg(tmp.path())
        .args(args)
        .env_remove("AGENTMUX_STORE_URL")
        .env_remove("AGENTMUX_CONFIG")
        .env_remove("AGENTMUX_CLUSTER_NATS")
        .env_remove("AGENTMUX_CLUSTER_SECRET")
        .env("RUST_LOG", "agentmux=debug,sqlx=debug")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut stdout = String::new();
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 64];
    let n = tokio::time::timeout(std::time::Duration::from_secs(30), out.read(&mut first))
        .await
        .expect("the server starts or exits in time")
        .unwrap();
    stdout.push_str(&String::from_utf8_lossy(&first[..n]));
    let listened = stdout.starts_with("listening on http://");
    if listened {
        let addr = stdout
            .trim_start_matches("listening on http://")
            .lines()
            .next()
            .unwrap()
            .to_owned();
        // What a user or a scraper can read while it runs.
        for path in ["/metrics", "/healthz", "/api/sessions"] {
            let body = reqwest::get(format!("http://{addr}{path}"))
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            stdout.push_str(&body);
        }
        let mut c = Client::connect(&addr).await;
        chat_ack(&mut c, "a", "hello").await;
        c.until_result("a").await;
        let pid = child.id().unwrap();
        std::process::Command::new("kill")
            .args(["-15", &pid.to_string()])
            .status()
            .unwrap();
    }
    let status = tokio::time::timeout(std::time::Duration::from_secs(30), child.wait())
        .await
        .expect("the server exits in time")
        .unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    assert_eq!(status.success(), listened, "{stderr}");
    (listened, format!("{stdout}\n{stderr}"))
}

/// The value of the `GET /metrics` line named `name` (its labels included): 0 until the server
/// exports it.
pub async fn metric(server: &TestServer, name: &str) -> u64 {
    let text = reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map_or(0, |v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{name} is a whole number: {v}"))
        })
}

/// Polls `check` (every 100 ms) until it returns something, for at most [`WAIT`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
