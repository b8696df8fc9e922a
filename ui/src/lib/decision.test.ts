import { describe, expect, it } from "vitest";
import type { Decision, DropReason, RequestRecord } from "../api/types";
import { badges, droppedSentence, reasonSentence, refusalSentence, routeSentence } from "./decision";
import { decision } from "./testing";


function record(d: Partial<Decision>, over: Partial<RequestRecord> = {}): RequestRecord {
  return {
    at_unix_ms: 0,
    operation: "responses_create",
    transport: "http",
    client: "codex_exec",
    token: "codex",
    pool: "all",
    session: null,
    parent_session: null,
    model: "gpt-5.5",
    stream: true,
    decision: decision(d),
    attempts: [{ key: "k_a1", status: 200, failure: null, duration_ms: 40, message: null }],
    served_by: "k_a1",
    status: 200,
    error: null,
    upstream_code: null,
    rescued_items: 0,
    ttfb_ms: 40,
    duration_ms: 90,
    usage: { input: 100, cached: 0, output: 10, tier: "standard" },
    cost_usd: 0.0008,
    unpriced: null,
    ...over,
  };
}

const names: Record<string, string> = { k_a1: "work (org-a)", k_b1: "personal (org-b)" };
const name = (id: string) => names[id] ?? id;

describe("badges", () => {
  it("marks a request that replays encrypted reasoning as pinned", () => {
    const r = record({ route: "pinned", pin: { key: "k_a1", org: "org-a", exact: true } });
    expect(badges(r)).toEqual(["ENCRYPTED PIN"]);
  });

  it("marks a previous_response_id request as continuity", () => {
    expect(badges(record({ route: "continuity", continuity_hit: true }))).toEqual(["CONTINUITY"]);
  });

  it("tells a cache-key hit from a prefix hit", () => {
    const viaKey = record({ route: "affinity", affinity_source: "prompt_cache_key", affinity_state: "hit" });
    const viaPrefix = record({ route: "affinity", affinity_source: "prompt_prefix", affinity_state: "hit" });
    expect(badges(viaKey)).toEqual(["CACHE HIT"]);
    expect(badges(viaPrefix)).toEqual(["PREFIX HIT"]);
  });

  it("marks a new session as a cache miss and balanced", () => {
    const r = record({ affinity_source: "prompt_cache_key", affinity_state: "cache_miss" });
    expect(badges(r)).toEqual(["CACHE MISS", "BALANCED"]);
  });

  it("marks a rescue from either the decision or the dropped items", () => {
    expect(badges(record({ rescued_orgs: ["org-c"] }))).toContain("RESCUED");
    expect(badges(record({}, { rescued_items: 2 }))).toContain("RESCUED");
  });

  it("marks a turn whose reasoning the provider dropped, and says why in the drawer", () => {
    expect(badges(record({}))).not.toContain("REASONING DROPPED");
    const dropped = { count: 2, reasons: ["organization_mismatch"] as DropReason[] };
    expect(badges(record({ reasoning_dropped: dropped }))).toContain("REASONING DROPPED");
    const said = droppedSentence(dropped);
    expect(said).toContain("dropped 2 reasoning items");
    expect(said).toContain("organization mismatch (made by another organization");
    expect(said).toContain("next turn goes where its reasoning lives");
    const prefix = droppedSentence({ count: 1, reasons: ["prefix_mismatch", "other"] });
    expect(prefix).toContain("dropped 1 reasoning item from");
    expect(prefix).toContain("prefix mismatch (the input before it changed");
    expect(prefix).toContain("; other (");
    expect(prefix).not.toContain("learns the session's organization again");
  });

  it("marks failover only when more than one key was tried", () => {
    const one = record({});
    const two = record(
      {},
      {
        attempts: [
          { key: "k_a1", status: 429, failure: "rate_limited", duration_ms: 5, message: "slow down" },
          { key: "k_b1", status: 200, failure: null, duration_ms: 30, message: null },
        ],
      },
    );
    expect(badges(one)).not.toContain("FAILOVER");
    expect(badges(two)).toContain("FAILOVER");
  });

  it("marks cooling only when it shaped this request", () => {
    const cooling = { rule: "skipped", key: "k_b1", why: { kind: "cooling", remaining_ms: 3000 } } as const;
    // A balanced decision lists every cooling key in the pool: that alone says nothing about this row.
    const bystander = record({ reasons: [cooling] });
    // The key this session was remembered on was cooling, so it went elsewhere.
    const wanted = record({ reasons: [{ rule: "soft_target_unavailable", key: "k_b1" }, cooling] });
    const hinted = record({ reasons: [{ rule: "session_hint", key: "k_b1", usable: 0 }, cooling] });
    const hit429 = record(
      {},
      {
        attempts: [
          { key: "k_b1", status: 429, failure: "rate_limited", duration_ms: 5, message: "slow down" },
          { key: "k_a1", status: 200, failure: null, duration_ms: 30, message: null },
        ],
      },
    );
    const refused = record({
      route: "refused",
      choice: null,
      refusal: { kind: "all_cooling", retry_after_secs: 4, cooling: 2 },
    });
    const disabled = record({ reasons: [{ rule: "skipped", key: "k_b1", why: { kind: "disabled" } }] });
    expect(badges(bystander)).not.toContain("COOLING");
    expect(badges(wanted)).toContain("COOLING");
    expect(badges(hinted)).toContain("COOLING");
    expect(badges(hit429)).toContain("COOLING");
    expect(badges(refused)).toEqual(["COOLING", "REFUSED"]);
    expect(badges(disabled)).not.toContain("COOLING");
  });

  it("marks a request a fallback pool served", () => {
    const r = record({ reasons: [{ rule: "pool_fallback", from: "spare", to: "work" }] });
    expect(badges(r)).toEqual(["BALANCED", "POOL FALLBACK"]);
  });

  it("marks a new session sent to the plan, and one that overflowed to an API key", () => {
    const first = record({ reasons: [{ rule: "plan_first", key: "k_a1" }] });
    const overflow = record({ reasons: [{ rule: "plan_exhausted", key: "k_a1", resets_ms: 60_000 }] });
    expect(badges(first)).toEqual(["BALANCED", "PLAN FIRST"]);
    expect(badges(overflow)).toEqual(["BALANCED", "PLAN USED UP"]);
    expect(badges(record({}))).not.toContain("PLAN FIRST");
  });

  it("reads a decision still in flight (no attempts yet)", () => {
    expect(badges({ decision: decision() })).toEqual(["BALANCED"]);
  });
});

