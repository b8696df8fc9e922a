//! The ways out a pool's keys can take, for tests: a real HTTP forward proxy on a loopback port (plain
//! requests in absolute form, and `CONNECT` tunnels) that logs each request and can be stopped, and a
//! TLS front for the simulator (a self-signed certificate made here, trusted by the gateway only
//! through `Config::extra_roots_pem`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt as _, Empty};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// One request the proxy passed on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proxied {
    /// `CONNECT`, or the request's method.
    pub method: String,
    /// The tunnel's `host:port`, or the request's absolute URL.
    pub target: String,
    /// The bearer secret the request carried (none for a tunnel: the proxy cannot read inside it).
    pub key: Option<String>,
    /// Whether it came with the login the proxy asks for (always, for a proxy that asks none).
    pub authorized: bool,
}

/// An HTTP forward proxy on `127.0.0.1:0`.
pub struct TestProxy {
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<Proxied>>>,
    /// The accept loop and every connection: aborted on `stop`, so the port refuses from then on.
    tasks: Arc<Mutex<JoinSet<()>>>,
}

type Body = BoxBody<Bytes, hyper::Error>;

impl TestProxy {
    pub async fn start() -> Self {
        Self::start_with_login(None).await
    }

    /// A proxy that answers 407 to any request without `Proxy-Authorization: Basic` of `login`
    /// (`user:password`).
    pub async fn start_with_login(login: Option<&str>) -> Self {
        use base64::Engine as _;
        let expected: Arc<Option<String>> =
            Arc::new(login.map(|l| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(l))));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let tasks = Arc::new(Mutex::new(JoinSet::new()));
        let (accept_log, accept_tasks) = (log.clone(), tasks.clone());
        tasks.lock().unwrap().spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (log, expected) = (accept_log.clone(), expected.clone());
                accept_tasks.lock().unwrap().spawn(async move {
                    let service =
                        hyper::service::service_fn(move |request| handle(request, log.clone(), expected.clone()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .with_upgrades()
                        .await;
                });
            }
        });
        Self { addr, log, tasks }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `127.0.0.1:PORT`, as Keymux names the proxy.
    pub fn host_port(&self) -> String {
        self.addr.to_string()
    }

    /// What passed through so far.
    pub fn log(&self) -> Vec<Proxied> {
        self.log.lock().unwrap().clone()
    }

    /// Closes the port and every connection through it.
    pub fn stop(&self) {
        self.tasks.lock().unwrap().abort_all();
    }

    /// Closes the port and every connection through it, and returns once they are closed (the port
    /// refuses from then on).
    pub async fn stop_and_wait(&self) {
        let mut running = std::mem::take(&mut *self.tasks.lock().unwrap());
        running.shutdown().await;
        // A connection the accept loop took just before it ended.
        self.tasks.lock().unwrap().abort_all();
    }
}

