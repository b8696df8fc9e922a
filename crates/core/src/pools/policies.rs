//! A pool's policies: every setting of a pool a person changes besides its keys and fallbacks, declared
//! once ([`PoolPolicies`]), and what they mean for its requests (the tier they may ask for).

use serde::{Deserialize, Serialize};

use super::proxy::check_proxy;
use super::Pools;
use crate::budget::{MoneyBudget, MoneyBudgetChange};
use crate::change::given;
use crate::flat::Fields;

/// A pool's policies, declared once and flattened into every shape a pool takes, so the config file,
/// the API and the CLI read the same field names from here: the config file's pool
/// ([`super::PoolConfig`]), the API's view of a pool (`PoolInfo`, and through it the dashboard's
/// TypeScript types), and the CLI's flags (`cli::args::PoliciesArgs`). Each default is written once, in
/// `Default`, which serde fills a field left out from; the config file leaves out the fields at their
/// default (`config::defaults`). A change to them is a [`PoolPoliciesChange`].
///
/// A pool's proxy login (`proxy_login`) is not among them: nobody sets it, it says where the user and
/// password given with the proxy's URL went (the keychain), so it stays on `PoolConfig`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(default)]
pub struct PoolPolicies {
    /// Whether its tokens' requests may ask for a service tier that bills above the standard one
    /// (`service_tier` `priority` or `fast`, one tier, Codex's Fast mode, and `ultrafast`: see
    /// [`above_standard`]). `false`: such a request is sent with `service_tier: "default"`, and its
    /// decision says so. Default `true`.
    pub allow_priority: bool,
    /// Whether its requests may ask for `ultrafast` (3x to 6x the standard price), when
    /// `allow_priority` lets them above the standard tier at all. `false`: an ultrafast request is
    /// sent in the priority tier (Fast, 2x) instead, and its decision says so. Default `true`.
    pub allow_ultrafast: bool,
    /// The proxy every upstream request of its keys goes through (`None`: direct): `http://host:port`,
    /// `https://…`, `socks5://…` or `socks5h://…`, probes and WebSockets included; never sent direct
    /// when it cannot be reached. Never with a user or password (see [`check_proxy`]): those are kept
    /// in the keychain, and the pool's `proxy_login` says so.
    pub proxy: Option<String>,
    /// Its keys' budget in money, together (see `budget`): what its tokens' requests may spend.
    #[serde(flatten)]
    pub money: MoneyBudget,
}

impl Default for PoolPolicies {
    fn default() -> Self {
        Self { allow_priority: true, allow_ultrafast: true, proxy: None, money: MoneyBudget::default() }
    }
}

impl Fields for PoolPolicies {
    const NAME: &'static str = "PoolPolicies";
    const FIELDS: &'static [&'static str] = &{
        let money = MoneyBudget::FIELDS;
        ["allow_priority", "allow_ultrafast", "proxy", money[0], money[1], money[2], money[3]]
    };
}

impl PoolPolicies {
    /// Checks every policy, in the words the config file, the API and the CLI show.
    pub fn validate(&self) -> Result<(), String> {
        self.money.validate()?;
        match &self.proxy {
            Some(proxy) => check_proxy(proxy).map(drop),
            None => Ok(()),
        }
    }

    /// The tier a request asking for `asked` is sent in under these policies, when not the one it
    /// asked for: `default` for a tier above the standard one when `allow_priority` is off, `priority`
    /// for `ultrafast` when only `allow_ultrafast` is. `None`: as asked.
    pub fn sent_tier(&self, asked: &str) -> Option<&'static str> {
        use crate::spend::ServiceTier;
        match ServiceTier::from_response(Some(asked)) {
            ServiceTier::Priority | ServiceTier::Ultrafast if !self.allow_priority => Some(STANDARD_TIER),
            ServiceTier::Ultrafast if !self.allow_ultrafast => Some(PRIORITY_TIER),
            _ => None,
        }
    }

    /// Whether requests may be served in `tier` under these policies (the model catalog offers
    /// only those).
    pub fn offers(&self, tier: crate::spend::ServiceTier) -> bool {
        use crate::spend::ServiceTier;
        match tier {
            ServiceTier::Priority => self.allow_priority,
            ServiceTier::Ultrafast => self.allow_priority && self.allow_ultrafast,
            ServiceTier::Standard | ServiceTier::Flex | ServiceTier::Other => true,
        }
    }

    /// The tier policies in a few words: `priority tier allowed`, `priority tier sent as standard`,
    /// `priority tier allowed, ultrafast sent as priority`.
    fn tier_words(&self) -> &'static str {
        match (self.allow_priority, self.allow_ultrafast) {
            (false, _) => "priority tier sent as standard",
            (true, false) => "priority tier allowed, ultrafast sent as priority",
            (true, true) => "priority tier allowed",
        }
    }

    /// The policies in words, as `keymux pool list` shows them: `priority tier allowed, direct`,
    /// `priority tier sent as standard, through the proxy http://proxy.example:3128 (its login in the
    /// keychain)` (`login`: the keychain holds the proxy's user and password).
    pub fn summary(&self, login: bool) -> String {
        let tier = self.tier_words();
        match &self.proxy {
            Some(proxy) if login => format!("{tier}, through the proxy {proxy} (its login in the keychain)"),
            Some(proxy) => format!("{tier}, through the proxy {proxy}"),
            None => format!("{tier}, direct"),
        }
    }

    /// Only the policies that are not the default, in a few words, as the tray's status line shows
    /// them: `no priority tier`, `via proxy.example:3128`. Empty when every one is at its default.
    pub fn departures(&self) -> Vec<String> {
        let tier = match (self.allow_priority, self.allow_ultrafast) {
            (false, _) => Some("no priority tier".to_owned()),
            (true, false) => Some("no ultrafast".to_owned()),
            (true, true) => None,
        };
        let via = self.proxy.as_deref().map(|p| format!("via {}", p.split_once("://").map_or(p, |(_, rest)| rest)));
        tier.into_iter().chain(via).collect()
    }
}

