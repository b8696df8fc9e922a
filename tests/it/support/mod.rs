//! Shared black-box test support: the gateway on 127.0.0.1:0 (in-process or as the real binary) in front
//! of the multi-organization simulator, plus request shapes taken from captured Codex and pi traffic.
#![allow(dead_code, reason = "each test binary uses a different part of the support module")]
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "test support")]

pub mod admin;
pub mod disk;
pub mod tui;

pub use admin::Admin;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use keymux::config::{Config, KeyConfig, TokenConfig};
use keymux::keys::{KeyId, Provider};
use keymux::secrets::{MemoryStore, Secret, SecretStore as _};
use keymux::startup::{ConfigSource, StartOptions};
use keymux::{Gateway, Runtime};
use keymux_sim::{Sim, SimConfig};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};
use tokio::time::Instant;

/// The local client token every test client sends.
pub const TOKEN: &str = "km-test-local-token-4d2c7a91e0b35f68";
/// The admin credential tests call the control API with (as the CLI does).
pub const ADMIN: &str = "kma-test-admin-credential-7f3e9b2c5a1d8e46";

/// A gateway served in-process on a loopback port through the same runtime `keymux serve` uses, in
/// front of a simulator.
pub struct Harness {
    pub sim: Sim,
    pub gateway: Arc<Gateway>,
    /// `http://127.0.0.1:PORT/v1`
    pub base: String,
    pub root: String,
    runtime: Option<Runtime>,
}

/// A key for the harness.
#[derive(Clone, Debug)]
pub struct TestKey {
    pub label: String,
    pub secret: String,
    pub provider: Provider,
    pub priority: u8,
    pub budget: Option<u64>,
    pub imported: bool,
    pub daily_usd: Option<keymux::spend::Usd>,
    pub reserve_at: Option<u8>,
    pub on_limit: keymux::budget::OnLimit,
}

impl TestKey {
    pub fn priority(mut self, tier: u8) -> Self {
        self.priority = tier;
        self
    }

    pub fn budget(mut self, tokens: u64) -> Self {
        self.budget = Some(tokens);
        self
    }

    /// A daily budget in US dollars, reserved past `reserve_at` percent, and what happens at 100 %.
    pub fn daily_usd(mut self, dollars: f64, reserve_at: Option<u8>, on_limit: keymux::budget::OnLimit) -> Self {
        self.daily_usd = Some(keymux::spend::Usd::from_nanos((dollars * 1e9).round() as u64));
        self.reserve_at = reserve_at;
        self.on_limit = on_limit;
        self
    }

    /// Imported from a client's own login, as `keymux setup codex --import-key` adds one.
    pub fn imported(mut self) -> Self {
        self.imported = true;
        self
    }
}

/// An OpenAI key with id `k_<label>`.
pub fn key(label: &str, secret: &str) -> TestKey {
    TestKey {
        label: label.to_owned(),
        secret: secret.to_owned(),
        provider: Provider::Openai,
        priority: 0,
        budget: None,
        imported: false,
        daily_usd: None,
        reserve_at: None,
        on_limit: keymux::budget::OnLimit::Reserve,
    }
}

pub fn azure_key(label: &str, secret: &str) -> TestKey {
    TestKey { provider: Provider::Azure, ..key(label, secret) }
}

/// The install secret every harness keys its markers with.
pub const INSTALL_SECRET: &str = "install-secret-of-the-test-harness";

