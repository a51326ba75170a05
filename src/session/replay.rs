//! Reading a conversation's stored frames back in `seq` order, and following it without gaps:
//! shared by the WebSocket (`subscribe` with `since_seq`, lag recovery) and the Server-Sent
//! Events endpoint (`Last-Event-ID`).

use std::sync::Arc;

use futures_util::Stream;

use crate::protocol::{self, Frame};
use crate::session::SessionRef;
use crate::store::{Store, StoreError};

/// Stored frames read per page.
pub const REPLAY_PAGE: u32 = 1000;

/// A follower's position in a conversation: the highest stored `seq` it was sent.
#[derive(Debug, Clone)]
pub struct Cursor {
    /// The conversation.
    pub session: Arc<SessionRef>,
    /// Highest stored `seq` sent.
    pub last_seq: i64,
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

    /// The stored frames after this cursor, page by page (see [`stored_pages`]).
    pub fn replay(
        &self,
        store: Arc<dyn Store>,
    ) -> impl Stream<Item = Result<Vec<Frame>, StoreError>> + Send + 'static {
        stored_pages(store, self.session.clone(), self.last_seq)
    }
}

/// The stored frames of `session` with `seq > after_seq`, in order, a page at a time; the
/// stream ends after the last page or the first error.
pub fn stored_pages(
    store: Arc<dyn Store>,
    session: Arc<SessionRef>,
    after_seq: i64,
) -> impl Stream<Item = Result<Vec<Frame>, StoreError>> + Send + 'static {
    futures_util::stream::unfold(Some(after_seq), move |after| {
        let store = store.clone();
        let session = session.clone();
        async move {
            let after = after?;
            match store.messages_after(session.id, after, REPLAY_PAGE).await {
                Err(err) => Some((Err(err), None)),
                Ok(rows) if rows.is_empty() => None,
                Ok(rows) => {
                    let more = rows.len() == REPLAY_PAGE as usize;
                    let last = rows.last().map(|r| r.seq);
                    let frames = rows
                        .iter()
                        .map(|row| {
                            protocol::session_frame(
                                session.tag(),
                                &row.message_type,
                                Some(row.seq),
                                &row.created_at,
                                &row.payload,
                            )
                        })
                        .collect();
                    Some((Ok(frames), if more { last } else { None }))
                }
            }
        }
    })
}
