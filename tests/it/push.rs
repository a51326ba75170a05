//! Web Push against a fake push service on loopback (allowed by `push.allow_insecure_endpoints`):
//! the test holds each subscription's private key and auth secret, checks every push's VAPID
//! token against `GET /api/push/key`, decrypts its payload and checks its fields. Nothing is
//! pushed about a conversation a page shows, nor to another principal; 410 deletes the
//! subscription, 429 is retried; a notification's token allows a tool once. Subscriptions of
//! another principal, refused endpoints, bad keys and oversized bodies are refused.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use p256::elliptic_curve::rand_core::OsRng;
use p256::elliptic_curve::sec1::ToEncodedPoint as _;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::claude::Fixture;
use crate::common::*;
use crate::repos::rest;
use crate::rest::Rest;
use crate::security::{TOKENS, connect_as};

/// One push as the fake service received it.
struct Received {
    device: String,
    headers: HeaderMap,
    body: Bytes,
}

/// An answer of the fake service: a status and maybe a `Retry-After`.
type Answer = (u16, Option<&'static str>);

/// Scripted answers per device (201 once the script is used up) and what arrived.
#[derive(Clone)]
struct Script {
    answers: Arc<Mutex<HashMap<String, VecDeque<Answer>>>>,
    received: mpsc::UnboundedSender<Received>,
}

/// A push service on loopback.
struct FakeService {
    base: String,
    script: Script,
    received: mpsc::UnboundedReceiver<Received>,
}

impl FakeService {
    async fn start() -> Self {
        let (tx, received) = mpsc::unbounded_channel();
        let script = Script {
            answers: Arc::default(),
            received: tx,
        };
        let app = axum::Router::new()
            .route("/push/{device}", axum::routing::post(receive))
            .with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        FakeService {
            base,
            script,
            received,
        }
    }

    /// The next answers to `device`: a status and maybe a `Retry-After`.
    fn answer(&self, device: &str, answers: &[Answer]) {
        self.script
            .answers
            .lock()
            .unwrap()
            .entry(device.to_owned())
            .or_default()
            .extend(answers.iter().copied());
    }

    async fn next(&mut self) -> Received {
        tokio::time::timeout(WAIT, self.received.recv())
            .await
            .expect("a push in time")
            .unwrap()
    }

    /// Whatever arrived and was not taken yet.
    fn pending(&mut self) -> Vec<String> {
        let mut devices = Vec::new();
        while let Ok(r) = self.received.try_recv() {
            devices.push(r.device);
        }
        devices
    }
}

async fn receive(
    State(script): State<Script>,
    Path(device): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, HeaderMap) {
    let answer = script
        .answers
        .lock()
        .unwrap()
        .get_mut(&device)
        .and_then(VecDeque::pop_front);
    let _ = script.received.send(Received {
        device,
        headers,
        body,
    });
    let (status, retry_after) = answer.unwrap_or((201, None));
    let mut out = HeaderMap::new();
    if let Some(secs) = retry_after {
        out.insert("retry-after", secs.parse().unwrap());
    }
    (StatusCode::from_u16(status).unwrap(), out)
}

/// A browser's side of a subscription: its keys, held by the test.
struct Device {
    name: String,
    secret: p256::SecretKey,
    auth: [u8; 16],
}

impl Device {
    fn new(name: &str) -> Self {
        Device {
            name: name.to_owned(),
            secret: p256::SecretKey::random(&mut OsRng),
            auth: *b"sixteen-byte-key",
        }
    }

    /// The `PushSubscription` JSON a browser would post for `service`'s endpoint.
    fn subscription(&self, service: &FakeService) -> Value {
        self.subscription_at(&format!("{}/push/{}", service.base, self.name))
    }

    fn subscription_at(&self, endpoint: &str) -> Value {
        let public = self.secret.public_key().to_encoded_point(false);
        json!({
            "endpoint": endpoint,
            "expirationTime": null,
            "keys": {"p256dh": B64.encode(public.as_bytes()), "auth": B64.encode(self.auth)},
        })
    }

    /// Checks a push's headers and VAPID token (against the server's public key), and
    /// decrypts its payload.
    fn open(&self, push: &Received, service: &FakeService, server_key: &str) -> Value {
        assert_eq!(push.device, self.name);
        assert_eq!(push.headers["content-encoding"], "aes128gcm");
        assert!(push.headers.contains_key("ttl"));
        let authorization = push.headers["authorization"].to_str().unwrap();
        let (token, key) = authorization
            .strip_prefix("vapid t=")
            .and_then(|rest| rest.split_once(", k="))
            .expect("a VAPID authorization");
        assert_eq!(key, server_key, "signed with the server's key");
        let point = B64.decode(key).unwrap();
        let decoding = jsonwebtoken::DecodingKey::from_ec_components(
            &B64.encode(&point[1..33]),
            &B64.encode(&point[33..]),
        )
        .unwrap();
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
        validation.set_audience(&[&service.base]);
        let claims = jsonwebtoken::decode::<Value>(token, &decoding, &validation)
            .expect("a valid VAPID token for the service's origin")
            .claims;
        assert!(claims["sub"].as_str().unwrap().starts_with("mailto:"));
        assert!(push.body.len() <= 4096, "within the push services' limit");
        let auth = web_push_native::Auth::clone_from_slice(&self.auth);
        let plain = web_push_native::decrypt(push.body.to_vec(), &self.secret, &auth)
            .expect("the payload decrypts with the subscription's keys");
        serde_json::from_slice(&plain).unwrap()
    }
}

const PUSH: &str = "[push]\nallow_insecure_endpoints = true\nmax_subscriptions_per_principal = 3\n";

/// A server on the fake Claude CLI with alice and bob, and their REST clients.
async fn start() -> (Fixture, TestServer, Rest, Rest, String) {
    let fx = Fixture::new(&format!(
        "{TOKENS}{PUSH}[session]\npermission_timeout_secs = 3600\n"
    ));
    let server = fx.start(&[]).await;
    let alice = Rest::with_token(&server, "tok-alice");
    let bob = Rest::with_token(&server, "tok-bob");
    let (status, key) = alice.get("/api/push/key").await;
    assert_eq!(status, 200, "{key}");
    let key = key["public_key"].as_str().unwrap().to_owned();
    (fx, server, alice, bob, key)
}

/// Waits until `agentmux_pushes_total{outcome}` is `n` (it is counted once the service has
/// answered, a moment after the push arrived there).
async fn counted(server: &TestServer, outcome: &str, n: u64) {
    let name = format!("agentmux_pushes_total{{outcome=\"{outcome}\"}}");
    eventually(&format!("{n} pushes {outcome}"), || async {
        (metric(server, &name).await == n).then_some(())
    })
    .await;
}

async fn subscribe(rest: &Rest, device: &Device, service: &FakeService) -> String {
    let (status, sub) = rest
        .post("/api/push/subscriptions", device.subscription(service))
        .await;
    assert_eq!(status, 201, "{sub}");
    sub["id"].as_str().unwrap().to_owned()
}

/// A waiting tool rings the phone: the push names the conversation and the tool; its token
/// allows the tool once (the tool runs), and the same token again, an altered one or a made-up
/// one changes nothing. The turn's end is pushed too, with the start of the reply, and its
/// Reply sends a turn; Deny denies the next tool.
#[tokio::test]
async fn a_waiting_tool_is_pushed_and_allowed_once_from_the_notification() {
    let (_fx, server, alice, _bob, key) = start().await;
    let mut service = FakeService::start().await;
    let phone = Device::new("phone");
    subscribe(&alice, &phone, &service).await;

    let mut socket = connect_as(&server.addr, "tok-alice").await;
    chat_ack(&mut socket, "fix", "please run TOOL:touch_x").await;
    socket
        .recv_until(|f| f["message_type"] == "permission_request")
        .await;
    let push = phone.open(&service.next().await, &service, &key);
    assert_eq!(push["kind"], "permission");
    assert_eq!(push["agent_id"], "fix");
    assert_eq!(push["title"], "please run TOOL:touch_x");
    assert!(push["body"].as_str().unwrap().contains("touch_x"), "{push}");
    let token = push["token"].as_str().unwrap().to_owned();
    assert_eq!(token.len(), 43);

    let anyone = Rest::new(&server);
    let act = |token: &str, action: &str| json!({"token": token, "action": action});
    let mut altered = token.clone().into_bytes();
    altered[10] = if altered[10] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    for forged in [altered.as_str(), "x", &B64.encode([7u8; 32])] {
        let (status, body) = anyone.post("/api/push/actions", act(forged, "allow")).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("forbidden")),
            "{body}"
        );
    }
    let (status, body) = anyone.post("/api/push/actions", act(&token, "allow")).await;
    assert_eq!(status, 204, "{body}");
    let frames = socket.until_result("fix").await;
    assert_eq!(reply_text(&frames), "Tool said: ran: touch_x");
    let (status, body) = anyone.post("/api/push/actions", act(&token, "deny")).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("forbidden")),
        "used once"
    );

    let ended = phone.open(&service.next().await, &service, &key);
    assert_eq!(ended["kind"], "turn");
    assert_eq!(ended["body"], "Tool said: ran: touch_x");

    // Reply from the turn's notification: its token sends the text as the next turn, once.
    let reply = json!({"token": ended["token"], "action": "reply", "text": "thanks"});
    assert_eq!(anyone.post("/api/push/actions", reply.clone()).await.0, 204);
    let frames = socket.until_result("fix").await;
    assert!(
        frames.iter().any(|f| f["message_type"] == "user"),
        "the reply ran as a turn: {frames:?}"
    );
    assert_eq!(anyone.post("/api/push/actions", reply).await.0, 403);
    let answered = phone.open(&service.next().await, &service, &key);
    assert_eq!(
        (&answered["kind"], &answered["agent_id"]),
        (&json!("turn"), &json!("fix"))
    );

    // Deny, the other button.
    chat_ack(&mut socket, "fix", "please run TOOL:touch_z").await;
    let asked = phone.open(&service.next().await, &service, &key);
    let deny = json!({"token": asked["token"], "action": "deny"});
    assert_eq!(anyone.post("/api/push/actions", deny).await.0, 204);
    let frames = socket.until_result("fix").await;
    assert_eq!(reply_text(&frames), "Tool said: Denied from a notification");
    assert_eq!(
        phone.open(&service.next().await, &service, &key)["kind"],
        "turn"
    );
    counted(&server, "sent", 5).await;
}

