//! Turns a rate limit ends (a result that says so, see [`super::figures`]): the reset time the
//! agent announced, the wait for the "continue" turn that follows (stored, so it outlives the server), and its
//! end by an interrupt, by a turn someone else sends, or by its "continue" turn refused.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::publish::Out;
use super::{Actor, Shared};
use crate::config::SessionConfig;
use crate::protocol::{Chat, LimitWait};
use crate::session::SessionError;
use crate::store::{NewMessage, RowId, StoreError};

/// The `status` of the marker stored just before a "continue" turn.
pub(in crate::session) const CONTINUED: &str = "limit_continued";

/// The `status` saying that nothing continues by itself any more: too many tries, a reset too
/// far ahead, or the "continue" turn refused.
pub(in crate::session) const GAVE_UP: &str = "limit_gave_up";

/// The `status` saying that an interrupt cancelled the wait.
pub(in crate::session) const WAIT_CANCELLED: &str = "limit_wait_cancelled";

/// A turn the model API's rate limit ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Limited {
    /// When the limit resets (milliseconds since the epoch), when the agent said.
    pub(super) reset_ms: Option<i64>,
}

/// What follows a rate-limited turn.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Plan {
    /// Continue at `until_ms`.
    Wait { until_ms: i64 },
    /// Don't continue by itself; the text says why.
    GiveUp(String),
}

/// The reset time a `rate_limit_event` announces when it rejects a request: `resetsAt`, in
/// seconds since the epoch.
pub(super) fn announced_reset(raw: &str) -> Option<i64> {
    let v: Value = serde_json::from_str(raw).ok()?;
    let info = &v["rate_limit_info"];
    if info["status"] != "rejected" {
        return None;
    }
    let secs = info["resetsAt"].as_f64()?;
    (secs.is_finite() && secs > 0.0 && secs < 1e11).then_some((secs * 1000.0) as i64)
}

/// When to continue after the `tries + 1`-th rate-limited turn in a row, at `now_ms`: at the
/// reset time, else after the back-off (doubling with each try, capped), plus `jitter_ms`.
pub(super) fn plan(
    config: &SessionConfig,
    limited: Limited,
    tries: i64,
    now_ms: i64,
    jitter_ms: i64,
) -> Plan {
    let max_tries = i64::from(config.auto_continue_max_tries);
    if tries >= max_tries {
        return Plan::GiveUp(format!(
            "rate limited {} turns in a row; not continuing by itself (session.auto_continue_max_tries = {max_tries})",
            tries + 1
        ));
    }
    let wait_ms = match limited.reset_ms {
        Some(reset_ms) => {
            let max_ms = (config.auto_continue_max_wait_secs as i64).saturating_mul(1000);
            if reset_ms.saturating_sub(now_ms) > max_ms {
                return Plan::GiveUp(format!(
                    "the limit resets at {}, further ahead than session.auto_continue_max_wait_secs",
                    rfc3339(reset_ms)
                ));
            }
            reset_ms.saturating_sub(now_ms).max(0)
        }
        None => {
            let first = (config.auto_continue_backoff_secs.max(1) as i64).saturating_mul(1000);
            let cap = (config.auto_continue_backoff_max_secs as i64).saturating_mul(1000);
            first
                .saturating_mul(1i64 << tries.clamp(0, 30))
                .min(cap.max(first))
        }
    };
    Plan::Wait {
        until_ms: now_ms.saturating_add(wait_ms).saturating_add(jitter_ms),
    }
}

