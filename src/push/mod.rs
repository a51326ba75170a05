//! Web Push (RFC 8030, 8291, 8292) to the browsers principals subscribed, an installed
//! agentmux on a phone among them: the server's VAPID key (`keys`), which endpoints it sends to
//! (`endpoints`), which conversation each page shows (`presence`), and the bounded background
//! sender (`send`). The session layer hands it news from where it publishes each principal's
//! activity; a conversation some page of its principal shows is pushed nothing. A
//! notification's buttons carry a single-use token bound to its principal, conversation and
//! (for Allow and Deny) permission request, kept in the store by its hash only.

mod endpoints;
mod keys;
mod presence;
mod send;

pub use keys::KEY_FILE;
pub use presence::{Presence, Seat};

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dashmap::DashMap;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc;
use utoipa::ToSchema;

use crate::config::PushConfig;
use crate::metrics::Metrics;
use crate::protocol::{AgentId, ErrorCode, Principal};
use crate::store::Store;
use crate::store::push::{PushStore, SubscriptionRow};

/// What a subscription may be told of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// A tool waits for approval (the notification has Allow and Deny).
    Permission,
    /// A turn ended, with its reply or an error (the notification has Reply).
    Turn,
    /// A schedule's run ended.
    Schedule,
}

impl Event {
    const ALL: [Event; 3] = [Event::Permission, Event::Turn, Event::Schedule];

    fn as_str(self) -> &'static str {
        match self {
            Event::Permission => "permission",
            Event::Turn => "turn",
            Event::Schedule => "schedule",
        }
    }
}

/// What happened in a conversation, for the subscriptions of one principal who may act on it.
#[derive(Debug)]
struct News {
    /// Whom to tell.
    principal: Principal,
    /// The conversation as they know it: the owner's `agent_id`, or a sharee's alias.
    agent_id: AgentId,
    /// Whose conversation it is and their `agent_id` for it, where its title is read.
    owner: (Principal, AgentId),
    event: Event,
    /// The stored frame it is about (`permission_request` or `result`), as JSON.
    payload: String,
}

/// A refused push request: a code of the protocol and why.
#[derive(Debug, Clone, PartialEq)]
pub struct PushError {
    /// Stable code.
    pub code: ErrorCode,
    /// Human-readable explanation.
    pub message: String,
}

impl PushError {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        PushError {
            code,
            message: message.into(),
        }
    }

    fn store(err: crate::store::StoreError) -> Self {
        tracing::warn!(error = %err, "push subscriptions: the store failed");
        PushError::new(ErrorCode::StoreUnavailable, "the store is unavailable")
    }
}

/// A browser's `PushSubscription` as its `toJSON()` gives it, and the news it wants.
#[derive(Debug, Deserialize, ToSchema)]
pub struct SubscriptionBody {
    /// The push service's URL for this browser: `https` to a public host.
    pub endpoint: String,
    /// The browser's keys.
    pub keys: SubscriptionKeys,
    /// The news it wants; all of them when absent.
    #[serde(default)]
    pub events: Option<Vec<Event>>,
}

/// A subscription's keys (RFC 8291), base64url.
#[derive(Debug, Deserialize, ToSchema)]
pub struct SubscriptionKeys {
    /// The browser's P-256 public key (65 bytes, uncompressed).
    pub p256dh: String,
    /// Its authentication secret (16 bytes).
    pub auth: String,
}

/// A subscription as its principal sees it: never its endpoint's path or its keys.
#[derive(Debug, Serialize, ToSchema)]
pub struct Subscription {
    /// Its id.
    pub id: String,
    /// The push service it goes through (`https://host`).
    pub service: String,
    /// The news it gets.
    pub events: Vec<Event>,
    /// When it was made (RFC 3339).
    pub created_at: String,
}

/// What a notification's token lets the one holding it do, once.
#[derive(Debug)]
pub struct Action {
    /// For whom.
    pub principal: Principal,
    /// The conversation.
    pub agent_id: AgentId,
    /// The permission request (Allow and Deny); None for Reply.
    pub request_id: Option<String>,
}

/// How long what the store said about a principal's having subscriptions is trusted (a
/// subscription made through another node of a cluster is seen after at most this long).
const KNOWN_FOR: Duration = Duration::from_secs(60);

