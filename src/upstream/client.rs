//! The client of keys that go out direct: hyper's pooled client over rustls (the public roots, and
//! the extra ones tests trust), HTTP/1.1 or HTTP/2 as the provider's TLS offers, answers decoded
//! (gzip, zstd) by the same layer reqwest uses, and the same connection settings as Keymux's reqwest
//! clients (connect timeout, no-delay, TCP keep-alive, 90 s idle pool).
//!
//! Every JSON and streamed request takes it, so it leaves out what Keymux never uses: redirects (the
//! provider's answer is relayed as it is), retries (failover is Keymux's own), URL parsing per request
//! (the default base URL is split once; `uri` checks the rest is already what URL parsing would
//! give), and the proxy matcher. It is used only when no proxy is set in the environment
//! ([`environment_proxy`]); then, and for pools with a proxy, requests go through reqwest as before.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, Method, Uri};
use bytes::Bytes;
use http::uri::{Authority, PathAndQuery, Scheme};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower::ServiceExt as _;
use tower_http::decompression::{Decompression, DecompressionBody};

/// The client with its layers, as one request takes it.
type Service = Decompression<Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>>;

/// An answer as it came, its body decoded as it is read.
pub type Answered = http::Response<DecompressionBody<Incoming>>;

/// Why a request got no answer: hyper's error, with the connector's below it.
pub type Failed = hyper_util::client::legacy::Error;

/// The direct client.
pub struct Direct {
    service: Service,
}

/// The environment variables that make reqwest send a request through a proxy (either case).
const PROXY_VARIABLES: [&str; 3] = ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"];

/// Whether the environment sets a proxy for requests (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, in
/// either case): then keys without a pool proxy keep going through reqwest, which reads them (and
/// `NO_PROXY`) as Keymux always did.
pub fn environment_proxy(read: impl Fn(&str) -> Option<std::ffi::OsString>) -> bool {
    PROXY_VARIABLES
        .iter()
        .flat_map(|name| [name.to_string(), name.to_ascii_lowercase()])
        .any(|name| read(&name).is_some_and(|value| !value.is_empty()))
}

impl Direct {
    /// Builds two clients with connections of their own (plain requests, and Responses-Lite ones) over
    /// one TLS configuration: `roots` (DER) trusted beside the public roots.
    pub fn pair(
        connect: Duration,
        roots: &[rustls::pki_types::CertificateDer<'static>],
    ) -> Result<(Self, Self), String> {
        let tls = tls(roots)?;
        Ok((Self::new(connect, tls.clone()), Self::new(connect, tls)))
    }

    fn new(connect: Duration, tls: rustls::ClientConfig) -> Self {
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(connect));
        tcp.set_keepalive(Some(Duration::from_secs(15)));
        tcp.set_keepalive_interval(Some(Duration::from_secs(15)));
        tcp.set_keepalive_retries(Some(3));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(tcp);
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Self { service: Decompression::new(client).no_br().no_deflate().gzip(true).zstd(true) }
    }

    /// Sends one request. `headers` are sent as they are, with what reqwest adds when they lack it
    /// (`user-agent`, `accept`; the decoding layer adds `accept-encoding`).
    pub async fn send(
        &self,
        method: Method,
        uri: Uri,
        mut headers: HeaderMap,
        body: Bytes,
    ) -> Result<Answered, Failed> {
        headers.entry(http::header::USER_AGENT).or_insert(HeaderValue::from_static(super::USER_AGENT));
        headers.entry(http::header::ACCEPT).or_insert(HeaderValue::from_static("*/*"));
        let mut request = http::Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        *request.headers_mut() = headers;
        self.service.clone().oneshot(request).await
    }
}

