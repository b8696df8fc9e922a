// Builders the component tests share: API values with sensible defaults, overridden per test.
import type { Decision, KeyInfo, PoolInfo } from "../api/types";

export function decision(over: Partial<Decision> = {}): Decision {
  return {
    seq: 1,
    choice: "k_a1",
    fallbacks: [],
    reasons: [],
    affinity_source: "none",
    affinity_state: "no_signal",
    continuity_hit: false,
    pin: null,
    rescued_orgs: [],
    refusal: null,
    route: "balanced",
    ...over,
  };
}

export function keyInfo(id: string, over: Partial<KeyInfo> = {}): KeyInfo {
  return {
    id,
    label: id.replace(/^k_/, ""),
    fingerprint: `fp-${id}`,
    provider: "openai",
    source: "keychain",
    org: null,
    org_learned: false,
    health: "ready",
    in_flight: 0,
    priority: 0,
    daily_token_budget: null,
    tokens_today: 0,
    daily_budget_usd: null,
    monthly_budget_usd: null,
    reserve_at: null,
    on_limit: "reserve",
    headroom: 1,
    served: 0,
    failed: 0,
    last_status: null,
    invalid_encrypted_content: 0,
    input_tokens: 0,
    cached_tokens: 0,
    output_tokens: 0,
    cached_ratio: 0,
    models: [],
    exclude_models: [],
    unavailable_models: [],
    base_url: null,
    until_unix_ms: null,
    requests_window: null,
    tokens_window: null,
    pools: [],
    spend_today_usd: 0,
    spend_month_usd: 0,
    unpriced_requests_today: 0,
    unpriced_requests_month: 0,
    budget: { state: "open" },
    budget_runs_out_unix_ms: null,
    ...over,
  };
}

export function poolInfo(name: string, keyIds: string[], over: Partial<PoolInfo> = {}): PoolInfo {
  return {
    name,
    builtin: name === "all",
    from_env: false,
    keys: keyIds.map((k) => k.replace(/^k_/, "")),
    key_ids: keyIds,
    fallback: [],
    tokens: [],
    usable: keyIds.length,
    headroom: 1,
    spend_today_usd: 0,
    spend_month_usd: 0,
    unpriced_requests_today: 0,
    unpriced_requests_month: 0,
    daily_budget_usd: null,
    monthly_budget_usd: null,
    reserve_at: null,
    on_limit: "reserve",
    budget: { state: "open" },
    ...over,
  };
}
