//! What each client is checked with: how it is found and asked its version, the settings its turn
//! runs with (written into a throwaway HOME), and what the gateway must have recorded for the turn to
//! count.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::process::{self, Ran};
use super::stand_in::StandIn;
use super::Transport;
use crate::events::{RequestRecord, Wire};
use crate::facts::ClientKind;

/// A client the check knows how to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Client {
    /// The Codex CLI (`codex exec`).
    Codex,
    /// The pi coding agent (`pi -p`).
    Pi,
}

impl Client {
    /// Every client, in the order a report lists them.
    pub const ALL: [Client; 2] = [Client::Codex, Client::Pi];

    /// Its command, and its name in a report.
    pub fn name(self) -> &'static str {
        match self {
            Self::Codex => "codex",
            Self::Pi => "pi",
        }
    }

    /// The transports its turns use through Keymux.
    pub fn transports(self) -> &'static [Transport] {
        match self {
            Self::Codex => &[Transport::Http, Transport::Websocket, Transport::Compaction],
            Self::Pi => &[Transport::Http],
        }
    }

    /// Whether Keymux recorded a request as this client's.
    fn sent(self, kind: ClientKind) -> bool {
        match self {
            Self::Codex => kind == ClientKind::CodexExec,
            Self::Pi => kind == ClientKind::Pi,
        }
    }
}

/// A client found installed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Installed {
    /// Which.
    pub client: Client,
    /// Its command, the first on the PATH.
    pub bin: PathBuf,
    /// What it says its version is (`None`: its `--version` printed none).
    pub version: Option<String>,
}

/// The clients on `path` (a PATH value), each with its version. Running `--version` is all that is
/// done; a client whose `--version` fails is still listed (its checks then say why it does not run).
pub async fn installed(path: &str) -> Vec<Installed> {
    let mut found = Vec::new();
    for client in Client::ALL {
        let Some(bin) = process::on_path(client.name(), path) else { continue };
        let version = version(&bin, path).await;
        found.push(Installed { client, bin, version });
    }
    found
}

async fn version(bin: &Path, path: &str) -> Option<String> {
    let home = tempfile::tempdir().ok()?;
    let home_path = home.path().to_str()?;
    let ran =
        process::run(bin, &["--version"], home.path(), path, &[("HOME", home_path), ("CODEX_HOME", home_path)]).await;
    ran.ok.then(|| process::version_in(&ran.stdout)).flatten()
}

/// One turn (two for a compaction) of `found` over `transport`, through a gateway of its own: `Ok`
/// when it went through, else why not.
pub(super) async fn turn(found: &Installed, transport: Transport, path: &str) -> Result<(), String> {
    let stand_in = StandIn::start().await?;
    let result = match run_turn(found, transport, path, &stand_in).await {
        // Whether the client's failure was a request Keymux refused, and how, or one that never came.
        Err(Failed::Client(why)) => Err(format!("{why} (Keymux recorded {})", summary(&stand_in.records()))),
        Err(Failed::Check(why)) => Err(why),
        Ok(()) => Ok(()),
    };
    let result = result.map_err(|e| stand_in.mask(&e));
    stand_in.stop().await;
    result
}

/// Why a turn did not go through: the client failed, or the check found the turn missing.
enum Failed {
    Client(String),
    Check(String),
}

impl From<String> for Failed {
    fn from(why: String) -> Self {
        Self::Check(why)
    }
}

impl From<&str> for Failed {
    fn from(why: &str) -> Self {
        Self::Check(why.to_owned())
    }
}

async fn run_turn(found: &Installed, transport: Transport, path: &str, stand_in: &StandIn) -> Result<(), Failed> {
    let home = tempfile::tempdir().map_err(|e| format!("no temporary directory for the client: {e}"))?;
    let work = tempfile::tempdir().map_err(|e| format!("no temporary directory for the client: {e}"))?;
    let home_path = home.path().to_str().ok_or("the temporary directory's path is not UTF-8")?;
    let name = found.client.name();
    match found.client {
        Client::Codex => {
            let config = codex_config(transport, &stand_in.base);
            std::fs::write(home.path().join("config.toml"), config)
                .map_err(|e| format!("could not write Codex's settings: {e}"))?;
            // The custom provider reads the token from KEYMUX_TOKEN, the built-in one from CODEX_API_KEY.
            let token = stand_in.token.as_str();
            let env =
                [("HOME", home_path), ("CODEX_HOME", home_path), ("KEYMUX_TOKEN", token), ("CODEX_API_KEY", token)];
            let first = ["exec", "--skip-git-repo-check", "Say hello. This is Keymux's client check."];
            expect_ok(name, process::run(&found.bin, &first, work.path(), path, &env).await)?;
            if transport == Transport::Compaction {
                // The history is over the compaction limit now, so this turn compacts before sampling.
                let resume = ["exec", "--skip-git-repo-check", "resume", "--last", "Now say goodbye."];
                expect_ok(name, process::run(&found.bin, &resume, work.path(), path, &env).await)?;
            }
        }
        Client::Pi => {
            write_pi_settings(home.path(), &stand_in.base, &stand_in.token)?;
            let env = [("HOME", home_path), ("PI_OFFLINE", "1")];
            let args = ["-p", "Say hello. This is Keymux's client check."];
            expect_ok(name, process::run(&found.bin, &args, work.path(), path, &env).await)?;
        }
    }
    Ok(recorded(found.client, transport, stand_in)?)
}

