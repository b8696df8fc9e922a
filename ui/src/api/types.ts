// Generated from Keymux's Rust types by `api::types::typescript()`; do not edit.
// Regenerate: KEYMUX_WRITE_TYPES=1 cargo test -p keymux --lib typescript_types

export type KeyId = string;

export type ProviderId = "openai" | "azure" | "chatgpt";

export type KeySource = "keychain" | "environment" | "embedded";

export type Operation = "responses_create" | "responses_get" | "responses_delete" | "responses_cancel" | "responses_input_items" | "responses_compact" | "chat_completions" | "embeddings" | "models" | "other";

export type ClientKind = "codex_exec" | "codex_tui" | "codex_vscode" | "pi" | "other";

export type AffinitySource = "none" | "prompt_cache_key" | "prompt_prefix";

export type AffinityState = "no_signal" | "cache_miss" | "hit" | "target_unavailable" | "disabled" | "cache_unavailable" | "short_prompt";

export type Route = "refused" | "continuity" | "web_socket_bound" | "pinned" | "session_hint" | "finding_org" | "affinity" | "balanced";

export type SkipWhy = { "kind": "cooling", 
/**
 * Milliseconds left.
 */
remaining_ms: number, } | { "kind": "invalid" } | { "kind": "disabled" } | { "kind": "quota_exhausted", 
/**
 * Milliseconds left.
 */
remaining_ms: number, } | { "kind": "model_unavailable" } | { "kind": "near_exhaustion", 
/**
 * Milliseconds until the window refills.
 */
reset_ms: number, } | { "kind": "plan_used_up", 
/**
 * Milliseconds until the window resets.
 */
reset_ms: number, } | { "kind": "over_budget" } | { "kind": "unreachable", 
/**
 * Milliseconds until the next try.
 */
retry_ms: number, } | { "kind": "budget_reserved", 
/**
 * Which budget.
 */
period: Period, 
/**
 * Its amount.
 */
limit: number, 
/**
 * How much of it is spent, in thousandths.
 */
used_permille: number, } | { "kind": "budget_stopped", 
/**
 * Which budget.
 */
period: Period, 
/**
 * Its amount.
 */
limit: number, 
/**
 * Milliseconds until it resets.
 */
resets_ms: number, } | { "kind": "window_reserved", 
/**
 * What is left of the tighter window, thousandths of its limit.
 */
left_permille: number, 
/**
 * The share it keeps, percent.
 */
keep_pct: number, 
/**
 * Milliseconds until the window refills.
 */
reset_ms: number, };

export type Reason = { "rule": "most_headroom", 
/**
 * Its headroom, in thousandths of its tighter window.
 */
headroom_permille: number, 
/**
 * Its in-flight count.
 */
in_flight: number, 
/**
 * How many usable keys were compared.
 */
candidates: number, } | { "rule": "plan_first", 
/**
 * The plan's key.
 */
key: KeyId, } | { "rule": "plan_exhausted", 
/**
 * The plan's key.
 */
key: KeyId, 
/**
 * Milliseconds until its window resets.
 */
resets_ms: number, } | { "rule": "priority_tier", 
/**
 * That tier.
 */
tier: number, } | { "rule": "budget_overrun" } | { "rule": "fewest_recent_starts", 
/**
 * How many keys were tied on load.
 */
tied: number, } | { "rule": "continuity_binding", 
/**
 * The key.
 */
key: KeyId, } | { "rule": "unmarked_response_id" } | { "rule": "finding_org", 
/**
 * How many organizations may be tried.
 */
orgs: number, 
/**
 * The key that served this session last, when Keymux remembers one.
 */
known: KeyId | null, } | { "rule": "unreadable_everywhere", 
/**
 * How many organizations answered that they cannot read it.
 */
tried: number, } | { "rule": "web_socket_bound", 
/**
 * The key of that socket.
 */
key: KeyId, } | { "rule": "session_hint", 
/**
 * The key that served the session last.
 */
key: KeyId, 
/**
 * Usable keys of its organization.
 */
usable: number, } | { "rule": "soft_affinity", 
/**
 * That key.
 */
key: KeyId, } | { "rule": "soft_target_unavailable", 
/**
 * That key.
 */
key: KeyId, } | { "rule": "warm_organization" } | { "rule": "pinned_to_org", 
/**
 * The key that produced the content.
 */
key: KeyId, 
/**
 * Keys of that organization in the pool.
 */
org_keys: number, 
/**
 * Of those, usable now.
 */
usable: number, } | { "rule": "rescued", 
/**
 * The key named by the marker.
 */
key: KeyId, } | { "rule": "pool_fallback", 
/**
 * The token's pool.
 */
from: string, 
/**
 * The fallback pool that served.
 */
to: string, } | { "rule": "still_rescued", 
/**
 * How many organizations.
 */
orgs: number, } | { "rule": "tier_changed", 
/**
 * The token's pool.
 */
pool: string, 
/**
 * The tier the request asked for (at most 32 bytes).
 */
asked: string, 
/**
 * The tier it was sent with (`default`, or `priority` for an ultrafast request).
 */
sent: string, } | { "rule": "foreign_markers_stripped", 
/**
 * How many.
 */
count: number, } | { "rule": "affinity_off" } | { "rule": "skipped", 
/**
 * Which.
 */
key: KeyId, 
/**
 * Why.
 */
why: SkipWhy, };

export type Refusal = { "kind": "mixed_orgs", 
/**
 * One key per organization named.
 */
keys: Array<KeyId>, } | { "kind": "continuity_lost", 
/**
 * That key.
 */
key: KeyId, } | { "kind": "lost_org", 
/**
 * The key named by the marker.
 */
key: KeyId, } | { "kind": "no_keys" } | { "kind": "pool_mismatch", 
/**
 * The key that made the state.
 */
key: KeyId, 
/**
 * The token's pool.
 */
pool: string, 
/**
 * A pool that holds that key.
 */
owner: string, } | { "kind": "bare_response_id", 
/**
 * The token's pool.
 */
pool: string, 
/**
 * A pool outside it that shares an organization with it.
 */
shared_with: string, } | { "kind": "all_cooling", 
/**
 * Seconds until the first key frees.
 */
retry_after_secs: number, 
/**
 * Keys cooling.
 */
cooling: number, } | { "kind": "no_usable_key", 
/**
 * Keys that are invalid or disabled.
 */
unusable: number, } | { "kind": "budget_reached", 
/**
 * Seconds until the first budget resets (at least 1).
 */
retry_after_secs: number, 
/**
 * Keys past their budget.
 */
keys: number, } | { "kind": "budget_stopped", 
/**
 * That key.
 */
key: KeyId, 
/**
 * Which budget.
 */
period: Period, 
/**
 * Its amount.
 */
limit: number, 
/**
 * Seconds until it resets (at least 1).
 */
retry_after_secs: number, };

