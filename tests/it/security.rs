//! Authentication, tickets, JWTs, the Origin check and isolation between principals, over
//! real sockets and raw HTTP.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

use crate::common::*;

/// Two principals with API tokens.
pub const TOKENS: &str = "[auth.tokens]\n\"tok-alice\" = \"alice\"\n\"tok-bob\" = \"bob\"\n";

/// Opens `/ws` (plus `query`) with extra request headers.
pub async fn connect_with(
    addr: &str,
    query: &str,
    headers: &[(&str, &str)],
) -> Result<(Client, tungstenite::handshake::client::Response), tungstenite::Error> {
    let mut request = format!("ws://{addr}/ws{query}")
        .into_client_request()
        .unwrap();
    for (name, value) in headers {
        request.headers_mut().insert(
            tungstenite::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    let (ws, response) = tokio_tungstenite::connect_async(request).await?;
    Ok((Client { ws }, response))
}

/// Opens `/ws` as the holder of `token`.
pub async fn connect_as(addr: &str, token: &str) -> Client {
    connect_with(addr, "", &[("authorization", &format!("Bearer {token}"))])
        .await
        .expect("an authenticated upgrade succeeds")
        .0
}

/// The HTTP status and JSON body of a refused upgrade.
pub fn refusal(result: Result<impl std::any::Any, tungstenite::Error>) -> (u16, Value) {
    match result {
        Err(tungstenite::Error::Http(response)) => {
            let body = response.body().clone().unwrap_or_default();
            let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
            (response.status().as_u16(), json)
        }
        Err(other) => panic!("expected an HTTP refusal, got {other}"),
        Ok(_) => panic!("expected an HTTP refusal, the upgrade succeeded"),
    }
}

/// A raw HTTP/1.1 response.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub body: String,
}

/// Sends one HTTP/1.1 request on a fresh connection and reads the response (a streaming body
/// is read for at most a few seconds).
pub async fn http(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> HttpResponse {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("Host", addr), ("Content-Type", "application/json")];
    if let Some(auth) = &auth {
        headers.push(("Authorization", auth));
    }
    let body = body.map(Value::to_string).unwrap_or_default();
    http_raw(addr, method, path, &headers, &body).await
}

/// Sends one HTTP/1.1 request with exactly `headers` (plus `Content-Length` and
/// `Connection: close`) and reads the response.
pub async fn http_raw(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> HttpResponse {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), stream.read_to_end(&mut raw)).await;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    HttpResponse { status, body }
}

/// A frame without the parts that differ between two otherwise identical answers.
fn normalized(mut frame: Value, ids: &[&str]) -> String {
    if let Some(obj) = frame.as_object_mut() {
        obj.remove("timestamp");
        obj.remove("ts");
    }
    let mut text = frame.to_string();
    for id in ids {
        text = text.replace(id, "<ID>");
    }
    text
}

/// An HTTP body without the parts that differ between two otherwise identical answers.
fn normalized_body(body: &str, id: &str) -> String {
    let text = body.replace(id, "<ID>");
    match serde_json::from_str::<Value>(&text) {
        Ok(mut json) => {
            strip_volatile(&mut json);
            json.to_string()
        }
        Err(_) => text,
    }
}

fn strip_volatile(value: &mut Value) {
    match value {
        Value::Object(obj) => {
            for key in ["session_id", "timestamp", "created_at", "last_active_at"] {
                obj.remove(key);
            }
            obj.values_mut().for_each(strip_volatile);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_volatile),
        _ => {}
    }
}

/// Sends `frame` and a ping, and returns what came back before the pong, normalized.
async fn answers(c: &mut Client, frame: Value, ids: &[&str]) -> Vec<String> {
    c.send(frame).await;
    c.send(json!({"type": "ping", "ts": "end"})).await;
    let mut got = c
        .recv_until(|v| v["message_type"] == "pong" && v["ts"] == "end")
        .await;
    got.pop();
    got.into_iter().map(|f| normalized(f, ids)).collect()
}

/// Starts a server whose config is `toml`; the guard keeps the file alive.
pub async fn server_with(toml: &str) -> (TestServer, tempfile::TempDir) {
    let (dir, cfg) = config_file(toml);
    let server = TestServer::start_with(&["--config", &cfg, "--demo-delay-ms", "0"]).await;
    (server, dir)
}

