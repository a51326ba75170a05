//! Unit tests of the turn queue's state machine, on tokio's paused clock where deadlines matter.

use std::time::Duration;

use tokio::time::{Instant, advance};

use super::{Interrupt, Released, Turn, Turns};
use crate::protocol::{ChatOptions, Content, ErrorCode};

fn turn(user_seq: i64) -> Turn {
    Turn {
        user_seq,
        content: Content::Text(format!("turn {user_seq}")),
        options: ChatOptions::default(),
        scheduled: false,
        terms: None,
    }
}

/// Starts the turn at the head of the queue, as the actor does once its agent has it.
fn start_next(turns: &mut Turns) -> i64 {
    let next = turns.take_next().expect("a queued turn");
    let seq = next.user_seq;
    turns.start(next);
    seq
}

/// A turn sent while none runs runs at once (place 0); the ones sent meanwhile are told how
/// many turns are ahead of them, and run one at a time in the order they were sent, each
/// turn's result naming the one that runs next.
#[test]
fn turns_run_one_at_a_time_in_the_order_they_were_sent() {
    let mut turns = Turns::default();
    assert!(!turns.is_busy());
    assert_eq!(turns.push(turn(1)), 0);
    assert!(!turns.is_running(), "queued until started");
    assert_eq!(start_next(&mut turns), 1);
    assert_eq!(turns.push(turn(3)), 1);
    assert_eq!(turns.push(turn(5)), 2);
    assert_eq!(turns.push(turn(7)), 3);
    assert_eq!(turns.queued(), 3);
    let mut ran = vec![1];
    while turns.is_busy() {
        let next = turns.next_seq();
        assert!(turns.finish().is_some());
        match next {
            Some(seq) => {
                assert_eq!(start_next(&mut turns), seq);
                assert_eq!(turns.running_seq(), Some(seq));
                ran.push(seq);
            }
            None => assert_eq!(turns.queued(), 0),
        }
    }
    assert_eq!(ran, [1, 3, 5, 7]);
    assert!(turns.finish().is_none(), "nothing runs");
    // Idle again: the next turn runs at once.
    assert_eq!(turns.push(turn(9)), 0);
}

/// A finished turn hands over the latest assistant message it saw (what a rewind to its
/// end keeps); the next turn starts with none.
#[test]
fn a_finished_turn_keeps_its_last_assistant_message() {
    let mut turns = Turns::default();
    turns.saw_assistant(Some("ignored".into()));
    turns.push(turn(1));
    turns.push(turn(2));
    start_next(&mut turns);
    turns.saw_assistant(Some("a1".into()));
    turns.saw_assistant(Some("a2".into()));
    let finished = turns.finish().expect("running");
    assert_eq!(finished.last_assistant_uuid.as_deref(), Some("a2"));
    start_next(&mut turns);
    let finished = turns.finish().expect("running");
    assert_eq!(finished.last_assistant_uuid, None);
}

/// Behind a running turn at most `max_queued` wait; one more is refused with
/// `limit_exceeded`, saying how many wait. A turn that would run at once is never refused.
#[test]
fn a_full_queue_refuses_the_next_turn() {
    let mut turns = Turns::default();
    assert_eq!(turns.room(0), Ok(()));
    turns.push(turn(1));
    start_next(&mut turns);
    assert_eq!(turns.room(2), Ok(()));
    turns.push(turn(2));
    assert_eq!(turns.room(2), Ok(()));
    turns.push(turn(3));
    let refused = turns.room(2).unwrap_err();
    assert_eq!(refused.code, ErrorCode::LimitExceeded);
    assert_eq!(refused.message, "2 turns are already queued");
    assert_eq!(turns.room(3), Ok(()));
}

