//! A socket whose writes must make progress: a write (or flush, or shutdown) that stays blocked for
//! longer than the stall allowance fails with `TimedOut`, and the connection holding it is closed
//! and gives its descriptor back. A client that stops reading its answer (or its WebSocket) can then
//! hold a descriptor only that long, on every route. Reads pass through: their deadlines are the
//! header, body and first-frame limits.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// `io`, with the stall allowance `stall` on its writes.
pub struct WriteDeadline<T> {
    io: T,
    stall: Duration,
    /// Armed when a write first blocks, dropped when one makes progress.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteDeadline<T> {
    pub fn new(io: T, stall: Duration) -> Self {
        Self { io, stall, deadline: None }
    }

    /// What a write that returned `polled` means now: progress disarms the deadline; a blocked
    /// write arms it, and fails once it has passed.
    fn check<R>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        if polled.is_ready() {
            self.deadline = None;
            return polled;
        }
        let stall = self.stall;
        let deadline = self.deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client read nothing for {} s", stall.as_secs()),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.check(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.check(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.check(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_shutdown(cx);
        self.check(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt as _;

    /// A peer that never reads: writes block once the pipe is full, and the deadline ends them.
    #[tokio::test(start_paused = true)]
    #[expect(clippy::disallowed_methods, reason = "the test measures paused tokio time")]
    async fn a_write_that_stays_blocked_past_the_stall_fails_and_progress_disarms_it() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut io = WriteDeadline::new(near, Duration::from_secs(30));
        io.write_all(&[0; 64]).await.expect("fits the pipe");
        // The far side reads in time once: the blocked write goes on, and its deadline starts again.
        let reader = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(20)).await;
            let mut buf = [0; 64];
            tokio::io::AsyncReadExt::read_exact(&mut far, &mut buf).await.expect("read");
            far
        });
        io.write_all(&[1; 64]).await.expect("the reader drained the pipe before the deadline");
        let _far = reader.await.expect("reader");
        let started = tokio::time::Instant::now();
        let error = io.write_all(&[2; 64]).await.expect_err("nobody reads any more");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(30), "failed at the deadline, not before");
    }
}
