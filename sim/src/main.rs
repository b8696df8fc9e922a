//! `keymux-sim`: runs the OpenAI API simulator until Ctrl-C.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use keymux_sim::{ForeignReasoning, Limits, Sim, SimConfig};

/// A multi-organization OpenAI API simulator.
#[derive(Debug, Parser)]
#[command(name = "keymux-sim", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// An organization and its Bearer keys: `org-a=sk-a1,sk-a2`. Repeatable.
    #[arg(long = "org", value_name = "ORG=KEY[,KEY...]")]
    orgs: Vec<String>,
    /// An organization and its Azure (`api-key` header) keys: `org-c=azkey1`. Repeatable.
    #[arg(long = "azure-key", value_name = "ORG=KEY[,KEY...]")]
    azure: Vec<String>,
    /// Requests per window per key.
    #[arg(long)]
    rpm: Option<u64>,
    /// Estimated input tokens per window per key.
    #[arg(long)]
    tpm: Option<u64>,
    /// Rate-limit window in seconds.
    #[arg(long, default_value_t = 60)]
    window_secs: u64,
    /// Gzip non-streaming JSON bodies for clients that accept it.
    #[arg(long)]
    gzip_json: bool,
    /// Prompt-cache entry lifetime in seconds.
    #[arg(long, default_value_t = 300)]
    cache_ttl_secs: u64,
    /// Maximum WebSocket connection age in seconds.
    #[arg(long, default_value_t = 3600)]
    ws_limit_secs: u64,
    /// Drop replayed reasoning of another organization and report it in `input_transformations`
    /// (as newer models do), instead of answering 400 `invalid_encrypted_content`.
    #[arg(long)]
    drop_foreign_reasoning: bool,
}

fn split_spec(spec: &str) -> anyhow::Result<(String, Vec<String>)> {
    let (org, keys) = spec.split_once('=').with_context(|| format!("expected ORG=KEY[,KEY...], got {spec:?}"))?;
    let keys: Vec<String> = keys.split(',').map(str::trim).filter(|k| !k.is_empty()).map(str::to_owned).collect();
    if org.trim().is_empty() || keys.is_empty() {
        bail!("expected ORG=KEY[,KEY...], got {spec:?}");
    }
    Ok((org.trim().to_owned(), keys))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let defaults = Limits::default();
    let mut config = SimConfig::new()
        .limits(Limits {
            requests: args.rpm.unwrap_or(defaults.requests),
            tokens: args.tpm.unwrap_or(defaults.tokens),
            window: Duration::from_secs(args.window_secs.max(1)),
        })
        .gzip_json(args.gzip_json)
        .cache_ttl(Duration::from_secs(args.cache_ttl_secs))
        .ws_connection_limit(Duration::from_secs(args.ws_limit_secs));
    if args.drop_foreign_reasoning {
        config = config.foreign_reasoning(ForeignReasoning::Drop);
    }
    for spec in &args.orgs {
        let (org, keys) = split_spec(spec)?;
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        config = config.org(&org, &keys);
    }
    for spec in &args.azure {
        let (org, keys) = split_spec(spec)?;
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        config = config.azure_org(&org, &keys);
    }
    if config.orgs.is_empty() {
        bail!("configure at least one organization with --org or --azure-key");
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let sim = Sim::serve(listener, config).await?;
    #[expect(clippy::print_stdout, reason = "the binary announces its address on stdout")]
    {
        println!("keymux-sim listening on {}", sim.base_url());
    }
    tokio::signal::ctrl_c().await?;
    sim.shutdown();
    Ok(())
}
