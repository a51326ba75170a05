//! Who is viewing each conversation: a principal views one while a socket or event stream of
//! theirs follows it, and its followers get a `viewers` frame when someone starts (their first
//! stream) or stops (their last) while others view it too: nobody is told of themself alone.
//! In a cluster each node tells the others who views it through that node, and lists everyone
//! it knows of to its own followers; those viewing through a node that is gone (not seen within
//! its lease) stop viewing, and are seen leaving.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::{Conversation, Manager};
use crate::protocol::{self, Frame, Principal, Viewing as Event};
use crate::store::RowId;

/// The principals viewing each conversation on this node, with how many streams each, and
/// those viewing it through other nodes, as each node last said.
#[derive(Default)]
pub(crate) struct Viewers {
    by_row: Mutex<HashMap<RowId, BTreeMap<Principal, usize>>>,
    elsewhere: Mutex<HashMap<RowId, HashMap<String, Vec<Principal>>>>,
}

/// What a `viewers` frame another node published says.
#[derive(Deserialize)]
struct Said {
    viewer: Principal,
    event: String,
    viewers: Vec<Principal>,
}

impl Viewers {
    /// Everyone viewing `row`: `here` (this node's) and those other nodes told of.
    fn everyone(&self, row: RowId, here: &[Principal]) -> Vec<Principal> {
        let elsewhere = self.elsewhere.lock().expect("viewers lock");
        let mut all: BTreeSet<Principal> = here.iter().cloned().collect();
        for names in elsewhere.get(&row).into_iter().flat_map(HashMap::values) {
            all.extend(names.iter().cloned());
        }
        all.into_iter().collect()
    }

    /// A `viewers` frame node `node` published about `conversation` (its list: who views it
    /// through that node), as this node's followers get it: with everyone this node knows of,
    /// when that tells anyone of someone else ([`worth_telling`]). `Err` when it is not one.
    pub(crate) fn relayed(
        &self,
        conversation: &Conversation,
        node: &str,
        frame: &Frame,
    ) -> Result<Option<Frame>, ()> {
        let said: Said = serde_json::from_str(frame.text.as_str()).map_err(|_| ())?;
        let event = match said.event.as_str() {
            "joined" => Event::Joined,
            "left" => Event::Left,
            _ => return Err(()),
        };
        let row = conversation.row;
        {
            let mut elsewhere = self.elsewhere.lock().expect("viewers lock");
            let nodes = elsewhere.entry(row).or_default();
            if said.viewers.is_empty() {
                nodes.remove(node);
            } else {
                nodes.insert(node.to_owned(), said.viewers);
            }
            if nodes.is_empty() {
                elsewhere.remove(&row);
            }
        }
        let here: Vec<Principal> = self
            .by_row
            .lock()
            .expect("viewers lock")
            .get(&row)
            .map(|v| v.keys().cloned().collect())
            .unwrap_or_default();
        let all = self.everyone(row, &here);
        if !worth_telling(event, &all) {
            return Ok(None);
        }
        let names: Vec<&str> = all.iter().map(Principal::as_str).collect();
        let tag = conversation.tag();
        Ok(Some(protocol::viewers_frame(
            tag,
            said.viewer.as_str(),
            event,
            &names,
        )))
    }

