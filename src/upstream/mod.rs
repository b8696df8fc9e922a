//! Talking to providers: one attempt of a request with one key. [`Upstream`] asks the key's provider
//! (`keymux_core::provider`) where the request goes and to set its credential, then sends it on the
//! key's way out. The rooms:
//!
//! * [`egress`]: how connections leave (direct, an HTTP proxy's `CONNECT` tunnel or the proxy itself,
//!   SOCKS5, the environment's proxy), for HTTP and WebSockets alike;
//! * [`client`]: the HTTP client over it (hyper's pooled client, rustls, answers decoded);
//! * [`headers`]: the header policy in both directions;
//! * [`error`]: why an attempt got no answer;
//! * [`answer`]: an answer as the client gives it, its body read as it arrives.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, Method, StatusCode};
use bytes::Bytes;

use crate::config::Timeouts;
use crate::keys::{KeyEntry, KeyId, ProviderId};
use crate::provider::{Endpoints, Outgoing, RefreshCall};
use crate::secrets::Secret;

mod answer;
pub mod client;
pub mod egress;
mod error;
mod headers;

pub use answer::{put_back, Answer, BodyError, Chunks};
pub use error::{chain, UpstreamError};
pub use headers::{
    forward_request_headers, forward_response_headers, is_responses_lite, mask_error_headers, RESPONSES_LITE,
};

/// Most bytes of a token endpoint's answer read.
const MAX_TOKEN_ANSWER: usize = 256 * 1024;

/// The shared upstream client.
pub struct Upstream {
    endpoints: Endpoints,
    /// Each provider's default base URL, split once for the client's URIs (parsing a URL per request
    /// is measurable).
    bases: Vec<(ProviderId, Option<client::Base>)>,
    /// How keys without a pool proxy go out: direct, or as the environment's proxy variables say.
    default: Arc<Route>,
    /// Keys whose pool has a proxy, and their way out. Replaced whole when pools or keys change
    /// ([`Upstream::set_proxies`]); empty unless some pool has one. Bounded by the keys there are.
    proxied: arc_swap::ArcSwap<HashMap<KeyId, Arc<Route>>>,
    /// rustls with the public roots and the extra ones (`Config::extra_roots_pem`: tests only).
    tls: rustls::ClientConfig,
    connect: Duration,
    first_byte: Duration,
    idle: Duration,
}

/// One way out, and the clients on it. Responses-Lite requests have connections of their own, so that
/// one never shares a provider connection with a request that is not.
pub struct Route {
    /// A pool's proxy as messages name it (`host:port`); `None` for the default way.
    shown: Option<String>,
    /// The proxy's URL and login, to reuse the route while they stay.
    proxy: Option<(String, Option<Secret>)>,
    /// Its connector and clients, or why none could be made (every request then fails naming the proxy:
    /// never sent direct).
    clients: Result<Clients, String>,
}

struct Clients {
    connector: egress::Connector,
    plain: client::Client,
    lite: client::Client,
}

impl Clients {
    fn new(way: egress::Way, connect: Duration, tls: &rustls::ClientConfig) -> Self {
        let connector = egress::Connector::new(way, connect, tls.clone());
        let (plain, lite) =
            (client::Client::new(connector.clone(), tls.clone()), client::Client::new(connector.clone(), tls.clone()));
        Self { connector, plain, lite }
    }
}

impl Route {
    /// The proxy as messages name it (`host:port`), for a pool's proxy.
    pub fn shown(&self) -> Option<&str> {
        self.shown.as_deref()
    }

    /// A connection for a WebSocket to `uri` (`ws://` or `wss://`) on this way out: through an HTTP
    /// proxy, always a tunnel.
    pub async fn open_socket(&self, uri: &http::Uri) -> Result<egress::Conn, String> {
        let clients = self.clients.as_ref().map_err(Clone::clone)?;
        clients.connector.clone().open(uri.clone(), true).await.map_err(|e| chain(&*e))
    }
}

