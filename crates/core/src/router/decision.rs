//! What a decision says: the `Decision` with its reasons, exactly as the dashboard and the event stream
//! show it. (The pool snapshot it reads, `PoolView`, is the pool's.)

use serde::Serialize;

use crate::budget::Period;
use crate::drops::ReasoningDropped;
use crate::facts::AffinitySource;
use crate::keys::KeyId;
use crate::markers::OrgTag;
use crate::spend::Usd;

/// What became of the affinity signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum AffinityState {
    /// The request carried no signal.
    NoSignal,
    /// A signal, but nothing remembered for it.
    CacheMiss,
    /// The remembered key was chosen.
    Hit,
    /// The remembered key could not take the request.
    TargetUnavailable,
    /// Affinity is switched off.
    Disabled,
    /// The affinity table could not be consulted.
    CacheUnavailable,
    /// The prompt is shorter than the provider's prompt cache takes (1024 tokens): nothing to keep warm,
    /// so the request is balanced by headroom.
    ShortPrompt,
}

/// Why a key was skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SkipWhy {
    /// Rate limited; frees in that many milliseconds.
    Cooling {
        /// Milliseconds left.
        remaining_ms: u64,
    },
    /// Rejected by the provider.
    Invalid,
    /// Switched off by the user.
    Disabled,
    /// Out of quota (`insufficient_quota`); tried again after that many milliseconds.
    QuotaExhausted {
        /// Milliseconds left.
        remaining_ms: u64,
    },
    /// Not allowed for the request's model, or the provider said it lacks it.
    ModelUnavailable,
    /// A rate-limit window is used up; it refills in that many milliseconds.
    NearExhaustion {
        /// Milliseconds until the window refills.
        reset_ms: u64,
    },
    /// A ChatGPT plan's usage window (5-hour or weekly) is used up; it resets in that many
    /// milliseconds.
    PlanUsedUp {
        /// Milliseconds until the window resets.
        reset_ms: u64,
    },
    /// Over its daily token budget.
    OverBudget,
    /// Its base URL cannot be reached; a background probe tries again in that many milliseconds.
    Unreachable {
        /// Milliseconds until the next try.
        retry_ms: u64,
    },
    /// Past the reserve threshold of a budget in money: no new sessions; the ones already on it go on.
    BudgetReserved {
        /// Which budget.
        period: Period,
        /// Its amount.
        #[ts(type = "number")]
        limit: Usd,
        /// How much of it is spent, in thousandths.
        used_permille: u32,
    },
    /// At a budget in money set to stop there: nothing until it resets.
    BudgetStopped {
        /// Which budget.
        period: Period,
        /// Its amount.
        #[ts(type = "number")]
        limit: Usd,
        /// Milliseconds until it resets.
        resets_ms: u64,
    },
    /// Less than the share of a rate-limit window it keeps is left: kept for the sessions
    /// already on it, no new ones until the window refills.
    WindowReserved {
        /// What is left of the tighter window, thousandths of its limit.
        left_permille: u16,
        /// The share it keeps, percent.
        keep_pct: u8,
        /// Milliseconds until the window refills.
        reset_ms: u64,
    },
}

