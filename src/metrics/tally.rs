//! What was spent lately, in memory: per (UTC hour, key fingerprint) over the last [`WINDOW_HOURS`],
//! so that today's and this month's spend of every key and pool are read without touching the store
//! (and, later, on the request path). It starts from what the store holds at open and adds every
//! request recorded since, so it agrees with the store whatever the flushes did meanwhile.

use std::collections::{BTreeMap, HashMap};

use crate::spend::Spent;

/// Hours kept: the longest local month (31 days) plus two days for the zone's offset.
pub const WINDOW_HOURS: u32 = 33 * 24;

/// Most rows kept: every hour of the window for every key the pool can hold, and `none`. Beyond it a
/// new (hour, key) is not added (only more keys than a pool holds, over a month, could get there).
pub const MAX_ROWS: usize = WINDOW_HOURS as usize * (crate::pool::MAX_KEYS + 1);

const HOUR_MS: u64 = super::HOUR_MS;

/// Spend per (hour, fingerprint); only rows with something spent or unpriced are kept.
#[derive(Default)]
pub(super) struct Tally {
    rows: BTreeMap<(u32, String), Spent>,
}

impl Tally {
    /// Adds a request's (or a stored row's) spend.
    pub(super) fn add(&mut self, hour: u32, fingerprint: &str, spent: Spent) {
        if spent.is_empty() {
            return;
        }
        let key = (hour, fingerprint.to_owned());
        if self.rows.len() >= MAX_ROWS && !self.rows.contains_key(&key) {
            return;
        }
        self.rows.entry(key).or_default().add(spent);
    }

    /// Forgets hours before `oldest_hour`.
    pub(super) fn prune(&mut self, oldest_hour: u32) {
        self.rows = self.rows.split_off(&(oldest_hour, String::new()));
    }

    /// Spend per fingerprint of the hours that start at or after `since_unix_ms` (an hour that
    /// straddles it, under a zone whose offset is not whole hours, counts with the period it starts in).
    pub(super) fn since(&self, since_unix_ms: u64) -> HashMap<String, Spent> {
        let first = u32::try_from(since_unix_ms.div_ceil(HOUR_MS)).unwrap_or(u32::MAX);
        let mut out: HashMap<String, Spent> = HashMap::new();
        for ((_, fingerprint), spent) in self.rows.range((first, String::new())..) {
            out.entry(fingerprint.clone()).or_default().add(*spent);
        }
        out
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }
}
