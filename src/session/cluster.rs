//! Routing between the nodes that share a PostgreSQL store, over NATS: a command for a
//! conversation another node runs goes to that node by request and reply, and each node
//! publishes the frames of the conversations it runs, once committed, for the other nodes to
//! relay to their own followers, filling any `seq` gap from the store (NATS delivers at most
//! once).

use std::sync::Arc;
use std::time::Duration;

use async_nats::{Client, ConnectOptions, HeaderMap, client::RequestErrorKind};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Conversation, Manager, Route, replay};
use crate::metrics::Metrics;
use crate::protocol::{self, ClientFrame, DecodeLimits, ErrorCode, Frame, FrameError};
use crate::store::{NewMessage, RowId, Store};

/// Header of a published frame: its `seq`, when stored.
const SEQ: &str = "Agentmux-Seq";
/// Header of a published frame: its `message_type`.
const TYPE: &str = "Agentmux-Type";
/// How long a forwarded command waits for its owner's answer.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);

/// This node's connection to the others.
pub struct Bus {
    client: Client,
    node: String,
    frames: mpsc::UnboundedSender<(RowId, Frame)>,
    metrics: Metrics,
}

/// A command another node forwards: the principal it acts for and the client frame (for a
/// schedule's run, with the status that marks it).
#[derive(Serialize, Deserialize)]
struct Forward {
    principal: String,
    frame: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    marker: Option<Marker>,
}

/// The `status` stored just before a forwarded chat's user message.
#[derive(Clone, Serialize, Deserialize)]
pub(super) struct Marker {
    payload: String,
    title: Option<String>,
}

impl Marker {
    pub fn of(message: &NewMessage) -> Self {
        Marker {
            payload: message.payload.clone(),
            title: message.title.clone(),
        }
    }

    pub fn into_message(self) -> NewMessage {
        let mut message = NewMessage::new("status", self.payload);
        message.title = self.title;
        message
    }
}

/// The owner's answer to a forwarded command.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub(super) enum Answer {
    /// A chat was stored and queued.
    Chat { seq: i64, queue_position: usize },
    /// An interrupt was handled.
    Interrupt { was_running: bool },
    /// A permission answer was taken.
    Done,
    /// A rewind stored this status frame.
    Rewound {
        seq: Option<i64>,
        message_type: String,
        text: String,
    },
    /// The command failed.
    Error { code: ErrorCode, message: String },
}

impl Answer {
    fn from_error(err: FrameError) -> Self {
        Answer::Error {
            code: err.code,
            message: err.message,
        }
    }

    /// The error this answer carries, as the frame's own.
    pub(super) fn into_error(self, agent_id: &str) -> FrameError {
        match self {
            Answer::Error { code, message } => {
                FrameError::new(code, message).for_agent(Some(agent_id))
            }
            other => FrameError::new(
                ErrorCode::BackendUnavailable,
                format!("the owning node answered {other:?}"),
            )
            .for_agent(Some(agent_id)),
        }
    }
}

/// Nobody answers for the node a command was meant for: it is gone.
pub(super) struct NoOwner;

fn frames_subject(row: RowId) -> String {
    format!("agentmux.frames.{}", row.0)
}

/// The subject of a node's commands: its name in hex, as a name may hold `.`.
fn node_subject(node: &str) -> String {
    let hex: String = node.bytes().map(|b| format!("{b:02x}")).collect();
    format!("agentmux.node.{hex}")
}