/// A time in milliseconds since the epoch as RFC 3339.
pub fn rfc3339(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A random time from 0 to `max_ms`.
fn jitter(max_ms: u64) -> i64 {
    if max_ms == 0 {
        return 0;
    }
    (uuid::Uuid::new_v4().as_u128() % u128::from(max_ms + 1)) as i64
}

/// What the status saying that an interrupt cancelled the wait says.
pub(in crate::session) const CANCELLED: &str =
    "the wait for the rate limit was cancelled; nothing continues by itself";

/// The stored status `status` (one that ends the wait) with `detail`.
pub(in crate::session) fn wait_status(status: &str, detail: &str) -> NewMessage {
    let payload = json!({"status": status, "detail": detail});
    NewMessage::new("status", payload.to_string())
}

/// What the status of a wait whose "continue" turn was refused says, with the refusal.
pub(in crate::session) fn refused_detail(reason: &str) -> String {
    format!(
        "the turn continuing after the rate limit was refused ({}); nothing continues by itself",
        crate::protocol::truncate_chars(reason, 300)
    )
}

/// Cancels the stored wait of conversation `row` and starts its count of tries over, counting
/// it among the cancelled ones; whether it waited.
pub(in crate::session) async fn cancel_stored_wait(
    shared: &Shared,
    row: RowId,
) -> Result<bool, StoreError> {
    let cancelled = shared.store.cancel_limit_wait(row).await?;
    if cancelled {
        shared.metrics.limit_wait("cancelled");
    }
    Ok(cancelled)
}

/// The marker stored just before a "continue" turn.
pub(in crate::session) fn continued_status() -> NewMessage {
    let payload = json!({
        "status": CONTINUED,
        "detail": "the rate limit has reset: continuing the conversation",
    });
    NewMessage::new("status", payload.to_string())
}

/// Whether a chat's marker is that of a "continue" turn.
fn is_continue(marker: &NewMessage) -> bool {
    continues(&marker.payload)
}

/// Whether the payload of a chat's marker is that of a "continue" turn.
fn continues(payload: &str) -> bool {
    serde_json::from_str::<Value>(payload).is_ok_and(|v| v["status"] == CONTINUED)
}

impl Actor {
    /// Whether a turn a rate limit ends continues by itself.
    fn auto_continues(&self) -> bool {
        self.auto_continue
            .unwrap_or(self.shared.config.session.auto_continue)
    }

    /// Records a chat's `options.auto_continue` as the conversation's.
    pub(super) async fn set_auto_continue(&mut self, on: Option<bool>) {
        if on.is_none() || on == self.auto_continue {
            return;
        }
        self.auto_continue = on;
        if let Err(err) = (self.shared.store)
            .set_auto_continue(self.conversation.row, on)
            .await
        {
            self.store_failed(&err);
        }
    }

    /// After the running turn's `result` (in `outs`): makes the conversation wait for the
    /// rate limit that ended it and adds the stored status saying so, or starts its count of
    /// rate-limited turns over when none did.
    pub(super) async fn after_turn(&mut self, limited: Option<Limited>, outs: &mut Vec<Out>) {
        let Some(limited) = limited else {
            if self.limit_tries > 0 {
                self.set_wait(None, 0).await;
            }
            return;
        };
        if !self.auto_continues() {
            return;
        }
        let config = &self.shared.config.session;
        let now = Utc::now().timestamp_millis();
        let jitter = jitter(config.auto_continue_jitter_ms);
        let tries = self.limit_tries;
        let payload = match plan(config, limited, tries, now, jitter) {
            Plan::Wait { until_ms } => {
                let max_tries = config.auto_continue_max_tries;
                self.set_wait(Some(until_ms), tries + 1).await;
                self.shared.metrics.limit_wait("waiting");
                self.shared.limit_waits.notify_one();
                let reason = match limited.reset_ms {
                    Some(_) => "the model API's rate limit ended the turn",
                    None => {
                        "the model API's rate limit ended the turn without saying when it resets"
                    }
                };
                let mut payload = serde_json::to_value(LimitWait {
                    continue_at: rfc3339(until_ms),
                    resets_at: limited.reset_ms.map(rfc3339),
                    attempt: u32::try_from(tries + 1).unwrap_or(u32::MAX),
                    max_tries,
                })
                .expect("a wait serializes");
                payload["status"] = "waiting_for_limit".into();
                payload["detail"] = format!(
                    "{reason}; continuing at {} (try {} of {max_tries}); an interrupt cancels",
                    rfc3339(until_ms),
                    tries + 1
                )
                .into();
                payload
            }
            Plan::GiveUp(detail) => {
                self.set_wait(None, 0).await;
                self.shared.metrics.limit_wait("gave_up");
                outs.push(Out::Stored(wait_status(GAVE_UP, &detail)));
                return;
            }
        };
        outs.push(Out::Stored(NewMessage::new("status", payload.to_string())));
    }

    /// A chat; when it is a "continue" turn and refused (over a cap, credentials gone, the
    /// store failing), the wait ends for good with a stored `limit_gave_up` status saying why.
    pub(super) async fn on_chat_or_continue(
        &mut self,
        chat: Chat,
        marker: Option<Box<NewMessage>>,
        reply: oneshot::Sender<Result<(i64, usize), SessionError>>,
    ) {
        if !marker.as_deref().is_some_and(is_continue) {
            return self.on_chat(chat, marker, reply).await;
        }
        let (answer, answered) = oneshot::channel();
        self.on_chat(chat, marker, answer).await;
        let answer = answered
            .await
            .unwrap_or_else(|_| Err(crate::session::errors::stopped()));
        if let Err(err) = &answer {
            self.set_wait(None, 0).await;
            self.shared.metrics.limit_wait("gave_up");
            let status = wait_status(GAVE_UP, &refused_detail(&err.message));
            self.publish_batch(vec![Out::Stored(status)]).await;
        }
        let _ = reply.send(answer);
    }

    /// A chat stored (with the payload of its marker, if any) from anyone but the wait itself
    /// ends the wait: that turn goes on instead.
    pub(super) async fn chat_ends_wait(&mut self, marker: Option<&str>) {
        if self.limit_tries == 0 || marker.is_some_and(continues) {
            return;
        }
        match (self.shared.store)
            .cancel_limit_wait(self.conversation.row)
            .await
        {
            Ok(true) => self.limit_tries = 0,
            // Its "continue" turn is on its way: the count goes on until a turn ends well.
            Ok(false) => {}
            Err(err) => self.store_failed(&err),
        }
    }

    /// An interrupt with no turn running cancels the wait, storing a status that says so;
    /// whether there was one.
    pub(super) async fn cancel_wait(&mut self) -> bool {
        match cancel_stored_wait(&self.shared, self.conversation.row).await {
            Ok(true) => {
                self.limit_tries = 0;
                let status = wait_status(WAIT_CANCELLED, CANCELLED);
                self.publish_batch(vec![Out::Stored(status)]).await;
                true
            }
            Ok(false) => false,
            Err(err) => {
                self.store_failed(&err);
                false
            }
        }
    }

    async fn set_wait(&mut self, until_ms: Option<i64>, tries: i64) {
        self.limit_tries = tries;
        if let Err(err) = (self.shared.store)
            .set_limit_wait(self.conversation.row, until_ms, tries)
            .await
        {
            self.store_failed(&err);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SessionConfig {
        SessionConfig {
            auto_continue_backoff_secs: 60,
            auto_continue_backoff_max_secs: 600,
            auto_continue_max_tries: 5,
            auto_continue_max_wait_secs: 3600,
            ..SessionConfig::default()
        }
    }

    #[test]
    fn a_rejecting_rate_limit_event_announces_its_reset() {
        let event = |status: &str, at: &str| {
            format!(
                r#"{{"type":"rate_limit_event","rate_limit_info":{{"status":"{status}","resetsAt":{at},"rateLimitType":"five_hour"}}}}"#
            )
        };
        assert_eq!(
            announced_reset(&event("rejected", "1800000000")),
            Some(1_800_000_000_000)
        );
        assert_eq!(announced_reset(&event("allowed", "1800000000")), None);
        assert_eq!(announced_reset(&event("rejected", "\"soon\"")), None);
        assert_eq!(announced_reset(&event("rejected", "-5")), None);
        assert_eq!(announced_reset(&event("rejected", "1e300")), None);
        assert_eq!(announced_reset("not json"), None);
    }

    #[test]
    fn the_wait_is_the_reset_or_a_doubling_capped_back_off() {
        let c = config();
        let now = 1_000_000;
        let reset = Limited {
            reset_ms: Some(now + 3000),
        };
        assert_eq!(
            plan(&c, reset, 0, now, 250),
            Plan::Wait {
                until_ms: now + 3250
            }
        );
        // A reset already past continues at once.
        let past = Limited {
            reset_ms: Some(now - 10),
        };
        assert_eq!(plan(&c, past, 0, now, 0), Plan::Wait { until_ms: now });
        let none = Limited { reset_ms: None };
        let waits: Vec<Plan> = (0..5).map(|tries| plan(&c, none, tries, now, 0)).collect();
        let minutes = [1, 2, 4, 8, 10].map(|m| Plan::Wait {
            until_ms: now + m * 60_000,
        });
        assert_eq!(waits, minutes);
        assert!(matches!(plan(&c, none, 5, now, 0), Plan::GiveUp(_)));
        assert!(matches!(plan(&c, reset, 5, now, 0), Plan::GiveUp(_)));
        let far = Limited {
            reset_ms: Some(now + 3_600_001),
        };
        assert!(matches!(plan(&c, far, 0, now, 0), Plan::GiveUp(_)));
        let never = SessionConfig {
            auto_continue_max_tries: 0,
            ..config()
        };
        assert!(matches!(plan(&never, reset, 0, now, 0), Plan::GiveUp(_)));
    }

    #[test]
    fn jitter_stays_within_its_bound() {
        assert_eq!(jitter(0), 0);
        assert!((0..100).map(|_| jitter(10)).all(|j| (0..=10).contains(&j)));
    }
}