impl Drop for TestProxy {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn handle(
    request: Request<hyper::body::Incoming>,
    log: Arc<Mutex<Vec<Proxied>>>,
    expected: Arc<Option<String>>,
) -> Result<Response<Body>, hyper::Error> {
    let given = request.headers().get("proxy-authorization").and_then(|v| v.to_str().ok());
    let authorized = expected.as_deref().is_none_or(|e| given == Some(e));
    let key = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    if request.method() == hyper::Method::CONNECT {
        let target = request.uri().authority().map(|a| a.to_string()).unwrap_or_default();
        log.lock().unwrap().push(Proxied { method: "CONNECT".into(), target: target.clone(), key: None, authorized });
        if !authorized {
            return Ok(status(407));
        }
        let Ok(mut upstream) = TcpStream::connect(&target).await else { return Ok(status(502)) };
        tokio::spawn(async move {
            if let Ok(upgraded) = hyper::upgrade::on(request).await {
                let _ = tokio::io::copy_bidirectional(&mut TokioIo::new(upgraded), &mut upstream).await;
            }
        });
        return Ok(status(200));
    }
    let uri = request.uri().clone();
    log.lock().unwrap().push(Proxied {
        method: request.method().to_string(),
        target: uri.to_string(),
        key,
        authorized,
    });
    if !authorized {
        return Ok(status(407));
    }
    let Some(authority) = uri.authority().map(|a| a.to_string()) else { return Ok(status(400)) };
    let Ok(upstream) = TcpStream::connect(&authority).await else { return Ok(status(502)) };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await?;
    tokio::spawn(connection);
    let (mut parts, body) = request.into_parts();
    parts.uri = uri.path_and_query().map_or("/", |p| p.as_str()).parse().unwrap();
    parts.headers.remove("proxy-connection");
    parts.headers.remove("proxy-authorization");
    let response = sender.send_request(Request::from_parts(parts, body)).await?;
    Ok(response.map(|body| body.boxed()))
}

fn status(code: u16) -> Response<Body> {
    let mut response = Response::new(Empty::<Bytes>::new().map_err(|never| match never {}).boxed());
    *response.status_mut() = hyper::StatusCode::from_u16(code).unwrap();
    response
}

/// A TLS front for the simulator on `127.0.0.1:0`: each connection's TLS is ended here and its bytes
/// go on to the simulator's port. Its certificate names 127.0.0.1 and is signed by nobody but itself.
/// Made with [`TlsFront::start_h2`], it offers HTTP/2 by ALPN and serves it itself, passing each
/// request on to the simulator (which speaks HTTP/1.1), as a provider's HTTP/2 front does.
pub struct TlsFront {
    pub addr: SocketAddr,
    /// The certificate (PEM), for `Config::extra_roots_pem`.
    pub cert_pem: String,
    /// The protocol each connection's TLS agreed on (`None`: no ALPN).
    alpn: Arc<Mutex<Vec<Option<String>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsFront {
    pub async fn start(sim_base: &str) -> Self {
        Self::start_offering(sim_base, Vec::new()).await
    }

    /// A front that offers only HTTP/2 (`h2`): a client that does not offer it cannot connect.
    pub async fn start_h2(sim_base: &str) -> Self {
        Self::start_offering(sim_base, vec![b"h2".to_vec()]).await
    }

    async fn start_offering(sim_base: &str, protocols: Vec<Vec<u8>>) -> Self {
        use tokio_rustls::rustls;
        let target = sim_base.trim_start_matches("http://").split('/').next().unwrap().to_owned();
        let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).expect("a certificate");
        let cert_pem = made.cert.pem();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(made.signing_key.serialize_der().into());
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![made.cert.der().clone()], key)
            .expect("a TLS config");
        config.alpn_protocols = protocols;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the TLS front");
        let addr = listener.local_addr().unwrap();
        let alpn = Arc::new(Mutex::new(Vec::new()));
        let seen = alpn.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (acceptor, target, seen) = (acceptor.clone(), target.clone(), seen.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else { return };
                    let agreed = tls.get_ref().1.alpn_protocol().map(|p| String::from_utf8_lossy(p).into_owned());
                    seen.lock().unwrap().push(agreed.clone());
                    if agreed.as_deref() == Some("h2") {
                        serve_h2(tls, target).await;
                    } else if let Ok(mut sim) = TcpStream::connect(&target).await {
                        let mut tls = tls;
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut sim).await;
                    }
                });
            }
        });
        Self { addr, cert_pem, alpn, task }
    }

    /// `https://127.0.0.1:PORT/v1`
    pub fn base_url(&self) -> String {
        format!("https://{}/v1", self.addr)
    }

    /// The protocol each connection so far agreed on by ALPN.
    pub fn protocols(&self) -> Vec<Option<String>> {
        self.alpn.lock().unwrap().clone()
    }
}

/// Serves HTTP/2 on `tls`, each request passed on to the simulator at `target` over HTTP/1.1 and its
/// answer streamed back.
async fn serve_h2(tls: tokio_rustls::server::TlsStream<TcpStream>, target: String) {
    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
        let target = target.clone();
        async move { pass_on(request, &target).await }
    });
    let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .serve_connection(TokioIo::new(tls), service)
        .await;
}