/// A config naming `keys` (secrets go to the store), the harness token, and the simulator upstream.
fn harness_config(sim: &Sim, keys: &[TestKey], store: &MemoryStore) -> Config {
    let mut config = Config { upstream: sim.base_url(), ..Config::default() };
    for k in keys {
        let id = KeyId::new(format!("k_{}", k.label));
        store.set(&keymux::secrets::account::key(id.as_str()), &Secret::new(k.secret.as_str())).unwrap();
        config.keys.push(KeyConfig {
            id,
            label: k.label.clone(),
            provider: k.provider,
            base_url: (k.provider == Provider::Azure).then(|| sim.base_url()),
            org: None,
            priority: k.priority,
            daily_token_budget: k.budget,
            models: Vec::new(),
            exclude_models: Vec::new(),
            disabled: false,
            imported: k.imported,
            daily_budget_usd: k.daily_usd,
            monthly_budget_usd: None,
            reserve_at: k.reserve_at,
            on_limit: k.on_limit,
            reserve_window_pct: None,
        });
    }
    config.tokens.push(TokenConfig { id: "t_test".into(), name: "test".into(), created_unix: 0, pool: "all".into() });
    store.set(&keymux::secrets::account::token("t_test"), &Secret::new(TOKEN)).unwrap();
    store.set(keymux::secrets::account::INSTALL_SECRET, &Secret::new(INSTALL_SECRET)).unwrap();
    store.set(keymux::secrets::account::ADMIN_TOKEN, &Secret::new(ADMIN)).unwrap();
    config
}

/// Start options for a gateway on a free loopback port in front of `sim`, with `keys` and the harness
/// token in a memory store. Ephemeral: metrics stay in memory unless the test names a `metrics_dir`, so
/// no test ever writes to the user's data directory.
pub fn options_for(sim: &Sim, keys: &[TestKey], tweak: impl FnOnce(&mut Config)) -> StartOptions {
    let store = MemoryStore::default();
    let mut config = harness_config(sim, keys, &store);
    tweak(&mut config);
    StartOptions {
        config: ConfigSource::Value(Box::new(config)),
        store: Some(Arc::new(store)),
        listen: Some("127.0.0.1:0".parse().unwrap()),
        ephemeral: true,
        ..StartOptions::default()
    }
}

impl Harness {
    pub async fn start(sim_config: SimConfig, keys: &[TestKey]) -> Self {
        Self::start_with(sim_config, keys, |_| {}).await
    }

    pub async fn start_with(sim_config: SimConfig, keys: &[TestKey], tweak: impl FnOnce(&mut Config)) -> Self {
        let sim = Sim::start(sim_config).await.expect("simulator starts");
        let runtime = Runtime::start(options_for(&sim, keys, tweak)).await.expect("gateway starts");
        // As with `keymux serve`, every key's organization is learned before clients arrive.
        runtime.probed().await;
        let addr = runtime.addr();
        Self {
            sim,
            gateway: runtime.gateway().clone(),
            base: format!("http://{addr}/v1"),
            root: format!("http://{addr}"),
            runtime: Some(runtime),
        }
    }

    /// Moves the gateway's and the simulator's clocks on together.
    pub fn advance(&self, by: Duration) {
        self.gateway.clock().advance(by);
        self.sim.advance(by);
    }

    /// Every key's status, as the status API shows it.
    pub fn status(&self) -> Vec<keymux::pool::KeyStatus> {
        self.gateway.pool().status(self.gateway.clock().now(), self.gateway.today())
    }

    /// Stops the gateway the way `keymux serve` does on SIGTERM.
    pub async fn shutdown(mut self) -> keymux::runtime::Stopped {
        self.runtime.take().expect("running").shutdown().await
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(runtime) = &self.runtime {
            runtime.stopper().stop();
        }
        self.sim.shutdown();
    }
}

/// Requests a client made (the start-up probes of `GET /v1/models` left out), per key.
pub fn client_counts(sim: &Sim) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for e in sim.log() {
        if let (Some(key), false) = (e.key, e.path == "/v1/models" && e.method == "GET") {
            *counts.entry(key).or_default() += 1;
        }
    }
    counts
}

/// A small `POST /v1/responses` through `client`; its status, once the whole answer is read.
pub async fn small_request(client: &reqwest::Client, base: &str) -> u16 {
    small_request_as(client, base, TOKEN).await
}

/// A small `POST /v1/responses` with the client token `token`; its status, once the whole answer is read.
pub async fn small_request_as(client: &reqwest::Client, base: &str, token: &str) -> u16 {
    let body = serde_json::json!({"model":"gpt-5.5","input":"hello","store":false});
    let r = client.post(format!("{base}/responses")).bearer_auth(token).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    let _ = r.bytes().await;
    status
}

