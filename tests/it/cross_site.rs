//! A hostile web page against an open loopback server: cross-site "simple" requests, DNS
//! rebinding, foreign schemes, and options that would let an agent run commands unasked.

use serde_json::{Value, json};

use crate::common::*;
use crate::security::{connect_with, http_raw, refusal, server_with};

/// The chat a hostile page would send to run Bash with no prompt.
fn bypass_chat() -> String {
    json!({"content": "run it", "options": {"permission_mode": "bypassPermissions"}}).to_string()
}

/// One exported line, enough for an import to create a conversation.
const IMPORT_LINE: &str = r#"{"seq":1,"message_type":"user","payload":{"type":"user","message":{"role":"user","content":"hi"}}}"#;

/// The conversations the (open) server holds, asked the way its own page would.
async fn conversation_count(addr: &str) -> usize {
    let r = http_raw(addr, "GET", "/api/sessions", &[("Host", addr)], "").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let list: Value = serde_json::from_str(&r.body).unwrap();
    list["sessions"].as_array().unwrap().len()
}

fn code(body: &str) -> Value {
    serde_json::from_str::<Value>(body).unwrap_or(Value::Null)["code"].clone()
}

#[tokio::test]
async fn cross_site_simple_requests_are_refused_and_create_nothing() {
    let server = TestServer::start().await;
    let addr = server.addr.as_str();
    let evil = [
        ("Host", addr),
        ("Origin", "https://evil.example"),
        ("Content-Type", "text/plain"),
    ];
    let chat = bypass_chat();
    let r = http_raw(addr, "POST", "/api/sessions/x/messages", &evil, &chat).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(code(&r.body), "forbidden_origin");
    let r = http_raw(
        addr,
        "POST",
        "/api/sessions/import?agent_id=x",
        &evil,
        IMPORT_LINE,
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
    // A foreign Origin is refused on reads and deletes too, not only on the upgrade.
    for (method, path) in [("GET", "/api/sessions"), ("DELETE", "/api/sessions/x")] {
        let r = http_raw(addr, method, path, &evil[..2], "").await;
        assert_eq!(r.status, 403, "{method} {path}: {}", r.body);
    }
    // Without an Origin (a page can't omit it on a cross-site POST, but a form could be
    // replayed by other means), a body that isn't declared as JSON is still refused.
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let headers = [("Host", addr), ("Content-Type", content_type)];
        let r = http_raw(addr, "POST", "/api/sessions/x/messages", &headers, &chat).await;
        assert_eq!(r.status, 415, "{content_type}: {}", r.body);
        assert_eq!(code(&r.body), "unsupported_media_type");
        let r = http_raw(
            addr,
            "POST",
            "/api/sessions/import?agent_id=x",
            &headers,
            IMPORT_LINE,
        )
        .await;
        assert_eq!(r.status, 415, "{content_type}: {}", r.body);
    }
    let r = http_raw(
        addr,
        "POST",
        "/api/sessions/x/messages",
        &[("Host", addr)],
        &chat,
    )
    .await;
    assert_eq!(r.status, 415, "no Content-Type: {}", r.body);
    assert_eq!(conversation_count(addr).await, 0);
    assert!(!server.data_dir.join("workspaces").join("x").exists());
}