export type PinDecision = { 
/**
 * The key named by the marker.
 */
key: KeyId, 
/**
 * The organization tag the marker carries.
 */
org: string, 
/**
 * Whether the choice is that very key (otherwise another key of its organization).
 */
exact: boolean, };

export type Decision = { 
/**
 * The request's gateway-local number.
 */
seq: number, 
/**
 * The key to try first.
 */
choice: KeyId | null, 
/**
 * Keys to try next, in order, if the choice fails before any byte reached the client.
 */
fallbacks: Array<KeyId>, 
/**
 * The explanation, one line per rule applied (bounded by `MAX_KEYS + 3`: the tier change is one more).
 */
reasons: Array<Reason>, 
/**
 * Where the affinity signal came from.
 */
affinity_source: AffinitySource, 
/**
 * What became of it.
 */
affinity_state: AffinityState, 
/**
 * Whether a hard binding (previous response, WebSocket) was found and used.
 */
continuity_hit: boolean, 
/**
 * The encrypted-content pin, when the request carried one.
 */
pin: PinDecision | null, 
/**
 * Organizations whose items are dropped before the request goes upstream (rescue: no usable key of
 * theirs is left). Bounded by `markers::MAX_PINS`.
 */
rescued_orgs: Array<string>, 
/**
 * Set when no key can take the request.
 */
refusal: Refusal | null, 
/**
 * How the request was placed, so no other module restates the router's rules to find out.
 */
route: Route, 
/**
 * Reasoning the provider said it dropped from the request's input (`input_transformations`,
 * turn boundaries left out), set when the answer ended: the turn lost part of its session's
 * reasoning although it succeeded. Never set by the router.
 */
reasoning_dropped: ReasoningDropped | null, };

export type FailureKind = "rate_limited" | "quota_exhausted" | "invalid_key" | "model_unavailable" | "upstream_5xx" | "timeout" | "upstream_unreachable" | "upstream_cut" | "client_error" | "wrong_organization" | "client_cancelled";

export type Attempt = { 
/**
 * The key tried.
 */
key: KeyId, 
/**
 * The upstream status, if a response came back.
 */
status: number | null, 
/**
 * Why it failed over, if it did.
 */
failure: FailureKind | null, 
/**
 * Milliseconds until response headers (or failure).
 */
duration_ms: number, 
/**
 * What went wrong, when it did: the provider's error message (shortened, anything key-like
 * masked, at most `classify::MAX_MESSAGE_CHARS`) or Keymux's account of a connection failure.
 */
message: string | null, };

export type Wire = "http" | "web_socket";

export type ServiceTier = "standard" | "flex" | "priority" | "ultrafast" | "other";

export type Usage = { 
/**
 * Prompt tokens (`input_tokens`, or `prompt_tokens` on Chat Completions), cached and cache
 * writes included.
 */
input: number, 
/**
 * Of those, served from the provider's prompt cache (`cached_tokens`).
 */
cached: number, 
/**
 * Output tokens (`output_tokens`, or `completion_tokens`), reasoning tokens included.
 */
output: number, 
/**
 * The `service_tier` the answer says it was processed in (what the price is in; the Live view
 * shows it).
 */
tier: ServiceTier, };

export type Unpriced = "model" | "tier" | "cache_retention";

export type Routed = { 
/**
 * Wall-clock time of arrival, Unix milliseconds.
 */
at_unix_ms: number, 
/**
 * The operation.
 */
operation: Operation, 
/**
 * HTTP or WebSocket.
 */
transport: Wire, 
/**
 * The client that sent it.
 */
client: ClientKind, 
/**
 * The name of the local token it came with (empty for `KEYMUX_CLIENT_TOKEN`).
 */
token: string, 
/**
 * The pool that token is bound to (`all`: every key).
 */
pool: string, 
/**
 * A short keyed digest of its session (for Codex, its thread).
 */
session: string | null, 
/**
 * For a Codex subagent thread, the short keyed digest of the session it belongs to.
 */
parent_session: string | null, 
/**
 * Model named in the body (capped).
 */
model: string | null, 
/**
 * The decision.
 */
decision: Decision, };

export type RequestRecord = Routed & { 
/**
 * Whether the client asked for a stream.
 */
stream: boolean, 
/**
 * Attempts made, in order (at most `router::MAX_ATTEMPTS`).
 */
attempts: Array<Attempt>, 
/**
 * The key whose answer went back to the client.
 */
served_by: KeyId | null, 
/**
 * The status the client got.
 */
status: number, 
/**
 * Keymux's error label when Keymux answered with an error.
 */
error: string | null, 
/**
 * A notable error code the provider answered with (`invalid_encrypted_content`…).
 */
upstream_code: string | null, 
/**
 * Items dropped by rescue because no usable key could read them.
 */
rescued_items: number, 
/**
 * Milliseconds from arrival to the answer's headers (for a WebSocket turn, its first frame).
 */
ttfb_ms: number, 
/**
 * Milliseconds from arrival to the end of the answer.
 */
duration_ms: number, 
/**
 * The tokens the answer reported, when it reached a successful end.
 */
usage: Usage | null, 
/**
 * What the answer cost, in US dollars, from its usage, its model and the service tier it was
 * billed in (`None`: no usage was reported, or no price applies; then `unpriced` says why).
 */
cost_usd: number | null, 
/**
 * The answer reported usage, but the price table has no price for its model (or its service
 * tier): what it cost is unknown, never $0.
 */
unpriced: Unpriced | null, };

export type KeyChange = { "kind": "cooling_started", 
/**
 * When it frees.
 */
until_unix_ms: number, } | { "kind": "cooling_ended" } | { "kind": "plan_used_up", 
/**
 * When its window resets.
 */
until_unix_ms: number, } | { "kind": "plan_back" } | { "kind": "quota_exhausted", 
/**
 * When it is tried again.
 */
until_unix_ms: number, } | { "kind": "unreachable", 
/**
 * When it is tried again.
 */
retry_unix_ms: number, } | { "kind": "rejected" } | { "kind": "recovered" } | { "kind": "added" } | { "kind": "removed" } | { "kind": "enabled" } | { "kind": "disabled" } | { "kind": "updated" };

export type KeyEvent = { 
/**
 * The key.
 */
key: KeyId, 
/**
 * Its label (when the event happened).
 */
label: string, 
/**
 * What changed.
 */
change: KeyChange, };

export type BudgetOf = { "kind": "key", 
/**
 * The key.
 */
key: KeyId, } | { "kind": "pool", 
/**
 * The pool's name.
 */
pool: string, };

