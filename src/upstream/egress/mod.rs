//! Egress: how a connection to a provider leaves this machine, and nothing else (no credentials of a
//! provider, no answers). One [`Connector`] opens every provider connection, for the HTTP client (as
//! hyper's connector) and for WebSockets ([`Connector::open`]) alike, by the key's [`Way`]:
//!
//! * direct;
//! * through an HTTP (or HTTPS) proxy: a `CONNECT` tunnel ([`tunnel`], the one function both
//!   transports use), or, for a plain `http://` request of the HTTP client, the proxy itself, asked
//!   in absolute form as HTTP proxies expect;
//! * through a SOCKS5 proxy (`socks5://`: Keymux resolves the host; `socks5h://`: the proxy does),
//!   with hyper-util's SOCKS5 client, the one reqwest uses;
//! * as the environment says (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, read as reqwest
//!   and curl read them), for keys whose pool sets no proxy.
//!
//! A proxy's user and password (from the keychain) go as its basic auth; an error names the proxy
//! by `host:port`, never by anything its URL may hold.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Uri};
use hyper_util::client::legacy::connect::proxy::SocksV5;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::{Intercept, Matcher};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower::Service as _;

use crate::secrets::Secret;

mod conn;

pub use conn::Conn;

/// Why a connection could not be made.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Connects to a proxy: plain, or TLS for an `https://` proxy.
type ToProxy = hyper_rustls::HttpsConnector<HttpConnector>;

/// A connection through a proxy's tunnel (TLS to the proxy for an `https://` proxy).
type ProxyStream = hyper_rustls::MaybeHttpsStream<TokioIo<TcpStream>>;

/// Which way a key's connections go out.
#[derive(Clone)]
pub enum Way {
    /// Straight to the provider.
    Direct,
    /// Through the key's pool's proxy, always (whatever `NO_PROXY` says).
    Through(Arc<Proxy>),
    /// As the environment's proxy variables say, per destination.
    Environment(Arc<Matcher>),
}

impl Way {
    /// The environment's proxy, when it sets one (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, either
    /// case); else direct.
    pub fn from_environment(read: impl Fn(&str) -> Option<std::ffi::OsString>) -> Self {
        const VARIABLES: [&str; 3] = ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"];
        let set = VARIABLES
            .iter()
            .flat_map(|name| [name.to_string(), name.to_ascii_lowercase()])
            .any(|name| read(&name).is_some_and(|value| !value.is_empty()));
        if set {
            Self::Environment(Arc::new(Matcher::from_env()))
        } else {
            Self::Direct
        }
    }

    /// The proxy a connection to `dst` goes through, if any.
    fn proxy_for(&self, dst: &Uri) -> Option<Arc<Proxy>> {
        match self {
            Self::Direct => None,
            Self::Through(proxy) => Some(proxy.clone()),
            Self::Environment(matcher) => matcher.intercept(dst).and_then(|i| Proxy::intercepted(&i)).map(Arc::new),
        }
    }
}

/// The kinds of proxy Keymux speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Http,
    Socks { remote_names: bool },
}

/// One proxy.
pub struct Proxy {
    /// `host:port`, as messages name it.
    shown: String,
    /// Where to connect: its scheme (`http` or `https`; `http` for SOCKS), host and port.
    uri: Uri,
    kind: Kind,
    /// `user:password`, sent as its basic auth (HTTP) or its user and password (SOCKS5).
    login: Option<Secret>,
}