#[tokio::test]
async fn a_rebound_host_name_is_refused_on_every_route() {
    let server = TestServer::start().await;
    let addr = server.addr.as_str();
    let port = addr.rsplit_once(':').unwrap().1;
    // First something to steal: a conversation made by the user's own page.
    let own_origin = format!("http://{addr}");
    let own = [
        ("Host", addr),
        ("Origin", own_origin.as_str()),
        ("Content-Type", "application/json"),
    ];
    let r = http_raw(
        addr,
        "POST",
        "/api/sessions/mine/messages",
        &own,
        r#"{"content":"secret"}"#,
    )
    .await;
    assert_eq!(
        r.status, 202,
        "the same-origin page still chats: {}",
        r.body
    );

    let rebound_host = format!("rebind.evil.example:{port}");
    let rebound_origin = format!("http://{rebound_host}");
    let rebound = [
        ("Host", rebound_host.as_str()),
        ("Origin", rebound_origin.as_str()),
        ("Content-Type", "application/json"),
    ];
    for (method, path, body) in [
        ("GET", "/api/sessions", ""),
        ("GET", "/api/sessions/mine/messages", ""),
        ("GET", "/api/sessions/mine/events", ""),
        ("GET", "/api/sessions/mine/export", ""),
        ("POST", "/api/sessions/x/messages", r#"{"content":"hi"}"#),
        ("POST", "/api/ws-ticket", ""),
        ("GET", "/", ""),
        ("GET", "/metrics", ""),
    ] {
        let r = http_raw(addr, method, path, &rebound, body).await;
        assert_eq!(r.status, 421, "{method} {path}: {}", r.body);
        assert_eq!(code(&r.body), "forbidden_host", "{method} {path}");
        assert!(
            !r.body.contains("secret"),
            "{method} {path} leaked the conversation"
        );
    }
    let upgrade = connect_with(
        addr,
        "",
        &[
            ("host", rebound_host.as_str()),
            ("origin", rebound_origin.as_str()),
        ],
    )
    .await;
    let (status, body) = refusal(upgrade);
    assert_eq!(status, 421);
    assert_eq!(body["code"], "forbidden_host");
    // The same request by a loopback name passes.
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let r = http_raw(addr, "GET", "/api/sessions", &[("Host", host.as_str())], "").await;
        assert_eq!(r.status, 200, "{host}");
    }
    assert_eq!(conversation_count(addr).await, 1);
}

/// A `Host` is read strictly as `name[:port]`: user info (whose real host is the one after the
/// `@`), a second colon, an empty, signed, non-numeric or out-of-range port, or no name at all
/// is refused with 421 over REST and on the upgrade, even when the name before it is loopback.
#[tokio::test]
async fn hosts_that_are_not_a_name_and_a_port_are_refused() {
    let server = TestServer::start().await;
    let addr = server.addr.as_str();
    let port = addr.rsplit_once(':').unwrap().1;
    for host in [
        format!("127.0.0.1:{port}@evil.example"),
        format!("localhost:{port}@evil.example:{port}"),
        format!("user@localhost:{port}"),
        "127.0.0.1:1@evil.example".to_owned(),
        "127.0.0.1:evil.example".to_owned(),
        format!("127.0.0.1:{port}:{port}"),
        "127.0.0.1:".to_owned(),
        "127.0.0.1:+80".to_owned(),
        "localhost:99999".to_owned(),
        format!("[::1]:{port}x"),
        format!(":{port}"),
        String::new(),
    ] {
        let r = http_raw(addr, "GET", "/api/sessions", &[("Host", host.as_str())], "").await;
        assert_eq!(r.status, 421, "{host:?}: {}", r.body);
        assert_eq!(code(&r.body), "forbidden_host", "{host:?}");
        let upgrade = connect_with(addr, "", &[("host", host.as_str())]).await;
        let (status, body) = refusal(upgrade);
        assert_eq!(
            (status, &body["code"]),
            (421, &json!("forbidden_host")),
            "{host:?}"
        );
    }
    // The strict reading still serves every loopback form.
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        "localhost".to_owned(),
    ] {
        let r = http_raw(addr, "GET", "/api/sessions", &[("Host", host.as_str())], "").await;
        assert_eq!(r.status, 200, "{host}: {}", r.body);
        assert!(
            connect_with(addr, "", &[("host", host.as_str())])
                .await
                .is_ok(),
            "{host}"
        );
    }
}

#[tokio::test]
async fn allowed_hosts_and_origins_are_served_by_scheme_host_and_port() {
    let (server, _cfg) = server_with(
        "[server]\nallowed_hosts = [\"agents.example.com\"]\n\
         [auth]\nallowed_origins = [\"https://app.example.com\"]\n",
    )
    .await;
    let addr = server.addr.as_str();
    let ok = [
        ("Host", "agents.example.com"),
        ("Origin", "https://agents.example.com"),
    ];
    assert_eq!(
        http_raw(addr, "GET", "/api/sessions", &ok, "").await.status,
        200
    );
    let app = [
        ("Host", "agents.example.com"),
        ("Origin", "https://app.example.com"),
    ];
    assert_eq!(
        http_raw(addr, "GET", "/api/sessions", &app, "")
            .await
            .status,
        200
    );
    for origin in [
        "chrome-extension://agents.example.com",
        "http://app.example.com",
        "https://app.example.com:444",
        "null",
    ] {
        let headers = [("Host", "agents.example.com"), ("Origin", origin)];
        let r = http_raw(addr, "GET", "/api/sessions", &headers, "").await;
        assert_eq!(r.status, 403, "{origin}");
    }
    let own_scheme = format!("chrome-extension://{addr}");
    let (status, _) = refusal(connect_with(addr, "", &[("origin", own_scheme.as_str())]).await);
    assert_eq!(status, 403, "a foreign scheme on our own host:port");
    let other = [("Host", "other.example.com")];
    assert_eq!(
        http_raw(addr, "GET", "/api/sessions", &other, "")
            .await
            .status,
        421
    );
}