fn expect_ok(name: &str, ran: Ran) -> Result<(), Failed> {
    if ran.ok {
        return Ok(());
    }
    if ran.tail.is_empty() {
        Err(Failed::Client(format!("{name} {}", ran.status)))
    } else {
        Err(Failed::Client(format!("{name} {}: {}", ran.status, ran.tail)))
    }
}

const CODEX_SETTINGS: &str = "model = \"gpt-5.5\"\napproval_policy = \"never\"\nsandbox_mode = \"read-only\"\n\
                              check_for_update_on_startup = false\n";

/// Codex's settings for a turn over `transport`: a custom provider for HTTP (no WebSocket), the
/// built-in provider pointed at Keymux for WebSocket (its default transport) and for a compaction (only
/// the built-in provider compacts remotely), with a compaction limit every turn after the first passes.
fn codex_config(transport: Transport, base: &str) -> String {
    let tail = "\n[analytics]\nenabled = false\n";
    match transport {
        Transport::Http => format!(
            "{CODEX_SETTINGS}model_provider = \"keymux\"\n{tail}\n[model_providers.keymux]\nname = \"Keymux\"\n\
             base_url = \"{base}\"\nwire_api = \"responses\"\nenv_key = \"KEYMUX_TOKEN\"\n\
             supports_websockets = false\nrequest_max_retries = 0\nstream_max_retries = 0\n"
        ),
        Transport::Websocket => format!("{CODEX_SETTINGS}openai_base_url = \"{base}\"\n{tail}"),
        Transport::Compaction => {
            format!("{CODEX_SETTINGS}openai_base_url = \"{base}\"\nmodel_auto_compact_token_limit = 2000\n{tail}")
        }
    }
}

/// pi's provider pointed at Keymux (the Responses API, the token as a literal `apiKey`, as `keymux
/// setup pi` writes it), chosen by default, with pi's own retries off.
fn write_pi_settings(home: &Path, base: &str, token: &str) -> Result<(), String> {
    let agent = home.join(".pi/agent");
    let models = json!({"providers": {"keymux": {"baseUrl": base, "api": "openai-responses", "apiKey": token,
        "models": [{"id": "gpt-5.5", "name": "gpt-5.5", "reasoning": true, "input": ["text"],
                    "contextWindow": 400000, "maxTokens": 128000}]}}});
    let settings = json!({"defaultProvider": "keymux", "defaultModel": "gpt-5.5",
        "retry": {"enabled": false, "provider": {"maxRetries": 0}}});
    std::fs::create_dir_all(&agent)
        .and_then(|()| std::fs::write(agent.join("models.json"), models.to_string()))
        .and_then(|()| std::fs::write(agent.join("settings.json"), settings.to_string()))
        .map_err(|e| format!("could not write pi's settings: {e}"))
}

/// Whether the gateway recorded `client`'s turn over `transport`, answered 200; if not, what it did
/// record.
fn recorded(client: Client, transport: Transport, stand_in: &StandIn) -> Result<(), String> {
    let records = stand_in.records();
    let wire = match transport {
        Transport::Http => Wire::Http,
        Transport::Websocket | Transport::Compaction => Wire::WebSocket,
    };
    let served: Vec<&RequestRecord> =
        records.iter().map(AsRef::as_ref).filter(|r| r.routed.transport == wire && r.status == 200).collect();
    let name = client.name();
    if served.is_empty() {
        return Err(format!(
            "{name} exited 0, but no {} reached Keymux and was answered: Keymux recorded {}",
            transport.words(),
            summary(&records)
        ));
    }
    if let Some(other) = served.iter().find(|r| !client.sent(r.routed.client)) {
        return Err(format!(
            "Keymux does not recognise this {name}: it recorded its requests as client `{}`",
            serde_json::to_value(other.routed.client)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        ));
    }
    if transport == Transport::Compaction && !compacted(stand_in) {
        return Err(format!("{name} exited 0, but no compaction request reached the provider through Keymux"));
    }
    Ok(())
}

/// The provider answered a request whose last input item is Codex's `compaction_trigger`.
fn compacted(stand_in: &StandIn) -> bool {
    stand_in.provider_log().iter().any(|e| {
        let last = e.body.as_ref().and_then(|b| b["input"].as_array()).and_then(|input| input.last());
        e.status == 200 && last.is_some_and(|item| item["type"] == "compaction_trigger")
    })
}

/// What the gateway recorded, in a few words: `nothing`, or `2 requests: HTTP 400 (invalid_json), …`.
fn summary(records: &[std::sync::Arc<RequestRecord>]) -> String {
    if records.is_empty() {
        return "no request".into();
    }
    let each: Vec<String> = records
        .iter()
        .take(5)
        .map(|r| {
            let wire = if r.routed.transport == Wire::Http { "HTTP" } else { "WebSocket" };
            match r.error {
                Some(label) => format!("{wire} {} ({label})", r.status),
                None => format!("{wire} {}", r.status),
            }
        })
        .collect();
    format!("{} request(s): {}", records.len(), each.join(", "))
}
