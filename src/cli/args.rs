//! Reading what the person typed: a secret from a hidden prompt or stdin, a yes or no to a question,
//! and a key's or a pool's settings from their flags (declared here once, for `keys add`, `keys set`,
//! `pool create` and `pool set`), each read into its typed value by a value parser, and handed on as a
//! typed change.

use std::io::{BufRead as _, IsTerminal as _, Read as _, Write as _};

use super::loaded::usage;

use crate::budget::{MoneyBudgetChange, OnLimit};
use crate::key_settings::KeySettingsChange;
use crate::keys::validate_secret;
use crate::pools::PoolPoliciesChange;
use crate::secrets::Secret;
use crate::spend::Usd;
use crate::startup::StartError;

/// Reads an API key from a hidden prompt, or from stdin when it is not a terminal.
pub(super) fn read_secret() -> Result<Secret, StartError> {
    let raw = if std::io::stdin().is_terminal() {
        rpassword::prompt_password("API key (input hidden): ")
            .map_err(|e| usage(format!("cannot read the key: {e}")))?
    } else {
        let mut buf = String::new();
        std::io::stdin()
            .take(4096)
            .read_to_string(&mut buf)
            .map_err(|e| usage(format!("cannot read the key from stdin: {e}")))?;
        buf
    };
    let value = raw.trim_end_matches(['\n', '\r']).trim();
    validate_secret(value).map_err(usage)?;
    Ok(Secret::new(value))
}

/// Asks a yes/no question on the terminal; only a yes is yes.
pub(super) fn ask(question: &str) -> Result<bool, StartError> {
    eprint!("{question}");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer).map_err(|e| usage(format!("cannot read the answer: {e}")))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "Yes" | "YES"))
}

/// A key's settings as flags (`keys add`, `keys set`): each flag given becomes one field of a
/// `KeySettingsChange`, named as `key_settings` names it, so the CLI, the config file and the API agree.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SettingsArgs {
    /// Priority tier: unpinned traffic uses the lowest tier with a usable key (e.g. work 0, personal 1).
    #[arg(long)]
    pub priority: Option<u8>,
    /// Soft daily token budget (input + output tokens per UTC day), or `none`.
    #[arg(long, value_name = "TOKENS|none", value_parser = tokens, conflicts_with = "no_budget")]
    pub daily_token_budget: Option<OrNone<u64>>,
    /// Remove the daily token budget (as `--daily-token-budget none`).
    #[arg(long)]
    pub no_budget: bool,
    /// The only models this key serves, comma-separated ("" for all).
    #[arg(long, value_name = "MODELS", value_parser = names)]
    pub models: Option<Names>,
    /// Models this key never serves, comma-separated ("" for none).
    #[arg(long, value_name = "MODELS", value_parser = names)]
    pub exclude_models: Option<Names>,
    /// Percent of its request and token windows kept for the sessions already on it (1 to 90): below
    /// it the key takes no new sessions until the window refills; `none` keeps nothing back.
    #[arg(long, value_name = "PERCENT|none", value_parser = percent::<90>)]
    pub reserve_window_pct: Option<OrNone<u8>>,
    /// Its budgets in money.
    #[command(flatten)]
    pub money: MoneyArgs,
}

/// A budget in money as flags (a key's in `keys add` and `keys set`, a pool's in `pool create` and
/// `pool set`; `none` removes one): each flag given becomes one field of a `MoneyBudgetChange`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct MoneyArgs {
    /// US dollars it may spend per local day, or `none`.
    #[arg(long, value_name = "DOLLARS|none", value_parser = dollars, allow_hyphen_values = true)]
    pub daily_budget_usd: Option<OrNone<Usd>>,
    /// US dollars it may spend per local month, or `none`.
    #[arg(long, value_name = "DOLLARS|none", value_parser = dollars, allow_hyphen_values = true)]
    pub monthly_budget_usd: Option<OrNone<Usd>>,
    /// Percent of a budget past which it takes no new sessions (its sessions go on), or `none` (100).
    #[arg(long, value_name = "PERCENT|none", value_parser = percent::<100>)]
    pub reserve_at: Option<OrNone<u8>>,
    /// At 100 % of a budget: `reserve` (its sessions go on) or `stop` (refuse everything until it resets).
    #[arg(long, value_name = "reserve|stop", value_parser = on_limit)]
    pub on_limit: Option<OnLimit>,
}

