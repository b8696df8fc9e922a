//! The `keymux` command line: `serve` (the default), the commands that manage keys, tokens, pools and
//! routing, and `setup`, which points Codex or pi at the gateway. Every command that changes or reads
//! Keymux goes through `control::Control`: on the running gateway when there is one, in the keychain
//! and the config otherwise, decided once per command by `control::open`.

mod args;
mod changes;
mod clients;
mod control;
mod import;
mod import_chatgpt;
mod keys;
mod list;
mod loaded;
mod manage;
mod pools;
mod setup;
mod tokens;
mod usage;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::EnvSecrets;
use crate::runtime::Runtime;
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
    /// Manage pools: named sets of keys that a client token is bound to (work, personal). A token of
    /// a pool only ever reaches that pool's keys (then its fallback pools, if you set any).
    #[command(
        subcommand,
        after_help = "Examples:\n  keymux pool create work --keys work,work-2\n  keymux pool create personal --keys \
                      personal\n  keymux token create --name acme-repo --pool work\n  keymux token set codex --pool \
                      personal\n\nTokens without a pool are in the built-in pool `all` (every key)."
    )]
    Pool(PoolCommand),
    /// Print a one-time login link for the dashboard of the running gateway.
    Dashboard {
        /// Also open it in the default browser.
        #[arg(long)]
        open: bool,
    },
    /// Point Codex or pi at this gateway in its own config file: shows the change, asks, keeps a backup.
    Setup(SetupArgs),
    /// Requests, tokens and spend per key, pool, token or model, with totals (today by default).
    #[command(after_help = "Days are local days (today is the first). Per key and per pool come from the stored \
                      metrics (read from the store when no gateway runs); per token and per model from the \
                      requests the running gateway remembers (recent requests only).")]
    Usage(usage::UsageArgs),
    /// The clients installed here (Codex CLI, pi), run through Keymux to see that they work.
    #[command(subcommand)]
    Clients(ClientsCommand),
    /// Pause routing on the running gateway: new requests get 503 with retry-after.
    Pause,
    /// Resume routing on the running gateway.
    Resume,
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

#[derive(Args)]
struct SetupArgs {
    /// The client to set up.
    client: ClientArg,
    /// The client's file (default: where the client reads it: $CODEX_HOME/config.toml or
    /// ~/.codex/config.toml, with --pool the profile file keymux-POOL.config.toml next to it;
    /// $PI_CODING_AGENT_DIR/models.json or ~/.pi/agent/models.json).
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// The pool the client's token reaches (default: all, every key). For another pool Codex gets a
    /// profile file, used with `codex -p keymux-POOL`, and pi a provider that one project selects.
    #[arg(long, value_name = "POOL", default_value = "all")]
    pool: String,
    /// pi with --pool: the directory pi uses the pool in (default: the current directory). pi reads
    /// it only when started in exactly that directory.
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
    /// Apply without asking (needed when stdin is not a terminal).
    #[arg(long, conflicts_with = "undo")]
    yes: bool,
    /// Take Keymux's setup of this client back: only what Keymux added goes (Codex), or the file as it
    /// was before is restored (pi, pools).
    #[arg(long)]
    undo: bool,
    /// Codex: point its built-in provider at Keymux even though `openai_base_url` names another URL
    /// (Undo puts it back). With --undo: take the setup back even though the file changed since.
    #[arg(long)]
    force: bool,
    /// Codex: the custom-provider form (`model_provider = "keymux"`), e.g. for a ChatGPT login. Codex
    /// then records sessions under the provider `keymux`, apart from the ones you have now.
    #[arg(long, conflicts_with = "undo")]
    custom_provider: bool,
    /// Codex: add the API key its auth.json holds to Keymux's keys (label LABEL, `codex` unless given)
    /// before the client token takes its place; a ChatGPT login there joins as your plan (label
    /// `chatgpt` unless given).
    #[arg(long, value_name = "LABEL", num_args = 0..=1, default_missing_value = "", conflicts_with_all = ["undo", "custom_provider"])]
    import_key: Option<String>,
    /// Codex 0.171 and later: log in instead of keeping a token in Codex's files (its
    /// `gateway_oauth`). Codex opens Keymux's dashboard on its first request, where you pick the pool
    /// and approve; its token stays in Codex's own encrypted store. The custom-provider form.
    #[arg(long, conflicts_with_all = ["undo", "import_key"])]
    login: bool,
}

