//! The `keymux` command line: `serve` (the default), `keys` and `token`.

use std::io::{IsTerminal as _, Read as _, Write as _};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};

use crate::config::{Config, EnvSecrets, KeyConfig};
use crate::digest::InstallKey;
use crate::keys::{validate_label, validate_secret, KeyId, Provider};
use crate::runtime::Runtime;
use crate::secrets::{self, account, Secret, SecretStore};
use crate::startup::{self, ConfigSource, StartError, StartOptions};

#[derive(Parser)]
#[command(name = "keymux", version, about = "Pool your OpenAI API keys behind one local base URL")]
struct Cli {
    /// Config file (default: the platform config directory, e.g. ~/.config/keymux/config.toml).
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (the default when no command is given).
    Serve(ServeArgs),
    /// Manage the pooled API keys (secrets go to the OS keychain).
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Manage the local client tokens that Codex and pi send.
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Args, Default)]
struct ServeArgs {
    /// Address to listen on (default 127.0.0.1:8787; port 0 picks a free one).
    #[arg(long, value_name = "IP:PORT")]
    listen: Option<SocketAddr>,
    /// Default upstream base URL (for compatible providers, proxies and tests).
    #[arg(long, value_name = "URL")]
    upstream: Option<String>,
    /// Allow listening on a non-loopback address.
    #[arg(long)]
    allow_remote: bool,
    /// Do not use the keychain: keys from KEYMUX_KEY_<LABEL>, token from KEYMUX_CLIENT_TOKEN.
    #[arg(long)]
    ephemeral: bool,
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Add a key; the secret is read from stdin or a hidden prompt, never from the command line.
    Add {
        /// A short name: work, personal, azure-eu…
        #[arg(long)]
        label: String,
        /// openai or azure.
        #[arg(long, default_value = "openai")]
        provider: String,
        /// Base URL (Azure: https://RESOURCE.openai.azure.com/openai/v1).
        #[arg(long, value_name = "URL")]
        base_url: Option<String>,
        /// The key's organization, if known (otherwise learned from the provider).
        #[arg(long)]
        org: Option<String>,
        /// Priority tier: unpinned traffic uses the lowest tier with a usable key (e.g. work 0, personal 1).
        #[arg(long, default_value_t = 0)]
        priority: u8,
        /// Soft daily token budget (input + output tokens per UTC day).
        #[arg(long, value_name = "TOKENS")]
        daily_token_budget: Option<u64>,
    },
    /// List keys: label, id, provider, org and a short fingerprint (never the secret).
    List,
    /// Remove a key by label or id, from the config and the keychain.
    Remove {
        /// Label or id.
        key: String,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Create a local client token and print it once.
    Create {
        /// A name for the client that will use it.
        #[arg(long, default_value = "default")]
        name: String,
    },
    /// List token names and ids.
    List,
    /// Print a token (to put in KEYMUX_TOKEN or your client's config).
    Show {
        /// Name or id.
        token: String,
    },
    /// Revoke a token.
    Revoke {
        /// Name or id.
        token: String,
    },
}

/// Entry point of the `keymux` binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("keymux: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command.unwrap_or(Command::Serve(ServeArgs::default())) {
            Command::Serve(args) => serve(cli.config, args).await,
            Command::Keys(cmd) => keys(cli.config, cmd).await,
            Command::Token(cmd) => token(cli.config, cmd).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keymux: {e}");
            ExitCode::FAILURE
        }
    }
}

fn env_secrets() -> Result<EnvSecrets, StartError> {
    EnvSecrets::from_vars(std::env::vars()).map_err(StartError::Usage)
}

fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    // A closed stdout (piped into `head`) is not an error worth failing over.
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

