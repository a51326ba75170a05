//! A conversation's broadcast of frames, buffering only what some follower has not read yet.
//!
//! The buffer is empty (and unallocated) while everyone is caught up, grows up to the capacity
//! for a slow follower, and is given back once it catches up. It behaves like
//! `tokio::sync::broadcast` (a follower that falls more than `capacity` frames behind is told
//! how many it missed, and goes on from the oldest frame kept), but does not allocate its
//! capacity up front: a conversation nobody watches costs a few words.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use futures_util::Stream;

use crate::protocol::Frame;

/// A buffer left with more room than this once empty is given back.
const KEEP_EMPTY: usize = 16;

/// Why [`Receiver::recv`] returned no frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvError {
    /// This many frames passed the receiver by; the next one is the oldest kept.
    Lagged(u64),
    /// Every sender is gone.
    Closed,
}

/// Frames that passed a receiver by, as its stream tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lagged(pub u64);

struct Reader {
    /// Position of the next frame this reader gets.
    next: u64,
    waker: Option<Waker>,
}

/// Hashes a reader's id (a counter) with one multiplication: the map is looked up for every
/// frame a reader takes, and its keys come from this process.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

struct State {
    /// Frames from position `head` on that some reader has not read.
    buf: VecDeque<Frame>,
    head: u64,
    readers: HashMap<u64, Reader, BuildHasherDefault<IdHasher>>,
    /// Readers whose next frame is the one at `head`: the frame is dropped once none is left.
    at_head: usize,
    next_id: u64,
    senders: usize,
}

impl State {
    fn tail(&self) -> u64 {
        self.head + self.buf.len() as u64
    }

    /// Counts the readers whose next frame is the one at `head`.
    fn count_at_head(&mut self) {
        let head = self.head;
        self.at_head = self.readers.values().filter(|r| r.next == head).count();
    }

    /// Drops the frames every reader has read, and the buffer's room once it is empty. Each
    /// dropped frame costs one pass over the readers, whatever their number.
    fn trim(&mut self) {
        while self.at_head == 0 && self.buf.pop_front().is_some() {
            self.head += 1;
            self.count_at_head();
        }
        if self.buf.is_empty() && self.buf.capacity() > KEEP_EMPTY {
            self.buf = VecDeque::new();
        }
    }

    fn wakers(&mut self) -> Vec<Waker> {
        self.readers
            .values_mut()
            .filter_map(|r| r.waker.take())
            .collect()
    }
}

struct Shared {
    state: Mutex<State>,
    capacity: usize,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("events lock")
    }
}

/// The sending side; cheap to clone. Receivers see [`RecvError::Closed`] once every clone is
/// dropped.
pub struct Sender {
    shared: Arc<Shared>,
}

/// One follower's view of the frames sent after it subscribed.
pub struct Receiver {
    shared: Arc<Shared>,
    id: u64,
}

impl Sender {
    /// A broadcast that keeps at most `capacity` frames for a follower that falls behind.
    pub fn new(capacity: usize) -> Self {
        Sender {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    buf: VecDeque::new(),
                    head: 0,
                    readers: HashMap::default(),
                    at_head: 0,
                    next_id: 0,
                    senders: 1,
                }),
                capacity: capacity.max(1),
            }),
        }
    }

    /// Sends `frame` to every receiver; returns how many there are (with none, the frame is
    /// dropped at once).
    pub fn send(&self, frame: Frame) -> usize {
        let (count, wakers) = {
            let mut state = self.shared.lock();
            if state.readers.is_empty() {
                return 0;
            }
            state.buf.push_back(frame);
            if state.buf.len() > self.shared.capacity {
                // The readers at the head lag now; the next ones are counted.
                state.buf.pop_front();
                state.head += 1;
                state.count_at_head();
            }
            (state.readers.len(), state.wakers())
        };
        wakers.into_iter().for_each(Waker::wake);
        count
    }

    /// A receiver of the frames sent from now on.
    pub fn subscribe(&self) -> Receiver {
        let mut state = self.shared.lock();
        let id = state.next_id;
        state.next_id += 1;
        let next = state.tail();
        if next == state.head {
            state.at_head += 1;
        }
        state.readers.insert(id, Reader { next, waker: None });
        Receiver {
            shared: self.shared.clone(),
            id,
        }
    }

    /// How many receivers there are.
    pub fn receiver_count(&self) -> usize {
        self.shared.lock().readers.len()
    }
}

