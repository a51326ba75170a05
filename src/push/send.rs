//! The background sender: a bounded queue of news, each made into one encrypted push per
//! subscription that wants it (RFC 8291 `aes128gcm`, signed per RFC 8292), sent with a timeout
//! and retried on 429, 5xx and failed connections; a subscription its service answers 404 or
//! 410 for is deleted. Sent, failed, dropped and gone pushes are counted.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use p256::elliptic_curve::rand_core::{OsRng, RngCore as _};
use reqwest::{StatusCode, Url, header};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc};

use super::keys::Vapid;
use super::{Event, News, Subscribers, endpoints, now_ms, token_hash};
use crate::config::PushConfig;
use crate::metrics::Metrics;
use crate::protocol::{Principal, truncate_chars};
use crate::store::Store;
use crate::store::push::{ActionRow, PushStore, SubscriptionRow};

/// Characters of an action token: 32 random bytes, base64url.
pub(super) const TOKEN_CHARS: usize = 43;

/// Pushes being sent at once.
const SENDING: usize = 16;

/// Longest pause before a retry, whatever a push service's `Retry-After` asks.
const MAX_PAUSE: Duration = Duration::from_secs(60);

/// Characters of a notification's title and text.
const TITLE_CHARS: usize = 100;
const BODY_CHARS: usize = 240;

/// Work for the sender.
pub(super) enum Job {
    News(News),
    /// A test notification to each of the principal's subscriptions.
    Test(Principal),
}

pub(super) struct Sender {
    client: reqwest::Client,
    vapid: Vapid,
    store: Arc<dyn PushStore>,
    sessions: Arc<dyn Store>,
    subscribers: Arc<Subscribers>,
    metrics: Metrics,
    config: PushConfig,
    sending: Arc<Semaphore>,
}

/// A subscription's keys are a P-256 point and a 16-byte secret.
pub(super) fn check_keys(p256dh: &str, auth: &str) -> Result<(), String> {
    keys(p256dh, auth).map(|_| ())
}

fn keys(p256dh: &str, auth: &str) -> Result<(p256::PublicKey, web_push_native::Auth), String> {
    let point = B64
        .decode(p256dh.trim_end_matches('='))
        .ok()
        .and_then(|b| p256::PublicKey::from_sec1_bytes(&b).ok())
        .ok_or("`keys.p256dh` is not a base64url P-256 public key")?;
    let secret: [u8; 16] = B64
        .decode(auth.trim_end_matches('='))
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or("`keys.auth` is not 16 bytes of base64url")?;
    Ok((point, web_push_native::Auth::from(secret)))
}

impl Sender {
    /// Starts the sender, reading subscriptions from the first store and titles from the
    /// second; returns its queue.
    pub(super) fn spawn(
        config: &PushConfig,
        vapid: Vapid,
        (store, sessions): (Arc<dyn PushStore>, Arc<dyn Store>),
        subscribers: Arc<Subscribers>,
        metrics: Metrics,
    ) -> anyhow::Result<mpsc::Sender<Job>> {
        let mut client = reqwest::Client::builder()
            .timeout(Duration::from_secs(config.timeout_secs))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy();
        if !config.allow_insecure_endpoints {
            client = client
                .https_only(true)
                .dns_resolver(Arc::new(endpoints::PublicOnly));
        }
        let sender = Arc::new(Sender {
            client: client.build()?,
            vapid,
            store,
            sessions,
            subscribers,
            metrics,
            config: config.clone(),
            sending: Arc::new(Semaphore::new(SENDING)),
        });
        let (queue, mut jobs) = mpsc::channel(config.queue);
        tokio::spawn(async move {
            while let Some(job) = jobs.recv().await {
                sender.clone().run(job).await;
            }
        });
        Ok(queue)
    }

