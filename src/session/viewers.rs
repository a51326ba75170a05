//! Who is viewing each conversation: a principal views one while a socket or event stream of
//! theirs follows it, and its followers get a `viewers` frame when someone starts (their first
//! stream) or stops (their last).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use super::{Conversation, Manager};
use crate::protocol::{self, Principal, Viewing as Event};
use crate::store::RowId;

/// The principals viewing each conversation on this node, with how many streams each.
#[derive(Default)]
pub(super) struct Viewers {
    by_row: Mutex<HashMap<RowId, BTreeMap<Principal, usize>>>,
}

impl Viewers {
    /// Counts one more stream of `viewer` on `row`: whether it is their first, and who views it.
    fn join(&self, row: RowId, viewer: &Principal) -> (bool, Vec<Principal>) {
        let mut rows = self.by_row.lock().expect("viewers lock");
        let viewers = rows.entry(row).or_default();
        let count = viewers.entry(viewer.clone()).or_default();
        *count += 1;
        (*count == 1, viewers.keys().cloned().collect())
    }

    /// Counts one stream of `viewer` on `row` less: whether it was their last, and who views it.
    fn leave(&self, row: RowId, viewer: &Principal) -> (bool, Vec<Principal>) {
        let mut rows = self.by_row.lock().expect("viewers lock");
        let Some(viewers) = rows.get_mut(&row) else {
            return (false, Vec::new());
        };
        let last = match viewers.get_mut(viewer) {
            Some(count) if *count > 1 => {
                *count -= 1;
                false
            }
            Some(_) => {
                viewers.remove(viewer);
                true
            }
            None => false,
        };
        let now = viewers.keys().cloned().collect();
        if viewers.is_empty() {
            rows.remove(&row);
        }
        (last, now)
    }
}

/// One stream of a principal following a conversation; when it is dropped they stop viewing
/// it (once it was their last).
pub struct Viewing {
    manager: Manager,
    conversation: Arc<Conversation>,
    viewer: Principal,
}

impl Drop for Viewing {
    fn drop(&mut self) {
        let row = self.conversation.row;
        let (last, now) = self.manager.shared.viewers.leave(row, &self.viewer);
        if last {
            self.manager
                .announce(&self.conversation, &self.viewer, Event::Left, &now);
        }
    }
}

impl Manager {
    /// `viewer` follows `conversation` with one more stream, until the returned guard is
    /// dropped; its followers (that stream's too) hear of it when it is their first.
    pub fn view(&self, conversation: &Arc<Conversation>, viewer: &Principal) -> Viewing {
        let (first, now) = self.shared.viewers.join(conversation.row, viewer);
        if first {
            self.announce(conversation, viewer, Event::Joined, &now);
        }
        Viewing {
            manager: self.clone(),
            conversation: conversation.clone(),
            viewer: viewer.clone(),
        }
    }

    /// Sends the followers of `conversation`, on every node, a `viewers` frame.
    fn announce(
        &self,
        conversation: &Conversation,
        viewer: &Principal,
        event: Event,
        now: &[Principal],
    ) {
        let key = Self::key(&conversation.principal, &conversation.agent_id);
        let Some(slot) = self.slots.get(&key).map(|s| s.clone()) else {
            return;
        };
        let names: Vec<&str> = now.iter().map(Principal::as_str).collect();
        let frame = protocol::viewers_frame(conversation.tag(), viewer.as_str(), event, &names);
        self.broadcast(&slot, conversation, frame);
    }
}

#[cfg(test)]
mod tests {
    use super::{Principal, RowId, Viewers};

    #[test]
    fn a_principal_joins_with_their_first_stream_and_leaves_with_their_last() {
        let viewers = Viewers::default();
        let (row, alice, bob) = (RowId(1), Principal::new("alice"), Principal::new("bob"));
        assert_eq!(viewers.join(row, &alice), (true, vec![alice.clone()]));
        assert_eq!(
            viewers.join(row, &bob),
            (true, vec![alice.clone(), bob.clone()])
        );
        assert!(!viewers.join(row, &bob).0);
        assert!(!viewers.leave(row, &bob).0);
        assert_eq!(viewers.leave(row, &bob), (true, vec![alice.clone()]));
        assert_eq!(viewers.leave(row, &alice), (true, vec![]));
        assert_eq!(viewers.leave(row, &alice), (false, vec![]));
        assert!(viewers.by_row.lock().unwrap().is_empty());
    }
}
