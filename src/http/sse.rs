//! `GET /api/sessions/{agent_id}/events`: a conversation's frames as Server-Sent Events, for
//! clients that can't hold a WebSocket. Each stored frame is an event with `id: <seq>`; a
//! client that reconnects with `Last-Event-ID` (or `?since_seq=`) gets every stored frame after
//! it, then the live ones — the same replay and cursor as a WebSocket `subscribe`. A stream
//! with nothing to send for `socket.idle_timeout_secs` ends (the client reconnects), and while
//! open it holds one of its principal's connections.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::StreamExt;
use serde::Deserialize;
use tokio::sync::mpsc;
use utoipa::IntoParams;

use super::rest::{agent_id, last_event_id};
use crate::http::AppState;
use crate::http::auth::Principal;
use crate::http::{ApiError, ErrorBody};
use crate::protocol::{self, AgentId, Frame};
use crate::session::Need;
use crate::session::events::{Receiver, RecvError};
use crate::session::replay::Cursor;

/// Events buffered for one slow client before it falls behind the conversation (and is
/// replayed from the store).
const EVENT_BUFFER: usize = 256;

/// Where the stream starts.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsParams {
    /// Replay stored frames with a greater `seq` first (default 0); `Last-Event-ID` wins.
    since_seq: Option<i64>,
}

/// Streams a conversation's frames as Server-Sent Events; never starts an agent.
#[utoipa::path(get, path = "/api/sessions/{agent_id}/events", operation_id = "session_events",
    params(("agent_id" = String, Path, description = "The conversation"), EventsParams,
        ("Last-Event-ID" = Option<i64>, Header, description = "The last `seq` received")),
    responses((status = 200, description = "Each frame as the `data` of an event; stored ones with `id: <seq>`", content_type = "text/event-stream"),
        (status = 404, body = ErrorBody)))]
pub async fn events(
    State(app): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    params: Result<Query<EventsParams>, QueryRejection>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let Query(params) = params?;
    let id = agent_id(id)?;
    let since = match last_event_id(&headers)? {
        Some(seq) => seq,
        None => params.since_seq.unwrap_or(0).max(0),
    };
    let acting = app.manager.acting(&principal, &id, Need::View).await?;
    // A stream of a conversation shared with the caller ends when the share does.
    let revoked = acting.shared.as_ref().map(|(alias, _)| {
        let (manager, principal, alias) = (app.manager.clone(), principal.clone(), alias.clone());
        let mut ends = manager.revocations(&principal);
        async move {
            loop {
                let _ = ends.recv().await;
                if manager
                    .acting(&principal, &alias, Need::View)
                    .await
                    .is_err()
                {
                    return alias;
                }
            }
        }
    });
    let sub = app
        .manager
        .subscribe(&acting.principal, &acting.agent_id)
        .await?;
    let cursor = app.manager.cursor(sub.conversation, since);
    let (tx, rx) = mpsc::channel(EVENT_BUFFER);
    let gone = tx.clone();
    let alias = acting.shared.map(|(alias, _)| alias);
    let follower = Follower {
        cursor,
        out: tx,
        alias,
    };
    let shutdown = app.shutdown.clone();
    let viewing = app.manager.view(&follower.cursor.conversation, &principal);
    tokio::spawn(async move {
        let _viewing = viewing;
        let revoked = async move {
            match revoked {
                Some(revoked) => revoked.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = follower.run(sub.events) => {}
            // The stream ended (idle, or the client left): stop following at once.
            _ = gone.closed() => {}
            _ = shutdown.cancelled() => {}
            alias = revoked => {
                let _ = gone.send(protocol::access_revoked_frame(&alias)).await;
            }
        }
    });
    // A stream that has had nothing to send for the idle timeout ends; the client reconnects
    // with `Last-Event-ID` (an `EventSource` does so by itself).
    let idle = Duration::from_secs(app.config.socket.idle_timeout_secs);
    let frames = futures_util::stream::unfold(rx, move |mut rx| async move {
        let frame = tokio::time::timeout(idle, rx.recv()).await.ok().flatten()?;
        Some((frame, rx))
    });
    let stream = frames.map(|frame: Frame| {
        let event = Event::default().data(frame.text.as_str());
        Ok::<_, Infallible>(match frame.seq {
            Some(seq) => event.id(seq.to_string()),
            None => event,
        })
    });
    // A proxy that buffers responses (nginx does by default) would hold events back until its
    // buffer fills: this asks it not to, whatever its settings.
    Ok((
        [("x-accel-buffering", "no")],
        Sse::new(stream).keep_alive(KeepAlive::default()),
    ))
}

/// Feeds one event stream: replay after the cursor, then live frames, replaying again after
/// falling behind.
struct Follower {
    cursor: Cursor,
    out: mpsc::Sender<Frame>,
    /// The alias the caller knows the conversation by, when it is shared with them.
    alias: Option<AgentId>,
}

impl Follower {
    /// Sends a frame as the caller names its conversation.
    async fn send(&self, frame: Frame) -> Result<(), ()> {
        let frame = match &self.alias {
            Some(alias) => frame.retagged(alias),
            None => frame,
        };
        self.out.send(frame).await.map_err(|_| ())
    }

    async fn run(mut self, mut live: Receiver) {
        if self.replay().await.is_err() {
            return;
        }
        loop {
            match live.recv().await {
                Ok(frame) => {
                    if self.cursor.admit(&frame) && self.send(frame).await.is_err() {
                        return;
                    }
                }
                Err(RecvError::Lagged(missed)) => {
                    let status = self.cursor.lagged(missed);
                    if self.send(status).await.is_err() || self.replay().await.is_err() {
                        return;
                    }
                }
                Err(RecvError::Closed) => return,
            }
        }
    }

    /// Sends the stored frames after the cursor; `Err` when the client is gone or the store
    /// failed (the stream then ends, and the client reconnects with `Last-Event-ID`).
    async fn replay(&mut self) -> Result<(), ()> {
        let mut pages = std::pin::pin!(self.cursor.replay());
        while let Some(page) = pages.next().await {
            let frames = page.map_err(|_| ())?;
            for frame in frames {
                if self.cursor.admit(&frame) {
                    self.send(frame).await?;
                }
            }
        }
        Ok(())
    }
}
