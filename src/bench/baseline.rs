//! The bare baseline: the same axum/tungstenite stack with the same socket settings, answering
//! `chat` from memory with the demo agent's frames (ack, user, system init, a `stream_event` per
//! word, assistant, result) serialized the same way — no routing to actors, no store.
//!
//! What it measures is the limit of the WebSocket stack and the frame encoding on the machine,
//! so that agentmux's figures can be read as ratios to it.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use axum::routing::get;
use futures_util::stream::SelectAll;
use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;

use agentmux::agent::AgentMessage;
use agentmux::config::SocketConfig;
use agentmux::protocol::{self, ClientFrame, DecodeLimits, Frame, Tag};

/// Most frames written before one flush, as in the real server.
const WRITE_BATCH: usize = 256;

struct Baseline {
    /// One demo turn's agent messages, replayed for every chat.
    turn: Vec<AgentMessage>,
    socket: SocketConfig,
    keep_history: bool,
    agents: Mutex<HashMap<String, Arc<Agent>>>,
}

struct Agent {
    session_id: String,
    events: broadcast::Sender<Frame>,
    /// Stored-type frames so far (only with `--keep-history`) and the last seq.
    stored: Mutex<(Vec<Frame>, i64)>,
}

/// Serves the baseline on `bind` until killed.
pub async fn serve(bind: SocketAddr, keep_history: bool) -> anyhow::Result<()> {
    let state = Arc::new(Baseline {
        turn: super::load::demo_turn().await?,
        socket: SocketConfig::default(),
        keep_history,
        agents: Mutex::new(HashMap::new()),
    });
    let listener = tokio::net::TcpListener::bind(bind).await?;
    println!("listening on http://{}", listener.local_addr()?);
    let app = Router::new().route("/ws", get(upgrade)).with_state(state);
    axum::serve(listener, app).await?;
    Ok(())
}

async fn upgrade(ws: WebSocketUpgrade, State(state): State<Arc<Baseline>>) -> Response {
    agentmux::http::ws::configure(ws, &state.socket)
        .on_upgrade(move |socket| connection(socket, state))
}

impl Baseline {
    fn agent(&self, agent_id: &str) -> Arc<Agent> {
        let mut agents = self.agents.lock().expect("not poisoned");
        agents
            .entry(agent_id.to_owned())
            .or_insert_with(|| {
                Arc::new(Agent {
                    session_id: uuid::Uuid::new_v4().to_string(),
                    events: broadcast::channel(self.socket.session_buffer_frames).0,
                    stored: Mutex::new((Vec::new(), 0)),
                })
            })
            .clone()
    }

    /// Publishes one turn's frames; returns the seq of the user frame.
    fn answer(&self, agent_id: &str, agent: &Agent, content: &str) -> i64 {
        let tag = Tag {
            agent_id,
            session_id: &agent.session_id,
        };
        let user =
            serde_json::json!({"type": "user", "message": {"role": "user", "content": content}})
                .to_string();
        let messages = std::iter::once(("user", user.as_str()))
            .chain(self.turn.iter().map(|m| (m.kind.as_str(), m.raw.as_str())));
        let mut stored = agent.stored.lock().expect("not poisoned");
        let first = stored.1 + 1;
        for (kind, raw) in messages {
            let seq = protocol::is_agent_message(kind).then(|| {
                stored.1 += 1;
                stored.1
            });
            let frame = protocol::session_frame(tag, kind, seq, &protocol::now_rfc3339(), raw);
            if self.keep_history && seq.is_some() {
                stored.0.push(frame.clone());
            }
            let _ = agent.events.send(frame);
        }
        first
    }
}

async fn connection(mut socket: WebSocket, state: Arc<Baseline>) {
    let limits = DecodeLimits {
        max_content_bytes: state.socket.max_content_bytes,
        allow_bypass_permissions: true,
    };
    let mut subs = Subs::default();
    loop {
        let outcome = tokio::select! {
            msg = socket.recv() => match msg {
                Some(Ok(Message::Text(text))) => on_text(&mut socket, &state, &mut subs, text.as_str(), limits).await,
                Some(Ok(Message::Binary(_) | Message::Ping(_) | Message::Pong(_))) => Ok(()),
                _ => return,
            },
            Some(item) = subs.frames.next() => forward(&mut socket, &mut subs.frames, item).await,
        };
        if outcome.is_err() {
            return;
        }
    }
}

/// The conversations a socket follows.
#[derive(Default)]
struct Subs {
    followed: HashSet<String>,
    frames: SelectAll<BroadcastStream<Frame>>,
}

impl Subs {
    fn follow(&mut self, agent_id: &str, agent: &Agent) {
        if self.followed.insert(agent_id.to_owned()) {
            self.frames
                .push(BroadcastStream::new(agent.events.subscribe()));
        }
    }
}

async fn on_text(
    socket: &mut WebSocket,
    state: &Baseline,
    subs: &mut Subs,
    text: &str,
    limits: DecodeLimits,
) -> Result<(), axum::Error> {
    let frame = match protocol::decode(text, limits) {
        Ok(frame) => frame,
        Err(err) => {
            return socket
                .send(Message::Text(
                    protocol::error_frame(&err).text.as_str().into(),
                ))
                .await;
        }
    };
    match frame {
        ClientFrame::Chat(chat) => {
            let agent = state.agent(&chat.agent_id);
            subs.follow(&chat.agent_id, &agent);
            let seq = state.answer(&chat.agent_id, &agent, &chat.content);
            let tag = Tag {
                agent_id: &chat.agent_id,
                session_id: &agent.session_id,
            };
            let ack = protocol::ack_frame(tag, chat.client_msg_id.as_deref(), seq, 0);
            socket.send(Message::Text(ack.text.as_str().into())).await
        }
        ClientFrame::Subscribe {
            agent_id,
            since_seq,
        } => {
            let agent = state.agent(&agent_id);
            let history: Vec<Frame> = {
                let stored = agent.stored.lock().expect("not poisoned");
                subs.follow(&agent_id, &agent);
                stored
                    .0
                    .iter()
                    .filter(|f| f.seq > Some(since_seq))
                    .cloned()
                    .collect()
            };
            for chunk in history.chunks(WRITE_BATCH) {
                for frame in chunk {
                    socket
                        .feed(Message::Text(frame.text.as_str().into()))
                        .await?;
                }
                socket.flush().await?;
            }
            Ok(())
        }
        ClientFrame::Ping { ts } => {
            socket
                .send(Message::Text(
                    protocol::pong_frame(ts.as_ref()).text.as_str().into(),
                ))
                .await
        }
        // No routing, no store: everything else is accepted and ignored.
        _ => Ok(()),
    }
}

/// Sends a live frame and whatever else is ready, then flushes once; lagged frames are dropped.
async fn forward(
    socket: &mut WebSocket,
    subs: &mut SelectAll<BroadcastStream<Frame>>,
    first: Result<Frame, tokio_stream::wrappers::errors::BroadcastStreamRecvError>,
) -> Result<(), axum::Error> {
    let mut next = Some(first);
    let mut written = 0;
    while let Some(item) = next.take() {
        if let Ok(frame) = item {
            socket
                .feed(Message::Text(frame.text.as_str().into()))
                .await?;
            written += 1;
        }
        if written < WRITE_BATCH {
            next = subs.next().now_or_never().flatten();
        }
    }
    socket.flush().await
}