export type GatewayEvent = { "kind": "paused" } | { "kind": "resumed" } | { "kind": "store_failed", 
/**
 * What went wrong, and what to do.
 */
message: string, } | { "kind": "store_recovered" } | { "kind": "token_created", 
/**
 * Its name.
 */
name: string, } | { "kind": "token_revoked", 
/**
 * Its name.
 */
name: string, } | { "kind": "config_applied", 
/**
 * Each change (bounded by the keys and tokens there are).
 */
changes: Array<string>, } | { "kind": "config_refused", 
/**
 * The file, line and column, and what is wrong.
 */
message: string, } | { "kind": "pools_changed", 
/**
 * The pool.
 */
name: string, } | { "kind": "budget", 
/**
 * Whose budget.
 */
of: BudgetOf, 
/**
 * The key's label, or the pool's name.
 */
label: string, 
/**
 * Where it stands now.
 */
state: BudgetState, } | { "kind": "client_checked" } & ClientChecked;

export type Event = { "type": "routed", "data": Routed } | { "type": "finished", "data": RequestRecord } | { "type": "key", "data": KeyEvent } | { "type": "gateway", "data": GatewayEvent } | { "type": "lagged", "data": { 
/**
 * Events it will never see.
 */
missed: number, } };

export type Envelope = { 
/**
 * Increasing from 1; what `Last-Event-ID` and `?after=` name.
 */
id: number, 
/**
 * When it happened, Unix milliseconds.
 */
at_unix_ms: number, } & ({ "type": "routed", "data": Routed } | { "type": "finished", "data": RequestRecord } | { "type": "key", "data": KeyEvent } | { "type": "gateway", "data": GatewayEvent } | { "type": "lagged", "data": { 
/**
 * Events it will never see.
 */
missed: number, } });

export type Binding = "encrypted_content" | "continuity" | "web_socket" | "none";

export type SessionInfo = { 
/**
 * The short keyed digest that names it.
 */
session: string, 
/**
 * For a Codex subagent thread, the session it belongs to (its root thread's digest), under which
 * the dashboard shows it.
 */
parent: string | null, 
/**
 * The client that drives it.
 */
client: ClientKind, 
/**
 * The key that served its last turn.
 */
key: KeyId | null, 
/**
 * That key's organization, when known.
 */
org: string | null, 
/**
 * What held its last turn.
 */
binding: Binding, 
/**
 * Turns seen (requests and WebSocket turns).
 */
turns: number, 
/**
 * First and last turn, Unix milliseconds.
 */
first_seen_unix_ms: number, 
/**
 * Last turn, Unix milliseconds.
 */
last_seen_unix_ms: number, 
/**
 * Prompt tokens of its successful turns.
 */
input_tokens: number, 
/**
 * Of those, served from the provider's prompt cache.
 */
cached_tokens: number, 
/**
 * Output tokens.
 */
output_tokens: number, 
/**
 * What its priced turns cost, in US dollars.
 */
cost_usd: number, 
/**
 * Turns that reported usage but have no price (their model is not in the price table): not
 * counted in `cost_usd`, and not $0.
 */
unpriced_requests: number, 
/**
 * Items dropped over its life because their organization had no usable key left.
 */
rescued_items: number, 
/**
 * Turns refused (lost organization under `fail`, mixed organizations, continuity lost).
 */
refused: number, 
/**
 * The last refusal's kind, when there was one.
 */
last_refusal: string | null, 
/**
 * Turns that failed otherwise (errors, cut streams).
 */
failed: number, };

export type StoreStatus = { 
/**
 * Whether counts reach disk.
 */
persisted: boolean, 
/**
 * The store's directory, if any.
 */
path: string | null, 
/**
 * The last problem, with what to do.
 */
error: string | null, 
/**
 * Something the user should know that is not a failure (a corrupt store moved aside).
 */
notice: string | null, 
/**
 * Combinations dropped because the store kept failing.
 */
dropped: number, 
/**
 * Rows waiting to be written.
 */
pending: number, };

export type KeychainInfo = { 
/**
 * `OS keychain` or `memory`.
 */
kind: string, 
/**
 * Whether it answered the last time it was asked.
 */
ok: boolean, };

export type LocalPeriods = { 
/**
 * The time zone they follow: its IANA name (`Europe/Berlin`), else its offset now (`UTC+05:30`).
 */
zone: string, 
/**
 * When today began: local midnight, Unix milliseconds.
 */
day_start_unix_ms: number, 
/**
 * When this month began: local midnight of its first day, Unix milliseconds.
 */
month_start_unix_ms: number, 
/**
 * When tomorrow begins (today's budgets reset): the next local midnight, Unix milliseconds.
 */
day_end_unix_ms: number, 
/**
 * When next month begins (this month's budgets reset), Unix milliseconds.
 */
month_end_unix_ms: number, };

export type GatewayInfo = { 
/**
 * Keymux's version.
 */
version: string, 
/**
 * The base URL clients use (`http://127.0.0.1:8787/v1`).
 */
base_url: string, 
/**
 * Routing is paused: new requests get 503.
 */
paused: boolean, 
/**
 * `lost_org = "rescue"` (the default): a session whose organization (or ChatGPT plan) has no usable
 * key left goes on with another key, its unreadable items dropped; `false`: it is refused.
 */
rescues_lost_sessions: boolean, 
/**
 * How many keys the pool holds, in any health.
 */
keys_total: number, 
/**
 * Of those, usable now.
 */
keys_healthy: number, 
/**
 * When the first cooling key frees, Unix milliseconds, if any key is cooling.
 */
next_reset_unix_ms: number | null, 
/**
 * Requests finished in the last minute.
 */
requests_last_minute: number, 
/**
 * Where the metrics live, and any problem.
 */
store: StoreStatus, 
/**
 * Which secret store holds the keys and tokens, and whether it answers.
 */
keychain: KeychainInfo, 
/**
 * When the gateway started, Unix milliseconds.
 */
started_unix_ms: number, 
/**
 * The gateway's clock now, Unix milliseconds (countdowns are computed against it).
 */
now_unix_ms: number, 
/**
 * The newest event id: subscribe to `/keymux/api/events?after=` it to miss nothing.
 */
last_event_id: number, 
/**
 * The local day and month that today's and this month's spend follow.
 */
periods: LocalPeriods, };

export type HealthState = "ready" | "cooling" | "quota_exhausted" | "rejected" | "disabled" | "unreachable";

export type WindowInfo = { 
/**
 * How many requests (or tokens) the provider allows in one window.
 */
limit: number, 
/**
 * How many of those are left now: the provider's last figure, less what was sent since.
 */
remaining: number, 
/**
 * When it refills fully, Unix milliseconds.
 */
resets_at_unix_ms: number, 
/**
 * How long the window is, milliseconds (for a pace figure: used share against elapsed share).
 */
span_ms: number, 
/**
 * Used share divided by elapsed share: above 1, the window runs out before it refills.
 */
pace: number | null, };