impl Clone for Sender {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        Sender {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        let wakers = {
            let mut state = self.shared.lock();
            state.senders -= 1;
            if state.senders > 0 {
                return;
            }
            state.wakers()
        };
        wakers.into_iter().for_each(Waker::wake);
    }
}

impl Receiver {
    /// The next frame, or why there is none now.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<Frame, RecvError>> {
        let mut state = self.shared.lock();
        let (head, tail, senders) = (state.head, state.tail(), state.senders);
        let reader = state.readers.get_mut(&self.id).expect("registered reader");
        if reader.next < head {
            let missed = head - reader.next;
            reader.next = head;
            state.at_head += 1;
            return Poll::Ready(Err(RecvError::Lagged(missed)));
        }
        if reader.next < tail {
            let at = reader.next;
            reader.next += 1;
            let frame = state.buf[(at - head) as usize].clone();
            if at == head {
                state.at_head -= 1;
                state.trim();
            }
            return Poll::Ready(Ok(frame));
        }
        if senders == 0 {
            return Poll::Ready(Err(RecvError::Closed));
        }
        match &mut reader.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Adds to `out` up to `max` frames that are ready now, without waiting; none past a lag,
    /// which the next poll reports.
    fn take_ready(&mut self, out: &mut Vec<Frame>, max: usize) {
        let mut state = self.shared.lock();
        let (head, tail) = (state.head, state.tail());
        let reader = state.readers.get_mut(&self.id).expect("registered reader");
        let from = reader.next;
        if from < head || from == tail {
            return;
        }
        let to = tail.min(from + max as u64);
        reader.next = to;
        out.extend(
            state
                .buf
                .range((from - head) as usize..(to - head) as usize)
                .cloned(),
        );
        if from == head {
            state.at_head -= 1;
            state.trim();
        }
    }

    /// The frames in batches: each is every frame ready when it is taken, at most `max`, so a
    /// follower takes a burst with one wake-up and one look at the buffer.
    pub fn batches(self, max: usize) -> Batches {
        Batches {
            rx: self,
            max: max.max(1),
        }
    }

    /// Waits for the next frame.
    ///
    /// # Errors
    /// [`RecvError::Lagged`] after falling behind, [`RecvError::Closed`] once every sender
    /// is gone.
    pub async fn recv(&mut self) -> Result<Frame, RecvError> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        if let Some(reader) = state.readers.remove(&self.id)
            && reader.next == state.head
        {
            state.at_head -= 1;
            state.trim();
        }
    }
}

/// Frames until every sender is gone; falling behind is an item of its own.
impl Stream for Receiver {
    type Item = Result<Frame, Lagged>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_recv(cx).map(|r| match r {
            Ok(frame) => Some(Ok(frame)),
            Err(RecvError::Lagged(n)) => Some(Err(Lagged(n))),
            Err(RecvError::Closed) => None,
        })
    }
}

/// A receiver's frames in batches (see [`Receiver::batches`]); falling behind is an item of
/// its own.
pub struct Batches {
    rx: Receiver,
    max: usize,
}

