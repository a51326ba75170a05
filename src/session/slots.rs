//! The slot map: one [`Slot`] per `(principal, agent_id)` that outlives the actor behind it, locked
//! to start, command or evict that actor, and swept from memory once unused.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{Mutex, OwnedMutexGuard, mpsc, oneshot};

use super::{Conversation, Manager, Shared, actor, events};
use crate::protocol::{AgentId, ErrorCode, Principal};
use crate::session::SessionError;
use crate::store::RowId;

use super::Activity;
use dashmap::DashMap;
use std::time::Duration;

/// Inputs waiting for one actor; a full queue answers `limit_exceeded`.
pub(super) const INPUT_QUEUE: usize = 256;

/// How often dormant slots without subscribers are dropped from memory.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

pub(super) type Key = (Principal, AgentId);

pub(super) enum SlotState {
    Dormant,
    Live(SessionHandle),
}

#[derive(Clone)]
pub(super) struct SessionHandle {
    pub(super) tx: mpsc::Sender<actor::Input>,
    pub(super) conversation: Arc<Conversation>,
}

/// Everything in memory about one conversation key.
pub(super) struct Slot {
    pub(super) events: events::Sender,
    pub(super) state: Arc<Mutex<SlotState>>,
    /// Set (under `state`) when the slot is dropped from the map; holders must look again.
    pub(super) removed: AtomicBool,
    pub(super) conversation: std::sync::OnceLock<Arc<Conversation>>,
    /// Whether the actor is running or queueing a turn.
    pub(super) busy: Arc<AtomicBool>,
    /// Set once frames of other nodes are relayed to this slot's followers (cluster mode).
    pub(super) relaying: AtomicBool,
    /// Stops that relay when the slot is dropped.
    pub(super) relay_stop: tokio_util::sync::CancellationToken,
    /// Held by the chat this node is forwarding to the conversation's node, so that the next
    /// one goes after it.
    pub(super) forwarding: Arc<Mutex<()>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.relay_stop.cancel();
    }
}

impl Manager {
    /// Stops the actor of each conversation another node took over from this one, as the
    /// store reports them.
    pub(super) fn spawn_hand_overs(&self, mut lost: mpsc::UnboundedReceiver<RowId>) {
        let slots = Arc::downgrade(&self.slots);
        tokio::spawn(async move {
            while let Some(row) = lost.recv().await {
                let Some(slots) = slots.upgrade() else { return };
                let slot = slots
                    .iter()
                    .find(|e| e.value().conversation.get().is_some_and(|c| c.row == row))
                    .map(|e| e.value().clone());
                drop(slots);
                let Some(slot) = slot else { continue };
                let tx = match &*slot.state.lock().await {
                    SlotState::Live(handle) => handle.tx.clone(),
                    SlotState::Dormant => continue,
                };
                let _ = tx.send(actor::Input::TakenOver).await;
            }
        });
    }

