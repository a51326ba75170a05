//! When schedules run: standard cron expressions read in the server's time zone, the next tick of a definition, and the loop that claims due ticks.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::{Scheduler, invalid, now_ms};
use crate::session::SessionError;
use crate::store::schedules::ScheduleRow;

/// Longest cron expression, in bytes.
const MAX_CRON_BYTES: usize = 128;
/// The longest the loop sleeps without looking at the store again.
const MAX_SLEEP_MS: i64 = 60_000;
/// The pause after the store failed the loop.
const RETRY_MS: i64 = 1_000;

/// Parses a standard 5-field cron expression.
pub(super) fn parse_cron(expr: &str) -> Result<croner::Cron, SessionError> {
    if expr.len() > MAX_CRON_BYTES || expr.split_whitespace().count() != 5 {
        return Err(invalid(format!(
            "`cron` must be a 5-field cron expression (minute hour day-of-month month \
             day-of-week) of at most {MAX_CRON_BYTES} bytes"
        )));
    }
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .year(croner::parser::Year::Disallowed)
        .build()
        .parse(expr)
        .map_err(|e| invalid(format!("`cron`: {e}")))
}

/// The first tick of `cron`, read in `time_zone`, strictly after `after_ms` (milliseconds since
/// the epoch).
fn cron_tick(cron: &str, time_zone: chrono_tz::Tz, after_ms: i64) -> Result<i64, SessionError> {
    let cron = parse_cron(cron)?;
    // Ticks are on whole minutes; the search would keep the start's milliseconds.
    let after = DateTime::<Utc>::from_timestamp_millis(after_ms - after_ms.rem_euclid(1000))
        .unwrap_or_default()
        .with_timezone(&time_zone);
    cron.find_next_occurrence(&after, false)
        .map(|t| t.with_timezone(&Utc).timestamp_millis())
        .map_err(|e| invalid(format!("`cron` has no next occurrence: {e}")))
}

