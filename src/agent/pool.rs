//! The cap on live agent processes, shared by every backend that starts them (the Claude CLI
//! and ACP agents): leases, eviction of an idle process (one nobody follows first, else the
//! least recently used) for a start that waits for a place, and the wait itself.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::{Notify, mpsc};

use crate::agent::{AgentEvent, AgentInput, Reports, SpawnSpec, Watched};
use crate::protocol::Content;

/// The cap on live processes, with least-recently-used eviction of idle ones.
pub(crate) struct Pool {
    max: usize,
    state: Mutex<PoolState>,
    /// Wakes the waiters when a place is freed or a process becomes idle (evictable).
    changed: Notify,
}

#[derive(Default)]
struct PoolState {
    next: u64,
    /// Counts uses; the smallest `last_used` is the least recently used.
    clock: u64,
    entries: HashMap<u64, PoolEntry>,
}

struct PoolEntry {
    busy: bool,
    last_used: u64,
    evict: Arc<Notify>,
    /// Whether its conversation has followers; unwatched idle processes go first.
    watched: Watched,
}

/// A live process's place in the pool; dropping it frees the place.
pub(crate) struct Lease {
    pool: Arc<Pool>,
    id: u64,
    evict: Arc<Notify>,
}

impl Pool {
    pub(crate) fn new(max: usize) -> Self {
        Pool {
            max: max.max(1),
            state: Mutex::new(PoolState::default()),
            changed: Notify::new(),
        }
    }

    /// The most processes alive at once.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// A place for one more process, busy (a turn waits for it). While the pool is full it
    /// asks an idle process to go (one whose conversation nobody follows first, else the least
    /// recently used), and waits until a place is freed.
    pub(crate) async fn acquire(self: &Arc<Self>, watched: Watched) -> Lease {
        self.acquire_inner(watched, true)
            .await
            .expect("waits until a place is free")
    }

    /// As [`Self::acquire`], for a process no turn waits for (idle): None at once when the
    /// pool is full of busy processes (it never waits for a running turn to end).
    pub(crate) async fn acquire_if_idle(self: &Arc<Self>, watched: Watched) -> Option<Lease> {
        self.acquire_inner(watched, false).await
    }

    async fn acquire_inner(self: &Arc<Self>, watched: Watched, wait: bool) -> Option<Lease> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut state = self.state.lock().expect("pool lock");
                if state.entries.len() < self.max {
                    state.next += 1;
                    state.clock += 1;
                    let (id, last_used) = (state.next, state.clock);
                    let evict = Arc::new(Notify::new());
                    state.entries.insert(
                        id,
                        PoolEntry {
                            // A start a turn waits for is busy until its process goes idle.
                            busy: wait,
                            last_used,
                            evict: evict.clone(),
                            watched,
                        },
                    );
                    return Some(Lease {
                        pool: self.clone(),
                        id,
                        evict,
                    });
                }
                match state
                    .entries
                    .values()
                    .filter(|e| !e.busy)
                    .min_by_key(|e| (e.watched.now(), e.last_used))
                {
                    Some(lru) => lru.evict.notify_one(),
                    None if !wait => return None,
                    None => {}
                }
            }
            changed.await;
        }
    }
}

/// An agent's task while it waits for a place: where its inputs come from and go meanwhile.
pub(crate) trait Waiter {
    /// Its inputs.
    fn inputs(&mut self) -> &mut mpsc::Receiver<AgentInput>;
    /// Where it reports.
    fn reports(&self) -> &Reports;
    /// The prompts waiting for the process.
    fn prompts(&mut self) -> &mut VecDeque<Content>;
    /// What its process is started with (its model and permission mode among it).
    fn spec(&mut self) -> &mut SpawnSpec;
    /// Ends a turn interrupted before its prompt reached the agent.
    async fn abort_unsent_turn(&self);

    /// Whether a prompt waits for the process.
    fn has_prompts(&mut self) -> bool {
        !self.prompts().is_empty()
    }

    /// Keeps an input that came before the process is ready. False when the session is gone.
    async fn buffer_input(&mut self, input: Option<AgentInput>) -> bool {
        match input {
            None => return false,
            Some(AgentInput::Prompt(p)) => self.prompts().push_back(p),
            Some(AgentInput::Interrupt) => {
                if self.prompts().pop_front().is_some() {
                    self.abort_unsent_turn().await;
                }
            }
            Some(AgentInput::SetOptions {
                model,
                permission_mode,
            }) => {
                let spec = self.spec();
                spec.model = model;
                spec.permission_mode = permission_mode;
            }
            Some(AgentInput::Permission { .. } | AgentInput::PermissionTimedOut { .. }) => {}
        }
        true
    }
}

