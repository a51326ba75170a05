//! Several nodes on one PostgreSQL store: a conversation runs on one node at a time, a node
//! that dies or stalls leaves its conversations to the others once its lease expires, and a
//! stalled node that was taken over can't write any more (the fence). With NATS, a command on
//! any node reaches the conversation's node and every node's followers get its frames.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::common::{
    Client, Gates, TestServer, chat_ack, create_database, drop_database, nats_bin, pg_url,
    reply_text, serve_output,
};

/// Length of the nodes' leases in the tests where a lease must expire.
const LEASE_SECS: u64 = 2;
/// Length of the nodes' leases in the other tests: long enough that a node's renewal, late on
/// a loaded machine, never lets another node take over.
pub(crate) const LONG_LEASE_SECS: u64 = 60;

/// The secret the nodes of the tests' clusters share.
pub(crate) const SECRET: &str = "the test cluster's secret, 32 bytes or more";

/// The password of the user the nodes log in to the tests' NATS servers as.
const NATS_PASSWORD: &str = "nats-Pa55word";

/// A NATS server of one test on a loopback port of its own (killed on drop), which requires
/// a login: by default a user and password that its URL carries.
pub(crate) struct Nats {
    bin: String,
    port: u16,
    auth: Vec<String>,
    child: Child,
}

impl Nats {
    /// None (after saying so) when no NATS server binary is configured outside CI.
    pub(crate) async fn start() -> Option<Self> {
        let auth = ["--user", "agentmux", "--pass", NATS_PASSWORD].map(str::to_owned);
        Self::start_with(auth.to_vec()).await
    }

    /// A server run with the authentication options `auth`.
    pub(crate) async fn start_with(auth: Vec<String>) -> Option<Self> {
        let bin = nats_bin()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Self::spawn(&bin, port, &auth).await;
        Some(Nats {
            bin,
            port,
            auth,
            child,
        })
    }

    async fn spawn(bin: &str, port: u16, auth: &[String]) -> Child {
        let child = Command::new(bin)
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .args(auth)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start nats-server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(Instant::now() < deadline, "nats-server did not listen");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        child
    }

    /// The server's URL with the login of [`Nats::start`].
    pub(crate) fn url(&self) -> String {
        format!("nats://agentmux:{NATS_PASSWORD}@127.0.0.1:{}", self.port)
    }

    /// The server's URL with no login.
    pub(crate) fn bare_url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// A client of the server, logged in as the nodes are (anyone who learnt the NATS login).
    pub(crate) async fn client(&self) -> async_nats::Client {
        async_nats::ConnectOptions::with_user_and_password("agentmux".into(), NATS_PASSWORD.into())
            .connect(self.bare_url())
            .await
            .unwrap()
    }

    /// Stops the server and starts it again on the same port.
    async fn restart(&mut self) {
        self.child.kill().await.unwrap();
        self.child = Self::spawn(&self.bin, self.port, &self.auth).await;
    }
}

/// Nodes sharing one database of their own (dropped at the end) and one data directory (as
/// nodes share the storage their conversations work in), with demo gates, and NATS if asked.
pub(crate) struct Cluster {
    data: tempfile::TempDir,
    pub(crate) nats: Option<Nats>,
    server: String,
    database: String,
    pub(crate) url: String,
    pub(crate) gates: Gates,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        drop_database(&self.server, &self.database);
    }
}

impl Cluster {
    /// [`Cluster::new`] whose nodes route through a NATS server of their own.
    pub(crate) async fn routed(lease_secs: u64) -> Option<Self> {
        Self::routed_through(lease_secs, Nats::start().await?).await
    }

    /// [`Cluster::new`] whose nodes route through `nats`.
    pub(crate) async fn routed_through(lease_secs: u64, nats: Nats) -> Option<Self> {
        let mut cluster = Self::new(lease_secs).await?;
        cluster.nats = Some(nats);
        Some(cluster)
    }

    /// None (after saying so) when no PostgreSQL server is configured outside CI.
    async fn new(lease_secs: u64) -> Option<Self> {
        Self::configured(lease_secs, "").await
    }

    /// [`Cluster::new`] with `cluster_toml` added to the nodes' `[cluster]` settings.
    pub(crate) async fn configured(lease_secs: u64, cluster_toml: &str) -> Option<Self> {
        let Some(server) = pg_url() else {
            eprintln!("skipped: AGENTMUX_TEST_PG_URL is not set (see scripts/pg.sh)");
            return None;
        };
        let database = format!("agentmux_cluster_{}", uuid::Uuid::new_v4().simple());
        let url = create_database(&server, &database).await;
        let gates = Gates::new(&format!(
            "[cluster]\nlease_secs = {lease_secs}\n{cluster_toml}\n"
        ));
        Some(Cluster {
            data: tempfile::tempdir().unwrap(),
            nats: None,
            server,
            database,
            url,
            gates,
        })
    }

    /// Starts node `name`.
    pub(crate) async fn node(&self, name: &str) -> TestServer {
        self.node_with(name, &[], &[("AGENTMUX_CLUSTER_SECRET", SECRET)])
            .await
    }

