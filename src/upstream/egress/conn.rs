//! One open connection on its way to a provider (plain, or TLS to an `https://` proxy), and whether
//! it is an HTTP proxy itself (then requests on it go in absolute form).

use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_rustls::MaybeHttpsStream;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// An open connection.
pub struct Conn {
    io: MaybeHttpsStream<TokioIo<TcpStream>>,
    /// It leads to an HTTP proxy, not to the provider.
    to_proxy: bool,
}

impl Conn {
    /// A connection as a connector gave it.
    pub fn new(io: MaybeHttpsStream<TokioIo<TcpStream>>, to_proxy: bool) -> Self {
        Self { io, to_proxy }
    }

    /// A plain TCP connection.
    pub fn plain(io: TokioIo<TcpStream>, to_proxy: bool) -> Self {
        Self::new(MaybeHttpsStream::Http(io), to_proxy)
    }
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.to_proxy)
    }
}

impl hyper::rt::Read for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Conn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}
