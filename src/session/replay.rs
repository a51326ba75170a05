//! Reading a conversation's stored frames back in `seq` order, and following it without gaps:
//! the cursor every follower keeps (a socket's `subscribe` with `since_seq` and its lag
//! recovery, an event stream's `Last-Event-ID`).

use std::sync::Arc;

use futures_util::Stream;
use tokio::sync::Semaphore;

use super::errors::store_error;
use super::{Conversation, Manager};
use crate::protocol::{self, Frame};
use crate::session::SessionError;
use crate::store::{PageSize, Store, StoredMessage};

/// Stored frames read per page: small enough that a page's read on a blocking thread does not
/// hold a core away from live work for long.
pub const REPLAY_PAGE: u32 = 250;

/// Replay pages read and built at once, server-wide. Replays of many followers at once (each a
/// page ahead of its socket) take turns here instead of crowding out the live conversations'
/// work; one replay's read of its next page still overlaps its socket's writes.
pub(super) const REPLAY_READERS: usize = 1;

/// A follower's position in a conversation: the highest stored `seq` it was sent.
#[derive(Clone)]
pub struct Cursor {
    /// The conversation.
    pub conversation: Arc<Conversation>,
    /// Highest stored `seq` sent.
    pub last_seq: i64,
    store: Arc<dyn Store>,
    readers: Arc<Semaphore>,
    /// A replay page: [`REPLAY_PAGE`] frames and `session.page_bytes` at most.
    page: PageSize,
}

impl Manager {
    /// A cursor in `conversation` that has seen every stored frame up to `last_seq`.
    pub fn cursor(&self, conversation: Arc<Conversation>, last_seq: i64) -> Cursor {
        Cursor {
            conversation,
            last_seq,
            store: self.shared.store.clone(),
            readers: self.shared.replay_readers.clone(),
            page: PageSize {
                rows: REPLAY_PAGE,
                bytes: self.shared.config.session.page_bytes,
            },
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
        protocol::status_frame(self.conversation.tag(), "lagged", &detail)
    }

    /// The stored frames after this cursor, in order, a page at a time; the stream ends after
    /// the last page or the first error (`store_unavailable`). The next page is read while the
    /// caller sends the current one, so a follower that does not read holds two pages, each
    /// bounded in frames and in bytes.
    pub fn replay(&self) -> impl Stream<Item = Result<Vec<Frame>, SessionError>> + Send + 'static {
        let store = self.store.clone();
        let conversation = self.conversation.clone();
        let readers = self.readers.clone();
        let size = self.page;
        let mut after = self.last_seq;
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            loop {
                // The turn is held while the page is read and built, never while it waits for
                // the follower's socket: a slow follower holds up no one else's replay.
                let (page, last) = {
                    let Ok(_turn) = readers.acquire().await else {
                        return;
                    };
                    match store.messages_after(conversation.row, after, size).await {
                        Err(err) => (Err(store_error(err, &conversation.agent_id)), true),
                        Ok(page) if page.rows.is_empty() => return,
                        Ok(page) => {
                            after = page.rows.last().map_or(after, |r| r.seq);
                            let frames = page.rows.iter().map(|r| stored_frame(&conversation, r));
                            (Ok(frames.collect::<Vec<Frame>>()), !page.more)
                        }
                    }
                };
                // The follower went away, or that was the last page (or an error): stop.
                if tx.send(page).await.is_err() || last {
                    return;
                }
            }
        });
        tokio_stream::wrappers::ReceiverStream::new(rx)
    }
}

/// The frame of a stored message, exactly as it was sent live.
pub(super) fn stored_frame(conversation: &Conversation, row: &StoredMessage) -> Frame {
    protocol::session_frame(
        conversation.tag(),
        &row.message_type,
        Some(row.seq),
        &row.created_at,
        &row.payload,
        row.turn_cost_usd,
    )
}
