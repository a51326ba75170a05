//! The turn state machine: a chat is stored and queued, turns run one at a time, and an interrupt,
//! a stuck turn or a rewind ends them. Here the state itself ([`Turns`]); the actor runs it in
//! [`run`], and rewinds in [`rewind`].

mod rewind;
mod run;

pub(in crate::session) use rewind::rewind_store;

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::protocol::{self, ChatOptions, ErrorCode};
use crate::session::SessionError;
use crate::session::spend::Terms;

pub(super) struct Turn {
    pub(super) user_seq: i64,
    pub(super) content: protocol::Content,
    /// Model and permission mode asked for with this turn; applied when it starts.
    pub(super) options: ChatOptions,
    /// Whether a schedule's run sent it.
    pub(super) scheduled: bool,
    /// What its agent starts on, when it was checked just now (a turn that runs at once);
    /// a queued turn is checked again when it starts.
    pub(super) terms: Option<Terms>,
}

pub(super) struct Running {
    /// Set once an interrupt was sent: the agent is killed if the turn has not ended by then.
    interrupt_deadline: Option<Instant>,
    /// uuid of the latest assistant message of this turn (the rewind anchor).
    pub(super) last_assistant_uuid: Option<String>,
    /// The turn, to hand to a new agent if the one it was sent to went away without reading
    /// it (see [`Turns::release`]).
    turn: Turn,
}

/// A conversation's turns: the one running, if any, and those queued behind it in the order
/// their user messages were stored. What a client is told of them is decided here: a new
/// turn's place in the queue, whether there is room for it, which turn runs next, and whether
/// an interrupt found a turn to stop. A turn is queued ([`Turns::push`]), taken from the head
/// of the queue ([`Turns::take_next`]) and started ([`Turns::start`]) unless it can't run, and
/// runs until it finishes ([`Turns::finish`]), its agent goes without reading it
/// ([`Turns::release`]), or every turn is dropped ([`Turns::clear`]).
#[derive(Default)]
pub(super) struct Turns {
    queue: VecDeque<Turn>,
    running: Option<Running>,
}

/// What an interrupt found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Interrupt {
    /// No turn is running: nothing to stop (queued turns are never interrupted).
    Idle,
    /// The running turn is asked to stop now; it must end by the deadline.
    Asked,
    /// The running turn was already asked to stop; its deadline stands.
    AlreadyAsked,
}

/// What became of the running turn when its agent went without reading its prompt.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Released {
    /// No turn was running.
    Nothing,
    /// It was asked to stop meanwhile: it is still running, to end as if the agent had read
    /// both.
    Interrupted,
    /// It is back at the head of the queue, for the next agent.
    Requeued,
}

impl Turns {
    /// Whether a turn is running or queued.
    pub(super) fn is_busy(&self) -> bool {
        self.running.is_some() || !self.queue.is_empty()
    }

    /// Whether a turn is running.
    pub(super) fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// How many turns wait behind the running one.
    pub(super) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Whether another turn may be queued, when at most `max_queued` may wait; a turn that
    /// would run at once always may.
    pub(super) fn room(&self, max_queued: usize) -> Result<(), SessionError> {
        if self.is_busy() && self.queue.len() >= max_queued {
            return Err(SessionError::new(
                ErrorCode::LimitExceeded,
                format!("{} turns are already queued", self.queue.len()),
            ));
        }
        Ok(())
    }

    /// Queues `turn` behind the others; returns its place: 0 when it runs at once, else how
    /// many turns are ahead of it (the running one included).
    pub(super) fn push(&mut self, turn: Turn) -> usize {
        let position = if self.is_busy() {
            self.queue.len() + usize::from(self.running.is_some())
        } else {
            0
        };
        self.queue.push_back(turn);
        position
    }

    /// Takes the turn at the head of the queue to start it: it is then started
    /// ([`Turns::start`]), or closed when it can't run.
    pub(super) fn take_next(&mut self) -> Option<Turn> {
        self.queue.pop_front()
    }

    /// Marks `turn` (taken from the head of the queue) as the running one.
    pub(super) fn start(&mut self, turn: Turn) {
        self.running = Some(Running {
            interrupt_deadline: None,
            last_assistant_uuid: None,
            turn,
        });
    }

    /// Records the running turn's latest assistant message: what a rewind to its end keeps.
    pub(super) fn saw_assistant(&mut self, uuid: Option<String>) {
        if let Some(running) = self.running.as_mut() {
            running.last_assistant_uuid = uuid;
        }
    }

    /// The running turn ended (its result is stored, or it was given up): what it was, if a
    /// turn was running.
    pub(super) fn finish(&mut self) -> Option<Running> {
        self.running.take()
    }

    /// The agent went before reading the running turn's prompt: unless the turn was asked to
    /// stop, it goes back to the head of the queue, for the next agent.
    pub(super) fn release(&mut self) -> Released {
        match self.running.take() {
            None => Released::Nothing,
            Some(running) if running.interrupt_deadline.is_some() => {
                self.running = Some(running);
                Released::Interrupted
            }
            Some(running) => {
                self.queue.push_front(running.turn);
                Released::Requeued
            }
        }
    }

    /// Drops every turn: whether one was running, and how many were queued.
    pub(super) fn clear(&mut self) -> (bool, usize) {
        let queued = self.queue.len();
        self.queue.clear();
        (self.running.take().is_some(), queued)
    }

    /// The user `seq` of the running turn, if any.
    pub(super) fn running_seq(&self) -> Option<i64> {
        self.running.as_ref().map(|r| r.turn.user_seq)
    }

    /// The user `seq` of the turn that runs next, if one is queued.
    pub(super) fn next_seq(&self) -> Option<i64> {
        self.queue.front().map(|t| t.user_seq)
    }

    /// When the running turn, asked to stop, must have ended.
    pub(super) fn interrupt_deadline(&self) -> Option<Instant> {
        self.running.as_ref().and_then(|r| r.interrupt_deadline)
    }

    /// Asks the running turn to stop within `timeout`, unless it was asked already.
    pub(super) fn interrupt(&mut self, timeout: Duration) -> Interrupt {
        let Some(running) = self.running.as_mut() else {
            return Interrupt::Idle;
        };
        if running.interrupt_deadline.is_some() {
            return Interrupt::AlreadyAsked;
        }
        running.interrupt_deadline = Some(Instant::now() + timeout);
        Interrupt::Asked
    }
}

#[cfg(test)]
mod tests;