impl Bus {
    /// Connects to the NATS server(s) at `url` as node `node`. The connection is kept up (and
    /// re-established after an outage) for as long as the bus lives.
    ///
    /// # Errors
    /// When NATS can't be reached within 10 seconds.
    pub async fn connect(url: &str, node: String, metrics: Metrics) -> anyhow::Result<Arc<Bus>> {
        let servers: Vec<&str> = url.split(',').map(str::trim).collect();
        // Each of several servers may carry a password of its own.
        let shown: Vec<String> = servers
            .iter()
            .map(|s| crate::store::postgres::redact_url(s))
            .collect();
        let shown = shown.join(",");
        let client = ConnectOptions::new()
            .name(format!("agentmux {node}"))
            .no_echo()
            .connection_timeout(Duration::from_secs(10))
            .request_timeout(Some(FORWARD_TIMEOUT))
            .connect(servers)
            .await
            .map_err(|e| anyhow::anyhow!("cannot connect to NATS at {shown}: {e}"))?;
        let (frames, mut queued) = mpsc::unbounded_channel::<(RowId, Frame)>();
        let publisher = client.clone();
        tokio::spawn(async move {
            while let Some((row, frame)) = queued.recv().await {
                let mut headers = HeaderMap::new();
                headers.insert(TYPE, frame.kind);
                if let Some(seq) = frame.seq {
                    headers.insert(SEQ, seq.to_string().as_str());
                }
                let sent = publisher
                    .publish_with_headers(frames_subject(row), headers, frame.text.bytes())
                    .await;
                if let Err(err) = sent {
                    tracing::warn!(error = %err, "publishing a frame to the other nodes failed");
                }
            }
        });
        Ok(Arc::new(Bus {
            client,
            node,
            frames,
            metrics,
        }))
    }

    /// Publishes a frame of conversation `row` (committed, if stored) to the other nodes.
    pub(super) fn publish(&self, row: RowId, frame: &Frame) {
        let _ = self.frames.send((row, frame.clone()));
    }

    /// Relays the frames other nodes publish for `session` into `events` until `stop` fires;
    /// returns once the subscription is in place. A stored frame whose `seq` jumps past the
    /// last one relayed is preceded by the ones in between, read from the store.
    pub(super) async fn relay(
        &self,
        conversation: Arc<Conversation>,
        events: super::events::Sender,
        store: Arc<dyn Store>,
        stop: CancellationToken,
    ) {
        let mut sub = match self
            .client
            .subscribe(frames_subject(conversation.row))
            .await
        {
            Ok(sub) => sub,
            Err(err) => {
                tracing::warn!(error = %err, "following a conversation on the other nodes failed");
                return;
            }
        };
        // The server has the subscription once it answers a flush.
        let _ = self.client.flush().await;
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            let mut last: Option<i64> = None;
            loop {
                let msg = tokio::select! {
                    msg = sub.next() => msg,
                    () = stop.cancelled() => break,
                };
                let Some(msg) = msg else { break };
                let header = |name| {
                    msg.headers
                        .as_ref()
                        .and_then(|h| h.get(name))
                        .map(|v| v.as_str().to_owned())
                };
                let seq = header(SEQ).and_then(|s| s.parse::<i64>().ok());
                let message_type = header(TYPE).unwrap_or_default();
                let Ok(text) = String::from_utf8(msg.payload.to_vec()) else {
                    continue;
                };
                if let (Some(seq), Some(prev)) = (seq, last)
                    && seq > prev + 1
                {
                    fill_gap(&*store, &conversation, &events, prev, seq).await;
                }
                if let Some(seq) = seq {
                    last = Some(last.map_or(seq, |prev| prev.max(seq)));
                }
                metrics.relayed_frame();
                events.send(Frame::relayed(seq, &message_type, text));
            }
        });
    }

    /// Sends `frame` (a command for a conversation of `principal`) to node `node` and waits for
    /// its answer.
    ///
    /// # Errors
    /// [`NoOwner`] when nobody answers for that node (it is gone).
    pub(super) async fn forward(
        &self,
        node: &str,
        principal: &str,
        frame: &ClientFrame,
        marker: Option<Marker>,
    ) -> Result<Answer, NoOwner> {
        let request = Forward {
            principal: principal.to_owned(),
            frame: serde_json::to_value(frame).expect("frames serialize"),
            marker,
        };
        let payload = serde_json::to_vec(&request).expect("requests serialize");
        match self
            .client
            .request(node_subject(node), payload.into())
            .await
        {
            Ok(msg) => Ok(
                serde_json::from_slice(&msg.payload).unwrap_or_else(|e| Answer::Error {
                    code: ErrorCode::BackendUnavailable,
                    message: format!("node `{node}` answered something unreadable: {e}"),
                }),
            ),
            Err(err) if err.kind() == RequestErrorKind::NoResponders => Err(NoOwner),
            Err(err) => Ok(Answer::Error {
                code: ErrorCode::BackendUnavailable,
                message: format!("node `{node}` runs the conversation but did not answer: {err}"),
            }),
        }
    }

    /// Answers the commands other nodes forward to this one, through `manager`, until `stop`.
    ///
    /// # Errors
    /// When the subscription can't be made.
    pub(super) async fn serve(
        self: Arc<Self>,
        manager: Manager,
        limits: DecodeLimits,
        stop: CancellationToken,
    ) -> anyhow::Result<()> {
        let mut sub = self.client.subscribe(node_subject(&self.node)).await?;
        self.client.flush().await?;
        tokio::spawn(async move {
            loop {
                let msg = tokio::select! {
                    msg = sub.next() => msg,
                    () = stop.cancelled() => break,
                };
                let Some(msg) = msg else { break };
                let Some(reply) = msg.reply.clone() else {
                    continue;
                };
                let (manager, client) = (manager.clone(), self.client.clone());
                tokio::spawn(async move {
                    let answer = answer(&manager, &msg.payload, limits).await;
                    let payload = serde_json::to_vec(&answer).expect("answers serialize");
                    if let Err(err) = client.publish(reply, payload.into()).await {
                        tracing::warn!(error = %err, "answering a forwarded command failed");
                    }
                });
            }
        });
        Ok(())
    }
}

