//! `keymux pool …` and `keymux token set --pool`: on the running gateway when there is one (the
//! boundary changes at once), else in the config (the next start uses it).

use std::path::PathBuf;

use http::Method;

use super::loaded::{kept_in, load, remote, usage, Loaded};
use super::{out, PoolCommand};
use crate::api::types::{PoolInfo, TokenInfo};
use crate::control::pools::{self, PoolChanges};
use crate::pools::{PoolConfig, ALL};
use crate::startup::StartError;

/// A comma-separated list (`""` is the empty list).
pub(super) fn list(value: &str) -> Vec<String> {
    value.split(',').map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned).collect()
}

pub(super) async fn pool(config_path: Option<PathBuf>, cmd: PoolCommand) -> Result<(), StartError> {
    let loaded = load(config_path)?;
    match cmd {
        PoolCommand::List => list_pools(&loaded).await,
        PoolCommand::Create { name, keys, fallback } => {
            let new = PoolConfig {
                name,
                keys: list(&keys),
                fallback: fallback.as_deref().map(list).unwrap_or_default(),
                ..PoolConfig::default()
            };
            create(&loaded, new).await
        }
        PoolCommand::Set { name, keys, fallback, money } => {
            let mut changes = PoolChanges(money.patch()?);
            for (field, value) in [("keys", keys), ("fallback", fallback)] {
                if let Some(value) = value {
                    changes.0.set(field, list(&value));
                }
            }
            if changes.0.is_empty() {
                return Err(usage("nothing to change: pass --keys, --fallback or a budget"));
            }
            change(&loaded, &name, changes).await
        }
        PoolCommand::Remove { name } => remove(&loaded, &name).await,
    }
}

async fn create(loaded: &Loaded, new: PoolConfig) -> Result<(), StartError> {
    if let Some(remote) = remote(loaded).await? {
        let body = serde_json::to_value(&new).map_err(usage)?;
        let made: PoolInfo = remote.send(Method::POST, "/pools", Some(body)).await.map_err(usage)?;
        out(&format!("created pool {} in {}", describe(&made), kept_in(&remote).await));
        return Ok(());
    }
    let made = pools::create_pool(&loaded.settings(), new, &[]).map_err(usage)?;
    out(&format!("created pool '{}' with {} key(s); the next start uses it", made.name, made.keys.len()));
    Ok(())
}

async fn change(loaded: &Loaded, name: &str, changes: PoolChanges) -> Result<(), StartError> {
    if let Some(remote) = remote(loaded).await? {
        let body = serde_json::to_value(&changes).map_err(usage)?;
        let changed: PoolInfo =
            remote.send(Method::PATCH, &format!("/pools/{name}"), Some(body)).await.map_err(usage)?;
        out(&format!("pool {} (in {})", describe(&changed), kept_in(&remote).await));
        return Ok(());
    }
    let changed = pools::change_pool(&loaded.settings(), name, &changes, &[]).map_err(usage)?;
    out(&format!("updated pool '{}'; the next start uses it", changed.name));
    Ok(())
}

async fn remove(loaded: &Loaded, name: &str) -> Result<(), StartError> {
    if let Some(remote) = remote(loaded).await? {
        remote.call(Method::DELETE, &format!("/pools/{name}"), None).await.map_err(usage)?;
        out(&format!("removed pool '{name}' from {}", kept_in(&remote).await));
        return Ok(());
    }
    let live: Vec<(String, String)> = Vec::new();
    let gone = pools::remove_pool(&loaded.settings(), name, &live).map_err(usage)?;
    out(&format!("removed pool '{}'", gone.name));
    Ok(())
}

async fn list_pools(loaded: &Loaded) -> Result<(), StartError> {
    let live: Option<Vec<PoolInfo>> = match remote(loaded).await? {
        Some(remote) => Some(remote.get("/pools").await.map_err(usage)?),
        None => None,
    };
    out(&format!("{:<16} {:<32} {:<20} {:<20} USABLE", "POOL", "KEYS", "FALLBACK", "TOKENS"));
    match live {
        Some(pools) => pools.iter().for_each(|p| pool_row(p, Some(p.usable))),
        None => {
            let builtin =
                PoolConfig { name: ALL.to_owned(), keys: vec!["(every key)".into()], ..PoolConfig::default() };
            for def in std::iter::once(&builtin).chain(&loaded.config.pools) {
                let tokens = loaded
                    .config
                    .tokens
                    .iter()
                    .filter(|t| t.pool.eq_ignore_ascii_case(&def.name))
                    .map(|t| t.name.clone());
                let info = PoolInfo { tokens: tokens.collect(), ..PoolInfo::defined(def) };
                pool_row(&info, None);
            }
            out(&format!("(no gateway running with {}: usable keys appear while it runs)", loaded.path.display()));
        }
    }
    Ok(())
}

fn pool_row(p: &PoolInfo, usable: Option<usize>) {
    let keys = if p.builtin { "(every key)".to_owned() } else { joined(&p.keys, "(empty: its requests get 503)") };
    let usable = usable.map_or_else(|| "-".to_owned(), |u| format!("{u}/{}", p.key_ids.len()));
    out(&format!(
        "{:<16} {:<32} {:<20} {:<20} {usable}",
        p.name,
        keys,
        joined(&p.fallback, "(never)"),
        joined(&p.tokens, "-")
    ));
}

fn joined(items: &[String], empty: &str) -> String {
    if items.is_empty() {
        empty.to_owned()
    } else {
        items.join(",")
    }
}

fn describe(p: &PoolInfo) -> String {
    format!("'{}': keys {}, fallback {}", p.name, joined(&p.keys, "(none)"), joined(&p.fallback, "(never)"))
}

/// `keymux token set NAME --pool POOL`.
pub(super) async fn move_token(loaded: &Loaded, name: &str, pool: &str) -> Result<(), StartError> {
    if let Some(remote) = remote(loaded).await? {
        let id = super::changes::token_id(&loaded.config, name);
        let body = serde_json::to_value(crate::api::types::TokenChanges { pool: pool.to_owned() }).map_err(usage)?;
        let moved: Option<TokenInfo> =
            remote.send(Method::PATCH, &format!("/tokens/{id}"), Some(body)).await.map_err(usage)?;
        let pool = moved.map_or_else(|| pool.to_owned(), |t| t.pool);
        out(&format!("token '{name}' now reaches only the pool '{pool}', from its next request on"));
        return Ok(());
    }
    let moved = pools::move_token(&loaded.settings(), name, pool).map_err(usage)?;
    out(&format!("token '{}' is bound to the pool '{}'; the next start uses it", moved.name, moved.pool));
    Ok(())
}