async fn serve(config_path: Option<PathBuf>, args: ServeArgs) -> Result<(), StartError> {
    init_logging();
    let options = StartOptions {
        config: ConfigSource::File(config_path),
        listen: args.listen,
        upstream: args.upstream,
        allow_remote: args.allow_remote,
        ephemeral: args.ephemeral,
        env: env_secrets()?,
        ..StartOptions::default()
    };
    for done in startup::first_run(&options).await? {
        tracing::info!("{done}");
    }
    let runtime = Runtime::start(options).await?;
    for notice in runtime.notices() {
        tracing::warn!("{notice}");
    }
    let addr = runtime.addr();
    if !addr.ip().is_loopback() {
        tracing::warn!(
            "LISTENING ON {addr} (NOT LOOPBACK): every machine that can reach it may use your keys with a local token"
        );
    }
    out(&format!(
        "keymux listening on http://{addr}/v1 with {} key(s). Codex: base_url = \"http://{addr}/v1\", wire_api = \"responses\", env_key = \"KEYMUX_TOKEN\". pi: baseUrl \"http://{addr}/v1\", api \"openai-responses\", apiKey \"KEYMUX_TOKEN\". Token: {}.",
        runtime.gateway().pool().len(),
        runtime.token_hint()
    ));
    let stopper = runtime.stopper();
    tokio::spawn(async move {
        shutdown_signal().await;
        stopper.stop();
    });
    let stopped = runtime.wait().await;
    if let Err(e) = &stopped.metrics {
        tracing::warn!("the last metrics flush failed: {e}");
    }
    match (stopped.error, stopped.drained) {
        (Some(e), _) => Err(StartError::Usage(format!("server stopped: {e}"))),
        (None, Some(drained)) if !drained.clean => {
            tracing::warn!(cut = drained.connections_cut, "some streams were still open at shutdown and were cut");
            Ok(())
        }
        _ => Ok(()),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KEYMUX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only a terminal: logs written to a file or a pipe stay plain text.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

struct Loaded {
    path: PathBuf,
    config: Config,
    store: Arc<dyn SecretStore>,
}

fn load(config_path: Option<PathBuf>) -> Result<Loaded, StartError> {
    let path = match config_path {
        Some(p) => p,
        None => Config::default_path()?,
    };
    let config = Config::load(&path)?;
    let store = startup::open_store(&config, false);
    Ok(Loaded { path, config, store })
}

/// Asks a gateway running with this config for its key status (health, learned organizations).
async fn live_status(config: &Config, store: &Arc<dyn SecretStore>) -> Option<Vec<serde_json::Value>> {
    let token_id = config.tokens.first()?.id.clone();
    let account = account::token(&token_id);
    let token = secrets::blocking(store.clone(), move |s| s.get(&account)).await.ok()??;
    let mut addr: SocketAddr = config.listen.parse().ok()?;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let client = crate::upstream::local_client(std::time::Duration::from_secs(2))?;
    // Only a Keymux gets the token: whatever else holds the port is not asked.
    let health: serde_json::Value =
        client.get(format!("http://{addr}/keymux/health")).send().await.ok()?.json().await.ok()?;
    if health["service"] != "keymux" {
        return None;
    }
    let response =
        client.get(format!("http://{addr}/keymux/api/status")).bearer_auth(token.expose()).send().await.ok()?;
    let body: serde_json::Value = response.json().await.ok()?;
    body["keys"].as_array().cloned()
}

fn read_secret() -> Result<Secret, StartError> {
    let raw = if std::io::stdin().is_terminal() {
        rpassword::prompt_password("API key (input hidden): ")
            .map_err(|e| StartError::Usage(format!("cannot read the key: {e}")))?
    } else {
        let mut buf = String::new();
        std::io::stdin()
            .take(4096)
            .read_to_string(&mut buf)
            .map_err(|e| StartError::Usage(format!("cannot read the key from stdin: {e}")))?;
        buf
    };
    let value = raw.trim_end_matches(['\n', '\r']).trim();
    validate_secret(value).map_err(StartError::Usage)?;
    Ok(Secret::new(value))
}

async fn keys(config_path: Option<PathBuf>, cmd: KeysCommand) -> Result<(), StartError> {
    let loaded = load(config_path)?;
    match cmd {
        KeysCommand::Add { label, provider, base_url, org, priority, daily_token_budget } => {
            add_key(loaded, NewKey { label, provider, base_url, org, priority, daily_token_budget }).await
        }
        KeysCommand::List => list_keys(loaded).await,
        KeysCommand::Remove { key } => remove_key(loaded, &key).await,
    }
}

/// What `keys add` was given.
struct NewKey {
    label: String,
    provider: String,
    base_url: Option<String>,
    org: Option<String>,
    priority: u8,
    daily_token_budget: Option<u64>,
}

async fn add_key(loaded: Loaded, new: NewKey) -> Result<(), StartError> {
    let Loaded { path, mut config, store } = loaded;
    let NewKey { label, provider, base_url, org, priority, daily_token_budget } = new;
    validate_label(&label).map_err(StartError::Usage)?;
    let provider = Provider::parse(&provider)
        .ok_or_else(|| StartError::Usage(format!("--provider {provider:?}: expected openai or azure")))?;
    if config.find_key(&label).is_some() {
        return Err(StartError::Usage(format!("a key labelled '{label}' already exists; remove it first")));
    }
    if let Some(url) = &base_url {
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(StartError::Usage(format!("--base-url {url:?} must start with https://")));
        }
    }
    if provider == Provider::Azure && base_url.is_none() {
        return Err(StartError::Usage(
            "an Azure key needs --base-url https://RESOURCE.openai.azure.com/openai/v1".into(),
        ));
    }
    let secret = read_secret()?;
    let id = KeyId::generate();
    let account = account::key(id.as_str());
    let value = secret.clone();
    secrets::blocking(store.clone(), move |s| s.set(&account, &value)).await?;
    config.keys.push(KeyConfig {
        id: id.clone(),
        label: label.clone(),
        provider,
        base_url,
        org,
        priority,
        daily_token_budget,
        models: Vec::new(),
        exclude_models: Vec::new(),
    });
    if let Err(e) = config.save(&path) {
        // Keep the keychain and the config in step: no orphaned secret.
        let account = account::key(id.as_str());
        let _ = secrets::blocking(store.clone(), move |s| s.delete(&account)).await;
        return Err(e.into());
    }
    let fp = InstallKey::new(&startup::install_secret(&store).await?).fingerprint(&secret);
    out(&format!("added key '{label}' ({id}, fingerprint {fp}) to the {}", store.describe()));
    Ok(())
}

async fn list_keys(loaded: Loaded) -> Result<(), StartError> {
    let Loaded { config, store, .. } = loaded;
    let env = env_secrets()?;
    if config.keys.is_empty() && env.keys.is_empty() {
        out("no keys yet: add one with `keymux keys add --label work`");
        return Ok(());
    }
    let install = match config.keys.is_empty() {
        true => None,
        false => Some(InstallKey::new(&startup::install_secret(&store).await?)),
    };
    let live = live_status(&config, &store).await;
    out(&format!("{:<16} {:<14} {:<8} {:<24} {:<11} STATUS", "LABEL", "ID", "PROVIDER", "ORG", "FINGERPRINT"));
    let row = |label: &str, id: &str, provider: Provider, org: Option<&str>, fp: &str, stored: &str| {
        let state = live.as_ref().and_then(|keys| keys.iter().find(|k| k["id"] == id));
        let org = org
            .map(str::to_owned)
            .or_else(|| state.and_then(|s| s["learned_org"].as_str()).map(|o| format!("{o} (learned)")))
            .unwrap_or_else(|| "(learned on first use)".into());
        let mut status = stored.to_owned();
        if let Some(s) = state {
            status.push_str(&format!(", {}", s["health"].as_str().unwrap_or("?")));
            if s["health"] == "cooling" {
                status.push_str(&format!(" {}s", s["cooldown_ms"].as_u64().unwrap_or(0).div_ceil(1000)));
            }
            if s["health"] == "invalid" {
                status.push_str(" (rejected by the provider: replace this key)");
            }
            let odd = s["invalid_encrypted_content"].as_u64().unwrap_or(0);
            if odd > 0 {
                status.push_str(&format!(", {odd} invalid_encrypted_content from the provider"));
            }
        }
        out(&format!("{label:<16} {id:<14} {:<8} {org:<24} {fp:<11} {status}", provider.as_str()));
    };
    for key in &config.keys {
        let account = account::key(key.id.as_str());
        let secret = secrets::blocking(store.clone(), move |s| s.get(&account)).await?;
        let (fp, stored) = match (&secret, &install) {
            (Some(secret), Some(install)) => (install.fingerprint(secret), "in keychain"),
            _ => ("-".to_owned(), "MISSING from keychain"),
        };
        row(&key.label, key.id.as_str(), key.provider, key.org.as_deref(), &fp, stored);
    }
    for key in &env.keys {
        row(
            &key.label,
            &format!("env-{}", key.label),
            key.provider,
            key.org.as_deref(),
            "-",
            "environment (ephemeral)",
        );
    }
    if live.is_none() {
        out(&format!(
            "(no gateway answering at {}: health and learned organizations appear while it runs)",
            config.listen
        ));
    }
    Ok(())
}

async fn remove_key(loaded: Loaded, key: &str) -> Result<(), StartError> {
    let Loaded { path, mut config, store } = loaded;
    let Some(found) = config.find_key(key).cloned() else {
        return Err(StartError::Usage(format!("no key labelled or with id '{key}'; see `keymux keys list`")));
    };
    let account = account::key(found.id.as_str());
    secrets::blocking(store.clone(), move |s| s.delete(&account)).await?;
    config.keys.retain(|k| k.id != found.id);
    config.save(&path)?;
    out(&format!("removed key '{}' ({})", found.label, found.id));
    Ok(())
}

async fn token(config_path: Option<PathBuf>, cmd: TokenCommand) -> Result<(), StartError> {
    let Loaded { path, mut config, store } = load(config_path)?;
    let find = |config: &Config, name: &str| {
        config
            .tokens
            .iter()
            .find(|t| t.id == name || t.name.eq_ignore_ascii_case(name))
            .cloned()
            .ok_or_else(|| StartError::Usage(format!("no token named '{name}'; see `keymux token list`")))
    };
    match cmd {
        TokenCommand::Create { name } => {
            let token = startup::create_token(&store, &mut config, &name).await?;
            config.save(&path)?;
            out(token.expose());
            eprintln!("created token '{name}'. Export it for your client, e.g. `export KEYMUX_TOKEN=$(keymux token show {name})`.");
        }
        TokenCommand::List => {
            if config.tokens.is_empty() {
                out("no tokens yet: `keymux token create --name codex`");
            }
            for t in &config.tokens {
                out(&format!("{:<16} {}", t.name, t.id));
            }
        }
        TokenCommand::Show { token } => {
            let found = find(&config, &token)?;
            let account = account::token(&found.id);
            match secrets::blocking(store.clone(), move |s| s.get(&account)).await? {
                Some(secret) => out(secret.expose()),
                None => {
                    return Err(StartError::Usage(format!(
                        "token '{}' is missing from the keychain; revoke it and create a new one",
                        found.name
                    )))
                }
            }
        }
        TokenCommand::Revoke { token } => {
            let found = find(&config, &token)?;
            let account = account::token(&found.id);
            secrets::blocking(store.clone(), move |s| s.delete(&account)).await?;
            config.tokens.retain(|t| t.id != found.id);
            config.save(&path)?;
            out(&format!("revoked token '{}'; a running gateway stops accepting it on restart", found.name));
        }
    }
    Ok(())
}
