// What a routing decision says, in badges for a row and in sentences for the drawer.

import type { Decision, DropReason, ReasoningDropped, Reason, Refusal, RequestRecord, ServiceTier, SkipWhy } from "../api/types";
import { countdown, usd } from "./format";
import { AFFINITY_SOURCE, AFFINITY_STATE, ROUTE, type Tone } from "./words";

/** Every badge a row can show, in the order it shows them. */
export const BADGES = {
  "ENCRYPTED PIN": { tone: "violet", title: "Pinned to the organization that can read its encrypted reasoning" },
  CONTINUITY: { tone: "accent", title: "Bound to the key that holds the response it continues" },
  "CACHE HIT": { tone: "ok", title: "Sent to the key whose prompt cache is warm for this session (prompt_cache_key)" },
  "PREFIX HIT": { tone: "teal", title: "Sent to the key whose prompt cache is warm for this prompt prefix" },
  "CACHE MISS": { tone: "muted", title: "A cache signal, but nothing remembered for it yet" },
  BALANCED: { tone: "muted", title: "Placed by headroom and load alone" },
  "PLAN FIRST": { tone: "teal", title: "A new session sent to your ChatGPT plan, which new sessions use first while its usage allows" },
  "PLAN USED UP": { tone: "warn", title: "Your ChatGPT plan is used up until its window resets, so this went to an API key" },
  RESCUED: { tone: "warn", title: "Items its organization could read were dropped: no key of that organization was usable" },
  "REASONING DROPPED": {
    tone: "bad",
    title: "The provider answered, but said it dropped reasoning from the input: the turn lost part of its session's reasoning",
  },
  FAILOVER: { tone: "warn", title: "The first key failed before any byte reached the client; another key answered" },
  "POOL FALLBACK": { tone: "warn", title: "No key of its token's pool could serve, so a fallback pool the user declared did" },
  COOLING: { tone: "info", title: "Rate limiting shaped this request: the key it wanted was cooling, or a key it tried answered 429" },
  REFUSED: { tone: "bad", title: "No key could take it" },
} as const satisfies Record<string, { tone: Tone; title: string }>;

export type BadgeName = keyof typeof BADGES;

export const BADGE_NAMES = Object.keys(BADGES) as BadgeName[];

/** The part of a record badges are read from: a finished record, or a decision still in flight. */
export interface BadgeInput {
  decision: Decision;
  attempts?: RequestRecord["attempts"];
  rescued_items?: number;
}

/** The badges of a request, from its decision and (once finished) its attempts. */
export function badges(r: BadgeInput): BadgeName[] {
  const d = r.decision;
  const out: BadgeName[] = [];
  if (d.route === "pinned" || d.pin !== null) out.push("ENCRYPTED PIN");
  if (d.continuity_hit) out.push("CONTINUITY");
  if (d.affinity_state === "hit") {
    if (d.affinity_source === "prompt_cache_key") out.push("CACHE HIT");
    else if (d.affinity_source === "prompt_prefix") out.push("PREFIX HIT");
  }
  if (d.affinity_state === "cache_miss") out.push("CACHE MISS");
  if (d.route === "balanced") out.push("BALANCED");
  if (d.reasons.some((x) => x.rule === "plan_first")) out.push("PLAN FIRST");
  if (d.reasons.some((x) => x.rule === "plan_exhausted")) out.push("PLAN USED UP");
  if (d.rescued_orgs.length > 0 || (r.rescued_items ?? 0) > 0) out.push("RESCUED");
  if (d.reasoning_dropped) out.push("REASONING DROPPED");
  if ((r.attempts?.length ?? 0) > 1) out.push("FAILOVER");
  if (d.reasons.some((x) => x.rule === "pool_fallback")) out.push("POOL FALLBACK");
  if (coolingMattered(r)) out.push("COOLING");
  if (d.route === "refused") out.push("REFUSED");
  return out;
}

