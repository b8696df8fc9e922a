//! Changes to the config file made while Keymux runs (keys and tokens added, renamed, removed), written
//! so that the user's own comments and layout survive: the file is edited as a TOML document, checked
//! to still be a valid config, and replaced atomically (a temporary file renamed over it).

use std::path::{Path, PathBuf};

use serde::Serialize;
use toml_edit::{ArrayOfTables, DocumentMut, Item, Table};

use crate::config::{Config, ConfigError, KeyConfig, TokenConfig};
use crate::pools::PoolConfig;

/// The config file, edited in place.
#[derive(Clone, Debug)]
pub struct ConfigFile {
    path: PathBuf,
}

impl ConfigFile {
    /// The file at `path` (it need not exist yet).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Applies `change` to the document, checks the result is a valid config, and writes it atomically.
    /// Returns the config as it now is.
    pub fn edit(&self, change: impl FnOnce(&mut DocumentMut) -> Result<(), String>) -> Result<Config, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid { path: self.path.clone(), message, at: None };
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => return Err(ConfigError::Io { path: self.path.clone(), source }),
        };
        let mut doc: DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| invalid(e.to_string()))?;
        change(&mut doc).map_err(invalid)?;
        let text = doc.to_string();
        let config = Config::parse(&text, &self.path)?;
        write_atomically(&self.path, text.as_bytes())
            .map_err(|source| ConfigError::Io { path: self.path.clone(), source })?;
        Ok(config)
    }
}

/// Writes a file so that a reader sees the old or the new content, never half of either.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomically_with_mode(path, bytes, None)
}

/// Writes a file atomically with the Unix permissions `mode` (ignored elsewhere), set on the temporary
/// file before any byte is written: a file that holds a token is never readable by others, not even
/// for a moment.
pub fn write_atomically_with_mode(path: &Path, bytes: &[u8], mode: Option<u32>) -> std::io::Result<()> {
    use std::io::Write as _;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let written = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        if let Some(mode) = mode {
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
        }
        let mut file = options.open(&tmp)?;
        #[cfg(unix)]
        if let Some(mode) = mode {
            // The mode given at creation is narrowed by the umask, and a file left by a crash keeps its own.
            file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
        }
        #[cfg(not(unix))]
        let _ = mode;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

fn table_of<T: Serialize>(value: &T) -> Result<Table, String> {
    let text = toml::to_string(value).map_err(|e| e.to_string())?;
    let doc: DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| e.to_string())?;
    Ok(doc.as_table().clone())
}

/// The `[[name]]` tables of a document, created when missing (an empty inline `name = []`, as an
/// earlier Keymux wrote, becomes tables).
fn tables<'a>(doc: &'a mut DocumentMut, name: &str) -> Result<&'a mut ArrayOfTables, String> {
    let empty_inline = doc.get(name).and_then(Item::as_array).is_some_and(|a| a.is_empty());
    if empty_inline || doc.get(name).is_none() {
        doc.insert(name, Item::ArrayOfTables(ArrayOfTables::new()));
    }
    doc.get_mut(name)
        .and_then(Item::as_array_of_tables_mut)
        .ok_or_else(|| format!("`{name}` must be a list of [[{name}]] tables"))
}

/// Appends a `[[keys]]` table.
pub fn add_key(doc: &mut DocumentMut, key: &KeyConfig) -> Result<(), String> {
    let table = table_of(key)?;
    tables(doc, "keys")?.push(table);
    Ok(())
}

/// Removes the `[[keys]]` table of `id`.
pub fn remove_key(doc: &mut DocumentMut, id: &str) -> Result<(), String> {
    tables(doc, "keys")?.retain(|t| t.get("id").and_then(Item::as_str) != Some(id));
    Ok(())
}

/// Replaces the settings of key `id` with `key`'s, keeping the table's place, comments and any field
/// order the user chose.
pub fn update_key(doc: &mut DocumentMut, key: &KeyConfig) -> Result<(), String> {
    let fresh = table_of(key)?;
    let all = tables(doc, "keys")?;
    let table = all
        .iter_mut()
        .find(|t| t.get("id").and_then(Item::as_str) == Some(key.id.as_str()))
        .ok_or_else(|| format!("no key {} in the config", key.id))?;
    // A field the new settings leave out is at its default. Where the default reads the same written
    // out (priority 0, an empty model list), it is written, keeping the user's comment on it; anything
    // else is removed: an absent budget is "no budget", which no number says (TOML has no null).
    let stale: Vec<String> = table.iter().map(|(k, _)| k.to_owned()).filter(|k| !fresh.contains_key(k)).collect();
    for name in stale {
        let default = match (name.as_str(), table.get(&name).and_then(Item::as_value)) {
            ("priority", Some(toml_edit::Value::Integer(_))) => Some(toml_edit::Value::from(0)),
            ("models" | "exclude_models", Some(toml_edit::Value::Array(_))) => {
                Some(toml_edit::Value::Array(toml_edit::Array::new()))
            }
            _ => None,
        };
        match (default, table.get_mut(&name).and_then(Item::as_value_mut)) {
            (Some(mut value), Some(old)) => {
                *value.decor_mut() = old.decor().clone();
                *old = value;
            }
            _ => {
                table.remove(&name);
            }
        }
    }
    for (name, item) in fresh.iter() {
        match table.get_mut(name) {
            // Keep the value's decoration (its trailing comment) when only the value changes.
            Some(Item::Value(old)) if item.as_value().is_some() => {
                let decor = old.decor().clone();
                if let Some(value) = item.as_value() {
                    *old = value.clone();
                    *old.decor_mut() = decor;
                }
            }
            _ => {
                table.insert(name, item.clone());
            }
        }
    }
    Ok(())
}