impl Proxy {
    /// A proxy from a pool's `proxy` URL and its login; why it cannot be used, else.
    pub fn new(url: &str, login: Option<Secret>) -> Result<Self, String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("the proxy URL cannot be read: {e}"))?;
        let host = parsed.host_str().filter(|h| !h.is_empty()).ok_or("the proxy URL has no host")?;
        let (kind, scheme, default_port) = match parsed.scheme() {
            "http" => (Kind::Http, "http", 80),
            "https" => (Kind::Http, "https", 443),
            "socks5" => (Kind::Socks { remote_names: false }, "http", 1080),
            "socks5h" => (Kind::Socks { remote_names: true }, "http", 1080),
            other => return Err(format!("a proxy of scheme {other} is not one Keymux speaks")),
        };
        let port = parsed.port().unwrap_or(default_port);
        let authority =
            if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.to_owned() };
        let uri = format!("{scheme}://{authority}:{port}").parse().map_err(|e| format!("the proxy URL: {e}"))?;
        Ok(Self { shown: format!("{authority}:{port}"), uri, kind, login })
    }

    /// The proxy the environment names for a destination.
    fn intercepted(intercept: &Intercept) -> Option<Self> {
        let uri = intercept.uri();
        let login = intercept.raw_auth().map(|(user, password)| Secret::new(format!("{user}:{password}")));
        let shown = uri.authority().map(|a| a.as_str().to_owned()).unwrap_or_default();
        let url = format!("{}://{shown}", uri.scheme_str().unwrap_or("http"));
        let mut proxy = Self::new(&url, login).ok()?;
        if let (Some(basic), None) = (intercept.basic_auth(), &proxy.login) {
            proxy.login = basic_login(basic);
        }
        Some(proxy)
    }

    /// The proxy as messages name it (`host:port`).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// `Proxy-Authorization` for an HTTP proxy with a login.
    fn basic_auth(&self) -> Option<HeaderValue> {
        use base64::Engine as _;
        let login = self.login.as_ref()?;
        let encoded = base64::engine::general_purpose::STANDARD.encode(login.expose());
        let mut value = HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
        value.set_sensitive(true);
        Some(value)
    }
}

/// `user:password` from a `Basic` header value.
fn basic_login(value: &HeaderValue) -> Option<Secret> {
    use base64::Engine as _;
    let encoded = value.to_str().ok()?.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
    String::from_utf8(decoded).ok().map(Secret::new)
}

/// Opens provider connections one way: hyper's connector for the HTTP client, and
/// [`Connector::open`] for WebSockets.
#[derive(Clone)]
pub struct Connector {
    way: Way,
    tcp: HttpConnector,
    to_proxy: ToProxy,
    timeout: Duration,
}

impl Connector {
    /// A connector that goes `way`, with `connect` as its timeout (the proxy's handshake included)
    /// and `tls` for an `https://` proxy.
    pub fn new(way: Way, connect: Duration, tls: rustls::ClientConfig) -> Self {
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(connect));
        tcp.set_keepalive(Some(Duration::from_secs(15)));
        tcp.set_keepalive_interval(Some(Duration::from_secs(15)));
        tcp.set_keepalive_retries(Some(3));
        let to_proxy = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp.clone());
        Self { way, tcp, to_proxy, timeout: connect }
    }

    /// The way it goes.
    pub fn way(&self) -> &Way {
        &self.way
    }

    /// `Proxy-Authorization` for a plain `http://` request sent to an HTTP proxy itself (absolute
    /// form): the proxy reads it, the provider never sees it.
    pub fn request_auth(&self, dst: &Uri) -> Option<HeaderValue> {
        if dst.scheme() != Some(&http::uri::Scheme::HTTP) {
            return None;
        }
        self.way.proxy_for(dst).filter(|p| p.kind == Kind::Http).and_then(|p| p.basic_auth())
    }

    /// A connection to `dst`'s host and port, within the connect timeout. Through an HTTP proxy, a
    /// plain `http://` destination is the proxy itself unless `tunnel_plain` (a WebSocket's tunnel);
    /// any other goes through a `CONNECT` tunnel.
    pub async fn open(self, dst: Uri, tunnel_plain: bool) -> Result<Conn, BoxError> {
        let timeout = self.timeout;
        match tokio::time::timeout(timeout, self.connect(dst, tunnel_plain)).await {
            Ok(connected) => connected,
            Err(_) => Err(format!("no connection within {}s", timeout.as_secs()).into()),
        }
    }

    async fn connect(mut self, dst: Uri, tunnel_plain: bool) -> Result<Conn, BoxError> {
        let dst = explicit(&dst)?;
        let Some(proxy) = self.way.proxy_for(&dst) else {
            return Ok(Conn::plain(self.tcp.call(dst).await?, false));
        };
        match proxy.kind {
            Kind::Http if !tunnel_plain && dst.scheme() == Some(&http::uri::Scheme::HTTP) => {
                let to_proxy = self.to_proxy.call(proxy.uri.clone()).await.map_err(|e| reaching(&proxy, &*e))?;
                Ok(Conn::new(to_proxy, true))
            }
            Kind::Http => Ok(Conn::new(tunnel(self.to_proxy, &proxy, &dst).await?, false)),
            Kind::Socks { remote_names } => Ok(Conn::plain(socks(self.tcp, &proxy, dst, remote_names).await?, false)),
        }
    }
}