/// A conversation that a visible page of its principal shows is pushed nothing; once the page
/// is hidden it is. Another principal's turns never reach alice's device.
#[tokio::test]
async fn nothing_is_pushed_about_a_conversation_in_view_or_to_another_principal() {
    let (_fx, server, alice, bob, key) = start().await;
    let mut service = FakeService::start().await;
    let phone = Device::new("alice-phone");
    let bobs = Device::new("bob-phone");
    subscribe(&alice, &phone, &service).await;
    subscribe(&bob, &bobs, &service).await;

    let mut laptop = connect_as(&server.addr, "tok-alice").await;
    laptop
        .send(json!({"type": "presence", "visible": true, "agent_id": "seen"}))
        .await;
    assert_eq!(laptop.before_pong().await, Vec::<Value>::new());
    chat_ack(&mut laptop, "seen", "hello").await;
    laptop.until_result("seen").await;
    let mut bob_socket = connect_as(&server.addr, "tok-bob").await;
    chat_ack(&mut bob_socket, "bobs", "hello").await;
    bob_socket.until_result("bobs").await;
    chat_ack(&mut laptop, "elsewhere", "hi").await;
    laptop.until_result("elsewhere").await;

    let first = service.next().await;
    let second = service.next().await;
    let mut by_device: HashMap<String, Value> = HashMap::new();
    for push in [first, second] {
        let device = if push.device == phone.name {
            &phone
        } else {
            &bobs
        };
        by_device.insert(push.device.clone(), device.open(&push, &service, &key));
    }
    assert_eq!(by_device["alice-phone"]["agent_id"], "elsewhere");
    assert_eq!(by_device["bob-phone"]["agent_id"], "bobs");

    // Hidden: the same conversation is pushed.
    laptop
        .send(json!({"type": "presence", "visible": false, "agent_id": "seen"}))
        .await;
    let handled = laptop.before_pong().await;
    assert!(
        handled.iter().all(|f| f["message_type"] != "error"),
        "{handled:?}"
    );
    chat_ack(&mut laptop, "seen", "again").await;
    laptop.until_result("seen").await;
    let push = phone.open(&service.next().await, &service, &key);
    assert_eq!(push["agent_id"], "seen");
    counted(&server, "sent", 3).await;
    assert_eq!(
        service.pending(),
        Vec::<String>::new(),
        "nothing else was sent"
    );

    // A bad presence frame gets a typed error.
    laptop
        .send(json!({"type": "presence", "visible": "yes"}))
        .await;
    let error = laptop
        .recv_until(|f| f["message_type"] == "error")
        .await
        .pop()
        .unwrap();
    assert_eq!(error["code"], "bad_frame");
}