/// Waits for a place in `pool` for `task`'s process, buffering its inputs meanwhile; the
/// session hears `queued` when a turn has to wait. A `background` start (no turn waits for it)
/// takes only a free place or an idle process's: when every place is busy it says
/// `warm_refused`, reports [`AgentEvent::Released`] and returns None, unless a prompt came
/// meanwhile (it then waits like any start for a turn). None too when the session went away.
pub(crate) async fn wait_for_place(
    task: &mut impl Waiter,
    pool: &Arc<Pool>,
    background: bool,
    watched: &Watched,
) -> Option<Lease> {
    let mut background = background;
    let mut told = false;
    'again: loop {
        let acquire = {
            let (pool, watched) = (pool.clone(), watched.clone());
            async move {
                if background {
                    pool.acquire_if_idle(watched).await
                } else {
                    Some(pool.acquire(watched).await)
                }
            }
        };
        tokio::pin!(acquire);
        loop {
            tokio::select! {
                lease = &mut acquire => {
                    if lease.is_some() {
                        return lease;
                    }
                    // A prompt that came meanwhile makes it a start a turn waits for.
                    while let Ok(input) = task.inputs().try_recv() {
                        if !task.buffer_input(Some(input)).await {
                            return None;
                        }
                    }
                    if task.has_prompts() {
                        background = false;
                        continue 'again;
                    }
                    let detail = format!(
                        "all {} agent processes are running turns; the agent starts with the next message",
                        pool.max()
                    );
                    task.reports().status("warm_refused", detail.clone()).await;
                    task.reports().emit(AgentEvent::Released { detail }).await;
                    return None;
                }
                input = task.inputs().recv() => {
                    if !task.buffer_input(input).await {
                        return None;
                    }
                }
                () = tokio::time::sleep(Duration::from_millis(50)), if !told && !background => {
                    told = true;
                    let detail = format!(
                        "all {} agent processes are busy; this turn starts when one is free",
                        pool.max()
                    );
                    task.reports().status("queued", detail).await;
                }
            }
        }
    }
}

impl Lease {
    /// Marks the process busy (running a turn) or idle. Going idle makes it evictable, so
    /// waiters are woken to claim it.
    pub(crate) fn set_busy(&self, busy: bool) {
        {
            let mut state = self.pool.state.lock().expect("pool lock");
            state.clock += 1;
            let now = state.clock;
            if let Some(entry) = state.entries.get_mut(&self.id) {
                entry.busy = busy;
                entry.last_used = now;
            }
        }
        if busy {
            // A request to go that came while it was idle is void now that it works: a
            // waiter still waiting asks again when a process goes idle.
            let _ = self.evict.notified().now_or_never();
        } else {
            self.pool.changed.notify_waiters();
        }
    }

