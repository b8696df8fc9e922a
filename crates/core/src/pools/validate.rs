//! The check of a list of pools as a whole, worded for the user, with where each problem is.

use super::proxy::proxy_conflict;
use super::{PoolConfig, ALL, MAX_FALLBACKS, MAX_POOLS};
use crate::keys::validate_label;

/// Where in a list of pools (and the tokens bound to them) a problem is, so the config file can name
/// its line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// `pools[i].name`.
    Name(usize),
    /// `pools[i].keys[j]`.
    Key(usize, usize),
    /// `pools[i].fallback[j]`.
    Fallback(usize, usize),
    /// `pools[i]` as a whole (too many, say).
    Pool(usize),
    /// `tokens[i].pool`.
    Token(usize),
}

/// A problem with the pools, worded for the user, with where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolProblem {
    /// Where.
    pub place: Place,
    /// What is wrong and what to do.
    pub message: String,
}

/// Checks a list of pools against the keys that exist (`key_known` takes a label or id) and the
/// tokens' pools: names valid and distinct, keys known, fallbacks known and without a cycle.
pub fn validate<'a>(
    pools: &[PoolConfig],
    key_known: impl Fn(&str) -> bool,
    token_pools: impl IntoIterator<Item = &'a str>,
) -> Result<(), PoolProblem> {
    let problem = |place, message: String| Err(PoolProblem { place, message });
    if pools.len() > MAX_POOLS {
        return problem(Place::Pool(MAX_POOLS), format!("at most {MAX_POOLS} pools can be defined"));
    }
    for (i, pool) in pools.iter().enumerate() {
        check_name(&pool.name).map_err(|message| PoolProblem { place: Place::Name(i), message })?;
        if pools[..i].iter().any(|p| p.name.eq_ignore_ascii_case(&pool.name)) {
            let message = format!("two pools are named '{}'; rename or merge one of them", pool.name);
            return problem(Place::Name(i), message);
        }
        if let Some(j) = pool.keys.iter().position(|k| !key_known(k)) {
            let message = format!(
                "pool '{}' names the key '{}', which does not exist; see `keymux keys list` for the labels",
                pool.name, pool.keys[j]
            );
            return problem(Place::Key(i, j), message);
        }
        if pool.fallback.len() > MAX_FALLBACKS {
            let message = format!("pool '{}' has more than {MAX_FALLBACKS} fallback pools", pool.name);
            return problem(Place::Fallback(i, MAX_FALLBACKS), message);
        }
        for (j, fallback) in pool.fallback.iter().enumerate() {
            check_fallback(pools, pool, fallback)
                .map_err(|message| PoolProblem { place: Place::Fallback(i, j), message })?;
        }
        pool.policies.validate().map_err(|message| PoolProblem {
            place: Place::Pool(i),
            message: format!("pool '{}': {message}", pool.name),
        })?;
    }
    if let Some((i, message)) = proxy_conflict(pools) {
        return problem(Place::Pool(i), message);
    }
    if let Some(i) = cycle(pools) {
        let message = format!(
            "the fallbacks of pool '{}' lead back to it; a pool's fallbacks must not return to it",
            pools[i].name
        );
        return problem(Place::Fallback(i, 0), message);
    }
    for (i, name) in token_pools.into_iter().enumerate() {
        if !exists(pools, name) {
            return problem(Place::Token(i), unknown_pool(name));
        }
    }
    Ok(())
}

/// Checks a pool name: a valid label, and not the built-in `all`.
pub fn check_name(name: &str) -> Result<(), String> {
    validate_label(name).map_err(|e| format!("pool name: {e}"))?;
    if name.eq_ignore_ascii_case(ALL) {
        return Err("the pool 'all' is built in (it holds every key); pick another name".into());
    }
    Ok(())
}

/// Whether `name` is a pool: the built-in `all` or one of `pools`.
pub fn exists(pools: &[PoolConfig], name: &str) -> bool {
    name.eq_ignore_ascii_case(ALL) || pools.iter().any(|p| p.name.eq_ignore_ascii_case(name))
}

/// The message for a token or fallback that names a pool that does not exist.
pub fn unknown_pool(name: &str) -> String {
    format!("there is no pool named '{name}'; create it first (`keymux pool create {name} --keys LABEL`) or use 'all'")
}

fn check_fallback(pools: &[PoolConfig], pool: &PoolConfig, fallback: &str) -> Result<(), String> {
    if fallback.eq_ignore_ascii_case(&pool.name) {
        return Err(format!("pool '{}' lists itself as a fallback; remove it", pool.name));
    }
    if !exists(pools, fallback) {
        return Err(unknown_pool(fallback));
    }
    Ok(())
}

/// The first pool whose fallbacks lead back to it, if any.
fn cycle(pools: &[PoolConfig]) -> Option<usize> {
    let index = |name: &str| pools.iter().position(|p| p.name.eq_ignore_ascii_case(name));
    (0..pools.len()).find(|&start| {
        // Depth-first over fallbacks; bounded by MAX_POOLS levels, each visited once.
        let mut seen = vec![false; pools.len()];
        let mut stack: Vec<usize> = pools[start].fallback.iter().filter_map(|f| index(f)).collect();
        while let Some(i) = stack.pop() {
            if i == start {
                return true;
            }
            if !std::mem::replace(&mut seen[i], true) {
                stack.extend(pools[i].fallback.iter().filter_map(|f| index(f)));
            }
        }
        false
    })
}