    /// Starts node `name` with `extra` arguments and the environment `env`.
    pub(crate) async fn node_with(
        &self,
        name: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> TestServer {
        let mut args = vec![
            "--config".to_owned(),
            self.gates.config.clone(),
            "--demo-delay-ms".to_owned(),
            "0".to_owned(),
            "--store-url".to_owned(),
            self.url.clone(),
            "--node-id".to_owned(),
            name.to_owned(),
        ];
        if let Some(nats) = &self.nats {
            args.extend(["--cluster-nats".to_owned(), nats.url()]);
        }
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        TestServer::start_in(self.data.path(), &args, env).await
    }

    /// Waits for turn 2 of `x` on `c` and checks it: it remembers turn 1, and the store holds
    /// gap-free `seq`s with every frame the clients saw (`seen` earlier, and this turn's).
    /// Returns what is stored.
    async fn second_turn(&self, c: &mut Client, seen: &[Value]) -> Vec<(i64, String, String)> {
        let second = c.until_result("x").await;
        assert_eq!(reply_text(&second), "Echo: two (turn 2)");
        let stored = self.stored("x").await;
        assert_gap_free(&stored);
        assert_all_stored(seen, &stored);
        assert_all_stored(&second, &stored);
        stored
    }

    /// The stored frames of `agent_id`, as `(seq, message_type, payload)` in `seq` order.
    pub(crate) async fn stored(&self, agent_id: &str) -> Vec<(i64, String, String)> {
        let pool = sqlx::PgPool::connect(&self.url).await.unwrap();
        let rows = sqlx::query_as(
            "select m.seq, m.message_type, m.payload from messages m
             join session_info s on s.id = m.session_pk
             where s.agent_id = $1 order by m.seq",
        )
        .bind(agent_id)
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        rows
    }

    /// When the lease on `agent_id` expires, as the store has it (`lease_expires_at`, as
    /// text), with the node holding it: read after that node stopped, it is when the lease
    /// ends for good.
    async fn lease_end(&self, agent_id: &str) -> (String, String) {
        let pool = sqlx::PgPool::connect(&self.url).await.unwrap();
        let row = sqlx::query_as(
            "select lease_node, lease_expires_at::text from session_info where agent_id = $1",
        )
        .bind(agent_id)
        .fetch_one(&pool)
        .await
        .unwrap();
        pool.close().await;
        row
    }

    /// Asserts that the node that took `agent_id` over did so only once the lease that ended
    /// at `lease_end` had: the `node_lost` result it stored on taking over is no earlier.
    async fn taken_over_after(&self, agent_id: &str, lease_end: &str) {
        let pool = sqlx::PgPool::connect(&self.url).await.unwrap();
        let (stored_at, after): (String, bool) = sqlx::query_as(
            "select m.created_at,
                    m.created_at::timestamptz >= date_trunc('milliseconds', $2::timestamptz)
             from messages m join session_info s on s.id = m.session_pk
             where s.agent_id = $1 and m.message_type = 'result'
               and m.payload like '%\"node_lost\"%'",
        )
        .bind(agent_id)
        .bind(lease_end)
        .fetch_one(&pool)
        .await
        .unwrap();
        pool.close().await;
        assert!(
            after,
            "taken over at {stored_at}, before the lease ended at {lease_end}"
        );
    }
}

/// Sends `content` to `agent_id` until a node takes it (an `ack`); every answer before that
/// must be `owned_elsewhere`. Returns how many were.
async fn chat_until_taken(c: &mut Client, agent_id: &str, content: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(LEASE_SECS * 5 + 10);
    let mut refused = 0;
    loop {
        let answer = chat_ack(c, agent_id, content).await;
        if answer["message_type"] == "ack" {
            return refused;
        }
        assert_eq!(answer["code"], "owned_elsewhere", "{answer}");
        refused += 1;
        assert!(
            Instant::now() < deadline,
            "no node took `{agent_id}` over in time"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Stored `seq`s run 1, 2, 3, … with no gap and no repeat.
fn assert_gap_free(stored: &[(i64, String, String)]) {
    let seqs: Vec<i64> = stored.iter().map(|(seq, _, _)| *seq).collect();
    let expected: Vec<i64> = (1..=seqs.len() as i64).collect();
    assert_eq!(seqs, expected);
}

/// Every frame with a `seq` that `frames` hold is stored under that `seq`, with that type.
fn assert_all_stored(frames: &[Value], stored: &[(i64, String, String)]) {
    for frame in frames
        .iter()
        .filter(|f| f["seq"].is_i64() && f["message_type"] != "ack")
    {
        let seq = frame["seq"].as_i64().unwrap();
        let row = stored
            .iter()
            .find(|(s, _, _)| *s == seq)
            .unwrap_or_else(|| panic!("seq {seq} a client saw is not stored"));
        assert_eq!(frame["message_type"], row.1.as_str(), "seq {seq}");
        let payload: Value = serde_json::from_str(&row.2).unwrap();
        if frame["message_type"] != "status" {
            assert_eq!(frame["message"], payload, "seq {seq}");
        }
    }
}

fn signal(server: &TestServer, sig: &str) {
    let pid = server.child.id().expect("running");
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// `--cluster-nats` with a server that can't be reached, one that looks like a flag, or several
/// of which one carries a password: the node refuses to start with a clear message that shows
/// no password. A cluster without a shared store is refused before NATS is tried. A list of
/// servers that can be reached is taken.
#[cfg_attr(
    any(no_test_pg, no_test_nats),
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL) and nats-server (AGENTMUX_TEST_NATS_BIN), not configured here"
)]
#[tokio::test]
async fn a_bad_or_unreachable_nats_refuses_to_start() {
    const PASSWORD: &str = "N4ts-S3cret-pw";
    let (listened, output) = serve_output(&["--cluster-nats=nats://127.0.0.1:1"], &[]).await;
    assert!(!listened, "{output}");
    assert!(
        output.contains("needs a PostgreSQL store that every node shares"),
        "{output}"
    );
    let Some(cluster) = Cluster::routed(LONG_LEASE_SECS).await else {
        return;
    };
    let cases = [
        format!("nats://agentmux:{PASSWORD}@127.0.0.1:1"),
        format!("nats://127.0.0.1:1,nats://agentmux:{PASSWORD}@127.0.0.1:2"),
        "-rf".to_owned(),
    ];
    let secret = [("AGENTMUX_CLUSTER_SECRET", SECRET)];
    for nats in cases {
        let nats = format!("--cluster-nats={nats}");
        let args = ["--store-url", cluster.url.as_str(), nats.as_str()];
        let (listened, output) = serve_output(&args, &secret).await;
        assert!(!listened, "{nats}: {output}");
        assert!(
            output.contains("cannot connect to NATS at"),
            "{nats}: {output}"
        );
        assert!(!output.contains(PASSWORD), "{nats}: {output}");
    }
    // A value that starts with `-` as its own argument is a flag to the parser: refused too.
    let args = ["--store-url", cluster.url.as_str(), "--cluster-nats", "-x"];
    let (listened, output) = serve_output(&args, &[]).await;
    assert!(!listened, "{output}");
    let real = cluster.nats.as_ref().unwrap().url();
    let nats = format!("--cluster-nats={real}, {real}");
    let args = ["--store-url", cluster.url.as_str(), nats.as_str()];
    let (listened, output) = serve_output(&args, &secret).await;
    assert!(listened, "{output}");
}

#[cfg_attr(
    no_test_pg,
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL), not configured here"
)]
#[tokio::test]
async fn a_conversation_runs_on_one_node_at_a_time_and_moves_when_its_node_stops() {
    let Some(cluster) = Cluster::new(LONG_LEASE_SECS).await else {
        return;
    };
    cluster.gates.open_all("x", 1..=2);
    let mut a = cluster.node("node-a").await;
    let b = cluster.node("node-b").await;
    let mut ca = a.client().await;
    let mut cb = b.client().await;
    ca.chat("x", "one").await;
    let first = ca.until_result("x").await;
    assert_eq!(reply_text(&first), "Echo: one (turn 1)");

    // While node A runs it, node B refuses it, names the owner, and stores nothing.
    let before = cluster.stored("x").await;
    let refused = chat_ack(&mut cb, "x", "two").await;
    assert_eq!(refused["code"], "owned_elsewhere", "{refused}");
    assert_eq!(refused["agent_id"], "x");
    assert!(
        refused["error"].as_str().unwrap().contains("`node-a`"),
        "{refused}"
    );
    let metrics = reqwest::get(a.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("agentmux_leases_held 1\n"), "{metrics}");
    assert_eq!(cluster.stored("x").await, before);

    // A stops (releasing its leases): B takes the conversation at once, with its history.
    assert!(a.terminate().await.success());
    assert_eq!(chat_until_taken(&mut cb, "x", "two").await, 0);
    cluster.second_turn(&mut cb, &first).await;
}

