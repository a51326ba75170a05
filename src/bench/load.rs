//! The load scenarios: sockets that drive sessions (closed loop, or paced) and count what
//! comes back, run once against the baseline and once against agentmux.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use serde_json::json;
use tokio::net::TcpStream;
use tokio::sync::Barrier;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep_until, timeout};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

use agentmux::agent::demo::DemoBackend;
use agentmux::agent::{AgentEvent, AgentInput, AgentMessage, Backend, Launch, SpawnSpec};

use super::report::{Measurement, Percentiles, Report, Row};
use super::server::{Kind, Server, Tweaks};
use super::{Common, PROMPT};

/// Longest wait for set-up steps (connecting, warm-up turns, replays).
const SETUP_TIMEOUT: Duration = Duration::from_secs(120);
/// Connections opened at once while setting up many sockets.
const CONNECT_PARALLELISM: usize = 128;
/// Interval between WebSocket pings on an idle socket.
const IDLE_PING: Duration = Duration::from_secs(5);
/// Fractions of the peak turn rate the sweep paces at.
const SWEEP_FRACTIONS: [f64; 5] = [0.1, 0.25, 0.5, 0.75, 0.9];

/// The client's socket type.
pub type Socket = WebSocketStream<TcpStream>;

/// One demo turn's agent messages for [`PROMPT`], as the demo agent emits them.
pub async fn demo_turn() -> anyhow::Result<Vec<AgentMessage>> {
    let backend = DemoBackend {
        word_delay: Duration::ZERO,
    };
    let session_id = uuid::Uuid::new_v4().to_string();
    let mut conn = backend
        .spawn(SpawnSpec {
            agent_id: "bench".into(),
            session_id: session_id.clone(),
            cwd: std::env::temp_dir(),
            launch: Launch::New { session_id },
            model: None,
            permission_mode: None,
            prior_prompts: 0,
        })
        .await?;
    conn.input.send(AgentInput::Prompt(PROMPT.into())).await?;
    let mut turn = Vec::new();
    while let Some(event) = conn.events.recv().await {
        if let AgentEvent::Message(m) = event {
            let done = m.kind == "result";
            turn.push(m);
            if done {
                break;
            }
        }
    }
    conn.stop().await;
    Ok(turn)
}

/// Opens a WebSocket to `addr` whose close never leaves the port in TIME_WAIT, so that runs
/// with thousands of sockets can follow each other.
pub async fn connect(addr: &str) -> anyhow::Result<Socket> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    tcp.set_zero_linger()?;
    let (ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/ws"), tcp).await?;
    Ok(ws)
}

/// The routing fields of a server frame, read without parsing the JSON.
struct Peek<'a> {
    kind: &'a str,
    agent_id: &'a str,
}

/// What precedes a frame's `message_type` value.
pub const MESSAGE_TYPE: &str = "\"message_type\":\"";
/// What precedes a frame's `agent_id` value.
pub const AGENT_ID: &str = "\"agent_id\":\"";

/// The string after the first `pattern` (e.g. [`MESSAGE_TYPE`]) in `text`, up to its closing
/// quote. Frame headers come first, so this finds the header's field.
pub fn string_field<'a>(text: &'a str, pattern: &str) -> Option<&'a str> {
    let start = text.find(pattern)? + pattern.len();
    let len = text[start..].find('"')?;
    Some(&text[start..start + len])
}

/// The integer value of the first `"seq":N` in `text`.
pub fn seq_field(text: &str) -> Option<i64> {
    let start = text.find("\"seq\":")? + 6;
    let digits: &str = &text[start..];
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

fn peek(text: &str) -> Peek<'_> {
    Peek {
        kind: string_field(text, MESSAGE_TYPE).unwrap_or(""),
        agent_id: string_field(text, AGENT_ID).unwrap_or(""),
    }
}

fn is_stored(kind: &str) -> bool {
    agentmux::protocol::is_agent_message(kind)
}

fn chat_text(agent_id: &str) -> String {
    json!({"type": "chat", "agent_id": agent_id, "content": PROMPT}).to_string()
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid bounds")
}

/// What one socket counted.
struct Tally {
    frames: u64,
    stored: u64,
    turns: u64,
    errors: u64,
    first_token: Histogram<u64>,
    result: Histogram<u64>,
}