/// Without a token, or with a wrong one, the upgrade is refused with 401 before it happens;
/// tokens from `AGENTMUX_TOKENS` work, base64-padded ones (split at the last `=`) included.
#[tokio::test]
async fn missing_or_wrong_tokens_get_401_before_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(
        dir.path(),
        &["--demo-delay-ms", "0"],
        &[(
            "AGENTMUX_TOKENS",
            "tok-alice=alice,tok-bob=bob,dG9rLWNhcm9sLXBhZA===carol",
        )],
    )
    .await;
    let mut carol = connect_as(&server.addr, "dG9rLWNhcm9sLXBhZA==").await;
    chat_ack(&mut carol, "padded", "hi").await;
    carol.until_result("padded").await;
    let mine = http(
        &server.addr,
        "GET",
        "/api/sessions/padded",
        Some("dG9rLWNhcm9sLXBhZA=="),
        None,
    )
    .await;
    assert_eq!(mine.status, 200, "{}", mine.body);
    for prefix in ["dG9rLWNhcm9sLXBhZA", "dG9rLWNhcm9sLXBhZA="] {
        let r = http(&server.addr, "GET", "/api/sessions", Some(prefix), None).await;
        assert_eq!(r.status, 401, "{prefix}");
    }
    let (status, body) = refusal(connect_with(&server.addr, "", &[]).await);
    assert_eq!(status, 401);
    assert_eq!(body["code"], "unauthorized");
    for wrong in [
        "Bearer tok-alicex",
        "Bearer tok-alic",
        "Basic tok-alice",
        "tok-alice",
    ] {
        let (status, body) =
            refusal(connect_with(&server.addr, "", &[("authorization", wrong)]).await);
        assert_eq!(status, 401, "{wrong}");
        assert_eq!(body["code"], "unauthorized");
    }
    let mut c = connect_as(&server.addr, "tok-alice").await;
    c.send(json!({"type": "ping", "ts": 1})).await;
    assert_eq!(c.recv().await["message_type"], "pong");
    let ticket = http(&server.addr, "POST", "/api/ws-ticket", None, None).await;
    assert_eq!(ticket.status, 401);
    assert_eq!(
        serde_json::from_str::<Value>(&ticket.body).unwrap()["code"],
        "unauthorized"
    );
}

/// A ticket from `POST /api/ws-ticket` opens one socket for its principal, by query or by
/// subprotocol (which is echoed); a used ticket is refused.
#[tokio::test]
async fn tickets_open_a_socket_once_by_query_or_subprotocol() {
    let (server, _cfg) = server_with(TOKENS).await;
    let issue = || async {
        let r = http(
            &server.addr,
            "POST",
            "/api/ws-ticket",
            Some("tok-alice"),
            None,
        )
        .await;
        assert_eq!(r.status, 200);
        let v: Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["expires_in"], 60);
        v["ticket"].as_str().unwrap().to_owned()
    };
    let ticket = issue().await;
    let (mut by_query, _) = connect_with(&server.addr, &format!("?ticket={ticket}"), &[])
        .await
        .unwrap();
    chat_ack(&mut by_query, "t1", "via ticket").await;
    by_query.until_result("t1").await;
    let (status, _) = refusal(connect_with(&server.addr, &format!("?ticket={ticket}"), &[]).await);
    assert_eq!(status, 401, "a ticket works once");

    let protocol = format!("agentmux.ticket.{}", issue().await);
    let (mut by_protocol, response) =
        connect_with(&server.addr, "", &[("sec-websocket-protocol", &protocol)])
            .await
            .unwrap();
    assert_eq!(
        response.headers()["sec-websocket-protocol"]
            .to_str()
            .unwrap(),
        protocol
    );
    // Both sockets act for alice: the second finds the first one's conversation.
    by_protocol
        .send(json!({"type": "subscribe", "agent_id": "t1"}))
        .await;
    assert_eq!(
        reply_text(&by_protocol.until_result("t1").await),
        "Echo: via ticket (turn 1)"
    );
    let (status, _) = refusal(
        connect_with(
            &server.addr,
            "",
            &[("sec-websocket-protocol", "agentmux.ticket.forged")],
        )
        .await,
    );
    assert_eq!(status, 401);
}

/// An expired ticket is refused; one of the same server, redeemed before its `exp`, is not.
#[tokio::test]
async fn expired_tickets_get_401() {
    let (server, _cfg) = server_with(&format!("{TOKENS}\n[auth]\nticket_ttl_secs = 1\n")).await;
    let tickets = [
        ws_ticket(&server.addr, "tok-bob").await,
        ws_ticket(&server.addr, "tok-bob").await,
    ];
    // The server compares a ticket's own `exp` (Unix seconds) with the system clock, which
    // this test reads too: a ticket has expired once that clock reaches the next second.
    let expired_at = |ticket: &str| Duration::from_secs(ticket_expiry(ticket) + 1);
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
    };
    let fresh = connect_with(&server.addr, &format!("?ticket={}", tickets[0]), &[]).await;
    // Checked only when the answer came before the ticket's expiry (not on a machine too slow
    // to redeem it within its second).
    if now() < expired_at(&tickets[0]) {
        fresh.expect("a ticket before its expiry opens a socket");
    }
    let late = &tickets[1];
    while now() < expired_at(late) {
        tokio::time::sleep(expired_at(late).saturating_sub(now())).await;
    }
    let (status, body) = refusal(connect_with(&server.addr, &format!("?ticket={late}"), &[]).await);
    assert_eq!(status, 401);
    assert_eq!(body["code"], "unauthorized");
}

