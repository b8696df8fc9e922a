//! Configuration of a simulated OpenAI deployment: organizations, their keys and the limits.

use std::time::Duration;

/// Everything a [`crate::Sim`] needs to start.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The organizations, each with its keys. Secrets must be unique across all organizations.
    pub orgs: Vec<OrgSpec>,
    /// Per-key rate limits (every key gets the same limits).
    pub limits: Limits,
    /// Compress non-streaming JSON bodies with gzip when the client accepts it.
    pub gzip_json: bool,
    /// How long a prompt-cache entry lives after its last use.
    pub cache_ttl: Duration,
    /// How long one WebSocket connection may stay open before the server ends it.
    pub ws_connection_limit: Duration,
    /// A ChatGPT plan served by the ChatGPT Codex backend (`/backend-api/codex`), if any.
    pub plan: Option<PlanSpec>,
    /// What a Responses request replaying reasoning another organization sealed gets.
    pub foreign_reasoning: ForeignReasoning,
}

/// What OpenAI does with replayed reasoning that another organization sealed. Both exist: older
/// models answer 400, newer ones drop the items and say so; a simulator runs in one of the two.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ForeignReasoning {
    /// 400 `invalid_encrypted_content`, naming the item (the default).
    #[default]
    Reject,
    /// The items are removed from the input before the model sees it (no tokens, no cache hit from
    /// where they stood), and the answer is a 200 whose response lists each in
    /// `input_transformations` (`{"type":"reasoning","id":<its id>,"action":"removed",
    /// "reason":"organization_mismatch"}`), on the JSON response and on the terminal event's
    /// `response`. Content no organization can open, and other items (compaction), still get the 400.
    Drop,
}

/// One ChatGPT plan (one login): its account, its usage windows and how long its tokens live.
#[derive(Debug, Clone)]
pub struct PlanSpec {
    /// The ChatGPT account id, e.g. `acct-plan`.
    pub account_id: String,
    /// The plan type its tokens' claims name (`plus`, `pro`…).
    pub plan_type: String,
    /// Requests the 5-hour window allows.
    pub primary_requests: u64,
    /// Requests the weekly window allows.
    pub secondary_requests: u64,
    /// How long an access token lives.
    pub token_lifetime: Duration,
    /// The models the plan serves (`None`: every model of the simulator).
    pub models: Option<Vec<String>>,
}

impl PlanSpec {
    /// A `plus` plan of `account_id`, unlimited in practice, with tokens that live an hour.
    pub fn new(account_id: &str) -> Self {
        PlanSpec {
            account_id: account_id.to_owned(),
            plan_type: "plus".to_owned(),
            primary_requests: 1_000_000,
            secondary_requests: 1_000_000,
            token_lifetime: Duration::from_secs(3600),
            models: None,
        }
    }

    /// The only models the plan serves (each must be one of [`crate::MODELS`]).
    pub fn models(mut self, models: &[&str]) -> Self {
        self.models = Some(models.iter().map(|m| (*m).to_owned()).collect());
        self
    }

    /// The requests its 5-hour and weekly windows allow.
    pub fn windows(mut self, primary: u64, secondary: u64) -> Self {
        self.primary_requests = primary;
        self.secondary_requests = secondary;
        self
    }

    /// How long its access tokens live.
    pub fn token_lifetime(mut self, lifetime: Duration) -> Self {
        self.token_lifetime = lifetime;
        self
    }

    /// The organization the plan's requests are served in (none of the API's can read its items).
    pub fn org_id(&self) -> String {
        format!("chatgpt-{}", self.account_id)
    }
}

/// One organization and the keys that belong to it.
#[derive(Debug, Clone)]
pub struct OrgSpec {
    /// Organization id as reported in `openai-organization`, e.g. `org-a`.
    pub id: String,
    /// The keys of this organization.
    pub keys: Vec<KeySpec>,
    /// The models its keys may use (`None`: every model of the simulator), as OpenAI gives an
    /// organization access to some models and not others: `GET /v1/models` lists only these, and
    /// any other is `model_not_found` to its keys.
    pub models: Option<Vec<String>>,
}

