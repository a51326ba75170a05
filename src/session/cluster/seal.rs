//! Authentication of every message between the nodes of a cluster: the sender seals each
//! forwarded command, answer and published frame with an HMAC-SHA256 under the cluster secret
//! (over its kind, subject, sender, time, nonce, routing headers and payload), and a receiver
//! drops what fails the check, lies outside the replay window or was seen before, counting it
//! and logging it once per peer per minute.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::HeaderMap;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::metrics::Metrics;

/// Header: the name of the node that sent the message.
const FROM: &str = "Agentmux-From";
/// Header: when it was sent, in milliseconds since the Unix epoch.
const TIME: &str = "Agentmux-Time";
/// Header: a value the sender never uses twice.
const NONCE: &str = "Agentmux-Nonce";
/// Header: the HMAC-SHA256 of everything above and the payload, base64url.
const MAC: &str = "Agentmux-Mac";

/// How far a message's time may lie from the receiver's clock, either way: an older message
/// is refused, so that one captured on the bus can't be played again later. Node clocks must
/// agree to within this (NTP).
pub const WINDOW: Duration = Duration::from_secs(30);

/// The shortest cluster secret a node accepts, in bytes.
pub const MIN_SECRET_BYTES: usize = 32;

/// Nodes whose refused messages are logged apart; beyond, they share one line a minute.
const LOGGED_PEERS: usize = 256;

/// What a sealed message is; part of what its MAC covers, so that one kind can't pass as
/// another.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A command forwarded to the node that runs its conversation.
    Command,
    /// A node's answer to a forwarded command.
    Answer,
    /// A frame a node publishes for the others to relay.
    Frame,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Command => "command",
            Kind::Answer => "answer",
            Kind::Frame => "frame",
        }
    }
}

/// Why a message from the bus was refused: the label it is counted under in `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// It carries no seal, or a seal that can't be read.
    Unsealed,
    /// Its MAC is not the cluster secret's.
    Forged,
    /// Its time lies outside the replay window.
    Stale,
    /// It was received before.
    Replayed,
    /// It is authentic but its content is not what its kind must be.
    Malformed,
}

impl Refusal {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Unsealed => "unsealed",
            Refusal::Forged => "forged",
            Refusal::Stale => "stale",
            Refusal::Replayed => "replayed",
            Refusal::Malformed => "malformed",
        }
    }
}

/// A message that passed the check.
pub struct Opened {
    /// The node that sent it.
    pub from: String,
    /// Its nonce: what an answer to it is bound to.
    pub nonce: String,
}

/// This node's cluster secret and what it remembers of the messages it received.
pub struct Seal {
    key: Hmac<Sha256>,
    node: String,
    /// Random per start: with the counter, the nonce of each frame this node publishes.
    incarnation: String,
    published: AtomicU64,
    /// Nonces of the commands received within the window.
    seen: Mutex<SeenCommands>,
    /// The frames this node's subscriptions took, shared by them all.
    frames: Mutex<FrameLog>,
    /// When a refusal from each peer was last logged.
    logged: Mutex<HashMap<String, Instant>>,
    metrics: Metrics,
}

impl Seal {
    /// The seal of node `node` under `secret`.
    ///
    /// # Errors
    /// When the secret is shorter than [`MIN_SECRET_BYTES`].
    pub fn new(secret: &str, node: String, metrics: Metrics) -> anyhow::Result<Self> {
        if secret.len() < MIN_SECRET_BYTES {
            anyhow::bail!(
                "the cluster secret (cluster.secret or AGENTMUX_CLUSTER_SECRET) must be at least \
                 {MIN_SECRET_BYTES} bytes; every node of a cluster needs the same one (make one \
                 with `openssl rand -hex 32`)"
            );
        }
        let key = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
            .map_err(|e| anyhow::anyhow!("the cluster secret can't key an HMAC: {e}"))?;
        Ok(Seal {
            key,
            node,
            incarnation: uuid::Uuid::new_v4().simple().to_string(),
            published: AtomicU64::new(0),
            seen: Mutex::new(SeenCommands::default()),
            frames: Mutex::new(FrameLog::default()),
            logged: Mutex::new(HashMap::new()),
            metrics,
        })
    }

    /// Headers sealing a command sent on `subject`, and its nonce, which the answer must be
    /// bound to.
    pub fn command(&self, subject: &str, payload: &[u8]) -> (HeaderMap, String) {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let headers = self.seal(Kind::Command, subject, nonce.clone(), &[], payload);
        (headers, nonce)
    }

