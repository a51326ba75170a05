//! Limits that keep one client from crowding out the others: counted quotas per principal
//! (sockets, live conversations) and a token bucket for frames per socket.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::DashMap;
use tokio::time::Instant;

/// Which maximum a [`Quota`] hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaExceeded {
    /// The principal holds its maximum.
    Principal(usize),
    /// The server holds its maximum.
    Total(usize),
}

/// Counts what each principal holds, against a per-principal and a total maximum (0 is no
/// limit). Holding is a [`QuotaPermit`]; dropping the permit gives it back. Cheap to clone.
#[derive(Clone)]
pub struct Quota {
    inner: Arc<QuotaInner>,
}

struct QuotaInner {
    per_principal: usize,
    max_total: usize,
    total: AtomicUsize,
    held: DashMap<String, usize>,
}

/// One unit of a [`Quota`], given back on drop.
pub struct QuotaPermit {
    inner: Arc<QuotaInner>,
    principal: String,
}

impl Quota {
    /// A quota of `per_principal` per principal and `max_total` overall; 0 is no limit.
    pub fn new(per_principal: usize, max_total: usize) -> Self {
        Quota {
            inner: Arc::new(QuotaInner {
                per_principal,
                max_total,
                total: AtomicUsize::new(0),
                held: DashMap::new(),
            }),
        }
    }

    /// Takes one unit for `principal`.
    ///
    /// # Errors
    /// When the principal or the server already holds its maximum.
    pub fn try_acquire(&self, principal: &str) -> Result<QuotaPermit, QuotaExceeded> {
        let inner = &self.inner;
        // The map entry stays locked until the end, so two acquires of one principal can't
        // both pass the check.
        let mut held = inner.held.entry(principal.to_owned()).or_insert(0);
        let outcome = if inner.per_principal > 0 && *held >= inner.per_principal {
            Err(QuotaExceeded::Principal(inner.per_principal))
        } else if inner
            .total
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (inner.max_total == 0 || n < inner.max_total).then_some(n + 1)
            })
            .is_err()
        {
            Err(QuotaExceeded::Total(inner.max_total))
        } else {
            *held += 1;
            Ok(())
        };
        let empty = *held == 0;
        drop(held);
        if empty {
            inner.held.remove_if(principal, |_, n| *n == 0);
        }
        outcome.map(|()| QuotaPermit {
            inner: self.inner.clone(),
            principal: principal.to_owned(),
        })
    }
}

impl Drop for QuotaPermit {
    fn drop(&mut self) {
        let inner = &self.inner;
        inner.total.fetch_sub(1, Ordering::AcqRel);
        if let Some(mut held) = inner.held.get_mut(&self.principal) {
            *held -= 1;
        }
        inner.held.remove_if(&self.principal, |_, n| *n == 0);
    }
}

/// What a [`RateLimiter`] says about one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within the rate.
    Allowed,
    /// Over the rate; `strikes` counts the frames refused since the sender last slowed down.
    Limited {
        /// Refused frames in this burst, including this one.
        strikes: u32,
    },
}

/// A token bucket of `per_sec` tokens a second that holds one second's worth.
#[derive(Debug)]
pub struct RateLimiter {
    per_sec: f64,
    tokens: f64,
    last: Instant,
    strikes: u32,
}

impl RateLimiter {
    /// A full bucket, or `None` when `per_sec` is 0 (no limit).
    pub fn new(per_sec: u32) -> Option<Self> {
        (per_sec > 0).then(|| RateLimiter {
            per_sec: f64::from(per_sec),
            tokens: f64::from(per_sec),
            last: Instant::now(),
            strikes: 0,
        })
    }

    /// Takes a token for one frame.
    pub fn check(&mut self) -> Verdict {
        let now = Instant::now();
        let refill = now.duration_since(self.last).as_secs_f64() * self.per_sec;
        self.last = now;
        self.tokens = (self.tokens + refill).min(self.per_sec);
        if self.tokens >= self.per_sec {
            // A full bucket means the sender slowed down for a whole second.
            self.strikes = 0;
        }
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Verdict::Allowed
        } else {
            self.strikes = self.strikes.saturating_add(1);
            Verdict::Limited {
                strikes: self.strikes,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_count_per_principal_and_in_total() {
        let quota = Quota::new(2, 3);
        let a1 = quota.try_acquire("a").unwrap();
        let _a2 = quota.try_acquire("a").unwrap();
        assert_eq!(
            quota.try_acquire("a").err(),
            Some(QuotaExceeded::Principal(2))
        );
        let _b1 = quota.try_acquire("b").unwrap();
        assert_eq!(quota.try_acquire("b").err(), Some(QuotaExceeded::Total(3)));
        drop(a1);
        let _b2 = quota.try_acquire("b").unwrap();
        assert!(quota.inner.held.get("c").is_none());
    }

    #[test]
    fn zero_means_no_limit_and_permits_give_back() {
        let quota = Quota::new(0, 0);
        let permits: Vec<_> = (0..100).map(|_| quota.try_acquire("a").unwrap()).collect();
        drop(permits);
        assert_eq!(quota.inner.total.load(Ordering::Acquire), 0);
        assert!(quota.inner.held.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_refuses_a_burst_and_forgives_after_a_pause() {
        let mut rate = RateLimiter::new(10).unwrap();
        for _ in 0..10 {
            assert_eq!(rate.check(), Verdict::Allowed);
        }
        assert_eq!(rate.check(), Verdict::Limited { strikes: 1 });
        assert_eq!(rate.check(), Verdict::Limited { strikes: 2 });
        tokio::time::advance(std::time::Duration::from_millis(150)).await;
        assert_eq!(rate.check(), Verdict::Allowed);
        assert_eq!(rate.check(), Verdict::Limited { strikes: 3 });
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        assert_eq!(rate.check(), Verdict::Allowed);
        assert!(RateLimiter::new(0).is_none());
    }

    /// A socket that sat idle gets one second's worth, not the idle time's: the bucket holds
    /// at most `per_sec` tokens.
    #[tokio::test(start_paused = true)]
    async fn an_idle_socket_gets_no_more_than_one_seconds_burst() {
        let mut rate = RateLimiter::new(10).unwrap();
        tokio::time::advance(std::time::Duration::from_secs(60)).await;
        for _ in 0..10 {
            assert_eq!(rate.check(), Verdict::Allowed);
        }
        assert_eq!(rate.check(), Verdict::Limited { strikes: 1 });
    }
}
