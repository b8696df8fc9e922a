//! Where a gateway keeps what changes at runtime: the secret store, the config file (if any), the
//! config as it is now, and the price table it makes. `control` changes them; the gateway and the CLI
//! hold them.

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::config::{Config, ConfigError};
use crate::config_file::ConfigFile;
use crate::secrets::SecretStore;
use crate::spend::PriceTable;

/// Where a gateway keeps what changes at runtime: the secret store, the config file (if any), the
/// config as it is now, and its price table.
pub struct Settings {
    store: Arc<dyn SecretStore>,
    file: Option<ConfigFile>,
    config: std::sync::Mutex<Config>,
    /// The embedded prices with the config's `[prices]` over them: made again whenever the config is
    /// (a change Keymux makes, or a hand edit the reload applies), and read without a lock by every
    /// finished request.
    prices: ArcSwap<PriceTable>,
}

impl Settings {
    /// Settings kept in `store` and `file` (none: changes live in memory only), starting from `config`.
    pub fn new(store: Arc<dyn SecretStore>, file: Option<ConfigFile>, config: Config) -> Self {
        let prices = ArcSwap::from_pointee(prices_of(&config));
        Self { store, file, config: std::sync::Mutex::new(config), prices }
    }

    /// The price table now.
    pub fn prices(&self) -> Arc<PriceTable> {
        self.prices.load_full()
    }

    /// The secret store.
    pub fn store(&self) -> &Arc<dyn SecretStore> {
        &self.store
    }

    /// The config as it is now.
    pub fn config(&self) -> Config {
        self.config.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Where the config file is, when there is one.
    pub fn path(&self) -> Option<&std::path::Path> {
        self.file.as_ref().map(ConfigFile::path)
    }

    /// Reads the config file again. `Ok(None)`: nothing changed that Keymux reads (its own writes,
    /// comments, layout). `Ok(Some((before, after)))`: a valid edit, now the config. `Err`: the file
    /// does not parse or check; the config stays as it was. A missing file is no change.
    pub fn reload(&self) -> Result<Option<(Config, Config)>, ConfigError> {
        let Some(file) = &self.file else { return Ok(None) };
        let text = match std::fs::read_to_string(file.path()) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(ConfigError::Io { path: file.path().to_owned(), source }),
        };
        let fresh = Config::parse(&text, file.path())?;
        let mut config = self.config.lock().unwrap_or_else(|p| p.into_inner());
        if *config == fresh {
            return Ok(None);
        }
        let before = std::mem::replace(&mut *config, fresh.clone());
        self.prices.store(Arc::new(prices_of(&fresh)));
        Ok(Some((before, fresh)))
    }

    /// Edits the config file (or, without one, the config in memory) and keeps the result.
    pub(crate) fn edit(
        &self,
        change: impl FnOnce(&mut toml_edit::DocumentMut) -> Result<(), String>,
        in_memory: impl FnOnce(&mut Config),
    ) -> Result<(), ConfigError> {
        let mut config = self.config.lock().unwrap_or_else(|p| p.into_inner());
        match &self.file {
            Some(file) => *config = file.edit(change)?,
            None => in_memory(&mut config),
        }
        self.prices.store(Arc::new(prices_of(&config)));
        Ok(())
    }
}

/// The config's price table. A config read from a file, or handed to `startup`, was checked already,
/// so the embedded table alone is only a fallback for one built in code with a bad price.
fn prices_of(config: &Config) -> PriceTable {
    config.price_table().unwrap_or_else(|e| {
        tracing::warn!("{e}; the embedded prices are used instead");
        PriceTable::builtin().clone()
    })
}