export type KeyStatus = { 
/**
 * The id the config, the CLI and the control API name the key by (`k_work`, `env-b1`); never
 * derived from the secret.
 */
id: KeyId, 
/**
 * The name the user gave the key, shown on its card.
 */
label: string, 
/**
 * A short digest of the secret under the install secret (as in `keymux keys list` and the
 * metrics): tells keys apart, reveals nothing.
 */
fingerprint: string, 
/**
 * The provider the key talks to (OpenAI, Azure OpenAI, a ChatGPT plan).
 */
provider: ProviderId, 
/**
 * Where the key came from.
 */
source: KeySource, 
/**
 * Its organization: configured, else learned.
 */
org: string | null, 
/**
 * Whether the organization was learned from the provider (not configured).
 */
org_learned: boolean, 
/**
 * Whether the router may use it now, and if not, why (cooling, out of quota, rejected, disabled).
 */
health: HealthState, 
/**
 * Requests sent on this key whose answer has not finished yet.
 */
in_flight: number, 
/**
 * Tokens used today (UTC); above the budget is an overrun.
 */
tokens_today: number, 
/**
 * Whether less than that is left now: it takes no new sessions until the window refills.
 */
window_reserved: boolean, 
/**
 * Share of the tighter rate-limit window left, 0 to 1.
 */
headroom: number, 
/**
 * Answers since start that the key itself served: any 2xx, and client errors (the key was fine).
 */
served: number, 
/**
 * Answers since start that held against the key: rate limited, out of quota, rejected, or a
 * provider failure (5xx, connection, timeout).
 */
failed: number, 
/**
 * The HTTP status of the provider's last answer on this key (`None`: it has not answered yet).
 */
last_status: number | null, 
/**
 * Upstream `invalid_encrypted_content` answers to requests Keymux had pinned correctly (a provider
 * incident, never the key's fault).
 */
invalid_encrypted_content: number, 
/**
 * Answers served on this key that said the provider dropped reasoning from the input
 * (`input_transformations`, turn boundaries left out): turns that lost part of their session's
 * reasoning although they succeeded.
 */
reasoning_dropped: number, 
/**
 * Prompt tokens of successful answers since start.
 */
input_tokens: number, 
/**
 * Of those, served from the provider's prompt cache (the provider's own cache result).
 */
cached_tokens: number, 
/**
 * Output tokens (reasoning included) the provider counted on this key since start.
 */
output_tokens: number, 
/**
 * `cached_tokens / input_tokens`, 0 to 1 (0 before any prompt).
 */
cached_ratio: number, 
/**
 * Models the provider said this key cannot use (it is skipped for them).
 */
unavailable_models: Array<string>, 
/**
 * Its base URL, when it has its own (Azure, a proxy); otherwise the provider's default.
 */
base_url: string | null, 
/**
 * A ChatGPT plan's account and plan type, from its tokens' claims (never a token).
 */
plan: PlanInfo | null, 
/**
 * A ChatGPT plan's usage windows (5-hour and weekly), as its latest answer reported them.
 */
plan_windows: PlanWindows | null, 
/**
 * Priority tier: unpinned traffic goes to the lowest tier with a usable key (work keys 0, personal
 * keys 1, say).
 */
priority: number, 
/**
 * Soft daily token budget (input + output, UTC day). Over it, unpinned traffic avoids the key;
 * pinned requests still go (only this key's organization can read them) and the overrun is shown.
 */
daily_token_budget: number | null, 
/**
 * If not empty, the only models this key is used for.
 */
models: Array<string>, 
/**
 * Models this key is never used for.
 */
exclude_models: Array<string>, 
/**
 * Percent of the key's request and token windows kept for the sessions already on it (1 to 90):
 * while less than that is left, the key takes no new sessions, until the window refills.
 */
reserve_window_pct: number | null, 
/**
 * US dollars per local day.
 */
daily_budget_usd: number | null, 
/**
 * US dollars per local month.
 */
monthly_budget_usd: number | null, 
/**
 * Percent of a budget (1 to 100) past which no new sessions start (absent: 100).
 */
reserve_at: number | null, 
/**
 * At 100 %: `reserve` (sessions already on it go on) or `stop` (refuse everything).
 */
on_limit: OnLimit, };

export type PeriodSpend = { 
/**
 * Spent today, in US dollars.
 */
spend_today_usd: number, 
/**
 * Spent this month, in US dollars.
 */
spend_month_usd: number, 
/**
 * Requests today that had no price (not counted in the spend, and not $0).
 */
unpriced_requests_today: number, 
/**
 * Requests this month that had no price.
 */
unpriced_requests_month: number, };

export type KeyInfo = KeyStatus & { 
/**
 * When a cooldown or quota rest ends, Unix milliseconds.
 */
until_unix_ms: number | null, 
/**
 * A ChatGPT plan used up (resting after its 429, or a window its answer reported at 100 %): until
 * when new sessions go to the API keys instead, Unix milliseconds. `None`: an API key, or an open
 * plan.
 */
plan_used_up_until_unix_ms: number | null, 
/**
 * The provider's window for requests (`x-ratelimit-*-requests`), once an answer reported it.
 */
requests_window: WindowInfo | null, 
/**
 * The provider's window for tokens (`x-ratelimit-*-tokens`), once an answer reported it.
 */
tokens_window: WindowInfo | null, 
/**
 * The user's pools that hold it (every key is also in `all`).
 */
pools: Array<string>, 
/**
 * The proxy it goes out through (its pool's, `http://host:port`); `None`: direct. When the proxy
 * cannot be reached its health is `unreachable` and its last attempt names the proxy.
 */
proxy: string | null, 
/**
 * Where it stands against its budgets in money now.
 */
budget: BudgetState, 
/**
 * When a budget in money runs out at the last hour's pace, Unix milliseconds, if before its period
 * ends (now: spent already).
 */
budget_runs_out_unix_ms: number | null, 
/**
 * When a rate-limit window runs out at its pace since it began, Unix milliseconds, if before it
 * refills (now: used up).
 */
window_runs_out_unix_ms: number | null, 
/**
 * Spent today, in US dollars.
 */
spend_today_usd: number, 
/**
 * Spent this month, in US dollars.
 */
spend_month_usd: number, 
/**
 * Requests today that had no price (not counted in the spend, and not $0).
 */
unpriced_requests_today: number, 
/**
 * Requests this month that had no price.
 */
unpriced_requests_month: number, };

