//! The HTTP client every provider request takes: hyper's pooled client over rustls (the public roots,
//! and the extra ones tests trust), HTTP/1.1 or HTTP/2 as the provider's TLS offers, answers decoded
//! (gzip, zstd) by the same layer reqwest uses, connected by an [`egress::Connector`] (direct, or
//! through a proxy).
//!
//! Every JSON and streamed request takes it, so it leaves out what Keymux never uses: redirects (the
//! provider's answer is relayed as it is), retries (failover is Keymux's own), and URL parsing per
//! request (a provider's default base URL is split once; `Base::uri` checks the rest is already what
//! URL parsing would give).

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, Method, Uri};
use bytes::Bytes;
use http::uri::{Authority, PathAndQuery, Scheme};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower::ServiceExt as _;
use tower_http::decompression::{Decompression, DecompressionBody};

use super::egress::{self, Connector};

/// The `user-agent` Keymux sends when the client's request has none.
const USER_AGENT: &str = concat!("keymux/", env!("CARGO_PKG_VERSION"));

/// hyper's pooled client, as Keymux builds it.
type Pooled = hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<Connector>, Full<Bytes>>;

/// An answer as it came, its body decoded as it is read.
pub type Answered = http::Response<DecompressionBody<Incoming>>;

/// Why a request got no answer: hyper's error, with the connector's below it.
pub type Failed = hyper_util::client::legacy::Error;

/// One pool of provider connections.
pub struct Client {
    pooled: Pooled,
    /// It goes out through a proxy that a plain request may need to log in to.
    proxied: Option<Connector>,
}

impl Client {
    /// A client whose connections `connector` opens, over `tls`.
    pub fn new(connector: Connector, tls: rustls::ClientConfig) -> Self {
        let proxied = (!matches!(connector.way(), egress::Way::Direct)).then(|| connector.clone());
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(connector);
        let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Self { pooled: client, proxied }
    }

    /// Sends one request. `headers` are sent as they are, with what reqwest adds when they lack it
    /// (`user-agent`, `accept`; the decoding layer adds `accept-encoding`), and the proxy's login when
    /// the request goes to an HTTP proxy itself.
    pub async fn send(
        &self,
        method: Method,
        uri: Uri,
        mut headers: HeaderMap,
        body: Bytes,
    ) -> Result<Answered, Failed> {
        headers.entry(http::header::USER_AGENT).or_insert(HeaderValue::from_static(USER_AGENT));
        headers.entry(http::header::ACCEPT).or_insert(HeaderValue::from_static("*/*"));
        if let Some(auth) = self.proxied.as_ref().and_then(|c| c.request_auth(&uri)) {
            headers.insert(http::header::PROXY_AUTHORIZATION, auth);
        }
        let mut request = http::Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        *request.headers_mut() = headers;
        decoding(&self.pooled).oneshot(request).await
    }
}

/// The decoding layer over the pool, made per request: it holds only its settings and a reference,
/// where a layered client kept in `Client` had to be cloned (each of the pool's handles) per request.
fn decoding(pooled: &Pooled) -> Decompression<&Pooled> {
    Decompression::new(pooled).no_br().no_deflate().gzip(true).zstd(true)
}

/// rustls with the public roots and `roots` beside them.
pub fn tls(roots: &[rustls::pki_types::CertificateDer<'static>]) -> Result<rustls::ClientConfig, String> {
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
}