impl Tally {
    fn new() -> Self {
        Tally {
            frames: 0,
            stored: 0,
            turns: 0,
            errors: 0,
            first_token: histogram(),
            result: histogram(),
        }
    }

    fn add(&mut self, other: &Tally) {
        self.frames += other.frames;
        self.stored += other.stored;
        self.turns += other.turns;
        self.errors += other.errors;
        let _ = self.first_token.add(&other.first_token);
        let _ = self.result.add(&other.result);
    }
}

/// What one socket does.
#[derive(Clone, Default)]
struct Plan {
    /// Sessions this socket sends chats on (one turn in flight each).
    drive: Vec<String>,
    /// Sessions it only follows (`subscribe` after the warm-up).
    follow: Vec<String>,
    /// Paced load: seconds between scheduled turns of one session. None: closed loop.
    pace: Option<Duration>,
    /// Wait for the session's `evicted` status before its next chat.
    wait_evicted: bool,
}

/// A driven session's state on its socket.
struct Driven {
    chat: String,
    /// When the turn in flight was sent (or scheduled, when paced).
    sent_at: Option<Instant>,
    first_seen: bool,
    /// Set between a `result` and the `evicted` status when waiting for eviction.
    evicting: bool,
    /// Paced turns scheduled while a turn was in flight.
    backlog: VecDeque<Instant>,
}

impl Driven {
    fn busy(&self) -> bool {
        self.sent_at.is_some() || self.evicting
    }
}

struct Driver {
    ws: Socket,
    plan: Plan,
    sessions: HashMap<String, Driven>,
    tally: Tally,
    counting: bool,
}

impl Driver {
    fn new(ws: Socket, plan: Plan) -> Self {
        let sessions = plan
            .drive
            .iter()
            .map(|id| {
                (
                    id.clone(),
                    Driven {
                        chat: chat_text(id),
                        sent_at: None,
                        first_seen: false,
                        evicting: false,
                        backlog: VecDeque::new(),
                    },
                )
            })
            .collect();
        Driver {
            ws,
            plan,
            sessions,
            tally: Tally::new(),
            counting: false,
        }
    }

    async fn send_chat(&mut self, agent_id: &str, at: Instant) -> anyhow::Result<()> {
        let session = self.sessions.get_mut(agent_id).expect("driven");
        session.sent_at = Some(at);
        session.first_seen = false;
        let text = session.chat.clone();
        self.ws.send(Message::text(text)).await?;
        Ok(())
    }

    /// Starts the session's next turn if one is due.
    async fn next_turn(&mut self, agent_id: &str) -> anyhow::Result<()> {
        let session = self.sessions.get_mut(agent_id).expect("driven");
        if session.busy() {
            return Ok(());
        }
        let at = match self.plan.pace {
            None => Instant::now(),
            Some(_) => match session.backlog.pop_front() {
                Some(at) => at,
                None => return Ok(()),
            },
        };
        self.send_chat(agent_id, at).await
    }

    /// Handles one frame; returns the driven session whose turn ended, if any.
    fn on_frame(&mut self, text: &str) -> Option<String> {
        let p = peek(text);
        if self.counting {
            self.tally.frames += 1;
            if p.kind == "error" {
                self.tally.errors += 1;
            }
        }
        let session = self.sessions.get_mut(p.agent_id)?;
        if self.counting && is_stored(p.kind) {
            // Counted once per session: by the socket that drives it.
            self.tally.stored += 1;
        }
        match p.kind {
            "stream_event" if !session.first_seen => {
                session.first_seen = true;
                if let (true, Some(at)) = (self.counting, session.sent_at) {
                    let _ = self
                        .tally
                        .first_token
                        .record(at.elapsed().as_micros() as u64);
                }
                None
            }
            "result" | "error" if session.sent_at.is_some() => {
                let at = session.sent_at.take().expect("checked");
                if self.counting && p.kind == "result" {
                    self.tally.turns += 1;
                    let _ = self.tally.result.record(at.elapsed().as_micros() as u64);
                }
                session.evicting = self.plan.wait_evicted && p.kind == "result";
                Some(p.agent_id.to_owned())
            }
            "status" if session.evicting && text.contains("\"status\":\"evicted\"") => {
                session.evicting = false;
                Some(p.agent_id.to_owned())
            }
            _ => None,
        }
    }

