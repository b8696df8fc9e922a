//! `keymux usage [--days N] [--by key|pool|token|model]`: requests, tokens and spend per group since a
//! local midnight, with totals. From the running gateway's spend report; with none running, per key
//! and per pool are read from the metrics store itself. Per token and per model need the gateway: the
//! stored metrics keep numbers per hashed key only, so those come from the requests it remembers.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use super::control;
use super::loaded::{load, usage as refused, Loaded};
use super::out;
use crate::api::spend::{stored, Grouping};
use crate::api::types::{SpendBy, SpendReport, SpendRow};
use crate::clock::{local_day_start, local_periods, Clock};
use crate::config::EnvSecrets;
use crate::digest::InstallKey;
use crate::keys::KeyId;
use crate::pools::Pools;
use crate::secrets::{self, account};
use crate::startup::StartError;

/// `keymux usage`'s options.
#[derive(Args)]
pub(super) struct UsageArgs {
    /// How many local days, today first (1: today only).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=400))]
    days: u32,
    /// One row per key, pool, token or model.
    #[arg(long, value_enum, default_value_t = ByArg::Key)]
    by: ByArg,
}

#[derive(Clone, Copy, ValueEnum)]
enum ByArg {
    Key,
    Pool,
    Token,
    Model,
}

impl From<ByArg> for SpendBy {
    fn from(by: ByArg) -> Self {
        match by {
            ByArg::Key => Self::Key,
            ByArg::Pool => Self::Pool,
            ByArg::Token => Self::Token,
            ByArg::Model => Self::Model,
        }
    }
}

impl ByArg {
    fn name(self) -> &'static str {
        match self {
            Self::Key => "key",
            Self::Pool => "pool",
            Self::Token => "token",
            Self::Model => "model",
        }
    }
}

pub(super) async fn usage(config_path: Option<PathBuf>, args: UsageArgs) -> Result<(), StartError> {
    let loaded = load(config_path)?;
    let running = control::open(&loaded).await?.spend(args.days, args.by.into()).await.map_err(refused)?;
    let (report, read_from) = match running {
        Some(report) => (report, None),
        None => {
            let (report, dir) = from_store(&loaded, args.by, args.days).await?;
            (report, Some(dir))
        }
    };
    print(&report, args.by, args.days, read_from.as_deref());
    Ok(())
}

/// The report per key or per pool, from the metrics store (no gateway runs, so none holds it).
async fn from_store(loaded: &Loaded, by: ByArg, days: u32) -> Result<(SpendReport, PathBuf), StartError> {
    match by {
        ByArg::Key | ByArg::Pool => {}
        ByArg::Token | ByArg::Model => {
            return Err(refused(format!(
                "no Keymux gateway is running with {}: per {} comes from the requests a running gateway \
                 remembers (the stored metrics keep keys only). Start it with `keymux serve`, or use --by key \
                 or --by pool",
                loaded.path.display(),
                by.name()
            )))
        }
    }
    let dir = crate::startup::metrics_dir(&loaded.config, false)
        .ok_or_else(|| refused("no data directory for the metrics store; set metrics_dir in the config"))?;
    if !dir.exists() {
        return Err(refused(format!(
            "no usage recorded yet: {} does not exist (`keymux serve` makes it)",
            dir.display()
        )));
    }
    let env = super::env_secrets()?;
    let keys = fingerprints(loaded, &env).await;
    let clock = Clock::system();
    let (zone, now) = (clock.zone(), clock.unix_ms());
    let since = local_day_start(now, &zone, days - 1);
    let (retention, at) = (loaded.config.metrics_retention_days, dir.clone());
    let read = tokio::task::spawn_blocking(move || {
        let metrics = crate::metrics::Metrics::open(&at, retention);
        (metrics.status().error, metrics.series(since, 1))
    })
    .await
    .map_err(|e| refused(format!("the metrics store could not be read: {e}")))?;
    let points = match read {
        (Some(error), _) => return Err(refused(error)),
        (None, points) => points,
    };
    let named: Vec<(String, String)> = keys.iter().map(|(_, label, fp)| (fp.clone(), label.clone())).collect();
    let labels: Vec<(KeyId, String)> = keys.iter().map(|(id, label, _)| (id.clone(), label.clone())).collect();
    let defs = loaded.config.pools.iter().chain(&env.pools).cloned().collect();
    let resolved = Pools::resolve(defs, &labels, &Pools::default());
    let pools: Vec<(String, Vec<String>)> = resolved
        .defs()
        .iter()
        .map(|def| {
            let ids = resolved.keys_of(&def.name);
            (def.name.clone(), keys.iter().filter(|(id, _, _)| ids.contains(id)).map(|(_, _, fp)| fp.clone()).collect())
        })
        .collect();
    let grouping = match by {
        ByArg::Pool => Grouping::Pools(&pools),
        ByArg::Key | ByArg::Token | ByArg::Model => Grouping::Keys(&named),
    };
    Ok((stored(&points, since, local_periods(now, &zone).zone, &grouping), dir))
}

