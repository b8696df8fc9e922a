//! The CLI's side of the control API: finding the gateway that runs with this config, making sure it is
//! that gateway (it must answer a challenge keyed by the admin credential before the credential is
//! ever sent), and calling it. A process that squats the port while Keymux is down learns nothing.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::api::types::ChallengeAnswer;
use crate::config::Config;
use crate::secrets::{self, account, Secret, SecretStore};

/// A control API call that did not succeed: the error's code (`key_already_pooled`, `not_found`…) when
/// the gateway answered with one, and its message, which says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// The OpenAI-shaped error's `code`, if the gateway gave one.
    pub code: Option<String>,
    /// What went wrong and what to do.
    pub message: String,
}

impl Refusal {
    pub fn message(message: String) -> Self {
        Self { code: None, message }
    }
}

/// A running gateway, authenticated.
pub struct Remote {
    client: reqwest::Client,
    root: String,
    admin: Secret,
}

/// What reaching a gateway found.
pub enum Found {
    /// None answers at the address (or the answer is not Keymux's): act offline.
    Nobody,
    /// A Keymux gateway answered and proved who it is.
    Gateway(Remote),
}

/// Whether a Keymux gateway answers its health check at `addr` (no credential is sent).
async fn is_keymux(client: &reqwest::Client, addr: std::net::SocketAddr) -> bool {
    let health = client.get(format!("http://{addr}/keymux/health")).timeout(Duration::from_secs(2)).send().await;
    match health {
        Ok(r) => r.json::<Value>().await.ok().is_some_and(|v| v["service"] == "keymux"),
        Err(_) => false,
    }
}

/// Where a Keymux gateway already runs for this config (its run file's address, with its pid) or on
/// the address it would listen on, said as what to do; `None` when there is none. A second
/// `keymux serve` says this first, instead of failing on the metrics store or the port.
pub async fn already_running(config_path: &Path, listen: std::net::SocketAddr) -> Option<String> {
    let client = local_client(Duration::from_secs(5))?;
    if let Some(running) = crate::runfile::read(config_path) {
        if is_keymux(&client, running.addr).await {
            return Some(format!(
                "Keymux is already running at {} (pid {}) with this config. Use it (`keymux dashboard`), or \
                 stop it first",
                running.addr, running.pid
            ));
        }
    }
    let taken = listen.port() != 0 && is_keymux(&client, listen).await;
    taken.then(|| {
        format!(
            "Keymux is already running at {listen} (with another config file). Use it, or start this one on \
             another address with --listen"
        )
    })
}

impl Remote {
    /// Finds and authenticates the gateway of this config: at the address its run file names, else the
    /// config's `listen`. `admin` overrides the keychain's admin credential (`KEYMUX_ADMIN_TOKEN`).
    pub async fn find(
        config: &Config,
        config_path: &Path,
        store: &Arc<dyn SecretStore>,
        admin: Option<Secret>,
    ) -> Result<Found, String> {
        let addr = match crate::runfile::read(config_path) {
            Some(running) => running.addr,
            None => match local_addr(&config.listen) {
                Some(addr) => addr,
                None => return Ok(Found::Nobody),
            },
        };
        let root = format!("http://{addr}");
        let client = local_client(Duration::from_secs(30)).ok_or("no HTTP client")?;
        if !is_keymux(&client, addr).await {
            return Ok(Found::Nobody);
        }
        let admin = match admin {
            Some(admin) => admin,
            None => match secrets::blocking(store.clone(), |s| s.get(account::ADMIN_TOKEN)).await {
                Ok(Some(admin)) => admin,
                Ok(None) => return Err(format!("a gateway runs at {addr}, but no admin credential is in the keychain to reach it; restart it with `keymux serve`")),
                Err(e) => return Err(e.to_string()),
            },
        };
        authenticate(&client, addr, &admin).await?;
        Ok(Found::Gateway(Remote { client, root, admin }))
    }

    /// Calls the control API; the body of a 2xx answer, or the error it answered (its code and message).
    pub async fn call(&self, method: http::Method, path: &str, body: Option<Value>) -> Result<Value, Refusal> {
        let mut request =
            self.client.request(method, format!("{}/keymux/api{path}", self.root)).bearer_auth(self.admin.expose());
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response =
            request.send().await.map_err(|e| Refusal::message(format!("the gateway did not answer: {e}")))?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(value);
        }
        let message =
            value["error"]["message"].as_str().map_or_else(|| format!("the gateway answered {status}"), str::to_owned);
        Err(Refusal { code: value["error"]["code"].as_str().map(str::to_owned), message })
    }

    /// Reads a control API answer as the type the API declares for it.
    pub async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, Refusal> {
        self.send(http::Method::GET, path, None).await
    }

    /// Calls the control API and reads its answer as the type the API declares for it.
    pub async fn send<T: serde::de::DeserializeOwned>(
        &self,
        method: http::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<T, Refusal> {
        let value = self.call(method, path, body).await?;
        serde_json::from_value(value)
            .map_err(|e| Refusal::message(format!("the gateway's answer to {path} was not understood: {e}")))
    }

    /// The gateway's address.
    pub fn root(&self) -> &str {
        &self.root
    }
}

/// The address a local client reaches a gateway at that listens on `listen` (an unspecified address,
/// such as `0.0.0.0`, is reached on loopback).
pub fn local_addr(listen: &str) -> Option<std::net::SocketAddr> {
    let mut addr = listen.parse::<std::net::SocketAddr>().ok()?;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    Some(addr)
}

/// Asks the gateway at `addr` to prove it knows the admin credential, and that it is the one listening
/// at `addr` (not a relay there forwarding to it); only then is the credential sent.
async fn authenticate(client: &reqwest::Client, addr: std::net::SocketAddr, admin: &Secret) -> Result<(), String> {
    let root = format!("http://{addr}");
    let nonce = secrets::generate("").expose().to_owned();
    let refused = || {
        format!(
            "something at {root} answers like Keymux but could not prove it is your gateway listening there (it does \
             not know your admin credential, or it relays to a gateway elsewhere), so nothing was sent to it. Stop \
             whatever holds that port, or check `listen` in the config"
        )
    };
    let answer = client
        .post(format!("{root}/keymux/api/challenge"))
        .json(&serde_json::json!({ "nonce": nonce }))
        .send()
        .await
        .map_err(|_| refused())?;
    let answer: ChallengeAnswer = answer.json().await.map_err(|_| refused())?;
    if crate::access::challenge_ok(admin, &nonce, &answer.server_nonce, addr, &answer.mac) {
        Ok(())
    } else {
        Err(refused())
    }
}

/// A small client for Keymux's own local API (the CLI asking a running gateway for its status): loopback
/// only, never through a proxy.
pub fn local_client(timeout: Duration) -> Option<reqwest::Client> {
    #[expect(clippy::disallowed_methods, reason = "a loopback-only client for Keymux's own API, not a provider")]
    let builder = reqwest::Client::builder();
    builder.timeout(timeout).no_proxy().build().ok()
}