    async fn recv(&mut self) -> anyhow::Result<Utf8Bytes> {
        loop {
            match self.ws.next().await {
                Some(Ok(Message::Text(t))) => return Ok(t),
                Some(Ok(Message::Close(_))) | None => anyhow::bail!("the server closed the socket"),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e.into()),
            }
        }
    }

    /// One turn on every driven session, then waits until all are ready for the next.
    async fn warm_up(&mut self) -> anyhow::Result<()> {
        let ids = self.plan.drive.clone();
        for id in &ids {
            self.send_chat(id, Instant::now()).await?;
        }
        while self.sessions.values().any(Driven::busy) {
            let text = self.recv().await?;
            self.on_frame(text.as_str());
        }
        Ok(())
    }

    async fn follow(&mut self) -> anyhow::Result<()> {
        for id in self.plan.follow.clone() {
            let frame = json!({"type": "subscribe", "agent_id": id, "since_seq": 0});
            self.ws.send(Message::text(frame.to_string())).await?;
        }
        Ok(())
    }

    /// The measured phase, until `deadline`.
    async fn measure(&mut self, deadline: Instant) -> anyhow::Result<()> {
        self.counting = true;
        let ids = self.plan.drive.clone();
        let mut tick = self.plan.pace.filter(|_| !ids.is_empty()).map(|pace| {
            let mut t = tokio::time::interval(pace / ids.len() as u32);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            t
        });
        if tick.is_none() {
            for id in &ids {
                self.next_turn(id).await?;
            }
        }
        let mut round_robin = 0;
        loop {
            tokio::select! {
                _ = sleep_until(deadline) => break,
                at = async { tick.as_mut().expect("guarded").tick().await }, if tick.is_some() => {
                    let id = ids[round_robin % ids.len()].clone();
                    round_robin += 1;
                    self.sessions.get_mut(&id).expect("driven").backlog.push_back(at);
                    self.next_turn(&id).await?;
                }
                text = self.recv() => {
                    if let Some(id) = self.on_frame(text?.as_str()) {
                        self.next_turn(&id).await?;
                    }
                }
            }
        }
        self.counting = false;
        Ok(())
    }
}

