//! `GET /ws`: one task per socket, a single `select!` loop over the client's frames, the
//! frames of every conversation the socket follows, the idle timer and shutdown; what each
//! frame the client sends asks of the socket is in [`commands`].
//!
//! A socket follows a conversation through that conversation's broadcast and remembers the
//! last `seq` it sent. When it falls behind the broadcast it is told (`status` `lagged`) and
//! replayed from the store from that `seq`; stored frames it already has are skipped, so it
//! sees every stored frame exactly once and in order.

mod commands;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures_util::stream::{AbortHandle, Abortable, FuturesOrdered, SelectAll};
use futures_util::{FutureExt, SinkExt, Stream, StreamExt};
use serde::Deserialize;
use tokio::time::{Instant, sleep_until};
use tracing::Instrument;

use crate::config::SocketConfig;
use crate::http::AppState;
use crate::http::auth::Principal;
use crate::limits::{QuotaPermit, RateLimiter, Verdict};
use crate::metrics::FramesOut;
use crate::protocol::{self, AgentId, DecodeLimits, ErrorCode, Frame, FrameError, is_share_alias};
use crate::session::events::{Batches, Lagged, Receiver};
use crate::session::replay::Cursor;
use crate::session::{ChatAccepted, SessionError, Viewing};

use super::shared::{self, Ended, Revocations, named};

/// Most frames written before one flush.
const WRITE_BATCH: usize = 256;

/// Bytes a socket reads at a time. tungstenite zero-fills its whole read buffer, so this is
/// resident memory of every idle socket (its default, 128 KiB, made an idle socket cost ~135 KiB);
/// larger frames still arrive, in several reads.
const READ_BUFFER_BYTES: usize = 4 << 10;

/// Close code for a frame larger than the configured maximum.
const CLOSE_TOO_BIG: u16 = 1009;
/// Close code for server shutdown.
const CLOSE_GOING_AWAY: u16 = 1001;
/// Close code for an idle socket.
const CLOSE_NORMAL: u16 = 1000;
/// Close code for a socket that keeps sending over its rate.
const CLOSE_POLICY: u16 = 1008;
/// How long a closing socket waits for the client's close frame, reading and dropping
/// whatever comes first, so the connection ends cleanly instead of being reset.
const CLOSE_DRAIN: Duration = Duration::from_secs(2);

/// Query parameters of the upgrade.
#[derive(Deserialize)]
pub struct UpgradeQuery {
    /// A ticket from `POST /api/ws-ticket`.
    ticket: Option<String>,
}

/// Upgrades to a WebSocket speaking protocol v1, after checking the credentials and the
/// principal's socket quota (401 and 429 otherwise); the router's guard has checked `Host` and
/// `Origin`.
pub async fn upgrade(
    ws: WebSocketUpgrade,
    State(app): State<AppState>,
    Query(query): Query<UpgradeQuery>,
    headers: HeaderMap,
) -> Response {
    let (principal, protocol) = match app.auth.socket_principal(&headers, query.ticket.as_deref()) {
        Ok(admitted) => admitted,
        Err(rejection) => return rejection.into_response(),
    };
    let permit = match super::connection(&app, &principal) {
        Ok(permit) => permit,
        Err(refusal) => return refusal.into_response(),
    };
    // Echo the ticket subprotocol: a browser fails a socket whose offered protocol isn't.
    let ws = match protocol {
        Some(p) => ws.protocols([p]),
        None => ws,
    };
    static NEXT_SOCKET: AtomicU64 = AtomicU64::new(1);
    let span = tracing::info_span!(
        "socket",
        socket = NEXT_SOCKET.fetch_add(1, Ordering::Relaxed),
        %principal,
    );
    let open = app.open_sockets.token();
    configure(ws, &app.config.socket).on_upgrade(move |socket| {
        // Boxed: an `async fn` taking `self` by value keeps it twice (as passed, and as its
        // body's), and a task keeps what its future captured for as long as it runs, so a
        // socket's state moved into the task by value was paid twice by every idle socket,
        // and the arguments it was made from once more.
        let connection = Box::new(Connection::new(socket, app.clone(), principal, permit));
        async move {
            let _open = open;
            app.metrics.sockets(1);
            connection.run().await;
            app.metrics.sockets(-1);
        }
        .instrument(span)
    })
}

