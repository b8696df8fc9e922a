//! The API's bodies, read from the gateway's state: times as Unix milliseconds against the gateway's
//! own clock, so the dashboard's countdowns agree with the gateway.

use std::collections::HashMap;
use std::time::Duration;

use super::types::{
    GatewayInfo, KeyInfo, KeychainInfo, PeriodSpend, PoolInfo, StatusBody, TokenInfo, UsageBody, UsagePoint, WindowInfo,
};
use crate::budget::SpendNow;
use crate::gateway::Gateway;
use crate::keys::KeyId;
use crate::pool::{HealthState, KeyStatus};
use crate::pools::{PoolConfig, Pools, ALL};
use crate::quota::WindowState;
use crate::spend::{Spent, Usd};

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn window(state: Option<WindowState>, now_unix_ms: u64) -> Option<WindowInfo> {
    state.map(|w| WindowInfo {
        limit: w.limit,
        remaining: w.remaining,
        resets_at_unix_ms: now_unix_ms + millis(w.resets_in),
        span_ms: millis(w.span),
        pace: w.pace(),
    })
}

/// When a window runs out at its pace, Unix milliseconds (the sooner of the two).
fn window_runs_out(status: &KeyStatus, now_unix_ms: u64) -> Option<u64> {
    let out = |w: Option<WindowState>| w.and_then(|w| w.runs_out_in()).map(|d| now_unix_ms + millis(d));
    [out(status.requests_window), out(status.tokens_window)].into_iter().flatten().min()
}

/// What each key (by fingerprint) spent today and this month (local periods), as the metrics keep it
/// for the budgets, and in the last hour, for the pace a forecast follows.
struct SpentNow {
    now: std::sync::Arc<SpendNow>,
    hour: HashMap<String, Spent>,
    hour_start: u64,
}

impl SpentNow {
    /// The metrics are kept per hour: the pace is what was spent since the start of the previous
    /// hour, over the time since (one to two hours: the last hour at least, never one minute's burst).
    fn read(gw: &Gateway) -> Self {
        let now = gw.clock().unix_ms();
        let hour_start = (now - now % 3_600_000).saturating_sub(3_600_000);
        Self { now: gw.spend_now(), hour: gw.metrics().spent_since(hour_start), hour_start }
    }

    /// What the keys of these fingerprints spent since `hour_start`, and that start: the pace.
    fn pace<'a>(&self, fingerprints: impl IntoIterator<Item = &'a str>) -> (Usd, u64) {
        let nanos: u64 = fingerprints.into_iter().filter_map(|f| self.hour.get(f)).map(|s| s.usd.nanos()).sum();
        (Usd::from_nanos(nanos), self.hour_start)
    }

    /// What the keys of these fingerprints spent.
    fn of<'a>(&self, fingerprints: impl IntoIterator<Item = &'a str>) -> PeriodSpend {
        let (today, month) = self.now.of(fingerprints);
        PeriodSpend {
            spend_today_usd: today.usd,
            spend_month_usd: month.usd,
            unpriced_requests_today: today.unpriced,
            unpriced_requests_month: month.unpriced,
        }
    }
}

fn info(status: KeyStatus, now_unix_ms: u64, pools: &Pools, spent: &SpentNow) -> KeyInfo {
    let money = status.money;
    let spend = spent.of(std::iter::once(status.fingerprint.as_str()));
    let pace = spent.pace(std::iter::once(status.fingerprint.as_str()));
    let (today, month) = (spend.spend_today_usd, spend.spend_month_usd);
    KeyInfo {
        budget: spent.now.state_of(&status.fingerprint, &money),
        budget_runs_out_unix_ms: money.runs_out(today, month, pace, now_unix_ms, &spent.now.periods),
        window_runs_out_unix_ms: window_runs_out(&status, now_unix_ms),
        spend,
        until_unix_ms: (status.cooldown_ms > 0).then(|| now_unix_ms + status.cooldown_ms),
        plan_used_up_until_unix_ms: status.plan_used_up_until_unix_ms(now_unix_ms),
        requests_window: window(status.requests_window, now_unix_ms),
        tokens_window: window(status.tokens_window, now_unix_ms),
        pools: pools.pools_of(&status.id),
        proxy: pools.proxy_of(&status.id).map(str::to_owned),
        status,
    }
}

