//! One load socket: what it drives and follows ([`Plan`]), the per-session turn state machine
//! that counts and times what comes back ([`Turns`]), and the socket loop around it
//! ([`Driver`]: warm-up, follow, measured phase, closed loop or paced).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::time::{Instant, sleep_until};
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

use super::tally::{Tally, record};
use crate::PROMPT;
use crate::wire::{Socket, chat_text, is_stored, peek, subscribe_text};

/// What one socket does.
#[derive(Clone, Default)]
pub struct Plan {
    /// Sessions this socket sends chats on (one turn in flight each).
    pub drive: Vec<String>,
    /// Sessions it only follows (`subscribe` after the warm-up).
    pub follow: Vec<String>,
    /// Paced load: time between scheduled turns of one session. None: closed loop.
    pub pace: Option<Duration>,
    /// Wait for the session's `evicted` status before its next chat.
    pub wait_evicted: bool,
}

/// A driven session's state.
struct Driven {
    chat: String,
    /// When the turn in flight was sent (or scheduled, when paced).
    sent_at: Option<Instant>,
    first_seen: bool,
    /// Set between a `result` and the `evicted` status when waiting for eviction.
    evicting: bool,
    /// Paced turns scheduled while a turn was in flight.
    backlog: VecDeque<Instant>,
}

impl Driven {
    fn busy(&self) -> bool {
        self.sent_at.is_some() || self.evicting
    }
}

/// The turns of the sessions one socket drives, and what it counted.
pub struct Turns {
    sessions: HashMap<String, Driven>,
    paced: bool,
    wait_evicted: bool,
    /// What was counted while `counting`.
    pub tally: Tally,
    /// Set during the measured phase.
    pub counting: bool,
}

impl Turns {
    pub fn new(plan: &Plan) -> Self {
        let sessions = plan
            .drive
            .iter()
            .map(|id| {
                let driven = Driven {
                    chat: chat_text(id, PROMPT),
                    sent_at: None,
                    first_seen: false,
                    evicting: false,
                    backlog: VecDeque::new(),
                };
                (id.clone(), driven)
            })
            .collect();
        Turns {
            sessions,
            paced: plan.pace.is_some(),
            wait_evicted: plan.wait_evicted,
            tally: Tally::default(),
            counting: false,
        }
    }

    /// Whether a turn is in flight (or an eviction awaited) on any session.
    pub fn any_busy(&self) -> bool {
        self.sessions.values().any(Driven::busy)
    }

    /// Schedules a paced turn of `agent_id` at `at`.
    pub fn schedule(&mut self, agent_id: &str, at: Instant) {
        self.session(agent_id).backlog.push_back(at);
    }

    /// When the session's next turn counts from, if one is due now: now in a closed loop, its
    /// oldest scheduled time when paced; None while a turn is in flight.
    pub fn due(&mut self, agent_id: &str) -> Option<Instant> {
        let paced = self.paced;
        let session = self.session(agent_id);
        if session.busy() {
            return None;
        }
        if paced {
            session.backlog.pop_front()
        } else {
            Some(Instant::now())
        }
    }

    /// Marks a turn of `agent_id` as sent at `at`; the chat to send.
    pub fn start(&mut self, agent_id: &str, at: Instant) -> String {
        let session = self.session(agent_id);
        session.sent_at = Some(at);
        session.first_seen = false;
        session.chat.clone()
    }

    fn session(&mut self, agent_id: &str) -> &mut Driven {
        self.sessions.get_mut(agent_id).expect("a driven session")
    }

