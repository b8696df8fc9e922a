//! What changed about a key, or about the gateway as a whole, as the event stream tells it.

use serde::Serialize;

use crate::keys::KeyId;

/// A key's state changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct KeyEvent {
    /// The key.
    pub key: KeyId,
    /// Its label (when the event happened).
    pub label: String,
    /// What changed.
    pub change: KeyChange,
}

/// What changed about a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KeyChange {
    /// Rate limited until then (Unix milliseconds).
    CoolingStarted {
        /// When it frees.
        until_unix_ms: u64,
    },
    /// A cooldown ended: the key is usable again.
    CoolingEnded,
    /// A ChatGPT plan is used up (its 429, or a window its answer reported at 100 %): new sessions go
    /// to the API keys until then (Unix milliseconds); sessions on it go on as `lost_org` says.
    PlanUsedUp {
        /// When its window resets.
        until_unix_ms: u64,
    },
    /// A used-up ChatGPT plan's window reset: new sessions go to it first again.
    PlanBack,
    /// The account is out of quota; it is tried again then (Unix milliseconds).
    QuotaExhausted {
        /// When it is tried again.
        until_unix_ms: u64,
    },
    /// Its base URL could not be reached; a background probe tries again then (Unix milliseconds).
    Unreachable {
        /// When it is tried again.
        retry_unix_ms: u64,
    },
    /// The provider rejected the key.
    Rejected,
    /// Usable again after a rejection or an exhausted quota.
    Recovered,
    /// Added to the pool.
    Added,
    /// Removed from the pool.
    Removed,
    /// Switched on by the user.
    Enabled,
    /// Switched off by the user.
    Disabled,
    /// Its settings changed (label, priority, budget, models).
    Updated,
}

/// Something that happened to the gateway as a whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GatewayEvent {
    /// Routing paused: new requests get 503 with `retry-after`.
    Paused,
    /// Routing resumed.
    Resumed,
    /// The metrics store failed; counts are kept in memory.
    StoreFailed {
        /// What went wrong, and what to do.
        message: String,
    },
    /// The metrics store works again.
    StoreRecovered,
    /// A client token was created.
    TokenCreated {
        /// Its name.
        name: String,
    },
    /// A client token was revoked.
    TokenRevoked {
        /// Its name.
        name: String,
    },
    /// The config file was edited by hand and the edit applied: what changed, in words.
    ConfigApplied {
        /// Each change (bounded by the keys and tokens there are).
        changes: Vec<String>,
    },
    /// The config file was edited by hand but the edit is not valid: the running settings stay.
    ConfigRefused {
        /// The file, line and column, and what is wrong.
        message: String,
    },
    /// A pool was created, changed or removed, or a token moved to another pool.
    PoolsChanged {
        /// The pool.
        name: String,
    },
    /// A key's or a pool's budget in money changed state: reserved past its reserve threshold, stopped at its
    /// limit, or open again when its period ended. Told once per state and period.
    Budget {
        /// Whose budget.
        of: BudgetOf,
        /// The key's label, or the pool's name.
        label: String,
        /// Where it stands now.
        state: crate::budget::BudgetState,
    },
    /// An installed client (Codex, pi) was checked through Keymux because its version changed (or
    /// Keymux started): `keymux clients check` for that client.
    ClientChecked(ClientChecked),
}

/// One client's check, as the tray and the Connect view tell it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize, ts_rs::TS)]
pub struct ClientChecked {
    /// `codex` or `pi`.
    pub name: String,
    /// The version checked, when it printed one.
    pub version: Option<String>,
    /// Every transport it uses went through.
    pub ok: bool,
    /// In words: `pi 1.7.0 works through Keymux`, or `Codex 0.172.0: WebSocket turn failed: …`.
    pub summary: String,
}

/// Whose budget in money a budget event is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, ts_rs::TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BudgetOf {
    /// One key's own budget.
    Key {
        /// The key.
        key: KeyId,
    },
    /// A user's pool's budget, its keys' spend together.
    Pool {
        /// The pool's name.
        pool: String,
    },
}