/// A WebSocket ticket from `POST /api/ws-ticket` for the bearer of `token`.
pub async fn ws_ticket(addr: &str, token: &str) -> String {
    let r = http(addr, "POST", "/api/ws-ticket", Some(token), None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    serde_json::from_str::<Value>(&r.body).unwrap()["ticket"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The `exp` claim of a WebSocket ticket (a JWT), in Unix seconds.
fn ticket_expiry(ticket: &str) -> u64 {
    use base64::Engine as _;
    let claims = ticket.split('.').nth(1).expect("a JWT's claims");
    let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(claims)
        .expect("base64url claims");
    serde_json::from_slice::<Value>(&claims).unwrap()["exp"]
        .as_u64()
        .expect("a ticket expires")
}

/// An HS256 JWT with the configured secret authenticates `jwt:` and its `sub`; a wrong
/// signature, an expired token (beyond the 5 s leeway), a token that is not valid yet (`nbf`),
/// a wrong issuer or audience, or a token without the configured `iss` or `aud` does not.
#[tokio::test]
async fn jwts_are_verified() {
    let (server, _cfg) = server_with(
        "[auth]\njwt_hs256_secret = \"jwt-secret\"\njwt_issuer = \"https://login.example\"\n\
         jwt_audience = \"agentmux\"\n",
    )
    .await;
    let now = jsonwebtoken::get_current_timestamp();
    let mint = |secret: &str, claims: Value| {
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap()
    };
    let claims = |changes: Value| {
        let mut claims = json!({"sub": "carol", "iss": "https://login.example",
                                "aud": "agentmux", "exp": now + 300});
        for (key, value) in changes.as_object().unwrap() {
            if value.is_null() {
                claims.as_object_mut().unwrap().remove(key);
            } else {
                claims[key] = value.clone();
            }
        }
        claims
    };
    let good = mint("jwt-secret", claims(json!({})));
    let mut c = connect_as(&server.addr, &good).await;
    chat_ack(&mut c, "j1", "hello").await;
    assert_eq!(
        reply_text(&c.until_result("j1").await),
        "Echo: hello (turn 1)"
    );
    let ticket = http(&server.addr, "POST", "/api/ws-ticket", Some(&good), None).await;
    assert_eq!(ticket.status, 200);
    // A token that became valid a moment ago is fine.
    let fresh = mint("jwt-secret", claims(json!({"nbf": now - 1})));
    connect_as(&server.addr, &fresh).await;
    for (why, bad) in [
        ("wrong key", mint("other-secret", claims(json!({})))),
        (
            "expired",
            mint("jwt-secret", claims(json!({"exp": now - 3600}))),
        ),
        (
            "expired beyond the leeway",
            mint("jwt-secret", claims(json!({"exp": now - 30}))),
        ),
        (
            "not valid yet",
            mint("jwt-secret", claims(json!({"nbf": now + 120}))),
        ),
        (
            "wrong issuer",
            mint("jwt-secret", claims(json!({"iss": "https://evil.example"}))),
        ),
        (
            "no issuer",
            mint("jwt-secret", claims(json!({"iss": null}))),
        ),
        (
            "wrong audience",
            mint("jwt-secret", claims(json!({"aud": "other-app"}))),
        ),
        (
            "no audience",
            mint("jwt-secret", claims(json!({"aud": null}))),
        ),
        (
            "no expiry",
            mint("jwt-secret", claims(json!({"exp": null}))),
        ),
        (
            "no subject",
            mint("jwt-secret", claims(json!({"sub": null}))),
        ),
    ] {
        let header = format!("Bearer {bad}");
        let (status, body) =
            refusal(connect_with(&server.addr, "", &[("authorization", &header)]).await);
        assert_eq!(status, 401, "{why}");
        assert_eq!(body["code"], "unauthorized", "{why}");
        let r = http(&server.addr, "GET", "/api/sessions", Some(&bad), None).await;
        assert_eq!(r.status, 401, "{why} over REST");
    }
}

/// JWT subjects and API-token principals are separate namespaces: a JWT whose `sub` is
/// `alice` neither sees nor reaches the conversations of the token principal `alice` (it acts
/// as `jwt:alice`), and the reverse. An operator who sets `auth.jwt_principal_prefix = ""`
/// maps them onto each other on purpose.
#[tokio::test]
async fn jwt_subjects_and_token_principals_do_not_share_conversations() {
    let secret = "[auth]\njwt_hs256_secret = \"jwt-secret\"\n";
    let (server, _cfg) = server_with(&format!("{TOKENS}{secret}")).await;
    let jwt_alice = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"sub": "alice", "exp": jsonwebtoken::get_current_timestamp() + 300}),
        &jsonwebtoken::EncodingKey::from_secret(b"jwt-secret"),
    )
    .unwrap();
    let mut by_token = connect_as(&server.addr, "tok-alice").await;
    chat_ack(&mut by_token, "token-notes", "token secret").await;
    by_token.until_result("token-notes").await;
    let mut by_jwt = connect_as(&server.addr, &jwt_alice).await;
    chat_ack(&mut by_jwt, "jwt-notes", "jwt secret").await;
    by_jwt.until_result("jwt-notes").await;

    for (token, own, other) in [
        ("tok-alice", "token-notes", "jwt-notes"),
        (jwt_alice.as_str(), "jwt-notes", "token-notes"),
    ] {
        let list = http(
            &server.addr,
            "GET",
            "/api/sessions?total=true",
            Some(token),
            None,
        )
        .await;
        assert_eq!(list.status, 200);
        let list: Value = serde_json::from_str(&list.body).unwrap();
        assert_eq!(list["total"], 1, "{list}");
        assert_eq!(list["sessions"][0]["agent_id"], own);
        let theirs = http(
            &server.addr,
            "GET",
            &format!("/api/sessions/{other}/messages"),
            Some(token),
            None,
        )
        .await;
        assert_eq!(theirs.status, 404, "{own} reaching {other}");
        assert!(!theirs.body.contains("secret"));
    }
    // Over the socket too: the JWT's socket doesn't know the token principal's conversation.
    by_jwt
        .send(json!({"type": "subscribe", "agent_id": "token-notes"}))
        .await;
    let answer = by_jwt
        .recv_until(|v| v["message_type"] == "error" || v["agent_id"] == "token-notes")
        .await;
    assert_eq!(answer.last().unwrap()["code"], "unknown_agent");

    // Mapped on purpose: with an empty prefix the JWT acts as the token principal `alice`.
    let (mapped, _cfg) =
        server_with(&format!("{TOKENS}{secret}jwt_principal_prefix = \"\"\n")).await;
    let mut by_token = connect_as(&mapped.addr, "tok-alice").await;
    chat_ack(&mut by_token, "shared-notes", "both of us").await;
    by_token.until_result("shared-notes").await;
    let mut by_jwt = connect_as(&mapped.addr, &jwt_alice).await;
    by_jwt
        .send(json!({"type": "subscribe", "agent_id": "shared-notes"}))
        .await;
    assert_eq!(
        reply_text(&by_jwt.until_result("shared-notes").await),
        "Echo: both of us (turn 1)"
    );
}