/// The keys of the config (secrets from the keychain) and of the environment (`KEYMUX_KEY_*`), with
/// their fingerprints under the install secret (`KEYMUX_INSTALL_SECRET`, else the keychain's), the
/// only way the metrics name them. A key whose secret cannot be read is left out: its rows show as a
/// removed key.
async fn fingerprints(loaded: &Loaded, env: &EnvSecrets) -> Vec<(KeyId, String, String)> {
    let read = |name: String| secrets::blocking(loaded.store.clone(), move |s| s.get(&name));
    let install = match &env.install_secret {
        Some(secret) => Some(secret.clone()),
        None => read(account::INSTALL_SECRET.to_owned()).await.ok().flatten(),
    };
    let Some(install) = install.map(|s| InstallKey::new(&s)) else { return Vec::new() };
    let mut out = Vec::new();
    for key in &loaded.config.keys {
        if let Ok(Some(secret)) = read(account::key(key.id.as_str())).await {
            let identity = key.provider.get().identity(&secret);
            out.push((key.id.clone(), key.label.clone(), install.fingerprint(&identity)));
        }
    }
    for key in &env.keys {
        out.push((KeyId::new(format!("env-{}", key.label)), key.label.clone(), install.fingerprint(&key.secret)));
    }
    out
}

fn print(report: &SpendReport, by: ByArg, days: u32, read_from: Option<&Path>) {
    let period = if days == 1 { "today".to_owned() } else { format!("the last {days} days") };
    out(&format!("Spend {period} (since {}, {}), by {}:", local_time(report.since_unix_ms), report.zone, by.name()));
    out(&format!(
        "{:<28} {:>9} {:>13} {:>13} {:>13} {:>14} {:>9}",
        by.name().to_uppercase(),
        "REQUESTS",
        "INPUT",
        "CACHED",
        "OUTPUT",
        "SPEND",
        "UNPRICED"
    ));
    if report.rows.is_empty() {
        out("(no requests)");
    }
    report.rows.iter().chain(std::iter::once(&report.total)).for_each(row);
    if report.recent_only {
        out(&format!(
            "recent requests only: per {} comes from the requests the running gateway remembers (its last {}, \
             since it started); every request from {} on is counted.",
            by.name(),
            crate::events::RECENT_CAPACITY,
            local_time(report.complete_since_unix_ms)
        ));
    }
    if report.total.unpriced_requests > 0 {
        out("UNPRICED: requests whose model (or service tier) has no price; they are not in SPEND, and not $0. \
             Price a model with a [prices.\"MODEL\"] entry in the config (input, cached_input and output in \
             US dollars per 1M tokens, or alias = \"a priced model\").");
    }
    if let Some(dir) = read_from {
        out(&format!("(no gateway running: read from the metrics store {})", dir.display()));
    }
}

fn row(r: &SpendRow) {
    // Nothing priced but something unpriced is not $0: it is unknown.
    let spend = match (r.spend_usd.nanos(), r.unpriced_requests) {
        (0, 1..) => "unpriced".to_owned(),
        _ => dollars(r.spend_usd),
    };
    out(&format!(
        "{:<28} {:>9} {:>13} {:>13} {:>13} {:>14} {:>9}",
        r.name, r.requests, r.input_tokens, r.cached_tokens, r.output_tokens, spend, r.unpriced_requests
    ));
}

/// `$1.234567`: to the micro-dollar, rounded half up (a request can cost a few micro-dollars).
fn dollars(usd: crate::spend::Usd) -> String {
    let micros = usd.nanos().saturating_add(500) / 1000;
    format!("${}.{:06}", micros / 1_000_000, micros % 1_000_000)
}

/// A moment as local `YYYY-MM-DD HH:MM`.
fn local_time(unix_ms: u64) -> String {
    let ms = i64::try_from(unix_ms).unwrap_or(i64::MAX);
    jiff::Timestamp::from_millisecond(ms).map_or_else(
        |_| unix_ms.to_string(),
        |t| t.to_zoned_datetime(Clock::system().zone()).strftime("%Y-%m-%d %H:%M").to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_are_shown_to_the_micro_dollar() {
        use crate::spend::Usd;
        assert_eq!(dollars(Usd::from_nanos(0)), "$0.000000");
        assert_eq!(dollars(Usd::from_nanos(940_000)), "$0.000940");
        assert_eq!(dollars(Usd::from_nanos(1_234_567_500)), "$1.234568");
        assert_eq!(dollars(Usd::from_nanos(12_000_000_000)), "$12.000000");
    }
}
