//! A connection whose answers must be taken in time (docs/operations.md, "Timeouts"). hyper
//! has no write timeout: an answer to a client that never reads stays in memory for as long
//! as the socket stays open. Here the clock starts when a write first has to wait for the
//! client, and stops only when hyper has handed over everything it buffered (its flush, which
//! it calls once its buffer is empty), so a client that reads a byte now and then cannot
//! keep resetting it. Past the deadline the write fails, hyper closes the connection and the
//! answer is freed.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

pub struct WriteDeadline<T> {
    inner: T,
    limit: Duration,
    /// Running from the first write that waited until the next completed flush.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteDeadline<T> {
    pub fn new(inner: T, limit: Duration) -> Self {
        WriteDeadline {
            inner,
            limit,
            stalled: None,
        }
    }

    /// A write that must wait: the deadline starts now if it is not running, and its
    /// wake-up is registered, so a client that never reads is woken up to be cut off.
    fn waiting<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        let limit = self.limit;
        let deadline = (self.stalled).get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not take its answer within MCP_WRITE_TIMEOUT_MS",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// What a write returned, through the deadline.
    fn through<R>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        match polled {
            Poll::Pending => self.waiting(cx),
            ready => ready,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.through(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.through(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        if let Poll::Ready(Ok(())) = polled {
            // Everything hyper held was taken: the client is keeping up.
            this.stalled = None;
        }
        this.through(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.through(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const LIMIT: Duration = Duration::from_secs(30);

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_reads_is_cut_off_at_the_deadline() {
        let (server, _client) = tokio::io::duplex(1024);
        let mut server = WriteDeadline::new(server, LIMIT);
        let started = tokio::time::Instant::now();
        let written = server.write_all(&[7; 4096]).await;
        assert_eq!(written.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), LIMIT);
    }

    #[tokio::test(start_paused = true)]
    async fn reading_a_little_now_and_then_does_not_reset_the_deadline() {
        let (server, mut client) = tokio::io::duplex(1024);
        let mut server = WriteDeadline::new(server, LIMIT);
        let drip = tokio::spawn(async move {
            let mut byte = [0; 1];
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if client.read(&mut byte).await.unwrap_or(0) == 0 {
                    return;
                }
            }
        });
        let started = tokio::time::Instant::now();
        let written = server.write_all(&[7; 1 << 20]).await;
        assert_eq!(written.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), LIMIT);
        drop(server);
        drip.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_reads_gets_every_answer_however_long_the_connection() {
        let (server, mut client) = tokio::io::duplex(1024);
        let mut server = WriteDeadline::new(server, LIMIT);
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            client.read_to_end(&mut all).await.unwrap();
            all.len()
        });
        // Each answer waits for the reader now and then; the deadline starts over after each
        // completed flush, so the connection outlives it many times.
        for _ in 0..5 {
            server.write_all(&[7; 64 << 10]).await.unwrap();
            server.flush().await.unwrap();
            tokio::time::sleep(LIMIT).await;
        }
        server.shutdown().await.unwrap();
        drop(server);
        assert_eq!(reader.await.unwrap(), 5 * (64 << 10));
    }
}
