//! `agentmux-bench baseline`: a bare WebSocket server on plain tokio-tungstenite that answers
//! `chat` from memory with one demo-shaped turn ([`turn`]), `subscribe` (from memory, with
//! `--keep-history`) and `ping`. No actors, no store, no agent; a socket that lags drops frames.
//! With `--relay-cli` it answers `chat` with what a CLI process writes instead ([`relay`]).
//!
//! It shares no socket or frame code with agentmux, so what it measures is the limit of a
//! WebSocket server on this machine and agentmux's figures read as ratios to it. It sets
//! `TCP_NODELAY` on every accepted socket.

mod relay;
mod turn;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream::SelectAll;
use futures_util::{FutureExt, SinkExt, StreamExt};
use serde::Deserialize;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

use self::relay::Relays;
pub use self::relay::STREAM_JSON_FLAGS;
use self::turn::Conversation;

/// Most frames written before one flush.
const WRITE_BATCH: usize = 256;
/// Frames buffered per conversation for its sockets; a socket further behind loses frames.
const CONVERSATION_BUFFER: usize = 1024;
/// Bytes a socket reads at a time (tungstenite's default of 128 KiB, zero-filled per socket,
/// would make memory per idle socket a measure of that buffer).
const READ_BUFFER_BYTES: usize = 4 << 10;
/// Largest accepted client frame.
const MAX_FRAME_BYTES: usize = 1 << 20;

type Socket = WebSocketStream<TcpStream>;

/// What the baseline holds: every conversation, by `agent_id`.
struct Baseline {
    keep_history: bool,
    conversations: Mutex<HashMap<String, Arc<Entry>>>,
    /// With `--relay-cli`: the CLI processes chats go to.
    relays: Option<Relays>,
}

struct Entry {
    frames: broadcast::Sender<Utf8Bytes>,
    state: Mutex<State>,
}

struct State {
    conversation: Conversation,
    /// Stored-type frames so far, with their seqs (only with `--keep-history`).
    history: Vec<(i64, Utf8Bytes)>,
}