impl tower::Service<Uri> for Connector {
    type Response = Conn;
    type Error = BoxError;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Conn, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), BoxError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        Box::pin(self.clone().open(dst, false))
    }
}

/// Most bytes of a proxy's answer to `CONNECT` read.
const MAX_CONNECT_ANSWER: usize = 8 * 1024;

/// A `CONNECT` tunnel through an HTTP (or HTTPS) proxy to `dst`'s host and port, with the proxy's
/// login: the one way through an HTTP proxy for every HTTPS request and every WebSocket. The answer is
/// read up to its blank line and no further: nothing after it may be taken from the tunnel.
pub async fn tunnel(mut to_proxy: ToProxy, proxy: &Proxy, dst: &Uri) -> Result<ProxyStream, BoxError> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let stream = to_proxy.call(proxy.uri.clone()).await.map_err(|e| reaching(proxy, &*e))?;
    let mut io = TokioIo::new(stream);
    let target = format!("{}:{}", dst.host().ok_or("no host")?, dst.port_u16().ok_or("no port")?);
    let authorization = proxy.basic_auth().map_or_else(String::new, |auth| {
        format!("Proxy-Authorization: {}\r\n", String::from_utf8_lossy(auth.as_bytes()))
    });
    let ask = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{authorization}\r\n");
    io.write_all(ask.as_bytes()).await.map_err(|e| format!("the proxy closed the connection ({e})"))?;
    let mut answer = Vec::with_capacity(256);
    while !answer.ends_with(b"\r\n\r\n") {
        if answer.len() == MAX_CONNECT_ANSWER {
            return Err("the proxy's answer to CONNECT is too long".into());
        }
        let byte = io.read_u8().await.map_err(|_| "the proxy closed the connection before answering CONNECT")?;
        answer.push(byte);
    }
    let status_line = String::from_utf8_lossy(&answer);
    match status_line.split_whitespace().nth(1).unwrap_or_default() {
        status if status.starts_with('2') => Ok(io.into_inner()),
        "407" => Err("the proxy refused the tunnel: it wants a user and password (407); set them with the pool's \
                      proxy URL (`keymux pool set NAME --proxy http://user:password@host:port`)"
            .into()),
        status => Err(format!("the proxy answered CONNECT with status {status}").into()),
    }
}

/// A connection to `dst` through a SOCKS5 proxy (hyper-util's client), the host resolved here unless
/// `remote_names`. The connection to the proxy is made first, so its failure names the proxy.
async fn socks(
    mut tcp: HttpConnector,
    proxy: &Proxy,
    dst: Uri,
    remote_names: bool,
) -> Result<TokioIo<TcpStream>, BoxError> {
    let dst = if remote_names { dst } else { resolved(&dst).await? };
    let to_proxy = tcp.call(proxy.uri.clone()).await.map_err(|e| reaching(proxy, &e))?;
    let mut once = Some(to_proxy);
    let connected = tower::service_fn(move |_: Uri| {
        let stream = once.take().ok_or_else(|| std::io::Error::other("one connection per handshake"));
        std::future::ready(stream)
    });
    let mut socks = SocksV5::new(proxy.uri.clone(), connected).local_dns(false);
    if let Some(login) = &proxy.login {
        let (user, password) = login.expose().split_once(':').unwrap_or((login.expose(), ""));
        socks = socks.with_auth(user.to_owned(), password.to_owned());
    }
    socks.call(dst).await.map_err(|e| format!("the SOCKS5 proxy {} refused to connect ({e})", proxy.shown).into())
}