#[derive(Subcommand)]
enum ClientsCommand {
    /// Run one real turn of each installed client (`codex`, `pi` on PATH) through Keymux over each
    /// transport it uses (Codex: HTTP, WebSocket, a remote compaction; pi: HTTP), against a stand-in
    /// provider on loopback: no key is spent, and your config and keychain are not used.
    #[command(after_help = "Exits 0 only when a client was found and every check passed.")]
    Check {
        /// Print the results as JSON: {"clients":[{"name","version","ok","checks":[{"transport","ok","error"}]}]}.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum ClientArg {
    /// Codex CLI.
    Codex,
    /// The pi coding agent.
    Pi,
}

impl From<ClientArg> for crate::setup::Client {
    fn from(client: ClientArg) -> Self {
        match client {
            ClientArg::Codex => Self::Codex,
            ClientArg::Pi => Self::Pi,
        }
    }
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
        /// Its settings (each at its default when left out).
        #[command(flatten)]
        settings: args::SettingsArgs,
    },
    /// Import the OpenAI API keys you already have in plaintext: OPENAI_API_KEY, Codex's auth.json and
    /// pi's auth.json/models.json (or a pasted list with --from). Shows what it found first.
    #[command(after_help = "A list has one key a line, optionally LABEL=KEY; blank lines and # comments are skipped.")]
    Import {
        /// Read keys from this list instead (`-`: stdin) rather than from the usual places.
        #[arg(long, value_name = "FILE")]
        from: Option<PathBuf>,
        /// Import without asking (needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
        /// Take each imported key out of the file it was found in without asking (a backup is kept).
        #[arg(long)]
        remove_plaintext: bool,
        /// Import the ChatGPT login Codex keeps ($CODEX_HOME/auth.json) as a key of provider chatgpt:
        /// new sessions go to your plan first, and to your API keys once its usage runs out.
        #[arg(long, conflicts_with_all = ["from", "remove_plaintext"])]
        chatgpt: bool,
        /// With --chatgpt: the plan's label (default chatgpt).
        #[arg(long, requires = "chatgpt", value_name = "LABEL")]
        label: Option<String>,
    },
    /// List keys: label, id, provider, org and a short fingerprint (never the secret); a ChatGPT
    /// plan shows its account and plan type.
    List {
        /// Print the keys as a JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Remove a key by label or id, from the config and the keychain (and the running gateway).
    Remove {
        /// Label or id.
        key: String,
    },
    /// Change a key's label, priority, budget, models or secret (in the running gateway too).
    Set {
        /// Label or id.
        key: String,
        /// A new label.
        #[arg(long)]
        label: Option<String>,
        /// Replace the key's secret in place (read from stdin or a hidden prompt, never the command line).
        #[arg(long)]
        secret: bool,
        /// New settings (those left out stay).
        #[command(flatten)]
        settings: args::SettingsArgs,
    },
    /// Switch a key on (in the running gateway it also clears a rejection or an exhausted quota); kept
    /// across restarts.
    Enable {
        /// Label or id.
        key: String,
    },
    /// Switch a key off; it stays off across restarts until enabled.
    Disable {
        /// Label or id.
        key: String,
    },
    /// Test a key with one free call to the provider, from the running gateway.
    Test {
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
        /// The pool its requests may reach (default: all, every key).
        #[arg(long, default_value = "all")]
        pool: String,
    },
    /// List token names, ids and pools.
    List,
    /// Bind a token to another pool (at once in the running gateway).
    Set {
        /// Name or id.
        token: String,
        /// The pool its requests may reach from now on (`all`: every key).
        #[arg(long)]
        pool: String,
    },
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

#[derive(Subcommand)]
enum PoolCommand {
    /// List the pools with their keys, fallbacks and tokens (and, while Keymux runs, usable keys).
    List,
    /// Create a pool: `keymux pool create work --keys work,work-2`.
    Create {
        /// Its name (letters, digits, '-' and '_'; `all` is built in).
        name: String,
        /// Its keys by label or id, comma-separated ("" for none yet). A key may be in several pools.
        #[arg(long, value_name = "KEYS", value_parser = args::names)]
        keys: args::Names,
        /// Pools to use, in order, only when none of this pool's keys can serve (default: never).
        #[arg(long, value_name = "POOLS", value_parser = args::names)]
        fallback: Option<args::Names>,
        /// Its policies (each at its default when left out).
        #[command(flatten)]
        policies: args::PoliciesArgs,
    },
    /// Change a pool's keys, fallbacks or policies (each list replaces the old one).
    Set {
        /// The pool.
        name: String,
        /// Its keys by label or id, comma-separated ("" for none).
        #[arg(long, value_name = "KEYS", value_parser = args::names)]
        keys: Option<args::Names>,
        /// Its fallback pools, comma-separated ("" for never).
        #[arg(long, value_name = "POOLS", value_parser = args::names)]
        fallback: Option<args::Names>,
        /// Its policies: the priority tier, the proxy, its budgets in money (its keys together).
        #[command(flatten)]
        policies: args::PoliciesArgs,
    },
    /// Remove a pool (refused while a token is bound to it or another pool falls back to it).
    Remove {
        /// The pool.
        name: String,
    },
}

/// Entry point of the `keymux` binary.
/// The command line's definition: every command and flag `keymux` takes (the user guide's drift test
/// reads the flags it names from here).
pub fn definition() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Worker threads of the async runtime: one per CPU this process may use (its affinity mask and cgroup
/// quota, as `available_parallelism` reads them), so `taskset -c 0 keymux serve` serves on one thread
/// and a container limited to two CPUs on two.
fn runtime_threads() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// One CPU gets the single-threaded scheduler: with nothing to steal work from, the work-stealing one
/// only adds its cross-thread queues and wake-ups to every task switch.
fn runtime_builder(threads: usize) -> tokio::runtime::Builder {
    if threads == 1 {
        return tokio::runtime::Builder::new_current_thread();
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(threads);
    builder
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let built = runtime_builder(runtime_threads()).enable_all().build();
    let runtime = match built {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("keymux: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command.unwrap_or(Command::Serve(ServeArgs::default())) {
            Command::Serve(args) => serve(cli.config, args).await,
            Command::Keys(cmd) => keys::keys(cli.config, cmd).await,
            Command::Token(cmd) => tokens::token(cli.config, cmd).await,
            Command::Pool(cmd) => pools::pool(cli.config, cmd).await,
            Command::Dashboard { open } => manage::dashboard(cli.config, open).await,
            Command::Setup(args) => setup::setup(cli.config, args).await,
            Command::Usage(args) => usage::usage(cli.config, args).await,
            Command::Clients(ClientsCommand::Check { json }) => clients::check(json).await,
            Command::Pause => manage::pause(cli.config, true).await,
            Command::Resume => manage::pause(cli.config, false).await,
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
    if let Some(running) = running_already(&options).await {
        return Err(StartError::Usage(running));
    }
    for done in startup::first_run(&options).await? {
        tracing::info!("{done}");
    }
    let ephemeral = options.ephemeral;
    let mut runtime = Runtime::start(options).await?;
    crate::clients_check::watch::start(&mut runtime, ephemeral);
    for notice in runtime.notices() {
        tracing::warn!("{notice}");
    }
    let addr = runtime.addr();
    if !addr.ip().is_loopback() {
        tracing::warn!(
            "LISTENING ON {addr} (NOT LOOPBACK): every machine that can reach it may use your keys with a local token"
        );
    }
    let gateway = runtime.gateway();
    out(&format!(
        "keymux listening on http://{addr}/v1 with {} key(s), runtime_threads={} (one per CPU it may use).",
        gateway.pool().len(),
        tokio::runtime::Handle::current().metrics().num_workers()
    ));
    out(&format!("Dashboard (this link works once, for ten minutes): {}", gateway.login_link()));
    out(&next_step(gateway.pool().len(), runtime.token_hint()));
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

/// What to do next, as the last line of the start banner.
fn next_step(keys: usize, token_hint: &str) -> String {
    if keys == 0 {
        return "Next: add a key with `keymux keys add --label work` (its secret is read from a hidden prompt)."
            .to_owned();
    }
    format!(
        "Next: `keymux setup codex` or `keymux setup pi` points your client here (it shows the change first). \
         Token: {token_hint}."
    )
}

/// A Keymux gateway already serving this config or its address, said plainly.
async fn running_already(options: &StartOptions) -> Option<String> {
    let (config, path) = startup::load_config(options).ok()?;
    let listen = options.listen.or_else(|| config.listen.parse().ok())?;
    crate::remote::already_running(&path.or_else(|| crate::config::Config::default_path().ok())?, listen).await
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
    crate::logging::init();
}
