//! A cluster trusts only its nodes: a node refuses to route without the cluster secret, logs
//! in to NATS with a password, a token or an nkey, and runs no command and relays no frame
//! that is not sealed with the secret (forged, altered, stale or played again), while
//! commands and frames sealed as the docs describe pass.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::HeaderMap;
use base64::Engine as _;
use futures_util::StreamExt;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::cluster::{Cluster, LONG_LEASE_SECS, Nats, SECRET};
use crate::common::{
    Client, TestServer, WAIT, chat_ack, eventually, metric, reply_text, serve_output,
};

/// A secret of the right length that is not the cluster's.
const OTHER_SECRET: &str = "a secret of another cluster, 32 bytes or more";

/// Headers sealing a message as a node named `from` with `secret` seals it, following the
/// format `docs/cluster.md` gives: HMAC-SHA256 over each field with its length first.
#[allow(clippy::too_many_arguments)]
fn seal(
    secret: &str,
    kind: &str,
    subject: &str,
    from: &str,
    time_ms: u64,
    extra: &[(&str, &str)],
    payload: &[u8],
) -> (HeaderMap, String) {
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let headers = seal_with_nonce(secret, kind, subject, from, time_ms, &nonce, extra, payload);
    (headers, nonce)
}

/// [`seal`] with the nonce `nonce` (a frame's is `<run>.<counter>`).
#[allow(clippy::too_many_arguments)]
fn seal_with_nonce(
    secret: &str,
    kind: &str,
    subject: &str,
    from: &str,
    time_ms: u64,
    nonce: &str,
    extra: &[(&str, &str)],
    payload: &[u8],
) -> HeaderMap {
    let time = time_ms.to_string();
    let mut fields: Vec<&[u8]> = vec![
        kind.as_bytes(),
        subject.as_bytes(),
        from.as_bytes(),
        time.as_bytes(),
        nonce.as_bytes(),
    ];
    for (name, value) in extra {
        fields.extend([name.as_bytes(), value.as_bytes()]);
    }
    fields.push(payload);
    let mac = mac_of(secret, &fields);
    let mut headers = HeaderMap::new();
    for (name, value) in extra {
        headers.insert(*name, *value);
    }
    headers.insert("Agentmux-From", from);
    headers.insert("Agentmux-Time", time.as_str());
    headers.insert("Agentmux-Nonce", nonce);
    headers.insert("Agentmux-Mac", mac.as_str());
    headers
}

