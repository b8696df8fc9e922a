//! The HTTP clients that talk to providers: per-key auth and base URL, the header policy in both
//! directions, per-phase timeouts, and classification of what came back. Keys that go out direct take
//! `direct` (hyper's client, lean enough for every request); a pool's proxy, or a proxy set in the
//! environment, takes reqwest. Either answer is an [`Answer`].

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use bytes::Bytes;

use crate::config::Timeouts;
use crate::keys::{KeyEntry, KeyId, Provider};

mod answer;
mod direct;

pub use answer::{put_back, Answer, BodyError, Chunks};

/// The `user-agent` Keymux sends when the client's request has none.
const USER_AGENT: &str = concat!("keymux/", env!("CARGO_PKG_VERSION"));

/// Why an upstream attempt produced no response.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The connection could not be made.
    #[error("could not connect to {base}: {detail}")]
    Connect { base: String, detail: String },
    /// No response headers within the first-byte timeout.
    #[error("no response from {base} within {secs}s")]
    FirstByteTimeout { base: String, secs: u64 },
    /// The request failed after connecting.
    #[error("request to {base} failed: {detail}")]
    Transport { base: String, detail: String },
    /// The key's base URL cannot be used, or the request path would leave it.
    #[error("the base URL {base} is not valid: {detail}")]
    BadBaseUrl { base: String, detail: String },
    /// The answer ended before its first byte (or, for a JSON answer, before its end).
    #[error("the answer from {base} was cut: {detail}")]
    Cut { base: String, detail: String },
    /// A ChatGPT plan key's login cannot be used (unreadable, or a token that cannot be sent).
    #[error("the ChatGPT login for {base} cannot be used: {detail}")]
    ChatgptLogin { base: String, detail: String },
    /// The key's pool sends it through a proxy, and no answer came through it: the proxy could not be
    /// reached, or it could not reach the provider. Never retried direct.
    #[error("could not reach {base} through the proxy {proxy} (the key's pool goes out through it): {detail}")]
    Proxy { proxy: String, base: String, detail: String },
}

impl UpstreamError {
    /// The HTTP status the client gets when this was the last attempt.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Connect { .. }
            | Self::Transport { .. }
            | Self::BadBaseUrl { .. }
            | Self::Cut { .. }
            | Self::ChatgptLogin { .. }
            | Self::Proxy { .. } => StatusCode::BAD_GATEWAY,
            Self::FirstByteTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// Whether another key may be tried.
    pub fn retryable(&self) -> bool {
        match self {
            Self::Connect { .. }
            | Self::FirstByteTimeout { .. }
            | Self::Transport { .. }
            | Self::Cut { .. }
            | Self::Proxy { .. } => true,
            // Another key may have a good base URL, or be an API key.
            Self::BadBaseUrl { .. } | Self::ChatgptLogin { .. } => true,
        }
    }

    /// A short static label.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Connect { .. } => "upstream_connect",
            Self::FirstByteTimeout { .. } => "timeout",
            Self::Transport { .. } => "upstream_transport",
            Self::BadBaseUrl { .. } => "bad_base_url",
            Self::Cut { .. } => "upstream_cut",
            Self::Proxy { .. } => "proxy_unreachable",
            Self::ChatgptLogin { .. } => "chatgpt_login",
        }
    }

    /// What the client is told.
    pub fn client_message(&self) -> String {
        if let Self::Proxy { proxy, .. } = self {
            return format!(
                "Keymux could not get an answer from the provider with any usable key: {self}. The request was not \
                 sent direct: check that the proxy {proxy} is running and can reach the provider, or change the \
                 pool's proxy (`keymux pool set NAME --proxy URL` or `--no-proxy`), then retry."
            );
        }
        format!(
            "Keymux could not get an answer from the provider with any usable key: {self}. Check the \
             network and the keys' base URLs (`keymux keys list`), then retry."
        )
    }
}

/// Request headers never forwarded: hop-by-hop, the client's own credentials (the key's are set
/// instead), `host`, length and encodings (the body goes upstream decoded, framed anew by the client
/// library, which asks for the answer's encodings itself), and organization selectors (the key decides
/// its organization).
const DROP_REQUEST: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "authorization",
    "api-key",
    "content-length",
    "content-encoding",
    "accept-encoding",
    "openai-organization",
    "openai-project",
    "cookie",
    "origin",
];

/// Response headers never passed back: hop-by-hop, and the length (the body is re-framed).
const DROP_RESPONSE: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "set-cookie",
];