/// Applies the socket settings (size limits, buffer sizes) to an upgrade.
fn configure(ws: WebSocketUpgrade, socket: &SocketConfig) -> WebSocketUpgrade {
    let max = socket.max_frame_bytes;
    ws.max_message_size(max)
        .max_frame_size(max)
        .read_buffer_size(READ_BUFFER_BYTES)
}

/// A followed conversation: the socket's cursor in it and the switch that ends its stream.
struct Followed {
    cursor: Cursor,
    /// Ends this conversation's stream in `Connection::subs`.
    stop: AbortHandle,
    /// The principal views the conversation while the socket follows it.
    _viewing: Viewing,
}

/// One followed conversation's live frames, a batch of what is ready at a time, tagged with its
/// `agent_id`, until aborted.
struct Live {
    agent_id: Arc<str>,
    frames: Abortable<Batches>,
}

impl Stream for Live {
    type Item = (Arc<str>, Result<Vec<Frame>, Lagged>);

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let agent_id = self.agent_id.clone();
        Pin::new(&mut self.frames)
            .poll_next(cx)
            .map(|item| item.map(|frame| (agent_id, frame)))
    }
}

/// The next line of the activity feed; never, while the socket does not watch.
async fn next_activity(feed: &mut Option<Receiver>) -> Option<Result<Frame, Lagged>> {
    match feed {
        Some(feed) => feed.next().await,
        None => std::future::pending().await,
    }
}

/// A chat waiting for its user message to be stored: `(agent_id, client_msg_id, outcome)`.
type PendingAck = Pin<
    Box<dyn Future<Output = (AgentId, Option<String>, Result<ChatAccepted, SessionError>)> + Send>,
>;

struct Connection {
    socket: WebSocket,
    app: AppState,
    principal: Principal,
    limits: DecodeLimits,
    /// Live frames of every followed conversation. `SelectAll` polls only the streams that
    /// were woken, so a socket following hundreds of conversations pays per frame, not per
    /// conversation.
    subs: SelectAll<Live>,
    followed: HashMap<AgentId, Followed>,
    /// Chats handed to their conversations whose user message is being stored, in the order
    /// they arrived. The socket keeps reading meanwhile, so its chats share group commits.
    acks: FuturesOrdered<PendingAck>,
    /// Frames per second; `None` when unlimited.
    rate: Option<RateLimiter>,
    /// The principal's activity feed, once the client sent `watch`.
    activity: Option<Receiver>,
    /// The ends of shares of conversations shared with the principal, once the socket
    /// follows one.
    revocations: Revocations,
    /// What this socket's page shows, once the client sent `presence`.
    presence: Option<crate::push::Seat>,
    /// Frames of the batch being written, by type, for the metrics.
    sent: FramesOut,
    /// This socket's place in its principal's socket quota.
    _permit: QuotaPermit,
}

type SocketResult = Result<(), axum::Error>;

impl Connection {
    fn new(socket: WebSocket, app: AppState, principal: Principal, permit: QuotaPermit) -> Self {
        let limits = app.config.decode_limits();
        let rate = RateLimiter::new(app.config.socket.max_frames_per_sec);
        Connection {
            socket,
            app,
            principal,
            limits,
            subs: SelectAll::new(),
            followed: HashMap::new(),
            acks: FuturesOrdered::new(),
            rate,
            activity: None,
            revocations: Revocations::default(),
            presence: None,
            sent: FramesOut::default(),
            _permit: permit,
        }
    }

