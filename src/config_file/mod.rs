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

/// `value` as a TOML table, every field written (settings at their default too).
fn table_of<T: Serialize>(value: &T) -> Result<Table, String> {
    let text = toml::to_string(value).map_err(|e| e.to_string())?;
    let doc: DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| e.to_string())?;
    Ok(doc.as_table().clone())
}

/// `value` as a new table in the file: settings at their default left out, as a person would.
fn new_table_of<T: Serialize>(value: &T) -> Result<Table, String> {
    let mut table = table_of(value)?;
    crate::config::defaults::drop_defaults(&mut table);
    Ok(table)
}

/// Writes `fresh` (a key's or a pool's every field) over `table`, keeping the table's place, comments,
/// and field order. A field the user wrote gets its new value with its comment, even at its default
/// (`priority = 0 # for now`); a field not written is added only if not at its default; a field
/// `fresh` lacks (a budget removed: TOML has no null) goes.
fn merge_into(table: &mut Table, fresh: &Table) {
    let mut lean = fresh.clone();
    crate::config::defaults::drop_defaults(&mut lean);
    let stale: Vec<String> = table.iter().map(|(k, _)| k.to_owned()).filter(|k| !fresh.contains_key(k)).collect();
    for name in stale {
        table.remove(&name);
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
            Some(_) => {
                table.insert(name, item.clone());
            }
            None if lean.contains_key(name) => {
                table.insert(name, item.clone());
            }
            None => {}
        }
    }
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
    let table = new_table_of(key)?;
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
    merge_into(table, &fresh);
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

/// Sets the `[[pools]]` table of `pool.name` to `pool` (keeping its place and comments), or appends one.
pub fn set_pool(doc: &mut DocumentMut, pool: &PoolConfig) -> Result<(), String> {
    let all = tables(doc, "pools")?;
    let same = |t: &Table| t.get("name").and_then(Item::as_str).is_some_and(|n| n.eq_ignore_ascii_case(&pool.name));
    let found = all.iter().position(same);
    match found {
        Some(i) => merge_into(all.get_mut(i).ok_or("no such pool table")?, &table_of(pool)?),
        None => all.push(new_table_of(pool)?),
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
mod tests;
