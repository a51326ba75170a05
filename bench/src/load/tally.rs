//! What a socket counts while it is measured: frames, stored frames, turns and errors, and the
//! latency of each turn's first token and result.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Longest latency recorded as itself, in microseconds; longer ones count as this.
const MAX_LATENCY_US: u64 = 120_000_000;

/// A latency histogram in microseconds, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid bounds")
}

/// Records `elapsed` in `h`, in microseconds.
pub fn record(h: &mut Histogram<u64>, elapsed: Duration) {
    h.saturating_record(elapsed.as_micros().try_into().unwrap_or(u64::MAX));
}

/// What one socket counted (or, added up, all of them).
pub struct Tally {
    /// Text frames received.
    pub frames: u64,
    /// Stored-type frames received on the sessions this socket drives.
    pub stored: u64,
    /// Turns that ended with a `result` on the socket that sent the chat.
    pub turns: u64,
    /// `error` frames received.
    pub errors: u64,
    /// `chat` sent → first `stream_event` of its turn.
    pub first_token: Histogram<u64>,
    /// `chat` sent → its `result`.
    pub result: Histogram<u64>,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            frames: 0,
            stored: 0,
            turns: 0,
            errors: 0,
            first_token: histogram(),
            result: histogram(),
        }
    }
}

impl Tally {
    /// Adds `other`'s counts and samples to these.
    pub fn add(&mut self, other: &Tally) {
        self.frames += other.frames;
        self.stored += other.stored;
        self.turns += other.turns;
        self.errors += other.errors;
        // Same bounds on both sides, so adding can't fail.
        let _ = self.first_token.add(&other.first_token);
        let _ = self.result.add(&other.result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_add_up() {
        let mut a = Tally {
            frames: 10,
            turns: 1,
            ..Tally::default()
        };
        record(&mut a.first_token, Duration::from_millis(2));
        let mut b = Tally {
            frames: 5,
            stored: 4,
            errors: 1,
            ..Tally::default()
        };
        record(&mut b.first_token, Duration::from_millis(4));
        record(&mut b.result, Duration::from_millis(9));
        a.add(&b);
        assert_eq!((a.frames, a.stored, a.turns, a.errors), (15, 4, 1, 1));
        assert_eq!(a.first_token.len(), 2);
        assert_eq!(a.result.len(), 1);
        assert!(a.first_token.equivalent(a.first_token.max(), 4000));
    }

    #[test]
    fn latencies_beyond_the_bound_are_kept_at_the_bound() {
        let mut h = histogram();
        record(&mut h, Duration::from_secs(1000));
        assert_eq!(h.len(), 1);
        assert!(h.equivalent(h.max(), MAX_LATENCY_US));
    }
}
