//! The embeddable runtime: one way to run a gateway, used alike by `keymux serve`, the tests and the
//! tray app. It owns binding the socket, probing the keys, flushing the metrics and shutting down.
//!
//! ```no_run
//! # async fn run() -> Result<(), keymux::startup::StartError> {
//! let runtime = keymux::runtime::Runtime::start(Default::default()).await?;
//! println!("listening on {}", runtime.addr());
//! let stopped = runtime.shutdown().await; // drains streams for a bounded time, flushes metrics
//! # let _ = stopped; Ok(()) }
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::gateway::Gateway;
use crate::server::{Drained, ServeOptions};
use crate::startup::{self, StartError, StartOptions};

/// How often pending metrics are merged into the store.
pub const METRICS_FLUSH: Duration = Duration::from_secs(5);
/// How often the gateway looks for what time alone changed (cooldowns that ended).
pub const TICK: Duration = Duration::from_secs(1);

/// A running gateway.
pub struct Runtime {
    addr: SocketAddr,
    gateway: Arc<Gateway>,
    notices: Vec<String>,
    token_hint: String,
    stop: CancellationToken,
    served: JoinHandle<std::io::Result<Drained>>,
    background: Vec<JoinHandle<()>>,
    probed: tokio::sync::watch::Receiver<bool>,
    /// The config file whose run file this runtime wrote.
    runfile: Option<std::path::PathBuf>,
}

/// Stops a runtime from anywhere (a signal handler, a tray menu); cheap to clone.
#[derive(Clone, Debug)]
pub struct Stopper(CancellationToken);

impl Stopper {
    /// Asks the runtime to shut down; `Runtime::wait` then returns.
    pub fn stop(&self) {
        self.0.cancel();
    }
}

/// How a runtime ended.
#[derive(Debug)]
pub struct Stopped {
    /// How the connections drained (`None` if the server failed before).
    pub drained: Option<Drained>,
    /// Whether the final metrics flush reached the store (`Err` says why not).
    pub metrics: Result<(), String>,
    /// The server's error, if it stopped by failing.
    pub error: Option<String>,
}

impl Runtime {
    /// Prepares a gateway from `options` (without side effects: see `startup::first_run`), binds its
    /// address, and starts serving, probing the keys and flushing metrics.
    pub async fn start(options: StartOptions) -> Result<Self, StartError> {
        Self::start_with(options, ServeOptions::default()).await
    }

    /// Like `start`, with connection limits of the caller's choosing.
    pub async fn start_with(options: StartOptions, serve: ServeOptions) -> Result<Self, StartError> {
        let prepared = startup::prepare(&options).await?;
        let listener = TcpListener::bind(prepared.listen)
            .await
            .map_err(|e| StartError::Bind { addr: prepared.listen, detail: e.to_string() })?;
        let mut runtime = Self::serve(listener, prepared.gateway, serve)?;
        runtime.notices = prepared.notices;
        runtime.token_hint = prepared.token_hint;
        // Login pages a gateway that stopped left behind, their codes gone with it.
        crate::login_page::sweep(runtime.gateway.clock());
        if let Some(config) = prepared.config_path {
            // The CLI finds this gateway by it, even on a port chosen at start.
            match crate::runfile::write(&config, runtime.addr) {
                Ok(_) => runtime.runfile = Some(config),
                Err(e) => runtime.notices.push(format!("the CLI will not find this gateway by its run file ({e})")),
            }
        }
        Ok(runtime)
    }

    /// Serves a gateway already built on a listener the caller bound (port 0 in tests).
    pub fn serve(listener: TcpListener, gateway: Arc<Gateway>, serve: ServeOptions) -> Result<Self, StartError> {
        let addr =
            listener.local_addr().map_err(|e| StartError::Usage(format!("cannot read the bound address: {e}")))?;
        gateway.set_addr(addr);
        let stop = CancellationToken::new();
        // `serve_with` raises the descriptor limit as it is called, so it is in force when this returns.
        let served =
            tokio::spawn(crate::server::serve_with(listener, gateway.clone(), stop.clone().cancelled_owned(), serve));
        let (probe_done, probed) = tokio::sync::watch::channel(false);
        let probing = {
            let gateway = gateway.clone();
            tokio::spawn(async move {
                crate::pipeline::probe_keys(&gateway).await;
                let _ = probe_done.send(true);
            })
        };
        // A store that could not be opened is announced like one that fails later.
        if let Some(error) = gateway.metrics().status().error {
            gateway.notify_store(Some(error));
        }
        let flushing = tokio::spawn(flush_every(gateway.clone(), METRICS_FLUSH));
        let ticking = tokio::spawn(tick_every(gateway.clone(), TICK));
        let reloading = tokio::spawn(reload_every(gateway.clone(), crate::control::live::RELOAD_EVERY));
        Ok(Self {
            addr,
            gateway,
            notices: Vec::new(),
            token_hint: String::new(),
            stop,
            served,
            background: vec![probing, flushing, ticking, reloading],
            probed,
            runfile: None,
        })
    }