/// Without credentials configured, a non-loopback bind refuses to start (and never listens).
#[tokio::test]
async fn an_open_server_refuses_a_public_bind() {
    let dir = tempfile::tempdir().unwrap();
    let output = tokio::time::timeout(
        WAIT,
        tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
            .args(["serve", "--bind", "0.0.0.0:0", "--data-dir"])
            .arg(dir.path())
            .env_remove("AGENTMUX_TOKENS")
            .env_remove("AGENTMUX_JWT_HS256_SECRET")
            .env_remove("AGENTMUX_CONFIG")
            .output(),
    )
    .await
    .expect("exits at once")
    .unwrap();
    assert!(!output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stdout.contains("listening on"), "{stdout}");
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0:0 without authentication"),
        "{stderr}"
    );
}

/// A browser Origin must match the Host or the allow-list; no Origin is fine.
#[tokio::test]
async fn foreign_origins_get_403_before_upgrade() {
    let (server, _cfg) =
        server_with("[auth]\nallowed_origins = [\"https://app.example.com\"]\n").await;
    for origin in ["https://evil.example", "null", "http://127.0.0.1:1"] {
        let (status, body) = refusal(connect_with(&server.addr, "", &[("origin", origin)]).await);
        assert_eq!(status, 403, "{origin}");
        assert_eq!(body["code"], "forbidden_origin");
    }
    let own = format!("http://{}", server.addr);
    for origin in [own.as_str(), "https://app.example.com"] {
        let (mut c, _) = connect_with(&server.addr, "", &[("origin", origin)])
            .await
            .unwrap();
        c.send(json!({"type": "ping"})).await;
        assert_eq!(c.recv().await["message_type"], "pong");
    }
    connect_with(&server.addr, "", &[]).await.unwrap();
}