/// Copies the client's headers that may go upstream.
pub fn forward_request_headers(from: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(from.len());
    for (name, value) in from {
        if !DROP_REQUEST.contains(&name.as_str()) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// An error answer's headers with what they quote masked as its body is (`secrets::mask_quoted`:
/// `exact`, the key it was sent with, and every key-like word): a provider may quote a key in a
/// `location`, a `www-authenticate` or any `x-…` header. A header whose name quotes one is dropped;
/// a request id (`req_…`) is kept as it is, for support.
pub fn mask_error_headers(headers: &mut HeaderMap, exact: &str) {
    let mut masked = HeaderMap::with_capacity(headers.len());
    for (name, value) in std::mem::take(headers).into_iter().filter_map(|(n, v)| Some((n?, v))) {
        if crate::secrets::mask_quoted(name.as_str(), exact) != name.as_str() {
            continue;
        }
        let text = String::from_utf8_lossy(value.as_bytes());
        let is_request_id = text.strip_prefix("req_").is_some_and(|id| id.bytes().all(|b| b.is_ascii_alphanumeric()));
        let value = match crate::secrets::mask_quoted(&text, exact) {
            quoted if is_request_id || quoted == text => value,
            quoted => HeaderValue::from_str(&quoted).unwrap_or_else(|_| HeaderValue::from_static("")),
        };
        masked.append(name, value);
    }
    *headers = masked;
}

/// The upstream's headers that may go back to the client, taken out of its answer.
pub fn forward_response_headers(from: &mut HeaderMap) -> HeaderMap {
    // Taken, not copied: the answer's headers are read before (`Heard`) and never after.
    let mut out = std::mem::take(from);
    for name in DROP_RESPONSE {
        out.remove(*name);
    }
    out
}

/// Codex's Responses-Lite request header (`true` on a Responses-Lite model's requests; over a
/// WebSocket on the handshake, and per turn as `client_metadata.ws_request_header_…`). The provider
/// reads it as belonging to the connection it comes on.
pub const RESPONSES_LITE: &str = "x-openai-internal-codex-responses-lite";

/// Whether a request (or a WebSocket handshake) is Responses-Lite: its [`RESPONSES_LITE`] header says
/// `true`.
pub fn is_responses_lite(headers: &HeaderMap) -> bool {
    headers.get(RESPONSES_LITE).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
}

/// The shared upstream client.
pub struct Upstream {
    /// How keys without a pool proxy go out.
    direct: Direct,
    /// `default_base` split once for the direct client's URIs.
    default_split: Option<direct::Base>,
    /// Keys without a pool proxy when the environment sets a proxy (reqwest reads it), and the
    /// ChatGPT token endpoint.
    client: reqwest::Client,
    /// Keys whose pool has a proxy: a client per distinct proxy, and the keys that use it. Replaced
    /// whole when pools or keys change ([`Upstream::set_proxies`]); empty unless some pool has one.
    egress: arc_swap::ArcSwap<Egress>,
    /// Root certificates trusted beside the public ones (`Config::extra_roots_pem`: tests only).
    roots: Vec<reqwest::Certificate>,
    connect: Duration,
    default_base: String,
    /// `default_base` parsed once: most keys use it, and parsing a URL per request is measurable.
    default_url: Option<reqwest::Url>,
    first_byte: Duration,
    idle: Duration,
    /// The ChatGPT Codex backend, for plan keys without a base URL of their own.
    chatgpt_base: String,
    /// The token endpoint that refreshes a ChatGPT login.
    chatgpt_token_url: String,
}

/// How keys without a pool proxy go out. Either way, Responses-Lite requests have a pool of their
/// own, so that one never shares a provider connection with a request that is not.
#[expect(clippy::large_enum_variant, reason = "one per gateway, built once")]
enum Direct {
    /// hyper's client, when no proxy is set in the environment (`direct::environment_proxy`).
    Lean { plain: direct::Direct, lite: direct::Direct },
    /// reqwest, which reads the environment's proxy: `Upstream::client` for plain requests, and this.
    Reqwest { lite: reqwest::Client },
}

/// The pools' ways out: which keys go through which proxy.
#[derive(Default)]
struct Egress {
    /// Bounded by the keys there are (`pool::MAX_KEYS`).
    by_key: std::collections::HashMap<KeyId, Arc<Proxied>>,
}

/// One proxy and the client that goes through it.
pub struct Proxied {
    /// The proxy's URL as configured (`http://host:port`; it never holds credentials).
    url: String,
    /// `host:port`, as messages name it.
    shown: String,
    /// `user:password`, from the keychain (or the environment), sent as the proxy's basic auth.
    login: Option<crate::secrets::Secret>,
    /// The client through it, or why none could be built (every request through it then fails, naming
    /// the proxy: never sent direct).
    client: Result<reqwest::Client, String>,
    /// The same for Responses-Lite requests: connections of their own.
    lite: Result<reqwest::Client, String>,
}

impl Proxied {
    /// The proxy's URL (`http://host:port`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The proxy as messages name it (`host:port`).
    pub fn shown(&self) -> &str {
        &self.shown
    }
}

/// `url`'s `host:port` (the scheme's port when it names none).
fn host_port(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(parsed) => {
            let host = parsed.host_str().unwrap_or_default();
            parsed.port_or_known_default().map_or_else(|| host.to_owned(), |port| format!("{host}:{port}"))
        }
        Err(_) => crate::pools::safe_proxy(url),
    }
}

impl Upstream {
    /// Builds the client. Responses are requested compressed (gzip, zstd) and decoded here, so Keymux can
    /// read the streams it relays; clients on loopback get them uncompressed, with no `content-encoding`.
    /// `roots` (PEM) are trusted beside the public roots: only tests set them (a local TLS upstream).
    pub fn new(default_base: &str, timeouts: &Timeouts, pem_roots: &[String]) -> Result<Self, UpstreamError> {
        let bad = |detail: String| UpstreamError::BadBaseUrl { base: default_base.to_owned(), detail };
        let roots = pem_roots
            .iter()
            .map(|pem| reqwest::Certificate::from_pem(pem.as_bytes()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(e.to_string()))?;
        let connect = Duration::from_millis(timeouts.connect_ms);
        let client = build_client(connect, None, &roots).map_err(bad)?;
        let default_url = reqwest::Url::parse(default_base.trim_end_matches('/')).ok();
        let direct = if direct::environment_proxy(|name| std::env::var_os(name)) {
            Direct::Reqwest { lite: build_client(connect, None, &roots).map_err(bad)? }
        } else {
            let (plain, lite) = direct::Direct::pair(connect, &der_roots(pem_roots).map_err(bad)?).map_err(bad)?;
            Direct::Lean { plain, lite }
        };
        Ok(Self {
            direct,
            default_split: default_url.as_ref().and_then(direct::Base::split),
            client,
            egress: arc_swap::ArcSwap::from_pointee(Egress::default()),
            roots,
            connect,
            default_base: default_base.trim_end_matches('/').to_owned(),
            default_url,
            first_byte: Duration::from_millis(timeouts.first_byte_ms),
            idle: Duration::from_millis(timeouts.idle_ms),
            chatgpt_base: keymux_core::chatgpt::DEFAULT_BASE_URL.to_owned(),
            chatgpt_token_url: format!("{}/oauth/token", keymux_core::chatgpt::DEFAULT_AUTH_URL),
        })
    }

    /// Where ChatGPT plan keys go: the backend `base` (for keys without a base URL of their own), and
    /// the auth server `auth` that refreshes their logins.
    pub fn with_chatgpt(mut self, base: &str, auth: &str) -> Self {
        self.chatgpt_base = base.trim_end_matches('/').to_owned();
        self.chatgpt_token_url = format!("{}/oauth/token", auth.trim_end_matches('/'));
        self
    }

    /// Asks the token endpoint for a ChatGPT login's new tokens: the status and body it answered (the
    /// body bounded), or why it could not be asked. The body carries tokens: only the caller reads it.
    pub async fn refresh_login(&self, body: Vec<u8>) -> Result<(u16, Bytes), String> {
        let request = self
            .client
            .post(&self.chatgpt_token_url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .timeout(self.first_byte + self.idle);
        let response = request.send().await.map_err(|e| short_error(&e))?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(|e| short_error(&e))?;
        if bytes.len() > MAX_TOKEN_ANSWER {
            return Err("the token endpoint's answer is too large".into());
        }
        Ok((status, bytes))
    }

    /// Sets the proxy each key goes out through, with its login (`pools::Pools::proxies`); every other
    /// key goes direct. A client per distinct proxy and login, kept while they stay, built here (when
    /// pools or keys change), never per request.
    pub fn set_proxies(&self, wanted: &[(KeyId, String, Option<crate::secrets::Secret>)]) {
        let old = self.egress.load();
        let mut made: Vec<Arc<Proxied>> = Vec::new();
        let mut by_key = std::collections::HashMap::with_capacity(wanted.len());
        for (key, url, login) in wanted {
            let same = |p: &&Arc<Proxied>| &p.url == url && &p.login == login;
            let reuse = made.iter().chain(old.by_key.values()).find(same).cloned();
            let proxied = reuse.unwrap_or_else(|| {
                let client = build_client(self.connect, Some((url, login.as_ref())), &self.roots);
                if let Err(e) = &client {
                    tracing::warn!(proxy = %host_port(url), error = %e, "the proxy cannot be used; its keys' requests fail");
                }
                let lite = build_client(self.connect, Some((url, login.as_ref())), &self.roots);
                Arc::new(Proxied { url: url.clone(), shown: host_port(url), login: login.clone(), client, lite })
            });
            if !made.iter().any(|p| Arc::ptr_eq(p, &proxied)) {
                made.push(proxied.clone());
            }
            by_key.insert(key.clone(), proxied);
        }
        self.egress.store(Arc::new(Egress { by_key }));
    }

    /// The proxy `key` goes out through, if its pool has one.
    pub fn proxy_of(&self, key: &KeyId) -> Option<Arc<Proxied>> {
        let egress = self.egress.load();
        if egress.by_key.is_empty() {
            return None;
        }
        egress.by_key.get(key).cloned()
    }

    /// The connect timeout (also used for WebSocket handshakes).
    pub fn connect_timeout(&self) -> Duration {
        self.connect
    }

    /// The longest silence allowed between two chunks of a relayed body.
    pub fn idle_timeout(&self) -> Duration {
        self.idle
    }

    /// The base URL a key uses.
    pub fn base_for<'a>(&'a self, key: &'a KeyEntry) -> &'a str {
        let default = match key.provider {
            Provider::Chatgpt => &self.chatgpt_base,
            Provider::Openai | Provider::Azure => &self.default_base,
        };
        key.base_url.as_deref().map(|b| b.trim_end_matches('/')).unwrap_or(default)
    }

    /// The upstream URL of a request: the key's base URL followed by `path_and_query`.
    fn url_for(&self, key: &KeyEntry, path_and_query: &str) -> Result<reqwest::Url, UpstreamError> {
        if let (None, Some(base), false) = (&key.base_url, &self.default_url, key.provider == Provider::Chatgpt) {
            return Ok(extend(base, path_and_query));
        }
        let base = self.base_for(key);
        reqwest::Url::parse(&format!("{base}{path_and_query}"))
            .map_err(|e| UpstreamError::BadBaseUrl { base: base.to_owned(), detail: e.to_string() })
    }

    /// The URI of a request on the direct client: built from the split default base when URL parsing
    /// would leave it as it is, else parsed as reqwest parses it.
    fn uri_for(&self, key: &KeyEntry, path_and_query: &str) -> Result<http::Uri, UpstreamError> {
        if let (None, Some(split), false) = (&key.base_url, &self.default_split, key.provider == Provider::Chatgpt) {
            if let Some(uri) = split.uri(path_and_query) {
                return Ok(uri);
            }
        }
        let url = self.url_for(key, path_and_query)?;
        url.as_str().parse().map_err(|e: http::uri::InvalidUri| UpstreamError::BadBaseUrl {
            base: self.base_for(key).to_owned(),
            detail: e.to_string(),
        })
    }

    /// Sends one attempt with `key`. `path_and_query` is what follows `/v1` in the client's URL.
    pub async fn send(
        &self,
        key: &KeyEntry,
        method: Method,
        path_and_query: &str,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Answer, UpstreamError> {
        let base = self.base_for(key);
        let mut headers = headers;
        let mut body = body;
        if key.provider == Provider::Chatgpt {
            body = chatgpt_request(key, &method, path_and_query, &mut headers, body)
                .map_err(|detail| UpstreamError::ChatgptLogin { base: base.to_owned(), detail })?;
        } else {
            let (name, value) = auth_header(key);
            headers.insert(name, value);
        }
        // The Responses-Lite header belongs to the connection it comes on: such requests have a pool
        // of their own, direct or through a proxy.
        let lite = is_responses_lite(&headers);
        let proxied = self.proxy_of(&key.id);
        if let (None, Direct::Lean { plain, lite: lite_pool }) = (&proxied, &self.direct) {
            let uri = self.uri_for(key, path_and_query)?;
            let client = if lite { lite_pool } else { plain };
            return match tokio::time::timeout(self.first_byte, client.send(method, uri, headers, body)).await {
                Err(_) => Err(self.timed_out(base)),
                Ok(Ok(answer)) => Ok(answer.into()),
                Ok(Err(e)) => Err(no_answer(base, e.is_connect(), chain(&e))),
            };
        }
        let url = self.url_for(key, path_and_query)?;
        let client = match (proxied.as_deref(), &self.direct) {
            (None, Direct::Reqwest { lite: lite_pool }) if lite => lite_pool,
            (None, _) => &self.client,
            (Some(p), _) => match if lite { &p.lite } else { &p.client } {
                Ok(client) => client,
                Err(e) => {
                    return Err(UpstreamError::Proxy {
                        proxy: p.shown.clone(),
                        base: base.to_owned(),
                        detail: e.clone(),
                    })
                }
            },
        };
        let request = client.request(method, url).headers(headers).body(body);
        let sent = tokio::time::timeout(self.first_byte, request.send()).await;
        self.reqwest_answer(sent, base, proxied.as_deref())
    }

    /// No answer headers within the first-byte timeout.
    fn timed_out(&self, base: &str) -> UpstreamError {
        UpstreamError::FirstByteTimeout { base: base.to_owned(), secs: self.first_byte.as_secs() }
    }

    /// What a request sent through reqwest (direct or through a pool's proxy) came to.
    fn reqwest_answer(
        &self,
        sent: Result<reqwest::Result<reqwest::Response>, tokio::time::error::Elapsed>,
        base: &str,
        proxied: Option<&Proxied>,
    ) -> Result<Answer, UpstreamError> {
        match sent {
            Err(_) => Err(self.timed_out(base)),
            // The proxy's own refusal is never relayed as the provider's answer.
            Ok(Ok(response)) if response.status() == StatusCode::PROXY_AUTHENTICATION_REQUIRED && proxied.is_some() => {
                let proxy = proxied.map(|p| p.shown.clone()).unwrap_or_default();
                let detail = "the proxy refused the request: it wants a user and password (407); set them with the \
                              pool's proxy URL (`keymux pool set NAME --proxy http://user:password@host:port`)";
                Err(UpstreamError::Proxy { proxy, base: base.to_owned(), detail: detail.to_owned() })
            }
            Ok(Ok(response)) => Ok(response.into()),
            // Through a proxy, a request that got no answer failed on its way through it (a connection
            // to the proxy refused, or one it kept reset when it stopped): the error names it.
            Ok(Err(e)) => match proxied {
                Some(p) => {
                    Err(UpstreamError::Proxy { proxy: p.shown.clone(), base: base.to_owned(), detail: short_error(&e) })
                }
                None => Err(no_answer(base, e.is_connect(), short_error(&e))),
            },
        }
    }
}

/// Most bytes of the token endpoint's answer read.
const MAX_TOKEN_ANSWER: usize = 256 * 1024;

/// A request on a ChatGPT plan key as its backend takes it: the login's access token and account in
/// the headers, and a Responses body adapted (`chatgpt::adapt_request`). The error never quotes a token.
fn chatgpt_request(
    key: &KeyEntry,
    method: &Method,
    path_and_query: &str,
    headers: &mut HeaderMap,
    body: Bytes,
) -> Result<Bytes, String> {
    use keymux_core::chatgpt::{adapt_request, Login, ACCOUNT_HEADER};
    let login = Login::from_secret(&key.secret)?;
    let bearer = HeaderValue::from_str(&format!("Bearer {}", login.access_token));
    let account = HeaderValue::from_str(&login.account_id);
    let (Ok(mut bearer), Ok(account)) = (bearer, account) else {
        return Err("the ChatGPT login holds a token that cannot be sent; import it again".into());
    };
    bearer.set_sensitive(true);
    headers.insert(axum::http::header::AUTHORIZATION, bearer);
    headers.insert(HeaderName::from_static(ACCOUNT_HEADER), account);
    let path = path_and_query.split('?').next().unwrap_or_default();
    if *method != Method::POST || path != "/responses" {
        return Ok(body);
    }
    let adapted = adapt_request(&body).ok_or("the request body is not a JSON object")?;
    headers.insert(axum::http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(Bytes::from(adapted))
}

/// Most bytes of a proxy's answer to `CONNECT` read.
const MAX_CONNECT_ANSWER: usize = 8 * 1024;

/// A TCP stream to `uri`'s host through `proxy`, for a WebSocket: the handshake, and TLS for `wss://`,
/// then go over it. An `http://` proxy is asked to `CONNECT host:port`; a `socks5://` or `socks5h://`
/// proxy to connect (RFC 1928, with its user and password by RFC 1929 when it has a login). A tunnel
/// inside TLS to an `https://` proxy is not made. The error says what the proxy did, never anything
/// the URL may hold.
pub async fn tunnel(proxy: &Proxied, uri: &http::Uri) -> Result<tokio::net::TcpStream, String> {
    let host = uri.host().ok_or("the WebSocket URL has no host")?;
    let port = uri.port_u16().unwrap_or(if uri.scheme_str() == Some("wss") { 443 } else { 80 });
    let scheme = proxy.url.split_once("://").map_or("", |(scheme, _)| scheme);
    if !matches!(scheme, "http" | "socks5" | "socks5h") {
        return Err("a WebSocket goes through an http:// or SOCKS5 proxy only; use one of those for this pool".into());
    }
    let mut stream = tokio::net::TcpStream::connect(&proxy.shown).await.map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    match scheme {
        "http" => connect_through_http(&mut stream, proxy, host, port).await?,
        _ => socks5::connect(&mut stream, proxy.login.as_ref(), host, port, scheme == "socks5h").await?,
    }
    Ok(stream)
}

async fn connect_through_http(
    stream: &mut tokio::net::TcpStream,
    proxy: &Proxied,
    host: &str,
    port: u16,
) -> Result<(), String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let target = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let authorization = proxy.login.as_ref().map_or_else(String::new, |login| {
        use base64::Engine as _;
        format!("Proxy-Authorization: Basic {}\r\n", base64::engine::general_purpose::STANDARD.encode(login.expose()))
    });
    let ask = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{authorization}\r\n");
    stream.write_all(ask.as_bytes()).await.map_err(|e| e.to_string())?;
    // Byte by byte up to the blank line: nothing after it may be taken from the tunnel.
    let mut answer = Vec::with_capacity(256);
    while !answer.ends_with(b"\r\n\r\n") {
        if answer.len() == MAX_CONNECT_ANSWER {
            return Err("the proxy's answer to CONNECT is too long".into());
        }
        let byte = stream.read_u8().await.map_err(|_| "the proxy closed the connection before answering CONNECT")?;
        answer.push(byte);
    }
    let status_line = String::from_utf8_lossy(&answer);
    let status = status_line.split_whitespace().nth(1).unwrap_or_default().to_owned();
    if !status.starts_with('2') {
        return Err(format!("the proxy answered CONNECT with status {status}"));
    }
    Ok(())
}

/// The client side of SOCKS5's connect (RFC 1928), with a user and password (RFC 1929) when the proxy
/// has a login, for the WebSocket tunnel. HTTP requests go through reqwest's own.
mod socks5 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpStream;

    use crate::secrets::Secret;

    const VERSION: u8 = 5;
    const NO_AUTH: u8 = 0;
    const USER_PASSWORD: u8 = 2;
    const CONNECT: u8 = 1;

    fn io(e: std::io::Error) -> String {
        format!("the SOCKS5 proxy closed the connection ({e})")
    }

    /// Asks the proxy on `stream` to connect to `host:port`; the name goes to the proxy to resolve
    /// when `remote_names` (`socks5h://`), else Keymux resolves it.
    pub async fn connect(
        stream: &mut TcpStream,
        login: Option<&Secret>,
        host: &str,
        port: u16,
        remote_names: bool,
    ) -> Result<(), String> {
        let method = if login.is_some() { USER_PASSWORD } else { NO_AUTH };
        stream.write_all(&[VERSION, 1, method]).await.map_err(io)?;
        let mut chosen = [0u8; 2];
        stream.read_exact(&mut chosen).await.map_err(io)?;
        if chosen != [VERSION, method] {
            return Err(match login {
                Some(_) => "the SOCKS5 proxy does not take a user and password".to_owned(),
                None => "the SOCKS5 proxy asks for a login; set the pool's proxy with a user and password".to_owned(),
            });
        }
        if let Some(login) = login {
            authenticate(stream, login).await?;
        }
        let mut ask = vec![VERSION, CONNECT, 0];
        ask.extend(address(host, port, remote_names).await?);
        stream.write_all(&ask).await.map_err(io)?;
        let mut head = [0u8; 4];
        stream.read_exact(&mut head).await.map_err(io)?;
        if head[1] != 0 {
            return Err(format!("the SOCKS5 proxy refused to connect ({})", reply(head[1])));
        }
        // The address the proxy bound: read past it.
        let rest = match head[3] {
            1 => 4,
            4 => 16,
            3 => usize::from(stream.read_u8().await.map_err(io)?),
            _ => return Err("the SOCKS5 proxy answered with an address of no known kind".into()),
        };
        let mut skip = vec![0u8; rest + 2];
        stream.read_exact(&mut skip).await.map_err(io)?;
        Ok(())
    }

    async fn authenticate(stream: &mut TcpStream, login: &Secret) -> Result<(), String> {
        let (user, password) = login.expose().split_once(':').unwrap_or((login.expose(), ""));
        let (user, password) = (user.as_bytes(), password.as_bytes());
        let (Ok(user_len), Ok(password_len)) = (u8::try_from(user.len()), u8::try_from(password.len())) else {
            return Err("the SOCKS5 proxy's user or password is longer than 255 bytes".into());
        };
        let mut ask = vec![1, user_len];
        ask.extend_from_slice(user);
        ask.push(password_len);
        ask.extend_from_slice(password);
        stream.write_all(&ask).await.map_err(io)?;
        let mut answer = [0u8; 2];
        stream.read_exact(&mut answer).await.map_err(io)?;
        if answer[1] != 0 {
            return Err("the SOCKS5 proxy refused the pool's user and password".into());
        }
        Ok(())
    }

    async fn address(host: &str, port: u16, remote_names: bool) -> Result<Vec<u8>, String> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let ip = match bare.parse::<std::net::IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) if remote_names => None,
            Err(_) => {
                let found = tokio::net::lookup_host((bare, port)).await.map_err(|e| format!("{bare}: {e}"))?.next();
                Some(found.ok_or_else(|| format!("{bare} has no address"))?.ip())
            }
        };
        let mut out = match ip {
            Some(std::net::IpAddr::V4(v4)) => [&[1u8][..], &v4.octets()].concat(),
            Some(std::net::IpAddr::V6(v6)) => [&[4u8][..], &v6.octets()].concat(),
            None => {
                let len = u8::try_from(bare.len()).map_err(|_| "the host name is too long for SOCKS5")?;
                [&[3u8, len][..], bare.as_bytes()].concat()
            }
        };
        out.extend_from_slice(&port.to_be_bytes());
        Ok(out)
    }

    fn reply(code: u8) -> &'static str {
        match code {
            1 => "general failure",
            2 => "not allowed by its rules",
            3 => "network unreachable",
            4 => "host unreachable",
            5 => "connection refused",
            6 => "TTL expired",
            7 => "command not supported",
            8 => "address type not supported",
            _ => "an unknown reply",
        }
    }
}