impl Scheduler {
    /// Runs due schedules, and the "continue" turns of conversations whose wait for a rate
    /// limit is over, until `stop` fires. Ticks missed while the server was down are due at
    /// once, and run once; so are waits that ended meanwhile.
    pub fn spawn(&self, stop: CancellationToken) {
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                let now = now_ms();
                let mut failed = false;
                match this.inner.store.due_schedules(now).await {
                    Ok(due) => {
                        for row in due {
                            failed |= !this.tick(row, now).await;
                        }
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "cannot read due schedules");
                        failed = true;
                    }
                }
                failed |= !this.continue_due(now).await;
                let tick = this.inner.store.earliest_tick().await.ok().flatten();
                let earliest = match (tick, this.earliest_continue().await) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                let mut wait =
                    earliest.map_or(MAX_SLEEP_MS, |at| (at - now_ms()).clamp(0, MAX_SLEEP_MS));
                if failed {
                    // A store that fails now is not asked again at once.
                    wait = wait.max(RETRY_MS);
                }
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = this.inner.wake.notified() => {}
                    () = this.inner.manager.shared.limit_waits.notified() => {}
                    () = tokio::time::sleep(Duration::from_millis(wait as u64)) => {}
                }
            }
        });
    }

    /// Claims a due tick (moving the schedule's next tick on) and runs it; false when the store
    /// failed.
    async fn tick(&self, row: ScheduleRow, now: i64) -> bool {
        let next = match (row.every_secs, row.cron.as_deref()) {
            (Some(every), _) => {
                let step = every.saturating_mul(1000);
                let next = row.next_run_ms.saturating_add(step);
                if next <= now { now + step } else { next }
            }
            (None, Some(cron)) => self.next_cron_tick(cron, now).unwrap_or(i64::MAX),
            (None, None) => i64::MAX,
        };
        match self
            .inner
            .store
            .claim_tick(&row.id, row.next_run_ms, next)
            .await
        {
            Ok(true) => {
                let this = self.clone();
                tokio::spawn(async move {
                    // Paused, changed or deleted since it was read: it runs as it is now, or not.
                    let fresh = this
                        .inner
                        .store
                        .find_schedule(&row.principal, &row.id)
                        .await;
                    match fresh {
                        Ok(Some(fresh))
                            if fresh.enabled && !this.principal_exists(&fresh.principal) =>
                        {
                            this.pause_orphan(fresh).await;
                        }
                        Ok(Some(fresh)) if fresh.enabled => {
                            this.run(&fresh, "tick").await;
                        }
                        _ => {}
                    }
                });
                true
            }
            Ok(false) => true,
            Err(err) => {
                tracing::warn!(error = %err, schedule = %row.id, "cannot claim a tick");
                false
            }
        }
    }

    fn next_cron_tick(&self, cron: &str, after_ms: i64) -> Result<i64, SessionError> {
        cron_tick(cron, self.inner.time_zone, after_ms)
    }

    /// The first tick of a new or changed definition after `after_ms`. A cron expression
    /// that rarely or never matches takes a while to search: that runs off the async workers.
    pub(super) async fn next_tick(
        &self,
        row: &ScheduleRow,
        after_ms: i64,
    ) -> Result<i64, SessionError> {
        match (row.every_secs, row.cron.clone()) {
            (Some(every), _) => Ok(after_ms.saturating_add(every.saturating_mul(1000))),
            (None, Some(cron)) => {
                let time_zone = self.inner.time_zone;
                tokio::task::spawn_blocking(move || cron_tick(&cron, time_zone, after_ms))
                    .await
                    .map_err(|_| invalid("`cron` could not be evaluated"))?
            }
            (None, None) => Err(invalid("give one of `cron` or `every_secs`")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::rfc3339_ms;
    use super::*;
    use crate::protocol::ErrorCode;

    #[test]
    fn only_standard_five_field_expressions_parse() {
        for good in [
            "* * * * *",
            "*/15 9-17 * * 1-5",
            "0 8 1 jan,jul mon",
            "5 4 * * sun",
        ] {
            assert!(parse_cron(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "@hourly",
            "* * * *",
            "0 * * * * *",
            "0 0 * * * 2030",
            "60 * * * *",
            "* 24 * * *",
            "* * 32 * *",
            "* * * 13 *",
            "-1 * * * *",
            "* * * * * * *",
        ] {
            let err = parse_cron(bad).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidSchedule, "{bad}");
        }
        let long = format!("{} * * * *", "0,".repeat(100));
        assert!(parse_cron(&long).is_err(), "too long");
        let never = cron_tick("0 0 30 2 *", chrono_tz::Tz::UTC, 0).unwrap_err();
        assert_eq!(
            never.code,
            ErrorCode::InvalidSchedule,
            "February 30th never comes"
        );
    }

    #[test]
    fn a_cron_tick_is_the_next_match_in_the_time_zone_on_a_whole_minute() {
        let next = |zone: &str, expr: &str, after: &str| {
            let after = DateTime::parse_from_rfc3339(after)
                .unwrap()
                .timestamp_millis();
            let at = cron_tick(expr, zone.parse().unwrap(), after).unwrap();
            rfc3339_ms(at)
        };
        assert_eq!(
            next("UTC", "0 9 * * *", "2026-11-23T08:59:59.999Z"),
            "2026-11-23T09:00:00.000Z"
        );
        assert_eq!(
            next("UTC", "0 9 * * *", "2026-11-23T09:00:00.000Z"),
            "2026-11-24T09:00:00.000Z",
            "a tick is strictly after its start"
        );
        // Paris is UTC+1 in winter and UTC+2 in summer.
        assert_eq!(
            next("Europe/Paris", "0 8 * * *", "2026-01-10T00:00:00Z"),
            "2026-01-10T07:00:00.000Z"
        );
        assert_eq!(
            next("Europe/Paris", "0 8 * * *", "2026-07-10T00:00:00Z"),
            "2026-07-10T06:00:00.000Z"
        );
    }
}
