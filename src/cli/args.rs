//! Reading what the person typed: a secret from a hidden prompt or stdin, percents, amounts of money.

use std::io::{IsTerminal as _, Read as _};

use super::loaded::usage;

use crate::control::KeyChanges;
use crate::keys::validate_secret;
use crate::secrets::Secret;
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

/// The budget changes `keys set` was given: a number of dollars or percent, or `none` to remove one.
pub(super) fn money_changes(money: &super::MoneyArgs) -> Result<KeyChanges, StartError> {
    fn amount(flag: &str, v: &Option<String>) -> Result<Option<Option<crate::spend::Usd>>, StartError> {
        let Some(v) = v else { return Ok(None) };
        if v.eq_ignore_ascii_case("none") {
            return Ok(Some(None));
        }
        let dollars: f64 = v.trim_start_matches('$').parse().map_err(|_| {
            usage(format!("--{flag} {v:?} is not an amount: give US dollars (5, 0.50) or `none` to remove it"))
        })?;
        serde_json::from_value(serde_json::json!(dollars))
            .map(|usd| Some(Some(usd)))
            .map_err(|_| usage(format!("--{flag} {v}: a budget is zero or more US dollars")))
    }
    let reserve_at = percent("reserve-at", money.reserve_at.as_deref(), 100)?;
    let on_limit =
        match money.on_limit.as_deref() {
            None => None,
            Some(v) => Some(serde_json::from_value(serde_json::json!(v.to_ascii_lowercase())).map_err(|_| {
                usage(format!("--on-limit {v:?}: give `reserve` (sessions on the key go on) or `stop`"))
            })?),
        };
    Ok(KeyChanges {
        daily_budget_usd: amount("daily-budget-usd", &money.daily_budget_usd)?,
        monthly_budget_usd: amount("monthly-budget-usd", &money.monthly_budget_usd)?,
        reserve_at,
        on_limit,
        ..KeyChanges::default()
    })
}