/// Every key.
pub fn keys(gw: &Gateway) -> Vec<KeyInfo> {
    let now_unix_ms = gw.clock().unix_ms();
    let pools = gw.pools();
    let spent = SpentNow::read(gw);
    let statuses = gw.pool().status(gw.clock().now(), gw.today());
    statuses.into_iter().map(|k| info(k, now_unix_ms, &pools, &spent)).collect()
}

/// The user's pools (not `all`) with their keys' fingerprints, for the spend report.
pub fn pool_fingerprints(gw: &Gateway, keys: &[KeyInfo]) -> Vec<(String, Vec<String>)> {
    let resolved = gw.pools();
    resolved
        .defs()
        .iter()
        .map(|def| {
            let ids = resolved.keys_of(&def.name);
            let fps = keys.iter().filter(|k| ids.contains(&k.status.id)).map(|k| k.status.fingerprint.clone());
            (def.name.clone(), fps.collect())
        })
        .collect()
}

/// Every pool (`all` first) with its tokens and how many of its keys can serve now.
pub fn pools(gw: &Gateway, keys: &[KeyInfo]) -> Vec<PoolInfo> {
    let resolved = gw.pools();
    let tokens = tokens(gw);
    let builtin = PoolConfig { name: ALL.to_owned(), ..PoolConfig::default() };
    let spent = SpentNow::read(gw);
    let now_unix_ms = gw.clock().unix_ms();
    std::iter::once(&builtin)
        .chain(resolved.defs())
        .map(|def| {
            let mut info = pool_info(def, resolved.keys_of(&def.name).to_vec(), keys, &spent, now_unix_ms);
            info.from_env = gw.env_pools().iter().any(|p| p.name.eq_ignore_ascii_case(&def.name));
            info.tokens =
                tokens.iter().filter(|t| t.pool.eq_ignore_ascii_case(&def.name)).map(|t| t.name.clone()).collect();
            info
        })
        .collect()
}

/// One pool from its definition and its keys, its budget state from the spend summed here (`all`
/// has no budget: open). Its tokens and whether it came from the environment are the caller's.
fn pool_info(def: &PoolConfig, key_ids: Vec<KeyId>, keys: &[KeyInfo], spent: &SpentNow, now_unix_ms: u64) -> PoolInfo {
    let mine: Vec<&KeyInfo> = keys.iter().filter(|k| key_ids.contains(&k.status.id)).collect();
    let usable: Vec<&KeyInfo> = mine.iter().copied().filter(|k| k.status.health == HealthState::Ready).collect();
    let headroom = if usable.is_empty() {
        0.0
    } else {
        usable.iter().map(|k| k.status.headroom).sum::<f32>() / usable.len() as f32
    };
    // `all` is every request, keys removed since included; another pool, its keys now.
    let fingerprints: Vec<&str> = if def.name == ALL {
        spent.now.by_key.keys().map(String::as_str).collect()
    } else {
        mine.iter().map(|k| k.status.fingerprint.as_str()).collect()
    };
    let spend = spent.of(fingerprints.iter().copied());
    let money = def.policies.money;
    let pace = spent.pace(fingerprints.iter().copied());
    let (today, month) = (spend.spend_today_usd, spend.spend_month_usd);
    // The pool runs out of rate-limit room when the last of its usable keys does.
    let window_runs_out = usable.iter().map(|k| k.window_runs_out_unix_ms).collect::<Option<Vec<u64>>>();
    PoolInfo {
        usable: usable.len(),
        headroom,
        key_ids,
        spend,
        budget: money.state(today, month, &spent.now.periods),
        budget_runs_out_unix_ms: money.runs_out(today, month, pace, now_unix_ms, &spent.now.periods),
        window_runs_out_unix_ms: window_runs_out.and_then(|times| times.into_iter().max()),
        ..PoolInfo::defined(def)
    }
}