/// A provider client: direct, or through `proxy` (every request, whatever the environment's
/// `NO_PROXY` says). The direct client keeps reqwest's reading of `HTTPS_PROXY`/`HTTP_PROXY`/
/// `ALL_PROXY` from the environment, as Keymux always did; a pool's proxy replaces it for its keys.
fn build_client(
    connect: Duration,
    proxy: Option<(&String, Option<&crate::secrets::Secret>)>,
    roots: &[reqwest::Certificate],
) -> Result<reqwest::Client, String> {
    #[expect(clippy::disallowed_methods, reason = "this is the one place the upstream client is built")]
    let mut builder = reqwest::Client::builder()
        .connect_timeout(connect)
        .pool_idle_timeout(Duration::from_secs(90))
        .tcp_nodelay(true)
        .gzip(true)
        .zstd(true)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(USER_AGENT);
    for root in roots {
        builder = builder.add_root_certificate(root.clone());
    }
    if let Some((url, login)) = proxy {
        let mut proxy = reqwest::Proxy::all(url.as_str()).map_err(|e| e.to_string())?;
        if let Some(login) = login {
            let (user, password) = login.expose().split_once(':').unwrap_or((login.expose(), ""));
            proxy = proxy.basic_auth(user, password);
        }
        builder = builder.no_proxy().proxy(proxy);
    }
    builder.build().map_err(|e| e.to_string())
}