#[tokio::test]
async fn permission_modes_that_skip_asking_need_the_operator() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    for mode in ["bypassPermissions", "auto"] {
        let options = json!({"permission_mode": mode});
        c.send(json!({"type": "chat", "agent_id": "b", "content": "hi", "options": options}))
            .await;
        let err = c.recv().await;
        assert_eq!(err["code"], "invalid_options", "{mode}");
        assert!(
            err["error"]
                .as_str()
                .unwrap()
                .contains("allow_bypass_permissions")
        );
        let own = [
            ("Host", server.addr.as_str()),
            ("Content-Type", "application/json"),
        ];
        let body = json!({"content": "hi", "options": options}).to_string();
        let r = http_raw(
            &server.addr,
            "POST",
            "/api/sessions/b/messages",
            &own,
            &body,
        )
        .await;
        assert_eq!(r.status, 400, "{mode}: {}", r.body);
        assert_eq!(code(&r.body), "invalid_options");
    }
    assert_eq!(conversation_count(&server.addr).await, 0);
    // A mode that still asks is fine.
    c.send(json!({"type": "chat", "agent_id": "b", "content": "hi", "options": {"permission_mode": "plan"}}))
        .await;
    assert_eq!(c.recv().await["message_type"], "ack");

    let (allowed, _cfg) = server_with("[agent]\nallow_bypass_permissions = true\n").await;
    let mut c = allowed.client().await;
    c.send(json!({"type": "chat", "agent_id": "b", "content": "hi",
        "options": {"permission_mode": "bypassPermissions"}}))
        .await;
    assert_eq!(c.recv().await["message_type"], "ack");
}

/// `options.allowed_tools` pre-approves tool calls, so a pattern that may grant more than it
/// names (a bare name, any wildcard but a `Bash` prefix's `:*` or a path's trailing `/**`, a
/// shell or interpreter as the command, an absolute or hidden path) is a way around the same operator setting: refused over the socket and REST,
/// creating nothing, while exact arguments or a literal command prefix go through. With `agent.allow_bypass_permissions` every pattern is allowed.
#[tokio::test]
async fn allowed_tools_that_grant_a_whole_tool_need_the_operator() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    let own = [
        ("Host", server.addr.as_str()),
        ("Content-Type", "application/json"),
    ];
    for tools in [
        json!(["Bash", "Write", "Edit"]),
        json!(["Bash(*)"]),
        json!(["Bash(:*)"]),
        json!(["Bash(git log:*)", "Bash( * )"]),
        json!(["Read(/**)"]),
        json!(["Edit(~/**)"]),
        json!(["WebFetch(domain:*)"]),
        json!(["mcp__server__*"]),
        json!(["Bash(*a*)"]),
        json!(["Bash(sh:*)"]),
        json!(["Bash(SH -c:*)"]),
        json!(["Bash(/usr/bin/env:*)"]),
        json!(["Bash(python3:*)"]),
        json!(["Write(/home/u/.bashrc)"]),
        json!(["Edit(.claude/settings.local.json)"]),
        json!(["Write(src/../.git/hooks/pre-commit)"]),
        json!(["Bash(LD_PRELOAD=/tmp/x.so git log:*)"]),
        json!(["Bash(git -c alias.x=!sh x:*)"]),
        json!(["Bash(tar:*)"]),
    ] {
        let options = json!({"allowed_tools": tools});
        c.send(json!({"type": "chat", "agent_id": "t", "content": "hi", "options": options}))
            .await;
        let err = c.recv().await;
        assert_eq!(err["code"], "invalid_options", "{tools}: {err}");
        assert!(
            err["error"]
                .as_str()
                .unwrap()
                .contains("allow_bypass_permissions"),
            "{err}"
        );
        let body = json!({"content": "hi", "options": options}).to_string();
        let r = http_raw(
            &server.addr,
            "POST",
            "/api/sessions/t/messages",
            &own,
            &body,
        )
        .await;
        assert_eq!(r.status, 400, "{tools}: {}", r.body);
        assert_eq!(code(&r.body), "invalid_options");
    }
    assert_eq!(conversation_count(&server.addr).await, 0);
    // Patterns that name what they allow are fine, and clearing the list is too.
    let scoped =
        json!({"allowed_tools": ["Bash(git log:*)", "Read(docs/notes.md)", "Edit(src/**)"]});
    c.send(json!({"type": "chat", "agent_id": "t", "content": "hi", "options": scoped}))
        .await;
    assert_eq!(c.recv().await["message_type"], "ack");
    let body = json!({"content": "hi", "options": {"allowed_tools": []}}).to_string();
    let r = http_raw(
        &server.addr,
        "POST",
        "/api/sessions/t/messages",
        &own,
        &body,
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);

    let (allowed, _cfg) = server_with("[agent]\nallow_bypass_permissions = true\n").await;
    let mut c = allowed.client().await;
    c.send(json!({"type": "chat", "agent_id": "t", "content": "hi",
        "options": {"allowed_tools": ["Bash", "Bash(*)"]}}))
        .await;
    assert_eq!(c.recv().await["message_type"], "ack");
}