/// Relays the stored frames of `session` with `prev < seq < next` (missed on the bus).
async fn fill_gap(
    store: &dyn Store,
    conversation: &Conversation,
    events: &super::events::Sender,
    prev: i64,
    next: i64,
) {
    let missing = u32::try_from(next - prev - 1).unwrap_or(u32::MAX);
    match store.messages_after(conversation.row, prev, missing).await {
        Ok(rows) => {
            for row in rows.iter().filter(|r| r.seq < next) {
                events.send(replay::stored_frame(conversation, row));
            }
        }
        Err(err) => tracing::warn!(error = %err, "filling a gap of relayed frames failed"),
    }
}

/// Runs a command another node forwarded, on this node only.
async fn answer(manager: &Manager, payload: &[u8], limits: DecodeLimits) -> Answer {
    let bad = |message: String| Answer::Error {
        code: ErrorCode::BadFrame,
        message,
    };
    let Ok(request) = serde_json::from_slice::<Forward>(payload) else {
        return bad("a forwarded command that is not one".into());
    };
    let frame = match protocol::decode(&request.frame.to_string(), limits) {
        Ok(frame) => frame,
        Err(err) => return Answer::from_error(err),
    };
    let principal = request.principal.as_str();
    let outcome = match frame {
        ClientFrame::Chat(chat) => {
            let marker = request.marker.map(|m| Box::new(m.into_message()));
            match manager
                .submit_marked(principal, chat, marker, Route::ThisNode)
                .await
            {
                Ok(pending) => pending.stored().await.map(|accepted| Answer::Chat {
                    seq: accepted.seq,
                    queue_position: accepted.queue_position,
                }),
                Err(err) => Err(err),
            }
        }
        ClientFrame::Interrupt { agent_id } => manager
            .interrupt_routed(principal, &agent_id, Route::ThisNode)
            .await
            .map(|i| Answer::Interrupt {
                was_running: i.was_running,
            }),
        ClientFrame::PermissionResponse {
            agent_id,
            request_id,
            decision,
        } => manager
            .answer_permission_routed(principal, &agent_id, request_id, decision, Route::ThisNode)
            .await
            .map(|()| Answer::Done),
        ClientFrame::Rewind { agent_id, to_seq } => manager
            .rewind_routed(principal, &agent_id, to_seq, Route::ThisNode)
            .await
            .map(|frame| Answer::Rewound {
                seq: frame.seq,
                message_type: frame.kind.to_owned(),
                text: frame.text.as_str().to_owned(),
            }),
        _ => {
            return bad(
                "only chat, interrupt, permission_response and rewind are forwarded".into(),
            );
        }
    };
    outcome.unwrap_or_else(Answer::from_error)
}
