//! The accept loop: hyper's HTTP/1 with a timer, so a client that sends its headers too
//! slowly is cut off (`axum::serve` runs hyper without a timer, which leaves the header
//! timeout off: one client sending a byte every few seconds held a connection forever); a
//! deadline on taking each answer (`deadline`); a cap on connections served at once; and a
//! graceful drain on shutdown.
//!
//! What the server holds is bounded by connections × (request + answer): a request is at
//! most `MCP_BODY_LIMIT_BYTES`, an answer at most `tools::MAX_ANSWER_BYTES`, and a client
//! that does not take its answer is cut off after `MCP_WRITE_TIMEOUT_MS`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::deadline::WriteDeadline;
use crate::log;
use crate::metrics::Metrics;

/// Connections past the cap still answered, one request each: enough for probes and a
/// scrape to see a full server as alive (`/health`) and why (`/metrics`). Past these, a
/// connection is closed unanswered.
const OVERFLOW: usize = 32;
/// How long a connection past the cap may take to send its request's headers.
const OVERFLOW_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// How the edge treats each connection.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_timeout: Duration,
    pub write_timeout: Duration,
    pub max_connections: usize,
}

/// Serves `router` on `listener` until `shutdown` completes, then stops accepting and
/// returns once every open connection has finished its request in flight. A connection
/// past `limits.max_connections` is served by `at_capacity` instead, for one request.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    at_capacity: Router,
    limits: Limits,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let mut refusing = http.clone();
    refusing
        .keep_alive(false)
        .header_read_timeout(OVERFLOW_HEADER_TIMEOUT.min(limits.header_timeout));
    let served = Arc::new(Semaphore::new(limits.max_connections));
    let overflow = Arc::new(Semaphore::new(OVERFLOW));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, mostly: wait for some to close, then go on.
                    log::error("accept_failed", &e.to_string(), &log::Fields::default());
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let (turn, open, service, builder) = match Arc::clone(&served).try_acquire_owned() {
            Ok(turn) => (turn, Some(metrics.connection()), &router, &http),
            Err(_) => {
                metrics.connection_refused();
                match Arc::clone(&overflow).try_acquire_owned() {
                    Ok(turn) => (turn, None, &at_capacity, &refusing),
                    Err(_) => continue,
                }
            }
        };
        let io = TokioIo::new(WriteDeadline::new(stream, limits.write_timeout));
        let service = TowerToHyperService::new(service.clone());
        let connection = graceful.watch(builder.serve_connection(io, service));
        // A connection's own failure (a reset, a timeout) is the client's; nothing to log.
        tokio::spawn(async move {
            let _ = connection.await;
            drop((turn, open));
        });
    }
    graceful.shutdown().await;
}