/// Runs `plans` (one socket each) against `server` for `secs` and measures.
async fn drive(server: &Server, plans: Vec<Plan>, secs: Duration) -> anyhow::Result<Measurement> {
    let sessions: usize = plans.iter().map(|p| p.drive.len()).sum();
    let offered = plans[0]
        .pace
        .map(|pace| sessions as f64 / pace.as_secs_f64());
    let sockets = plans.len();
    let phases = Arc::new(Barrier::new(sockets + 1));
    let mut tasks = JoinSet::new();
    let semaphore = Arc::new(tokio::sync::Semaphore::new(CONNECT_PARALLELISM));
    for plan in plans {
        let addr = server.addr.clone();
        let phases = phases.clone();
        let semaphore = semaphore.clone();
        tasks.spawn(async move {
            let ws = {
                let _permit = semaphore.acquire().await?;
                connect(&addr).await?
            };
            let mut driver = Driver::new(ws, plan);
            driver.warm_up().await?;
            phases.wait().await;
            driver.follow().await?;
            phases.wait().await;
            let deadline = phases_deadline(&phases, secs).await;
            driver.measure(deadline).await?;
            anyhow::Ok(driver.tally)
        });
    }
    for _ in 0..2 {
        wait_phase(&phases, &mut tasks).await?;
    }
    let stored_before = stored_total(server).await;
    let started = Instant::now();
    phases.wait().await;
    let mut total = Tally::new();
    while let Some(joined) = timeout(secs + SETUP_TIMEOUT, tasks.join_next())
        .await
        .map_err(|_| anyhow::anyhow!("sockets did not finish in time"))?
    {
        total.add(&joined??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let rss_kib = server.rss_kib();
    let stored = match stored_before {
        Some(before) => stored_total(server).await.unwrap_or(before) - before,
        None => total.stored,
    };
    Ok(Measurement {
        server: server.kind,
        secs: elapsed,
        sockets,
        sessions,
        offered_turns_per_sec: offered,
        turns: total.turns,
        turns_per_sec: total.turns as f64 / elapsed,
        delivered_frames: total.frames,
        delivered_fps: total.frames as f64 / elapsed,
        stored_frames: stored,
        stored_fps: stored as f64 / elapsed,
        first_token: Percentiles::from(&total.first_token),
        result: Percentiles::from(&total.result),
        rss_kib,
        rss_per_socket_bytes: None,
        errors: total.errors,
    })
}

/// Every task waits on the third phase, after which the deadline starts.
async fn phases_deadline(phases: &Barrier, secs: Duration) -> Instant {
    phases.wait().await;
    Instant::now() + secs
}

/// Waits for every socket to reach the next phase, failing if one of them fails first.
async fn wait_phase(
    phases: &Barrier,
    tasks: &mut JoinSet<anyhow::Result<Tally>>,
) -> anyhow::Result<()> {
    timeout(SETUP_TIMEOUT, async {
        tokio::select! {
            _ = phases.wait() => Ok(()),
            Some(joined) = tasks.join_next() => match joined? {
                Err(e) => Err(e),
                Ok(_) => Err(anyhow::anyhow!("a socket ended during set-up")),
            },
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("set-up did not finish in time"))?
}

/// `agentmux_stored_frames_total` of an agentmux server; None for the baseline.
async fn stored_total(server: &Server) -> Option<u64> {
    match server.kind {
        Kind::Baseline => None,
        Kind::Agentmux => server
            .metric("agentmux_stored_frames_total")
            .await
            .ok()
            .map(|v| v as u64),
    }
}

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
        let m = drive(&server, plans(kind), common.duration()).await?;
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

fn session_ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Spreads `ids` over `sockets` plans, round robin.
fn spread(ids: &[String], sockets: usize) -> Vec<Plan> {
    let sockets = sockets.max(1);
    let mut plans = vec![Plan::default(); sockets];
    for (i, id) in ids.iter().enumerate() {
        plans[i % sockets].drive.push(id.clone());
    }
    plans
}

/// Many sockets on few sessions: the first socket of each session drives it, the rest follow.
pub async fn fanout(sessions: usize, sockets: usize, common: &Common) -> anyhow::Result<Report> {
    let mut report = Report::new(
        "fanout",
        json!({"sessions": sessions, "sockets": sockets, "secs": common.secs, "max_batch": common.max_batch}),
    );
    let ids = session_ids("fan", sessions);
    let plans = |_| {
        let sockets = sockets.max(ids.len());
        (0..sockets)
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
    };
    compare(
        &mut report,
        &format!("{sockets}x{sessions}"),
        common,
        &tweaks(common),
        plans,
    )
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
    compare(
        &mut report,
        &format!("{sessions} sessions"),
        common,
        &tweaks(common),
        |_| spread(&ids, sockets),
    )
    .await?;
    Ok(report)
}

/// `many-sessions` closed loop (the peak), then paced at fractions of agentmux's peak.
pub async fn sweep(sessions: usize, sockets: usize, common: &Common) -> anyhow::Result<Report> {
    let mut report = Report::new(
        "sweep",
        json!({"sessions": sessions, "sockets": sockets, "secs": common.secs, "max_batch": common.max_batch}),
    );
    let ids = session_ids("sweep", sessions);
    compare(&mut report, "peak", common, &tweaks(common), |_| {
        spread(&ids, sockets)
    })
    .await?;
    let peak = report.rows[0].agentmux.turns_per_sec;
    for fraction in SWEEP_FRACTIONS {
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
    compare(
        &mut report,
        &format!("{sessions} sessions"),
        common,
        &tweaks,
        |kind| {
            let mut plans = spread(&ids, 2);
            for p in &mut plans {
                p.wait_evicted = kind == Kind::Agentmux;
            }
            plans
        },
    )
    .await?;
    Ok(report)
}

/// Idle sockets pinging now and then: resident memory per socket.
pub async fn idle(sockets: usize, common: &Common) -> anyhow::Result<Report> {
    let mut report = Report::new(
        "idle",
        json!({"sockets": sockets, "secs": common.secs, "ping_secs": IDLE_PING.as_secs()}),
    );
    let mut results = Vec::new();
    for kind in kinds(common) {
        let mut server = Server::start(kind, &tweaks(common)).await?;
        results.push(hold_idle(&server, sockets, common.duration()).await?);
        server.kill().await;
    }
    let agentmux = results.pop().expect("always run");
    report.rows.push(Row::new(
        format!("{sockets} sockets"),
        results.pop(),
        agentmux,
    ));
    Ok(report)
}

async fn hold_idle(server: &Server, sockets: usize, secs: Duration) -> anyhow::Result<Measurement> {
    // One socket first, so that lazily allocated per-process state is not counted per socket.
    let mut first = connect(&server.addr).await?;
    first.send(Message::Ping(Vec::new().into())).await?;
    let _ = timeout(SETUP_TIMEOUT, first.next()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = server.rss_kib();
    let semaphore = Arc::new(tokio::sync::Semaphore::new(CONNECT_PARALLELISM));
    let opened = Arc::new(Barrier::new(sockets + 1));
    let stop = tokio_util::sync::CancellationToken::new();
    let mut tasks = JoinSet::new();
    for _ in 0..sockets {
        let (addr, semaphore, opened, stop) = (
            server.addr.clone(),
            semaphore.clone(),
            opened.clone(),
            stop.clone(),
        );
        tasks.spawn(async move {
            let ws = {
                let _permit = semaphore.acquire().await;
                connect(&addr).await
            };
            opened.wait().await;
            let mut ws = ws?;
            let mut ping = tokio::time::interval(IDLE_PING);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return anyhow::Ok(ws),
                    _ = ping.tick() => ws.send(Message::Ping(Vec::new().into())).await?,
                    msg = ws.next() => match msg {
                        Some(Ok(_)) => {}
                        _ => anyhow::bail!("the server closed an idle socket"),
                    },
                }
            }
        });
    }
    timeout(SETUP_TIMEOUT, opened.wait())
        .await
        .map_err(|_| anyhow::anyhow!("sockets did not open in time"))?;
    let started = Instant::now();
    tokio::time::sleep(secs).await;
    // Read while every socket is still open.
    let rss_kib = server.rss_kib();
    stop.cancel();
    let mut held = Vec::with_capacity(sockets);
    let mut errors = 0;
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok(ws)) => held.push(ws),
            _ => errors += 1,
        }
    }
    let open = held.len();
    drop(held);
    drop(first);
    Ok(Measurement {
        server: server.kind,
        secs: started.elapsed().as_secs_f64(),
        sockets: open,
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
        rss_kib,
        rss_per_socket_bytes: Some(
            (rss_kib.saturating_sub(before) as f64 * 1024.0) / open.max(1) as f64,
        ),
        errors,
    })
}

/// `subscribe` from seq 0 on a session holding `messages` stored frames.
pub async fn replay(messages: u64, common: &Common) -> anyhow::Result<Report> {
    let mut report = Report::new("replay", json!({"messages": messages}));
    let mut measured = Vec::new();
    let tweaks = Tweaks {
        keep_history: true,
        ..tweaks(common)
    };
    for kind in kinds(common) {
        let dir = tempfile::tempdir()?;
        let mut server = match kind {
            Kind::Baseline => {
                let server = Server::start(kind, &tweaks).await?;
                seed_baseline(&server, messages).await?;
                server
            }
            Kind::Agentmux => {
                seed_replay(dir.path(), messages).await?;
                Server::start_in(dir.path(), &tweaks).await?
            }
        };
        let m = time_replay(&server, messages).await;
        server.kill().await;
        measured.push(m?);
    }
    let agentmux = measured.pop().expect("always run");
    report
        .rows
        .push(Row::new("subscribe from 0", measured.pop(), agentmux));
    Ok(report)
}

/// The agent id of the replayed session.
const REPLAY_AGENT: &str = "replay";

/// Stores `messages` frames shaped like demo turns straight into a fresh data directory.
async fn seed_replay(data_dir: &std::path::Path, messages: u64) -> anyhow::Result<()> {
    use agentmux::store::sqlite::{SqliteSettings, SqliteStore};
    use agentmux::store::{NewMessage, NewSession, Store};
    let store = SqliteStore::open(
        &data_dir.join("agentmux.db"),
        SqliteSettings::default(),
        agentmux::metrics::Metrics::default(),
    )
    .await?;
    let session_id = uuid::Uuid::new_v4().to_string();
    let record = store
        .create_session(NewSession {
            principal: agentmux::http::auth::LOCAL_PRINCIPAL.into(),
            agent_id: REPLAY_AGENT.into(),
            session_id: session_id.clone(),
            backend: "demo".into(),
            cwd: data_dir
                .join("workspaces")
                .join(&session_id)
                .to_string_lossy()
                .into_owned(),
            model: None,
            permission_mode: None,
        })
        .await?;
    let user = json!({"type": "user", "message": {"role": "user", "content": PROMPT}}).to_string();
    let turn = demo_turn().await?;
    let shapes: Vec<(&'static str, String)> = std::iter::once(("user", user))
        .chain(turn.into_iter().filter_map(|m| match m.kind.as_str() {
            "system" => Some(("system", m.raw)),
            "assistant" => Some(("assistant", m.raw)),
            "result" => Some(("result", m.raw)),
            _ => None,
        }))
        .collect();
    let mut stored = 0;
    while stored < messages {
        let batch: Vec<NewMessage> = (stored..messages.min(stored + 1000))
            .map(|i| {
                let (kind, payload) = &shapes[(i % shapes.len() as u64) as usize];
                let mut m = NewMessage::new(kind, payload.clone());
                m.prompt = *kind == "user";
                if *kind == "result" {
                    m.totals = Some(Default::default());
                }
                m
            })
            .collect();
        stored += batch.len() as u64;
        store.append(record.id, batch).await?;
    }
    store.close().await;
    Ok(())
}

/// Chats in flight while seeding the baseline: few enough that their frames fit its broadcast
/// buffer (a baseline socket that lags drops frames, and a lost `result` would stall the seeding).
const SEED_WINDOW: u64 = 16;

/// Gives the baseline `messages` stored-type frames by sending chats on one session.
async fn seed_baseline(server: &Server, messages: u64) -> anyhow::Result<()> {
    let mut ws = connect(&server.addr).await?;
    let turns = messages.div_ceil(4);
    let chat = chat_text(REPLAY_AGENT);
    let (mut sent, mut results) = (0, 0);
    timeout(SETUP_TIMEOUT, async {
        while results < turns {
            while sent < turns && sent - results < SEED_WINDOW {
                ws.send(Message::text(chat.clone())).await?;
                sent += 1;
            }
            match ws.next().await {
                Some(Ok(Message::Text(t))) if peek(t.as_str()).kind == "result" => results += 1,
                Some(Ok(_)) => {}
                _ => anyhow::bail!("the baseline closed the socket while seeding"),
            }
        }
        anyhow::Ok(())
    })
    .await
    .map_err(|_| anyhow::anyhow!("seeding the baseline took too long"))??;
    Ok(())
}

async fn time_replay(server: &Server, messages: u64) -> anyhow::Result<Measurement> {
    let mut ws = connect(&server.addr).await?;
    let started = Instant::now();
    let subscribe = json!({"type": "subscribe", "agent_id": REPLAY_AGENT, "since_seq": 0});
    ws.send(Message::text(subscribe.to_string())).await?;
    let mut frames = 0u64;
    let mut errors = 0;
    let mut first = histogram();
    timeout(SETUP_TIMEOUT, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) => {
                    let text = t.as_str();
                    if frames == 0 {
                        let _ = first.record(started.elapsed().as_micros() as u64);
                    }
                    frames += 1;
                    if peek(text).kind == "error" {
                        errors += 1;
                    }
                    if seq_field(text).is_some_and(|s| s as u64 >= messages) {
                        return anyhow::Ok(());
                    }
                }
                Some(Ok(_)) => {}
                _ => anyhow::bail!("the server closed the socket during the replay"),
            }
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("the replay took too long"))??;
    let secs = started.elapsed().as_secs_f64();
    Ok(Measurement {
        server: server.kind,
        secs,
        sockets: 1,
        sessions: 1,
        offered_turns_per_sec: None,
        turns: 0,
        turns_per_sec: 0.0,
        delivered_frames: frames,
        delivered_fps: frames as f64 / secs,
        stored_frames: frames,
        stored_fps: frames as f64 / secs,
        first_token: Percentiles::from(&first),
        result: Percentiles::default(),
        rss_kib: server.rss_kib(),
        rss_per_socket_bytes: None,
        errors,
    })
}