    /// Forgets who views each conversation through a node not among `live`: for each
    /// conversation that changes, who stopped viewing it (no longer viewing through any node)
    /// and who views it still.
    fn forget_nodes_but(
        &self,
        live: &HashSet<String>,
    ) -> Vec<(RowId, Vec<Principal>, Vec<Principal>)> {
        let mut gone: Vec<(RowId, Vec<Principal>)> = Vec::new();
        {
            let mut elsewhere = self.elsewhere.lock().expect("viewers lock");
            for (row, nodes) in elsewhere.iter_mut() {
                let mut left = Vec::new();
                nodes.retain(|node, names| {
                    let keep = live.contains(node);
                    if !keep {
                        left.append(names);
                    }
                    keep
                });
                if !left.is_empty() {
                    gone.push((*row, left));
                }
            }
            elsewhere.retain(|_, nodes| !nodes.is_empty());
        }
        let by_row = self.by_row.lock().expect("viewers lock");
        gone.into_iter()
            .map(|(row, left)| {
                let here: Vec<Principal> = by_row
                    .get(&row)
                    .map(|v| v.keys().cloned().collect())
                    .unwrap_or_default();
                let now = self.everyone(row, &here);
                let mut left: Vec<Principal> =
                    left.into_iter().filter(|p| !now.contains(p)).collect();
                left.sort();
                left.dedup();
                (row, left, now)
            })
            .collect()
    }

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

/// Whether followers are told of `event` when `now` view the conversation: a join while
/// someone else views it too, a leave that leaves someone.
fn worth_telling(event: Event, now: &[Principal]) -> bool {
    match event {
        Event::Joined => now.len() > 1,
        Event::Left => !now.is_empty(),
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

    /// In a cluster, every third of a lease until `stop` fires: those viewing conversations
    /// through a node that is gone stop viewing them, and this node's followers see them leave.
    pub(super) async fn expire_gone_viewers(self, stop: CancellationToken) {
        let every = std::time::Duration::from_secs(self.shared.config.cluster.lease_secs.max(1))
            .div_f64(3.0);
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = stop.cancelled() => return,
            }
            let live = match self.shared.store.live_nodes().await {
                Ok(Some(live)) => live,
                Ok(None) => return,
                Err(err) => {
                    tracing::warn!(error = %err, "reading which nodes are up failed");
                    continue;
                }
            };
            for (row, left, now) in self.shared.viewers.forget_nodes_but(&live) {
                let Some(slot) = self
                    .slots
                    .iter()
                    .find(|s| s.conversation.get().is_some_and(|c| c.row == row))
                    .map(|s| s.clone())
                else {
                    continue;
                };
                let conversation = slot.conversation.get().expect("found by it");
                let names: Vec<&str> = now.iter().map(Principal::as_str).collect();
                for viewer in left.iter().filter(|_| worth_telling(Event::Left, &now)) {
                    let frame = protocol::viewers_frame(
                        conversation.tag(),
                        viewer.as_str(),
                        Event::Left,
                        &names,
                    );
                    let _ = slot.events.send(frame);
                }
            }
        }
    }

    /// Sends the followers of `conversation` a `viewers` frame: on this node with everyone
    /// viewing it, to the other nodes with those viewing it through this one (`here`).
    fn announce(
        &self,
        conversation: &Conversation,
        viewer: &Principal,
        event: Event,
        here: &[Principal],
    ) {
        let key = Self::key(&conversation.principal, &conversation.agent_id);
        let Some(slot) = self.slots.get(&key).map(|s| s.clone()) else {
            return;
        };
        let frame = |list: &[Principal]| {
            let names: Vec<&str> = list.iter().map(Principal::as_str).collect();
            protocol::viewers_frame(conversation.tag(), viewer.as_str(), event, &names)
        };
        if let Some(bus) = &self.shared.bus {
            bus.publish(conversation.row, &frame(here));
        }
        let everyone = self.shared.viewers.everyone(conversation.row, here);
        if worth_telling(event, &everyone) {
            let _ = slot.events.send(frame(&everyone));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

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

    #[test]
    fn those_viewing_through_a_gone_node_leave() {
        let viewers = Viewers::default();
        let (row, alice, bob, carol) = (
            RowId(1),
            Principal::new("alice"),
            Principal::new("bob"),
            Principal::new("carol"),
        );
        viewers.join(row, &alice);
        {
            let mut elsewhere = viewers.elsewhere.lock().unwrap();
            let nodes = elsewhere.entry(row).or_default();
            nodes.insert("b".into(), vec![bob.clone(), carol.clone()]);
            nodes.insert("c".into(), vec![carol.clone()]);
        }
        let live: HashSet<String> = ["a".to_owned(), "c".to_owned()].into();
        assert_eq!(
            viewers.forget_nodes_but(&live),
            vec![(row, vec![bob], vec![alice, carol])]
        );
        assert!(viewers.forget_nodes_but(&live).is_empty());
    }
}