/// An interrupt stops the running turn only: it is given until the deadline once (asking
/// again does not move it), the turns queued behind it stay queued and run after it, and the
/// next one starts with no interrupt pending. With nothing running there is nothing to stop.
#[tokio::test(start_paused = true)]
async fn an_interrupt_stops_the_running_turn_and_leaves_the_queued_ones() {
    let timeout = Duration::from_secs(30);
    let mut turns = Turns::default();
    assert_eq!(turns.interrupt(timeout), Interrupt::Idle);
    turns.push(turn(1));
    start_next(&mut turns);
    turns.push(turn(2));
    turns.push(turn(3));
    let asked_at = Instant::now();
    assert_eq!(turns.interrupt(timeout), Interrupt::Asked);
    assert_eq!(turns.interrupt_deadline(), Some(asked_at + timeout));
    advance(Duration::from_secs(10)).await;
    assert_eq!(turns.interrupt(timeout), Interrupt::AlreadyAsked);
    assert_eq!(turns.interrupt_deadline(), Some(asked_at + timeout));
    // The queued turns were not touched: the next still runs after the interrupted one.
    assert_eq!(turns.next_seq(), Some(2));
    assert_eq!(turns.queued(), 2);
    assert_eq!(
        turns.finish().map(|r| r.interrupt_deadline),
        Some(Some(asked_at + timeout))
    );
    assert_eq!(start_next(&mut turns), 2);
    assert_eq!(turns.interrupt_deadline(), None);
    advance(Duration::from_secs(5)).await;
    assert_eq!(turns.interrupt(timeout), Interrupt::Asked);
    assert_eq!(turns.interrupt_deadline(), Some(Instant::now() + timeout));
    assert_eq!(turns.next_seq(), Some(3));
}

/// A turn whose agent went before reading it goes back to the head of the queue and runs
/// next, ahead of those sent after it; one that was asked to stop meanwhile stays running
/// (to end as interrupted) with its deadline; with nothing running nothing changes.
#[tokio::test(start_paused = true)]
async fn a_turn_its_agent_never_read_runs_again_unless_it_was_interrupted() {
    let timeout = Duration::from_secs(30);
    let mut turns = Turns::default();
    assert_eq!(turns.release(), Released::Nothing);
    turns.push(turn(1));
    start_next(&mut turns);
    turns.push(turn(2));
    assert_eq!(turns.release(), Released::Requeued);
    assert!(!turns.is_running());
    assert_eq!(turns.next_seq(), Some(1));
    assert_eq!(turns.push(turn(3)), 2, "both turns are ahead of it");
    assert_eq!(start_next(&mut turns), 1);
    turns.interrupt(timeout);
    let deadline = turns.interrupt_deadline();
    advance(Duration::from_secs(1)).await;
    assert_eq!(turns.release(), Released::Interrupted);
    assert_eq!(turns.running_seq(), Some(1));
    assert_eq!(turns.interrupt_deadline(), deadline);
    assert_eq!(turns.queued(), 2);
}

/// Dropping the turns (shutdown, deletion, a take-over) says what there was and leaves
/// nothing running or queued.
#[test]
fn clearing_drops_the_running_and_the_queued_turns() {
    let mut turns = Turns::default();
    assert_eq!(turns.clear(), (false, 0));
    turns.push(turn(1));
    assert_eq!(turns.clear(), (false, 1));
    turns.push(turn(2));
    start_next(&mut turns);
    turns.push(turn(3));
    turns.push(turn(4));
    assert_eq!(turns.clear(), (true, 2));
    assert!(!turns.is_busy());
    assert_eq!(turns.push(turn(5)), 0);
}

/// A stored user message is the prompt in the shape of the agent's own transcript (`type`,
/// then `message` with its `role` and `content`), and names who sent it only when someone
/// other than the owner did.
#[test]
fn a_user_message_is_stored_in_the_transcript_s_shape() {
    use crate::protocol::ContentBlock;

    let line = |content: &Content, sender| super::run::user_payload(content, sender);
    assert_eq!(
        line(&Content::Text("say \"hi\"".into()), None),
        r#"{"type":"user","message":{"role":"user","content":"say \"hi\""}}"#
    );
    let blocks = Content::Blocks(vec![ContentBlock::Text { text: "a".into() }]);
    assert_eq!(
        line(&blocks, Some("bob")),
        r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"a"}]},"sender":"bob"}"#
    );
}