/**
 * Whether rate limiting shaped this request, rather than merely being true of some key at the time: a
 * balanced decision lists every key it skipped, so a cooling key anywhere in the pool is not news.
 * It counts when the request was refused for it, when one of its own attempts was rate limited, or
 * when the key it wanted (the remembered or hinted one) was skipped as cooling.
 */
function coolingMattered(r: BadgeInput): boolean {
  const d = r.decision;
  if (d.refusal?.kind === "all_cooling") return true;
  if (r.attempts?.some((a) => a.failure === "rate_limited")) return true;
  const wanted = new Set<string>();
  for (const x of d.reasons) {
    if (x.rule === "soft_target_unavailable" || x.rule === "session_hint") wanted.add(x.key);
  }
  return d.reasons.some((x) => x.rule === "skipped" && x.why.kind === "cooling" && wanted.has(x.key));
}

/** Names a key for a sentence: its label and organization, or its id when it is gone. */
export type KeyNamer = (id: string) => string;

const plain: KeyNamer = (id) => id;

function skipWhy(why: SkipWhy): string {
  switch (why.kind) {
    case "cooling":
      return `it is rate limited for another ${countdown(why.remaining_ms)}`;
    case "invalid":
      return "the provider rejected it";
    case "disabled":
      return "it is switched off";
    case "quota_exhausted":
      return `it is out of quota, tried again in ${countdown(why.remaining_ms)}`;
    case "model_unavailable":
      return "it does not serve this model";
    case "near_exhaustion":
      return `a rate-limit window is used up until it refills in ${countdown(why.reset_ms)}`;
    case "plan_used_up":
      return `its plan's usage is used up until its window resets in ${countdown(why.reset_ms)}`;
    case "over_budget":
      return "it is over its daily token budget";
    case "unreachable":
      return `its base URL cannot be reached; it is tried again in the background in ${countdown(why.retry_ms)}`;
    case "budget_reserved":
      return `it is over ${Math.floor(why.used_permille / 10)} % of its ${usd(why.limit)} ${why.period === "day" ? "daily" : "monthly"} budget, reserved for the sessions already on it`;
    case "budget_stopped":
      return `it reached its ${usd(why.limit)} ${why.period === "day" ? "daily" : "monthly"} budget and is stopped until it resets in ${countdown(why.resets_ms)}`;
    case "window_reserved":
      return `only ${(why.left_permille / 10).toFixed(why.left_permille % 10 ? 1 : 0)} % of its rate-limit window is left, under the ${why.keep_pct} % it keeps for the sessions already on it, until it refills in ${countdown(why.reset_ms)}`;
    default:
      return unknown(why);
  }
}

/** The service tier an answer was served (and billed) in, in words. */
export function tierWords(tier: ServiceTier): string {
  switch (tier) {
    case "standard":
      return "standard";
    case "flex":
      return "flex (cheaper, slower)";
    case "priority":
      return "priority (Fast mode: billed above standard)";
    case "ultrafast":
      return "ultrafast (billed above standard)";
    default:
      return "one the price table does not know (unpriced)";
  }
}