/// `dst` with its host resolved to an address (the first the system gives).
async fn resolved(dst: &Uri) -> Result<Uri, BoxError> {
    let host = dst.host().ok_or("no host")?.trim_start_matches('[').trim_end_matches(']');
    let port = dst.port_u16().ok_or("no port")?;
    if host.parse::<std::net::IpAddr>().is_ok() {
        return Ok(dst.clone());
    }
    let found = tokio::net::lookup_host((host, port)).await.map_err(|e| format!("{host}: {e}"))?.next();
    let addr = found.ok_or_else(|| format!("{host} has no address"))?;
    let scheme = dst.scheme_str().unwrap_or("http");
    Ok(format!("{scheme}://{addr}").parse()?)
}

/// `dst` as the connectors take it: `http` or `https` (a WebSocket's `ws` and `wss` mapped to them),
/// with its port written out.
fn explicit(dst: &Uri) -> Result<Uri, BoxError> {
    let (scheme, port) = match dst.scheme_str() {
        Some("https" | "wss") => ("https", 443),
        Some("http" | "ws") | None => ("http", 80),
        Some(other) => return Err(format!("a provider URL of scheme {other} cannot be reached").into()),
    };
    let host = dst.host().ok_or("the provider URL has no host")?;
    let port = dst.port_u16().unwrap_or(port);
    let path = dst.path_and_query().map_or("/", |p| p.as_str());
    Ok(format!("{scheme}://{host}:{port}{path}").parse()?)
}

/// The proxy could not be reached at all.
fn reaching(proxy: &Proxy, cause: &(dyn std::error::Error + 'static)) -> BoxError {
    format!("could not connect to the proxy {}: {}", proxy.shown, crate::upstream::chain(cause)).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_url_gives_where_to_connect_and_how_it_is_named() {
        let p = Proxy::new("http://proxy.corp:3128", None).expect("http");
        assert_eq!(
            (p.uri.to_string().as_str(), p.shown(), p.kind),
            ("http://proxy.corp:3128/", "proxy.corp:3128", Kind::Http)
        );
        let s = Proxy::new("socks5h://[::1]", None).expect("socks");
        assert_eq!((s.shown(), s.kind), ("[::1]:1080", Kind::Socks { remote_names: true }));
        assert_eq!(Proxy::new("https://p.example", None).expect("https").uri.to_string(), "https://p.example:443/");
        assert!(Proxy::new("socks4://p:1", None).is_err());
    }

    #[test]
    fn a_websockets_url_is_reached_as_http_with_its_port() {
        let uri = |s: &str| explicit(&s.parse().expect("uri")).expect("explicit").to_string();
        assert_eq!(uri("wss://api.openai.com/v1/responses"), "https://api.openai.com:443/v1/responses");
        assert_eq!(uri("ws://127.0.0.1:9/v1/responses"), "http://127.0.0.1:9/v1/responses");
        assert_eq!(uri("https://[::1]/x?y=1"), "https://[::1]:443/x?y=1");
    }

    #[test]
    fn only_a_plain_request_through_an_http_proxy_carries_its_login() {
        let login = Some(Secret::new("alice:pw"));
        let tls = crate::upstream::client::tls(&[]).expect("tls");
        let through = |url: &str| {
            let way = Way::Through(Arc::new(Proxy::new(url, login.clone()).expect("proxy")));
            Connector::new(way, Duration::from_secs(1), tls.clone())
        };
        let http: Uri = "http://127.0.0.1:9/v1/models".parse().expect("uri");
        let https: Uri = "https://api.openai.com/v1/models".parse().expect("uri");
        let auth = through("http://p:1").request_auth(&http).expect("auth");
        assert_eq!(basic_login(&auth).map(|s| s.expose().to_owned()).as_deref(), Some("alice:pw"));
        assert!(auth.is_sensitive());
        assert!(through("http://p:1").request_auth(&https).is_none(), "inside a tunnel the proxy reads nothing");
        assert!(through("socks5://p:1").request_auth(&http).is_none());
        assert!(Connector::new(Way::Direct, Duration::from_secs(1), tls).request_auth(&http).is_none());
    }
}