    async fn run(mut self: Box<Self>) {
        let idle = Duration::from_secs(self.app.config.socket.idle_timeout_secs);
        let shutdown = self.app.shutdown.clone();
        let mut deadline = Instant::now() + idle;
        loop {
            let outcome = tokio::select! {
                _ = shutdown.cancelled() => {
                    // What the conversations published before the close (the results that
                    // ended their turns) is sent first.
                    while let Some(Some(item)) = self.subs.next().now_or_never() {
                        if self.forward(item).await.is_err() {
                            return;
                        }
                    }
                    self.close(CLOSE_GOING_AWAY, "server shutdown").await;
                    return;
                }
                _ = sleep_until(deadline) => {
                    self.close(CLOSE_NORMAL, "idle_timeout").await;
                    return;
                }
                msg = self.socket.recv() => {
                    deadline = Instant::now() + idle;
                    if matches!(msg, Some(Ok(Message::Text(_) | Message::Binary(_) | Message::Ping(_)))) {
                        match self.within_rate().await {
                            Ok(true) => {}
                            Ok(false) => continue,
                            Err(()) => return,
                        }
                    }
                    match msg {
                        None | Some(Ok(Message::Close(_))) => return,
                        // Boxed: handling a frame nests the manager's and the store's futures,
                        // which would otherwise be part of every idle socket's task.
                        Some(Ok(Message::Text(text))) => Box::pin(self.on_text(text.as_str())).await,
                        Some(Ok(Message::Binary(_))) => {
                            self.send_error(&FrameError::new(ErrorCode::BadFrame, "binary frames are not accepted; send JSON text")).await
                        }
                        Some(Ok(Message::Ping(_) | Message::Pong(_))) => Ok(()),
                        Some(Err(err)) => {
                            if is_too_big(err) {
                                self.close(CLOSE_TOO_BIG, "frame too large").await;
                            }
                            return;
                        }
                    }
                }
                Some((agent_id, client_msg_id, outcome)) = self.acks.next() => {
                    self.on_stored(agent_id, client_msg_id, outcome).await
                }
                Some(item) = self.subs.next() => self.forward(item).await,
                ended = self.revocations.next() => self.on_revoked(ended).await,
                Some(item) = next_activity(&mut self.activity) => match item {
                    Ok(frame) => {
                        self.app.metrics.frame_out(frame.kind);
                        self.send(frame).await
                    }
                    // A watcher that fell far behind misses some lines; the session list
                    // (REST) has the state.
                    Err(Lagged(_)) => Ok(()),
                },
            };
            if outcome.is_err() {
                return;
            }
        }
    }

    /// Counts one client frame against the socket's rate. `Ok(true)`: handle it; `Ok(false)`:
    /// it was dropped and answered `rate_limited`; `Err`: the socket is finished (closed with
    /// 1008 for going on regardless, or broken).
    async fn within_rate(&mut self) -> Result<bool, ()> {
        let Some(rate) = self.rate.as_mut() else {
            return Ok(true);
        };
        match rate.check() {
            Verdict::Allowed => Ok(true),
            Verdict::Limited { strikes } if strikes > self.app.config.socket.max_rate_limited => {
                self.app.metrics.error(ErrorCode::RateLimited.as_str());
                self.close(CLOSE_POLICY, "rate_limited").await;
                Err(())
            }
            Verdict::Limited { .. } => {
                let err = FrameError::new(
                    ErrorCode::RateLimited,
                    "too many frames per second; slow down or the socket is closed",
                );
                self.send_error(&err).await.map_err(|_| ())?;
                Ok(false)
            }
        }
    }

    /// Sends a close frame, then reads until the client's close (or for at most
    /// [`CLOSE_DRAIN`]) so that frames still in flight don't turn the end into a reset.
    async fn close(&mut self, code: u16, reason: &'static str) {
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        if self.socket.send(Message::Close(Some(frame))).await.is_err() {
            return;
        }
        let _ = tokio::time::timeout(CLOSE_DRAIN, async {
            while let Some(Ok(msg)) = self.socket.recv().await {
                if matches!(msg, Message::Close(_)) {
                    return;
                }
            }
        })
        .await;
    }

    async fn send(&mut self, frame: Frame) -> SocketResult {
        self.app.metrics.frame_out(frame.kind);
        self.socket.send(text_message(frame)).await
    }

    async fn send_error(&mut self, err: &FrameError) -> SocketResult {
        self.app.metrics.error(err.code.as_str());
        self.send(protocol::error_frame(err)).await
    }

    /// Follows a conversation's live frames from the cursor on, replacing any earlier stream.
    fn follow(&mut self, agent_id: AgentId, cursor: Cursor, events: Receiver) {
        // A shared conversation is followed only while its share lasts.
        self.revocations
            .watch_for(&self.app, &self.principal, &agent_id);
        let (frames, stop) = futures_util::stream::abortable(events.batches(WRITE_BATCH));
        self.subs.push(Live {
            agent_id: agent_id.as_str().into(),
            frames,
        });
        let _viewing = self.app.manager.view(&cursor.conversation, &self.principal);
        let followed = Followed {
            cursor,
            stop,
            _viewing,
        };
        if let Some(old) = self.followed.insert(agent_id, followed) {
            old.stop.abort();
        }
    }