/// One pool.
pub fn pool(gw: &Gateway, name: &str) -> Option<PoolInfo> {
    pools(gw, &keys(gw)).into_iter().find(|p| p.name.eq_ignore_ascii_case(name))
}

/// One key.
pub fn key(gw: &Gateway, id: &KeyId) -> Option<KeyInfo> {
    keys(gw).into_iter().find(|k| &k.status.id == id)
}

/// The gateway and every key.
pub fn status(gw: &Gateway) -> StatusBody {
    let keys = keys(gw);
    let now_unix_ms = gw.clock().unix_ms();
    let minute_ago = now_unix_ms.saturating_sub(60_000);
    let requests_last_minute =
        gw.events().recent(crate::events::RECENT_CAPACITY).iter().filter(|r| r.routed.at_unix_ms >= minute_ago).count()
            as u64;
    let store = gw.settings().store();
    let gateway = GatewayInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        base_url: gw.base_url(),
        paused: gw.paused(),
        rescues_lost_sessions: gw.policy().lost_org == crate::router::LostOrgPolicy::Rescue,
        keys_total: keys.len(),
        keys_healthy: keys.iter().filter(|k| k.status.health == HealthState::Ready).count(),
        next_reset_unix_ms: keys
            .iter()
            .filter(|k| matches!(k.status.health, HealthState::Cooling | HealthState::QuotaExhausted))
            .filter_map(|k| k.until_unix_ms)
            .min(),
        requests_last_minute,
        store: gw.metrics().status(),
        keychain: KeychainInfo { kind: store.describe().to_owned(), ok: gw.keychain_ok() },
        started_unix_ms: gw.started_unix_ms(),
        now_unix_ms,
        last_event_id: gw.events().last_id(),
        periods: gw.clock().periods(),
    };
    StatusBody { gateway, pools: pools(gw, &keys), keys }
}

/// The client tokens (never their values).
pub fn tokens(gw: &Gateway) -> Vec<TokenInfo> {
    let listed = gw.settings().config().tokens;
    let set = gw.tokens();
    let pools = set.pools();
    set.names()
        .into_iter()
        .zip(pools)
        .map(|((id, name), (_, pool))| {
            let found = listed.iter().find(|t| t.id == id);
            let (created_unix, login) = found.map_or((0, false), |t| (t.created_unix, t.login));
            let name = if name.is_empty() { "KEYMUX_CLIENT_TOKEN".to_owned() } else { name };
            TokenInfo { id, name, created_unix, pool, login }
        })
        .collect()
}

/// Usage from `since_unix_ms` in buckets of `hours`. Blocks (it reads sled).
pub fn usage(gw: &Gateway, since_unix_ms: u64, hours: u32) -> UsageBody {
    let points = gw
        .metrics()
        .series(since_unix_ms, hours)
        .into_iter()
        .map(|(start_unix_ms, key, c)| UsagePoint {
            start_unix_ms,
            key,
            requests: c.requests,
            by_status: c.by_status.clone(),
            by_affinity: c.by_affinity.clone(),
            failures: c.failures.clone(),
            pinned: c.pinned,
            continuity: c.continuity_hits,
            rescued: c.rescued,
            reasoning_dropped: c.reasoning_dropped,
            reasoning_misplaced: c.reasoning_misplaced,
            input_tokens: c.input_tokens,
            cached_tokens: c.cached_tokens,
            output_tokens: c.output_tokens,
            cached_ratio: c.cached_ratio() as f32,
            spend_usd: c.spent().usd,
            unpriced_requests: c.unpriced,
            latency_p50_ms: c.latency_quantile(0.5),
            latency_p90_ms: c.latency_quantile(0.9),
            latency_p99_ms: c.latency_quantile(0.99),
        })
        .collect();
    UsageBody { bucket_ms: u64::from(hours) * 3_600_000, points }
}