/// Another principal's `agent_id` is exactly as unknown as one that never existed, for every
/// frame type; a chat to it starts a separate conversation with no shared history.
#[tokio::test]
async fn another_principals_conversation_is_unknown_on_every_frame() {
    let (server, _cfg) = server_with(TOKENS).await;
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    let ack = chat_ack(&mut alice, "shared", "alice secret").await;
    let alice_session = ack["session_id"].as_str().unwrap().to_owned();
    alice.until_result("shared").await;

    let mut bob = connect_as(&server.addr, "tok-bob").await;
    let templates = [
        json!({"type": "subscribe", "agent_id": "ID"}),
        json!({"type": "subscribe", "agent_id": "ID", "since_seq": 0}),
        json!({"type": "interrupt", "agent_id": "ID"}),
        json!({"type": "unsubscribe", "agent_id": "ID"}),
        json!({"type": "rewind", "agent_id": "ID", "to_seq": 4}),
        json!({"type": "fork", "agent_id": "ID", "new_agent_id": "bob-fork"}),
        json!({"type": "permission_response", "agent_id": "ID", "request_id": "r1", "behavior": "allow"}),
    ];
    for template in &templates {
        let with = |id: &str| {
            serde_json::from_str::<Value>(
                &template.to_string().replace("\"ID\"", &format!("\"{id}\"")),
            )
            .unwrap()
        };
        let theirs = answers(&mut bob, with("shared"), &["shared"]).await;
        let unknown = answers(&mut bob, with("never-was"), &["never-was"]).await;
        assert_eq!(theirs, unknown, "{template}");
        assert!(!theirs.iter().any(|f| f.contains(&alice_session)));
    }
    for ty in ["subscribe", "interrupt"] {
        bob.send(json!({"type": ty, "agent_id": "shared"})).await;
        let err = bob.recv().await;
        assert_eq!(err["code"], "unknown_agent", "{ty}");
        assert_eq!(err["agent_id"], "shared");
    }

    let bob_ack = chat_ack(&mut bob, "shared", "bob here").await;
    assert_eq!(bob_ack["seq"], 1);
    assert_ne!(bob_ack["session_id"], alice_session.as_str());
    let frames = bob.until_result("shared").await;
    assert_eq!(reply_text(&frames), "Echo: bob here (turn 1)");
    assert!(
        frames
            .iter()
            .all(|f| !f.to_string().contains("alice secret"))
    );
    assert!(
        frames
            .iter()
            .all(|f| f["session_id"] == bob_ack["session_id"])
    );

    // Alice saw nothing of bob's turn, and her own history goes on.
    alice.send(json!({"type": "ping", "ts": "mark"})).await;
    let before_pong = alice
        .recv_until(|v| v["message_type"] == "pong" && v["ts"] == "mark")
        .await;
    for f in &before_pong[..before_pong.len() - 1] {
        assert_eq!(f["session_id"], alice_session.as_str(), "{f}");
    }
    chat_ack(&mut alice, "shared", "again").await;
    let frames = alice.until_result("shared").await;
    assert_eq!(reply_text(&frames), "Echo: again (turn 2)");
    assert!(
        frames
            .iter()
            .all(|f| f["session_id"] == alice_session.as_str())
    );
}

