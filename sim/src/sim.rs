//! The public handle: starting a simulator, inspecting its log, steering its faults and
//! advancing its clock.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::SimConfig;
use crate::fault::{Fault, Scope};
use crate::log::LogEntry;
use crate::server;
use crate::state::State;

/// A running simulator. Clones share the same server; it stops when [`Sim::shutdown`] is
/// called or the last clone is dropped.
#[derive(Clone, Debug)]
pub struct Sim {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: Arc<State>,
    addr: SocketAddr,
    stop: watch::Sender<bool>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        self.state.ws.kill_all();
    }
}

impl Sim {
    /// Binds `127.0.0.1:0` and starts serving on a background task.
    pub async fn start(config: SimConfig) -> std::io::Result<Sim> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        Self::serve(listener, config).await
    }

    /// Serves on a listener the caller bound.
    pub async fn serve(listener: TcpListener, config: SimConfig) -> std::io::Result<Sim> {
        let state = Arc::new(State::new(&config)?);
        let addr = listener.local_addr()?;
        let (stop, mut stopped) = watch::channel(false);
        let app = server::router(state.clone());
        tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            // Like OpenAI's edge, events go out as they are written (no Nagle delay on small writes).
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                let _ = tcp.set_nodelay(true);
            });
            // Each request knows the connection it came on (`LogEntry::peer`).
            let app = app.into_make_service_with_connect_info::<SocketAddr>();
            if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
                tracing::warn!(error = %e, "keymux-sim server stopped with an error");
            }
        });
        Ok(Sim { inner: Arc::new(Inner { state, addr, stop }) })
    }

    /// `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.inner.addr)
    }

    /// The ChatGPT Codex backend: `http://127.0.0.1:PORT/backend-api/codex`.
    pub fn chatgpt_base_url(&self) -> String {
        format!("http://{}{}", self.inner.addr, crate::chatgpt::BASE_PATH)
    }

    /// The auth server whose `/oauth/token` refreshes the plan's login: `http://127.0.0.1:PORT`.
    pub fn chatgpt_auth_url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    /// The plan's login as it stands, if a plan is configured.
    pub fn chatgpt_tokens(&self) -> Option<crate::plan::Tokens> {
        self.inner.state.plan.as_ref().map(|p| p.tokens())
    }

    /// Every login the plan issued (the latest 64), the first included.
    pub fn chatgpt_issued(&self) -> Vec<crate::plan::Tokens> {
        self.inner.state.plan.as_ref().map_or_else(Vec::new, |p| p.issued())
    }

    /// How many refreshes of the plan's login were granted.
    pub fn chatgpt_refreshes(&self) -> u64 {
        self.inner.state.plan.as_ref().map_or(0, |p| p.refreshes().0)
    }

    /// How many refreshes of the plan's login were asked for (granted or refused).
    pub fn chatgpt_refresh_requests(&self) -> u64 {
        self.inner.state.plan.as_ref().map_or(0, |p| p.refreshes().1)
    }

    /// Uses up the plan's 5-hour window now (it resets 5 hours on).
    pub fn exhaust_plan(&self) {
        if let Some(plan) = &self.inner.state.plan {
            plan.exhaust(self.inner.state.clock.unix_secs());
        }
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// When the last event of the latest streamed Responses answer was handed to its connection.
    pub fn last_stream_end(&self) -> Option<std::time::Instant> {
        *self.inner.state.last_stream_end.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every logged request and WebSocket frame, in arrival order (the newest
    /// [`crate::LOG_CAPACITY`] are kept).
    pub fn log(&self) -> Vec<LogEntry> {
        self.inner.state.log.entries()
    }

    /// Key secret → number of requests it served, whatever their status: HTTP requests,
    /// WebSocket upgrades and WebSocket frames alike. Requests refused by the rate limiter
    /// are not counted (they stay in the log), and neither are requests with no known key.
    pub fn count_by_key(&self) -> BTreeMap<String, usize> {
        self.inner.state.log.counts()
    }

    /// Queues a fault for the key's next request; faults of one key apply in FIFO order.
    pub fn inject(&self, key_secret: &str, fault: Fault) {
        self.inner.state.faults.push(key_secret, fault);
    }

    /// Drops every queued fault (standing faults stay until [`Sim::clear_standing`]).
    pub fn clear_faults(&self) {
        self.inner.state.faults.clear();
    }

    /// Makes every request of the key show `fault` for `for_` on the simulator's clock
    /// (`None`: until cleared), replacing the key's previous standing fault: every HTTP
    /// request, the WebSocket handshake (which an error fault refuses) and every
    /// `response.create` on the key's open WebSockets. Queued faults still come first.
    pub fn set_standing(&self, key_secret: &str, fault: Fault, for_: Option<Duration>) {
        self.stand(Scope::Key(key_secret.to_owned()), fault, for_);
    }

    /// Ends the key's standing fault.
    pub fn clear_standing(&self, key_secret: &str) {
        self.inner.state.faults.clear_standing(&Scope::Key(key_secret.to_owned()));
    }

    /// Like [`Sim::set_standing`] for every key of an organization; a key's own standing
    /// fault takes precedence over its organization's.
    pub fn set_standing_org(&self, org_id: &str, fault: Fault, for_: Option<Duration>) {
        self.stand(Scope::Org(org_id.to_owned()), fault, for_);
    }

    /// Ends the organization's standing fault.
    pub fn clear_standing_org(&self, org_id: &str) {
        self.inner.state.faults.clear_standing(&Scope::Org(org_id.to_owned()));
    }

    fn stand(&self, scope: Scope, fault: Fault, for_: Option<Duration>) {
        let state = &self.inner.state;
        let until = for_.map(|d| state.clock.now() + d);
        state.faults.set_standing(scope, fault, until);
    }

    /// Moves the simulator's clock forward: rate-limit windows, their `x-ratelimit-reset-*`
    /// and `retry-after` headers, prompt-cache entries, standing faults and WebSocket
    /// connection ages all see the time pass at once.
    pub fn advance(&self, by: Duration) {
        self.inner.state.clock.advance(by);
    }

    /// Abruptly drops (no close frame) every open WebSocket of the key; returns how many.
    pub fn kill_ws_connections(&self, key_secret: &str) -> usize {
        self.inner.state.ws.kill(key_secret)
    }

    /// How many WebSocket connections are open.
    pub fn open_ws_connections(&self) -> usize {
        self.inner.state.ws.count()
    }

    /// Stops accepting connections and drops the open WebSockets.
    pub fn shutdown(&self) {
        let _ = self.inner.stop.send(true);
        self.inner.state.ws.kill_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_cross_threads() {
        fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
        assert_send_sync::<Sim>();
    }
}