    /// Headers sealing the answer to the command whose nonce was `request`.
    pub fn answer(&self, request: &str, payload: &[u8]) -> HeaderMap {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        self.seal(Kind::Answer, request, nonce, &[], payload)
    }

    /// Headers sealing a frame published on `subject`, with its routing headers `extra`.
    pub fn frame(&self, subject: &str, extra: &[(&str, &str)], payload: &[u8]) -> HeaderMap {
        let n = self.published.fetch_add(1, Ordering::Relaxed);
        let nonce = format!("{}.{n}", self.incarnation);
        self.seal(Kind::Frame, subject, nonce, extra, payload)
    }

    fn seal(
        &self,
        kind: Kind,
        subject: &str,
        nonce: String,
        extra: &[(&str, &str)],
        payload: &[u8],
    ) -> HeaderMap {
        self.sealed_at(now_ms(), kind, subject, nonce, extra, payload)
    }

    fn sealed_at(
        &self,
        time: u64,
        kind: Kind,
        subject: &str,
        nonce: String,
        extra: &[(&str, &str)],
        payload: &[u8],
    ) -> HeaderMap {
        let time = time.to_string();
        let mut headers = HeaderMap::new();
        for (name, value) in extra {
            headers.insert(*name, *value);
        }
        let mut mac = self.key.clone();
        feed(
            &mut mac, kind, subject, &self.node, &time, &nonce, extra, payload,
        );
        let mac = mac.finalize().into_bytes();
        headers.insert(FROM, self.node.as_str());
        headers.insert(TIME, time.as_str());
        headers.insert(NONCE, nonce.as_str());
        headers.insert(MAC, URL_SAFE_NO_PAD.encode(mac).as_str());
        headers
    }

    /// Checks a received message of `kind` on `subject` (for an answer: the nonce of the
    /// command it answers), covering the routing headers named in `extra`. A command's nonce
    /// is remembered for the window, so that it runs once. A refusal is counted and logged.
    pub fn open(
        &self,
        kind: Kind,
        subject: &str,
        headers: Option<&HeaderMap>,
        extra: &[&str],
        payload: &[u8],
    ) -> Result<Opened, Refusal> {
        let header = |name: &str| {
            headers
                .and_then(|h| h.get(name))
                .map(|v| v.as_str().to_owned())
        };
        match self.check(kind, subject, &header, extra, payload) {
            Ok((from, nonce)) => Ok(Opened { from, nonce }),
            Err(refusal) => {
                self.refused(kind, refusal, header(FROM).as_deref());
                Err(refusal)
            }
        }
    }

    fn check(
        &self,
        kind: Kind,
        subject: &str,
        header: &dyn Fn(&str) -> Option<String>,
        extra: &[&str],
        payload: &[u8],
    ) -> Result<(String, String), Refusal> {
        let (Some(from), Some(time), Some(nonce), Some(mac)) =
            (header(FROM), header(TIME), header(NONCE), header(MAC))
        else {
            return Err(Refusal::Unsealed);
        };
        let mac = URL_SAFE_NO_PAD
            .decode(mac.as_bytes())
            .map_err(|_| Refusal::Unsealed)?;
        let values: Vec<String> = extra
            .iter()
            .map(|name| header(name).unwrap_or_default())
            .collect();
        let pairs: Vec<(&str, &str)> = extra
            .iter()
            .zip(&values)
            .filter(|(_, value)| !value.is_empty())
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        let mut expected = self.key.clone();
        feed(
            &mut expected,
            kind,
            subject,
            &from,
            &time,
            &nonce,
            &pairs,
            payload,
        );
        expected.verify_slice(&mac).map_err(|_| Refusal::Forged)?;
        let sent: u64 = time.parse().map_err(|_| Refusal::Malformed)?;
        let now = now_ms();
        let window = WINDOW.as_millis() as u64;
        if sent.abs_diff(now) > window {
            return Err(Refusal::Stale);
        }
        if let Kind::Command = kind {
            let mut seen = self.seen.lock().expect("seen lock");
            if !seen.insert(&nonce, sent + 2 * window, now) {
                return Err(Refusal::Replayed);
            }
        }
        Ok((from, nonce))
    }