impl Upstream {
    /// Builds the client. Responses are requested compressed (gzip, zstd) and decoded here, so Keymux can
    /// read the streams it relays; clients on loopback get them uncompressed, with no `content-encoding`.
    /// `pem_roots` are trusted beside the public roots: only tests set them (a local TLS upstream).
    pub fn new(endpoints: Endpoints, timeouts: &Timeouts, pem_roots: &[String]) -> Result<Self, UpstreamError> {
        let bad = |detail: String| UpstreamError::BadBaseUrl { base: endpoints.api.clone(), detail };
        let tls = client::tls(&der_roots(pem_roots).map_err(bad)?).map_err(bad)?;
        let connect = Duration::from_millis(timeouts.connect_ms);
        let way = egress::Way::from_environment(|name| std::env::var_os(name));
        let default = Arc::new(Route { shown: None, proxy: None, clients: Ok(Clients::new(way, connect, &tls)) });
        let bases = crate::provider::ALL
            .iter()
            .map(|&id| {
                let base = id.get().default_base(&endpoints).and_then(|b| url::Url::parse(b).ok());
                (id, base.as_ref().and_then(client::Base::split))
            })
            .collect();
        Ok(Self {
            endpoints,
            bases,
            default,
            proxied: arc_swap::ArcSwap::from_pointee(HashMap::new()),
            tls,
            connect,
            first_byte: Duration::from_millis(timeouts.first_byte_ms),
            idle: Duration::from_millis(timeouts.idle_ms),
        })
    }

    /// Sets the proxy each key goes out through, with its login (`pools::Pools::proxies`); every other
    /// key takes the default way. A route per distinct proxy and login, kept while they stay, built
    /// here (when pools or keys change), never per request.
    pub fn set_proxies(&self, wanted: &[(KeyId, String, Option<Secret>)]) {
        let old = self.proxied.load();
        let mut made: Vec<Arc<Route>> = Vec::new();
        let mut by_key = HashMap::with_capacity(wanted.len());
        for (key, url, login) in wanted {
            let same = |r: &&Arc<Route>| r.proxy.as_ref().is_some_and(|(u, l)| u == url && l == login);
            let reuse = made.iter().chain(old.values()).find(same).cloned();
            let route = reuse.unwrap_or_else(|| Arc::new(self.route_through(url, login.clone())));
            if !made.iter().any(|r| Arc::ptr_eq(r, &route)) {
                made.push(route.clone());
            }
            by_key.insert(key.clone(), route);
        }
        self.proxied.store(Arc::new(by_key));
    }

    fn route_through(&self, url: &str, login: Option<Secret>) -> Route {
        let proxy = egress::Proxy::new(url, login.clone());
        let shown = proxy.as_ref().map_or_else(|_| crate::pools::safe_proxy(url), |p| p.shown().to_owned());
        if let Err(e) = &proxy {
            tracing::warn!(proxy = %shown, error = %e, "the proxy cannot be used; its keys' requests fail");
        }
        let clients = proxy.map(|p| Clients::new(egress::Way::Through(Arc::new(p)), self.connect, &self.tls));
        Route { shown: Some(shown), proxy: Some((url.to_owned(), login)), clients }
    }

    /// The way `key` goes out, and what it is called when it is its pool's proxy.
    pub fn route(&self, key: &KeyId) -> Arc<Route> {
        self.proxied.load().get(key).cloned().unwrap_or_else(|| self.default.clone())
    }

    /// The proxy (`host:port`) `key` goes out through, if its pool has one.
    pub fn proxy_of(&self, key: &KeyId) -> Option<String> {
        let proxied = self.proxied.load();
        if proxied.is_empty() {
            return None;
        }
        proxied.get(key).and_then(|r| r.shown.clone())
    }

    /// The base URLs providers pick their keys' defaults from.
    pub fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    /// rustls with the roots Keymux trusts (for WebSockets over TLS).
    pub fn tls(&self) -> &rustls::ClientConfig {
        &self.tls
    }

    /// The connect timeout (also used for WebSocket handshakes).
    pub fn connect_timeout(&self) -> Duration {
        self.connect
    }

    /// The longest silence allowed between two chunks of a relayed body.
    pub fn idle_timeout(&self) -> Duration {
        self.idle
    }

    /// The base URL a key uses: its own, else its provider's default.
    pub fn base_for<'a>(&'a self, key: &'a KeyEntry) -> &'a str {
        match &key.base_url {
            Some(own) => own.trim_end_matches('/'),
            None => key.provider.get().default_base(&self.endpoints).unwrap_or_default(),
        }
    }

