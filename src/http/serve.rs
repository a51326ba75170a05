//! The accept loop: HTTP/1.1 with upgrades, a deadline for every request head (so a client
//! can't hold a connection open without completing its request or upgrade), and graceful
//! shutdown.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::Request;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt as _;

/// Pause after a failed accept that is not about one connection (e.g. out of file
/// descriptors), so the loop doesn't spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `app` on `listener` until `shutdown` completes, then lets requests in progress
/// finish and returns once every connection has closed. Upgraded connections (WebSockets)
/// are no longer HTTP connections and end on their own.
///
/// A connection that hasn't delivered a complete request head within `head_timeout` of
/// starting to read one is dropped.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    head_timeout: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout);
    let (signal_tx, signal_rx) = watch::channel(());
    let (close_tx, close_rx) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) if is_connection_error(&err) => continue,
                Err(err) => {
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // Frames are small and written as they come: without this, Nagle's algorithm holds a
        // frame back until the client's delayed ACK (~40 ms) whenever one is in flight.
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "cannot set TCP_NODELAY");
        }
        // Each request knows its connection's peer (see `client` in the request's span).
        let app = app
            .clone()
            .map_request(move |mut request: Request<Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request
            });
        let conn = builder
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app))
            .with_upgrades();
        let mut signal = signal_rx.clone();
        let close = close_rx.clone();
        tokio::spawn(async move {
            let mut conn = pin!(conn);
            let result = tokio::select! {
                result = conn.as_mut() => result,
                _ = signal.changed() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(err) = result {
                tracing::debug!(error = %err, "connection ended with an error");
            }
            drop(close);
        });
    }
    drop(listener);
    let _ = signal_tx.send(());
    drop(close_rx);
    close_tx.closed().await;
}

/// Whether an accept error concerns only the connection being accepted.
fn is_connection_error(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}
