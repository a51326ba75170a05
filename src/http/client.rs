//! What the `agentmux` command asks of a server running on this machine, over plain HTTP/1.1 to
//! its address: a backup of its database, and whether it answers at all.

use std::net::SocketAddr;
use std::pin::Pin;

use axum::body::Body;
use axum::http::{Request, Response, StatusCode, header};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt as _;

/// A server's refusal: its error code and message.
#[derive(Debug, thiserror::Error)]
#[error("the server refused ({code}): {message}")]
pub struct Refused {
    /// The code of its error (`unauthorized`, `forbidden`, …).
    pub code: String,
    /// What it said.
    pub message: String,
}

/// Whether a server answers `GET /healthz` at `addr`.
pub async fn healthz(addr: SocketAddr) -> bool {
    matches!(get(addr, "/healthz", None).await, Ok(Some(r)) if r.status() == StatusCode::OK)
}

/// Sends `GET path` (with `token`, when given) to the server at `addr`; None when nothing
/// listens there.
async fn get(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> anyhow::Result<Option<Response<Incoming>>> {
    let stream = match tokio::net::TcpStream::connect(addr).await {
        Ok(stream) => stream,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Ok(None),
        Err(e) => anyhow::bail!("cannot reach the server at {addr}: {e}"),
    };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| anyhow::anyhow!("no HTTP server at {addr}: {e}"))?;
    tokio::spawn(connection);
    let mut request = Request::get(path).header(header::HOST, addr.to_string());
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = sender
        .send_request(request.body(Body::empty())?)
        .await
        .map_err(|e| anyhow::anyhow!("the server at {addr} did not answer: {e}"))?;
    Ok(Some(response))
}

/// Fetches `GET /api/admin/backup` from the server at `addr` (with `token`, when given) into
/// `out`; returns its size in bytes, or None when nothing listens at `addr`.
///
/// # Errors
/// [`Refused`] when the server refuses; another error when the connection breaks, or `out`
/// can't be written.
pub async fn fetch_backup(
    addr: SocketAddr,
    token: Option<&str>,
    out: &mut tokio::fs::File,
) -> anyhow::Result<Option<u64>> {
    let Some(response) = get(addr, "/api/admin/backup", token).await? else {
        return Ok(None);
    };
    let status = response.status();
    let mut body = response.into_body();
    let mut bytes = 0u64;
    let mut refusal = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame.map_err(|e| anyhow::anyhow!("the backup broke off: {e}"))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if status == StatusCode::OK {
            out.write_all(&data).await?;
            bytes += data.len() as u64;
        } else if refusal.len() < 64 << 10 {
            refusal.extend_from_slice(&data);
        }
    }
    if status != StatusCode::OK {
        let said: serde_json::Value = serde_json::from_slice(&refusal).unwrap_or_default();
        match (said["code"].as_str(), said["error"].as_str()) {
            (Some(code), Some(error)) => Err(Refused {
                code: code.to_owned(),
                message: error.to_owned(),
            })?,
            _ => anyhow::bail!(
                "the server answered {status}: {}",
                String::from_utf8_lossy(&refusal).trim()
            ),
        }
    }
    out.flush().await?;
    Ok(Some(bytes))
}