/// A pool's policies as flags (`pool create`, `pool set`): each flag given becomes one field of a
/// `PoolPoliciesChange`, named as `pools::PoolPolicies` names it.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PoliciesArgs {
    /// Whether its requests may ask for the priority tier (Codex's Fast mode, billed about twice);
    /// `false` sends them in the standard tier (a new pool allows it).
    #[arg(long, value_name = "BOOL", value_parser = clap::value_parser!(bool))]
    pub allow_priority: Option<bool>,
    /// Whether its requests may ask for the ultrafast tier (billed 3x to 6x); `false` sends them in the
    /// priority tier (a new pool allows it; `--allow-priority false` keeps it out too).
    #[arg(long, value_name = "BOOL", value_parser = clap::value_parser!(bool))]
    pub allow_ultrafast: Option<bool>,
    /// The proxy its keys go out through (http://host:port, https://…, socks5://… or socks5h://…;
    /// default: direct). A user and password in it (http://user:password@host:port) are kept in the
    /// keychain.
    #[arg(long, value_name = "URL", conflicts_with = "no_proxy")]
    pub proxy: Option<String>,
    /// Its keys go out direct again (the proxy is removed).
    #[arg(long)]
    pub no_proxy: bool,
    /// Its budgets in money (its keys together).
    #[command(flatten)]
    pub money: MoneyArgs,
}

impl SettingsArgs {
    /// The settings given, without the budget in money.
    pub(super) fn change(&self) -> KeySettingsChange {
        let no_budget = self.no_budget.then_some(None);
        KeySettingsChange {
            priority: self.priority,
            daily_token_budget: self.daily_token_budget.map(|b| b.0).or(no_budget),
            models: self.models.clone().map(|m| m.0),
            exclude_models: self.exclude_models.clone().map(|m| m.0),
            reserve_window_pct: self.reserve_window_pct.map(|p| p.0),
        }
    }
}

impl MoneyArgs {
    /// The budget changes given.
    pub(super) fn change(&self) -> MoneyBudgetChange {
        MoneyBudgetChange {
            daily: self.daily_budget_usd.map(|d| d.0),
            monthly: self.monthly_budget_usd.map(|d| d.0),
            reserve_at: self.reserve_at.map(|p| p.0),
            on_limit: self.on_limit,
        }
    }
}

impl PoliciesArgs {
    /// The policy changes given.
    pub(super) fn change(&self) -> PoolPoliciesChange {
        let proxy = if self.no_proxy { Some(None) } else { self.proxy.clone().map(Some) };
        PoolPoliciesChange {
            allow_priority: self.allow_priority,
            allow_ultrafast: self.allow_ultrafast,
            proxy,
            money: self.money.change(),
        }
    }
}

/// A flag's value that may be `none`, which removes the setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrNone<T>(pub Option<T>);

/// A comma-separated list of names (`""` is the empty list).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names(pub Vec<String>);

/// `none`, or what `parse` reads.
fn or_none<T>(value: &str, parse: impl FnOnce(&str) -> Option<T>) -> Option<OrNone<T>> {
    if value.trim().eq_ignore_ascii_case("none") {
        Some(OrNone(None))
    } else {
        parse(value.trim()).map(|v| OrNone(Some(v)))
    }
}

/// A list of names (`work,work-2`).
pub(super) fn names(value: &str) -> Result<Names, String> {
    Ok(Names(value.split(',').map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned).collect()))
}

/// A number of tokens (`2000000`, `2_000_000`), or `none`.
fn tokens(value: &str) -> Result<OrNone<u64>, String> {
    or_none(value, |v| v.replace('_', "").parse().ok())
        .ok_or_else(|| "not a number of tokens: give one (2000000), or `none`".to_owned())
}

/// A number of US dollars (`5`, `$0.50`), or `none`.
fn dollars(value: &str) -> Result<OrNone<Usd>, String> {
    let amount = or_none(value, |v| v.trim_start_matches('$').parse::<f64>().ok())
        .ok_or_else(|| "not an amount: give US dollars (5, 0.50) or `none` to remove it".to_owned())?;
    let usd = amount.0.map(|d| serde_json::from_value(serde_json::json!(d))).transpose();
    usd.map(OrNone).map_err(|_| "a budget is zero or more US dollars".to_owned())
}

/// A percent (`20`, `20%`), or `none`; `MOST` is the largest the setting takes (checked with the
/// setting's own words when it is applied).
fn percent<const MOST: u8>(value: &str) -> Result<OrNone<u8>, String> {
    or_none(value, |v| v.trim_end_matches('%').parse().ok())
        .ok_or_else(|| format!("not a percent: give 1 to {MOST}, or `none`"))
}

/// `reserve` or `stop`.
fn on_limit(value: &str) -> Result<OnLimit, String> {
    serde_json::from_value(serde_json::json!(value.trim().to_ascii_lowercase()))
        .map_err(|_| "give `reserve` (sessions on the key go on) or `stop`".to_owned())
}