/// A test HTTP client that does not decode compressed bodies, so tests see exactly what Keymux sent.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_gzip().no_zstd().pool_max_idle_per_host(32).build().expect("client")
}

pub fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    serde_json::from_slice(&std::fs::read(&path).expect("fixture exists")).expect("fixture is JSON")
}

/// The body of a captured request.
pub fn captured_body(name: &str) -> Value {
    fixture(name)["body"].clone()
}

/// The headers of a captured request, without the ones a client library sets itself.
pub fn captured_headers(name: &str) -> Vec<(String, String)> {
    fixture(name)["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .map(|h| (h[0].as_str().unwrap().to_owned(), h[1].as_str().unwrap().to_owned()))
        .filter(|(k, _)| {
            !matches!(k.to_ascii_lowercase().as_str(), "authorization" | "host" | "content-length" | "connection")
        })
        .collect()
}

/// A POST with the local token and the captured client headers.
pub fn post(
    client: &reqwest::Client,
    url: &str,
    headers: &[(String, String)],
    body: &Value,
) -> reqwest::RequestBuilder {
    post_as(client, url, TOKEN, headers, body)
}

/// A POST with the client token `token` and the captured client headers.
pub fn post_as(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    headers: &[(String, String)],
    body: &Value,
) -> reqwest::RequestBuilder {
    let mut rb = client.post(url).bearer_auth(token).header("content-type", "application/json");
    for (k, v) in headers {
        if !k.eq_ignore_ascii_case("content-type") {
            rb = rb.header(k.as_str(), v.as_str());
        }
    }
    rb.body(serde_json::to_vec(body).unwrap())
}

/// One SSE event and when it reached the client.
pub struct SseEvent {
    pub at: Instant,
    pub data: Value,
}

/// Reads an SSE body event by event, recording arrival times.
pub async fn read_sse(response: reqwest::Response) -> Vec<SseEvent> {
    let mut events = Vec::new();
    let mut buf = Vec::<u8>::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("stream chunk");
        buf.extend_from_slice(&chunk);
        while let Some(pos) = find(&buf, b"\n\n") {
            let frame: Vec<u8> = buf.drain(..pos + 2).collect();
            let text = String::from_utf8_lossy(&frame);
            for line in text.lines() {
                if let Some(data) = line.strip_prefix("data:") {
                    let data = data.trim();
                    if data == "[DONE]" {
                        events.push(SseEvent { at: Instant::now(), data: Value::String("[DONE]".into()) });
                    } else if let Ok(v) = serde_json::from_str(data) {
                        events.push(SseEvent { at: Instant::now(), data: v });
                    }
                }
            }
        }
    }
    events
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Moves the gateway's and the simulator's clocks past the next local midnight when it is under a
/// quarter of an hour away, so that the requests and the figures read after them share one local day
/// and month whenever the test runs. Returns how far the clocks moved.
pub fn clear_of_midnight(h: &Harness) -> Duration {
    let clock = h.gateway.clock();
    let (zone, now) = (clock.zone(), clock.unix_ms());
    let today = keymux::clock::local_day_start(now, &zone, 0);
    // 25 hours after a local midnight is always within the next local day (days last 23 to 25 hours).
    let tomorrow = keymux::clock::local_day_start(today + 25 * 3_600_000, &zone, 0);
    if tomorrow - now > 15 * 60_000 {
        return Duration::ZERO;
    }
    let by = Duration::from_millis(tomorrow - now + 60_000);
    h.advance(by);
    by
}

/// Every `.jsonl` file under `dir`, where Codex and pi record their sessions, sorted (Codex names its
/// files by the time a session began).
pub fn session_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "jsonl") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The `keymux` binary run as a child process.
pub struct Keymux {
    pub child: tokio::process::Child,
    pub base: String,
    pub root: String,
    /// Everything the process wrote to stdout and stderr.
    pub output: Arc<Mutex<Vec<u8>>>,
    /// The tasks copying its stdout and stderr into `output`; each ends when its pipe closes.
    readers: Vec<tokio::task::JoinHandle<()>>,
}