    /// Makes the pushes of one job and hands each to a task of its own.
    async fn run(self: Arc<Self>, job: Job) {
        let (principal, event) = match &job {
            Job::News(news) => (news.principal.clone(), Some(news.event)),
            Job::Test(principal) => (principal.clone(), None),
        };
        let looked = std::time::Instant::now();
        let subscriptions = match self.store.list_subscriptions(&principal).await {
            Ok(all) => {
                self.subscribers.record(&principal, !all.is_empty(), looked);
                all
            }
            Err(err) => {
                tracing::warn!(error = %err, "push: could not read subscriptions");
                return;
            }
        };
        let subscriptions: Vec<SubscriptionRow> = subscriptions
            .into_iter()
            .filter(|s| event.is_none_or(|e| s.events.split(',').any(|x| x == e.as_str())))
            .collect();
        if subscriptions.is_empty() {
            return;
        }
        let payload = match job {
            Job::News(news) => match self.payload(news).await {
                Some(payload) => payload,
                None => return,
            },
            Job::Test(_) => json!({
                "kind": "test",
                "title": "agentmux",
                "body": "Notifications reach this device.",
            }),
        };
        let payload = payload.to_string();
        // A waiting tool is worth waking a phone for; the rest may wait for its next round.
        let urgency = match event {
            Some(Event::Permission) | None => "high",
            Some(_) => "normal",
        };
        for subscription in subscriptions {
            let Ok(permit) = self.sending.clone().acquire_owned().await else {
                return;
            };
            let sender = self.clone();
            let payload = payload.clone();
            tokio::spawn(async move {
                sender.deliver(&subscription, payload, urgency).await;
                drop(permit);
            });
        }
    }

    /// The notification's JSON: what happened, in the conversation's title and a short text,
    /// and the token of its buttons. None when the token can't be stored.
    async fn payload(&self, news: News) -> Option<Value> {
        let title = match self
            .sessions
            .find_session(&news.owner.0, &news.owner.1)
            .await
        {
            Ok(Some(record)) => record.title.filter(|t| !t.is_empty()),
            _ => None,
        }
        .unwrap_or_else(|| news.agent_id.to_string());
        let detail: Value = serde_json::from_str(&news.payload).unwrap_or_default();
        let (body, request_id) = summary(news.event, &detail);
        let token = new_token();
        let row = ActionRow {
            token_hash: token_hash(&token),
            principal: news.principal.clone(),
            agent_id: news.agent_id.to_string(),
            request_id: request_id.map(str::to_owned),
            expires_ms: now_ms() + (self.config.action_token_secs as i64) * 1000,
        };
        if let Err(err) = self.store.insert_action(&row, now_ms()).await {
            tracing::warn!(error = %err, "push: could not store an action token");
            self.metrics.push("failed");
            return None;
        }
        Some(json!({
            "kind": news.event.as_str(),
            "agent_id": news.agent_id.as_str(),
            "title": truncate_chars(&title, TITLE_CHARS),
            "body": body,
            "token": token,
        }))
    }

    /// Sends one push, retrying as the service asks; counts the outcome.
    async fn deliver(&self, subscription: &SubscriptionRow, payload: String, urgency: &str) {
        let outcome = self.try_deliver(subscription, payload, urgency).await;
        if outcome == "gone" {
            if let Err(err) = self.store.forget_subscription(&subscription.id).await {
                tracing::warn!(error = %err, "push: could not delete a gone subscription");
            }
            self.subscribers.forget(&subscription.principal);
        }
        self.metrics.push(outcome);
    }

    async fn try_deliver(
        &self,
        subscription: &SubscriptionRow,
        payload: String,
        urgency: &str,
    ) -> &'static str {
        let Ok(url) = Url::parse(&subscription.endpoint) else {
            return "failed";
        };
        let literal = url.host_str().and_then(|h| {
            h.trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .ok()
        });
        if !self.config.allow_insecure_endpoints
            && (url.scheme() != "https" || literal.is_some_and(|ip| !endpoints::is_public(ip)))
        {
            return "failed";
        }
        let Ok((point, auth)) = keys(&subscription.p256dh, &subscription.auth) else {
            return "failed";
        };
        let Ok(body) = web_push_native::encrypt(payload.into_bytes(), &point, &auth) else {
            return "failed";
        };
        let mut attempt = 0;
        loop {
            let Ok(authorization) = self.vapid.authorization(&url) else {
                return "failed";
            };
            let sent = self
                .client
                .post(url.clone())
                .header("TTL", self.config.ttl_secs)
                .header("Urgency", urgency)
                .header(header::CONTENT_ENCODING, "aes128gcm")
                .header(header::CONTENT_TYPE, "application/octet-stream")
                .header(header::AUTHORIZATION, authorization)
                .body(body.clone())
                .send()
                .await;
            let pause = match sent {
                Ok(answer) if answer.status().is_success() => return "sent",
                Ok(answer)
                    if matches!(answer.status(), StatusCode::NOT_FOUND | StatusCode::GONE) =>
                {
                    return "gone";
                }
                Ok(answer)
                    if answer.status() == StatusCode::TOO_MANY_REQUESTS
                        || answer.status().is_server_error() =>
                {
                    retry_after(&answer).unwrap_or_else(|| backoff(attempt))
                }
                Ok(answer) => {
                    tracing::warn!(status = %answer.status(), service = %url.origin().ascii_serialization(), "push refused");
                    return "failed";
                }
                Err(err) => {
                    tracing::debug!(error = %err, "push: the service could not be reached");
                    backoff(attempt)
                }
            };
            if attempt >= self.config.retries {
                return "failed";
            }
            attempt += 1;
            tokio::time::sleep(pause).await;
        }
    }
}