/// Appends a `[[tokens]]` table.
pub fn add_token(doc: &mut DocumentMut, token: &TokenConfig) -> Result<(), String> {
    let table = table_of(token)?;
    tables(doc, "tokens")?.push(table);
    Ok(())
}

/// Removes the `[[tokens]]` table of `id`.
pub fn remove_token(doc: &mut DocumentMut, id: &str) -> Result<(), String> {
    tables(doc, "tokens")?.retain(|t| t.get("id").and_then(Item::as_str) != Some(id));
    Ok(())
}

/// Sets the `[[pools]]` table of `pool.name` to `pool`'s keys and fallbacks (keeping its place and
/// comments), or appends one.
pub fn set_pool(doc: &mut DocumentMut, pool: &PoolConfig) -> Result<(), String> {
    let all = tables(doc, "pools")?;
    let same = |t: &Table| t.get("name").and_then(Item::as_str).is_some_and(|n| n.eq_ignore_ascii_case(&pool.name));
    let Some(table) = all.iter_mut().find(|t| same(t)) else {
        all.push(table_of(pool)?);
        return Ok(());
    };
    for (name, list) in [("keys", &pool.keys), ("fallback", &pool.fallback)] {
        let value = toml_edit::Value::Array(list.iter().map(String::as_str).collect());
        match table.get_mut(name).and_then(Item::as_value_mut) {
            Some(old) => {
                let decor = old.decor().clone();
                *old = value;
                *old.decor_mut() = decor;
            }
            None => {
                table.insert(name, Item::Value(value));
            }
        }
    }
    Ok(())
}

/// Removes the `[[pools]]` table named `name`.
pub fn remove_pool(doc: &mut DocumentMut, name: &str) -> Result<(), String> {
    let same = |t: &Table| t.get("name").and_then(Item::as_str).is_some_and(|n| n.eq_ignore_ascii_case(name));
    tables(doc, "pools")?.retain(|t| !same(t));
    Ok(())
}

/// Binds token `id` to `pool` (`all` removes the line: it is the default).
pub fn set_token_pool(doc: &mut DocumentMut, id: &str, pool: &str) -> Result<(), String> {
    let table = tables(doc, "tokens")?
        .iter_mut()
        .find(|t| t.get("id").and_then(Item::as_str) == Some(id))
        .ok_or_else(|| format!("no token {id} in the config"))?;
    if pool.eq_ignore_ascii_case(crate::pools::ALL) {
        table.remove("pool");
    } else {
        table.insert("pool", toml_edit::value(pool));
    }
    Ok(())
}