export type PoolInfo = { 
/**
 * Its name.
 */
name: string, 
/**
 * The built-in `all` (every key; it cannot be changed).
 */
builtin: boolean, 
/**
 * Defined by `KEYMUX_POOL_*` (change the environment to change it).
 */
from_env: boolean, 
/**
 * Its keys as the user named them (labels or ids).
 */
keys: Array<string>, 
/**
 * The keys they resolve to, in the pool's order.
 */
key_ids: Array<KeyId>, 
/**
 * Its fallback pools, in order.
 */
fallback: Array<string>, 
/**
 * The proxy's user and password are kept in the keychain (never shown).
 */
proxy_login: boolean, 
/**
 * The tokens bound to it, by name.
 */
tokens: Array<string>, 
/**
 * Its keys that can take a request now.
 */
usable: number, 
/**
 * Mean rate-limit headroom of its usable keys, 0 to 1 (0 when none is usable).
 */
headroom: number, 
/**
 * Where it stands against its budget now.
 */
budget: BudgetState, 
/**
 * When its budget runs out at the last hour's pace of its keys together, Unix milliseconds, if
 * before its period ends (now: spent already).
 */
budget_runs_out_unix_ms: number | null, 
/**
 * When the last of its usable keys runs out of its rate-limit window at its pace, Unix
 * milliseconds, if all do before they refill (`None`: some key keeps room).
 */
window_runs_out_unix_ms: number | null, 
/**
 * Whether its tokens' requests may ask for a service tier that bills above the standard one
 * (`service_tier` `priority` or `fast`, one tier, Codex's Fast mode, and `ultrafast`: see
 * [`above_standard`]). `false`: such a request is sent with `service_tier: "default"`, and its
 * decision says so. Default `true`.
 */
allow_priority: boolean, 
/**
 * Whether its requests may ask for `ultrafast` (3x to 6x the standard price), when
 * `allow_priority` lets them above the standard tier at all. `false`: an ultrafast request is
 * sent in the priority tier (Fast, 2x) instead, and its decision says so. Default `true`.
 */
allow_ultrafast: boolean, 
/**
 * The proxy every upstream request of its keys goes through (`None`: direct): `http://host:port`,
 * `https://…`, `socks5://…` or `socks5h://…`, probes and WebSockets included; never sent direct
 * when it cannot be reached. Never with a user or password (see [`check_proxy`]): those are kept
 * in the keychain, and the pool's `proxy_login` says so.
 */
proxy: string | null, 
/**
 * US dollars per local day.
 */
daily_budget_usd: number | null, 
/**
 * US dollars per local month.
 */
monthly_budget_usd: number | null, 
/**
 * Percent of a budget (1 to 100) past which no new sessions start (absent: 100).
 */
reserve_at: number | null, 
/**
 * At 100 %: `reserve` (sessions already on it go on) or `stop` (refuse everything).
 */
on_limit: OnLimit, 
/**
 * Spent today, in US dollars.
 */
spend_today_usd: number, 
/**
 * Spent this month, in US dollars.
 */
spend_month_usd: number, 
/**
 * Requests today that had no price (not counted in the spend, and not $0).
 */
unpriced_requests_today: number, 
/**
 * Requests this month that had no price.
 */
unpriced_requests_month: number, };

export type PoolConfig = { 
/**
 * The pool's name (letters, digits, `-` and `_`; `all` is built in).
 */
name: string, 
/**
 * Its keys, by label or id. A key may belong to several pools. Empty is allowed: its requests get
 * a clear 503.
 */
keys: Array<string>, 
/**
 * Pools to use, in order, only when none of this pool's keys can serve. Empty: never.
 */
fallback: Array<string>, 
/**
 * The proxy's user and password are kept in the keychain (account `proxy:<pool>`), set with the
 * proxy URL through the CLI, the API or the dashboard (`http://user:password@host:port`).
 */
proxy_login?: boolean, 
/**
 * Whether its tokens' requests may ask for a service tier that bills above the standard one
 * (`service_tier` `priority` or `fast`, one tier, Codex's Fast mode, and `ultrafast`: see
 * [`above_standard`]). `false`: such a request is sent with `service_tier: "default"`, and its
 * decision says so. Default `true`.
 */
allow_priority: boolean, 
/**
 * Whether its requests may ask for `ultrafast` (3x to 6x the standard price), when
 * `allow_priority` lets them above the standard tier at all. `false`: an ultrafast request is
 * sent in the priority tier (Fast, 2x) instead, and its decision says so. Default `true`.
 */
allow_ultrafast: boolean, 
/**
 * The proxy every upstream request of its keys goes through (`None`: direct): `http://host:port`,
 * `https://…`, `socks5://…` or `socks5h://…`, probes and WebSockets included; never sent direct
 * when it cannot be reached. Never with a user or password (see [`check_proxy`]): those are kept
 * in the keychain, and the pool's `proxy_login` says so.
 */
proxy: string | null, 
/**
 * US dollars per local day.
 */
daily_budget_usd: number | null, 
/**
 * US dollars per local month.
 */
monthly_budget_usd: number | null, 
/**
 * Percent of a budget (1 to 100) past which no new sessions start (absent: 100).
 */
reserve_at: number | null, 
/**
 * At 100 %: `reserve` (sessions already on it go on) or `stop` (refuse everything).
 */
on_limit: OnLimit, };

export type StatusBody = { 
/**
 * The gateway as a whole: version, address, pause, key counts, store and keychain state.
 */
gateway: GatewayInfo, 
/**
 * Every pooled key, whatever its health, in the pool's order.
 */
keys: Array<KeyInfo>, 
/**
 * The pools: the built-in `all` first, then the user's, in their order.
 */
pools: Array<PoolInfo>, };

export type TokenInfo = { 
/**
 * The id the config and the keychain entry name the token by (`t_…`).
 */
id: string, 
/**
 * The name the user gave it (`codex`, `pi`), shown in the request log as the client.
 */
name: string, 
/**
 * When it was created, Unix seconds (0 when not known).
 */
created_unix: number, 
/**
 * The pool its requests may reach (`all`: every key).
 */
pool: string, 
/**
 * Issued to a client's login (Codex's `gateway_oauth`) rather than made by the user.
 */
login: boolean, };

export type TokenChanges = { 
/**
 * The pool to bind it to.
 */
pool: string, };

export type NewSecret = { 
/**
 * The API key.
 */
secret: string, };

export type NewToken = { 
/**
 * Its name (`codex`, `acme-repo`).
 */
name: string, 
/**
 * Its pool (default `all`).
 */
pool: string | null, };

export type CreatedToken = { 
/**
 * The new token's id, name and creation time, as the token list will show it.
 */
token: TokenInfo, 
/**
 * The value to give the client (Codex `env_key`, pi `apiKey`).
 */
secret: string, };

export type DecisionsBody = { 
/**
 * One record per finished request: its decision, attempts, status, usage and timing.
 */
data: Array<RequestRecord>, };

export type SessionsBody = { 
/**
 * The client sessions seen recently (bounded), each with the key and organization it is bound to.
 */
sessions: Array<SessionInfo>, };

