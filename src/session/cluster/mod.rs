//! The NATS bus between the nodes that share a PostgreSQL store: its messages (a forwarded
//! command and its answer, in [`messages`]; a published frame), each sealed with the cluster
//! secret ([`seal`]) and checked as it is read; sending a command to a node and answering
//! those sent to this one; publishing committed frames and relaying other nodes' to followers,
//! filling a `seq` gap from the store. Which node a command goes to is decided by `routing`.

mod connect;
mod messages;
mod revocations;
mod seal;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use async_nats::{Client, client::RequestErrorKind};
use futures_util::StreamExt;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub(super) use self::messages::{Answer, NoOwner};
use self::messages::{Forward, frames_subject, node_subject};
use self::seal::{Kind, Refusal, Seal};
use super::{Command, Conversation, Manager, replay};
use crate::config::ClusterConfig;
use crate::metrics::Metrics;
use crate::protocol::{AgentId, DecodeLimits, ErrorCode, Frame, Principal};
use crate::store::{PageSize, RowId, Store};

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
    seal: Arc<Seal>,
    frames: mpsc::UnboundedSender<(RowId, Frame)>,
    metrics: Metrics,
    /// `session.page_bytes`: the most a page of frames read to fill a gap holds.
    page_bytes: usize,
}

/// The seal of node `node` with the secret of `cluster`.
///
/// # Errors
/// Without a secret of at least [`seal::MIN_SECRET_BYTES`].
fn seal_of(cluster: &ClusterConfig, node: String, metrics: Metrics) -> anyhow::Result<Seal> {
    let Some(secret) = cluster.secret.as_deref().filter(|s| !s.is_empty()) else {
        anyhow::bail!(
            "a cluster (--cluster-nats) needs the secret its nodes share, to authenticate \
             the messages between them: set AGENTMUX_CLUSTER_SECRET (or cluster.secret) to \
             the same value of at least {} bytes on every node (`openssl rand -hex 32`)",
            seal::MIN_SECRET_BYTES
        );
    };
    Seal::new(secret, node, metrics)
}

impl Bus {
    /// Whether a node with `cluster`'s settings could join: its secret is usable, and the NATS
    /// servers take its login. Joins nothing (no subscription); says which server answered.
    ///
    /// # Errors
    /// What [`Bus::connect`] would fail with.
    pub async fn check(cluster: &ClusterConfig) -> anyhow::Result<String> {
        seal_of(cluster, "doctor".into(), Metrics::default())?;
        let client = connect::client(cluster, "doctor", FORWARD_TIMEOUT).await?;
        client
            .flush()
            .await
            .map_err(|e| anyhow::anyhow!("NATS did not answer: {e}"))?;
        let info = client.server_info();
        Ok(format!(
            "NATS {} at {}:{} ({})",
            info.version, info.host, info.port, info.server_name
        ))
    }

    /// Connects to the NATS server(s) of `cluster` as node `node`, sealing and checking every
    /// message with the cluster secret; a gap in the frames it relays is read from the store
    /// in pages of at most `page_bytes`. The connection is kept up (and re-established after an
    /// outage) for as long as the bus lives.
    ///
    /// # Errors
    /// Without a cluster secret of at least 32 bytes, with NATS settings that can't be used,
    /// and when NATS can't be reached within 10 seconds.
    pub async fn connect(
        cluster: &ClusterConfig,
        node: String,
        metrics: Metrics,
        page_bytes: usize,
    ) -> anyhow::Result<Arc<Bus>> {
        let seal = Arc::new(seal_of(cluster, node.clone(), metrics.clone())?);
        let client = connect::client(cluster, &node, FORWARD_TIMEOUT).await?;
        let (frames, mut queued) = mpsc::unbounded_channel::<(RowId, Frame)>();
        let (publisher, sealer) = (client.clone(), seal.clone());
        tokio::spawn(async move {
            while let Some((row, frame)) = queued.recv().await {
                let subject = frames_subject(row);
                let seq = frame.seq.map(|seq| seq.to_string());
                let mut routing = vec![(TYPE, frame.kind)];
                if let Some(seq) = &seq {
                    routing.push((SEQ, seq.as_str()));
                }
                let payload = frame.text.bytes();
                let headers = sealer.frame(&subject, &routing, &payload);
                let sent = publisher
                    .publish_with_headers(subject, headers, payload)
                    .await;
                if let Err(err) = sent {
                    tracing::warn!(error = %err, "publishing a frame to the other nodes failed");
                }
            }
        });
        Ok(Arc::new(Bus {
            client,
            node,
            seal,
            frames,
            metrics,
            page_bytes,
        }))
    }