/** One reason, as a sentence. */
export function reasonSentence(reason: Reason, name: KeyNamer = plain, choice?: string | null): string {
  switch (reason.rule) {
    case "most_headroom": {
      const who = choice ? name(choice) : "The chosen key";
      const share = `${(reason.headroom_permille / 10).toFixed(reason.headroom_permille % 10 ? 1 : 0)}%`;
      const among = reason.candidates === 1 ? "the only usable key" : `of ${reason.candidates} usable keys`;
      return `${who} had the most headroom for its load (${share} of its tighter window left, ${reason.in_flight} in flight), ${among}.`;
    }
    case "plan_first":
      return `Plan first: ${name(reason.key)} is your ChatGPT plan, and new sessions go to it while its usage allows.`;
    case "plan_exhausted":
      return `Your ChatGPT plan ${name(reason.key)} is used up until its window resets in ${countdown(reason.resets_ms)}: new sessions go to your API keys.`;
    case "priority_tier":
      return `Only priority tier ${reason.tier} was used: the lowest tier with a usable key takes unpinned traffic.`;
    case "budget_overrun":
      return "Every usable key is over its daily budget; budgets are soft, so they serve anyway.";
    case "fewest_recent_starts":
      return `${reason.tied} keys were tied on load; the one that recently started the fewest sessions was chosen.`;
    case "continuity_binding":
      return `It continues a response stored with ${name(reason.key)}, so only that key can serve it.`;
    case "unmarked_response_id":
      return "It names a response id Keymux did not mark, so it was routed normally and may miss the key that holds it.";
    case "web_socket_bound":
      return `Its WebSocket is bound to ${name(reason.key)}.`;
    case "session_hint":
      return `Its session was last served by ${name(reason.key)}; ${reason.usable} key${reason.usable === 1 ? "" : "s"} of that organization ${reason.usable === 1 ? "is" : "are"} usable.`;
    case "soft_affinity":
      return `${name(reason.key)} served this prompt last, so it was preferred to keep the prompt cache warm.`;
    case "soft_target_unavailable":
      return `${name(reason.key)} served this prompt last but could not take it now.`;
    case "warm_organization":
      return "Another key of the remembered key's organization was used: the prompt cache is shared per organization.";
    case "finding_org":
      return reason.known
        ? `Its encrypted reasoning carries no Keymux marker (made before Keymux); ${name(reason.known)} served this session last, so its organization was tried first, then the others (${reason.orgs} in all).`
        : `Its encrypted reasoning carries no Keymux marker (made before Keymux): one key of each of ${reason.orgs} organization${reason.orgs === 1 ? "" : "s"} was tried in turn until one could read it.`;
    case "unreadable_everywhere":
      return `None of the ${reason.tried} organization${reason.tried === 1 ? "" : "s"} tried could read its encrypted reasoning: by the lost-organization policy, those items were dropped (rescue) or the request refused.`;
    case "pinned_to_org":
      return `Its encrypted reasoning was made by ${name(reason.key)}; only its organization can read it (${reason.usable} of ${reason.org_keys} key${reason.org_keys === 1 ? "" : "s"} usable).`;
    case "rescued":
      return `No key of ${name(reason.key)}'s organization was usable, so the items only it can read were dropped.`;
    case "pool_fallback":
      return `${reason.from} had no key that could serve: used fallback pool ${reason.to}.`;
    case "still_rescued":
      return `This session was moved off ${reason.orgs === 1 ? "an organization" : `${reason.orgs} organizations`} on an earlier turn; ${reason.orgs === 1 ? "its" : "their"} items stay dropped, so it goes on where it was moved.`;
    case "tier_changed":
      return `Its pool ${reason.pool} does not allow the ${reason.asked} service tier (billed above standard), so it was sent as ${reason.sent}.`;
    case "foreign_markers_stripped":
      return `${reason.count} marker${reason.count === 1 ? "" : "s"} from another Keymux install ${reason.count === 1 ? "was" : "were"} removed without routing on ${reason.count === 1 ? "it" : "them"}.`;
    case "affinity_off":
      return "Encrypted-content pinning is switched off: markers were removed but not used.";
    case "skipped":
      return `${name(reason.key)} was skipped: ${skipWhy(reason.why)}.`;
    default:
      return unknown(reason);
  }
}

