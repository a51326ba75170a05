//! The client side of the wire, as the load and the fault harness use it: opening sockets,
//! the frames they send, reading a server frame's header fields without parsing the JSON, and
//! plain HTTP requests for `/metrics` and the REST API.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;

/// The client's socket type.
pub type Socket = WebSocketStream<TcpStream>;

/// Message types a server stores and numbers with a `seq` (the agent's messages).
const STORED_TYPES: [&str; 4] = ["user", "system", "assistant", "result"];

/// Opens a WebSocket to `addr` with Nagle's algorithm off (frames are small and latency is
/// measured) and whose close never leaves the port in TIME_WAIT, so that runs with thousands
/// of sockets can follow each other.
pub async fn connect(addr: &str) -> anyhow::Result<Socket> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    tcp.set_zero_linger()?;
    let (ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/ws"), tcp).await?;
    Ok(ws)
}

/// A `chat` frame.
pub fn chat_text(agent_id: &str, content: &str) -> String {
    json!({"type": "chat", "agent_id": agent_id, "content": content}).to_string()
}

/// A `subscribe` frame.
pub fn subscribe_text(agent_id: &str, since_seq: i64) -> String {
    json!({"type": "subscribe", "agent_id": agent_id, "since_seq": since_seq}).to_string()
}

/// Whether frames of `message_type` are stored (and carry a `seq`).
pub fn is_stored(message_type: &str) -> bool {
    STORED_TYPES.contains(&message_type)
}

/// The header fields of a server frame, read without parsing the JSON.
#[derive(Debug, PartialEq, Eq)]
pub struct Peek<'a> {
    /// `message_type`, or "" when absent.
    pub kind: &'a str,
    /// `agent_id`, or "" when absent.
    pub agent_id: &'a str,
}

/// Reads `text`'s header fields. Headers come first, so the first match is the header's.
pub fn peek(text: &str) -> Peek<'_> {
    Peek {
        kind: string_field(text, "\"message_type\":\"").unwrap_or(""),
        agent_id: string_field(text, "\"agent_id\":\"").unwrap_or(""),
    }
}

/// The string after the first `pattern` in `text`, up to its closing quote.
fn string_field<'a>(text: &'a str, pattern: &str) -> Option<&'a str> {
    let start = text.find(pattern)? + pattern.len();
    let len = text[start..].find('"')?;
    Some(&text[start..start + len])
}

/// The integer value of the first `"seq":N` in `text`.
pub fn seq_field(text: &str) -> Option<i64> {
    let start = text.find("\"seq\":")? + 6;
    let digits: &str = &text[start..];
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

/// A plain HTTP/1.1 GET of `path` on `addr`: the status code and the body.
pub async fn http_get(addr: &str, path: &str) -> anyhow::Result<(u16, String)> {
    http_request(addr, "GET", path, None, Duration::from_secs(10)).await
}

/// A plain HTTP/1.1 request to `addr`, with a body of the given content type when one is given,
/// answered within `limit`: the status code and the body.
pub async fn http_request(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<(&str, &[u8])>,
    limit: Duration,
) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await?;
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n").into_bytes();
    if let Some((content_type, bytes)) = body {
        request.extend(
            format!(
                "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
                bytes.len()
            )
            .bytes(),
        );
        request.extend(b"\r\n");
        request.extend(bytes);
    } else {
        request.extend(b"\r\n");
    }
    stream.write_all(&request).await?;
    let mut response = String::new();
    tokio::time::timeout(limit, stream.read_to_string(&mut response)).await??;
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no HTTP status from {addr}{path}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fields_are_read_from_the_front() {
        let text = r#"{"message_type":"result","agent_id":"a-1","session_id":"s","seq":12,"timestamp":"t","message":{"type":"result","agent_id":"inner","seq":3}}"#;
        assert_eq!(
            peek(text),
            Peek {
                kind: "result",
                agent_id: "a-1"
            }
        );
        assert_eq!(seq_field(text), Some(12));
        assert_eq!(seq_field(r#"{"message_type":"pong"}"#), None);
        assert_eq!(peek("{}").kind, "");
    }

    #[test]
    fn stored_types_are_the_agent_messages() {
        for kind in ["user", "system", "assistant", "result"] {
            assert!(is_stored(kind));
        }
        for kind in ["stream_event", "ack", "status", "error"] {
            assert!(!is_stored(kind));
        }
    }
}