    /// Counts a refused message and logs it, once a minute per sending node.
    pub fn refused(&self, kind: Kind, refusal: Refusal, from: Option<&str>) {
        self.metrics.cluster_refusal(refusal.label());
        let peer: String = from.unwrap_or("(no sender)").chars().take(128).collect();
        let mut logged = self.logged.lock().expect("log lock");
        let key = if logged.len() >= LOGGED_PEERS && !logged.contains_key(&peer) {
            "(other nodes)".to_owned()
        } else {
            peer
        };
        let now = Instant::now();
        let due = logged
            .get(&key)
            .is_none_or(|last| now.duration_since(*last) >= Duration::from_secs(60));
        if due {
            logged.insert(key.clone(), now);
            let why = match refusal {
                Refusal::Unsealed | Refusal::Forged => {
                    "not sealed with this node's cluster secret: another secret, or not from a node"
                }
                Refusal::Stale => "sent more than 30 s from this node's clock: check NTP",
                Refusal::Replayed => "received before: a copy played again",
                Refusal::Malformed => "sealed, but not what a node sends",
            };
            tracing::warn!(
                peer = %key,
                kind = kind.label(),
                reason = refusal.label(),
                "refused a message on the cluster bus ({why}); further ones from this peer are \
                 counted, not logged, for a minute"
            );
        }
    }
}

/// The nonces of the commands a node received, each kept until its command would be stale
/// (twice the window after it was sent), in the order they came: the oldest are dropped from
/// the front, so each command costs the same however many are kept.
#[derive(Default)]
struct SeenCommands {
    nonces: HashSet<String>,
    /// Each nonce with when it may be dropped (ms), in the order they came.
    expiry: VecDeque<(u64, String)>,
}

impl SeenCommands {
    /// Drops the nonces due by `now`, then keeps `nonce` until `expires`; false when it is
    /// kept already (a replay).
    fn insert(&mut self, nonce: &str, expires: u64, now: u64) -> bool {
        while let Some((due, _)) = self.expiry.front()
            && *due <= now
        {
            let (_, dropped) = self.expiry.pop_front().expect("a front");
            self.nonces.remove(&dropped);
        }
        if !self.nonces.insert(nonce.to_owned()) {
            return false;
        }
        self.expiry.push_back((expires, nonce.to_owned()));
        true
    }
}

/// What this node received of the frames published for each conversation: per subject and
/// sender's run (`<run>.<n>` nonces), the last `n` any of its subscriptions took, and when
/// (ms). A run nobody published on for twice the window is forgotten: a frame of it would be
/// stale by then, so the memory holds only the runs of the last minute or so.
#[derive(Default)]
pub struct FrameLog {
    runs: HashMap<String, HashMap<String, (u64, u64)>>,
    /// Each (subject, run) with when to look at it again, oldest first.
    expiry: VecDeque<(u64, String, String)>,
}

impl FrameLog {
    /// Forgets the runs nobody published on since `now` − twice the window.
    fn expire(&mut self, now: u64) {
        let keep = 2 * WINDOW.as_millis() as u64;
        while let Some((due, _, _)) = self.expiry.front()
            && *due <= now
        {
            let (_, subject, run) = self.expiry.pop_front().expect("a front");
            let Some(runs) = self.runs.get_mut(&subject) else {
                continue;
            };
            match runs.get(&run) {
                Some((_, at)) if at + keep > now => {
                    self.expiry.push_back((at + keep, subject, run));
                }
                _ => {
                    runs.remove(&run);
                    if runs.is_empty() {
                        self.runs.remove(&subject);
                    }
                }
            }
        }
    }
}

/// The order of the frames one subscription takes: a frame whose nonce does not follow the
/// last one of its sender's run, as this subscription or any other of this node (before it
/// began) took it, is a replay.
pub struct FrameOrder {
    subject: String,
    last: HashMap<String, u64>,
}

impl Seal {
    /// The order of a subscription to `subject` that begins now: it starts where this node's
    /// earlier subscriptions to it left off. Taken before subscribing, so that no frame this
    /// order refuses can be one published after the subscription began.
    pub fn frame_order(&self, subject: &str) -> FrameOrder {
        let mut log = self.frames.lock().expect("frame log lock");
        log.expire(now_ms());
        let last = log.runs.get(subject).map_or_else(HashMap::new, |runs| {
            runs.iter().map(|(run, (n, _))| (run.clone(), *n)).collect()
        });
        FrameOrder {
            subject: subject.to_owned(),
            last,
        }
    }