/// A change to a pool's policies (see `change`): each field given replaces the policy, `null` removes
/// the proxy or a budget, fields left out stay. Flattened into a change to a pool
/// (`control::pools::PoolChanges`), which the API takes (`PATCH /pools/{name}`) and the CLI builds from
/// its flags.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(default, deny_unknown_fields)]
#[ts(optional_fields)]
pub struct PoolPoliciesChange {
    /// Whether its requests may ask for a tier above the standard one from now on.
    #[serde(deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    pub allow_priority: Option<bool>,
    /// Whether its requests may ask for `ultrafast` from now on.
    #[serde(deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    pub allow_ultrafast: Option<bool>,
    /// A new proxy (a user and password in it go to the keychain), or none: direct.
    #[serde(deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    pub proxy: Option<Option<String>>,
    /// A change to its budget in money.
    #[serde(flatten)]
    pub money: MoneyBudgetChange,
}

impl Fields for PoolPoliciesChange {
    const NAME: &'static str = "PoolPoliciesChange";
    const FIELDS: &'static [&'static str] = PoolPolicies::FIELDS;
}

impl PoolPoliciesChange {
    /// Applies the change to `policies` (the values' checks are `PoolPolicies::validate`'s).
    pub fn apply(&self, policies: &mut PoolPolicies) {
        let Self { allow_priority, allow_ultrafast, proxy, money } = self.clone();
        policies.allow_priority = allow_priority.unwrap_or(policies.allow_priority);
        policies.allow_ultrafast = allow_ultrafast.unwrap_or(policies.allow_ultrafast);
        policies.proxy = proxy.unwrap_or(policies.proxy.take());
        money.apply(&mut policies.money);
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl Pools {
    /// The tier a request of pool `name` asking for `asked` is sent in, when not as asked
    /// ([`PoolPolicies::sent_tier`]; `all` and pools that do not exist: as asked).
    pub fn sent_tier(&self, name: &str, asked: &str) -> Option<&'static str> {
        self.def(name).and_then(|p| p.policies.sent_tier(asked))
    }

    /// The policies of pool `name` (the defaults for `all` and pools that do not exist).
    pub fn policies(&self, name: &str) -> PoolPolicies {
        self.def(name).map(|p| p.policies.clone()).unwrap_or_default()
    }
}

/// Whether a request's `service_tier` bills above the standard tier, so a pool that does not allow it
/// sends it as `default` instead: `priority` and `fast` (the same tier, Codex's Fast mode) and
/// `ultrafast`, in any case. `auto`, `default`, `flex` and tiers the price table does not know
/// (`scale`) are left as they are.
pub fn above_standard(service_tier: &str) -> bool {
    use crate::spend::ServiceTier;
    matches!(ServiceTier::from_response(Some(service_tier)), ServiceTier::Priority | ServiceTier::Ultrafast)
}

/// The tier a request is sent with when its pool does not allow a tier above the standard one.
pub const STANDARD_TIER: &str = "default";
/// The tier an ultrafast request is sent with when its pool allows priority but not ultrafast.
pub const PRIORITY_TIER: &str = "priority";

/// `body` (a JSON object: a request or a `response.create` frame) with its top-level `service_tier`
/// set to `tier`, the other fields as they were, in their order. `None` when it cannot be read as a
/// JSON object (it was read once already, so only on a body changed since).
pub fn with_tier(body: &[u8], tier: &str) -> Option<Vec<u8>> {
    let mut object: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(body).ok()?;
    object.insert("service_tier".to_owned(), serde_json::Value::from(tier));
    serde_json::to_vec(&object).ok()
}
