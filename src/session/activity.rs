//! Each principal's activity feed: one short `activity` frame when a turn of any of their
//! conversations starts or ends or a tool waits for approval, for clients that `watch`.

use dashmap::DashMap;

use super::events::{Receiver, Sender};
use crate::protocol::{Frame, Principal};

/// Frames kept for a watcher that falls behind (it is told how many it missed).
const CAPACITY: usize = 256;

/// The feeds, one per principal with watchers.
#[derive(Default)]
pub(crate) struct Feeds {
    by_principal: DashMap<Principal, Sender>,
}

impl Feeds {
    /// A receiver of `principal`'s activity from now on.
    pub(crate) fn watch(&self, principal: &Principal) -> Receiver {
        self.by_principal
            .entry(principal.clone())
            .or_insert_with(|| Sender::new(CAPACITY))
            .subscribe()
    }

    /// Sends the frame `make` builds to `principal`'s watchers; builds nothing when there are
    /// none, and forgets a feed whose watchers are all gone.
    pub(crate) fn publish(&self, principal: &Principal, make: impl FnOnce() -> Frame) {
        let sent = match self.by_principal.get(principal) {
            None => return,
            Some(feed) => feed.receiver_count() > 0 && feed.send(make()) > 0,
        };
        if !sent {
            self.by_principal
                .remove_if(principal, |_, feed| feed.receiver_count() == 0);
        }
    }
}
