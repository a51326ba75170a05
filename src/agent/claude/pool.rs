//! The cap on live CLI processes: leases, and eviction of the least recently used idle
//! process for a turn that waits for one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Notify;

/// The cap on live processes, with least-recently-used eviction of idle ones.
pub(super) struct Pool {
    max: usize,
    state: Mutex<PoolState>,
    /// Wakes the waiters when a place is freed.
    changed: Notify,
}

#[derive(Default)]
struct PoolState {
    next: u64,
    entries: HashMap<u64, PoolEntry>,
}

struct PoolEntry {
    busy: bool,
    last_used: Instant,
    evict: Arc<Notify>,
}

/// A live process's place in the pool; dropping it frees the place.
pub(super) struct Lease {
    pool: Arc<Pool>,
    id: u64,
    evict: Arc<Notify>,
}

impl Pool {
    pub(super) fn new(max: usize) -> Self {
        Pool {
            max,
            state: Mutex::new(PoolState::default()),
            changed: Notify::new(),
        }
    }

    /// A place for one more process. While the pool is full it asks the least recently
    /// used idle process to go, and waits until a place is freed.
    pub(super) async fn acquire(self: &Arc<Self>) -> Lease {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut state = self.state.lock().expect("pool lock");
                if state.entries.len() < self.max {
                    state.next += 1;
                    let id = state.next;
                    let evict = Arc::new(Notify::new());
                    state.entries.insert(
                        id,
                        PoolEntry {
                            busy: false,
                            last_used: Instant::now(),
                            evict: evict.clone(),
                        },
                    );
                    return Lease {
                        pool: self.clone(),
                        id,
                        evict,
                    };
                }
                if let Some(lru) = state
                    .entries
                    .values()
                    .filter(|e| !e.busy)
                    .min_by_key(|e| e.last_used)
                {
                    lru.evict.notify_one();
                }
            }
            changed.await;
        }
    }
}

impl Lease {
    /// Marks the process busy (running a turn) or idle.
    pub(super) fn set_busy(&self, busy: bool) {
        let mut state = self.pool.state.lock().expect("pool lock");
        if let Some(entry) = state.entries.get_mut(&self.id) {
            entry.busy = busy;
            entry.last_used = Instant::now();
        }
    }

    /// Resolves once a waiter asked this idle process to go (at once if one already did).
    pub(super) async fn evicted(&self) {
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