/// In every pool's `keys`, replaces the names in `old` (a key's id and label) with `new`, or removes
/// them when `new` is `None` (the key was removed).
pub fn rename_in_pools(doc: &mut DocumentMut, old: &[&str], new: Option<&str>) -> Result<(), String> {
    if doc.get("pools").is_none() {
        return Ok(());
    }
    for table in tables(doc, "pools")?.iter_mut() {
        let Some(keys) = table.get_mut("keys").and_then(Item::as_array_mut) else { continue };
        let matches = |v: &toml_edit::Value| v.as_str().is_some_and(|k| old.iter().any(|o| o.eq_ignore_ascii_case(k)));
        match new {
            None => keys.retain(|v| !matches(v)),
            Some(new) => {
                for value in keys.iter_mut().filter(|v| matches(v)) {
                    let decor = value.decor().clone();
                    *value = toml_edit::Value::from(new);
                    *value.decor_mut() = decor;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{KeyId, Provider};

    const COMMENTED: &str = r#"# My Keymux setup
listen = "127.0.0.1:8787"   # the usual port

[affinity]
lost_org = "rescue"  # keep sessions going

# work keys first
[[keys]]
id = "k_work"
label = "work"
priority = 0 # tier 0
"#;

    fn key(id: &str, label: &str) -> KeyConfig {
        KeyConfig {
            id: KeyId::new(id),
            label: label.into(),
            provider: Provider::Openai,
            base_url: None,
            org: None,
            priority: 1,
            daily_token_budget: Some(5),
            models: Vec::new(),
            exclude_models: Vec::new(),
            disabled: false,
            imported: false,
            daily_budget_usd: None,
            monthly_budget_usd: None,
            reserve_at: None,
            on_limit: crate::budget::OnLimit::Reserve,
            reserve_window_pct: Some(20),
        }
    }

    /// "None" is not zero: a budget taken away is no budget after a restart, not a budget of 0; a key
    /// switched off stays off; pools follow a renamed or removed key.
    #[test]
    fn what_the_user_set_reads_back_exactly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = ConfigFile::new(dir.path().join("config.toml"));
        std::fs::write(file.path(), COMMENTED).expect("write");
        let mut work = key("k_work", "work");
        work.models = vec!["gpt-5.5".into()];
        file.edit(|doc| update_key(doc, &work)).expect("budget and models set");
        work.daily_token_budget = None;
        work.models = Vec::new();
        work.priority = 0;
        work.disabled = true;
        let config = file.edit(|doc| update_key(doc, &work)).expect("cleared");
        assert_eq!(config.keys[0], work, "{}", std::fs::read_to_string(file.path()).unwrap_or_default());
        let pool = PoolConfig { name: "team".into(), keys: vec!["work".into()], ..PoolConfig::default() };
        file.edit(|doc| set_pool(doc, &pool)).expect("pool");
        let office = KeyConfig { label: "office".into(), ..work.clone() };
        let renamed = file.edit(|doc| {
            update_key(doc, &office)?;
            rename_in_pools(doc, &["WORK"], Some("office"))
        });
        assert_eq!(renamed.expect("renamed").pools[0].keys, ["office"]);
        let removed = file.edit(|doc| {
            remove_key(doc, "k_work")?;
            rename_in_pools(doc, &["k_work", "office"], None)
        });
        assert!(removed.expect("removed").pools[0].keys.is_empty());
        let token = TokenConfig { id: "t_1".into(), name: "codex".into(), created_unix: 7, pool: "all".into() };
        file.edit(|doc| add_token(doc, &token)).expect("token");
        let config = file.edit(|doc| set_token_pool(doc, "t_1", "team")).expect("moved");
        assert_eq!(config.tokens[0].pool, "team");
        let config = file.edit(|doc| remove_pool(doc, "TEAM")).expect_err("a token still uses it");
        assert!(config.to_string().contains("no pool named 'team'"), "{config}");
    }

    #[test]
    fn edits_keep_the_users_comments_and_are_valid_configs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = ConfigFile::new(dir.path().join("config.toml"));
        std::fs::write(file.path(), COMMENTED).expect("write");
        let config = file.edit(|doc| add_key(doc, &key("k_home", "home"))).expect("added");
        assert_eq!(config.keys.len(), 2);
        let mut renamed = key("k_work", "office");
        renamed.priority = 0;
        let config = file.edit(|doc| update_key(doc, &renamed)).expect("updated");
        assert_eq!(config.keys[0].label, "office");
        let config = file.edit(|doc| remove_key(doc, "k_home")).expect("removed");
        assert_eq!(config.keys.len(), 1);
        let text = std::fs::read_to_string(file.path()).expect("read");
        for comment in
            ["# My Keymux setup", "# the usual port", "# keep sessions going", "# work keys first", "# tier 0"]
        {
            assert!(text.contains(comment), "{comment} lost:\n{text}");
        }
        let token = TokenConfig { id: "t_1".into(), name: "codex".into(), created_unix: 7, pool: "all".into() };
        let config = file.edit(|doc| add_token(doc, &token)).expect("token");
        assert_eq!(config.tokens, [token]);
        let config = file.edit(|doc| remove_token(doc, "t_1")).expect("revoked");
        assert!(config.tokens.is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn a_file_written_with_a_mode_is_never_readable_by_others() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("models.json");
        std::fs::write(&path, "old").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        // A temporary file a crash left behind, readable by everyone.
        let stale = path.with_extension(format!("tmp-{}", std::process::id()));
        std::fs::write(&stale, "stale").expect("write");
        std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        write_atomically_with_mode(&path, b"new", Some(0o600)).expect("written");
        assert_eq!(std::fs::read(&path).expect("read"), b"new");
        let mode = std::fs::metadata(&path).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{mode:o}");
        assert!(!stale.exists(), "the temporary file became the file");
    }

    #[test]
    fn an_edit_that_breaks_the_config_is_refused_and_nothing_is_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = ConfigFile::new(dir.path().join("config.toml"));
        std::fs::write(file.path(), COMMENTED).expect("write");
        let duplicate = key("k_other", "work");
        assert!(file.edit(|doc| add_key(doc, &duplicate)).is_err(), "two keys labelled work");
        assert_eq!(std::fs::read_to_string(file.path()).expect("read"), COMMENTED);
        // A file an earlier Keymux wrote, with empty inline lists, takes tables.
        std::fs::write(file.path(), "keys = []\ntokens = []\n").expect("write");
        let config = file.edit(|doc| add_key(doc, &key("k_a", "a"))).expect("added");
        assert_eq!(config.keys.len(), 1);
    }
}
