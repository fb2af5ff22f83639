//! Connections waiting for a request (docs/operations.md, "Connections"): new ones and those
//! kept alive between requests. Waiting costs a client nothing, so these are bounded apart
//! from the connections being served, by a larger number, and at the bound the one that has
//! waited longest is closed to make room, as a well-kept server drains its idle keep-alive
//! connections when short of them. Otherwise a script holding a few hundred silent sockets
//! (or half a header each) filled `MCP_MAX_CONNECTIONS` and every real caller was turned
//! away.

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, OwnedSemaphorePermit};

use crate::metrics::{self, Metrics};

/// Every waiting connection, the longest waiting first.
pub struct Waiting {
    bound: usize,
    queue: Mutex<Queue>,
    metrics: Arc<Metrics>,
}

#[derive(Default)]
struct Queue {
    next: u64,
    /// By when each began to wait (a counter, so the first key is the longest waiting); the
    /// value is how to tell that connection to close.
    by_age: BTreeMap<u64, Arc<Notify>>,
}

impl Waiting {
    pub fn new(bound: usize, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Waiting {
            bound: bound.max(1),
            queue: Mutex::default(),
            metrics,
        })
    }

    /// How many connections wait now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().by_age.len()
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Nothing here panics while holding it; a poisoned queue is still consistent.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a connection and returns its key; at the bound, the longest waiting is told to
    /// close (its key leaves the queue now, so the bound holds whenever it gets to close).
    fn push(&self, close: &Arc<Notify>) -> u64 {
        let mut queue = self.lock();
        let evicted = queue.by_age.len() >= self.bound;
        if evicted && let Some((_, oldest)) = queue.by_age.pop_first() {
            oldest.notify_one();
        }
        let key = queue.next;
        queue.next += 1;
        queue.by_age.insert(key, Arc::clone(close));
        self.metrics
            .connections_waiting(queue.by_age.len(), evicted);
        key
    }

    /// Takes a connection out; false when it had already been told to close.
    fn remove(&self, key: u64) -> bool {
        let mut queue = self.lock();
        let was_there = queue.by_age.remove(&key).is_some();
        self.metrics.connections_waiting(queue.by_age.len(), false);
        was_there
    }
}

/// A request's place among `MCP_MAX_CONNECTIONS` (none past the cap), held from its headers
/// until its answer is out.
pub struct Served {
    _turn: Option<OwnedSemaphorePermit>,
    _open: Option<metrics::Connection>,
}

impl Served {
    pub fn new(turn: Option<OwnedSemaphorePermit>, open: Option<metrics::Connection>) -> Self {
        Served {
            _turn: turn,
            _open: open,
        }
    }
}

/// One connection's standing: waiting for a request (its key in the queue), or serving.
pub struct Place {
    waiting: Arc<Waiting>,
    state: Mutex<State>,
    /// Notified when the connection should close to make room.
    pub close: Arc<Notify>,
}

#[derive(Default)]
struct State {
    /// Its key in the queue while it waits for a request.
    key: Option<u64>,
    /// Requests whose headers arrived and whose answers are not yet out (two when a client
    /// sends its next request before taking an answer).
    requests: usize,
    /// Answers hyper has taken whole but may not have written yet.
    handed_over: Vec<Served>,
}