/// Whether each principal, and anyone at all, had subscriptions when last looked: news for a
/// principal that had none a moment ago is not queued, and while nobody has one the shares of
/// a conversation are not read to find its editors, so conversations cost nothing for push
/// until somebody uses it.
#[derive(Default)]
struct Subscribers {
    principals: DashMap<Principal, (bool, Instant)>,
    anyone: Mutex<Option<(bool, Instant)>>,
    /// Whether the store is being asked whether anyone has one.
    looking: AtomicBool,
}

impl Subscribers {
    /// False only when the principal had no subscription a moment ago.
    fn maybe(&self, principal: &Principal) -> bool {
        match self.principals.get(principal) {
            Some(seen) if seen.1.elapsed() < KNOWN_FOR => seen.0,
            _ => true,
        }
    }

    /// What the store said at `at`; a later word (a subscription made meanwhile) stands.
    fn record(&self, principal: &Principal, any: bool, at: Instant) {
        let mut seen = self
            .principals
            .entry(principal.clone())
            .or_insert((any, at));
        if seen.1 <= at {
            *seen = (any, at);
        }
        if any {
            self.record_anyone(true, at);
        }
    }

    /// Looks again next time.
    fn forget(&self, principal: &Principal) {
        self.principals.remove(principal);
    }

    /// Whether anyone had a subscription a moment ago; None when that is to be looked up.
    fn anyone(&self) -> Option<bool> {
        match *self.anyone.lock().expect("subscribers lock") {
            Some((any, at)) if at.elapsed() < KNOWN_FOR => Some(any),
            _ => None,
        }
    }

    /// Whether the store had any subscription at `at`; a later word stands.
    fn record_anyone(&self, any: bool, at: Instant) {
        let mut anyone = self.anyone.lock().expect("subscribers lock");
        if anyone.is_none_or(|(_, seen)| seen <= at) {
            *anyone = Some((any, at));
        }
    }
}

/// Web Push: subscriptions, presence and the sender; one per server.
pub struct Push {
    config: PushConfig,
    store: Arc<dyn PushStore>,
    presence: Arc<Presence>,
    subscribers: Arc<Subscribers>,
    /// The sender's queue and the public key; None with push off.
    sender: Option<(mpsc::Sender<send::Job>, String)>,
    metrics: Metrics,
}

impl Push {
    /// Reads or makes the VAPID key and starts the sender (with `push.enabled`).
    ///
    /// # Errors
    /// A bad or unreadable key (see [`keys`]), or a client that can't be built.
    pub fn start(
        config: &PushConfig,
        data_dir: &Path,
        store: Arc<dyn PushStore>,
        sessions: Arc<dyn Store>,
        metrics: Metrics,
    ) -> anyhow::Result<Arc<Self>> {
        let subscribers = Arc::new(Subscribers::default());
        let sender = match config.enabled {
            false => None,
            true => {
                let vapid = keys::Vapid::load(config, data_dir)?;
                let public = vapid.public_key().to_owned();
                let stores = (store.clone(), sessions);
                let queue = send::Sender::spawn(
                    config,
                    vapid,
                    stores,
                    subscribers.clone(),
                    metrics.clone(),
                )?;
                Some((queue, public))
            }
        };
        Ok(Arc::new(Push {
            config: config.clone(),
            store,
            presence: Arc::new(Presence::default()),
            subscribers,
            sender,
            metrics,
        }))
    }

    /// Which conversation each page shows.
    pub fn presence(&self) -> &Arc<Presence> {
        &self.presence
    }

    /// The public key browsers subscribe with (`applicationServerKey`), base64url.
    ///
    /// # Errors
    /// `unsupported` with push off.
    pub fn public_key(&self) -> Result<&str, PushError> {
        self.on().map(|(_, key)| key.as_str())
    }

    fn on(&self) -> Result<&(mpsc::Sender<send::Job>, String), PushError> {
        self.sender.as_ref().ok_or_else(|| {
            PushError::new(
                ErrorCode::Unsupported,
                "push notifications are off (push.enabled)",
            )
        })
    }