    /// The URI of a request: built from the provider's split default base when URL parsing would
    /// leave it as it is, else parsed.
    fn uri_for(&self, key: &KeyEntry, path_and_query: &str) -> Result<http::Uri, UpstreamError> {
        if key.base_url.is_none() {
            let split = self.bases.iter().find(|(id, _)| *id == key.provider).and_then(|(_, b)| b.as_ref());
            if let Some(uri) = split.and_then(|base| base.uri(path_and_query)) {
                return Ok(uri);
            }
        }
        let base = self.base_for(key);
        let bad = |detail: String| UpstreamError::BadBaseUrl { base: base.to_owned(), detail };
        let url = url::Url::parse(&format!("{base}{path_and_query}")).map_err(|e| bad(e.to_string()))?;
        url.as_str().parse().map_err(|e: http::uri::InvalidUri| bad(e.to_string()))
    }

    /// Sends one attempt with `key`. `path_and_query` is what follows `/v1` in the client's URL.
    pub async fn send(
        &self,
        key: &KeyEntry,
        method: Method,
        path_and_query: &str,
        mut headers: HeaderMap,
        body: Bytes,
    ) -> Result<Answer, UpstreamError> {
        let base = self.base_for(key);
        let mut outgoing = Outgoing { method: &method, path_and_query, headers: &mut headers, body };
        key.provider
            .get()
            .prepare(&key.secret, &mut outgoing)
            .map_err(|detail| UpstreamError::Credential { base: base.to_owned(), detail })?;
        let body = outgoing.body;
        let uri = self.uri_for(key, path_and_query)?;
        let proxied = self.proxied.load();
        let route = if proxied.is_empty() { &self.default } else { proxied.get(&key.id).map_or(&self.default, |r| r) };
        let clients = route.clients.as_ref().map_err(|detail| self.through_proxy(route, base, detail.clone()))?;
        let client = if is_responses_lite(&headers) { &clients.lite } else { &clients.plain };
        match tokio::time::timeout(self.first_byte, client.send(method, uri, headers, body)).await {
            Err(_) => Err(UpstreamError::FirstByteTimeout { base: base.to_owned(), secs: self.first_byte.as_secs() }),
            // The proxy's own refusal is never relayed as the provider's answer.
            Ok(Ok(answer)) if answer.status() == StatusCode::PROXY_AUTHENTICATION_REQUIRED && route.shown.is_some() => {
                let detail = "the proxy refused the request: it wants a user and password (407); set them with the \
                              pool's proxy URL (`keymux pool set NAME --proxy http://user:password@host:port`)";
                Err(self.through_proxy(route, base, detail.to_owned()))
            }
            Ok(Ok(answer)) => Ok(answer.into()),
            // Through a pool's proxy, a request that got no answer failed on its way through it (a
            // connection to the proxy refused, or one it kept reset when it stopped): the error names it.
            Ok(Err(e)) if route.shown.is_some() => Err(self.through_proxy(route, base, chain(&e))),
            Ok(Err(e)) => Err(error::no_answer(base, e.is_connect(), chain(&e))),
        }
    }

    fn through_proxy(&self, route: &Route, base: &str, detail: String) -> UpstreamError {
        UpstreamError::Proxy { proxy: route.shown.clone().unwrap_or_default(), base: base.to_owned(), detail }
    }

    /// Makes a credential's refresh call on `key`'s way out: the status and body it answered (the body
    /// bounded), or why it could not be made. The body carries tokens: only the caller reads it.
    pub async fn refresh(&self, key: &KeyEntry, call: RefreshCall) -> Result<(u16, Bytes), String> {
        let uri: http::Uri = call.url.parse().map_err(|e: http::uri::InvalidUri| e.to_string())?;
        let mut headers = HeaderMap::new();
        headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
        let route = self.route(&key.id);
        let clients = route.clients.as_ref().map_err(Clone::clone)?;
        let sent = clients.plain.send(Method::POST, uri, headers, call.body.into());
        let answer = match tokio::time::timeout(self.first_byte + self.idle, sent).await {
            Err(_) => return Err("the token endpoint did not answer in time".into()),
            Ok(answer) => answer.map_err(|e| chain(&e))?,
        };
        let status = answer.status().as_u16();
        let body = http_body_util::Limited::new(answer.into_body(), MAX_TOKEN_ANSWER);
        let bytes = http_body_util::BodyExt::collect(body)
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    "the token endpoint's answer is too large".to_owned()
                } else {
                    chain(&*e)
                }
            })?
            .to_bytes();
        Ok((status, bytes))
    }
}

/// The DER of each PEM certificate in `pems`, for the client's TLS.
fn der_roots(pems: &[String]) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject as _;
    pems.iter()
        .map(|pem| rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| e.to_string()))
        .collect()
}