    /// The messages other nodes publish on `subject` sealed as frames (covering the routing
    /// headers `routing`), opened and taken in order per sending node (a replayed one is
    /// refused), each with the node that sent it, until `stop`; returns once the subscription
    /// is in place.
    ///
    /// # Errors
    /// When the subscription can't be made.
    async fn frames_on(
        &self,
        subject: String,
        routing: &'static [&'static str],
        stop: CancellationToken,
    ) -> anyhow::Result<impl futures_util::Stream<Item = (async_nats::Message, String)> + use<>>
    {
        let order = self.seal.frame_order(&subject);
        let sub = self.client.subscribe(subject.clone()).await?;
        // The server has the subscription once it answers a flush.
        self.client.flush().await?;
        let state = (sub, order, self.seal.clone(), subject, stop);
        Ok(futures_util::stream::unfold(
            state,
            move |state| async move {
                let (mut sub, mut order, seal, subject, stop) = state;
                loop {
                    let msg = tokio::select! {
                        msg = sub.next() => msg,
                        () = stop.cancelled() => None,
                    }?;
                    let headers = msg.headers.as_ref();
                    let Ok(opened) =
                        seal.open(Kind::Frame, &subject, headers, routing, &msg.payload)
                    else {
                        continue;
                    };
                    if !seal.admit(&mut order, &opened.nonce) {
                        seal.refused(Kind::Frame, Refusal::Replayed, Some(&opened.from));
                        continue;
                    }
                    return Some(((msg, opened.from), (sub, order, seal, subject, stop)));
                }
            },
        ))
    }

    /// Publishes a frame of conversation `row` (committed, if stored) to the other nodes.
    pub(super) fn publish(&self, row: RowId, frame: &Frame) {
        let _ = self.frames.send((row, frame.clone()));
    }

    /// Relays the frames other nodes publish for `conversation` into `events` until `stop` fires;
    /// returns once the subscription is in place. A stored frame whose `seq` jumps past the
    /// last one relayed is preceded by the ones in between, read from the store.
    pub(super) async fn relay(
        &self,
        conversation: Arc<Conversation>,
        events: super::events::Sender,
        store: Arc<dyn Store>,
        viewers: Arc<super::viewers::Viewers>,
        stop: CancellationToken,
    ) {
        let subject = frames_subject(conversation.row);
        let frames = match self.frames_on(subject, &[TYPE, SEQ], stop).await {
            Ok(frames) => frames,
            Err(err) => {
                tracing::warn!(error = %err, "following a conversation on the other nodes failed");
                return;
            }
        };
        let (metrics, seal, page_bytes) =
            (self.metrics.clone(), self.seal.clone(), self.page_bytes);
        tokio::spawn(async move {
            let mut frames = std::pin::pin!(frames);
            let mut last: Option<i64> = None;
            while let Some((msg, from)) = frames.next().await {
                let headers = msg.headers.as_ref();
                let header = |name| headers.and_then(|h| h.get(name)).map(|v| v.as_str());
                let Some(frame) = relayed_frame(
                    &conversation,
                    header(SEQ),
                    header(TYPE).unwrap_or_default(),
                    &msg.payload,
                ) else {
                    seal.refused(Kind::Frame, Refusal::Malformed, Some(&from));
                    continue;
                };
                // Who views it through that node, merged with who does elsewhere.
                let frame = if frame.kind == "viewers" {
                    match viewers.relayed(&conversation, &from, &frame) {
                        Ok(Some(frame)) => frame,
                        Ok(None) => continue,
                        Err(()) => {
                            seal.refused(Kind::Frame, Refusal::Malformed, Some(&from));
                            continue;
                        }
                    }
                } else {
                    frame
                };
                if let (Some(seq), Some(prev)) = (frame.seq, last)
                    && seq > prev + 1
                {
                    fill_gap(&*store, &conversation, &events, page_bytes, prev, seq).await;
                }
                if let Some(seq) = frame.seq {
                    last = Some(last.map_or(seq, |prev| prev.max(seq)));
                }
                metrics.relayed_frame();
                events.send(frame);
            }
        });
    }

    /// Sends `command` for conversation `agent_id` of `principal` to node `node` and waits for
    /// its answer.
    ///
    /// # Errors
    /// [`NoOwner`] when nobody answers for that node (it is gone).
    pub(super) async fn forward(
        &self,
        node: &str,
        principal: &Principal,
        agent_id: &AgentId,
        sender: &Principal,
        command: &Command,
    ) -> Result<Answer, NoOwner> {
        let request = Forward::new(principal, sender, agent_id, command);
        let payload = serde_json::to_vec(&request).expect("requests serialize");
        let subject = node_subject(node);
        let (headers, nonce) = self.seal.command(&subject, &payload);
        let unreadable = |why: String| Answer::Error {
            code: ErrorCode::BackendUnavailable,
            message: format!("node `{node}` answered {why}"),
        };
        match self
            .client
            .request_with_headers(subject, headers, payload.into())
            .await
        {
            Ok(msg) => {
                let opened = self.seal.open(
                    Kind::Answer,
                    &nonce,
                    msg.headers.as_ref(),
                    &[],
                    &msg.payload,
                );
                Ok(match opened {
                    Err(refusal) => unreadable(format!(
                        "with a message that failed the cluster's authentication ({})",
                        refusal.label()
                    )),
                    Ok(_) => serde_json::from_slice(&msg.payload)
                        .unwrap_or_else(|e| unreadable(format!("something unreadable: {e}"))),
                })
            }
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
        let subject = node_subject(&self.node);
        let mut sub = self.client.subscribe(subject.clone()).await?;
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
                let headers = msg.headers.as_ref();
                let opened =
                    match self
                        .seal
                        .open(Kind::Command, &subject, headers, &[], &msg.payload)
                    {
                        Ok(opened) => opened,
                        Err(refusal) => {
                            // Said, unsealed, so that a node with another secret learns it at once
                            // instead of waiting out its request; nothing was run.
                            let refused = Answer::Error {
                                code: ErrorCode::Unauthorized,
                                message: format!(
                                    "node `{}` refused a command not sealed with its cluster \
                                 secret ({})",
                                    self.node,
                                    refusal.label()
                                ),
                            };
                            let payload = serde_json::to_vec(&refused).expect("answers serialize");
                            let _ = self.client.publish(reply, payload.into()).await;
                            continue;
                        }
                    };
                let (manager, bus) = (manager.clone(), self.clone());
                tokio::spawn(async move {
                    let answer = match serde_json::from_slice::<Forward>(&msg.payload) {
                        Ok(request) if request.is_sound() => {
                            answer(&manager, request, limits).await
                        }
                        _ => {
                            bus.seal
                                .refused(Kind::Command, Refusal::Malformed, Some(&opened.from));
                            Answer::Error {
                                code: ErrorCode::BadFrame,
                                message: "a forwarded command that is not one".into(),
                            }
                        }
                    };
                    let payload = serde_json::to_vec(&answer).expect("answers serialize");
                    let headers = bus.seal.answer(&opened.nonce, &payload);
                    let sent = bus
                        .client
                        .publish_with_headers(reply, headers, payload.into())
                        .await;
                    if let Err(err) = sent {
                        tracing::warn!(error = %err, "answering a forwarded command failed");
                    }
                });
            }
        });
        Ok(())
    }
}

