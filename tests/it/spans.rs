//! Request spans, read from what a tracing subscriber in the test's own thread captures of an
//! in-process server: every REST request and WebSocket runs in one, no credential shows, and
//! a conversation's span stands on its own.

use std::io::Write;
use std::sync::{Arc, Mutex};

use tracing_subscriber::fmt::format::FmtSpan;

use crate::common::*;
use crate::inproc::InProcess;
use crate::security::{TOKENS, connect_with, http_raw, ws_ticket};

/// What the subscriber wrote, shared with the test.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A REST request's span names its method, route pattern, client and request id; a WebSocket's span
/// sits in its upgrade request's; the conversation a socket starts has a span of its own, not
/// inside the socket's; and neither the token sent in a query string nor the ticket is ever
/// written, whatever the level.
#[tokio::test]
async fn requests_and_sockets_run_in_spans_without_credentials() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_span_events(FmtSpan::NEW)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // The test's runtime runs on this thread only, the server's tasks included.
    let _default = tracing::subscriber::set_default(subscriber);
    let server = InProcess::start(TOKENS).await;

    let r = http_raw(
        &server.addr,
        "GET",
        "/api/sessions/s1/export?token=tok-alice",
        &[
            ("Host", &server.addr),
            ("Authorization", "Bearer tok-alice"),
            ("X-Request-Id", "req-42"),
        ],
        "",
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let ticket = ws_ticket(&server.addr, "tok-alice").await;
    let (mut c, _) = connect_with(&server.addr, &format!("?ticket={ticket}"), &[])
        .await
        .unwrap();
    chat_ack(&mut c, "s1", "hello").await;
    c.until_result("s1").await;

    let text = captured.text();
    assert!(
        text.contains(
            r#"request{method=GET route="/api/sessions/{agent_id}/export" client=127.0.0.1 request_id="req-42"}"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"request{method=GET route="/ws" client=127.0.0.1}:socket{"#),
        "{text}"
    );
    let conversation = text
        .lines()
        .find(|line| line.contains("conversation{") && line.ends_with(": new"))
        .unwrap_or_else(|| panic!("no conversation span: {text}"));
    assert!(
        !conversation.contains("socket{") && !conversation.contains("request{"),
        "{conversation}"
    );
    for secret in ["tok-alice", ticket.as_str()] {
        assert!(!text.contains(secret), "{secret} written: {text}");
    }
}

/// The client a request's span names is its connection's peer, whatever `X-Forwarded-For`
/// says; only a peer listed in `server.trusted_proxies` names the client there, by the last
/// entry (the one it set: earlier ones came from the client). An entry that is not an address
/// leaves the peer.
#[tokio::test]
async fn the_client_is_the_peer_unless_a_trusted_proxy_names_it() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_span_events(FmtSpan::NEW)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let span_of = async |server: &InProcess, forwarded: Option<&str>, id: &str| {
        let mut headers = vec![("Host", server.addr.as_str()), ("X-Request-Id", id)];
        if let Some(forwarded) = forwarded {
            headers.push(("X-Forwarded-For", forwarded));
        }
        let r = http_raw(&server.addr, "GET", "/healthz", &headers, "").await;
        assert_eq!(r.status, 200);
        let text = captured.text();
        let needle = format!("request_id=\"{id}\"}}");
        text.lines()
            .find(|l| l.contains(&needle))
            .unwrap_or_else(|| panic!("no span of {id}: {text}"))
            .to_owned()
    };

    let direct = InProcess::start("").await;
    let span = span_of(&direct, Some("203.0.113.9"), "forged").await;
    assert!(span.contains("client=127.0.0.1 "), "{span}");
    let elsewhere = InProcess::start("[server]\ntrusted_proxies = [\"10.0.0.1\"]\n").await;
    let span = span_of(&elsewhere, Some("203.0.113.9"), "not-that-proxy").await;
    assert!(span.contains("client=127.0.0.1 "), "{span}");

    let proxied = InProcess::start("[server]\ntrusted_proxies = [\"127.0.0.1\"]\n").await;
    for (forwarded, client, id) in [
        (Some("203.0.113.9"), "203.0.113.9", "one"),
        (Some("198.51.100.1, 203.0.113.9"), "203.0.113.9", "appended"),
        (Some("2001:db8::7"), "2001:db8::7", "six"),
        (Some("not-an-address"), "127.0.0.1", "garbage"),
        (None, "127.0.0.1", "none"),
    ] {
        let span = span_of(&proxied, forwarded, id).await;
        assert!(
            span.contains(&format!("client={client} ")),
            "{forwarded:?}: {span}"
        );
    }
}
