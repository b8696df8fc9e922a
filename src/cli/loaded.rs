//! What every CLI command starts from: the config and its file, the secret store, and the gateway
//! running with this config when one answers and proves who it is.

use std::path::PathBuf;
use std::sync::Arc;

use super::env_secrets;

use crate::api::types::StatusBody;
use crate::config::Config;
use crate::config_file::ConfigFile;
use crate::remote::{Found, Remote};
use crate::secrets::SecretStore;
use crate::settings::Settings;
use crate::startup::{self, StartError};

/// The config, its file and the secret store, as the CLI finds them.
pub(super) struct Loaded {
    pub(super) path: PathBuf,
    pub(super) config: Config,
    pub(super) store: Arc<dyn SecretStore>,
}

impl Loaded {
    pub(super) fn settings(&self) -> Settings {
        Settings::new(self.store.clone(), Some(ConfigFile::new(&self.path)), self.config.clone())
    }
}

pub(super) fn load(config_path: Option<PathBuf>) -> Result<Loaded, StartError> {
    let path = match config_path {
        Some(p) => p,
        None => Config::default_path()?,
    };
    let config = Config::load(&path)?;
    let store = startup::open_store(&config, false);
    Ok(Loaded { path, config, store })
}

/// The running gateway of this config, if one answers and proves who it is.
pub(super) async fn remote(loaded: &Loaded) -> Result<Option<Remote>, StartError> {
    let admin = env_secrets()?.admin_token;
    match Remote::find(&loaded.config, &loaded.path, &loaded.store, admin).await.map_err(StartError::Usage)? {
        Found::Gateway(remote) => Ok(Some(remote)),
        Found::Nobody => Ok(None),
    }
}

pub(super) async fn running(loaded: &Loaded) -> Result<Remote, StartError> {
    remote(loaded).await?.ok_or_else(|| {
        StartError::Usage(format!(
            "no Keymux gateway is running with {}; start it with `keymux serve`",
            loaded.path.display()
        ))
    })
}

pub(super) fn usage(e: impl ToString) -> StartError {
    StartError::Usage(e.to_string())
}

/// Where a change made through the running gateway is kept, in words: the gateway's store says.
pub(super) async fn kept_in(remote: &Remote) -> String {
    match remote.get::<StatusBody>("/status").await {
        Ok(status) if status.gateway.keychain.kind == "memory" => {
            "the running gateway only (memory: it runs with --ephemeral, so this is gone when it stops)".to_owned()
        }
        Ok(status) => format!("the running gateway, the config and the {}", status.gateway.keychain.kind),
        Err(_) => "the running gateway".to_owned(),
    }
}