#[cfg_attr(
    no_test_pg,
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL), not configured here"
)]
#[tokio::test]
async fn a_killed_nodes_conversation_resumes_on_another_node_once_its_lease_expires() {
    let Some(cluster) = Cluster::new(LEASE_SECS).await else {
        return;
    };
    cluster.gates.open("x", 2);
    let mut a = cluster.node("node-a").await;
    let b = cluster.node("node-b").await;
    let mut ca = a.client().await;
    let mut cb = b.client().await;
    // Turn 1 runs on A and waits at its gate.
    ca.chat("x", "one").await;
    let seen = ca
        .recv_until(|f| f["message_type"] == "stream_event" && f["agent_id"] == "x")
        .await;
    a.kill9().await;
    let (holder, lease_end) = cluster.lease_end("x").await;
    assert_eq!(holder, "node-a");

    chat_until_taken(&mut cb, "x", "two").await;
    // B took over only once the dead node's lease had expired.
    cluster.taken_over_after("x", &lease_end).await;
    // B remembers turn 1's prompt; the turn A left running was closed as lost.
    let stored = cluster.second_turn(&mut cb, &seen).await;
    let results: Vec<Value> = stored
        .iter()
        .filter(|(_, kind, _)| kind == "result")
        .map(|(_, _, payload)| serde_json::from_str(payload).unwrap())
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0]["is_error"], true);
    assert_eq!(results[0]["terminal_reason"], "node_lost");
    assert_eq!(results[1]["is_error"], false);
}

