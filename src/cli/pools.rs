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

pub(super) async fn pool(config_path: Option<PathBuf>, cmd: PoolCommand) -> Result<(), StartError> {
    let loaded = load(config_path)?;
    let opened = control::open(&loaded).await?;
    let control = opened.as_ref();
    match cmd {
        PoolCommand::List => list_pools(&loaded, control).await,
        PoolCommand::Create { name, keys, fallback, policies } => {
            let mut new = PoolConfig { name, keys: keys.0, ..PoolConfig::default() };
            new.fallback = fallback.map(|f| f.0).unwrap_or_default();
            policies.change().apply(&mut new.policies);
            let made = control.create_pool(new).await.map_err(usage)?;
            out(&format!("created pool {} in {}", describe(&made), control.kept_in().await));
            Ok(())
        }
        PoolCommand::Set { name, keys, fallback, policies } => {
            let changes =
                PoolChanges { keys: keys.map(|k| k.0), fallback: fallback.map(|f| f.0), policies: policies.change() };
            if changes.is_empty() {
                return Err(usage(
                    "nothing to change: pass --keys, --fallback, --allow-priority, --allow-ultrafast, --proxy, --no-proxy or a budget",
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
    p.policies.summary(p.proxy_login)
}

/// `keymux token set NAME --pool POOL`.
pub(super) async fn move_token(control: &dyn Control, name: &str, pool: &str) -> Result<(), StartError> {
    let pool = control.move_token(name, pool).await.map_err(usage)?;
    out(&format!("token '{name}' is bound to the pool '{pool}' in {}", control.kept_in().await));
    Ok(())
}
