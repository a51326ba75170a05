//! Reading a conversation's stored frames back in `seq` order, and following it without gaps:
//! the cursor every follower keeps (a socket's `subscribe` with `since_seq` and its lag
//! recovery, an event stream's `Last-Event-ID`).

use std::sync::Arc;

use futures_util::Stream;

use super::{Conversation, Manager, store_error};
use crate::protocol::{self, Frame, FrameError};
use crate::store::{Store, StoredMessage};

/// Stored frames read per page.
pub const REPLAY_PAGE: u32 = 1000;

/// A follower's position in a conversation: the highest stored `seq` it was sent.
#[derive(Clone)]
pub struct Cursor {
    /// The conversation.
    pub session: Arc<Conversation>,
    /// Highest stored `seq` sent.
    pub last_seq: i64,
    store: Arc<dyn Store>,
}

impl Manager {
    /// A cursor in `session` that has seen every stored frame up to `last_seq`.
    pub fn cursor(&self, session: Arc<Conversation>, last_seq: i64) -> Cursor {
        Cursor {
            session,
            last_seq,
            store: self.shared.store.clone(),
        }
    }
}

impl Cursor {
    /// Whether `frame` should be sent: stored frames already sent (replayed, or seen live
    /// before a replay) are skipped; the cursor moves past the ones that pass.
    pub fn admit(&mut self, frame: &Frame) -> bool {
        match frame.seq {
            Some(seq) if seq <= self.last_seq => false,
            Some(seq) => {
                self.last_seq = seq;
                true
            }
            None => true,
        }
    }

    /// The `status` `lagged` telling a follower that `missed` live frames passed it by and
    /// that the stored ones after this cursor follow.
    pub fn lagged(&self, missed: u64) -> Frame {
        let detail = format!(
            "{missed} frame(s) were missed; replaying stored frames after seq {}",
            self.last_seq
        );
        protocol::status_frame(self.session.tag(), "lagged", &detail)
    }

    /// The stored frames after this cursor, in order, a page at a time; the stream ends after
    /// the last page or the first error (`store_unavailable`). The next page is read while the
    /// caller sends the current one.
    pub fn replay(&self) -> impl Stream<Item = Result<Vec<Frame>, FrameError>> + Send + 'static {
        let store = self.store.clone();
        let session = self.session.clone();
        let mut after = self.last_seq;
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            loop {
                let page = match store.messages_after(session.row, after, REPLAY_PAGE).await {
                    Err(err) => Err(store_error(err, &session.agent_id)),
                    Ok(rows) if rows.is_empty() => return,
                    Ok(rows) => {
                        let more = rows.len() == REPLAY_PAGE as usize;
                        after = rows.last().map_or(after, |r| r.seq);
                        let frames: Vec<Frame> =
                            rows.iter().map(|row| stored_frame(&session, row)).collect();
                        if more { Ok(frames) } else {
                            let _ = tx.send(Ok(frames)).await;
                            return;
                        }
                    }
                };
                let failed = page.is_err();
                // The follower went away (or the page was the last): stop reading.
                if tx.send(page).await.is_err() || failed {
                    return;
                }
            }
        });
        tokio_stream::wrappers::ReceiverStream::new(rx)
    }
}

/// The frame of a stored message, exactly as it was sent live.
pub(super) fn stored_frame(session: &Conversation, row: &StoredMessage) -> Frame {
    protocol::session_frame(
        session.tag(),
        &row.message_type,
        Some(row.seq),
        &row.created_at,
        &row.payload,
        row.turn_cost_usd,
    )
}