describe("sentences", () => {
  it("names keys by label and organization in every reason", () => {
    expect(
      reasonSentence({ rule: "skipped", key: "k_b1", why: { kind: "cooling", remaining_ms: 61_000 } }, name),
    ).toBe("personal (org-b) was skipped: it is rate limited for another 1m 01s.");
    expect(reasonSentence({ rule: "pinned_to_org", key: "k_a1", org_keys: 2, usable: 1 }, name)).toBe(
      "Its encrypted reasoning was made by work (org-a); only its organization can read it (1 of 2 keys usable).",
    );
    expect(reasonSentence({ rule: "continuity_binding", key: "k_a1" }, name)).toContain("work (org-a)");
  });

  it("says a used-up plan was skipped for its usage, not for a rate limit", () => {
    expect(reasonSentence({ rule: "skipped", key: "k_a1", why: { kind: "plan_used_up", reset_ms: 3_600_000 } }, name)).toBe(
      "work (org-a) was skipped: its plan's usage is used up until its window resets in 1h 00m.",
    );
  });

  it("says plan first, and when the plan is used up", () => {
    expect(reasonSentence({ rule: "plan_first", key: "k_a1" }, name)).toContain("Plan first: work (org-a) is your ChatGPT plan");
    expect(reasonSentence({ rule: "plan_exhausted", key: "k_a1", resets_ms: 5_400_000 }, name)).toBe(
      "Your ChatGPT plan work (org-a) is used up until its window resets in 1h 30m: new sessions go to your API keys.",
    );
  });

  it("names the chosen key in the headroom reason", () => {
    const s = reasonSentence({ rule: "most_headroom", headroom_permille: 875, in_flight: 2, candidates: 3 }, name, "k_a1");
    expect(s).toBe(
      "work (org-a) had the most headroom for its load (87.5% of its tighter window left, 2 in flight), of 3 usable keys.",
    );
  });

  it("says why an unreachable key was left out", () => {
    expect(reasonSentence({ rule: "skipped", key: "k_b1", why: { kind: "unreachable", retry_ms: 10_000 } }, name)).toBe(
      "personal (org-b) was skipped: its base URL cannot be reached; it is tried again in the background in 10s.",
    );
  });

  it("says a key past its budget is reserved for its sessions, or stopped until the reset", () => {
    const reserved = { kind: "budget_reserved", period: "day", limit: 5, used_permille: 812 } as const;
    expect(reasonSentence({ rule: "skipped", key: "k_b1", why: reserved }, name)).toBe(
      "personal (org-b) was skipped: it is over 81 % of its $5.00 daily budget, reserved for the sessions already on it.",
    );
    const kept = { kind: "window_reserved", left_permille: 150, keep_pct: 20, reset_ms: 30_000 } as const;
    expect(reasonSentence({ rule: "skipped", key: "k_b1", why: kept }, name)).toBe(
      "personal (org-b) was skipped: only 15 % of its rate-limit window is left, under the 20 % it keeps for the sessions already on it, until it refills in 30s.",
    );
    const stopped = { kind: "budget_stopped", period: "month", limit: 20, resets_ms: 3_600_000 } as const;
    expect(reasonSentence({ rule: "skipped", key: "k_b1", why: stopped }, name)).toContain("$20.00 monthly budget and is stopped");
    expect(refusalSentence({ kind: "budget_stopped", key: "k_b1", period: "day", limit: 5, retry_after_secs: 90 }, name)).toBe(
      'personal (org-b) reached its $5.00 daily budget with on_limit "stop": this session waits until it resets in 1m 30s.',
    );
  });

  it("says a rescued session's old organization stays dropped", () => {
    expect(reasonSentence({ rule: "still_rescued", orgs: 1 })).toBe(
      "This session was moved off an organization on an earlier turn; its items stay dropped, so it goes on where it was moved.",
    );
    expect(reasonSentence({ rule: "still_rescued", orgs: 2 })).toContain("2 organizations");
  });

  it("shows an unknown reason as its JSON rather than blank", () => {
    const future = { rule: "something_new", detail: 3 } as unknown as Parameters<typeof reasonSentence>[0];
    expect(reasonSentence(future)).toBe('({"rule":"something_new","detail":3})');
  });

  it("says when the first cooling key frees", () => {
    expect(refusalSentence({ kind: "all_cooling", retry_after_secs: 90, cooling: 3 })).toBe(
      "All 3 usable keys are rate limited; the first frees in 1m 30s.",
    );
  });

  it("says which fallback pool served when its own pool could not", () => {
    expect(reasonSentence({ rule: "pool_fallback", from: "work", to: "personal" })).toBe(
      "work had no key that could serve: used fallback pool personal.",
    );
  });

  it("names both pools when a request replays state from outside its pool", () => {
    const s = refusalSentence({ kind: "pool_mismatch", key: "k_b1", pool: "work", owner: "personal" }, name, "work");
    expect(s).toContain("made by personal (org-b), which is in pool personal, outside its token's pool work");
    expect(s).toContain("never sent on");
  });

  it("names the empty pool a request was refused for", () => {
    expect(refusalSentence({ kind: "no_keys" }, name, "spare")).toContain("The pool spare has no keys");
    expect(refusalSentence({ kind: "no_keys" }, name)).toBe("Keymux has no keys. Add one on the Keys page.");
  });

  it("says which organization a pinned request went to", () => {
    const s = routeSentence(decision({ route: "pinned", pin: { key: "k_a1", org: "org-a", exact: false } }), name);
    expect(s).toBe(
      "Pinned to organization: It replays encrypted reasoning that only the organization that produced it can read. The content was made by work (org-a).",
    );
  });

  it("says a pool sent a priority request as standard, and why", () => {
    const s = reasonSentence({ rule: "tier_changed", pool: "work", asked: "priority", sent: "default" }, name);
    expect(s).toBe("Its pool work does not allow the priority service tier (billed above standard), so it was sent as default.");
  });
});