pub fn keymux_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_keymux"))
}

/// Environment for a child `keymux`: nothing from the test process but PATH and what is given.
pub fn base_env(home: &Path) -> Vec<(String, String)> {
    let mut env = vec![
        ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
        ("HOME".to_owned(), home.display().to_string()),
        ("XDG_CONFIG_HOME".to_owned(), home.join(".config").display().to_string()),
        ("KEYMUX_LOG".to_owned(), "debug".to_owned()),
        ("KEYMUX_ADMIN_TOKEN".to_owned(), ADMIN.to_owned()),
    ];
    for var in ["DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR", "XDG_DATA_HOME"] {
        if let Ok(v) = std::env::var(var) {
            env.push((var.to_owned(), v));
        }
    }
    env
}

impl Keymux {
    /// Starts `keymux serve --listen 127.0.0.1:0 ARGS` and waits for its "listening on" line.
    pub async fn spawn(args: &[&str], env: &[(String, String)]) -> Self {
        let mut cmd = tokio::process::Command::new(keymux_bin());
        cmd.arg("serve");
        if !args.contains(&"--listen") {
            cmd.arg("--listen").arg("127.0.0.1:0");
        }
        cmd.args(args);
        cmd.env_clear().envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = cmd.spawn().expect("keymux starts");
        let output = Arc::new(Mutex::new(Vec::new()));
        let mut stderr = child.stderr.take().expect("stderr");
        let sink = output.clone();
        let stderr_reader = tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("keymux printed its address in time")
            .expect("stdout readable");
        let Some(line) = line else {
            let _ = child.wait().await;
            panic!("keymux exited early: {}", String::from_utf8_lossy(&output.lock().unwrap()));
        };
        output.lock().unwrap().extend_from_slice(format!("{line}\n").as_bytes());
        let sink = output.clone();
        let stdout_reader = tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                sink.lock().unwrap().extend_from_slice(format!("{line}\n").as_bytes());
            }
        });
        let base = line
            .split_whitespace()
            .find(|w| w.starts_with("http://") && w.ends_with("/v1"))
            .expect("listening line names the base URL")
            .to_owned();
        let root = base.trim_end_matches("/v1").to_owned();
        Self { child, base, root, output, readers: vec![stderr_reader, stdout_reader] }
    }

    pub fn output_text(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    pub async fn stop(mut self) -> String {
        if let Some(pid) = self.child.id() {
            // SIGTERM, so the graceful shutdown path runs.
            let _ = std::process::Command::new("kill").arg(pid.to_string()).status();
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        // Everything it wrote, up to both pipes' end (not whatever the copying tasks had got to).
        for reader in std::mem::take(&mut self.readers) {
            let _ = tokio::time::timeout(Duration::from_secs(10), reader).await;
        }
        self.output_text()
    }
}

/// Runs `keymux ARGS` to completion with `stdin`; returns (success, stdout, stderr).
pub async fn run_keymux(args: &[&str], env: &[(String, String)], stdin: &str) -> (bool, String, String) {
    use tokio::io::AsyncWriteExt as _;
    let mut cmd = tokio::process::Command::new(keymux_bin());
    cmd.args(args).env_clear().envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("keymux runs");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin.as_bytes()).await.expect("write stdin");
    drop(input);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("keymux finished in time")
        .expect("output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Asserts that none of `secrets` occurs in `text`.
pub fn assert_no_secrets(what: &str, text: &str, secrets: &[&str]) {
    for s in secrets {
        assert!(!text.contains(s), "{what} contains a secret ({}…)", &s[..s.len().min(5)]);
    }
}

/// How a simulated client replays reasoning items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Codex: `{"type":"reasoning","id",…,"content":null,"encrypted_content"}`, developer/user items with
    /// `msg_<uuid>` ids, tool outputs with `fco_` ids.
    Codex,
    /// pi: the exact JSON of `output_item.done.item`, no ids on its own items.
    Pi,
    /// A client that drops item ids when it replays reasoning.
    NoIds,
}

/// A conversation driven the way Codex and pi drive one: every turn re-sends the whole history plus the
/// new items, with every reasoning item replayed byte for byte.
pub struct Session {
    pub shape: Shape,
    pub id: String,
    pub history: Vec<Value>,
    pub turn: usize,
    pub stream: bool,
    /// The client token it sends (the harness token unless a test says otherwise).
    pub token: String,
}

/// What one turn produced.
pub struct TurnResult {
    pub status: u16,
    pub error_code: Option<String>,
    pub body: String,
}

impl Session {
    pub fn new(shape: Shape, n: usize, stream: bool) -> Self {
        let id = format!("01a227d7-ed08-7e52-9dfa-{n:012x}");
        let system = "You are a coding agent. ".repeat(60);
        let developer = match shape {
            Shape::Codex => {
                serde_json::json!({"type":"message","id":format!("msg_{id}-dev"),"role":"developer","content":[{"type":"input_text","text":system}]})
            }
            Shape::Pi | Shape::NoIds => serde_json::json!({"role":"developer","content":system}),
        };
        Self { shape, id, history: vec![developer], turn: 0, stream, token: TOKEN.to_owned() }
    }

    fn user(&self, text: String) -> Value {
        match self.shape {
            Shape::Codex => {
                serde_json::json!({"type":"message","id":format!("msg_{}-{}", self.id, self.turn),"role":"user","content":[{"type":"input_text","text":text}]})
            }
            Shape::Pi | Shape::NoIds => {
                serde_json::json!({"role":"user","content":[{"type":"input_text","text":text}]})
            }
        }
    }

    /// The body of the next turn.
    pub fn next_body(&mut self, tool_call: bool) -> Value {
        self.turn += 1;
        if tool_call && self.turn > 1 {
            // A tool call inside the turn: the model's call and the client's output are appended.
            let call_id = format!("call_{}_{}", self.turn, self.id.len());
            self.history.push(serde_json::json!({"type":"function_call","id":format!("fc_{}{}", self.turn, &self.id[24..]),"call_id":call_id,"name":"exec_command","arguments":"{\"cmd\":\"ls\"}","status":"completed"}));
            let mut out =
                serde_json::json!({"type":"function_call_output","call_id":call_id,"output":"README.md\nsrc\n"});
            if self.shape == Shape::Codex {
                out["id"] = Value::String(format!("fco_{}-{}", self.id, self.turn));
            }
            self.history.push(out);
        } else {
            let text = format!("Turn {} of session {}: please continue.", self.turn, self.id);
            let user = self.user(text);
            self.history.push(user);
        }
        let mut body = serde_json::json!({
            "model": "gpt-5.5",
            "input": self.history,
            "stream": self.stream,
            "store": false,
            "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": self.id,
        });
        match self.shape {
            Shape::Codex => {
                body["reasoning"] = serde_json::json!({"effort":"medium"});
                body["tool_choice"] = "auto".into();
                body["parallel_tool_calls"] = true.into();
                body["client_metadata"] = serde_json::json!({"thread_id": self.id, "turn_id": self.turn});
            }
            Shape::Pi | Shape::NoIds => {
                body["reasoning"] = serde_json::json!({"effort":"medium","summary":"auto"});
                body["max_output_tokens"] = 32000.into();
            }
        }
        body
    }

    /// Appends what the client keeps from a response's output items.
    pub fn absorb(&mut self, items: Vec<Value>) {
        for mut item in items {
            if item["type"] == "reasoning" {
                match self.shape {
                    Shape::Codex => {
                        item["content"] = Value::Null;
                    }
                    Shape::Pi => {}
                    Shape::NoIds => {
                        item.as_object_mut().unwrap().remove("id");
                    }
                }
            }
            self.history.push(item);
        }
    }

    /// Sends the next turn through `base` and absorbs its output.
    pub async fn turn(&mut self, client: &reqwest::Client, base: &str, tool_call: bool) -> TurnResult {
        let body = self.next_body(tool_call);
        let headers = match self.shape {
            Shape::Codex => {
                vec![("session-id".to_owned(), self.id.clone()), ("originator".to_owned(), "codex_exec".to_owned())]
            }
            Shape::Pi | Shape::NoIds => vec![("session_id".to_owned(), self.id.clone())],
        };
        let mut headers = headers;
        headers.push(("x-test-turn".to_owned(), format!("{}:{}", self.id, self.turn)));
        let url = format!("{base}/responses");
        let response = post_as(client, &url, &self.token, &headers, &body).send().await.expect("request sent");
        let status = response.status().as_u16();
        if status != 200 {
            let text = response.text().await.unwrap_or_default();
            let code =
                serde_json::from_str::<Value>(&text).ok().and_then(|v| v["error"]["code"].as_str().map(str::to_owned));
            return TurnResult { status, error_code: code, body: text };
        }
        let items: Vec<Value> = if self.stream {
            read_sse(response)
                .await
                .into_iter()
                .filter(|e| e.data["type"] == "response.output_item.done")
                .map(|e| e.data["item"].clone())
                .collect()
        } else {
            let v: Value = response.json().await.expect("json");
            v["output"].as_array().cloned().unwrap_or_default()
        };
        self.absorb(items);
        TurnResult { status, error_code: None, body: String::new() }
    }
}

/// Every `encrypted_content` value and item id in a JSON tree (to check the upstream never saw a marker).
pub fn marker_like_values(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if let Value::String(s) = v {
                    if (k == "encrypted_content" && s.starts_with("km1"))
                        || ((k == "id" || k == "item_id") && s.contains("_km1"))
                    {
                        out.push(s.chars().take(24).collect());
                    }
                }
                marker_like_values(v, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| marker_like_values(v, out)),
        _ => {}
    }
}