    /// Runs `task` beside the gateway for as long as it serves: it ends with the runtime's own background
    /// work. What the caller adds (`keymux serve` and the tray add the client watcher) is the caller's to
    /// choose, so the runtime knows nothing of it.
    pub fn run_alongside(&mut self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.background.push(tokio::spawn(task));
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The gateway.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// Problems found while starting that did not stop it.
    pub fn notices(&self) -> &[String] {
        &self.notices
    }

    /// How clients get a token (`keymux token show NAME`, or `KEYMUX_CLIENT_TOKEN`).
    pub fn token_hint(&self) -> &str {
        &self.token_hint
    }

    /// Waits until every key has been probed once (serving does not wait for it).
    pub async fn probed(&self) {
        let mut probed = self.probed.clone();
        let _ = probed.wait_for(|done| *done).await;
    }

    /// A handle that stops this runtime.
    pub fn stopper(&self) -> Stopper {
        Stopper(self.stop.clone())
    }

    /// Stops accepting, lets requests and streams in flight finish (for the serve options' drain
    /// allowance), closes WebSockets, and flushes the metrics.
    pub async fn shutdown(self) -> Stopped {
        self.stop.cancel();
        self.wait().await
    }

    /// Waits until the runtime is stopped (by a `Stopper`), or the server fails; then finishes as
    /// `shutdown` does.
    pub async fn wait(self) -> Stopped {
        let result = self.served.await;
        for task in self.background {
            task.abort();
        }
        let (drained, error) = match result {
            Ok(Ok(drained)) => (Some(drained), None),
            Ok(Err(e)) => (None, Some(e.to_string())),
            Err(e) => (None, Some(format!("the server task failed: {e}"))),
        };
        let metrics = flush(&self.gateway).await;
        if let Some(config) = &self.runfile {
            crate::runfile::remove(config);
        }
        Stopped { drained, metrics, error }
    }
}

async fn flush_every(gateway: Arc<Gateway>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let _ = flush(&gateway).await;
    }
}

/// Reads the config file again on a fixed beat (a file with no gateway-side writer to wait on); a
/// gateway without a config file has nothing to read.
async fn reload_every(gateway: Arc<Gateway>, every: Duration) {
    if gateway.settings().path().is_none() {
        return;
    }
    let mut ticks = tokio::time::interval(every);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        gateway.reload_config().await;
    }
}

async fn tick_every(gateway: Arc<Gateway>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    loop {
        ticks.tick().await;
        gateway.tick();
        crate::budgets::tell(&gateway);
        // The pages of login codes that stopped waiting (used, expired, pushed out).
        crate::login_page::remove_spent(gateway.access(), gateway.clock().now());
        // Unreachable keys are tried again in the background, so no client request pays for it.
        for key in gateway.pool().claim_retries(gateway.clock().now()) {
            let gateway = gateway.clone();
            tokio::spawn(async move { crate::pipeline::probe(&gateway, key).await });
        }
    }
}

/// Merges pending metrics into the store, off the async threads (sled writes block), and tells the
/// event stream when the store starts failing or recovers.
async fn flush(gateway: &Arc<Gateway>) -> Result<(), String> {
    let flushing = gateway.clone();
    let now = gateway.clock().unix_ms();
    let (result, change) = tokio::task::spawn_blocking(move || flushing.metrics().flush(now))
        .await
        .unwrap_or_else(|e| (Err(format!("the flush did not finish: {e}")), None));
    match change {
        Some(crate::metrics::StoreHealth::Failed(message)) => gateway.notify_store(Some(message)),
        Some(crate::metrics::StoreHealth::Recovered) => gateway.notify_store(None),
        None => {}
    }
    result
}
