//! `keymux clients check`: each installed client (Codex CLI, pi) runs one real turn through Keymux
//! over each transport it uses, against a stand-in provider, so a client update that Keymux does not
//! follow shows before the user's own first turn. The library half, so the tray and the dashboard can
//! run it too; `cli` prints it.
//!
//! * Which clients: the first `codex` and `pi` on the PATH given, each with the version it prints for
//!   `--version`.
//! * Where they run: each check starts its own gateway in-process ([`stand_in`]): a config and a
//!   throwaway key and client token held in memory, the simulator as the provider, all on loopback, so
//!   no key is spent and the user's config, keychain and metrics are not touched. Each client runs with
//!   a throwaway HOME (and `CODEX_HOME`) holding only the settings the check writes.
//! * What passes: the client exits 0 **and** the gateway recorded the turn on that transport, answered
//!   200, as that client (a client Keymux no longer recognises fails: its requests would show as
//!   `other`). A compaction passes when the provider got Codex's compaction request through Keymux and
//!   answered it.
//! * Why it failed: the client's exit status and the tail of what it printed, with key-shaped words
//!   masked, or what Keymux recorded instead.
//! * [`watch`]: a running gateway (`keymux serve`, the tray) checks each client whose version changed,
//!   looked at on start and hourly, and tells the event stream (`GatewayEvent::ClientChecked`).
//!
//! # Why the simulator ships in `keymux`
//!
//! The stand-in provider is the simulator crate, `keymux-sim`, linked into the `keymux` binary (and the
//! tray app, which runs the same check by itself) on purpose and in every build: no cargo feature turns
//! it off. A check needs a provider that answers as OpenAI does over every transport the clients use
//! (streamed Responses over HTTP and over WebSocket, remote compaction, encrypted content bound to an
//! organization that Codex sends back), yet spends no key, works offline and sends nothing past
//! loopback; the simulator is that provider, and it is the one every black-box test runs against, so
//! what a check exercises is what the tests exercise. A build without it would have a `keymux clients
//! check` that cannot check anything, and the installed binary (`cargo install`, the release build, the
//! `.deb`) is where a user runs it after a client update.
//!
//! What it adds is only what the check runs: the simulator's library (its command-line program,
//! `keymux-sim`, is a binary of its own and not linked), which brings one crate family the gateway
//! does not otherwise use, `chacha20poly1305` (the organization-bound encrypted content;
//! `cargo tree -p keymux -e normal -i chacha20poly1305` shows it comes through `keymux-sim` alone),
//! and `tempfile`, for the clients' throwaway HOME.

mod clients;
mod process;
mod stand_in;
pub mod watch;

pub use clients::{installed, Client, Installed};
pub use process::CLIENT_DEADLINE;

use serde::Serialize;

/// A transport a client's turn goes over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// A streamed `POST /v1/responses` (Server-Sent Events): Codex with a custom provider, pi.
    Http,
    /// Responses over a WebSocket: Codex's built-in provider pointed at Keymux.
    Websocket,
    /// Codex's remote compaction (a `response.create` ending in a `compaction_trigger`), on its
    /// built-in provider.
    Compaction,
}

impl Transport {
    /// How the transport is named in a report.
    pub fn name(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Websocket => "websocket",
            Self::Compaction => "compaction",
        }
    }

    /// How a failure names it: `WebSocket turn failed: …`.
    pub fn words(self) -> &'static str {
        match self {
            Self::Http => "HTTP turn",
            Self::Websocket => "WebSocket turn",
            Self::Compaction => "remote compaction",
        }
    }
}

/// One transport's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// The transport.
    pub transport: Transport,
    /// The turn went through.
    pub ok: bool,
    /// Why it did not, in words, secrets masked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One client's results.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClientReport {
    /// `codex` or `pi`.
    pub name: &'static str,
    /// The version it printed (`None`: it printed none).
    pub version: Option<String>,
    /// Every check passed.
    pub ok: bool,
    /// Per transport.
    pub checks: Vec<Check>,
}

impl ClientReport {
    /// One line for a notification or the Connect view: `pi 1.7.0 works through Keymux`, or
    /// `Codex 0.172.0: WebSocket turn failed: …` (the first failure).
    pub fn summary(&self) -> String {
        let title = match self.name {
            "codex" => "Codex",
            other => other,
        };
        let named = match &self.version {
            Some(v) => format!("{title} {v}"),
            None => title.to_owned(),
        };
        match self.checks.iter().find(|c| !c.ok) {
            None => format!("{named} works through Keymux"),
            Some(c) => format!("{named}: {} failed: {}", c.transport.words(), c.error.as_deref().unwrap_or("")),
        }
    }
}

/// Every installed client's results.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Per client found, Codex first.
    pub clients: Vec<ClientReport>,
}

impl Report {
    /// At least one client was found, and every one passed.
    pub fn ok(&self) -> bool {
        !self.clients.is_empty() && self.clients.iter().all(|c| c.ok)
    }
}

/// Checks every client installed on `path` (a PATH value), one after the other.
pub async fn check(path: &str) -> Report {
    let mut clients = Vec::new();
    for found in installed(path).await {
        clients.push(check_client(&found, path).await);
    }
    Report { clients }
}

/// Runs each of `found`'s transports through a gateway of its own.
pub async fn check_client(found: &Installed, path: &str) -> ClientReport {
    let mut checks = Vec::new();
    for &transport in found.client.transports() {
        let result = clients::turn(found, transport, path).await;
        checks.push(Check { transport, ok: result.is_ok(), error: result.err() });
    }
    ClientReport { name: found.client.name(), version: found.version.clone(), ok: checks.iter().all(|c| c.ok), checks }
}