/// Every REST route under `/api/sessions/{agent_id}` (each row names a route the server has:
/// an unknown id is its `404 unknown_agent`) answers another principal's `agent_id` exactly as
/// an unknown one and needs credentials; the list shows only the caller's conversations; the
/// owner's conversation survives every attempt.
#[tokio::test]
async fn rest_routes_answer_another_principals_id_as_unknown() {
    let (server, _cfg) = server_with(TOKENS).await;
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    let ack = chat_ack(&mut alice, "alice-rest", "private words").await;
    let alice_session = ack["session_id"].as_str().unwrap().to_owned();
    alice.until_result("alice-rest").await;

    let routes: [(&str, &str, Option<Value>); 11] = [
        ("GET", "/api/sessions/ID", None),
        ("GET", "/api/sessions/ID/messages", None),
        (
            "GET",
            "/api/sessions/ID/messages?after_seq=0&limit=10",
            None,
        ),
        ("GET", "/api/sessions/ID/events", None),
        ("GET", "/api/sessions/ID/export", None),
        (
            "PATCH",
            "/api/sessions/ID",
            Some(json!({"title": "mine now"})),
        ),
        (
            "POST",
            "/api/sessions/ID/rewind",
            Some(json!({"to_seq": 4})),
        ),
        (
            "POST",
            "/api/sessions/ID/fork",
            Some(json!({"new_agent_id": "bob-copy"})),
        ),
        ("GET", "/api/sessions/ID/events?since_seq=0", None),
        ("DELETE", "/api/sessions/ID", None),
        ("GET", "/api/sessions/ID/messages?after_seq=0", None),
    ];
    for (method, template, body) in &routes {
        let unknown_path = template.replace("ID", "never-was");
        let unknown = http(
            &server.addr,
            method,
            &unknown_path,
            Some("tok-bob"),
            body.as_ref(),
        )
        .await;
        let theirs_path = template.replace("ID", "alice-rest");
        let theirs = http(
            &server.addr,
            method,
            &theirs_path,
            Some("tok-bob"),
            body.as_ref(),
        )
        .await;
        // A route that exists answers an unknown id with its typed error, not the router's
        // bare 404 or 405.
        assert_eq!(unknown.status, 404, "{method} {template}: {unknown:?}");
        assert_eq!(
            serde_json::from_str::<Value>(&unknown.body)
                .ok()
                .map(|b| b["code"].clone()),
            Some(json!("unknown_agent")),
            "{method} {template}: {unknown:?}"
        );
        assert_eq!(theirs.status, unknown.status, "{method} {template}");
        assert_eq!(
            normalized_body(&theirs.body, "alice-rest"),
            normalized_body(&unknown.body, "never-was"),
            "{method} {template}"
        );
        assert!(!theirs.body.contains(&alice_session));
        assert!(!theirs.body.contains("private words"));
        for path in [&unknown_path, &theirs_path] {
            let anonymous = http(&server.addr, method, path, None, body.as_ref()).await;
            assert_eq!(anonymous.status, 401, "{method} {path} without credentials");
        }
    }
    let list = http(&server.addr, "GET", "/api/sessions", Some("tok-bob"), None).await;
    assert!(!list.body.contains("alice-rest"));
    assert!(!list.body.contains(&alice_session));
    // Sending a message starts the caller's own conversation under that id, as a chat does.
    let send = |id: &'static str| {
        let path = format!("/api/sessions/{id}/messages");
        let addr = server.addr.clone();
        async move {
            http(
                &addr,
                "POST",
                &path,
                Some("tok-bob"),
                Some(&json!({"content": "hi"})),
            )
            .await
        }
    };
    let (theirs, unknown) = (send("alice-rest").await, send("never-was").await);
    assert_eq!(theirs.status, unknown.status);
    assert_eq!(
        normalized_body(&theirs.body, "alice-rest"),
        normalized_body(&unknown.body, "never-was")
    );
    assert!(!theirs.body.contains(&alice_session));

    alice
        .send(json!({"type": "subscribe", "agent_id": "alice-rest"}))
        .await;
    let replay = alice.until_result("alice-rest").await;
    assert_eq!(reply_text(&replay), "Echo: private words (turn 1)");
    assert!(
        replay
            .iter()
            .all(|f| f["session_id"] == alice_session.as_str())
    );
}

/// An RS256 JWT signed by the configured key's holder authenticates its `sub`; a token of
/// another algorithm (here HS256 "signed" with the public key, the classic confusion) or from
/// another key does not.
#[tokio::test]
async fn rs256_jwts_are_verified_without_algorithm_confusion() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures");
    let private = std::fs::read(fixtures.join("jwt-rs256-test-only.key")).unwrap();
    let public = std::fs::read_to_string(fixtures.join("jwt-rs256-test-only.pub")).unwrap();
    let (server, _cfg) = server_with(&format!(
        "[auth]\njwt_rs256_public_key_pem = \"\"\"\n{public}\"\"\"\n"
    ))
    .await;
    let claims = json!({"sub": "dave", "exp": jsonwebtoken::get_current_timestamp() + 300});
    let rs256 = |key: &jsonwebtoken::EncodingKey| {
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
            &claims,
            key,
        )
        .unwrap()
    };
    let good = rs256(&jsonwebtoken::EncodingKey::from_rsa_pem(&private).unwrap());
    let mut c = connect_as(&server.addr, &good).await;
    c.send(json!({"type": "ping"})).await;
    assert_eq!(c.recv().await["message_type"], "pong");

    let confused = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(public.as_bytes()),
    )
    .unwrap();
    let unsigned = format!(
        "{}.{}.",
        "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0",
        good.split('.').nth(1).unwrap()
    );
    for bad in [confused, unsigned] {
        let header = format!("Bearer {bad}");
        let (status, _) =
            refusal(connect_with(&server.addr, "", &[("authorization", &header)]).await);
        assert_eq!(status, 401);
    }
}