/** Why a request was refused, as a sentence; `pool` is the pool of the token it came with. */
export function refusalSentence(refusal: Refusal, name: KeyNamer = plain, pool = "all"): string {
  switch (refusal.kind) {
    case "mixed_orgs":
      return `It replays encrypted content of ${refusal.keys.length} organizations (${refusal.keys.map(name).join(", ")}); no key can read them all.`;
    case "continuity_lost":
      return `The key that holds the response it continues, ${name(refusal.key)}, cannot serve (removed, rejected or disabled).`;
    case "lost_org":
      return `The organization of ${name(refusal.key)} has no usable key, and the policy is to fail rather than drop its items.`;
    case "no_keys":
      if (pool !== "all") {
        return `The pool ${pool} has no keys and no fallback that could serve. Add keys to it on the Pools page, or move the token to another pool.`;
      }
      return "Keymux has no keys. Add one on the Keys page.";
    case "pool_mismatch":
      return `It replays state made by ${name(refusal.key)}, which is in pool ${refusal.owner}, outside its token's pool ${refusal.pool}; it was refused and never sent on. Continue it with a token of pool ${refusal.owner}, or start a new conversation.`;
    case "bare_response_id":
      return `It names a stored response by its bare id, without Keymux's marker, and every key of pool ${refusal.pool} shares its organization with pool ${refusal.shared_with}: Keymux cannot tell which pool made it, so it was refused and never sent on. Send the id as Keymux returned it, or use a token of the pool that made it.`;
    case "all_cooling":
      return `All ${refusal.cooling} usable key${refusal.cooling === 1 ? " is" : "s are"} rate limited; the first frees in ${countdown(refusal.retry_after_secs * 1000)}.`;
    case "no_usable_key":
      return `No key is usable: ${refusal.unusable} ${refusal.unusable === 1 ? "is" : "are"} rejected or switched off.`;
    case "budget_reached":
      return `Every key a new session may use is past the budget you set (${refusal.keys} key${refusal.keys === 1 ? "" : "s"}); the first resets in ${countdown(refusal.retry_after_secs * 1000)}.`;
    case "budget_stopped":
      return `${name(refusal.key)} reached its ${usd(refusal.limit)} ${refusal.period === "day" ? "daily" : "monthly"} budget with on_limit "stop": this session waits until it resets in ${countdown(refusal.retry_after_secs * 1000)}.`;
    default:
      return unknown(refusal);
  }
}

/** The route and why, in words. */
export function routeSentence(d: Decision, name: KeyNamer = plain): string {
  const route = ROUTE[d.route] ?? { name: d.route, why: "" };
  if (d.route === "pinned" && d.pin) {
    return `${route.name}: ${route.why} The content was made by ${name(d.pin.key)}.`;
  }
  return `${route.name}: ${route.why}`;
}

/** What became of the prompt-cache signal, in words. */
export function affinitySentence(d: Decision): string {
  const state = AFFINITY_STATE[d.affinity_state] ?? { name: d.affinity_state, why: "" };
  if (d.affinity_source === "none") return state.why;
  return `Signal from ${AFFINITY_SOURCE[d.affinity_source]}: ${state.name}. ${state.why}`;
}

/** A value the generated types did not know about when this was built: shown, never blank. */
function unknown(value: unknown): string {
  return `(${JSON.stringify(value)})`;
}

/** What each reason for a dropped reasoning item means, in the words of the drawer. */
export const DROP_REASON: Record<DropReason, string> = {
  organization_mismatch:
    "made by another organization: the turn reached an organization where its session's reasoning does not live",
  end_user_mismatch: "made for another end user",
  model_mismatch: "made by another model",
  prefix_mismatch: "the input before it changed (a rewritten message, a shortened tool result, a compaction)",
  other: "for a reason this version of Keymux does not know",
};

/** The drawer's sentence for the reasoning a provider dropped from a request's input. */
export function droppedSentence(dropped: ReasoningDropped): string {
  const items = dropped.count === 1 ? "1 reasoning item" : `${dropped.count} reasoning items`;
  const why = dropped.reasons.map((r) => `${r.replace(/_/g, " ")} (${DROP_REASON[r]})`).join("; ");
  const next = dropped.reasons.includes("organization_mismatch")
    ? " Keymux learns the session's organization again: its next turn goes where its reasoning lives."
    : "";
  return `The provider answered but dropped ${items} from the input: ${why}.${next}`;
}