/// Relays the stored frames of `conversation` with `prev < seq < next` (missed on the bus),
/// read a page at a time as a replay reads them ([`replay::REPLAY_PAGE`] frames and
/// `page_bytes` at most), so that a long gap holds one page in memory, not the whole gap.
async fn fill_gap(
    store: &dyn Store,
    conversation: &Conversation,
    events: &super::events::Sender,
    page_bytes: usize,
    prev: i64,
    next: i64,
) {
    let mut after = prev;
    while after + 1 < next {
        let missing = u32::try_from(next - after - 1).unwrap_or(u32::MAX);
        let size = PageSize {
            rows: missing.min(replay::REPLAY_PAGE),
            bytes: page_bytes,
        };
        let page = match store.messages_after(conversation.row, after, size).await {
            Ok(page) => page,
            Err(err) => {
                tracing::warn!(error = %err, "filling a gap of relayed frames failed");
                return;
            }
        };
        for row in page.rows.iter().take_while(|r| r.seq < next) {
            events.send(replay::stored_frame(conversation, row));
        }
        match page.rows.last() {
            Some(last) if page.more => after = last.seq,
            _ => return,
        }
    }
}

/// The header fields of a frame another node published, read to check them against the
/// conversation it is relayed for (a missing or repeated one fails the read).
#[derive(Deserialize)]
struct RelayedHeader<'a> {
    #[serde(borrow)]
    message_type: Cow<'a, str>,
    #[serde(borrow)]
    agent_id: Cow<'a, str>,
    #[serde(borrow)]
    session_id: Cow<'a, str>,
    #[serde(default)]
    seq: Option<i64>,
}

/// The frame another node published for `conversation` with routing headers `seq` and
/// `message_type`, if it is one: a JSON object whose header names this conversation and
/// agrees with the routing headers.
fn relayed_frame(
    conversation: &Conversation,
    seq: Option<&str>,
    message_type: &str,
    payload: &[u8],
) -> Option<Frame> {
    let text = std::str::from_utf8(payload).ok()?;
    let header: RelayedHeader<'_> = serde_json::from_str(text).ok()?;
    let seq = match seq {
        Some(seq) => Some(seq.parse::<i64>().ok()?),
        None => None,
    };
    let tag = conversation.tag();
    let sound = header.message_type == message_type
        && header.agent_id == tag.agent_id
        && header.session_id == tag.session_id
        && header.seq == seq;
    sound.then(|| Frame::relayed(seq, message_type, text.to_owned()))
}

/// Runs a command another node forwarded, once it reads as a client's command frame.
async fn answer(manager: &Manager, request: Forward, limits: DecodeLimits) -> Answer {
    match request.command(limits) {
        Ok((agent_id, command)) => {
            let (principal, sender) = request.acting();
            manager.answer(principal, &agent_id, sender, command).await
        }
        Err(refused) => refused,
    }
}

#[cfg(test)]
mod tests;