/// One line of a decision's explanation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum Reason {
    /// The chosen key had the most rate-limit headroom for its load (headroom / (1 + in flight)).
    MostHeadroom {
        /// Its headroom, in thousandths of its tighter window.
        headroom_permille: u16,
        /// Its in-flight count.
        in_flight: u32,
        /// How many usable keys were compared.
        candidates: usize,
    },
    /// Plan first: a new session goes to the ChatGPT plan while its usage windows allow, ahead of
    /// every API key.
    PlanFirst {
        /// The plan's key.
        key: KeyId,
    },
    /// The ChatGPT plan's usage is used up until its window resets: new sessions overflow to the API
    /// keys (a session on the plan is rescued onto one, or refused, by `lost_org`).
    PlanExhausted {
        /// The plan's key.
        key: KeyId,
        /// Milliseconds until its window resets.
        resets_ms: u64,
    },
    /// Only the lowest priority tier with a usable key takes unpinned traffic first.
    PriorityTier {
        /// That tier.
        tier: u8,
    },
    /// Every usable key is over its daily budget: budgets are soft, so they serve anyway.
    BudgetOverrun,
    /// Several keys had the same load: the one that recently started the fewest sessions was chosen
    /// (exact ties by a stable hash of the request number), so new sessions spread evenly.
    FewestRecentStarts {
        /// How many keys were tied on load.
        tied: usize,
    },
    /// The request continues a response stored with one key (`previous_response_id`, or a
    /// `/v1/responses/{id}` call): only that key can serve it.
    ContinuityBinding {
        /// The key.
        key: KeyId,
    },
    /// The request names a response id without a Keymux marker (made before Keymux or directly
    /// upstream), so it is routed by the normal rules and may land on a key that does not hold it.
    UnmarkedResponseId,
    /// The request replays encrypted content without a Keymux marker (a session begun before Keymux, or
    /// directly upstream): one key of each organization is tried in turn, moving on only when the
    /// organization answers that it cannot read it (a 400 that costs no tokens). The organization that
    /// served this session last goes first.
    FindingOrg {
        /// How many organizations may be tried.
        orgs: usize,
        /// The key that served this session last, when Keymux remembers one.
        known: Option<KeyId>,
    },
    /// No organization could read the request's unmarked encrypted content: by `lost_org`, its items
    /// were dropped and the rest sent (rescue), or the request was refused.
    UnreadableEverywhere {
        /// How many organizations answered that they cannot read it.
        tried: usize,
    },
    /// A frame on a Responses WebSocket goes to the upstream socket its connection is bound to.
    WebSocketBound {
        /// The key of that socket.
        key: KeyId,
    },
    /// A new Responses WebSocket whose first frame carries no markers goes to the organization that served
    /// this session's pinned requests before (Codex prewarms a resumed session without them).
    SessionHint {
        /// The key that served the session last.
        key: KeyId,
        /// Usable keys of its organization.
        usable: usize,
    },
    /// The key that last served this request's `prompt_cache_key` (or prompt prefix) to a successful end
    /// was preferred, to keep the session on a warm prompt cache.
    SoftAffinity {
        /// That key.
        key: KeyId,
    },
    /// The remembered key could not take this request (cooling, rejected, gone, or too busy).
    SoftTargetUnavailable {
        /// That key.
        key: KeyId,
    },
    /// Another key of the remembered key's organization was preferred (the prompt cache is per
    /// organization).
    WarmOrganization,
    /// Encrypted content in the request can only be read by one organization's keys.
    PinnedToOrg {
        /// The key that produced the content.
        key: KeyId,
        /// Keys of that organization in the pool.
        org_keys: usize,
        /// Of those, usable now.
        usable: usize,
    },
    /// The owning organization has no usable key: the unreadable items are dropped and the request is
    /// routed as unpinned.
    Rescued {
        /// The key named by the marker.
        key: KeyId,
    },
    /// No key of the token's pool could serve, so one of the fallback pools the user declared did.
    PoolFallback {
        /// The token's pool.
        from: String,
        /// The fallback pool that served.
        to: String,
    },
    /// This session was rescued from these organizations on an earlier turn: their items are dropped
    /// again, even if a key of theirs is usable now, so the session goes on where it was moved.
    StillRescued {
        /// How many organizations.
        orgs: usize,
    },
    /// The token's pool does not allow the service tier the request asked for (its policies keep it to
    /// the standard tier and a tier above it was asked for: `priority`, `fast`, `ultrafast`; or they
    /// leave out `ultrafast` alone): it was sent in the tier they allow instead.
    TierChanged {
        /// The token's pool.
        pool: String,
        /// The tier the request asked for (at most 32 bytes).
        asked: String,
        /// The tier it was sent with (`default`, or `priority` for an ultrafast request).
        sent: String,
    },
    /// Markers of another Keymux install were removed without routing on them.
    ForeignMarkersStripped {
        /// How many.
        count: usize,
    },
    /// Encrypted-content affinity is switched off: markers were removed but not used.
    AffinityOff,
    /// A key was left out.
    Skipped {
        /// Which.
        key: KeyId,
        /// Why.
        why: SkipWhy,
    },
}

/// Why no key can take the request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Refusal {
    /// The request replays encrypted content of two organizations; no key can read both.
    MixedOrgs {
        /// One key per organization named.
        keys: Vec<KeyId>,
    },
    /// The key that holds the referenced response cannot serve (removed, rejected or disabled).
    ContinuityLost {
        /// That key.
        key: KeyId,
    },
    /// The organization that can read the request has no usable key, and the policy is `fail`.
    LostOrg {
        /// The key named by the marker.
        key: KeyId,
    },
    /// The pool is empty.
    NoKeys,
    /// The request replays state made by a key outside its token's pool (and its fallbacks); it is
    /// never forwarded.
    PoolMismatch {
        /// The key that made the state.
        key: KeyId,
        /// The token's pool.
        pool: String,
        /// A pool that holds that key.
        owner: String,
    },
    /// The request names a response by its bare provider id, and every key of its token's pool shares
    /// its organization with a key outside it (or its organization is not known yet): such a key could
    /// read a response made through another pool, so the request is never forwarded.
    BareResponseId {
        /// The token's pool.
        pool: String,
        /// A pool outside it that shares an organization with it.
        shared_with: String,
    },
    /// Every usable key is cooling; the first frees after that many whole seconds (at least 1).
    AllCooling {
        /// Seconds until the first key frees.
        retry_after_secs: u64,
        /// Keys cooling.
        cooling: usize,
    },
    /// No key is usable at all.
    NoUsableKey {
        /// Keys that are invalid or disabled.
        unusable: usize,
    },
    /// Every key the request may use for a new session is past its budget in money (reserved for the
    /// sessions already on it, or stopped); the first budget resets after that many whole seconds.
    BudgetReached {
        /// Seconds until the first budget resets (at least 1).
        retry_after_secs: u64,
        /// Keys past their budget.
        keys: usize,
    },
    /// The key a pinned request needs (every key of its organization) reached its budget in money
    /// set to stop there: refused until the budget resets, as the user chose.
    BudgetStopped {
        /// That key.
        key: KeyId,
        /// Which budget.
        period: Period,
        /// Its amount.
        #[ts(type = "number")]
        limit: Usd,
        /// Seconds until it resets (at least 1).
        retry_after_secs: u64,
    },
}