/// Serves the baseline on `bind` until killed; chats go to processes of `relay_cli` when set.
pub async fn serve(
    bind: SocketAddr,
    keep_history: bool,
    relay_cli: Option<PathBuf>,
) -> anyhow::Result<()> {
    let relays = relay_cli.map(Relays::new).transpose()?;
    let listener = TcpListener::bind(bind).await?;
    println!("listening on http://{}", listener.local_addr()?);
    let state = Arc::new(Baseline {
        keep_history,
        conversations: Mutex::new(HashMap::new()),
        relays,
    });
    loop {
        match listener.accept().await {
            Ok((tcp, _)) => {
                tokio::spawn(connection(tcp, state.clone()));
            }
            // Out of descriptors or similar: let some close before accepting again.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

impl Baseline {
    fn entry(&self, agent_id: &str) -> Arc<Entry> {
        let mut conversations = self.conversations.lock().expect("not poisoned");
        conversations
            .entry(agent_id.to_owned())
            .or_insert_with(|| {
                Arc::new(Entry {
                    frames: broadcast::channel(CONVERSATION_BUFFER).0,
                    state: Mutex::new(State {
                        conversation: Conversation::new(agent_id),
                        history: Vec::new(),
                    }),
                })
            })
            .clone()
    }
}

impl Entry {
    /// Publishes one turn's frames; returns the `ack` for the chat.
    fn answer(&self, content: &str, client_msg_id: Option<&str>, keep_history: bool) -> String {
        let mut state = self.state.lock().expect("not poisoned");
        let frames = state.conversation.answer(content);
        let user_seq = frames[0].seq.expect("the user message is stored");
        for built in frames {
            let text = Utf8Bytes::from(built.text);
            if let (true, Some(seq)) = (keep_history, built.seq) {
                state.history.push((seq, text.clone()));
            }
            let _ = self.frames.send(text);
        }
        state.conversation.ack(client_msg_id, user_seq)
    }
}

async fn connection(tcp: TcpStream, state: Arc<Baseline>) {
    if tcp.set_nodelay(true).is_err() {
        return;
    }
    let config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER_BYTES)
        .max_message_size(Some(MAX_FRAME_BYTES))
        .max_frame_size(Some(MAX_FRAME_BYTES));
    let Ok(mut socket) = tokio_tungstenite::accept_async_with_config(tcp, Some(config)).await
    else {
        return;
    };
    let mut subs = Subs::default();
    loop {
        let outcome = tokio::select! {
            msg = socket.next() => match msg {
                Some(Ok(Message::Text(text))) => on_text(&mut socket, &state, &mut subs, text.as_str()).await,
                Some(Ok(Message::Close(_)) | Err(_)) | None => return,
                // tungstenite answers pings itself.
                Some(Ok(_)) => Ok(()),
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
    frames: SelectAll<BroadcastStream<Utf8Bytes>>,
}

impl Subs {
    fn follow(&mut self, agent_id: &str, entry: &Entry) {
        if self.followed.insert(agent_id.to_owned()) {
            self.frames
                .push(BroadcastStream::new(entry.frames.subscribe()));
        }
    }
}

/// The client frames the baseline reads; anything else is accepted and ignored.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ClientFrame {
    Chat {
        agent_id: String,
        content: String,
        client_msg_id: Option<String>,
    },
    Subscribe {
        agent_id: String,
        #[serde(default)]
        since_seq: i64,
    },
    Ping {
        ts: Option<serde_json::Value>,
    },
    #[serde(other)]
    Other,
}

async fn on_text(
    socket: &mut Socket,
    state: &Baseline,
    subs: &mut Subs,
    text: &str,
) -> Result<(), tokio_tungstenite::tungstenite::Error> {
    let frame = match serde_json::from_str::<ClientFrame>(text) {
        Ok(frame) => frame,
        Err(err) => {
            let error = turn::error("invalid_frame", &err.to_string());
            return socket.send(Message::text(error)).await;
        }
    };
    match frame {
        ClientFrame::Chat {
            agent_id,
            content,
            client_msg_id,
        } => {
            let entry = state.entry(&agent_id);
            subs.follow(&agent_id, &entry);
            let ack = match &state.relays {
                Some(relays) => match relays.chat(&agent_id, &entry.frames, &content) {
                    Ok(()) => {
                        let state = entry.state.lock().expect("not poisoned");
                        state.conversation.ack(client_msg_id.as_deref(), 0)
                    }
                    Err(err) => turn::error("agent_unavailable", &err.to_string()),
                },
                None => entry.answer(&content, client_msg_id.as_deref(), state.keep_history),
            };
            socket.send(Message::text(ack)).await
        }
        ClientFrame::Subscribe {
            agent_id,
            since_seq,
        } => {
            let entry = state.entry(&agent_id);
            let history: Vec<Utf8Bytes> = {
                let state = entry.state.lock().expect("not poisoned");
                subs.follow(&agent_id, &entry);
                state
                    .history
                    .iter()
                    .filter(|(seq, _)| *seq > since_seq)
                    .map(|(_, text)| text.clone())
                    .collect()
            };
            for chunk in history.chunks(WRITE_BATCH) {
                for text in chunk {
                    socket.feed(Message::Text(text.clone())).await?;
                }
                socket.flush().await?;
            }
            Ok(())
        }
        ClientFrame::Ping { ts } => socket.send(Message::text(turn::pong(ts.as_ref()))).await,
        ClientFrame::Other => Ok(()),
    }
}

/// Sends a live frame and whatever else is ready, then flushes once; lagged frames are dropped.
async fn forward(
    socket: &mut Socket,
    subs: &mut SelectAll<BroadcastStream<Utf8Bytes>>,
    first: Result<Utf8Bytes, BroadcastStreamRecvError>,
) -> Result<(), tokio_tungstenite::tungstenite::Error> {
    let mut next = Some(first);
    let mut written = 0;
    while let Some(item) = next.take() {
        if let Ok(text) = item {
            socket.feed(Message::Text(text)).await?;
            written += 1;
        }
        if written < WRITE_BATCH {
            next = subs.next().now_or_never().flatten();
        }
    }
    socket.flush().await
}
