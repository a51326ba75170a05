//! Which conversation each of a principal's pages has in view: what a socket last said in its
//! `presence` frame, forgotten when it closes. A conversation in view on any page of its
//! principal is pushed nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;

use crate::protocol::{AgentId, Principal};

/// The pages of every principal that told what they show.
#[derive(Default)]
pub struct Presence {
    by_principal: DashMap<Principal, HashMap<u64, AgentId>>,
    next: AtomicU64,
}

/// One socket's place in [`Presence`]; dropping it forgets what the socket said.
pub struct Seat {
    presence: Arc<Presence>,
    principal: Principal,
    id: u64,
}

impl Presence {
    /// A place for one socket of `principal`, showing nothing until it says otherwise.
    pub fn seat(self: &Arc<Self>, principal: &Principal) -> Seat {
        Seat {
            presence: self.clone(),
            principal: principal.clone(),
            id: self.next.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Whether a page of `principal` shows conversation `agent_id` now.
    pub fn in_view(&self, principal: &Principal, agent_id: &str) -> bool {
        self.by_principal
            .get(principal)
            .is_some_and(|pages| pages.values().any(|a| a.as_str() == agent_id))
    }
}

impl Seat {
    /// The socket's page shows `agent_id` (visible, with that conversation open), or nothing
    /// (hidden, or no conversation open).
    pub fn shows(&self, agent_id: Option<AgentId>) {
        let presence = &self.presence;
        match agent_id {
            Some(agent_id) => {
                presence
                    .by_principal
                    .entry(self.principal.clone())
                    .or_default()
                    .insert(self.id, agent_id);
            }
            None => self.forget(),
        }
    }

    fn forget(&self) {
        let presence = &self.presence;
        if let Some(mut pages) = presence.by_principal.get_mut(&self.principal) {
            pages.remove(&self.id);
        }
        presence
            .by_principal
            .remove_if(&self.principal, |_, pages| pages.is_empty());
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.forget();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversation_is_in_view_while_some_page_shows_it() {
        let presence = Arc::new(Presence::default());
        let alice = Principal::checked("alice").unwrap();
        let bob = Principal::checked("bob").unwrap();
        let id = |s: &str| AgentId::parse(s).unwrap();
        let phone = presence.seat(&alice);
        let laptop = presence.seat(&alice);
        phone.shows(Some(id("a")));
        laptop.shows(Some(id("b")));
        assert!(presence.in_view(&alice, "a") && presence.in_view(&alice, "b"));
        assert!(!presence.in_view(&bob, "a"), "another principal's page");
        phone.shows(None);
        assert!(!presence.in_view(&alice, "a"));
        drop(laptop);
        assert!(!presence.in_view(&alice, "b"));
        assert!(presence.by_principal.is_empty(), "nothing left behind");
    }
}