    /// Drops dormant, unwatched slots from memory now and then, until `stop` fires.
    pub fn spawn_sweeper(&self, stop: tokio_util::sync::CancellationToken) {
        let slots = Arc::downgrade(&self.slots);
        let shared = Arc::downgrade(&self.shared);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let (Some(slots), Some(shared)) = (slots.upgrade(), shared.upgrade()) else {
                    return;
                };
                sweep(&slots, &shared);
            }
        });
    }

    pub(super) fn key(principal: &Principal, agent_id: &AgentId) -> Key {
        (principal.clone(), agent_id.clone())
    }

    /// Locks the slot of `key`, creating it if needed.
    pub(super) async fn lock_slot(&self, key: &Key) -> (Arc<Slot>, OwnedMutexGuard<SlotState>) {
        loop {
            let mut created = false;
            let slot = self
                .slots
                .entry(key.clone())
                .or_insert_with(|| {
                    created = true;
                    Arc::new(Slot {
                        events: events::Sender::new(
                            self.shared.config.socket.session_buffer_frames,
                        ),
                        state: Arc::new(Mutex::new(SlotState::Dormant)),
                        removed: AtomicBool::new(false),
                        conversation: std::sync::OnceLock::new(),
                        busy: Arc::new(AtomicBool::new(false)),
                        relaying: AtomicBool::new(false),
                        relay_stop: tokio_util::sync::CancellationToken::new(),
                        forwarding: Arc::new(Mutex::new(())),
                    })
                })
                .clone();
            if created {
                self.shared.metrics.slots(1);
            }
            let guard = slot.state.clone().lock_owned().await;
            if !slot.removed.load(Ordering::Acquire) {
                return (slot, guard);
            }
        }
    }

    /// Drops the slot of `key` from memory, its state held locked by the caller.
    pub(super) fn remove_slot(&self, key: &Key, slot: &Arc<Slot>) {
        slot.removed.store(true, Ordering::Release);
        if self
            .slots
            .remove_if(key, |_, s| Arc::ptr_eq(s, slot))
            .is_some()
        {
            gone(&self.shared, slot);
        }
    }

    /// Drops the slot of `key` if it has neither an actor nor a subscriber (after refused or
    /// finished work), its state `guard` held locked by the caller.
    pub(super) fn release_if_unused(&self, key: &Key, slot: &Arc<Slot>, guard: &SlotState) {
        if is_dormant(guard) && slot.events.receiver_count() == 0 {
            self.remove_slot(key, slot);
        }
    }

    /// Finds the slot of a conversation that exists, without starting anything.
    pub(super) async fn existing_slot(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
    ) -> Result<(Arc<Slot>, OwnedMutexGuard<SlotState>), SessionError> {
        let key = Self::key(principal, agent_id);
        if !self.slots.contains_key(&key) {
            self.get(principal, agent_id).await?;
        }
        let (slot, guard) = self.lock_slot(&key).await;
        if slot.conversation.get().is_none() {
            let record = self.get(principal, agent_id).await?;
            let _ = slot.conversation.set(Conversation::from_record(&record));
        }
        self.relay(&slot).await;
        Ok((slot, guard))
    }

    /// What a conversation is doing now: `busy` (a turn running or queued), `idle` (its actor
    /// is live, nothing to do) or `dormant` (only in the store).
    pub fn activity(&self, principal: &Principal, agent_id: &AgentId) -> Activity {
        let Some(slot) = self
            .slots
            .get(&Self::key(principal, agent_id))
            .map(|s| s.clone())
        else {
            return Activity::Dormant;
        };
        if slot.busy.load(Ordering::Acquire) {
            return Activity::Busy;
        }
        // A held slot is being started, commanded or evicted: report what it most likely is.
        let live = match slot.state.try_lock() {
            Ok(state) => matches!(&*state, SlotState::Live(h) if !h.tx.is_closed()),
            Err(_) => true,
        };
        if live {
            Activity::Idle
        } else {
            Activity::Dormant
        }
    }

    /// Ends every live conversation: running and queued turns end with a `server_shutdown`
    /// result, then agents are stopped. No conversation starts afterwards.
    pub async fn shutdown(&self) {
        self.shared.closing.store(true, Ordering::Release);
        let slots: Vec<Arc<Slot>> = self.slots.iter().map(|e| e.value().clone()).collect();
        let stops = slots.into_iter().map(|slot| async move {
            let mut guard = slot.state.clone().lock_owned().await;
            if let SlotState::Live(handle) = std::mem::replace(&mut *guard, SlotState::Dormant) {
                let (reply, rx) = oneshot::channel();
                if handle.tx.send(actor::Input::Stop { reply }).await.is_ok() {
                    let _ = rx.await;
                }
            }
        });
        futures_util::future::join_all(stops).await;
    }
}

/// Queues an input for an actor without waiting for room.
pub(super) fn send_input(handle: &SessionHandle, input: actor::Input) -> Result<(), SessionError> {
    handle.tx.try_send(input).map_err(|_| {
        SessionError::new(
            ErrorCode::LimitExceeded,
            "the conversation is overloaded; try again",
        )
    })
}

/// Whether a slot's conversation has no running actor.
pub(super) fn is_dormant(state: &SlotState) -> bool {
    match state {
        SlotState::Dormant => true,
        SlotState::Live(h) => h.tx.is_closed(),
    }
}

/// What goes with a slot dropped from the map: its count, and what is known of its caps.
fn gone(shared: &Shared, slot: &Slot) {
    shared.metrics.slots(-1);
    if let (Some(known), Some(conversation)) = (&shared.known_caps, slot.conversation.get()) {
        known.forget(&conversation.session_id);
    }
}

/// Drops slots that have no live actor and no subscriber.
fn sweep(slots: &DashMap<Key, Arc<Slot>>, shared: &Shared) {
    let mut idle = Vec::new();
    for entry in slots.iter() {
        let slot = entry.value();
        if let Ok(state) = slot.state.try_lock()
            && is_dormant(&state)
            && slot.events.receiver_count() == 0
        {
            slot.removed.store(true, Ordering::Release);
            idle.push((entry.key().clone(), slot.clone()));
        }
    }
    for (key, slot) in idle {
        if slots
            .remove_if(&key, |_, s| Arc::ptr_eq(s, &slot))
            .is_some()
        {
            gone(shared, &slot);
        }
    }
}
