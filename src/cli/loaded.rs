//! What every CLI command starts from: the config and its file, and the secret store. Whether a
//! gateway runs with it is `control`'s to find out.

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::Config;
use crate::config_file::ConfigFile;
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

pub(super) fn usage(e: impl ToString) -> StartError {
    StartError::Usage(e.to_string())
}