    /// Whether the frame with nonce `nonce` (opened) comes after every earlier one of its run
    /// in `order`; if so, it is this node's last of that run from now on.
    pub fn admit(&self, order: &mut FrameOrder, nonce: &str) -> bool {
        let Some((run, n)) = nonce.rsplit_once('.') else {
            return false;
        };
        let Ok(n) = n.parse::<u64>() else {
            return false;
        };
        if order.last.get(run).is_some_and(|last| n <= *last) {
            return false;
        }
        order.last.insert(run.to_owned(), n);
        let now = now_ms();
        let mut log = self.frames.lock().expect("frame log lock");
        log.expire(now);
        let runs = log.runs.entry(order.subject.clone()).or_default();
        match runs.get_mut(run) {
            Some((last, at)) => {
                *last = (*last).max(n);
                *at = now;
            }
            None => {
                runs.insert(run.to_owned(), (n, now));
                let due = now + 2 * WINDOW.as_millis() as u64;
                log.expiry
                    .push_back((due, order.subject.clone(), run.to_owned()));
            }
        }
        true
    }
}

/// Feeds the sealed fields, each with its length first, so no two messages feed the same.
#[allow(clippy::too_many_arguments)]
fn feed(
    mac: &mut Hmac<Sha256>,
    kind: Kind,
    subject: &str,
    from: &str,
    time: &str,
    nonce: &str,
    extra: &[(&str, &str)],
    payload: &[u8],
) {
    let mut field = |bytes: &[u8]| {
        mac.update(&(bytes.len() as u64).to_be_bytes());
        mac.update(bytes);
    };
    field(b"agentmux-cluster-1");
    field(kind.label().as_bytes());
    field(subject.as_bytes());
    field(from.as_bytes());
    field(time.as_bytes());
    field(nonce.as_bytes());
    for (name, value) in extra {
        field(name.as_bytes());
        field(value.as_bytes());
    }
    field(payload);
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn seal(secret: &str, node: &str) -> Seal {
        Seal::new(secret, node.to_owned(), Metrics::default()).unwrap()
    }

    #[test]
    fn a_sealed_command_opens_once() {
        let (a, b) = (seal(SECRET, "a"), seal(SECRET, "b"));
        let (headers, nonce) = a.command("s", b"payload");
        let opened = b.open(Kind::Command, "s", Some(&headers), &[], b"payload");
        let opened = opened.ok().unwrap();
        assert_eq!((opened.from.as_str(), opened.nonce), ("a", nonce));
        let again = b.open(Kind::Command, "s", Some(&headers), &[], b"payload");
        assert_eq!(again.err(), Some(Refusal::Replayed));
    }

    #[test]
    fn command_nonces_are_kept_until_their_command_would_be_stale() {
        let mut seen = SeenCommands::default();
        assert!(seen.insert("a", 100, 0));
        assert!(seen.insert("b", 300, 50));
        assert!(!seen.insert("a", 100, 60), "a live nonce again");
        // At 100 `a` is dropped (its command is stale by then) and `b` is still refused.
        assert!(seen.insert("c", 400, 100));
        assert!(!seen.nonces.contains("a") && seen.expiry.len() == 2);
        assert!(!seen.insert("b", 300, 100));
        assert!(
            seen.insert("a", 500, 100),
            "a dropped nonce is not remembered"
        );
        seen.insert("d", 600, 500);
        assert_eq!(seen.nonces.len(), 1, "all but the last dropped by 500");
    }

    #[test]
    fn anything_changed_or_missing_fails_the_check() {
        let (a, b) = (seal(SECRET, "a"), seal(SECRET, "b"));
        let open = |headers: &HeaderMap, subject: &str, payload: &[u8]| {
            b.open(Kind::Command, subject, Some(headers), &[], payload)
                .err()
        };
        let (headers, _) = a.command("s", b"payload");
        assert_eq!(open(&headers, "s", b"payloaD"), Some(Refusal::Forged));
        assert_eq!(open(&headers, "t", b"payload"), Some(Refusal::Forged));
        let mut renamed = headers.clone();
        renamed.insert(FROM, "c");
        assert_eq!(open(&renamed, "s", b"payload"), Some(Refusal::Forged));
        let mut unsigned = headers.clone();
        unsigned.insert(MAC, "");
        assert_eq!(open(&unsigned, "s", b"payload"), Some(Refusal::Forged));
        let other = seal("another secret of thirty-two bytes!", "a");
        let (forged, _) = other.command("s", b"payload");
        assert_eq!(open(&forged, "s", b"payload"), Some(Refusal::Forged));
        assert_eq!(
            open(&HeaderMap::new(), "s", b"payload"),
            Some(Refusal::Unsealed)
        );
        let none = b.open(Kind::Command, "s", None, &[], b"payload");
        assert_eq!(none.err(), Some(Refusal::Unsealed));
        // A frame's seal does not pass as a command's.
        let frame = a.frame("s", &[], b"payload");
        assert_eq!(open(&frame, "s", b"payload"), Some(Refusal::Forged));
    }

    #[test]
    fn routing_headers_are_covered() {
        let (a, b) = (seal(SECRET, "a"), seal(SECRET, "b"));
        let headers = a.frame("f", &[("T", "assistant"), ("S", "3")], b"{}");
        let open = |h: &HeaderMap| b.open(Kind::Frame, "f", Some(h), &["T", "S"], b"{}").err();
        assert_eq!(open(&headers), None);
        let mut moved = headers.clone();
        moved.insert("S", "4");
        assert_eq!(open(&moved), Some(Refusal::Forged));
        let unstored = a.frame("f", &[("T", "stream_event")], b"{}");
        assert_eq!(open(&unstored), None);
        let mut stored = unstored.clone();
        stored.insert("S", "1");
        assert_eq!(open(&stored), Some(Refusal::Forged));
    }

    #[test]
    fn a_message_outside_the_window_is_stale() {
        let (a, b) = (seal(SECRET, "a"), seal(SECRET, "b"));
        let window = WINDOW.as_millis() as u64;
        for time in [now_ms() - window - 1000, now_ms() + window + 1000] {
            let headers = a.sealed_at(time, Kind::Command, "s", "n".into(), &[], b"p");
            let opened = b.open(Kind::Command, "s", Some(&headers), &[], b"p");
            assert_eq!(opened.err(), Some(Refusal::Stale));
        }
    }

    #[test]
    fn an_answer_is_bound_to_its_command() {
        let (a, b) = (seal(SECRET, "a"), seal(SECRET, "b"));
        let (_, nonce) = a.command("s", b"ask");
        let answer = b.answer(&nonce, b"answer");
        assert!(
            a.open(Kind::Answer, &nonce, Some(&answer), &[], b"answer")
                .is_ok()
        );
        let (_, other) = a.command("s", b"ask");
        let opened = a.open(Kind::Answer, &other, Some(&answer), &[], b"answer");
        assert_eq!(opened.err(), Some(Refusal::Forged));
    }

    #[test]
    fn frames_of_a_run_pass_in_order_only() {
        let b = seal(SECRET, "b");
        let mut order = b.frame_order("f");
        assert!(b.admit(&mut order, "r1.0"));
        assert!(b.admit(&mut order, "r1.2"));
        assert!(!b.admit(&mut order, "r1.2"));
        assert!(!b.admit(&mut order, "r1.1"));
        assert!(b.admit(&mut order, "r2.0"));
        assert!(!b.admit(&mut order, "r1"));
        assert!(!b.admit(&mut order, "r1.x"));
    }

    #[test]
    fn a_later_subscription_starts_where_the_node_left_off() {
        let b = seal(SECRET, "b");
        let mut first = b.frame_order("f");
        assert!(b.admit(&mut first, "r1.3"));
        // One that begins meanwhile takes the frames published after it began, as the first.
        let mut second = b.frame_order("f");
        assert!(b.admit(&mut second, "r1.4"));
        assert!(b.admit(&mut first, "r1.4"));
        // One that begins later refuses what came before it, from any run.
        let mut third = b.frame_order("f");
        assert!(!b.admit(&mut third, "r1.3"));
        assert!(!b.admit(&mut third, "r1.4"));
        assert!(b.admit(&mut third, "r1.5"));
        // Another conversation's frames have an order of their own.
        let mut other = b.frame_order("g");
        assert!(b.admit(&mut other, "r1.0"));
    }

    #[test]
    fn runs_unheard_of_for_twice_the_window_are_forgotten() {
        let mut log = FrameLog::default();
        let keep = 2 * WINDOW.as_millis() as u64;
        let mut runs = HashMap::new();
        runs.insert("old".to_owned(), (5, 1_000));
        runs.insert("live".to_owned(), (9, 1_000 + keep));
        log.runs.insert("f".to_owned(), runs);
        log.expiry
            .push_back((1_000 + keep, "f".into(), "old".into()));
        log.expiry
            .push_back((1_000 + keep, "f".into(), "live".into()));
        log.expire(1_000 + keep);
        assert_eq!(log.runs["f"].keys().collect::<Vec<_>>(), ["live"]);
        assert_eq!(log.expiry.len(), 1, "the live run is looked at again later");
        log.expire(1_000 + 2 * keep);
        assert!(log.runs.is_empty() && log.expiry.is_empty());
    }

    #[test]
    fn a_short_secret_is_refused() {
        let err = Seal::new("short", "a".into(), Metrics::default())
            .err()
            .unwrap();
        assert!(err.to_string().contains("at least 32 bytes"), "{err}");
    }
}
