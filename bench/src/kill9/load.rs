//! The harness's clients: each drives closed-loop turns on its own sessions until the server
//! dies, keeping every stored frame it received, byte for byte.

use std::collections::HashMap;

use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::PROMPT;
use crate::wire::{chat_text, connect, is_stored, peek, seq_field};

/// A frame a client received that carries a `seq`.
pub struct Received {
    pub agent_id: String,
    pub seq: i64,
    pub text: String,
}

/// Connects, starts a turn on every one of `sessions`, tells `started`, then starts the next
/// turn of each session at its `result` until the server goes away. Returns every stored frame
/// received.
///
/// # Errors
/// When the socket can't be opened or the first chats can't be sent: the server was up and
/// should have taken them.
pub async fn record_load(
    addr: &str,
    sessions: &[String],
    started: mpsc::Sender<()>,
) -> anyhow::Result<Vec<Received>> {
    let mut ws = connect(addr).await?;
    let chats: HashMap<&str, String> = sessions
        .iter()
        .map(|id| (id.as_str(), chat_text(id, PROMPT)))
        .collect();
    for chat in chats.values() {
        ws.send(Message::text(chat.clone())).await?;
    }
    let _ = started.send(()).await;
    drop(started);
    let mut got = Vec::new();
    while let Some(Ok(msg)) = ws.next().await {
        let Message::Text(text) = msg else { continue };
        let text = text.as_str();
        let p = peek(text);
        if is_stored(p.kind)
            && let Some(seq) = seq_field(text)
        {
            got.push(Received {
                agent_id: p.agent_id.to_owned(),
                seq,
                text: text.to_owned(),
            });
        }
        if p.kind == "result"
            && let Some(chat) = chats.get(p.agent_id)
            && ws.send(Message::text(chat.clone())).await.is_err()
        {
            break;
        }
    }
    Ok(got)
}