/// 429 is retried (after the `Retry-After` the service asks); 410 deletes the subscription.
#[tokio::test]
async fn a_busy_service_is_retried_and_a_gone_subscription_deleted() {
    let (_fx, server, alice, _bob, key) = start().await;
    let mut service = FakeService::start().await;
    let phone = Device::new("phone");
    let old = Device::new("old");
    subscribe(&alice, &phone, &service).await;
    subscribe(&alice, &old, &service).await;
    service.answer("phone", &[(429, Some("0")), (503, Some("0"))]);
    service.answer("old", &[(410, None)]);

    let mut socket = connect_as(&server.addr, "tok-alice").await;
    chat_ack(&mut socket, "job", "hello").await;
    socket.until_result("job").await;
    let mut to_phone = Vec::new();
    let mut to_old = 0;
    while to_phone.len() < 3 {
        let push = service.next().await;
        match push.device.as_str() {
            "phone" => to_phone.push(phone.open(&push, &service, &key)),
            _ => to_old += 1,
        }
    }
    assert!(to_phone.iter().all(|p| p["agent_id"] == "job"));
    eventually("the gone subscription is deleted", || async {
        let (_, list) = alice.get("/api/push/subscriptions").await;
        (list["subscriptions"].as_array().unwrap().len() == 1).then_some(())
    })
    .await;
    assert!(to_old <= 1, "410 is not retried");
    counted(&server, "gone", 1).await;
    counted(&server, "sent", 1).await;
}