export type UsagePoint = { 
/**
 * Start of the bucket, Unix milliseconds.
 */
start_unix_ms: number, 
/**
 * A key's fingerprint, `none` for requests no key served, or `total`.
 */
key: string, 
/**
 * Requests that finished in the bucket, whatever their status.
 */
requests: number, 
/**
 * Of those, by status class (`2xx`, `4xx`, `429`, `5xx`, `499`).
 */
by_status: { [key in string]?: number }, 
/**
 * By `affinity_source/affinity_state`.
 */
by_affinity: { [key in string]?: number }, 
/**
 * Attempts that failed, by category (`rate_limited`, `upstream_5xx`…); a retried request counts each.
 */
failures: { [key in string]?: number }, 
/**
 * Requests sent to the organization their encrypted reasoning items belong to.
 */
pinned: number, 
/**
 * Requests kept on the key that served the earlier turns of their conversation.
 */
continuity: number, 
/**
 * Requests sent on after dropping items no key could read (their organization was gone).
 */
rescued: number, 
/**
 * Requests whose answer said the provider dropped reasoning from their input (turn boundaries
 * left out): turns that lost part of their session's reasoning although they succeeded.
 */
reasoning_dropped: number, 
/**
 * Of those, dropped for `organization_mismatch`: the turn reached an organization where its
 * session's reasoning does not live (Keymux then learns the session's organization again).
 */
reasoning_misplaced: number, 
/**
 * Prompt (input) tokens the provider counted.
 */
input_tokens: number, 
/**
 * Of those, from the provider's prompt cache.
 */
cached_tokens: number, 
/**
 * Output tokens (reasoning included) the provider counted.
 */
output_tokens: number, 
/**
 * `cached_tokens / input_tokens`, 0 to 1 (0 before any prompt).
 */
cached_ratio: number, 
/**
 * What the priced requests cost, in US dollars.
 */
spend_usd: number, 
/**
 * Requests that reported usage but had no price (their model or service tier is not in the price
 * table): not counted in `spend_usd`, and not $0.
 */
unpriced_requests: number, 
/**
 * Median time to the first byte, milliseconds (the bucket's upper bound).
 */
latency_p50_ms: number | null, 
/**
 * Time to the first byte that 90% of requests stayed under, milliseconds (the bucket's upper bound).
 */
latency_p90_ms: number | null, 
/**
 * Time to the first byte that 99% of requests stayed under, milliseconds (the bucket's upper bound).
 */
latency_p99_ms: number | null, };

export type UsageBody = { 
/**
 * The bucket length, milliseconds (an hour or a day).
 */
bucket_ms: number, 
/**
 * The points, oldest first.
 */
points: Array<UsagePoint>, };

export type SpendBy = "key" | "pool" | "token" | "model";

export type SpendRow = { 
/**
 * The key's label (a key removed since: `removed key <fingerprint>`; no key: `(no key)`), the
 * pool's, the token's or the model's name.
 */
name: string, 
/**
 * Requests finished, whatever their status.
 */
requests: number, 
/**
 * Prompt (input) tokens.
 */
input_tokens: number, 
/**
 * Of those, from the provider's prompt cache.
 */
cached_tokens: number, 
/**
 * Output tokens (reasoning included).
 */
output_tokens: number, 
/**
 * What the priced requests cost, in US dollars.
 */
spend_usd: number, 
/**
 * Requests that reported usage but had no price: not in `spend_usd`, and not $0.
 */
unpriced_requests: number, };

export type SpendReport = { 
/**
 * How the rows are grouped.
 */
by: SpendBy, 
/**
 * The time zone the days follow.
 */
zone: string, 
/**
 * The start of the period: local midnight `days - 1` days before today, Unix milliseconds.
 */
since_unix_ms: number, 
/**
 * Per token and per model come from the requests the gateway still remembers (its last
 * `events::RECENT_CAPACITY`, since it started), not from the stored metrics, which keep keys only.
 */
recent_only: boolean, 
/**
 * Every request from this moment on is counted (later than `since_unix_ms` when `recent_only`
 * and the gateway started, or forgot requests, after it), Unix milliseconds.
 */
complete_since_unix_ms: number, 
/**
 * One row per key, pool, token or model, the most spent first.
 */
rows: Array<SpendRow>, 
/**
 * Every request of the period (for pools: of every key, each counted once).
 */
total: SpendRow, };

export type LoginLink = { 
/**
 * Open it in a browser (it works once, for ten minutes).
 */
url: string, };

export type SessionToken = { 
/**
 * The session's secret: sent in `x-keymux-session` on every call; never stored outside the tab.
 */
token: string, };

export type KeyTestBody = { 
/**
 * The provider accepted the key.
 */
ok: boolean, 
/**
 * The HTTP status of the provider's answer (`None`: no answer, e.g. it could not be reached).
 */
status: number | null, 
/**
 * The organization the provider said the key belongs to (`openai-organization`), if it said.
 */
org: string | null, 
/**
 * What the test found and what to do about it, for a person.
 */
message: string, 
/**
 * From sending the test request to its answer, milliseconds.
 */
duration_ms: number, };

export type KeyBody = { 
/**
 * The key after the change (`None` only if it was removed meanwhile).
 */
key: KeyInfo | null, };

export type ErrorDetail = { 
/**
 * What happened and what to do next.
 */
message: string, 
/**
 * OpenAI's error type.
 */
type: string, 
/**
 * A short machine-readable reason (`invalid_api_key`, `keymux_key_rejected`…) a client can match on.
 */
code: string | null, 
/**
 * The request parameter at fault, in OpenAI's shape; Keymux always sends null.
 */
param: string | null, };

export type ErrorBody = { 
/**
 * What went wrong, in OpenAI's shape: message, type, code, param.
 */
error: ErrorDetail, };

export type KeySettings = { 
/**
 * Priority tier: unpinned traffic goes to the lowest tier with a usable key (work keys 0, personal
 * keys 1, say).
 */
priority: number, 
/**
 * Soft daily token budget (input + output, UTC day). Over it, unpinned traffic avoids the key;
 * pinned requests still go (only this key's organization can read them) and the overrun is shown.
 */
daily_token_budget: number | null, 
/**
 * If not empty, the only models this key is used for.
 */
models: Array<string>, 
/**
 * Models this key is never used for.
 */
exclude_models: Array<string>, 
/**
 * Percent of the key's request and token windows kept for the sessions already on it (1 to 90):
 * while less than that is left, the key takes no new sessions, until the window refills.
 */
reserve_window_pct: number | null, };

export type MoneyBudget = { 
/**
 * US dollars per local day.
 */
daily_budget_usd: number | null, 
/**
 * US dollars per local month.
 */
monthly_budget_usd: number | null, 
/**
 * Percent of a budget (1 to 100) past which no new sessions start (absent: 100).
 */
reserve_at: number | null, 
/**
 * At 100 %: `reserve` (sessions already on it go on) or `stop` (refuse everything).
 */
on_limit: OnLimit, };