async fn pass_on(
    request: Request<hyper::body::Incoming>,
    target: &str,
) -> Result<
    Response<
        http_body_util::StreamBody<
            futures::stream::BoxStream<'static, Result<hyper::body::Frame<Bytes>, std::io::Error>>,
        >,
    >,
    std::io::Error,
> {
    use futures::StreamExt as _;
    let (parts, body) = request.into_parts();
    let body = body.collect().await.map_err(std::io::Error::other)?.to_bytes();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut headers = parts.headers.clone();
    headers.remove(hyper::header::HOST);
    let client = super::http::client();
    let answer = client
        .request(parts.method, format!("http://{target}{path}"))
        .headers(headers)
        .body(body)
        .send()
        .await
        .map_err(std::io::Error::other)?;
    let mut out = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if !["connection", "transfer-encoding", "keep-alive"].contains(&name.as_str()) {
            out = out.header(name, value);
        }
    }
    let frames = answer.bytes_stream().map(|chunk| chunk.map(hyper::body::Frame::data).map_err(std::io::Error::other));
    out.body(http_body_util::StreamBody::new(frames.boxed())).map_err(std::io::Error::other)
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One connection a SOCKS5 proxy made for its client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tunnel {
    /// What the client asked to reach: `host:port`, the host as sent (a name or an address).
    pub target: String,
    /// The proxy's own end of the connection it opened (the address the upstream sees the client at).
    pub from: SocketAddr,
}

/// A SOCKS5 proxy (RFC 1928, connect only, no login) on `127.0.0.1:0`, logging each tunnel.
pub struct SocksProxy {
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<Tunnel>>>,
    task: tokio::task::JoinHandle<()>,
}

impl SocksProxy {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the SOCKS5 proxy");
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let accept_log = log.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let log = accept_log.clone();
                tokio::spawn(async move {
                    let _ = socks_connection(stream, log).await;
                });
            }
        });
        Self { addr, log, task }
    }

    /// `socks5h://127.0.0.1:PORT` (`remote_names`) or `socks5://127.0.0.1:PORT`.
    pub fn url(&self, remote_names: bool) -> String {
        format!("{}://{}", if remote_names { "socks5h" } else { "socks5" }, self.addr)
    }

    pub fn log(&self) -> Vec<Tunnel> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for SocksProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn socks_connection(mut client: TcpStream, log: Arc<Mutex<Vec<Tunnel>>>) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut greeting = [0u8; 2];
    client.read_exact(&mut greeting).await?;
    let mut methods = vec![0u8; usize::from(greeting[1])];
    client.read_exact(&mut methods).await?;
    if greeting[0] != 5 || !methods.contains(&0) {
        return client.write_all(&[5, 0xff]).await;
    }
    client.write_all(&[5, 0]).await?;
    let mut head = [0u8; 4];
    client.read_exact(&mut head).await?;
    let host = match head[3] {
        1 => {
            let mut ip = [0u8; 4];
            client.read_exact(&mut ip).await?;
            std::net::Ipv4Addr::from(ip).to_string()
        }
        3 => {
            let mut name = vec![0u8; usize::from(client.read_u8().await?)];
            client.read_exact(&mut name).await?;
            String::from_utf8_lossy(&name).into_owned()
        }
        _ => return client.write_all(&[5, 8, 0, 1, 0, 0, 0, 0, 0, 0]).await,
    };
    let port = client.read_u16().await?;
    let target = format!("{host}:{port}");
    let Ok(mut upstream) = TcpStream::connect(&target).await else {
        return client.write_all(&[5, 5, 0, 1, 0, 0, 0, 0, 0, 0]).await;
    };
    log.lock().unwrap().push(Tunnel { target, from: upstream.local_addr()? });
    client.write_all(&[5, 0, 0, 1, 0, 0, 0, 0, 0, 0]).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await.map(|_| ())
}