/// Grants stored while the operator allowed them (`agent.allow_bypass_permissions`) are
/// checked again once it doesn't: a chat to such a conversation, or a fork of it, is
/// `forbidden` and starts no agent, until a chat's options replace them.
#[tokio::test]
async fn grants_stored_while_allowed_are_refused_once_they_are_not() {
    let fx = crate::claude::Fixture::new("[agent]\nallow_bypass_permissions = true\n");
    let server = fx.start(&[]).await;
    let mut c = server.client().await;
    for (agent_id, options) in [
        ("tools", json!({"allowed_tools": ["Bash(*)"]})),
        ("mode", json!({"permission_mode": "bypassPermissions"})),
    ] {
        c.send(json!({"type": "chat", "agent_id": agent_id, "content": "one", "options": options}))
            .await;
        c.until_result(agent_id).await;
    }
    let mut server = server;
    server.terminate().await;
    let toml = std::fs::read_to_string(&fx.config).unwrap();
    let strict = toml.replace(
        "allow_bypass_permissions = true",
        "allow_bypass_permissions = false",
    );
    assert_ne!(toml, strict);
    std::fs::write(&fx.config, strict).unwrap();

    let server = fx.start(&[]).await;
    let spawns = fx.spawns().len();
    let mut c = server.client().await;
    let own = [
        ("Host", server.addr.as_str()),
        ("Content-Type", "application/json"),
    ];
    for agent_id in ["tools", "mode"] {
        c.send(
            json!({"type": "chat", "agent_id": agent_id, "content": "two", "client_msg_id": "c"}),
        )
        .await;
        let err = c.recv().await;
        assert_eq!(err["code"], "forbidden", "{agent_id}: {err}");
        assert_eq!(err["client_msg_id"], "c");
        assert!(
            err["error"]
                .as_str()
                .unwrap()
                .contains("allow_bypass_permissions"),
            "{err}"
        );
        let body = json!({"new_agent_id": format!("{agent_id}-fork")}).to_string();
        let path = format!("/api/sessions/{agent_id}/fork");
        let r = http_raw(&server.addr, "POST", &path, &own, &body).await;
        assert_eq!(r.status, 403, "{}", r.body);
    }
    assert_eq!(fx.spawns().len(), spawns, "no agent started");
    // A chat whose options replace the stored grants goes through.
    c.send(
        json!({"type": "chat", "agent_id": "tools", "content": "three",
        "options": {"allowed_tools": ["Bash(git status)"]}}),
    )
    .await;
    let frames = c.until_result("tools").await;
    assert!(
        frames.iter().any(|f| f["message_type"] == "ack"),
        "{frames:?}"
    );
    c.send(
        json!({"type": "chat", "agent_id": "mode", "content": "three",
        "options": {"permission_mode": "default"}}),
    )
    .await;
    let frames = c.until_result("mode").await;
    assert!(
        frames.iter().any(|f| f["message_type"] == "ack"),
        "{frames:?}"
    );
    assert_eq!(
        fx.spawns().len(),
        spawns + 2,
        "each started with its new options"
    );
}