export type NewKey = { 
/**
 * A short name: work, personal, azure-eu…
 */
label: string, 
/**
 * The provider it talks to (default OpenAI).
 */
provider: ProviderId, 
/**
 * Base URL (required for Azure).
 */
base_url: string | null, 
/**
 * The key's organization, if known (otherwise learned from the provider).
 */
org: string | null, 
/**
 * The API key.
 */
secret: string, 
/**
 * Priority tier: unpinned traffic goes to the lowest tier with a usable key (work keys 0, personal
 * keys 1, say).
 */
priority: number, 
/**
 * Soft daily token budget (input + output, UTC day). Over it, unpinned traffic avoids the key;
 * pinned requests still go (only this key's organization can read them) and the overrun is shown.
 */
daily_token_budget: number | null, 
/**
 * If not empty, the only models this key is used for.
 */
models: Array<string>, 
/**
 * Models this key is never used for.
 */
exclude_models: Array<string>, 
/**
 * Percent of the key's request and token windows kept for the sessions already on it (1 to 90):
 * while less than that is left, the key takes no new sessions, until the window refills.
 */
reserve_window_pct: number | null, 
/**
 * US dollars per local day.
 */
daily_budget_usd: number | null, 
/**
 * US dollars per local month.
 */
monthly_budget_usd: number | null, 
/**
 * Percent of a budget (1 to 100) past which no new sessions start (absent: 100).
 */
reserve_at: number | null, 
/**
 * At 100 %: `reserve` (sessions already on it go on) or `stop` (refuse everything).
 */
on_limit: OnLimit, };

export type DropReason = "organization_mismatch" | "end_user_mismatch" | "model_mismatch" | "prefix_mismatch" | "other";

export type ReasoningDropped = { 
/**
 * Reasoning items removed.
 */
count: number, 
/**
 * Each reason given, once, in the order of `DropReason`.
 */
reasons: Array<DropReason>, };

export type Period = "day" | "month";

export type OnLimit = "reserve" | "stop";

export type BudgetState = { "state": "open" } | { "state": "reserved", 
/**
 * The budget that reserves it.
 */
period: Period, 
/**
 * Its amount.
 */
limit: number, 
/**
 * How much of it is spent, in thousandths (1000: all of it).
 */
used_permille: number, 
/**
 * When that budget resets, Unix milliseconds.
 */
resets_unix_ms: number, } | { "state": "stopped", 
/**
 * The budget that stopped it.
 */
period: Period, 
/**
 * Its amount.
 */
limit: number, 
/**
 * When it resets, Unix milliseconds.
 */
resets_unix_ms: number, };

export type PlanInfo = { 
/**
 * The ChatGPT account id.
 */
account_id: string, 
/**
 * The plan (`plus`, `pro`, `team`…), when the id token says.
 */
plan_type: string | null, 
/**
 * When the access token expires, Unix seconds.
 */
expires_unix: number | null, };

export type UsageWindow = { 
/**
 * How much of it is used, 0 to 100.
 */
used_percent: number, 
/**
 * Its length, minutes (300 for the 5-hour window, 10080 for the weekly one).
 */
window_minutes: number | null, 
/**
 * When it resets, Unix seconds.
 */
resets_unix: number | null, };

export type PlanWindows = { 
/**
 * The short window (5 hours).
 */
primary: UsageWindow | null, 
/**
 * The long window (a week).
 */
secondary: UsageWindow | null, };

export type Client = "codex" | "pi";

export type ClientSetup = { 
/**
 * The client.
 */
client: Client, 
/**
 * The file the client reads, where Keymux looks for it (`None`: no home directory).
 */
file: string | null, 
/**
 * Keymux set it up and can undo it.
 */
set_up: boolean, 
/**
 * The file changed after Keymux wrote it: Undo keeps what changed, or needs `force`.
 */
edited_since: boolean, };

export type SetupRequest = { 
/**
 * Codex: the custom-provider form (`--custom-provider`), for a ChatGPT login or another
 * `model_provider`. Codex's sessions are then recorded under the provider `keymux`.
 */
custom_provider: boolean, 
/**
 * Codex: replace an `openai_base_url` that names another URL (`--force`; Undo puts it back).
 */
force: boolean, 
/**
 * Codex: add the API key `auth.json` holds to Keymux's keys under this label before the client
 * token takes its place (`--import-key LABEL`).
 */
import_label: string | null, 
/**
 * Codex 0.171 and later: a login (`gateway_oauth`) instead of a token in Codex's files
 * (`--login`); the person picks the pool when Codex logs in.
 */
login: boolean, };

export type SetupFile = { 
/**
 * The file.
 */
path: string, 
/**
 * The change, a small diff with any token masked.
 */
diff: string, 
/**
 * What else the person should know about this file.
 */
notes: Array<string>, };

export type SetupPreview = { 
/**
 * Names this preview in the confirmation (valid for 15 minutes, once).
 */
id: string, 
/**
 * The client.
 */
client: Client, 
/**
 * Each file that changes, the client's own first.
 */
files: Array<SetupFile>, 
/**
 * Confirming would change a file (otherwise the client uses this Keymux already).
 */
changes_anything: boolean, 
/**
 * A new client token is made on confirming (the diff shows a stand-in for it).
 */
makes_token: boolean, 
/**
 * Codex's `auth.json` holds an OpenAI API key, which `import_label` adds to Keymux's keys.
 */
finds_api_key: boolean, 
/**
 * The answers it was made with.
 */
request: SetupRequest, };

export type SetupDone = { 
/**
 * The client.
 */
client: Client, 
/**
 * Each file written, and what Undo does to it.
 */
files: Array<SetupFile>, 
/**
 * The key added from `auth.json` (its label), if one was.
 */
imported: string | null, 
/**
 * What was done, for a person.
 */
message: string, };

export type SetupUndone = { 
/**
 * The client.
 */
client: Client, 
/**
 * The file put back.
 */
path: string, 
/**
 * What else a person should know (a table kept for old sessions, `auth.json` put back).
 */
notes: Array<string>, };

export type FoundKey = { 
/**
 * Names the key in the import (the keyed fingerprint, as on the key cards).
 */
fingerprint: string, 
/**
 * The key masked (`sk-…abcd`), or `ChatGPT plan`.
 */
masked: string, 
/**
 * An OpenAI API key, or a ChatGPT plan (the login Codex is signed in with).
 */
provider: ProviderId, 
/**
 * The label it gets.
 */
label: string, 
/**
 * Where it is, in words.
 */
source: string, 
/**
 * The file holding it, which can lose its copy once it is imported (`None`: the environment).
 */
file: string | null, 
/**
 * The pool has it already, as this key.
 */
pooled_as: string | null, };

export type ImportOffer = { 
/**
 * Each key found, in the order the sources were read.
 */
keys: Array<FoundKey>, 
/**
 * What was passed over and why (a ChatGPT login…).
 */
notes: Array<string>, 
/**
 * Sources that could not be read, each naming the file and the fix.
 */
refusals: Array<string>, };

export type ImportRequest = { 
/**
 * The picked keys' fingerprints, from `GET /import`.
 */
fingerprints: Array<string>, 
/**
 * Take each imported key's plaintext copy out of its file (a backup kept beside it).
 */
remove_plaintext: boolean, };

export type NotImported = { 
/**
 * Its label (or its fingerprint when it was no longer found).
 */
label: string, 
/**
 * Why, and what to do.
 */
message: string, };

