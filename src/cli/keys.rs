//! `keymux keys …`: each subcommand's arguments read and handed to `changes` (or to `import` and
//! `list`).

use std::path::PathBuf;

use super::args::{money_changes, percent, read_secret};
use super::changes::{add_key, remove_key, replace_secret, set_key, switch_key, test_key};
use super::loaded::{load, usage};
use super::KeysCommand;

use crate::control::{self, KeyChanges, NewKey};
use crate::keys::Provider;
use crate::secrets::Secret;
use crate::startup::StartError;

pub(super) async fn keys(config_path: Option<PathBuf>, cmd: KeysCommand) -> Result<(), StartError> {
    let loaded = load(config_path)?;
    match cmd {
        KeysCommand::Add { label, provider, base_url, org, priority, daily_token_budget } => {
            let provider = Provider::parse(&provider)
                .ok_or_else(|| usage(format!("--provider {provider:?}: expected openai or azure")))?;
            let new = NewKey {
                label,
                provider,
                base_url,
                org,
                priority,
                daily_token_budget,
                models: Vec::new(),
                exclude_models: Vec::new(),
                secret: Secret::new(""),
                imported: false,
                daily_budget_usd: None,
                monthly_budget_usd: None,
                reserve_at: None,
                on_limit: None,
                reserve_window_pct: None,
            };
            // Checked before the secret is asked for, so a typo in the label costs no paste.
            control::check_new_key(
                &loaded.config,
                &[],
                &NewKey { secret: Secret::new("sk-placeholder"), ..new.clone() },
            )
            .map_err(usage)?;
            add_key(&loaded, NewKey { secret: read_secret()?, ..new }).await
        }
        KeysCommand::Import { from, yes, remove_plaintext } => {
            super::import::import(&loaded, super::import::ImportArgs { from, yes, remove_plaintext }).await
        }
        KeysCommand::List => super::list::list_keys(&loaded).await,
        KeysCommand::Remove { key } => remove_key(&loaded, &key).await,
        KeysCommand::Set {
            key,
            label,
            priority,
            daily_token_budget,
            no_budget,
            models,
            exclude_models,
            secret,
            reserve_window_pct,
            money,
        } => {
            let list = |v: Option<String>| {
                v.map(|v| v.split(',').map(str::trim).filter(|m| !m.is_empty()).map(str::to_owned).collect())
            };
            let budget = if no_budget { Some(None) } else { daily_token_budget.map(Some) };
            let changes = KeyChanges {
                label,
                priority,
                daily_token_budget: budget,
                models: list(models),
                exclude_models: list(exclude_models),
                reserve_window_pct: percent("reserve-window-pct", reserve_window_pct.as_deref(), 90)?,
                ..money_changes(&money)?
            };
            if secret {
                replace_secret(&loaded, &key, read_secret()?).await?;
            }
            let nothing = serde_json::to_value(&changes).is_ok_and(|v| v.as_object().is_some_and(|o| o.is_empty()));
            if nothing && secret {
                return Ok(());
            }
            set_key(&loaded, &key, changes).await
        }
        KeysCommand::Enable { key } => switch_key(&loaded, &key, "enable").await,
        KeysCommand::Disable { key } => switch_key(&loaded, &key, "disable").await,
        KeysCommand::Test { key } => test_key(&loaded, &key).await,
    }
}