impl Place {
    /// A new connection, waiting for its first request.
    pub fn new(waiting: &Arc<Waiting>) -> Arc<Self> {
        let place = Arc::new(Place {
            waiting: Arc::clone(waiting),
            state: Mutex::default(),
            close: Arc::new(Notify::new()),
        });
        place.state().key = Some(waiting.push(&place.close));
        place
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request's headers arrived: it no longer waits. False when it had been told to close
    /// meanwhile (the request is still answered, and the connection closed after it).
    pub fn serve(&self) -> bool {
        let mut state = self.state();
        state.requests += 1;
        match state.key.take() {
            Some(key) => self.waiting.remove(key),
            None => true,
        }
    }

    /// hyper has taken a whole answer (its body is done); it is out once hyper has written
    /// it (`Watched`).
    pub fn hand_over(&self, served: Served) {
        self.state().handed_over.push(served);
    }

    /// hyper has written everything it buffered: the answers handed over are out, their
    /// places given back, and with no other request in hand the connection waits for its
    /// next one.
    fn flushed(&self) {
        let mut state = self.state();
        if state.handed_over.is_empty() {
            return;
        }
        state.requests -= state.handed_over.len().min(state.requests);
        let out = std::mem::take(&mut state.handed_over);
        if state.requests == 0 && state.key.is_none() {
            state.key = Some(self.waiting.push(&self.close));
        }
        drop(state);
        drop(out);
    }

    /// Whether it waits for a request (and may be closed without losing one).
    pub fn is_waiting(&self) -> bool {
        self.state().key.is_some()
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(key) = state.key.take() {
            self.waiting.remove(key);
        }
    }
}

/// A connection's socket, telling its `Place` when hyper has written everything it buffered:
/// hyper flushes its socket once its own buffer is empty, so a flush after an answer's body
/// is done means the answer is out (an answer still being written to a slow reader keeps its
/// place, as it keeps its memory).
pub struct Watched<T> {
    inner: T,
    place: Arc<Place>,
}

impl<T> Watched<T> {
    pub fn new(inner: T, place: Arc<Place>) -> Self {
        Watched { inner, place }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let flushed = Pin::new(&mut self.inner).poll_flush(cx);
        if let Poll::Ready(Ok(())) = flushed {
            self.place.flushed();
        }
        flushed
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    fn waiting(bound: usize) -> Arc<Waiting> {
        Waiting::new(bound, Arc::new(Metrics::new(false, &[])))
    }

    fn told_to_close(place: &Place) -> bool {
        // A stored permit: the connection's task sees it when it next looks.
        place.close.notified().now_or_never().is_some()
    }

    #[test]
    fn at_the_bound_the_longest_waiting_is_told_to_close() {
        let waiting = waiting(2);
        let first = Place::new(&waiting);
        let second = Place::new(&waiting);
        assert_eq!(waiting.len(), 2);
        let third = Place::new(&waiting);
        assert_eq!(waiting.len(), 2);
        assert!(told_to_close(&first));
        assert!(!told_to_close(&second) && !told_to_close(&third));
        // Its request came anyway: answered, but it is not counted again.
        assert!(!first.serve());
        assert_eq!(waiting.len(), 2);
    }

    #[test]
    fn a_served_connection_leaves_room_and_waits_again_as_the_newest() {
        let waiting = waiting(2);
        let a = Place::new(&waiting);
        let b = Place::new(&waiting);
        assert!(a.serve());
        assert!(!a.is_waiting());
        a.flushed();
        assert!(
            !a.is_waiting(),
            "a request being served holds no waiting place"
        );
        assert_eq!(waiting.len(), 1);
        let _c = Place::new(&waiting);
        assert!(
            !told_to_close(&b),
            "a connection being served holds no waiting place"
        );
        // `a`'s answer is out: it waits again, the newest, so `b` is the one told to close.
        a.hand_over(Served::new(None, None));
        assert!(!a.is_waiting(), "an answer not yet written holds its place");
        a.flushed();
        assert!(a.is_waiting());
        assert!(told_to_close(&b));
        assert!(!told_to_close(&a));
    }

    #[test]
    fn a_request_sent_before_the_last_answer_was_taken_keeps_the_connection_serving() {
        let waiting = waiting(4);
        let a = Place::new(&waiting);
        assert!(a.serve());
        a.hand_over(Served::new(None, None));
        // The next request's headers arrive before the first answer is written out.
        assert!(a.serve());
        a.flushed();
        assert!(!a.is_waiting(), "the second request is still being served");
        a.hand_over(Served::new(None, None));
        a.flushed();
        assert!(a.is_waiting());
    }

    #[test]
    fn a_closed_connection_gives_its_place_back() {
        let waiting = waiting(4);
        let places: Vec<_> = (0..4).map(|_| Place::new(&waiting)).collect();
        assert_eq!(waiting.len(), 4);
        drop(places);
        assert_eq!(waiting.len(), 0);
    }
}
