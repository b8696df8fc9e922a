//! A key's health: the live state with its deadlines (`Health`), the kind the API shows (`HealthState`),
//! and the pure transitions an outcome makes. No locks and no clock reads: the pool passes `now` in.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use std::time::Instant;
use ts_rs::TS;

/// A key's live health, with the deadlines the router compares against `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Usable.
    Ready,
    /// Rate limited until then.
    Cooling {
        /// When the cooldown ends.
        until: Instant,
    },
    /// The provider rejected the key (401/403).
    Rejected,
    /// The account is out of quota (`insufficient_quota`) until then, or until re-enabled.
    QuotaExhausted {
        /// When to try it again.
        until: Instant,
    },
    /// Switched off by the user.
    Disabled,
    /// Its base URL could not be reached (DNS, refused, TLS, connect timeout): left alone until then,
    /// when a background probe tries it again (`streak` failures in a row set the back-off).
    Unreachable {
        /// When the next background probe is due.
        until: Instant,
        /// Failed reaches in a row.
        streak: u8,
    },
}

/// The longest back-off between two tries of an unreachable key.
pub const MAX_UNREACHABLE_BACKOFF: Duration = Duration::from_secs(300);

/// The back-off after `streak` failed reaches in a row: 5 s, doubling, at most five minutes.
pub fn unreachable_backoff(streak: u8) -> Duration {
    let doubled = Duration::from_secs(5).saturating_mul(1u32 << streak.saturating_sub(1).min(10));
    doubled.min(MAX_UNREACHABLE_BACKOFF)
}

/// A key's health as the API, the dashboard, the tray and the CLI show it: `Health` at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum HealthState {
    /// Usable.
    Ready,
    /// Rate limited until `until_unix_ms`.
    Cooling,
    /// Out of quota; tried again at `until_unix_ms`.
    QuotaExhausted,
    /// Rejected by the provider (401/403).
    Rejected,
    /// Switched off by the user.
    Disabled,
    /// Its base URL cannot be reached; retried in the background at `until_unix_ms`.
    Unreachable,
}

impl Health {
    /// What it is at `now`, and how long until its cooldown (or quota rest) ends, if it has one.
    pub fn at(self, now: Instant) -> (HealthState, Option<Duration>) {
        match self {
            Self::Ready => (HealthState::Ready, None),
            Self::Cooling { until } | Self::QuotaExhausted { until } if until <= now => (HealthState::Ready, None),
            Self::Cooling { until } => (HealthState::Cooling, Some(until - now)),
            Self::QuotaExhausted { until } => (HealthState::QuotaExhausted, Some(until - now)),
            Self::Rejected => (HealthState::Rejected, None),
            Self::Disabled => (HealthState::Disabled, None),
            // Past `until` it stays unreachable until the background probe reaches it.
            Self::Unreachable { until, .. } => (HealthState::Unreachable, Some(until.saturating_duration_since(now))),
        }
    }
}

/// The effect of one upstream attempt on the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutcomeKind {
    /// The key served the request (any 2xx).
    Served,
    /// The client's request was refused for its own reasons (4xx other than auth and rate limits).
    ClientError,
    /// Rate limited: cool the key for this long.
    RateLimited {
        /// How long.
        cooldown: Duration,
    },
    /// The provider rejected the key.
    Rejected,
    /// The upstream failed (5xx, connection, timeout).
    Failed,
    /// The account is out of quota: rest the key this long.
    QuotaExhausted {
        /// How long.
        recheck: Duration,
    },
    /// The key's base URL could not be reached.
    Unreachable,
}

/// A change of a key's health, for the event stream and notifications.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthChange {
    /// Rate limited until then.
    Cooling {
        /// When it frees.
        until: Instant,
    },
    /// Out of quota until then (or until re-enabled).
    QuotaExhausted {
        /// When it is tried again.
        until: Instant,
    },
    /// Rejected by the provider.
    Rejected,
    /// Could not be reached; tried again then.
    Unreachable {
        /// When the next background probe is due.
        retry: Instant,
    },
    /// Usable again after a rejection, an exhausted quota or being unreachable.
    Recovered,
}

/// The health after an outcome of `kind` observed at `at`.
pub fn next_health(health: Health, kind: OutcomeKind, at: Instant) -> Health {
    if health == Health::Disabled {
        return Health::Disabled;
    }
    match kind {
        // A success proves the key works: lift an expired cooldown or an earlier rejection (a transient
        // 401 during key rotation must not stick).
        OutcomeKind::Served | OutcomeKind::ClientError => match health {
            Health::Cooling { until } if until > at => health,
            _ => Health::Ready,
        },
        OutcomeKind::RateLimited { cooldown } => {
            let until = crate::clock::later(at, cooldown);
            match health {
                Health::Cooling { until: old } if old > until => health,
                _ => Health::Cooling { until },
            }
        }
        OutcomeKind::Rejected => Health::Rejected,
        OutcomeKind::Failed => health,
        OutcomeKind::QuotaExhausted { recheck } => Health::QuotaExhausted { until: crate::clock::later(at, recheck) },
        OutcomeKind::Unreachable => {
            let streak = match health {
                Health::Unreachable { streak, .. } => streak.saturating_add(1),
                _ => 1,
            };
            Health::Unreachable { until: crate::clock::later(at, unreachable_backoff(streak)), streak }
        }
    }
}

/// The health after the user switched a key off or back on.
pub fn switched(health: Health, disabled: bool) -> Health {
    match (disabled, health) {
        (true, _) => Health::Disabled,
        // Re-enabling is the user saying the key is fine again (replaced, topped up): it clears a
        // rejection and an exhausted quota too, but not a rate-limit cooldown, which ends by itself.
        (false, Health::Disabled | Health::Rejected | Health::QuotaExhausted { .. } | Health::Unreachable { .. }) => {
            Health::Ready
        }
        (false, other) => other,
    }
}

/// The transition worth telling the user about, if the health changed kind (or a cooldown grew).
pub fn health_change(before: Health, after: Health, now: Instant) -> Option<HealthChange> {
    let usable = |h: Health| match h {
        Health::Ready => true,
        Health::Cooling { until } | Health::QuotaExhausted { until } => until <= now,
        Health::Rejected | Health::Disabled | Health::Unreachable { .. } => false,
    };
    let was_unreachable = matches!(before, Health::Unreachable { .. });
    match after {
        Health::Cooling { until } if before != after && until > now => Some(HealthChange::Cooling { until }),
        Health::QuotaExhausted { until } if before != after => Some(HealthChange::QuotaExhausted { until }),
        Health::Rejected if before != Health::Rejected => Some(HealthChange::Rejected),
        Health::Unreachable { until, .. } if !was_unreachable => Some(HealthChange::Unreachable { retry: until }),
        Health::Ready
            if !usable(before)
                && matches!(before, Health::Rejected | Health::QuotaExhausted { .. } | Health::Unreachable { .. }) =>
        {
            Some(HealthChange::Recovered)
        }
        _ => None,
    }
}