/// A Codex-like client of the Responses WebSocket.
pub struct WsClient {
    pub socket: tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
}

/// The frames answering one `response.create`, up to `response.completed` or an error.
pub struct WsAnswer {
    pub events: Vec<Value>,
    pub error: Option<Value>,
    /// Whether the socket closed before the answer was complete.
    pub closed: bool,
}

impl WsAnswer {
    pub fn response_id(&self) -> Option<String> {
        self.events
            .iter()
            .find(|e| e["type"] == "response.completed")
            .and_then(|e| e["response"]["id"].as_str().map(str::to_owned))
    }
    pub fn output_items(&self) -> Vec<Value> {
        self.events.iter().filter(|e| e["type"] == "response.output_item.done").map(|e| e["item"].clone()).collect()
    }
}

impl WsClient {
    /// Opens `GET /v1/responses` as Codex does (bearer token, `openai-beta`, session headers).
    pub async fn connect(base: &str, session: &str) -> Result<Self, tokio_tungstenite::tungstenite::Error> {
        Self::connect_as(base, session, TOKEN).await
    }

    /// Opens the socket with the client token `token`.
    pub async fn connect_as(
        base: &str,
        session: &str,
        token: &str,
    ) -> Result<Self, tokio_tungstenite::tungstenite::Error> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
        let mut request = format!("{}/responses", base.replace("http://", "ws://")).into_client_request()?;
        let h = request.headers_mut();
        h.insert("authorization", format!("Bearer {token}").parse().unwrap());
        h.insert("openai-beta", "responses_websockets=2026-02-06".parse().unwrap());
        h.insert("session-id", session.parse().unwrap());
        h.insert("originator", "codex_exec".parse().unwrap());
        let (socket, _) = tokio_tungstenite::connect_async(request).await?;
        Ok(Self { socket })
    }

    /// Sends a `response.create` frame and reads its answer.
    pub async fn create(&mut self, body: &Value) -> WsAnswer {
        use futures::SinkExt as _;
        use tokio_tungstenite::tungstenite::Message;
        let mut frame = serde_json::json!({"type": "response.create"});
        for (k, v) in body.as_object().unwrap() {
            frame[k] = v.clone();
        }
        let mut answer = WsAnswer { events: Vec::new(), error: None, closed: false };
        if self.socket.send(Message::Text(frame.to_string().into())).await.is_err() {
            answer.closed = true;
            return answer;
        }
        loop {
            match tokio::time::timeout(Duration::from_secs(20), self.socket.next()).await.expect("an answer in time") {
                Some(Ok(Message::Text(text))) => {
                    let v: Value = serde_json::from_str(&text).expect("JSON frame");
                    if v["type"] == "error" {
                        answer.error = Some(v);
                        return answer;
                    }
                    let done = v["type"] == "response.completed";
                    answer.events.push(v);
                    if done {
                        return answer;
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                    answer.closed = true;
                    return answer;
                }
                Some(Ok(_)) => {}
            }
        }
    }
}