/// `base` (which has no query) with `path_and_query` appended to its path: the same URL as parsing
/// `base + path_and_query`, without parsing the scheme and host again.
fn extend(base: &reqwest::Url, path_and_query: &str) -> reqwest::Url {
    let (path, query) = match path_and_query.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path_and_query, None),
    };
    let mut url = base.clone();
    let joined = format!("{}{path}", base.path().trim_end_matches('/'));
    url.set_path(&joined);
    url.set_query(query);
    url
}

/// A small client for Keymux's own local API (the CLI asking a running gateway for its status).
pub fn local_client(timeout: Duration) -> Option<reqwest::Client> {
    #[expect(clippy::disallowed_methods, reason = "a loopback-only client for Keymux's own API, not a provider")]
    let builder = reqwest::Client::builder();
    builder.timeout(timeout).no_proxy().build().ok()
}

pub(crate) fn auth_header(key: &KeyEntry) -> (HeaderName, HeaderValue) {
    let secret = key.secret.expose();
    let (name, value) = match key.provider {
        Provider::Openai => (axum::http::header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {secret}"))),
        Provider::Azure => (HeaderName::from_static("api-key"), HeaderValue::from_str(secret)),
        // A plan's login is sent by `chatgpt_request`; a WebSocket never goes to a plan.
        Provider::Chatgpt => (axum::http::header::AUTHORIZATION, HeaderValue::from_str("")),
    };
    // Secrets are validated to printable ASCII without spaces when added; a value that still fails is
    // sent as an empty credential, which the provider rejects as invalid (and the key is flagged).
    let mut value = value.unwrap_or_else(|_| HeaderValue::from_static(""));
    value.set_sensitive(true);
    (name, value)
}

/// The error's chain as one line, without the URL (which may carry a query): reqwest's own message
/// names it, so only what is below it is said.
fn short_error(e: &reqwest::Error) -> String {
    use std::error::Error as _;
    e.source().map_or_else(|| "request failed".to_owned(), chain)
}

/// A request sent direct that got no answer: it could not connect, or it failed after connecting.
fn no_answer(base: &str, connect: bool, detail: String) -> UpstreamError {
    let base = base.to_owned();
    if connect {
        UpstreamError::Connect { base, detail }
    } else {
        UpstreamError::Transport { base, detail }
    }
}

/// An error and every error below it, as one line.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        parts.push(s.to_string());
        source = s.source();
    }
    parts.join(": ")
}