    /// Sends live frames and whatever else is ready, then flushes once.
    async fn forward(&mut self, first: (Arc<str>, Result<Vec<Frame>, Lagged>)) -> SocketResult {
        // A chat's ack goes before its conversation's frames: the reply that completes it is
        // sent before the user message is published.
        while let Some(Some((agent_id, client_msg_id, outcome))) = self.acks.next().now_or_never() {
            self.on_stored(agent_id, client_msg_id, outcome).await?;
        }
        let mut next = Some(first);
        let mut written = 0;
        while let Some((agent_id, item)) = next.take() {
            match item {
                Ok(frames) => {
                    // Stored frames already sent are skipped, and so is everything of a shared
                    // conversation the socket no longer follows (its share ended).
                    let mut followed = self.followed.get_mut(&*agent_id);
                    for frame in frames {
                        let new = match followed.as_mut() {
                            Some(followed) => followed.cursor.admit(&frame),
                            None => !is_share_alias(&agent_id),
                        };
                        if new {
                            self.sent.add(frame.kind);
                            let frame = named(&agent_id, frame);
                            self.socket.feed(text_message(frame)).await?;
                            written += 1;
                        }
                    }
                }
                Err(Lagged(missed)) => {
                    self.socket.flush().await?;
                    self.catch_up(&agent_id, missed).await?;
                }
            }
            if written < WRITE_BATCH {
                next = self.subs.next().now_or_never().flatten();
            }
        }
        self.app.metrics.frames_out(&mut self.sent);
        self.socket.flush().await
    }

    /// Sends a frame of conversation `agent_id` as the client names it.
    async fn send_as(&mut self, agent_id: &str, frame: Frame) -> SocketResult {
        self.send(named(agent_id, frame)).await
    }

    /// A share of the principal's ended: the socket stops following it at once and says so.
    async fn on_revoked(&mut self, ended: Ended) -> SocketResult {
        let gone = shared::gone(&self.app, &self.principal, ended, self.followed.keys()).await;
        for alias in gone {
            if let Some(followed) = self.followed.remove(&alias) {
                followed.stop.abort();
                self.send(protocol::access_revoked_frame(&alias)).await?;
            }
        }
        Ok(())
    }

    async fn catch_up(&mut self, agent_id: &str, missed: u64) -> SocketResult {
        let Some(Followed { cursor, .. }) = self.followed.get(agent_id) else {
            return Ok(());
        };
        let status = cursor.lagged(missed);
        self.send_as(agent_id, status).await?;
        self.replay(agent_id).await
    }

    /// Sends the stored frames after the cursor of `agent_id`, page by page.
    async fn replay(&mut self, agent_id: &str) -> SocketResult {
        let Some(Followed { cursor, .. }) = self.followed.get(agent_id) else {
            return Ok(());
        };
        let mut last = cursor.last_seq;
        let mut pages = std::pin::pin!(cursor.replay());
        while let Some(page) = pages.next().await {
            let frames = match page {
                Ok(frames) => frames,
                Err(err) => return self.send_error(&err.into_frame(agent_id, None)).await,
            };
            let mut frames = frames.into_iter().peekable();
            while frames.peek().is_some() {
                for frame in frames.by_ref().take(REPLAY_CHUNK) {
                    last = frame.seq.unwrap_or(last);
                    self.sent.add(frame.kind);
                    let frame = named(agent_id, frame);
                    self.socket.feed(text_message(frame)).await?;
                }
                self.app.metrics.frames_out(&mut self.sent);
                // Live conversations' work waiting for this thread goes first.
                tokio::task::yield_now().await;
            }
            self.socket.flush().await?;
            if let Some(Followed { cursor, .. }) = self.followed.get_mut(agent_id) {
                cursor.last_seq = cursor.last_seq.max(last);
            }
        }
        Ok(())
    }
}

/// Replayed frames sent between two yields to the live work queued on the same thread.
const REPLAY_CHUNK: usize = 64;

/// Whether a read error is a frame over the size limit.
fn is_too_big(err: axum::Error) -> bool {
    match err.into_inner().downcast::<tungstenite::Error>() {
        Ok(e) => matches!(*e, tungstenite::Error::Capacity(_)),
        Err(_) => false,
    }
}

/// A frame as a WebSocket text message, taking over the frame's share of its bytes.
fn text_message(frame: Frame) -> Message {
    Message::Text(Utf8Bytes::try_from(frame.text.into_bytes()).expect("frame text is UTF-8"))
}