impl Stream for Batches {
    type Item = Result<Vec<Frame>, Lagged>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        this.rx.poll_recv(cx).map(|r| match r {
            Ok(first) => {
                let mut batch = vec![first];
                this.rx.take_ready(&mut batch, this.max - 1);
                Some(Ok(batch))
            }
            Err(RecvError::Lagged(n)) => Some(Err(Lagged(n))),
            Err(RecvError::Closed) => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Tag, status_frame};

    fn frame(n: usize) -> Frame {
        let tag = Tag {
            agent_id: "a",
            session_id: "s",
        };
        status_frame(tag, "idle", &n.to_string())
    }

    fn detail(f: &Frame) -> String {
        let v: serde_json::Value = serde_json::from_str(f.text.as_str()).unwrap();
        v["detail"].as_str().unwrap().to_owned()
    }

    #[tokio::test]
    async fn every_receiver_gets_every_frame_in_order() {
        let tx = Sender::new(8);
        assert_eq!(tx.send(frame(0)), 0, "nobody listens: dropped");
        let mut a = tx.subscribe();
        let mut b = tx.subscribe();
        for n in 1..=3 {
            assert_eq!(tx.send(frame(n)), 2);
        }
        for n in 1..=3 {
            assert_eq!(detail(&a.recv().await.unwrap()), n.to_string());
        }
        assert_eq!(tx.shared.lock().buf.len(), 3, "b has read nothing yet");
        for n in 1..=3 {
            assert_eq!(detail(&b.recv().await.unwrap()), n.to_string());
        }
        assert!(tx.shared.lock().buf.is_empty(), "read by all: dropped");
        drop(tx);
        assert_eq!(a.recv().await.unwrap_err(), RecvError::Closed);
    }

    #[tokio::test]
    async fn a_slow_receiver_lags_and_the_buffer_is_given_back() {
        let tx = Sender::new(4);
        let mut slow = tx.subscribe();
        for n in 0..100 {
            tx.send(frame(n));
        }
        assert_eq!(tx.shared.lock().buf.len(), 4);
        assert_eq!(slow.recv().await.unwrap_err(), RecvError::Lagged(96));
        for n in 96..100 {
            assert_eq!(detail(&slow.recv().await.unwrap()), n.to_string());
        }
        let state = tx.shared.lock();
        assert!(state.buf.is_empty() && state.buf.capacity() <= KEEP_EMPTY);
        drop(state);
        // A dropped receiver releases what it held.
        for n in 0..4 {
            tx.send(frame(n));
        }
        assert_eq!(tx.shared.lock().buf.len(), 4);
        drop(slow);
        assert!(tx.shared.lock().buf.is_empty());
        assert_eq!(tx.receiver_count(), 0);
    }

    #[tokio::test]
    async fn a_frame_is_kept_until_its_last_reader_took_it() {
        let tx = Sender::new(8);
        let mut early = tx.subscribe();
        let mut many: Vec<Receiver> = (0..5).map(|_| tx.subscribe()).collect();
        tx.send(frame(1));
        tx.send(frame(2));
        // Subscribed after frames 1 and 2: it holds neither.
        let mut late = tx.subscribe();
        for rx in &mut many {
            assert_eq!(detail(&rx.recv().await.unwrap()), "1");
        }
        assert_eq!(
            tx.shared.lock().buf.len(),
            2,
            "`early` has not read frame 1"
        );
        assert_eq!(detail(&early.recv().await.unwrap()), "1");
        assert_eq!(
            tx.shared.lock().buf.len(),
            1,
            "frame 1 read by all who had it"
        );
        drop(many);
        assert_eq!(
            tx.shared.lock().buf.len(),
            1,
            "`early` still has frame 2 to read"
        );
        assert_eq!(detail(&early.recv().await.unwrap()), "2");
        assert!(tx.shared.lock().buf.is_empty(), "`late` never had frame 2");
        tx.send(frame(3));
        assert_eq!(detail(&late.recv().await.unwrap()), "3");
        assert_eq!(tx.shared.lock().buf.len(), 1);
        drop(early);
        assert!(tx.shared.lock().buf.is_empty(), "its last reader left");
    }

    #[tokio::test]
    async fn batches_take_what_is_ready_and_stop_at_a_lag() {
        use futures_util::StreamExt;
        let tx = Sender::new(4);
        let mut batches = tx.subscribe().batches(3);
        let mut other = tx.subscribe();
        for n in 0..3 {
            tx.send(frame(n));
        }
        let batch = batches.next().await.unwrap().unwrap();
        assert_eq!(
            batch.iter().map(detail).collect::<Vec<_>>(),
            ["0", "1", "2"]
        );
        assert_eq!(tx.shared.lock().buf.len(), 3, "`other` has read nothing");
        for n in 0..3 {
            assert_eq!(detail(&other.recv().await.unwrap()), n.to_string());
        }
        assert!(tx.shared.lock().buf.is_empty(), "read by both: dropped");
        for n in 3..5 {
            tx.send(frame(n));
        }
        // At most `max` at once.
        for n in 5..9 {
            tx.send(frame(n));
        }
        assert_eq!(batches.next().await.unwrap().unwrap_err(), Lagged(2));
        let batch = batches.next().await.unwrap().unwrap();
        assert_eq!(
            batch.iter().map(detail).collect::<Vec<_>>(),
            ["5", "6", "7"]
        );
        let batch = batches.next().await.unwrap().unwrap();
        assert_eq!(batch.iter().map(detail).collect::<Vec<_>>(), ["8"]);
        drop(tx);
        assert!(batches.next().await.is_none(), "closed");
    }

    #[tokio::test]
    async fn a_waiting_receiver_is_woken() {
        let tx = Sender::new(4);
        let mut rx = tx.subscribe();
        let waiter = tokio::spawn(async move { rx.recv().await.map(|f| detail(&f)) });
        tokio::task::yield_now().await;
        tx.send(frame(7));
        assert_eq!(waiter.await.unwrap().unwrap(), "7");
    }
}