/// The pause a service's `Retry-After` (in seconds) asks for, at most [`MAX_PAUSE`].
fn retry_after(answer: &reqwest::Response) -> Option<Duration> {
    let secs: u64 = answer
        .headers()
        .get(header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs).min(MAX_PAUSE))
}

/// 1, 2, 4 … seconds, at most [`MAX_PAUSE`].
fn backoff(attempt: u32) -> Duration {
    Duration::from_secs(1u64 << attempt.min(6)).min(MAX_PAUSE)
}

/// 32 random bytes, base64url.
fn new_token() -> String {
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    B64.encode(bytes)
}

/// A notification's text, and the permission request its buttons answer.
fn summary(event: Event, detail: &Value) -> (String, Option<&str>) {
    match event {
        Event::Permission => {
            let tool = detail["tool_name"].as_str().unwrap_or("A tool");
            let input = &detail["input"];
            let shown = [
                "command",
                "file_path",
                "path",
                "url",
                "pattern",
                "description",
            ]
            .iter()
            .find_map(|k| input[*k].as_str().map(str::to_owned))
            .unwrap_or_else(|| match input {
                Value::Null => String::new(),
                other => other.to_string(),
            });
            let text = match shown.is_empty() {
                true => format!("{tool} waits for your approval"),
                false => format!("{tool}: {shown}"),
            };
            (clip(&text), detail["request_id"].as_str())
        }
        Event::Turn | Event::Schedule => {
            let error = detail["is_error"].as_bool() == Some(true);
            let reply = detail["result"].as_str().map(str::trim).unwrap_or("");
            let text = match (error, reply.is_empty()) {
                (true, true) => "The turn ended with an error".to_owned(),
                (true, false) => format!("Error: {reply}"),
                (false, true) => "The reply is ready".to_owned(),
                (false, false) => reply.to_owned(),
            };
            let text = match event {
                Event::Schedule => format!("Scheduled run: {text}"),
                _ => text,
            };
            (clip(&text), None)
        }
    }
}

/// At most [`BODY_CHARS`] characters on one line, with an ellipsis when cut.
fn clip(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut = truncate_chars(&line, BODY_CHARS);
    match cut.len() < line.len() {
        true => format!("{cut}…"),
        false => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permission_shows_the_tool_and_the_start_of_its_input() {
        let detail =
            json!({"request_id": "r1", "tool_name": "Bash", "input": {"command": "ls -la\n/tmp"}});
        assert_eq!(
            summary(Event::Permission, &detail),
            ("Bash: ls -la /tmp".to_owned(), Some("r1"))
        );
        let long = json!({"request_id": "r2", "tool_name": "Write", "input": {"content": "x".repeat(5000)}});
        let (text, _) = summary(Event::Permission, &long);
        assert!(
            text.chars().count() <= BODY_CHARS + 1 && text.ends_with('…'),
            "{text}"
        );
    }

    #[test]
    fn a_turn_shows_the_start_of_its_reply_or_its_error() {
        let done = json!({"result": "All tests pass.", "is_error": false});
        assert_eq!(summary(Event::Turn, &done).0, "All tests pass.");
        assert_eq!(
            summary(Event::Schedule, &done).0,
            "Scheduled run: All tests pass."
        );
        let failed = json!({"is_error": true});
        assert_eq!(
            summary(Event::Turn, &failed).0,
            "The turn ended with an error"
        );
    }

    #[test]
    fn retries_wait_longer_each_time_up_to_a_minute() {
        assert_eq!(backoff(0), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(8));
        assert_eq!(backoff(30), MAX_PAUSE);
    }
}
