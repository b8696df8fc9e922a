//! Serving the HTTP surface on a socket the caller bound, in the spirit of mini-redis's
//! `server::run(listener, shutdown)`.
//!
//! Every accepted connection gets `TCP_NODELAY` (the last small writes of a stream must not wait for a
//! delayed ACK), the number of open connections is capped (past the cap a connection is closed at
//! once, so a flood of idle sockets cannot use up the process's descriptors), and request headers must
//! arrive within a time limit. On shutdown, Keymux stops accepting, asks open connections and
//! WebSockets to finish, and waits for them for a bounded time before cutting the rest.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::ServiceExt as _;

use crate::gateway::Gateway;

/// Connection limits and the shutdown allowance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeOptions {
    /// Most connections open at once (WebSockets included).
    pub max_connections: usize,
    /// Longest wait for a request's headers once a connection is open.
    pub header_read_timeout: Duration,
    /// Longest wait, at shutdown, for requests and streams in flight to finish.
    pub drain: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self { max_connections: 512, header_read_timeout: Duration::from_secs(30), drain: Duration::from_secs(10) }
    }
}

/// How serving ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Whether every request, stream and WebSocket finished within the allowance.
    pub clean: bool,
    /// Connections still open when the allowance ran out (they were cut).
    pub connections_cut: usize,
}

/// Serves `gateway` on `listener` until `shutdown` completes, with the default limits. Requests in
/// flight get the default drain allowance to finish.
pub async fn serve(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    serve_with(listener, gateway, shutdown, ServeOptions::default()).await.map(|_| ())
}

/// Serves `gateway` on `listener` until `shutdown` completes.
pub async fn serve_with(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    shutdown: impl Future<Output = ()> + Send,
    options: ServeOptions,
) -> std::io::Result<Drained> {
    let app = crate::http::app(gateway.clone());
    let graceful = GracefulShutdown::new();
    let permits = Arc::new(Semaphore::new(options.max_connections.max(1)));
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        while connections.try_join_next().is_some() {}
        let tcp = match accepted {
            Ok((tcp, _peer)) => tcp,
            Err(e) => {
                // Out of descriptors, usually: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!(max = options.max_connections, "connection refused: too many open connections");
            continue;
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let service = TowerToHyperService::new(app.clone().map_request(|r: http::Request<Incoming>| r.map(Body::new)));
        let mut builder = Builder::new(TokioExecutor::new());
        builder.http1().timer(TokioTimer::new()).header_read_timeout(options.header_read_timeout);
        let connection = builder.serve_connection_with_upgrades(TokioIo::new(tcp), service).into_owned();
        let connection = graceful.watch(connection);
        connections.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    Ok(drain(&gateway, graceful, connections, options.drain).await)
}

/// Asks every connection and WebSocket to finish, waits up to `allowance`, then cuts what is left.
async fn drain(
    gateway: &Gateway,
    graceful: GracefulShutdown,
    mut connections: JoinSet<()>,
    allowance: Duration,
) -> Drained {
    gateway.close_sockets();
    let finished = async {
        graceful.shutdown().await;
        gateway.sockets().wait().await;
    };
    let clean = tokio::time::timeout(allowance, finished).await.is_ok();
    while connections.try_join_next().is_some() {}
    let connections_cut = connections.len();
    connections.abort_all();
    while connections.join_next().await.is_some() {}
    Drained { clean, connections_cut }
}