/// Subscriptions are each principal's own: listed without endpoint paths or keys, deleted by
/// their owner only, capped in number; bad keys, bad events and oversized bodies are refused.
#[tokio::test]
async fn subscriptions_are_private_capped_and_checked() {
    let (_fx, server, alice, bob, _key) = start().await;
    let service = FakeService::start().await;
    let phone = Device::new("phone");
    let id = subscribe(&alice, &phone, &service).await;
    // The same browser again is the same subscription.
    assert_eq!(subscribe(&alice, &phone, &service).await, id);
    let (status, list) = alice.get("/api/push/subscriptions").await;
    assert_eq!(status, 200);
    let subs = list["subscriptions"].as_array().unwrap();
    assert_eq!(subs.len(), 1);
    assert_eq!(subs[0]["service"], service.base);
    assert_eq!(subs[0]["events"], json!(["permission", "turn", "schedule"]));
    assert!(
        !list.to_string().contains("/push/phone"),
        "no endpoint path: {list}"
    );
    assert!(!list.to_string().contains("p256dh"), "no keys: {list}");

    let (_, theirs) = bob.get("/api/push/subscriptions").await;
    assert_eq!(theirs["subscriptions"], json!([]));
    assert_eq!(
        bob.delete(&format!("/api/push/subscriptions/{id}")).await,
        404
    );
    assert_eq!(
        alice.get("/api/push/subscriptions").await.1["subscriptions"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    for n in 0..2 {
        subscribe(&alice, &Device::new(&format!("more{n}")), &service).await;
    }
    let (status, body) = alice
        .post(
            "/api/push/subscriptions",
            Device::new("one-too-many").subscription(&service),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (429, Some("limit_exceeded"))
    );

    let mut bad_key = phone.subscription(&service);
    bad_key["keys"]["p256dh"] = json!(B64.encode([4u8; 65]));
    let mut bad_auth = phone.subscription(&service);
    bad_auth["keys"]["auth"] = json!("c2hvcnQ");
    let mut bad_event = phone.subscription(&service);
    bad_event["events"] = json!(["everything"]);
    let mut huge = phone.subscription(&service);
    huge["padding"] = json!("x".repeat(17 << 10));
    for body in [bad_key, bad_auth, bad_event, huge, json!({"endpoint": 5})] {
        let (status, answer) = bob.post("/api/push/subscriptions", body).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (400, Some("invalid_request")),
            "{answer}"
        );
    }
    assert_eq!(
        alice.delete(&format!("/api/push/subscriptions/{id}")).await,
        204
    );
    assert_eq!(
        alice.delete(&format!("/api/push/subscriptions/{id}")).await,
        404
    );

    // An action needs a token, and only `reply` takes a text.
    let anyone = Rest::new(&server);
    for body in [
        json!({"action": "allow"}),
        json!({"token": "t", "action": "launch"}),
        json!({"token": "t", "action": "reply"}),
        json!({"token": "t", "action": "allow", "text": "hi"}),
    ] {
        let (status, answer) = anyone.post("/api/push/actions", body).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (400, Some("invalid_request")),
            "{answer}"
        );
    }
}