/// One API key.
#[derive(Debug, Clone)]
pub struct KeySpec {
    /// The secret the client presents, e.g. `sk-a1`.
    pub secret: String,
    /// Which header carries the secret.
    pub auth: KeyAuth,
}

/// How a key is presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum KeyAuth {
    /// `Authorization: Bearer <secret>`.
    Bearer,
    /// `api-key: <secret>` (Azure style).
    AzureApiKey,
}

/// Per-key budget for one window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Requests allowed per window.
    pub requests: u64,
    /// Estimated input tokens allowed per window.
    pub tokens: u64,
    /// Window length.
    pub window: Duration,
}

impl Default for Limits {
    /// Effectively unlimited, with a one-minute window.
    fn default() -> Self {
        Limits { requests: 1_000_000_000, tokens: 1_000_000_000_000, window: Duration::from_secs(60) }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            orgs: Vec::new(),
            limits: Limits::default(),
            gzip_json: false,
            cache_ttl: Duration::from_secs(300),
            ws_connection_limit: Duration::from_secs(60 * 60),
            plan: None,
            foreign_reasoning: ForeignReasoning::Reject,
        }
    }
}

impl SimConfig {
    /// No organizations, unlimited rate limits, no gzip, 5 min cache TTL, 60 min WebSocket limit.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an organization whose keys authenticate with `Authorization: Bearer`.
    pub fn org(self, id: &str, keys: &[&str]) -> Self {
        self.with_org(id, keys, KeyAuth::Bearer)
    }

    /// Adds an organization whose keys authenticate with the `api-key` header.
    pub fn azure_org(self, id: &str, keys: &[&str]) -> Self {
        self.with_org(id, keys, KeyAuth::AzureApiKey)
    }

    /// Limits the organization `id` (added, without keys, when it is not there yet) to `models` (each
    /// one of [`crate::MODELS`]).
    pub fn org_models(mut self, id: &str, models: &[&str]) -> Self {
        if !self.orgs.iter().any(|o| o.id == id) {
            self = self.with_org(id, &[], KeyAuth::Bearer);
        }
        let models = Some(models.iter().map(|m| (*m).to_owned()).collect());
        self.orgs.iter_mut().filter(|o| o.id == id).for_each(|o| o.models.clone_from(&models));
        self
    }

    /// Replaces the per-key limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Enables or disables gzip for non-streaming JSON bodies.
    pub fn gzip_json(mut self, on: bool) -> Self {
        self.gzip_json = on;
        self
    }

    /// Sets the prompt-cache entry lifetime.
    pub fn cache_ttl(mut self, ttl: Duration) -> Self {
        self.cache_ttl = ttl;
        self
    }

    /// Adds a ChatGPT plan behind the ChatGPT Codex backend.
    pub fn chatgpt_plan(mut self, plan: PlanSpec) -> Self {
        self.plan = Some(plan);
        self
    }

    /// Sets what a replay of another organization's reasoning gets (`ForeignReasoning`).
    pub fn foreign_reasoning(mut self, mode: ForeignReasoning) -> Self {
        self.foreign_reasoning = mode;
        self
    }

    /// Sets the maximum lifetime of one WebSocket connection.
    pub fn ws_connection_limit(mut self, limit: Duration) -> Self {
        self.ws_connection_limit = limit;
        self
    }

    fn with_org(mut self, id: &str, keys: &[&str], auth: KeyAuth) -> Self {
        let keys = keys.iter().map(|secret| KeySpec { secret: (*secret).to_owned(), auth });
        if let Some(org) = self.orgs.iter_mut().find(|o| o.id == id) {
            org.keys.extend(keys);
        } else {
            self.orgs.push(OrgSpec { id: id.to_owned(), keys: keys.collect(), models: None });
        }
        self
    }
}