    /// Counts one frame; returns the driven session whose turn (or eviction) ended, if any.
    pub fn on_frame(&mut self, text: &str) -> Option<String> {
        let p = peek(text);
        if self.counting {
            self.tally.frames += 1;
            if p.kind == "error" {
                self.tally.errors += 1;
            }
        }
        let session = self.sessions.get_mut(p.agent_id)?;
        if self.counting && is_stored(p.kind) {
            // Counted once per session: by the socket that drives it.
            self.tally.stored += 1;
        }
        match p.kind {
            "stream_event" if !session.first_seen => {
                session.first_seen = true;
                if let (true, Some(at)) = (self.counting, session.sent_at) {
                    record(&mut self.tally.first_token, at.elapsed());
                }
                None
            }
            "result" | "error" if session.sent_at.is_some() => {
                let at = session.sent_at.take().expect("checked");
                if self.counting && p.kind == "result" {
                    self.tally.turns += 1;
                    record(&mut self.tally.result, at.elapsed());
                }
                session.evicting = self.wait_evicted && p.kind == "result";
                Some(p.agent_id.to_owned())
            }
            "status" if session.evicting && text.contains("\"status\":\"evicted\"") => {
                session.evicting = false;
                Some(p.agent_id.to_owned())
            }
            _ => None,
        }
    }
}

/// A load socket running its [`Plan`].
pub struct Driver {
    ws: Socket,
    plan: Plan,
    turns: Turns,
}

impl Driver {
    pub fn new(ws: Socket, plan: Plan) -> Self {
        let turns = Turns::new(&plan);
        Driver { ws, plan, turns }
    }

    /// What was counted.
    pub fn into_tally(self) -> Tally {
        self.turns.tally
    }

    async fn send_chat(&mut self, agent_id: &str, at: Instant) -> anyhow::Result<()> {
        let text = self.turns.start(agent_id, at);
        self.ws.send(Message::text(text)).await?;
        Ok(())
    }

    /// Starts the session's next turn if one is due.
    async fn next_turn(&mut self, agent_id: &str) -> anyhow::Result<()> {
        match self.turns.due(agent_id) {
            Some(at) => self.send_chat(agent_id, at).await,
            None => Ok(()),
        }
    }

