//! `keymux pool …` and `keymux token set --pool`: on the running gateway when there is one (the
//! boundary changes at once), else in the config (the next start uses it).

use std::path::PathBuf;

use super::control::{self, Control};
use super::loaded::{load, usage, Loaded};
use super::{out, PoolCommand};
use crate::api::types::PoolInfo;
use crate::control::pools::PoolChanges;
use crate::pools::PoolConfig;
use crate::startup::StartError;

/// A comma-separated list (`""` is the empty list).
pub(super) fn list(value: &str) -> Vec<String> {
    value.split(',').map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned).collect()
}

pub(super) async fn pool(config_path: Option<PathBuf>, cmd: PoolCommand) -> Result<(), StartError> {
    let loaded = load(config_path)?;
    let opened = control::open(&loaded).await?;
    let control = opened.as_ref();
    match cmd {
        PoolCommand::List => list_pools(&loaded, control).await,
        PoolCommand::Create { name, keys, fallback, allow_priority, proxy } => {
            let new = PoolConfig {
                name,
                keys: list(&keys),
                fallback: fallback.as_deref().map(list).unwrap_or_default(),
                allow_priority: allow_priority.unwrap_or(true),
                proxy,
                ..PoolConfig::default()
            };
            let made = control.create_pool(new).await.map_err(usage)?;
            out(&format!("created pool {} in {}", describe(&made), control.kept_in().await));
            Ok(())
        }
        PoolCommand::Set { name, keys, fallback, money, allow_priority, proxy, no_proxy } => {
            let mut changes = PoolChanges(money.patch()?);
            for (field, value) in [("keys", keys), ("fallback", fallback)] {
                if let Some(value) = value {
                    changes.0.set(field, list(&value));
                }
            }
            if let Some(allow) = allow_priority {
                changes.0.set("allow_priority", allow);
            }
            if proxy.is_some() || no_proxy {
                changes.0.set("proxy", proxy);
            }
            if changes.0.is_empty() {
                return Err(usage(
                    "nothing to change: pass --keys, --fallback, --allow-priority, --proxy, --no-proxy or a budget",
                ));
            }
            let changed = control.change_pool(&name, changes).await.map_err(usage)?;
            out(&format!("pool {} (in {})", describe(&changed), control.kept_in().await));
            Ok(())
        }
        PoolCommand::Remove { name } => {
            let gone = control.remove_pool(&name).await.map_err(usage)?;
            out(&format!("removed pool '{gone}' from {}", control.kept_in().await));
            Ok(())
        }
    }
}

async fn list_pools(loaded: &Loaded, control: &dyn Control) -> Result<(), StartError> {
    let pools = control.pools().await.map_err(usage)?;
    out(&format!("{:<16} {:<32} {:<20} {:<20} {:<8} POLICIES", "POOL", "KEYS", "FALLBACK", "TOKENS", "USABLE"));
    let live = control.is_running();
    pools.iter().for_each(|p| pool_row(p, live.then_some(p.usable)));
    if !live {
        out(&format!("(no gateway running with {}: usable keys appear while it runs)", loaded.path.display()));
    }
    Ok(())
}

fn pool_row(p: &PoolInfo, usable: Option<usize>) {
    let keys = if p.builtin { "(every key)".to_owned() } else { joined(&p.keys, "(empty: its requests get 503)") };
    let usable = usable.map_or_else(|| "-".to_owned(), |u| format!("{u}/{}", p.key_ids.len()));
    out(&format!(
        "{:<16} {:<32} {:<20} {:<20} {usable:<8} {}",
        p.name,
        keys,
        joined(&p.fallback, "(never)"),
        joined(&p.tokens, "-"),
        policies(p)
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
    format!(
        "'{}': keys {}, fallback {}, {}",
        p.name,
        joined(&p.keys, "(none)"),
        joined(&p.fallback, "(never)"),
        policies(p)
    )
}

/// A pool's policies in words: the priority tier, and the way out.
fn policies(p: &PoolInfo) -> String {
    let tier = if p.allow_priority { "priority tier allowed" } else { "priority tier sent as standard" };
    match &p.proxy {
        Some(proxy) if p.proxy_login => format!("{tier}, through the proxy {proxy} (its login in the keychain)"),
        Some(proxy) => format!("{tier}, through the proxy {proxy}"),
        None => format!("{tier}, direct"),
    }
}

/// `keymux token set NAME --pool POOL`.
pub(super) async fn move_token(control: &dyn Control, name: &str, pool: &str) -> Result<(), StartError> {
    let pool = control.move_token(name, pool).await.map_err(usage)?;
    out(&format!("token '{name}' is bound to the pool '{pool}' in {}", control.kept_in().await));
    Ok(())
}