/// The routing decision for one request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct Decision {
    /// The request's gateway-local number.
    pub seq: u64,
    /// The key to try first.
    pub choice: Option<KeyId>,
    /// Keys to try next, in order, if the choice fails before any byte reached the client.
    pub fallbacks: Vec<KeyId>,
    /// The explanation, one line per rule applied (bounded by `MAX_KEYS + 3`: the tier change is one more).
    pub reasons: Vec<Reason>,
    /// Where the affinity signal came from.
    pub affinity_source: AffinitySource,
    /// What became of it.
    pub affinity_state: AffinityState,
    /// Whether a hard binding (previous response, WebSocket) was found and used.
    pub continuity_hit: bool,
    /// The encrypted-content pin, when the request carried one.
    pub pin: Option<PinDecision>,
    /// Organizations whose items are dropped before the request goes upstream (rescue: no usable key of
    /// theirs is left). Bounded by `markers::MAX_PINS`.
    #[ts(type = "Array<string>")]
    pub rescued_orgs: Vec<OrgTag>,
    /// Set when no key can take the request.
    pub refusal: Option<Refusal>,
    /// How the request was placed, so no other module restates the router's rules to find out.
    pub route: Route,
    /// Reasoning the provider said it dropped from the request's input (`input_transformations`,
    /// turn boundaries left out), set when the answer ended: the turn lost part of its session's
    /// reasoning although it succeeded. Never set by the router.
    pub reasoning_dropped: Option<ReasoningDropped>,
}

/// How a decision placed its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// No key can take it (the refusal says why).
    Refused,
    /// Bound to the key that holds the response it continues.
    Continuity,
    /// A frame on a Responses WebSocket, bound to its connection's key.
    WebSocketBound,
    /// Pinned to the organization that can read its encrypted content.
    Pinned,
    /// A new WebSocket sent to the organization its session used before.
    SessionHint,
    /// Unmarked encrypted content: each organization tried in turn until one can read it.
    FindingOrg,
    /// Placed on the remembered key (or its warm organization) to keep a prompt cache warm.
    Affinity,
    /// Placed by headroom and load alone: a new session, as far as Keymux can tell.
    Balanced,
}

/// What the encrypted-content pin did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct PinDecision {
    /// The key named by the marker.
    pub key: KeyId,
    /// The organization tag the marker carries.
    #[ts(type = "string")]
    pub org: OrgTag,
    /// Whether the choice is that very key (otherwise another key of its organization).
    pub exact: bool,
}

impl Decision {
    /// An empty decision for request `seq` (filled in by the router, or left empty for a request refused
    /// before routing).
    pub fn new(seq: u64) -> Self {
        Self {
            seq,
            choice: None,
            fallbacks: Vec::new(),
            reasons: Vec::new(),
            affinity_source: AffinitySource::None,
            affinity_state: AffinityState::NoSignal,
            continuity_hit: false,
            pin: None,
            rescued_orgs: Vec::new(),
            refusal: None,
            route: Route::Refused,
            reasoning_dropped: None,
        }
    }

    /// A frame on a Responses WebSocket bound to `key`.
    pub fn bound_to_socket(seq: u64, key: &KeyId) -> Self {
        Self {
            choice: Some(key.clone()),
            reasons: vec![Reason::WebSocketBound { key: key.clone() }],
            continuity_hit: true,
            route: Route::WebSocketBound,
            ..Self::new(seq)
        }
    }

    /// The choice followed by the fallbacks.
    pub fn candidates(&self) -> impl Iterator<Item = &KeyId> {
        self.choice.iter().chain(self.fallbacks.iter())
    }

    /// Whether the key it picked is there only by load (the spread counts it as a session start).
    pub fn balanced(&self) -> bool {
        self.route == Route::Balanced
    }

    /// Whether the request is finding the organization of encrypted content that carries no marker
    /// (each candidate is one organization's key).
    pub fn finding_org(&self) -> bool {
        self.route == Route::FindingOrg
    }
}

/// What happens when the organization that can read a request has no usable key left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LostOrgPolicy {
    /// Drop the unreadable encrypted items and route normally (the session continues, minus that state).
    #[default]
    Rescue,
    /// Answer 409 naming the key, so the user decides.
    Fail,
}
