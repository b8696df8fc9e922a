//! Reading what the person typed: a secret from a hidden prompt or stdin, a yes or no to a question,
//! and a key's or a pool's settings from their flags (declared here once, for `keys add`, `keys set`
//! and `pool set`).

use std::io::{BufRead as _, IsTerminal as _, Read as _, Write as _};

use super::loaded::usage;

use crate::budget::OnLimit;
use crate::key_settings::Patch;
use crate::keys::validate_secret;
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

/// A key's settings as flags (`keys add`, `keys set`): each flag given becomes one field of a `Patch`,
/// named as `key_settings` names it, so the CLI, the config file and the API agree.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SettingsArgs {
    /// Priority tier: unpinned traffic uses the lowest tier with a usable key (e.g. work 0, personal 1).
    #[arg(long)]
    pub priority: Option<u8>,
    /// Soft daily token budget (input + output tokens per UTC day), or `none`.
    #[arg(long, value_name = "TOKENS|none", conflicts_with = "no_budget")]
    pub daily_token_budget: Option<String>,
    /// Remove the daily token budget (as `--daily-token-budget none`).
    #[arg(long)]
    pub no_budget: bool,
    /// The only models this key serves, comma-separated ("" for all).
    #[arg(long, value_name = "MODELS")]
    pub models: Option<String>,
    /// Models this key never serves, comma-separated ("" for none).
    #[arg(long, value_name = "MODELS")]
    pub exclude_models: Option<String>,
    /// Percent of its request and token windows kept for the sessions already on it (1 to 90): below
    /// it the key takes no new sessions until the window refills; `none` keeps nothing back.
    #[arg(long, value_name = "PERCENT|none")]
    pub reserve_window_pct: Option<String>,
    /// Its budgets in money.
    #[command(flatten)]
    pub money: MoneyArgs,
}

/// A budget in money as flags (a key's in `keys add` and `keys set`, a pool's in `pool set`; `none`
/// removes one).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct MoneyArgs {
    /// US dollars it may spend per local day, or `none`.
    #[arg(long, value_name = "DOLLARS|none", allow_hyphen_values = true)]
    pub daily_budget_usd: Option<String>,
    /// US dollars it may spend per local month, or `none`.
    #[arg(long, value_name = "DOLLARS|none", allow_hyphen_values = true)]
    pub monthly_budget_usd: Option<String>,
    /// Percent of a budget past which it takes no new sessions (its sessions go on), or `none` (100).
    #[arg(long, value_name = "PERCENT|none")]
    pub reserve_at: Option<String>,
    /// At 100 % of a budget: `reserve` (its sessions go on) or `stop` (refuse everything until it resets).
    #[arg(long, value_name = "reserve|stop")]
    pub on_limit: Option<String>,
}

impl SettingsArgs {
    /// The settings given and the budget in money, as one change (`keys set`).
    pub(super) fn patch(&self) -> Result<Patch, StartError> {
        let mut patch = self.settings_patch()?;
        patch.extend(self.money.patch()?);
        Ok(patch)
    }

    /// The settings given, without the budget in money; each value read in the flag's own words.
    pub(super) fn settings_patch(&self) -> Result<Patch, StartError> {
        let mut patch = Patch::default();
        if let Some(p) = self.priority {
            patch.set("priority", p);
        }
        if self.no_budget {
            patch.set("daily_token_budget", None::<u64>);
        }
        if let Some(v) = &self.daily_token_budget {
            let tokens = none_or(v, |v| v.replace('_', "").parse::<u64>().ok());
            let tokens = tokens.ok_or_else(|| {
                usage(format!("--daily-token-budget {v:?} is not a number of tokens: give one (2000000), or `none`"))
            })?;
            patch.set("daily_token_budget", tokens);
        }
        for (field, value) in [("models", &self.models), ("exclude_models", &self.exclude_models)] {
            if let Some(v) = value {
                patch.set(field, super::pools::list(v));
            }
        }
        if let Some(p) = percent("reserve-window-pct", self.reserve_window_pct.as_deref(), 90)? {
            patch.set("reserve_window_pct", p);
        }
        Ok(patch)
    }
}

impl MoneyArgs {
    /// The budget changes given: a number of dollars or percent, or `none` to remove one.
    pub(super) fn patch(&self) -> Result<Patch, StartError> {
        let mut patch = Patch::default();
        for (field, value) in
            [("daily_budget_usd", &self.daily_budget_usd), ("monthly_budget_usd", &self.monthly_budget_usd)]
        {
            if let Some(v) = value {
                patch.set(field, amount(&field.replace('_', "-"), v)?);
            }
        }
        if let Some(p) = percent("reserve-at", self.reserve_at.as_deref(), 100)? {
            patch.set("reserve_at", p);
        }
        if let Some(v) = &self.on_limit {
            let on_limit: OnLimit =
                serde_json::from_value(serde_json::json!(v.to_ascii_lowercase())).map_err(|_| {
                    usage(format!("--on-limit {v:?}: give `reserve` (sessions on the key go on) or `stop`"))
                })?;
            patch.set("on_limit", on_limit);
        }
        Ok(patch)
    }
}

/// `None` for `none`, else what `parse` reads (`None` inside: not readable).
fn none_or<T>(value: &str, parse: impl FnOnce(&str) -> Option<T>) -> Option<Option<T>> {
    if value.eq_ignore_ascii_case("none") {
        Some(None)
    } else {
        parse(value.trim()).map(Some)
    }
}

/// A number of US dollars (`5`, `$0.50`), or `none`.
fn amount(flag: &str, v: &str) -> Result<Option<Usd>, StartError> {
    let dollars = none_or(v, |v| v.trim_start_matches('$').parse::<f64>().ok()).ok_or_else(|| {
        usage(format!("--{flag} {v:?} is not an amount: give US dollars (5, 0.50) or `none` to remove it"))
    })?;
    dollars
        .map(|d| serde_json::from_value(serde_json::json!(d)))
        .transpose()
        .map_err(|_| usage(format!("--{flag} {v}: a budget is zero or more US dollars")))
}

/// A percent flag's value (`20`, `20%`), or `none` to remove the setting.
pub(super) fn percent(flag: &str, value: Option<&str>, most: u8) -> Result<Option<Option<u8>>, StartError> {
    match value {
        None => Ok(None),
        Some(v) if v.eq_ignore_ascii_case("none") => Ok(Some(None)),
        Some(v) => v
            .trim_end_matches('%')
            .parse::<u8>()
            .map(|p| Some(Some(p)))
            .map_err(|_| usage(format!("--{flag} {v:?} is not a percent: give 1 to {most}, or `none`"))),
    }
}
