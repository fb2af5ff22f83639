//! The accept loop: hyper's HTTP/1 with a timer, so a client that sends its headers too
//! slowly is cut off (`axum::serve` runs hyper without a timer, which leaves the header
//! timeout off: one client sending a byte every few seconds held a connection forever),
//! and a graceful drain on shutdown.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

use crate::log;

/// Serves `router` on `listener` until `shutdown` completes, then stops accepting and
/// returns once every open connection has finished its request in flight.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    header_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
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
        let service = TowerToHyperService::new(router.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        // A connection's own failure (a reset, a timeout) is the client's; nothing to log.
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
    graceful.shutdown().await;
}