    /// Resolves once a waiter asked this idle process to go (at once if one already did).
    pub(crate) async fn evicted(&self) {
        self.evict.notified().await;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.pool
            .state
            .lock()
            .expect("pool lock")
            .entries
            .remove(&self.id);
        self.pool.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use super::*;

    /// Whether an eviction request is waiting for `lease` (consumes it).
    fn asked_to_go(lease: &Lease) -> bool {
        lease.evicted().now_or_never().is_some()
    }

    fn lease(pool: &Arc<Pool>) -> Lease {
        watched_lease(pool, false)
    }

    fn watched_lease(pool: &Arc<Pool>, watched: bool) -> Lease {
        pool.acquire(Watched::new(move || watched))
            .now_or_never()
            .expect("a free place")
    }

    /// An idle process nobody follows goes before a less recently used one somebody follows.
    #[test]
    fn an_unwatched_idle_process_goes_first() {
        let pool = Arc::new(Pool::new(2));
        let followed = watched_lease(&pool, true);
        let unfollowed = lease(&pool);
        followed.set_busy(true);
        followed.set_busy(false);
        unfollowed.set_busy(true);
        unfollowed.set_busy(false);
        let mut waiter = pin!(pool.acquire(Watched::default()));
        assert!(waiter.as_mut().now_or_never().is_none());
        assert!(asked_to_go(&unfollowed), "nobody follows it");
        assert!(!asked_to_go(&followed), "followed, though used longer ago");
        drop(unfollowed);
        assert!(waiter.as_mut().now_or_never().is_some());
    }

    /// A background start takes a free place or an idle one's, and never waits for busy ones,
    /// nor for one still starting for a turn (the regression: a warm evicted it).
    #[test]
    fn a_background_start_never_waits_for_busy_processes() {
        let pool = Arc::new(Pool::new(1));
        let a = lease(&pool);
        let none = pool.acquire_if_idle(Watched::default()).now_or_never();
        assert!(matches!(none, Some(None)), "a start for a turn is busy");
        assert!(!asked_to_go(&a));
        a.set_busy(false);
        a.set_busy(true);
        let none = pool.acquire_if_idle(Watched::default()).now_or_never();
        assert!(matches!(none, Some(None)), "refused at once");
        assert!(!asked_to_go(&a));
        a.set_busy(false);
        let mut warm = pin!(pool.acquire_if_idle(Watched::default()));
        assert!(warm.as_mut().now_or_never().is_none());
        assert!(asked_to_go(&a), "an idle one is asked to go");
        drop(a);
        assert!(matches!(warm.as_mut().now_or_never(), Some(Some(_))));
    }

    #[test]
    fn places_up_to_the_cap_are_granted_at_once() {
        let pool = Arc::new(Pool::new(2));
        let a = lease(&pool);
        let _b = lease(&pool);
        let mut third = pin!(pool.acquire(Watched::default()));
        assert!(third.as_mut().now_or_never().is_none(), "the pool is full");
        drop(a);
        assert!(
            third.as_mut().now_or_never().is_some(),
            "a dropped lease frees its place"
        );
    }

    /// The regression: all busy, a turn waits; when one finishes its turn, the waiter asks
    /// it to go at once (not after the idle eviction), and gets its place when it has gone.
    #[test]
    fn a_process_going_idle_is_evicted_for_a_waiter() {
        let pool = Arc::new(Pool::new(2));
        let a = lease(&pool);
        let b = lease(&pool);
        a.set_busy(true);
        b.set_busy(true);
        let mut third = pin!(pool.acquire(Watched::default()));
        assert!(third.as_mut().now_or_never().is_none());
        assert!(!asked_to_go(&a) && !asked_to_go(&b), "busy ones stay");

        b.set_busy(false);
        assert!(
            third.as_mut().now_or_never().is_none(),
            "b has not gone yet"
        );
        assert!(asked_to_go(&b), "the waiter asks the idle one to go");
        assert!(!asked_to_go(&a), "the busy one stays");

        drop(b);
        assert!(
            third.as_mut().now_or_never().is_some(),
            "granted once b has gone"
        );
    }

    /// With several idle processes, the least recently used one is asked to go.
    #[test]
    fn the_least_recently_used_idle_process_goes() {
        let pool = Arc::new(Pool::new(3));
        let (a, b, c) = (lease(&pool), lease(&pool), lease(&pool));
        for l in [&a, &b, &c] {
            l.set_busy(true);
        }
        b.set_busy(false);
        c.set_busy(false);
        a.set_busy(false);
        let mut waiter = pin!(pool.acquire(Watched::default()));
        assert!(waiter.as_mut().now_or_never().is_none());
        assert!(asked_to_go(&b), "b has been idle longest");
        assert!(!asked_to_go(&a) && !asked_to_go(&c));
        // b takes a new turn instead of going: the next idle one in line is asked.
        b.set_busy(true);
        c.set_busy(true);
        c.set_busy(false);
        assert!(waiter.as_mut().now_or_never().is_none());
        assert!(asked_to_go(&a), "a is now the least recently used idle one");
        assert!(!asked_to_go(&c));
        drop(a);
        assert!(waiter.as_mut().now_or_never().is_some());
    }

    /// A request to go is void once the process takes a turn: after that turn it stays,
    /// when the waiter that asked is gone.
    #[test]
    fn a_request_to_go_is_void_once_the_process_works() {
        let pool = Arc::new(Pool::new(1));
        let a = lease(&pool);
        a.set_busy(false);
        {
            let mut waiter = pin!(pool.acquire(Watched::default()));
            assert!(waiter.as_mut().now_or_never().is_none(), "a is asked to go");
        }
        a.set_busy(true);
        a.set_busy(false);
        assert!(!asked_to_go(&a), "nobody waits any more");
    }

    /// Each of several waiters gets a place of its own.
    #[test]
    fn every_waiter_is_served() {
        let pool = Arc::new(Pool::new(1));
        let a = lease(&pool);
        a.set_busy(true);
        let mut first = pin!(pool.acquire(Watched::default()));
        let mut second = pin!(pool.acquire(Watched::default()));
        assert!(
            first.as_mut().now_or_never().is_none() && second.as_mut().now_or_never().is_none()
        );
        a.set_busy(false);
        assert!(
            first.as_mut().now_or_never().is_none() && second.as_mut().now_or_never().is_none()
        );
        assert!(asked_to_go(&a));
        drop(a);
        let granted = first
            .as_mut()
            .now_or_never()
            .expect("one waiter gets the place");
        assert!(
            second.as_mut().now_or_never().is_none(),
            "the other still waits"
        );
        drop(granted);
        assert!(second.as_mut().now_or_never().is_some());
    }
}
