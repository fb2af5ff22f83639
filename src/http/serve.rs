//! The accept loop: hyper's HTTP/1 with a timer, so a client that sends its headers too
//! slowly is cut off (`axum::serve` runs hyper without a timer, which leaves the header
//! timeout off: one client sending a byte every few seconds held a connection forever); a
//! deadline on taking each answer (`deadline`); a cap on connections being served, and a
//! larger bound on connections waiting for a request (`idle`); and a graceful drain on
//! shutdown.
//!
//! The cap counts work, not sockets: a connection takes a place among
//! `MCP_MAX_CONNECTIONS` when a request's headers have arrived and gives it back when its
//! answer is out. While it waits for a request (new, or kept alive between requests) it is
//! one of at most `MCP_MAX_IDLE_CONNECTIONS`, and the one waiting longest is closed to make
//! room for a newer one. So silent sockets cost their sender a place each and lock nobody
//! out.
//!
//! What the server holds is bounded: connections being served × (request + answer), where a
//! request is at most `MCP_BODY_LIMIT_BYTES`, an answer at most `tools::MAX_ANSWER_BYTES`,
//! and a client that does not take its answer is cut off after `MCP_WRITE_TIMEOUT_MS`; and
//! waiting connections × what hyper keeps for reading a request's headers.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, header};
use axum::response::Response;
use hyper::body::{Bytes, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::deadline::WriteDeadline;
use super::idle::{Place, Served, Waiting, Watched};
use crate::log;
use crate::metrics::Metrics;

/// Requests past the cap still answered at once: enough for probes and a scrape to see a
/// full server as alive (`/health`) and why (`/metrics`). Past these, a request is answered
/// 503 without looking at it.
const OVERFLOW: usize = 32;

/// How the edge treats each connection.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_timeout: Duration,
    pub write_timeout: Duration,
    pub max_connections: usize,
    pub max_idle_connections: usize,
}

/// Serves `router` on `listener` until `shutdown` completes, then stops accepting and
/// returns once every open connection has finished its request in flight. A request past
/// `limits.max_connections` is served by `at_capacity` instead, and its connection closed.
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
    let edge = Edge {
        served: Arc::new(Semaphore::new(limits.max_connections)),
        overflow: Arc::new(Semaphore::new(OVERFLOW)),
        router: TowerToHyperService::new(router),
        at_capacity: TowerToHyperService::new(at_capacity),
        metrics: Arc::clone(&metrics),
    };
    let waiting = Waiting::new(limits.max_idle_connections, metrics);
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
        let place = Place::new(&waiting);
        let io = WriteDeadline::new(stream, limits.write_timeout);
        let io = TokioIo::new(Watched::new(io, Arc::clone(&place)));
        let service = Connection {
            edge: edge.clone(),
            place: Arc::clone(&place),
        };
        let connection = graceful.watch(http.serve_connection(io, service));
        // A connection's own failure (a reset, a timeout) is the client's; nothing to log.
        tokio::spawn(async move {
            tokio::pin!(connection);
            loop {
                tokio::select! {
                    _ = &mut connection => break,
                    // Told to make room: closed (dropped) while it waits for a request;
                    // one whose request arrived meanwhile is answered and then closed.
                    () = place.close.notified() => if place.is_waiting() { break },
                }
            }
        });
    }
    graceful.shutdown().await;
}

/// What every connection shares: the places to serve requests in, and what serves them.
#[derive(Clone)]
struct Edge {
    served: Arc<Semaphore>,
    overflow: Arc<Semaphore>,
    router: TowerToHyperService<Router>,
    at_capacity: TowerToHyperService<Router>,
    metrics: Arc<Metrics>,
}

/// One connection's service: each request takes a place among `MCP_MAX_CONNECTIONS` for as
/// long as it is read, run and answered.
struct Connection {
    edge: Edge,
    place: Arc<Place>,
}

impl hyper::service::Service<Request<Incoming>> for Connection {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let edge = &self.edge;
        let told_to_close = !self.place.serve();
        let (served_by, turn, open) = match Arc::clone(&edge.served).try_acquire_owned() {
            Ok(turn) => (
                Some(&edge.router),
                Some(turn),
                Some(edge.metrics.connection()),
            ),
            Err(_) => {
                edge.metrics.connection_refused();
                match Arc::clone(&edge.overflow).try_acquire_owned() {
                    Ok(turn) => (Some(&edge.at_capacity), Some(turn), None),
                    Err(_) => (None, None, None),
                }
            }
        };
        let close = told_to_close || open.is_none();
        let answering = served_by.map(|service| service.call(request));
        let served = Served::new(turn, open);
        let place = Arc::clone(&self.place);
        Box::pin(async move {
            let mut response = match answering {
                Some(answering) => answering.await.unwrap_or_else(|never| match never {}),
                None => super::full().await,
            };
            if close {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(response.map(|body| {
                Body::new(Answer {
                    body,
                    served: Some(served),
                    place,
                })
            }))
        })
    }
}

/// An answer's body, holding its request's place: when hyper has taken it whole (and drops
/// it), the place is handed over until hyper has written it out (`idle::Watched`).
struct Answer {
    body: Body,
    served: Option<Served>,
    place: Arc<Place>,
}

impl Drop for Answer {
    fn drop(&mut self) {
        if let Some(served) = self.served.take() {
            self.place.hand_over(served);
        }
    }
}

impl hyper::body::Body for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