/// The simulator most affinity tests use: three organizations, five keys.
pub fn three_orgs() -> SimConfig {
    SimConfig::new().org("org-a", &["sk-a1", "sk-a2"]).org("org-b", &["sk-b1", "sk-b2"]).org("org-c", &["sk-c1"])
}

/// The five keys of `three_orgs`, with ids `k_a1` … `k_c1`.
pub fn five_keys() -> Vec<TestKey> {
    vec![key("a1", "sk-a1"), key("a2", "sk-a2"), key("b1", "sk-b1"), key("b2", "sk-b2"), key("c1", "sk-c1")]
}

/// The organization of a `three_orgs` key.
pub fn org_of(secret: &str) -> &'static str {
    match &secret[3..4] {
        "a" => "org-a",
        "b" => "org-b",
        _ => "org-c",
    }
}

/// The gateway's recent decisions, through its API.
pub async fn decisions_api(root: &str) -> Value {
    Admin::new(root).get_json("/decisions?limit=1000").await
}

/// The next finished request on an event feed (skipping routing and key events), waiting at most a
/// generous 30 s that only a hung gateway exceeds.
pub async fn next_record(
    feed: &mut tokio::sync::broadcast::Receiver<Arc<keymux::events::Envelope>>,
) -> Arc<keymux::events::RequestRecord> {
    let wait = async {
        loop {
            match feed.recv().await {
                Ok(envelope) => {
                    if let keymux::events::Event::Finished(record) = &envelope.event {
                        return record.clone();
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(e) => panic!("event feed closed: {e}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), wait).await.expect("a finished request within 30 s")
}

/// Waits until `ok` holds for what `read` returns, reading again every 100 ms: how a test waits on state
/// it can only read, never on a guess at how long something takes. Fails after a generous minute.
pub async fn until<T, F, R>(what: &str, read: R, ok: impl Fn(&T) -> bool) -> T
where
    R: Fn() -> F,
    F: std::future::Future<Output = T>,
{
    let wait = async {
        loop {
            let value = read().await;
            if ok(&value) {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .unwrap_or_else(|_| panic!("{what}: not seen within a minute"))
}

/// Waits until the events collected by [`collect_events`] reach event `id` (the gateway's
/// `last_event_id` when the caller looked), so nothing announced before then is still on its way.
pub async fn events_reach(events: &std::sync::Arc<std::sync::Mutex<Vec<Value>>>, id: u64) {
    let newest = || events.lock().unwrap().iter().filter_map(|e| e["id"].as_u64()).max().unwrap_or(0);
    until(&format!("event {id}"), || async { newest() }, |n| *n >= id).await;
}

/// Collects SSE events into a shared list until the stream ends.
pub fn collect_events(response: reqwest::Response) -> std::sync::Arc<std::sync::Mutex<Vec<Value>>> {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    tokio::spawn(async move {
        let mut buf = String::new();
        let mut stream = response.bytes_stream();
        while let Some(Ok(chunk)) = futures::StreamExt::next(&mut stream).await {
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buf.find("\n\n") {
                let frame: String = buf.drain(..end + 2).collect();
                if let Some(data) = frame.lines().find_map(|l| l.strip_prefix("data: ")) {
                    if let Ok(v) = serde_json::from_str::<Value>(data) {
                        sink.lock().unwrap().push(v);
                    }
                }
            }
        }
    });
    seen
}

/// The real Codex CLI the tests run (`tests/clients`, installed by `scripts/test`).
pub fn codex_bin() -> PathBuf {
    real_client("codex", "Codex")
}

/// The real pi coding agent the tests run (`tests/clients`, installed by `scripts/test`).
pub fn pi_bin() -> PathBuf {
    real_client("pi", "pi")
}

/// The binary `bin` of a client pinned in `tests/clients`, or a failure that says how to install it.
/// The real clients look up their vendors' hosts whatever their settings, so they only run where the
/// only network interface is loopback (scripts/test runs the tests in such a namespace).
fn real_client(bin: &str, name: &str) -> PathBuf {
    assert_loopback_only(name);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/node_modules/.bin").join(bin);
    assert!(
        path.exists(),
        "real {name} is not installed for the tests: run `npm ci --prefix tests/clients` (scripts/test does)"
    );
    path
}

/// Fails unless this process's network namespace has no interface but `lo` (`/proc/net/dev` is read in
/// the reader's namespace), saying how to run the test so.
fn assert_loopback_only(name: &str) {
    let table = std::fs::read_to_string("/proc/net/dev").expect("/proc/net/dev is readable");
    let outside: Vec<&str> =
        table.lines().skip(2).filter_map(|l| l.split(':').next()).map(str::trim).filter(|i| *i != "lo").collect();
    assert!(
        outside.is_empty(),
        "real {name} would reach past loopback through {outside:?}: run the tests with scripts/test, which \
         runs them in a private network namespace (or: unshare --net sh -c 'ip link set lo up && cargo test ...')"
    );
}

/// Runs `codex exec` once with `CODEX_HOME` holding `config` and the client token in `KEYMUX_TOKEN`:
/// (succeeded, everything it printed).
pub async fn run_codex(codex_home: &Path, config: &str, token: &str, prompt: &str) -> (bool, String) {
    std::fs::create_dir_all(codex_home).unwrap();
    std::fs::write(codex_home.join("config.toml"), config).unwrap();
    run_codex_in(codex_home, &[("KEYMUX_TOKEN", token)], prompt).await
}

/// Runs `codex exec` once with `CODEX_HOME` as it is (its `config.toml` already there) and nothing in
/// its environment but PATH, HOME, CODEX_HOME and `env`: (succeeded, everything it printed).
pub async fn run_codex_in(codex_home: &Path, env: &[(&str, &str)], prompt: &str) -> (bool, String) {
    let work = tempfile::tempdir().unwrap();
    let home = codex_home.to_str().unwrap();
    let mut all = vec![("HOME", home), ("CODEX_HOME", home)];
    all.extend_from_slice(env);
    run_client(codex_bin(), work.path(), &all, &["exec", "--skip-git-repo-check", prompt]).await
}

/// Runs a real client `bin` with `args` in `dir`, with nothing in its environment but PATH and `env`,
/// no stdin, and a generous three minutes that only a hung client exceeds: (succeeded, everything it
/// printed).
pub async fn run_client(bin: PathBuf, dir: &Path, env: &[(&str, &str)], args: &[&str]) -> (bool, String) {
    let out = tokio::process::Command::new(bin)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(180), out).await.expect("the client finished").expect("it runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// A Codex config a user already has: settings, another provider, comments. Keymux's settings are
/// pasted into it the way the Connect view says.
pub const EXISTING_CODEX_CONFIG_HEAD: &str = "# my Codex settings\nmodel = \"gpt-5.5\"\napproval_policy = \"never\"\nsandbox_mode = \"read-only\"\ncheck_for_update_on_startup = false\n";
pub const EXISTING_CODEX_CONFIG_TAIL: &str = "\n[analytics]\nenabled = false\n\n# a provider I use elsewhere\n[model_providers.other]\nname = \"Other\"\nbase_url = \"http://127.0.0.1:9/v1\"\nwire_api = \"responses\"\n";