#[cfg_attr(
    no_test_pg,
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL), not configured here"
)]
#[tokio::test]
async fn a_stalled_node_that_was_taken_over_stores_nothing_more() {
    let Some(cluster) = Cluster::new(LEASE_SECS).await else {
        return;
    };
    cluster.gates.open("x", 2);
    let a = cluster.node("node-a").await;
    let b = cluster.node("node-b").await;
    let mut ca = a.client().await;
    let mut cb = b.client().await;
    ca.chat("x", "one").await;
    ca.recv_until(|f| f["message_type"] == "stream_event" && f["agent_id"] == "x")
        .await;

    // A stalls past its lease; B takes the conversation over and runs a turn.
    signal(&a, "-STOP");
    let (holder, lease_end) = cluster.lease_end("x").await;
    assert_eq!(holder, "node-a");
    chat_until_taken(&mut cb, "x", "two").await;
    cluster.taken_over_after("x", &lease_end).await;
    let second = cb.until_result("x").await;
    assert_eq!(reply_text(&second), "Echo: two (turn 2)");
    let after_takeover = cluster.stored("x").await;

    // A wakes up and its turn goes on: nothing of it is stored, A's clients are told the
    // conversation moved, and A sends further chats to B.
    signal(&a, "-CONT");
    cluster.gates.open("x", 1);
    let frames = ca
        .recv_until(|f| f["message_type"] == "status" && f["status"] == "moved")
        .await;
    assert!(
        frames
            .iter()
            .all(|f| f["message_type"] != "result" && f["message_type"] != "assistant"),
        "{frames:?}"
    );
    let again = chat_ack(&mut ca, "x", "three").await;
    assert_eq!(again["code"], "owned_elsewhere", "{again}");
    assert!(
        again["error"].as_str().unwrap().contains("`node-b`"),
        "{again}"
    );
    // A's actor ended with the `moved` status: nothing of it can land later.
    let stored = cluster.stored("x").await;
    assert_eq!(stored, after_takeover, "A stored after the take-over");
    assert_gap_free(&stored);
    assert!(
        stored
            .iter()
            .all(|(_, _, payload)| !payload.contains("Echo: one")),
        "A's turn 1 reply was stored"
    );
}

#[cfg_attr(
    no_test_pg,
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL), not configured here"
)]
#[tokio::test]
async fn two_nodes_racing_to_start_a_conversation_start_it_once() {
    let Some(cluster) = Cluster::new(LONG_LEASE_SECS).await else {
        return;
    };
    let a = cluster.node("node-a").await;
    let b = cluster.node("node-b").await;
    let mut ca = a.client().await;
    let mut cb = b.client().await;
    for i in 0..8 {
        let agent_id = format!("race-{i}");
        cluster.gates.open_all(&agent_id, 1..=1);
        let (on_a, on_b) = tokio::join!(
            chat_ack(&mut ca, &agent_id, "hello"),
            chat_ack(&mut cb, &agent_id, "hello")
        );
        let acks = [&on_a, &on_b]
            .iter()
            .filter(|f| f["message_type"] == "ack")
            .count();
        assert_eq!(acks, 1, "{on_a} {on_b}");
        let refused = if on_a["message_type"] == "ack" {
            &on_b
        } else {
            &on_a
        };
        assert_eq!(refused["code"], "owned_elsewhere", "{refused}");
        let stored = cluster.stored(&agent_id).await;
        assert_eq!(
            stored.iter().filter(|(_, kind, _)| kind == "user").count(),
            1,
            "{stored:?}"
        );
    }
    let pool = sqlx::PgPool::connect(&cluster.url).await.unwrap();
    let rows: i64 = sqlx::query_scalar("select count(*) from session_info")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 8);
    pool.close().await;
}

#[cfg_attr(
    no_test_pg,
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL), not configured here"
)]
#[tokio::test]
async fn a_node_id_must_be_a_plain_name() {
    let Some(cluster) = Cluster::new(LONG_LEASE_SECS).await else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    for bad in ["-rf", "a b", "node/1", &"n".repeat(129)] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
            .args([
                "serve",
                "--bind",
                "127.0.0.1:0",
                "--store-url",
                &cluster.url,
            ])
            .arg("--data-dir")
            .arg(data.path())
            .arg(format!("--node-id={bad}"))
            .env_remove("AGENTMUX_CONFIG")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad:?} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("node id"), "{bad:?}: {stderr}");
    }
}

