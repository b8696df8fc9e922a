//! The limits Keymux puts on what clients can hold: connections, WebSockets, how long headers, bodies
//! and first frames may take, and the open-descriptor limit they all fit in. `server` applies them
//! to connections; request handlers (`proxy`, `http`) read theirs from the request's extensions.

use std::net::SocketAddr;
use std::time::Duration;

/// Connection limits and the shutdown allowance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeOptions {
    /// Most connections open at once, not counting WebSockets.
    pub max_connections: usize,
    /// Most WebSockets open at once.
    pub max_websockets: usize,
    /// Longest wait for a request's headers, from a connection's opening or its last answer (so also
    /// how long an idle keep-alive connection stays open).
    pub header_read_timeout: Duration,
    /// Longest wait for a whole request body once its headers are in.
    pub body_read_timeout: Duration,
    /// Longest wait for a new WebSocket's first frame.
    pub first_frame_timeout: Duration,
    /// Longest wait, at shutdown, for requests and streams in flight to finish.
    pub drain: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            max_connections: 512,
            max_websockets: 256,
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(60),
            first_frame_timeout: Duration::from_secs(30),
            drain: Duration::from_secs(10),
        }
    }
}

/// The limits a request handler applies, handed to it in the request's extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLimits {
    /// See `ServeOptions::body_read_timeout`.
    pub body_read_timeout: Duration,
    /// See `ServeOptions::max_websockets`.
    pub max_websockets: usize,
    /// See `ServeOptions::first_frame_timeout`.
    pub first_frame_timeout: Duration,
}

impl Default for RequestLimits {
    fn default() -> Self {
        ServeOptions::default().request_limits()
    }
}

impl ServeOptions {
    /// What request handlers need to know of these options.
    pub fn request_limits(&self) -> RequestLimits {
        RequestLimits {
            body_read_timeout: self.body_read_timeout,
            max_websockets: self.max_websockets,
            first_frame_timeout: self.first_frame_timeout,
        }
    }

    /// These options with the caps lowered to what `descriptors` open files can hold: each connection
    /// takes one, each WebSocket two (client and upstream), and a margin stays for the upstream pool,
    /// the store and the logs.
    pub fn fitted_to(mut self, descriptors: u64) -> Self {
        let usable = usize::try_from(descriptors.saturating_sub(128)).unwrap_or(usize::MAX).max(16);
        self.max_connections = self.max_connections.min(usable / 2).max(4);
        self.max_websockets = self.max_websockets.min(usable / 8).max(2);
        self
    }
}

/// The connection a request came on, as its handler sees it (in the request's extensions).
#[derive(Clone, Debug)]
pub struct Connection {
    local: SocketAddr,
}

impl Connection {
    /// A connection accepted on `local`.
    pub fn new(local: SocketAddr) -> Self {
        Self { local }
    }

    /// The address the connection was accepted on: this gateway's own, as the client dialled it.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

/// Raises the soft limit on open descriptors to the hard limit (once is enough; raising it again
/// changes nothing), and returns the soft limit in force.
pub fn raise_descriptor_limit() -> u64 {
    #[cfg(unix)]
    {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let limit = getrlimit(Resource::Nofile);
        let current = limit.current.unwrap_or(u64::MAX);
        if limit.current.is_none() || limit.current == limit.maximum {
            return current;
        }
        // macOS refuses more than its `OPEN_MAX` (10,240) when the hard limit is unlimited.
        let wanted = [limit.maximum.unwrap_or(u64::MAX), limit.maximum.unwrap_or(u64::MAX).min(10_240)];
        for to in wanted.into_iter().filter(|to| *to > current) {
            let raised = Rlimit { current: Some(to), maximum: limit.maximum };
            if setrlimit(Resource::Nofile, raised).is_ok() {
                tracing::debug!(from = current, to, "raised the open-file limit");
                return to;
            }
        }
        current
    }
    #[cfg(not(unix))]
    {
        u64::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caps_fit_the_descriptors_there_are() {
        let options = ServeOptions::default();
        assert_eq!(options.fitted_to(20_000), options, "plenty of room: the defaults stand");
        let tight = options.fitted_to(1024);
        assert_eq!((tight.max_connections, tight.max_websockets), (448, 112));
        assert!(tight.max_connections + 2 * tight.max_websockets + 128 <= 1024);
    }
}