    async fn recv(&mut self) -> anyhow::Result<Utf8Bytes> {
        loop {
            match self.ws.next().await {
                Some(Ok(Message::Text(t))) => return Ok(t),
                Some(Ok(Message::Close(_))) | None => anyhow::bail!("the server closed the socket"),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e.into()),
            }
        }
    }

    /// One turn on every driven session, then waits until all are ready for the next.
    pub async fn warm_up(&mut self) -> anyhow::Result<()> {
        for id in self.plan.drive.clone() {
            self.send_chat(&id, Instant::now()).await?;
        }
        while self.turns.any_busy() {
            let text = self.recv().await?;
            self.turns.on_frame(text.as_str());
        }
        Ok(())
    }

    /// Subscribes to the followed sessions.
    pub async fn follow(&mut self) -> anyhow::Result<()> {
        for id in self.plan.follow.clone() {
            self.ws.send(Message::text(subscribe_text(&id, 0))).await?;
        }
        Ok(())
    }

    /// The measured phase, until `deadline`.
    pub async fn measure(&mut self, deadline: Instant) -> anyhow::Result<()> {
        self.turns.counting = true;
        let ids = self.plan.drive.clone();
        let mut tick = self.plan.pace.filter(|_| !ids.is_empty()).map(|pace| {
            let mut t = tokio::time::interval(pace / ids.len() as u32);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            t
        });
        if tick.is_none() {
            for id in &ids {
                self.next_turn(id).await?;
            }
        }
        let mut round_robin = 0;
        loop {
            tokio::select! {
                _ = sleep_until(deadline) => break,
                at = async { tick.as_mut().expect("guarded").tick().await }, if tick.is_some() => {
                    let id = &ids[round_robin % ids.len()];
                    round_robin += 1;
                    self.turns.schedule(id, at);
                    self.next_turn(id).await?;
                }
                text = self.recv() => {
                    if let Some(id) = self.turns.on_frame(text?.as_str()) {
                        self.next_turn(&id).await?;
                    }
                }
            }
        }
        self.turns.counting = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: &str, agent_id: &str) -> String {
        format!(r#"{{"message_type":"{kind}","agent_id":"{agent_id}","session_id":"s"}}"#)
    }

    fn plan(drive: &[&str]) -> Plan {
        Plan {
            drive: drive.iter().map(|s| s.to_string()).collect(),
            ..Plan::default()
        }
    }

    #[test]
    fn a_closed_loop_turn_is_counted_and_timed() {
        let mut turns = Turns::new(&plan(&["a"]));
        turns.counting = true;
        let at = turns.due("a").expect("idle sessions are due at once");
        let chat = turns.start("a", at);
        assert!(chat.contains("\"agent_id\":\"a\""));
        assert!(turns.due("a").is_none(), "one turn in flight");
        for kind in ["ack", "user", "system", "stream_event", "stream_event"] {
            assert_eq!(turns.on_frame(&frame(kind, "a")), None);
        }
        assert_eq!(turns.on_frame(&frame("assistant", "a")), None);
        assert_eq!(turns.on_frame(&frame("result", "a")).as_deref(), Some("a"));
        let t = &turns.tally;
        assert_eq!((t.frames, t.stored, t.turns, t.errors), (7, 4, 1, 0));
        assert_eq!(
            t.first_token.len(),
            1,
            "only the first stream_event is timed"
        );
        assert_eq!(t.result.len(), 1);
        assert!(!turns.any_busy());
    }

    #[test]
    fn followed_frames_count_as_delivered_only() {
        let mut turns = Turns::new(&plan(&["a"]));
        turns.counting = true;
        assert_eq!(turns.on_frame(&frame("result", "other")), None);
        assert_eq!(turns.on_frame(&frame("error", "other")), None);
        let t = &turns.tally;
        assert_eq!((t.frames, t.stored, t.turns, t.errors), (2, 0, 0, 1));
    }

    #[test]
    fn nothing_is_counted_outside_the_measured_phase() {
        let mut turns = Turns::new(&plan(&["a"]));
        let at = turns.due("a").unwrap();
        turns.start("a", at);
        assert_eq!(turns.on_frame(&frame("result", "a")).as_deref(), Some("a"));
        assert_eq!(turns.tally.frames, 0);
        assert_eq!(turns.tally.turns, 0);
    }

    #[test]
    fn an_error_ends_the_turn_in_flight_without_counting_it() {
        let mut turns = Turns::new(&plan(&["a"]));
        turns.counting = true;
        let at = turns.due("a").unwrap();
        turns.start("a", at);
        assert_eq!(turns.on_frame(&frame("error", "a")).as_deref(), Some("a"));
        assert_eq!((turns.tally.turns, turns.tally.errors), (0, 1));
    }

    #[test]
    fn waiting_for_eviction_holds_the_next_turn() {
        let mut turns = Turns::new(&Plan {
            wait_evicted: true,
            ..plan(&["a"])
        });
        let at = turns.due("a").unwrap();
        turns.start("a", at);
        assert!(turns.on_frame(&frame("result", "a")).is_some());
        assert!(turns.due("a").is_none(), "waiting for the eviction");
        let busy = r#"{"message_type":"status","agent_id":"a","status":"idle"}"#;
        assert_eq!(turns.on_frame(busy), None);
        let evicted = r#"{"message_type":"status","agent_id":"a","status":"evicted"}"#;
        assert_eq!(turns.on_frame(evicted).as_deref(), Some("a"));
        assert!(turns.due("a").is_some());
    }

    #[test]
    fn paced_turns_start_from_their_scheduled_time() {
        let mut turns = Turns::new(&Plan {
            pace: Some(Duration::from_millis(10)),
            ..plan(&["a"])
        });
        assert!(turns.due("a").is_none(), "nothing scheduled yet");
        let first = Instant::now();
        let second = first + Duration::from_millis(10);
        turns.schedule("a", first);
        turns.schedule("a", second);
        assert_eq!(turns.due("a"), Some(first));
        turns.start("a", first);
        assert!(
            turns.due("a").is_none(),
            "the backlog waits for the turn in flight"
        );
        turns.on_frame(&frame("result", "a"));
        assert_eq!(turns.due("a"), Some(second));
    }
}