/// The frames of `agent_id` a client got, stored ones only, as `(seq, message_type)`.
fn stored_seen(frames: &[Value], agent_id: &str) -> Vec<(i64, String)> {
    frames
        .iter()
        .filter(|f| f["agent_id"] == agent_id && f["seq"].is_i64() && f["message_type"] != "ack")
        .map(|f| {
            (
                f["seq"].as_i64().unwrap(),
                f["message_type"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[cfg_attr(
    any(no_test_pg, no_test_nats),
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL) and nats-server (AGENTMUX_TEST_NATS_BIN), not configured here"
)]
#[tokio::test]
async fn three_nodes_route_commands_to_the_owner_and_relay_its_frames() {
    let Some(cluster) = Cluster::routed(LONG_LEASE_SECS).await else {
        return;
    };
    cluster.gates.open_all("x", 1..=2);
    let a = cluster.node("node-a").await;
    let b = cluster.node("node-b").await;
    let c = cluster.node("node-c").await;
    let (mut ca, mut cb, mut cc) = (a.client().await, b.client().await, c.client().await);

    // A socket on node A starts the conversation; a socket on node B follows it.
    ca.chat("x", "one").await;
    ca.until_result("x").await;
    cb.send(json!({"type": "subscribe", "agent_id": "x", "since_seq": 0}))
        .await;
    let mut on_b = cb.until_result("x").await;

    // A chat sent through node C runs on A, and its frames reach B and C.
    let ack = chat_ack(&mut cc, "x", "two").await;
    assert_eq!(ack["message_type"], "ack", "{ack}");
    let on_c = cc.until_result("x").await;
    assert_eq!(reply_text(&on_c), "Echo: two (turn 2)");
    on_b.extend(cb.until_result("x").await);
    let stored = cluster.stored("x").await;
    assert_gap_free(&stored);
    let all: Vec<(i64, String)> = stored
        .iter()
        .map(|(seq, kind, _)| (*seq, kind.clone()))
        .collect();
    assert_eq!(
        stored_seen(&on_b, "x"),
        all,
        "B saw every stored frame, in order"
    );
    assert_all_stored(&on_c, &stored);

    // An interrupt through C stops the turn running on A. A's socket still holds the frames
    // of turn two (it follows the conversation): the stream_event waited for is the first one
    // after the ack of turn three, so that the interrupt can't come before the turn started.
    ca.chat("x", "three").await;
    ca.recv_until(|f| f["message_type"] == "ack" && f["agent_id"] == "x")
        .await;
    ca.recv_until(|f| f["message_type"] == "stream_event" && f["agent_id"] == "x")
        .await;
    cc.send(json!({"type": "interrupt", "agent_id": "x"})).await;
    let interrupted = cc.until_result("x").await;
    let result = interrupted.last().unwrap();
    assert_eq!(result["message"]["is_error"], true, "{result}");
    let metrics = reqwest::get(c.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("agentmux_forwarded_commands_total 2\n"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("agentmux_relayed_frames_total 0\n"),
        "{metrics}"
    );
    assert_gap_free(&cluster.stored("x").await);
}

#[cfg_attr(
    any(no_test_pg, no_test_nats),
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL) and nats-server (AGENTMUX_TEST_NATS_BIN), not configured here"
)]
#[tokio::test]
async fn a_chat_through_any_node_resumes_a_killed_owners_conversation() {
    let Some(cluster) = Cluster::routed(LEASE_SECS).await else {
        return;
    };
    cluster.gates.open("x", 2);
    let mut a = cluster.node("node-a").await;
    let b = cluster.node("node-b").await;
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    ca.chat("x", "one").await;
    let seen = ca
        .recv_until(|f| f["message_type"] == "stream_event" && f["agent_id"] == "x")
        .await;
    a.kill9().await;
    let (holder, lease_end) = cluster.lease_end("x").await;
    assert_eq!(holder, "node-a");

    // One chat: it waits for the dead node's lease and then runs here, with the history.
    let ack = chat_ack(&mut cb, "x", "two").await;
    assert_eq!(ack["message_type"], "ack", "{ack}");
    cluster.taken_over_after("x", &lease_end).await;
    cluster.second_turn(&mut cb, &seen).await;
}

#[cfg_attr(
    any(no_test_pg, no_test_nats),
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL) and nats-server (AGENTMUX_TEST_NATS_BIN), not configured here"
)]
#[tokio::test]
async fn routing_recovers_from_a_nats_restart() {
    let Some(mut cluster) = Cluster::routed(LONG_LEASE_SECS).await else {
        return;
    };
    cluster.gates.open_all("x", 1..=3);
    let a = cluster.node("node-a").await;
    let b = cluster.node("node-b").await;
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    ca.chat("x", "one").await;
    ca.until_result("x").await;
    assert_eq!(chat_ack(&mut cb, "x", "two").await["message_type"], "ack");
    cb.until_result("x").await;
    let before = cluster.stored("x").await;

    cluster.nats.as_mut().unwrap().restart().await;

    // Until both nodes are back on NATS a chat through B may fail (typed); then it runs on A.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = chat_ack(&mut cb, "x", "three").await;
        if answer["message_type"] == "ack" {
            break;
        }
        assert!(
            ["backend_unavailable", "owned_elsewhere"].contains(&answer["code"].as_str().unwrap()),
            "{answer}"
        );
        assert!(Instant::now() < deadline, "routing did not recover");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let third = cb.until_result("x").await;
    assert_eq!(reply_text(&third), "Echo: three (turn 3)");
    let stored = cluster.stored("x").await;
    assert_gap_free(&stored);
    assert_eq!(&stored[..before.len()], &before[..], "stored frames kept");
}