/// No client-chosen option reaches the agent's command line unchecked: flag-like or path-like
/// models, unknown options and unknown permission modes are `invalid_options`, over the socket
/// and over REST, and nothing is created.
#[tokio::test]
async fn unsafe_options_are_refused_and_create_nothing() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    let bad_options = [
        json!({"model": "--dangerously-skip-permissions"}),
        json!({"model": "../../etc"}),
        json!({"model": "m --resume=x"}),
        json!({"cwd": "/"}),
        json!({"extra_args": ["--dangerously-skip-permissions"]}),
        json!({"permission_mode": "yolo"}),
        json!("--model=x"),
    ];
    for options in &bad_options {
        c.send(json!({"type": "chat", "agent_id": "opt", "content": "hi", "options": options}))
            .await;
        let err = c.recv().await;
        assert_eq!(err["code"], "invalid_options", "{options}");
        let r = http(
            &server.addr,
            "POST",
            "/api/sessions/opt/messages",
            None,
            Some(&json!({"content": "hi", "options": options})),
        )
        .await;
        assert_eq!(r.status, 400, "{options}");
        assert_eq!(
            serde_json::from_str::<Value>(&r.body).unwrap()["code"],
            "invalid_options"
        );
    }
    c.send(json!({"type": "subscribe", "agent_id": "opt"}))
        .await;
    assert_eq!(c.recv().await["code"], "unknown_agent");
    let workspaces = server.data_dir.join("workspaces");
    let created = std::fs::read_dir(&workspaces).map_or(0, |d| d.count());
    assert_eq!(created, 0);
}

/// The next text frame of `c`, as sent.
async fn raw_frame(c: &mut Client) -> String {
    use futures_util::StreamExt;
    loop {
        let msg = tokio::time::timeout(WAIT, c.ws.next())
            .await
            .expect("a frame in time")
            .expect("socket open")
            .expect("no socket error");
        if let tungstenite::Message::Text(text) = msg {
            return text.as_str().to_owned();
        }
    }
}

/// Checks that a frame of conversation `agent_id` names each header key once, with the
/// server's value; returns the frame.
fn one_header(text: &str, agent_id: &str, session_id: &str) -> Value {
    for key in ["message_type", "agent_id", "session_id", "seq", "timestamp"] {
        assert_eq!(
            text.matches(&format!("\"{key}\":")).count(),
            1,
            "{key}: {text}"
        );
    }
    let frame: Value = serde_json::from_str(text).unwrap();
    assert_eq!(frame["agent_id"], agent_id, "{text}");
    assert_eq!(frame["session_id"], session_id, "{text}");
    assert_ne!(frame["timestamp"], "1970-01-01T00:00:00.000Z", "{text}");
    frame
}

/// An imported transcript whose spliced payloads (`status`, `permission_request`,
/// `permission_resolved`) carry `agent_id`, `session_id`, `seq`, `message_type` or
/// `timestamp` can't reroute or renumber frames: every frame, live, replayed or over REST,
/// has each of those keys once, with the server's value.
#[tokio::test]
async fn imported_payloads_cannot_set_the_frame_header() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    chat_ack(&mut c, "victim", "mine").await;
    c.until_result("victim").await;
    let forged = json!({"agent_id": "victim", "session_id": "forged", "seq": 2,
                        "message_type": "result", "timestamp": "1970-01-01T00:00:00.000Z"});
    let with_forged = |mut payload: Value| {
        payload
            .as_object_mut()
            .unwrap()
            .extend(forged.as_object().unwrap().clone());
        payload
    };
    let lines = [
        json!({"seq": 1, "message_type": "user",
               "payload": {"type": "user", "message": {"role": "user", "content": "hi"}}}),
        json!({"seq": 2, "message_type": "status",
               "payload": with_forged(json!({"status": "idle", "detail": "forged"}))}),
        json!({"seq": 3, "message_type": "permission_request",
               "payload": with_forged(json!({"request_id": "r1", "tool_name": "Bash",
                                             "input": {"command": "ls"}, "suggestions": []}))}),
        json!({"seq": 4, "message_type": "permission_resolved",
               "payload": with_forged(json!({"request_id": "r1", "outcome": "denied"}))}),
    ];
    let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let imported = reqwest::Client::new()
        .post(server.url("/api/sessions/import?agent_id=imp"))
        .header("content-type", "application/x-ndjson")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(imported.status(), 201);
    let imported: Value = imported.json().await.unwrap();
    let session_id = imported["session_id"].as_str().unwrap().to_owned();
    let kinds = [
        "user",
        "status",
        "permission_request",
        "permission_resolved",
        "status",
    ];

    c.send(json!({"type": "subscribe", "agent_id": "imp"}))
        .await;
    let mut replayed = Vec::new();
    while replayed.len() < kinds.len() {
        let text = raw_frame(&mut c).await;
        if text.contains("\"imp\"") {
            replayed.push(one_header(&text, "imp", &session_id));
        }
    }
    let rest = http(
        &server.addr,
        "GET",
        "/api/sessions/imp/messages",
        None,
        None,
    )
    .await;
    assert_eq!(rest.status, 200);
    let page: Value = serde_json::from_str(&rest.body).unwrap();
    let listed = page["messages"].as_array().unwrap();
    assert_eq!(listed.len(), kinds.len());
    for (i, (frame, kind)) in replayed.iter().zip(kinds).enumerate() {
        assert_eq!(frame["seq"], i + 1, "{frame}");
        assert_eq!(frame["message_type"], kind, "{frame}");
        one_header(&listed[i].to_string(), "imp", &session_id);
        assert_eq!(listed[i]["seq"], i + 1);
    }
    assert_eq!(replayed[1]["detail"], "forged");
    assert_eq!(replayed[2]["input"]["command"], "ls");
    assert_eq!(rest.body.matches("\"agent_id\":").count(), kinds.len());
    // The victim's history is untouched.
    let victim = http(
        &server.addr,
        "GET",
        "/api/sessions/victim/messages",
        None,
        None,
    )
    .await;
    assert!(!victim.body.contains("forged"), "{}", victim.body);
}