/// The base64url HMAC-SHA256 under `secret` of the format's tag and `fields`, each with its
/// length first.
fn mac_of(secret: &str, fields: &[&[u8]]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    for field in std::iter::once(&b"agentmux-cluster-1"[..]).chain(fields.iter().copied()) {
        mac.update(&(field.len() as u64).to_be_bytes());
        mac.update(field);
    }
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The subject node `node` takes commands on.
fn node_subject(node: &str) -> String {
    let hex: String = node.bytes().map(|b| format!("{b:02x}")).collect();
    format!("agentmux.node.{hex}")
}

/// Sends a command to `subject` with `headers` and returns the answer.
async fn ask(
    nats: &async_nats::Client,
    subject: &str,
    headers: HeaderMap,
    payload: &[u8],
) -> Value {
    let answer = nats
        .request_with_headers(subject.to_owned(), headers, payload.to_vec().into())
        .await
        .unwrap();
    serde_json::from_slice(&answer.payload).unwrap()
}

/// Waits until the metric `name` reads `n` on `server`.
async fn until_metric(server: &TestServer, name: &str, n: u64) {
    eventually(&format!("{name} reads {n}"), || async {
        (metric(server, name).await == n).then_some(())
    })
    .await;
}

/// The value of `agentmux_cluster_refused_messages_total` for `reason` on `server`.
async fn refused(server: &TestServer, reason: &str) -> u64 {
    metric(
        server,
        &format!("agentmux_cluster_refused_messages_total{{reason=\"{reason}\"}}"),
    )
    .await
}

/// Waits until `server` has refused at least `n` messages for `reason`; on timing out, says
/// how many it refused for each reason.
async fn until_refused(server: &TestServer, reason: &str, n: u64) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while refused(server, reason).await < n {
        if tokio::time::Instant::now() >= deadline {
            let mut counts = Vec::new();
            for other in ["unsealed", "forged", "stale", "replayed", "malformed"] {
                counts.push(format!("{other}: {}", refused(server, other).await));
            }
            panic!(
                "timed out: {n} refused as {reason}; refused {}",
                counts.join(", ")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The user prompts stored for `agent_id`, in order.
async fn prompts(cluster: &Cluster, agent_id: &str) -> Vec<String> {
    cluster
        .stored(agent_id)
        .await
        .into_iter()
        .filter(|(_, kind, _)| kind == "user")
        .map(|(_, _, payload)| {
            let payload: Value = serde_json::from_str(&payload).unwrap();
            payload["message"]["content"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| payload["message"]["content"][0]["text"].to_string())
        })
        .collect()
}

#[cfg_attr(
    any(no_test_pg, no_test_nats),
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL) and nats-server (AGENTMUX_TEST_NATS_BIN), not configured here"
)]
#[tokio::test]
async fn a_node_refuses_to_route_without_the_cluster_secret() {
    let Some(cluster) = Cluster::routed(LONG_LEASE_SECS).await else {
        return;
    };
    let nats = format!("--cluster-nats={}", cluster.nats.as_ref().unwrap().url());
    let args = ["--store-url", cluster.url.as_str(), nats.as_str()];
    for secret in [None, Some(""), Some("short-s3cret")] {
        let env: Vec<(&str, &str)> = secret
            .map(|s| ("AGENTMUX_CLUSTER_SECRET", s))
            .into_iter()
            .collect();
        let (listened, output) = serve_output(&args, &env).await;
        assert!(!listened, "{secret:?}: {output}");
        assert!(output.contains("AGENTMUX_CLUSTER_SECRET"), "{output}");
        assert!(output.contains("32 bytes"), "{output}");
        assert!(
            !output.contains("short-s3cret"),
            "the secret is shown: {output}"
        );
    }
}

#[cfg_attr(
    any(no_test_pg, no_test_nats),
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL) and nats-server (AGENTMUX_TEST_NATS_BIN), not configured here"
)]
#[tokio::test]
async fn commands_not_sealed_with_the_cluster_secret_run_nothing() {
    let Some(cluster) = Cluster::routed(LONG_LEASE_SECS).await else {
        return;
    };
    cluster.gates.open_all("x", 1..=2);
    let a = cluster.node("node-a").await;
    let b = cluster.node("node-b").await;
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    ca.chat("x", "one").await;
    ca.until_result("x").await;

    // Anyone with the NATS login, without the secret: asking node A to run a chat for the
    // conversation's principal is refused, whatever the seal looks like.
    let nats = cluster.nats.as_ref().unwrap().client().await;
    let subject = node_subject("node-a");
    let chat = json!({"principal": "local",
        "frame": {"type": "chat", "agent_id": "x", "content": "pwned"}})
    .to_string();
    let chat = chat.as_bytes();
    let sealed = |secret, time| seal(secret, "command", &subject, "node-b", time, &[], chat).0;
    let altered = seal(SECRET, "command", &subject, "node-b", now_ms(), &[], b"{}").0;
    let attempts = [
        (HeaderMap::new(), "unsealed"),
        (sealed(OTHER_SECRET, now_ms()), "forged"),
        (altered, "forged"),
        (sealed(SECRET, now_ms() - 60_000), "stale"),
    ];
    for (headers, reason) in attempts {
        let answer = ask(&nats, &subject, headers, chat).await;
        assert_eq!(answer["code"], "unauthorized", "{reason}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().contains(reason),
            "{answer}"
        );
    }

    // A command a node really sealed, seen on the bus and sent again, runs once.
    let mut sniffer = nats.subscribe(subject.clone()).await.unwrap();
    nats.flush().await.unwrap();
    let ack = chat_ack(&mut cb, "x", "two").await;
    assert_eq!(ack["message_type"], "ack", "{ack}");
    cb.until_result("x").await;
    let captured = tokio::time::timeout(Duration::from_secs(15), sniffer.next())
        .await
        .unwrap()
        .unwrap();
    let headers = captured.headers.clone().unwrap();
    let answer = ask(&nats, &subject, headers, &captured.payload).await;
    assert_eq!(answer["code"], "unauthorized", "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("replayed"));

    assert_eq!(prompts(&cluster, "x").await, ["one", "two"]);
    for (reason, n) in [
        ("unsealed", 1),
        ("forged", 2),
        ("stale", 1),
        ("replayed", 1),
    ] {
        assert_eq!(refused(&a, reason).await, n, "{reason}");
    }

    // A node given another secret is told, at once, that its command was refused.
    let other = [("AGENTMUX_CLUSTER_SECRET", OTHER_SECRET)];
    let c = cluster.node_with("node-c", &[], &other).await;
    let mut cc = c.client().await;
    let answer = chat_ack(&mut cc, "x", "three").await;
    assert_eq!(answer["code"], "backend_unavailable", "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("authentication"),
        "{answer}"
    );
    assert_eq!(prompts(&cluster, "x").await, ["one", "two"]);
}

#[cfg_attr(
    any(no_test_pg, no_test_nats),
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL) and nats-server (AGENTMUX_TEST_NATS_BIN), not configured here"
)]
#[tokio::test]
async fn a_node_answers_sealed_malformed_commands_with_typed_errors() {
    let Some(cluster) = Cluster::routed(LONG_LEASE_SECS).await else {
        return;
    };
    let a = cluster.node("node-a").await;
    let nats = cluster.nats.as_ref().unwrap().client().await;
    let subject = node_subject("node-a");
    let chat_x = json!({"type": "chat", "agent_id": "x", "content": "hi"});
    let marked = |payload: &str| {
        json!({"principal": "local", "frame": chat_x, "marker": {"payload": payload}})
            .to_string()
            .into_bytes()
    };
    let cases = [
        (b"not json".to_vec(), "bad_frame"),
        (
            br#"{"principal":"local","frame":{"type":"ping"}}"#.to_vec(),
            "bad_frame",
        ),
        (
            br#"{"principal":"local","frame":{"type":"chat","agent_id":"../x","content":"hi"}}"#
                .to_vec(),
            "invalid_agent_id",
        ),
        (
            br#"{"principal":"local","frame":{"type":"interrupt","agent_id":"nobody"}}"#.to_vec(),
            "unknown_agent",
        ),
        (marked("not json"), "bad_frame"),
        (marked(r#"{"status":"scheduled",}"#), "bad_frame"),
        (marked("[]"), "bad_frame"),
        (
            json!({"principal": "", "frame": chat_x})
                .to_string()
                .into_bytes(),
            "bad_frame",
        ),
    ];
    for (payload, code) in cases {
        let headers = seal(
            SECRET,
            "command",
            &subject,
            "node-b",
            now_ms(),
            &[],
            &payload,
        )
        .0;
        let answer = ask(&nats, &subject, headers, &payload).await;
        assert_eq!(answer["answer"], "error", "{answer}");
        assert_eq!(answer["code"], code, "{answer}");
    }
    assert!(cluster.stored("x").await.is_empty(), "nothing was stored");

    // A well-formed command sealed with the secret runs, and its answer is sealed too.
    cluster.gates.open("x", 1);
    let payload = marked(r#"{"status":"scheduled","detail":"a run"}"#);
    let (headers, nonce) = seal(
        SECRET,
        "command",
        &subject,
        "node-b",
        now_ms(),
        &[],
        &payload,
    );
    let answer = nats
        .request_with_headers(subject.clone(), headers, payload.into())
        .await
        .unwrap();
    let answered: Value = serde_json::from_slice(&answer.payload).unwrap();
    assert_eq!(answered["answer"], "chat", "{answered}");
    let h = answer.headers.unwrap();
    assert_eq!(h.get("Agentmux-From").unwrap().as_str(), "node-a");
    let time: u64 = h.get("Agentmux-Time").unwrap().as_str().parse().unwrap();
    // The answer's MAC is over the command's nonce as its subject.
    let answer_nonce = h.get("Agentmux-Nonce").unwrap().as_str();
    let resealed = mac_of(
        SECRET,
        &[
            b"answer",
            nonce.as_bytes(),
            b"node-a",
            time.to_string().as_bytes(),
            answer_nonce.as_bytes(),
            &answer.payload,
        ],
    );
    assert_eq!(h.get("Agentmux-Mac").unwrap().as_str(), resealed);
    let mut ca = a.client().await;
    ca.send(json!({"type": "subscribe", "agent_id": "x", "since_seq": 0}))
        .await;
    let frames = ca.until_result("x").await;
    assert_eq!(reply_text(&frames), "Echo: hi (turn 1)");
    assert_eq!(frames[0]["message_type"], "status", "the marker first");
}

/// The subject the frames of conversation `agent_id` are published on.
async fn frames_subject(cluster: &Cluster, agent_id: &str) -> String {
    let pool = sqlx::PgPool::connect(&cluster.url).await.unwrap();
    let (row,): (i64,) = sqlx::query_as("select id from session_info where agent_id = $1")
        .bind(agent_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    format!("agentmux.frames.{row}")
}

/// Two nodes, `x` run by A and followed on B, with the frames A published of turn two as
/// they were seen on the bus.
struct Relayed {
    /// Node A, kept running.
    _a: TestServer,
    b: TestServer,
    ca: Client,
    cb: Client,
    nats: async_nats::Client,
    /// The subject A publishes `x`'s frames on.
    subject: String,
    session_id: String,
    /// The last `seq` of turn two.
    last_seq: i64,
    captured: Vec<async_nats::Message>,
}

impl Relayed {
    async fn start(cluster: &Cluster) -> Relayed {
        cluster.gates.open_all("x", 1..=3);
        let a = cluster.node("node-a").await;
        let b = cluster.node("node-b").await;
        let (mut ca, mut cb) = (a.client().await, b.client().await);
        ca.chat("x", "one").await;
        let first = ca.until_result("x").await;
        let session_id = first[0]["session_id"].as_str().unwrap().to_owned();
        let subject = frames_subject(cluster, "x").await;
        let nats = cluster.nats.as_ref().unwrap().client().await;
        let mut sniffer = nats.subscribe(subject.clone()).await.unwrap();
        nats.flush().await.unwrap();
        cb.send(json!({"type": "subscribe", "agent_id": "x", "since_seq": 0}))
            .await;
        cb.until_result("x").await;

        // Turn two's frames, as node A published them, are seen on the bus.
        ca.chat("x", "two").await;
        ca.until_result("x").await;
        let seen_on_b = cb.until_result("x").await;
        let last_seq = seen_on_b
            .iter()
            .filter_map(|f| f["seq"].as_i64())
            .max()
            .unwrap();
        // Node A's frames only: B's own (who views `x` through it) are not B's to refuse.
        let mut captured = Vec::new();
        while let Ok(Some(msg)) = tokio::time::timeout(Duration::from_secs(2), sniffer.next()).await
        {
            let from = msg.headers.as_ref().and_then(|h| h.get("Agentmux-From"));
            if from.map(|v| v.as_str()) == Some("node-a") {
                captured.push(msg);
            }
        }
        assert!(
            captured.iter().any(|m| m
                .headers
                .as_ref()
                .unwrap()
                .get("Agentmux-Type")
                .unwrap()
                .as_str()
                == "result"),
            "the turn's result was published"
        );
        Relayed {
            _a: a,
            b,
            ca,
            cb,
            nats,
            subject,
            session_id,
            last_seq,
            captured,
        }
    }

    /// Publishes the captured frames again, as they were.
    async fn play_again(&self) {
        for msg in &self.captured {
            self.nats
                .publish_with_headers(
                    self.subject.clone(),
                    msg.headers.clone().unwrap(),
                    msg.payload.clone(),
                )
                .await
                .unwrap();
        }
        self.nats.flush().await.unwrap();
    }

    /// Runs turn three on A and checks that B's follower gets it and nothing older.
    async fn third_turn_alone(&mut self) {
        self.ca.chat("x", "three").await;
        self.ca.until_result("x").await;
        let third = self.cb.until_result("x").await;
        assert_eq!(reply_text(&third), "Echo: three (turn 3)");
        for frame in &third {
            let text = frame.to_string();
            assert!(!text.contains("FORGED") && !text.contains("two"), "{text}");
            if let Some(seq) = frame["seq"].as_i64() {
                assert!(seq > self.last_seq, "an old frame again: {text}");
            }
        }
    }
}

#[cfg_attr(
    any(no_test_pg, no_test_nats),
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL) and nats-server (AGENTMUX_TEST_NATS_BIN), not configured here"
)]
#[tokio::test]
async fn frames_not_sealed_by_a_node_never_reach_followers() {
    let Some(cluster) = Cluster::routed(LONG_LEASE_SECS).await else {
        return;
    };
    let mut relayed = Relayed::start(&cluster).await;
    let Relayed {
        nats,
        subject,
        last_seq,
        ..
    } = &relayed;

    // Played again, they are refused; so are frames made up without the secret.
    relayed.play_again().await;
    let forged = json!({"message_type": "assistant", "agent_id": "x",
        "session_id": relayed.session_id, "seq": last_seq + 1,
        "timestamp": "2026-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "FORGED"}]}})
    .to_string();
    let seq = (last_seq + 1).to_string();
    let routing = [
        ("Agentmux-Type", "assistant"),
        ("Agentmux-Seq", seq.as_str()),
    ];
    let mut unsealed = HeaderMap::new();
    for (name, value) in routing {
        unsealed.insert(name, value);
    }
    let other = seal(
        OTHER_SECRET,
        "frame",
        subject,
        "node-a",
        now_ms(),
        &routing,
        forged.as_bytes(),
    )
    .0;
    for headers in [unsealed, other] {
        nats.publish_with_headers(subject.clone(), headers, forged.clone().into())
            .await
            .unwrap();
    }
    nats.flush().await.unwrap();
    let b = &relayed.b;
    until_refused(b, "replayed", relayed.captured.len() as u64).await;
    until_refused(b, "unsealed", 1).await;
    until_refused(b, "forged", 1).await;

    // B's follower gets turn three and nothing of the above.
    relayed.third_turn_alone().await;
}

#[cfg_attr(
    any(no_test_pg, no_test_nats),
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL) and nats-server (AGENTMUX_TEST_NATS_BIN), not configured here"
)]
#[tokio::test]
async fn frames_played_again_are_refused_by_a_later_subscription_too() {
    let Some(cluster) = Cluster::routed(LONG_LEASE_SECS).await else {
        return;
    };
    let mut relayed = Relayed::start(&cluster).await;

    // B's follower leaves and B forgets the conversation (a refused chat drops its idle
    // slot, and with it the subscription to A's frames); a new follower subscribes anew.
    let Relayed {
        b, cb, last_seq, ..
    } = &mut relayed;
    cb.ws.close(None).await.unwrap();
    until_metric(b, "agentmux_sockets", 0).await;
    *cb = b.client().await;
    cb.send(json!({"type": "chat", "agent_id": "x", "content": "hi",
        "options": {"agent": "another"}}))
        .await;
    let refused_chat = cb.recv().await;
    assert_eq!(refused_chat["code"], "invalid_options", "{refused_chat}");
    until_metric(b, "agentmux_session_slots", 0).await;
    let since = *last_seq - 1;
    cb.send(json!({"type": "subscribe", "agent_id": "x", "since_seq": since}))
        .await;
    cb.until_result("x").await;

    // Turn two's frames, played again into the new subscription, are refused as replays.
    relayed.play_again().await;
    until_refused(&relayed.b, "replayed", relayed.captured.len() as u64).await;
    relayed.third_turn_alone().await;
}
#[cfg_attr(
    any(no_test_pg, no_test_nats),
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL) and nats-server (AGENTMUX_TEST_NATS_BIN), not configured here"
)]
#[tokio::test]
async fn a_gap_of_several_pages_is_filled_from_the_store_whole_and_in_order() {
    // Pages of one frame each: any gap of two frames or more takes several.
    let Some(mut cluster) = Cluster::configured(LONG_LEASE_SECS, "[session]\npage_bytes = 1").await
    else {
        return;
    };
    let Some(nats) = Nats::start().await else {
        return;
    };
    cluster.nats = Some(nats);
    cluster.gates.open_all("x", 1..=2);
    // C runs `x` but seals with another secret: B relays none of its frames, so the test's
    // sealed copies of two of them are all B takes, with a gap between them.
    let c = cluster
        .node_with("node-c", &[], &[("AGENTMUX_CLUSTER_SECRET", OTHER_SECRET)])
        .await;
    let b = cluster.node("node-b").await;
    let (mut cc, mut cb) = (c.client().await, b.client().await);
    cc.chat("x", "one").await;
    let first = cc.until_result("x").await;
    cb.send(json!({"type": "subscribe", "agent_id": "x", "since_seq": 0}))
        .await;
    cb.until_result("x").await;
    let subject = frames_subject(&cluster, "x").await;
    let nats = cluster.nats.as_ref().unwrap().client().await;
    let publish_copy = |frames: Vec<Value>, n: u64| {
        let (nats, subject) = (nats.clone(), subject.clone());
        async move {
            let last = frames.iter().rfind(|f| f["seq"].is_i64()).unwrap().clone();
            let (kind, seq) = (
                last["message_type"].as_str().unwrap(),
                last["seq"].to_string(),
            );
            let routing = [("Agentmux-Type", kind), ("Agentmux-Seq", seq.as_str())];
            let payload = last.to_string();
            let nonce = format!("copy.{n}");
            let headers = seal_with_nonce(
                SECRET,
                "frame",
                &subject,
                "node-c",
                now_ms(),
                &nonce,
                &routing,
                payload.as_bytes(),
            );
            nats.publish_with_headers(subject, headers, payload.into())
                .await
                .unwrap();
            nats.flush().await.unwrap();
            last["seq"].as_i64().unwrap()
        }
    };
    let before = publish_copy(first, 0).await;
    until_metric(&b, "agentmux_relayed_frames_total", 1).await;

    // Turn two reaches B only as a copy of its last frame: the rest is read from the store.
    cc.chat("x", "two").await;
    let second = cc.until_result("x").await;
    let stored_second: Vec<Value> = second
        .iter()
        .filter(|f| f["seq"].is_i64() && f["message_type"] != "ack")
        .cloned()
        .collect();
    let end = publish_copy(second, 1).await;
    assert!(end - before > 2, "a gap of several frames");
    let relayed = cb.until_result("x").await;
    assert_eq!(relayed, stored_second);
    let seqs: Vec<i64> = relayed.iter().map(|f| f["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, ((before + 1)..=end).collect::<Vec<_>>());
    assert_eq!(reply_text(&relayed), "Echo: two (turn 2)");
}

#[cfg_attr(
    any(no_test_pg, no_test_nats),
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL) and nats-server (AGENTMUX_TEST_NATS_BIN), not configured here"
)]
#[tokio::test]
async fn nodes_log_in_to_nats_with_a_token_or_an_nkey() {
    const TOKEN: &str = "t0ken-for-nats";
    let Some(nats) = Nats::start_with(vec!["--auth".into(), TOKEN.into()]).await else {
        return;
    };
    let port = nats.bare_url().rsplit(':').next().unwrap().to_owned();
    let with_token = format!("--cluster-nats=nats://{TOKEN}@127.0.0.1:{port}");
    let Some(cluster) = Cluster::configured(LONG_LEASE_SECS, "").await else {
        return;
    };
    routes_a_chat(&cluster, &[&with_token]).await;
    // A wrong token: refused, and neither token shown.
    let wrong = format!("--cluster-nats=nats://wrong-{TOKEN}@127.0.0.1:{port}");
    let args = ["--store-url", cluster.url.as_str(), wrong.as_str()];
    let (listened, output) = serve_output(&args, &[("AGENTMUX_CLUSTER_SECRET", SECRET)]).await;
    assert!(!listened, "{output}");
    assert!(output.contains("cannot connect to NATS"), "{output}");
    assert!(!output.contains(TOKEN), "{output}");

    // An nkey: the server knows the public key, the nodes read the seed from a file.
    let user = nkeys::KeyPair::new_user();
    let dir = tempfile::tempdir().unwrap();
    let (conf, seed) = (dir.path().join("nats.conf"), dir.path().join("node.nk"));
    std::fs::write(
        &conf,
        format!(
            "authorization {{ users = [ {{ nkey: \"{}\" }} ] }}\n",
            user.public_key()
        ),
    )
    .unwrap();
    std::fs::write(&seed, user.seed().unwrap()).unwrap();
    let conf = conf.to_string_lossy().into_owned();
    let Some(nats) = Nats::start_with(vec!["-c".into(), conf]).await else {
        return;
    };
    let nkey = format!(
        "nats_nkey_file = {}",
        crate::common::toml_string(&seed.to_string_lossy())
    );
    let Some(cluster) = Cluster::configured(LONG_LEASE_SECS, &nkey).await else {
        return;
    };
    let bare = format!("--cluster-nats={}", nats.bare_url());
    routes_a_chat(&cluster, &[&bare]).await;
}

/// Two nodes started with `extra` arguments route a chat sent through the one that does not
/// run its conversation.
async fn routes_a_chat(cluster: &Cluster, extra: &[&str]) {
    cluster.gates.open_all("x", 1..=2);
    let env = [("AGENTMUX_CLUSTER_SECRET", SECRET)];
    let a = cluster.node_with("node-a", extra, &env).await;
    let b = cluster.node_with("node-b", extra, &env).await;
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    ca.chat("x", "one").await;
    ca.until_result("x").await;
    let ack = chat_ack(&mut cb, "x", "two").await;
    assert_eq!(ack["message_type"], "ack", "{ack}");
    assert_eq!(
        reply_text(&cb.until_result("x").await),
        "Echo: two (turn 2)"
    );
}