/// `agentmux cluster status` for the cluster's store: its exit status and output.
fn cluster_status(args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
        .args(["cluster", "status"])
        .args(args)
        .env_remove("AGENTMUX_STORE_URL")
        .env_remove("AGENTMUX_CONFIG")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `owner_node` of each conversation REST lists on `server`, by `agent_id`.
async fn owners(server: &TestServer) -> Vec<(String, Value)> {
    let list: Value = reqwest::get(server.url("/api/sessions"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut owners: Vec<(String, Value)> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["agent_id"].as_str().unwrap().to_owned(),
                s["owner_node"].clone(),
            )
        })
        .collect();
    owners.sort_by(|a, b| a.0.cmp(&b.0));
    owners
}

#[cfg_attr(
    no_test_pg,
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL), not configured here"
)]
#[tokio::test]
async fn the_status_command_and_the_api_say_which_node_runs_what() {
    let Some(cluster) = Cluster::new(LONG_LEASE_SECS).await else {
        return;
    };
    cluster.gates.open("x", 1);
    cluster.gates.open("y", 1);
    let a = cluster.node("node-a").await;
    let mut b = cluster.node("node-b").await;
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    ca.chat("x", "one").await;
    ca.until_result("x").await;
    cb.chat("y", "one").await;
    cb.until_result("y").await;

    // Any node's REST API names the node that runs each conversation.
    let expected = vec![
        ("x".to_owned(), json!("node-a")),
        ("y".to_owned(), json!("node-b")),
    ];
    assert_eq!(owners(&a).await, expected);
    assert_eq!(owners(&b).await, expected);

    let (ok, out, err) = cluster_status(&["--store-url", &cluster.url]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let node_a = lines
        .iter()
        .position(|l| l.starts_with("node-a "))
        .expect(&out);
    assert!(lines[node_a].contains(" up "), "{out}");
    assert!(lines[node_a].trim_end().ends_with(" 1"), "{out}");
    assert_eq!(lines[node_a + 1].trim(), "local/x", "{out}");
    let node_b = lines
        .iter()
        .position(|l| l.starts_with("node-b "))
        .expect(&out);
    assert_eq!(lines[node_b + 1].trim(), "local/y", "{out}");

    // A node that stops gives its conversations up and says so.
    assert!(b.terminate().await.success());
    let (ok, out, err) = cluster_status(&["--store-url", &cluster.url]);
    assert!(ok, "{err}");
    let line = out.lines().find(|l| l.starts_with("node-b ")).expect(&out);
    assert!(line.contains(" stopped "), "{out}");
    assert!(line.trim_end().ends_with(" 0"), "{out}");
    assert_eq!(owners(&a).await[1], ("y".to_owned(), Value::Null));

    // No store, or not a PostgreSQL one: a clear error, never a password.
    let (ok, _, err) = cluster_status(&[]);
    assert!(!ok);
    assert!(err.contains("--store-url"), "{err}");
    let (ok, _, err) = cluster_status(&["--store-url", "postgres://u:s3cret@127.0.0.1:1/x"]);
    assert!(!ok);
    assert!(!err.contains("s3cret"), "{err}");
    let (ok, _, _) = cluster_status(&["--store-url", "-x"]);
    assert!(!ok);
}

/// A schedule watched by two nodes' schedulers: whichever node claims a tick, the run reaches
/// the conversation wherever it lives, marked, and completes (that each tick is claimed once is
/// the store test `each_tick_of_a_schedule_is_claimed_by_one_node`).
#[cfg_attr(
    any(no_test_pg, no_test_nats),
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL) and nats-server (AGENTMUX_TEST_NATS_BIN), not configured here"
)]
#[tokio::test]
async fn a_schedule_watched_by_two_nodes_runs_marked_turns_wherever_its_conversation_lives() {
    let Some(cluster) = Cluster::routed(LONG_LEASE_SECS).await else {
        return;
    };
    cluster.gates.open_all("tick", 1..=30);
    let a = cluster.node("node-a").await;
    let b = cluster.node("node-b").await;
    let made: Value = reqwest::Client::new()
        .post(a.url("/api/schedules"))
        .json(&json!({"name": "Tick", "agent_id": "tick", "content": "tick", "every_secs": 1}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = made["id"].as_str().expect("created").to_owned();

    // Both nodes' schedulers watch the same schedule: each tick is claimed by one of them, and
    // runs in the conversation wherever it lives.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let prompts = cluster
            .stored("tick")
            .await
            .iter()
            .filter(|(_, kind, _)| kind == "user")
            .count();
        if prompts >= 5 {
            break;
        }
        assert!(Instant::now() < deadline, "{prompts} runs in 30 s");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let deleted = reqwest::Client::new()
        .delete(b.url(&format!("/api/schedules/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    let stored = cluster.stored("tick").await;
    assert_gap_free(&stored);
    let marks: Vec<Value> = stored
        .iter()
        .filter(|(_, kind, _)| kind == "status")
        .map(|(_, _, payload)| serde_json::from_str(payload).unwrap())
        .filter(|v: &Value| v["status"] == "scheduled_run")
        .collect();
    let prompts = stored.iter().filter(|(_, kind, _)| kind == "user").count();
    assert_eq!(marks.len(), prompts, "every run is marked once");
    let results: Vec<Value> = stored
        .iter()
        .filter(|(_, kind, _)| kind == "result")
        .map(|(_, _, payload)| serde_json::from_str(payload).unwrap())
        .collect();
    assert!(
        results.iter().all(|r| r["is_error"] == false),
        "{results:?}"
    );
    let last_run = reqwest::get(a.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
        + &reqwest::get(b.url("/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
    assert!(
        !last_run.contains("agentmux_scheduled_runs_total{outcome=\"refused\"}"),
        "{last_run}"
    );
}

/// The transcript the nodes keep of their one Claude conversation, once a node kept it: its
/// agent session and content.
async fn kept_transcript(pool: &sqlx::PgPool) -> (String, Vec<u8>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let kept = sqlx::query_as("select agent_session, content from transcripts")
            .fetch_optional(pool)
            .await
            .unwrap();
        if let Some(kept) = kept {
            return kept;
        }
        assert!(Instant::now() < deadline, "no transcript kept");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg_attr(
    any(no_test_pg, no_test_claude),
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL) and the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN), not configured here"
)]
#[tokio::test]
async fn a_claude_conversation_resumes_on_a_node_whose_cli_never_saw_it() {
    let Some(cli) = crate::real_cli::real_cli() else {
        return;
    };
    let Some(cluster) = Cluster::new(LEASE_SECS).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let api = crate::real_cli::FakeApi::start(dir.path()).await;
    // Each node has a CLI home of its own: only the store is shared (and the workspaces).
    let node = |name: &'static str| {
        let home = dir.path().join(format!("home-{name}"));
        let (config_dir, config) = crate::common::config_file(&format!(
            "[claude]\nconfig_dir = {}\n[cluster]\nlease_secs = {LEASE_SECS}\n",
            crate::common::toml_string(&home.to_string_lossy())
        ));
        let args = [
            "--backend".to_owned(),
            "claude".to_owned(),
            "--claude-bin".to_owned(),
            cli.to_string_lossy().into_owned(),
            "--config".to_owned(),
            config,
            "--store-url".to_owned(),
            cluster.url.clone(),
            "--node-id".to_owned(),
            name.to_owned(),
        ];
        let env = [
            ("ANTHROPIC_BASE_URL", api.url.clone()),
            ("ANTHROPIC_API_KEY", "dummy".to_owned()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
            ("CLAUDE_CODE_MAX_RETRIES", "0".to_owned()),
        ];
        let data = cluster.data.path().to_path_buf();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let server = TestServer::start_in(&data, &args, &env).await;
            (server, home, config_dir)
        }
    };

    let (mut a, _, _a_config) = node("node-a").await;
    let mut ca = a.client().await;
    ca.chat("x", "The secret word is tangerine. Reply OK.")
        .await;
    let first = ca.until_result("x").await;
    assert_eq!(first.last().unwrap()["message"]["is_error"], false);
    // Node A keeps the CLI's transcript in the store after the turn; then it dies.
    let pool = sqlx::PgPool::connect(&cluster.url).await.unwrap();
    let (agent_session, _) = kept_transcript(&pool).await;
    pool.close().await;
    a.kill9().await;

    // Node B, whose CLI never ran the conversation, resumes it once A's lease expired.
    let (b, home_b, _b_config) = node("node-b").await;
    let mut cb = b.client().await;
    chat_until_taken(&mut cb, "x", "What was the secret word?").await;
    let second = cb.until_result("x").await;
    let result = second.last().unwrap();
    assert_eq!(result["message"]["is_error"], false, "{result}");
    assert_eq!(result["message"]["session_id"], agent_session.as_str());
    let sent = api.requests();
    let last = serde_json::to_string(sent.last().unwrap()).unwrap();
    assert!(
        last.contains("tangerine"),
        "the resumed CLI did not send the history: {last}"
    );
    let restored = std::fs::read_dir(home_b.join("projects"))
        .unwrap()
        .flatten()
        .any(|d| d.path().join(format!("{agent_session}.jsonl")).is_file());
    assert!(
        restored,
        "the transcript was not put back in node B's CLI home"
    );
}

/// The transcript a node keeps in the shared store (for another node to resume from) is read
/// without following a symbolic link: an agent that put a link to another file where its
/// transcript was can't have that file kept in the store, and the copy kept before stays.
#[cfg_attr(
    no_test_pg,
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL), not configured here"
)]
#[tokio::test]
async fn a_transcript_replaced_by_a_link_is_not_kept() {
    let Some(cluster) = Cluster::new(LONG_LEASE_SECS).await else {
        return;
    };
    let fx = crate::claude::Fixture::new("");
    let secret = fx.dir.path().join("secret.txt");
    std::fs::write(&secret, "not-for-the-store\n").unwrap();
    let args = ["--store-url", &cluster.url, "--node-id", "node-a"];
    let server = fx.start_with(&args, &[]).await;
    let mut c = server.client().await;
    let pool = sqlx::PgPool::connect(&cluster.url).await.unwrap();
    c.chat("x", "one").await;
    c.until_result("x").await;
    let (agent_session, first) = kept_transcript(&pool).await;
    assert!(String::from_utf8_lossy(&first).contains("one"));
    let projects = fx.dir.path().join("claude-home").join("projects");
    let transcript = std::fs::read_dir(&projects)
        .unwrap()
        .flatten()
        .map(|d| d.path().join(format!("{agent_session}.jsonl")))
        .find(|p| p.is_file())
        .expect("the CLI's transcript");
    std::fs::remove_file(&transcript).unwrap();
    std::os::unix::fs::symlink(&secret, &transcript).unwrap();

    turn_until_idle(&mut c, "two").await;
    let (_, now) = kept_transcript(&pool).await;
    let now = String::from_utf8_lossy(&now).into_owned();
    assert!(!now.contains("not-for-the-store"), "{now}");
    assert_eq!(now.as_bytes(), first.as_slice());
    pool.close().await;
}

/// Runs a turn of conversation `x` and waits until it is idle: the transcript is read for the
/// store once a turn has ended, before `idle` is sent.
async fn turn_until_idle(c: &mut Client, content: &str) {
    c.chat("x", content).await;
    c.until_result("x").await;
    c.recv_until(|f| f["message_type"] == "status" && f["status"] == "idle")
        .await;
}

/// The transcript a node keeps in the shared store is read only from a file with no other
/// hard link (an agent that hard-linked another file where its transcript was can't have it
/// kept), and at most `claude.max_transcript_bytes` of it: a larger one is not kept. Either
/// way the copy kept before stays, for another node to resume from.
#[cfg_attr(
    no_test_pg,
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL), not configured here"
)]
#[tokio::test]
async fn a_hard_linked_or_oversized_transcript_is_not_kept() {
    let Some(cluster) = Cluster::new(LONG_LEASE_SECS).await else {
        return;
    };
    let limit = 64 << 10;
    let fx = crate::claude::Fixture::new(&format!("[claude]\nmax_transcript_bytes = {limit}\n"));
    let secret = fx.dir.path().join("secret.txt");
    std::fs::write(&secret, "not-for-the-store\n").unwrap();
    let args = ["--store-url", &cluster.url, "--node-id", "node-a"];
    let server = fx.start_with(&args, &[]).await;
    let mut c = server.client().await;
    let pool = sqlx::PgPool::connect(&cluster.url).await.unwrap();
    turn_until_idle(&mut c, "one").await;
    let (agent_session, first) = kept_transcript(&pool).await;
    assert!(String::from_utf8_lossy(&first).contains("one"));
    let projects = fx.dir.path().join("claude-home").join("projects");
    let transcript = std::fs::read_dir(&projects)
        .unwrap()
        .flatten()
        .map(|d| d.path().join(format!("{agent_session}.jsonl")))
        .find(|p| p.is_file())
        .expect("the CLI's transcript");

    // A hard link to another file.
    let own = std::fs::read(&transcript).unwrap();
    std::fs::remove_file(&transcript).unwrap();
    std::fs::hard_link(&secret, &transcript).unwrap();
    turn_until_idle(&mut c, "two").await;
    let (_, now) = kept_transcript(&pool).await;
    assert!(
        !String::from_utf8_lossy(&now).contains("not-for-the-store"),
        "a hard-linked file was kept"
    );
    assert_eq!(now, first);

    // Its own file again, grown over the limit.
    std::fs::remove_file(&transcript).unwrap();
    let mut big = own;
    big.extend_from_slice(format!("{}\n", "x".repeat(limit)).as_bytes());
    std::fs::write(&transcript, &big).unwrap();
    turn_until_idle(&mut c, "three").await;
    let (_, now) = kept_transcript(&pool).await;
    assert_eq!(now, first, "a transcript over the limit was kept");
    pool.close().await;
}