/// A fresh data directory, its database (with its WAL) and the agents' workspaces are the
/// server's user's alone (0700 directories, a 0600 database), even under a umask of 022 that
/// would make them readable by everyone.
#[tokio::test]
async fn the_data_dir_and_database_are_private() {
    use std::os::unix::fs::PermissionsExt;
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("fresh").join("data");
    let server = TestServer::start_in(&data, &["--demo-delay-ms", "0"], &[]).await;
    let mut c = server.client().await;
    let ack = chat_ack(&mut c, "private", "hello").await;
    c.until_result("private").await;
    let session_id = ack["session_id"].as_str().unwrap();
    let mode = |path: &std::path::Path| {
        std::fs::metadata(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode()
            & 0o777
    };
    for dir in [
        data.clone(),
        data.join("workspaces"),
        data.join("workspaces").join(session_id),
    ] {
        assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    }
    if !on_postgres() {
        assert_eq!(mode(&data.join("agentmux.db")), 0o600);
        assert_eq!(mode(&data.join("agentmux.db-wal")), 0o600);
    }
}

/// `GET /api/agents` needs credentials like every other route, and lists the same agents to
/// every principal (they are the server's, not anyone's conversations).
#[tokio::test]
async fn the_agent_list_needs_credentials() {
    let (server, _cfg) = server_with(TOKENS).await;
    let anonymous = http(&server.addr, "GET", "/api/agents", None, None).await;
    assert_eq!(anonymous.status, 401);
    let wrong = http(&server.addr, "GET", "/api/agents", Some("tok-nobody"), None).await;
    assert_eq!(wrong.status, 401);
    let alice = http(&server.addr, "GET", "/api/agents", Some("tok-alice"), None).await;
    let bob = http(&server.addr, "GET", "/api/agents", Some("tok-bob"), None).await;
    assert_eq!(alice.status, 200);
    assert_eq!(alice.body, bob.body);
    let list: Value = serde_json::from_str(&alice.body).unwrap();
    assert_eq!(list["default"], "demo");
}

/// A stored row that is not JSON (written behind the server's back) is left out of a history
/// page: the page answers, every other frame in it.
#[tokio::test]
async fn a_stored_row_that_is_not_json_is_left_out_of_history() {
    let mut server = TestServer::start().await;
    let mut c = server.client().await;
    c.chat("x", "one").await;
    c.until_result("x").await;
    let page = |server: &TestServer| {
        let url = server.url("/api/sessions/x/messages");
        async move {
            let response = reqwest::get(url).await.unwrap();
            assert_eq!(response.status(), 200);
            response.json::<Value>().await.unwrap()
        }
    };
    let before = page(&server).await["messages"].as_array().unwrap().clone();
    let db = server.stop_and_open_db().await;
    let (row, last): (i64, i64) = sqlx::query_as(
        "select s.id, max(m.seq) from session_info s join messages m on m.session_pk = s.id
         where s.agent_id = 'x' group by s.id",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    for (seq, kind, payload) in [
        (last + 1, "user", "not json"),
        (last + 2, "status", r#"{"status":"x",}"#),
    ] {
        sqlx::query(
            "insert into messages (session_pk, seq, message_type, payload, created_at)
             values ($1, $2, $3, $4, '2026-01-01T00:00:00Z')",
        )
        .bind(row)
        .bind(seq)
        .bind(kind)
        .bind(payload)
        .execute(&db)
        .await
        .unwrap();
    }
    db.close().await;
    server.restart().await;
    let after = page(&server).await["messages"].as_array().unwrap().clone();
    assert_eq!(after, before);
}