export type ImportDone = { 
/**
 * The labels of the keys now in the pool (a key pooled before keeps its label).
 */
imported: Array<string>, 
/**
 * The keys that were not imported.
 */
not_imported: Array<NotImported>, 
/**
 * What happened to the plaintext copies.
 */
notes: Array<string>, };

export type PoolPolicies = { 
/**
 * Whether its tokens' requests may ask for a service tier that bills above the standard one
 * (`service_tier` `priority` or `fast`, one tier, Codex's Fast mode, and `ultrafast`: see
 * [`above_standard`]). `false`: such a request is sent with `service_tier: "default"`, and its
 * decision says so. Default `true`.
 */
allow_priority: boolean, 
/**
 * Whether its requests may ask for `ultrafast` (3x to 6x the standard price), when
 * `allow_priority` lets them above the standard tier at all. `false`: an ultrafast request is
 * sent in the priority tier (Fast, 2x) instead, and its decision says so. Default `true`.
 */
allow_ultrafast: boolean, 
/**
 * The proxy every upstream request of its keys goes through (`None`: direct): `http://host:port`,
 * `https://…`, `socks5://…` or `socks5h://…`, probes and WebSockets included; never sent direct
 * when it cannot be reached. Never with a user or password (see [`check_proxy`]): those are kept
 * in the keychain, and the pool's `proxy_login` says so.
 */
proxy: string | null, 
/**
 * US dollars per local day.
 */
daily_budget_usd: number | null, 
/**
 * US dollars per local month.
 */
monthly_budget_usd: number | null, 
/**
 * Percent of a budget (1 to 100) past which no new sessions start (absent: 100).
 */
reserve_at: number | null, 
/**
 * At 100 %: `reserve` (sessions already on it go on) or `stop` (refuse everything).
 */
on_limit: OnLimit, };

export type KeySettingsChange = { 
/**
 * A new priority tier.
 */
priority?: number, 
/**
 * A new soft daily token budget, or none.
 */
daily_token_budget?: number | null, 
/**
 * The only models it is used for (empty: every model).
 */
models?: Array<string>, 
/**
 * The models it is never used for.
 */
exclude_models?: Array<string>, 
/**
 * A new share of its windows kept for its sessions, or none.
 */
reserve_window_pct?: number | null, };

export type MoneyBudgetChange = { 
/**
 * A new budget per local day, or none.
 */
daily_budget_usd?: number | null, 
/**
 * A new budget per local month, or none.
 */
monthly_budget_usd?: number | null, 
/**
 * A new reserve threshold, or none (100).
 */
reserve_at?: number | null, 
/**
 * What happens at 100 % from now on.
 */
on_limit?: OnLimit, };

export type PoolPoliciesChange = { 
/**
 * Whether its requests may ask for a tier above the standard one from now on.
 */
allow_priority?: boolean, 
/**
 * Whether its requests may ask for `ultrafast` from now on.
 */
allow_ultrafast?: boolean, 
/**
 * A new proxy (a user and password in it go to the keychain), or none: direct.
 */
proxy?: string | null, 
/**
 * A new budget per local day, or none.
 */
daily_budget_usd?: number | null, 
/**
 * A new budget per local month, or none.
 */
monthly_budget_usd?: number | null, 
/**
 * A new reserve threshold, or none (100).
 */
reserve_at?: number | null, 
/**
 * What happens at 100 % from now on.
 */
on_limit?: OnLimit, };

export type KeyChanges = { 
/**
 * A new label.
 */
label?: string, 
/**
 * A new priority tier.
 */
priority?: number, 
/**
 * A new soft daily token budget, or none.
 */
daily_token_budget?: number | null, 
/**
 * The only models it is used for (empty: every model).
 */
models?: Array<string>, 
/**
 * The models it is never used for.
 */
exclude_models?: Array<string>, 
/**
 * A new share of its windows kept for its sessions, or none.
 */
reserve_window_pct?: number | null, 
/**
 * A new budget per local day, or none.
 */
daily_budget_usd?: number | null, 
/**
 * A new budget per local month, or none.
 */
monthly_budget_usd?: number | null, 
/**
 * A new reserve threshold, or none (100).
 */
reserve_at?: number | null, 
/**
 * What happens at 100 % from now on.
 */
on_limit?: OnLimit, };

export type PoolChanges = { 
/**
 * Its keys, by label or id.
 */
keys?: Array<string>, 
/**
 * Its fallback pools, in order.
 */
fallback?: Array<string>, 
/**
 * Whether its requests may ask for a tier above the standard one from now on.
 */
allow_priority?: boolean, 
/**
 * Whether its requests may ask for `ultrafast` from now on.
 */
allow_ultrafast?: boolean, 
/**
 * A new proxy (a user and password in it go to the keychain), or none: direct.
 */
proxy?: string | null, 
/**
 * A new budget per local day, or none.
 */
daily_budget_usd?: number | null, 
/**
 * A new budget per local month, or none.
 */
monthly_budget_usd?: number | null, 
/**
 * A new reserve threshold, or none (100).
 */
reserve_at?: number | null, 
/**
 * What happens at 100 % from now on.
 */
on_limit?: OnLimit, };

export const DEFAULT_KEY_SETTINGS: KeySettings = {"priority":0,"daily_token_budget":null,"models":[],"exclude_models":[],"reserve_window_pct":null};

export const DEFAULT_MONEY_BUDGET: MoneyBudget = {"daily_budget_usd":null,"monthly_budget_usd":null,"reserve_at":null,"on_limit":"reserve"};

export const DEFAULT_POOL_POLICIES: PoolPolicies = {"allow_priority":true,"allow_ultrafast":true,"proxy":null,"daily_budget_usd":null,"monthly_budget_usd":null,"reserve_at":null,"on_limit":"reserve"};

export type ClientChecked = { 
/**
 * `codex` or `pi`.
 */
name: string, 
/**
 * The version checked, when it printed one.
 */
version: string | null, 
/**
 * Every transport it uses went through.
 */
ok: boolean, 
/**
 * In words: `pi 1.7.0 works through Keymux`, or `Codex 0.172.0: WebSocket turn failed: …`.
 */
summary: string, };

export type ClientsBody = { 
/**
 * Per client checked (none until the first check ends).
 */
clients: Array<ClientChecked>, };

export type LoginRequest = { 
/**
 * The request's id (from the dashboard's `#authorize=` link).
 */
id: string, 
/**
 * The client's name (`Codex`).
 */
client: string, 
/**
 * Where the client waits for the answer (`127.0.0.1:<port>`).
 */
callback: string, };

export type LoginDecision = { 
/**
 * Approve (`true`) or refuse.
 */
approve: boolean, 
/**
 * The pool the client's token is bound to (default `all`).
 */
pool?: string, 
/**
 * The code the client shows (device flow only).
 */
user_code?: string, };

export type LoginDecided = { 
/**
 * The client's name (`Codex`).
 */
client: string, 
/**
 * Where the browser goes next (browser flow only).
 */
redirect: string | null, };