/// Without the test setting, endpoints must be https to a public address: plain http,
/// loopback, private, link-local and names that resolve to loopback are refused.
#[tokio::test]
async fn endpoints_that_reach_the_servers_own_network_are_refused() {
    let (_dir, config) = config_file(TOKENS);
    let server = TestServer::start_with(&["--config", &config]).await;
    let alice = Rest::with_token(&server, "tok-alice");
    let device = Device::new("x");
    for endpoint in [
        "http://push.example/x",
        "https://127.0.0.1/x",
        "https://10.0.0.1/x",
        "https://169.254.169.254/x",
        "https://[::1]/x",
        "https://localhost/x",
        "https://user:pw@8.8.8.8/x",
    ] {
        let body = device.subscription_at(endpoint);
        let (status, answer) = alice.post("/api/push/subscriptions", body).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (400, Some("invalid_request")),
            "{endpoint}: {answer}"
        );
    }
    assert_eq!(
        alice.get("/api/push/subscriptions").await.1["subscriptions"],
        json!([])
    );
}

/// A schedule's run that ends is pushed as a scheduled run, with the start of its reply; a
/// test notification is pushed on request.
#[tokio::test]
async fn a_scheduled_run_that_ended_is_pushed() {
    let (_fx, _server, alice, _bob, key) = start().await;
    let mut service = FakeService::start().await;
    let phone = Device::new("phone");
    subscribe(&alice, &phone, &service).await;
    let (status, schedule) = alice
        .post(
            "/api/schedules",
            json!({"name": "Nightly", "agent_id": "nightly", "content": "hello", "every_secs": 86400}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    let run = format!("/api/schedules/{}/run", schedule["id"].as_str().unwrap());
    assert_eq!(alice.post(&run, json!({})).await.0, 202);
    let push = phone.open(&service.next().await, &service, &key);
    assert_eq!(push["kind"], "schedule");
    assert_eq!(push["title"], "Nightly");
    assert!(
        push["body"]
            .as_str()
            .unwrap()
            .starts_with("Scheduled run: "),
        "{push}"
    );

    // The dialog's test reaches the device, whatever news it picked.
    assert_eq!(alice.post("/api/push/test", json!({})).await.0, 202);
    let test = phone.open(&service.next().await, &service, &key);
    assert_eq!(
        (&test["kind"], &test["title"]),
        (&json!("test"), &json!("agentmux"))
    );
}

/// With push off, its routes say so and nothing is kept.
#[tokio::test]
async fn with_push_off_its_routes_say_so() {
    let (_dir, config) = config_file(&format!("{TOKENS}[push]\nenabled = false\n"));
    let server = TestServer::start_with(&["--config", &config]).await;
    let alice = Rest::with_token(&server, "tok-alice");
    let (status, body) = alice.get("/api/push/key").await;
    assert_eq!((status, body["code"].as_str()), (422, Some("unsupported")));
    let sub = Device::new("x").subscription_at("https://8.8.8.8/push/x");
    let (status, body) = alice.post("/api/push/subscriptions", sub).await;
    assert_eq!((status, body["code"].as_str()), (422, Some("unsupported")));
    assert!(
        !server.data_dir.join(agentmux::push::KEY_FILE).exists(),
        "no key made"
    );
}

/// A conversation shared with an editor rings the editor's phone too, under the alias they
/// know it by and with its title, and their Allow answers the owner's prompt. Once the share
/// is only a viewer's, their phone stays quiet and a token they were sent before does nothing.
#[tokio::test]
async fn an_editor_of_a_shared_conversation_is_pushed_and_may_answer() {
    let (_fx, server, alice, bob, key) = start().await;
    let mut service = FakeService::start().await;
    let (alices, bobs) = (Device::new("alice-phone"), Device::new("bob-phone"));
    subscribe(&alice, &alices, &service).await;
    subscribe(&bob, &bobs, &service).await;
    let mut socket = connect_as(&server.addr, "tok-alice").await;
    chat_ack(&mut socket, "fix", "the shared one").await;
    socket.until_result("fix").await;
    assert_eq!(
        alices.open(&service.next().await, &service, &key)["kind"],
        "turn"
    );
    let share = |role: &str| {
        rest(
            &server,
            Some("tok-alice"),
            "PUT",
            "/api/sessions/fix/shares/bob",
            Some(json!({"role": role})),
        )
    };
    let (status, shared) = share("editor").await;
    assert_eq!(status, 200, "{shared}");
    let alias = shared["agent_id"].as_str().unwrap().to_owned();

    chat_ack(&mut socket, "fix", "please run TOOL:touch_x").await;
    let mut pushes: HashMap<String, Value> = HashMap::new();
    for _ in 0..2 {
        let push = service.next().await;
        let device = if push.device == "bob-phone" {
            &bobs
        } else {
            &alices
        };
        pushes.insert(push.device.clone(), device.open(&push, &service, &key));
    }
    let bobs_push = &pushes["bob-phone"];
    assert_eq!(bobs_push["kind"], "permission");
    assert_eq!(bobs_push["agent_id"], alias.as_str());
    assert_eq!(bobs_push["title"], "the shared one");
    assert_eq!(pushes["alice-phone"]["agent_id"], "fix");

    let anyone = Rest::new(&server);
    let allow = json!({"token": bobs_push["token"], "action": "allow"});
    let (status, body) = anyone.post("/api/push/actions", allow).await;
    assert_eq!(status, 204, "{body}");
    let frames = socket.until_result("fix").await;
    assert_eq!(reply_text(&frames), "Tool said: ran: touch_x");
    let mut ended = HashMap::new();
    for _ in 0..2 {
        let push = service.next().await;
        let device = if push.device == "bob-phone" {
            &bobs
        } else {
            &alices
        };
        ended.insert(push.device.clone(), device.open(&push, &service, &key));
    }
    assert_eq!(ended["bob-phone"]["kind"], "turn");

    // Downgraded to a viewer: the reply button of the notification he has does nothing, and
    // the next prompt rings only Alice's phone.
    assert_eq!(share("viewer").await.0, 200);
    let reply = json!({"token": ended["bob-phone"]["token"], "action": "reply", "text": "go"});
    let (status, body) = anyone.post("/api/push/actions", reply).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    chat_ack(&mut socket, "fix", "please run TOOL:touch_y").await;
    let asked = alices.open(&service.next().await, &service, &key);
    assert_eq!(asked["kind"], "permission");
    let deny = json!({"token": asked["token"], "action": "deny"});
    assert_eq!(anyone.post("/api/push/actions", deny).await.0, 204);
    socket.until_result("fix").await;
    assert_eq!(
        alices.open(&service.next().await, &service, &key)["kind"],
        "turn"
    );
    counted(&server, "sent", 7).await;
    assert_eq!(
        service.pending(),
        Vec::<String>::new(),
        "nothing for a viewer"
    );
}
