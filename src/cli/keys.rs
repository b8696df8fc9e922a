//! `keymux keys …`: each subcommand's arguments read and handed to `changes` (or to `import` and
//! `list`).

use std::path::PathBuf;

use super::args::{read_secret, SettingsArgs};
use super::changes::{add_key, remove_key, replace_secret, set_key, switch_key, test_key};
use super::control::{self, Added};
use super::loaded::{load, usage};
use super::KeysCommand;

use crate::control::{check_new_key, KeyChanges, NewKey};
use crate::keys::ProviderId;
use crate::secrets::Secret;
use crate::startup::StartError;

pub(super) async fn keys(config_path: Option<PathBuf>, cmd: KeysCommand) -> Result<(), StartError> {
    let loaded = load(config_path)?;
    let opened = control::open(&loaded).await?;
    let control = opened.as_ref();
    match cmd {
        KeysCommand::Add { label, provider, base_url, org, settings } => {
            let provider = ProviderId::parse(&provider).filter(|p| p.get().pasted()).ok_or_else(|| {
                let pasted: Vec<&str> =
                    crate::provider::ALL.iter().filter(|p| p.get().pasted()).map(|p| p.as_str()).collect();
                usage(format!(
                    "--provider {provider:?}: expected {} (a ChatGPT plan is imported from Codex's login with \
                     `keymux keys import --chatgpt`)",
                    pasted.join(" or ")
                ))
            })?;
            let new = NewKey { provider, base_url, org, ..NewKey::openai(label, Secret::new("")) };
            let new = with_settings(new, &settings);
            // Checked before the secret is asked for, so a typo in the label costs no paste.
            check_new_key(&loaded.config, &[], &NewKey { secret: Secret::new("sk-placeholder"), ..new.clone() })
                .map_err(usage)?;
            match add_key(control, NewKey { secret: read_secret()?, ..new }).await? {
                Added::Ready(_) => Ok(()),
                Added::AlreadyPooled { why, .. } | Added::Refused(_, why) => Err(usage(why)),
            }
        }
        KeysCommand::Import { chatgpt: true, label, yes, .. } => {
            super::import_chatgpt::import(control, label, yes).await
        }
        KeysCommand::Import { from, yes, remove_plaintext, .. } => {
            super::import::import(&loaded, control, super::import::ImportArgs { from, yes, remove_plaintext }).await
        }
        KeysCommand::List { json } => super::list::list_keys(&loaded, control, json).await,
        KeysCommand::Remove { key } => remove_key(control, &key).await,
        KeysCommand::Set { key, label, secret, settings } => {
            let changes = KeyChanges { label, settings: settings.change(), money: settings.money.change() };
            if secret {
                replace_secret(control, &key, read_secret()?).await?;
            }
            if changes.is_empty() && secret {
                return Ok(());
            }
            set_key(control, &key, changes).await
        }
        KeysCommand::Enable { key } => switch_key(control, &key, true).await,
        KeysCommand::Disable { key } => switch_key(control, &key, false).await,
        KeysCommand::Test { key } => test_key(control, &key).await,
    }
}

/// `new` with the settings its flags give (the rest at their default); `check_new_key` checks them.
fn with_settings(mut new: NewKey, flags: &SettingsArgs) -> NewKey {
    flags.change().apply(&mut new.settings);
    flags.money.change().apply(&mut new.money);
    new
}