/// rustls with the public roots and `roots` beside them.
fn tls(roots: &[rustls::pki_types::CertificateDer<'static>]) -> Result<rustls::ClientConfig, String> {
    let mut trusted = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    for root in roots {
        trusted.add(root.clone()).map_err(|e| format!("an extra root certificate cannot be used: {e}"))?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(trusted)
        .with_no_client_auth())
}

/// A base URL split once: the scheme, the host and port, and the path that every request's own path
/// follows.
pub struct Base {
    scheme: Scheme,
    authority: Authority,
    path: String,
}

impl Base {
    /// `base` split, when it is an `http` or `https` URL that URL parsing leaves as it is written
    /// (then a request's URI built from it is the one reqwest would send).
    pub fn split(base: &url::Url) -> Option<Self> {
        let scheme = match base.scheme() {
            "https" => Scheme::HTTPS,
            "http" => Scheme::HTTP,
            _ => return None,
        };
        if base.query().is_some() || base.fragment().is_some() || !base.username().is_empty() {
            return None;
        }
        let authority = Authority::try_from(&base[url::Position::BeforeHost..url::Position::AfterPort]).ok()?;
        Some(Self { scheme, authority, path: base.path().trim_end_matches('/').to_owned() })
    }

    /// The URI of `path_and_query` under this base, when every byte of it is one URL parsing keeps
    /// as it is (else `None`, and the caller parses the URL).
    pub fn uri(&self, path_and_query: &str) -> Option<Uri> {
        if !path_and_query.starts_with('/') || !path_and_query.bytes().all(kept_by_url_parsing) {
            return None;
        }
        let mut joined = String::with_capacity(self.path.len() + path_and_query.len());
        joined.push_str(&self.path);
        joined.push_str(path_and_query);
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        parts.path_and_query = Some(PathAndQuery::try_from(joined).ok()?);
        Uri::from_parts(parts).ok()
    }
}

/// Whether URL parsing keeps this byte of a path or query as it is: unreserved characters, the
/// delimiters a path and query use, and `%` (an escape stays as written). Anything else (spaces,
/// quotes, `\`, `'`, `#`, non-ASCII) may be escaped or rewritten, so such a request's URL is parsed.
fn kept_by_url_parsing(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"-._~!$&()*+,;=:@/%?".contains(&byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uri_built_from_the_split_base_is_the_one_url_parsing_gives() {
        let paths = [
            "/responses",
            "/responses/resp_km1abc/input_items?limit=20&order=asc",
            "/models",
            "/responses/a%2Fb",
            "/chat/completions?",
            "/files?purpose=fine-tune&after=file-1:2@3",
            "/a(b)*c!$,;=",
        ];
        for base in
            ["https://api.openai.com/v1", "http://127.0.0.1:8080/v1/", "https://r.openai.azure.com:443/openai/v1"]
        {
            let parsed = url::Url::parse(base.trim_end_matches('/')).expect("base");
            let split = Base::split(&parsed).expect("split");
            for path in paths {
                let expected = url::Url::parse(&format!("{}{path}", base.trim_end_matches('/'))).expect("url");
                let uri = split.uri(path).unwrap_or_else(|| panic!("{base} + {path} is built"));
                assert_eq!(uri.to_string(), expected.as_str(), "{base} + {path}");
            }
        }
    }

    #[test]
    fn a_path_that_url_parsing_would_rewrite_is_left_to_it() {
        let split = Base::split(&url::Url::parse("https://api.openai.com/v1").expect("base")).expect("split");
        for path in ["/files/x y", "/a\\b", "/emoji/\u{1f600}", "/q?x='1'", "/a#frag", "/a\"b", "/{x}", "models"] {
            assert!(split.uri(path).is_none(), "{path} is left to URL parsing");
        }
    }

    #[test]
    fn a_proxy_in_the_environment_in_either_case_sends_requests_through_reqwest() {
        let only = |set: &'static str, value: &'static str| {
            move |name: &str| (name == set).then(|| std::ffi::OsString::from(value))
        };
        assert!(!environment_proxy(|_| None));
        for name in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
            assert!(environment_proxy(only(name, "http://127.0.0.1:3128")), "{name}");
            assert!(!environment_proxy(only(name, "")), "an empty {name} sets no proxy");
        }
        assert!(!environment_proxy(only("NO_PROXY", "*")), "NO_PROXY alone sets no proxy");
    }
}