    /// Stores a browser's subscription for `principal` (again: its keys and events are
    /// updated).
    ///
    /// # Errors
    /// `invalid_request` (a refused endpoint, bad keys), `limit_exceeded`, `unsupported`,
    /// `store_unavailable`.
    pub async fn subscribe(
        &self,
        principal: &Principal,
        body: SubscriptionBody,
    ) -> Result<Subscription, PushError> {
        self.on()?;
        let invalid = |m: String| PushError::new(ErrorCode::InvalidRequest, m);
        let url = endpoints::check(&body.endpoint, self.config.allow_insecure_endpoints)
            .await
            .map_err(invalid)?;
        send::check_keys(&body.keys.p256dh, &body.keys.auth).map_err(invalid)?;
        let mut events = body.events.unwrap_or_else(|| Event::ALL.to_vec());
        events.sort_by_key(|e| e.as_str());
        events.dedup();
        let endpoint = url.as_str();
        let known =
            (self.store.has_endpoint(principal, endpoint).await).map_err(PushError::store)?;
        let cap = self.config.max_subscriptions_per_principal;
        if !known {
            let have =
                (self.store.list_subscriptions(principal).await).map_err(PushError::store)?;
            if have.len() >= cap {
                return Err(PushError::new(
                    ErrorCode::LimitExceeded,
                    format!(
                        "at most {cap} push subscriptions per principal (push.max_subscriptions_per_principal)"
                    ),
                ));
            }
        }
        let row = SubscriptionRow {
            id: uuid::Uuid::new_v4().to_string(),
            principal: principal.clone(),
            endpoint: endpoint.to_owned(),
            p256dh: body.keys.p256dh,
            auth: body.keys.auth,
            events: events
                .iter()
                .map(|e| e.as_str())
                .collect::<Vec<_>>()
                .join(","),
            created_at: crate::protocol::now_rfc3339(),
        };
        let id = (self.store.save_subscription(&row).await).map_err(PushError::store)?;
        self.subscribers.record(principal, true, Instant::now());
        Ok(Subscription { id, ..shown(row) })
    }

    /// `principal`'s subscriptions, oldest first.
    ///
    /// # Errors
    /// `store_unavailable`.
    pub async fn subscriptions(
        &self,
        principal: &Principal,
    ) -> Result<Vec<Subscription>, PushError> {
        let rows = (self.store.list_subscriptions(principal).await).map_err(PushError::store)?;
        Ok(rows.into_iter().map(shown).collect())
    }

    /// Deletes one of `principal`'s subscriptions.
    ///
    /// # Errors
    /// `unknown_subscription` (none of `principal`'s has that id), `store_unavailable`.
    pub async fn unsubscribe(&self, principal: &Principal, id: &str) -> Result<(), PushError> {
        match self.store.delete_subscription(principal, id).await {
            Ok(true) => {
                self.subscribers.forget(principal);
                Ok(())
            }
            Ok(false) => Err(PushError::new(
                ErrorCode::UnknownSubscription,
                "no such push subscription",
            )),
            Err(e) => Err(PushError::store(e)),
        }
    }

    /// Sends a test notification to each of `principal`'s subscriptions.
    ///
    /// # Errors
    /// `unsupported` with push off; `limit_exceeded` when the queue is full.
    pub fn test(&self, principal: &Principal) -> Result<(), PushError> {
        let (queue, _) = self.on()?;
        self.enqueue(queue, send::Job::Test(principal.clone()))
            .then_some(())
            .ok_or_else(|| PushError::new(ErrorCode::LimitExceeded, "too many pushes waiting"))
    }

    /// False with push off, or when no principal had a subscription a moment ago (one made
    /// through another node of a cluster is seen after at most [`KNOWN_FOR`]): news for
    /// anyone but a conversation's owner then needs no read of who else may hear of it. Until
    /// the store has said, and while it is asked again, it is true.
    pub fn anyone_subscribed(&self) -> bool {
        if self.sender.is_none() {
            return false;
        }
        if let Some(any) = self.subscribers.anyone() {
            return any;
        }
        if !self.subscribers.looking.swap(true, Ordering::AcqRel) {
            let (store, subscribers) = (self.store.clone(), self.subscribers.clone());
            tokio::spawn(async move {
                let looked = Instant::now();
                let any = store.any_subscription().await.unwrap_or_else(|err| {
                    tracing::warn!(error = %err, "push: could not read whether anyone subscribed");
                    // Taken as yes for a while: the shares are read, and it is asked again later.
                    true
                });
                subscribers.record_anyone(any, looked);
                subscribers.looking.store(false, Ordering::Release);
            });
        }
        true
    }