/// The DER of each PEM certificate in `pems`, for the direct client's TLS.
fn der_roots(pems: &[String]) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject as _;
    pems.iter()
        .map(|pem| rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| e.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extending_the_parsed_base_gives_the_url_parsing_would() {
        let paths = [
            "/responses",
            "/responses/resp_km1abc/input_items?limit=20&order=asc",
            "/models",
            "/responses/a%2Fb",
            "/files/x y?q=a b",
            "/chat/completions?",
            "/a\\b",
            "/emoji/\u{1f600}",
        ];
        for base in ["https://api.openai.com/v1", "http://127.0.0.1:8080/v1/", "https://r.openai.azure.com/openai/v1"] {
            let parsed = reqwest::Url::parse(base.trim_end_matches('/')).expect("base");
            for path in paths {
                let expected = reqwest::Url::parse(&format!("{}{path}", base.trim_end_matches('/'))).expect("url");
                assert_eq!(extend(&parsed, path), expected, "{base} + {path}");
            }
        }
    }

    #[test]
    fn header_policy() {
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("Bearer local"));
        h.insert("x-codex-turn-state", HeaderValue::from_static("ts"));
        h.insert("session-id", HeaderValue::from_static("s"));
        h.insert("connection", HeaderValue::from_static("keep-alive"));
        h.insert("accept-encoding", HeaderValue::from_static("zstd,gzip"));
        h.insert("content-encoding", HeaderValue::from_static("zstd"));
        h.insert("openai-beta", HeaderValue::from_static("responses_websockets=2026-02-06"));
        let out = forward_request_headers(&h);
        assert!(out.get("authorization").is_none());
        assert!(out.get("connection").is_none());
        assert!(out.get("accept-encoding").is_none());
        assert!(out.get("content-encoding").is_none(), "the body goes upstream decoded");
        assert_eq!(out.get("x-codex-turn-state").map(|v| v.as_bytes()), Some(&b"ts"[..]));
        assert!(out.get("session-id").is_some());
        assert!(out.get("openai-beta").is_some());
    }
}