#[cfg_attr(
    no_test_pg,
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL), not configured here"
)]
#[tokio::test]
async fn a_node_that_cannot_see_a_conversations_directory_refuses_it() {
    let Some(cluster) = Cluster::new(LONG_LEASE_SECS).await else {
        return;
    };
    cluster.gates.open_all("x", 1..=2);
    let mut a = cluster.node("node-a").await;
    let mut ca = a.client().await;
    ca.chat("x", "one").await;
    let first = ca.until_result("x").await;
    let session_id = first.last().unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(a.terminate().await.success());
    // Node B does not share node A's storage: the conversation's workspace is not there.
    let workspace = cluster.data.path().join("workspaces").join(&session_id);
    std::fs::remove_dir_all(&workspace).unwrap();

    let b = cluster.node("node-b").await;
    let mut cb = b.client().await;
    assert_eq!(chat_ack(&mut cb, "x", "two").await["message_type"], "ack");
    let second = cb.until_result("x").await;
    let result = &second.last().unwrap()["message"];
    assert_eq!(result["is_error"], true, "{result}");
    let error = second
        .iter()
        .find(|f| f["message_type"] == "error")
        .expect("the turn's error says why");
    assert_eq!(error["code"], "backend_unavailable");
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("can't see the conversation's working directory"),
        "{error}"
    );
    assert!(!workspace.exists(), "an empty workspace was made instead");
}