    /// Pushes news of `event` in the conversation `owner` names (about the stored frame
    /// `payload`) to the subscriptions of `to`'s principal, under the `agent_id` they know it
    /// by, in the background, unless push is off or a page of theirs shows the conversation,
    /// or they had no subscription a moment ago. A full queue drops it (counted).
    pub fn notice(
        &self,
        owner: (&Principal, &AgentId),
        to: (&Principal, &AgentId),
        event: Event,
        payload: &str,
    ) {
        let Ok((queue, _)) = self.on() else {
            return;
        };
        let (principal, agent_id) = to;
        if !self.subscribers.maybe(principal) || self.presence.in_view(principal, agent_id) {
            return;
        }
        let news = News {
            principal: principal.clone(),
            agent_id: agent_id.clone(),
            owner: (owner.0.clone(), owner.1.clone()),
            event,
            payload: payload.to_owned(),
        };
        self.enqueue(queue, send::Job::News(news));
    }

    fn enqueue(&self, queue: &mpsc::Sender<send::Job>, job: send::Job) -> bool {
        let queued = queue.try_send(job).is_ok();
        if !queued {
            self.metrics.push("dropped");
        }
        queued
    }

    /// Takes the action `token` stands for: a token is good once, for its few minutes.
    ///
    /// # Errors
    /// `forbidden` for a token that is unknown, used, expired or malformed;
    /// `store_unavailable`.
    pub async fn take_action(&self, token: &str) -> Result<Action, PushError> {
        let refused = || PushError::new(ErrorCode::Forbidden, "this action token is not valid");
        if token.len() != send::TOKEN_CHARS || B64.decode(token).is_err() {
            return Err(refused());
        }
        let row = (self.store.take_action(&token_hash(token), now_ms()).await)
            .map_err(PushError::store)?
            .ok_or_else(refused)?;
        Ok(Action {
            principal: row.principal,
            agent_id: AgentId::parse(row.agent_id).map_err(|_| refused())?,
            request_id: row.request_id,
        })
    }
}

/// A stored subscription as its principal sees it.
fn shown(row: SubscriptionRow) -> Subscription {
    let service = reqwest::Url::parse(&row.endpoint)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_default();
    Subscription {
        id: row.id,
        service,
        events: Event::ALL
            .into_iter()
            .filter(|e| row.events.split(',').any(|s| s == e.as_str()))
            .collect(),
        created_at: row.created_at,
    }
}

/// What the store keeps of a token: its SHA-256, hex.
fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn news_is_queued_unless_the_principal_had_no_subscription_a_moment_ago() {
        let subscribers = Subscribers::default();
        let alice = Principal::from("alice");
        assert!(subscribers.maybe(&alice), "never looked: look");
        let looked = Instant::now();
        subscribers.record(&alice, false, looked);
        assert!(!subscribers.maybe(&alice));
        // A subscription made while a lookup from before it was on its way stands.
        subscribers.record(&alice, true, Instant::now());
        subscribers.record(&alice, false, looked);
        assert!(subscribers.maybe(&alice));
        subscribers.record(&alice, false, Instant::now());
        subscribers.forget(&alice);
        assert!(subscribers.maybe(&alice), "forgotten: look again");
    }

    /// Whether anyone subscribed is looked up when unknown; a subscription seen since a lookup
    /// that found none stands.
    #[test]
    fn whether_anyone_subscribed_is_what_was_seen_last() {
        let subscribers = Subscribers::default();
        assert_eq!(subscribers.anyone(), None, "never looked: look");
        let looked = Instant::now();
        subscribers.record_anyone(false, looked);
        assert_eq!(subscribers.anyone(), Some(false));
        subscribers.record(&Principal::from("alice"), false, Instant::now());
        assert_eq!(subscribers.anyone(), Some(false), "alice has none either");
        subscribers.record(&Principal::from("bob"), true, Instant::now());
        subscribers.record_anyone(false, looked);
        assert_eq!(subscribers.anyone(), Some(true));
    }
}
