// What the dashboard says about pools: a request's pool and token, a pool's colour, its keys, and the
// Keys view's sections. Pure functions over the API's values, so they are tested on their own; every
// fact comes from the gateway (which keys a pool holds is `key_ids`, resolved by the gateway).

import type { Decision, KeyInfo, PoolInfo } from "../api/types";
import type { Tone } from "./words";

/** The built-in pool that holds every key. */
export const ALL = "all";

/** How a request's token is named: its name, or the environment's nameless `KEYMUX_CLIENT_TOKEN`. */
export function tokenName(token: string): string {
  return token === "" ? "KEYMUX_CLIENT_TOKEN" : token;
}

/** The fallback pool that served a request, when none of its own pool's keys could. */
export function fallbackPool(d: Decision): string | null {
  for (const r of d.reasons) if (r.rule === "pool_fallback") return r.to;
  return null;
}

/** Colours for the user's pools, in their order; `all` stays grey so a pool of its own stands out. */
const POOL_TONES: Tone[] = ["accent", "teal", "violet", "info"];

/** A pool's colour: by its place in the user's list, so two pools side by side never share one. */
export function poolTone(name: string, pools: PoolInfo[]): Tone {
  if (name.toLowerCase() === ALL) return "muted";
  const user = pools.filter((p) => !p.builtin);
  const i = user.findIndex((p) => p.name.toLowerCase() === name.toLowerCase());
  if (i >= 0) return POOL_TONES[i % POOL_TONES.length]!;
  // A pool the gateway no longer lists (a request from before it was removed).
  return "muted";
}

/** The keys of a pool, in the gateway's order of keys. */
export function keysOf(pool: PoolInfo, keys: KeyInfo[]): KeyInfo[] {
  const ids = new Set(pool.key_ids);
  return keys.filter((k) => ids.has(k.id));
}

/** "2/3 ready": how many of a pool's keys can take a request now. */
export function readyText(pool: PoolInfo): string {
  return `${pool.usable}/${pool.key_ids.length} ready`;
}

/** What becomes of the requests of a pool with no keys. */
export function emptyPoolSentence(pool: PoolInfo): string {
  if (pool.fallback.length === 0) return "No keys: its requests get 503.";
  return `No keys: its requests go to its fallback pool${pool.fallback.length === 1 ? "" : "s"} (${pool.fallback.join(", ")}).`;
}

/** Which keys the requests of a pool's tokens reach, to end a sentence ("Its requests reach …"). */
export function reachOf(pool: PoolInfo | undefined, keys: KeyInfo[]): string {
  if (!pool || pool.builtin) return "every key";
  const members = keysOf(pool, keys).map((k) => k.label);
  const fallback = pool.fallback.join(", then ");
  if (members.length === 0) {
    return fallback ? `no key of the pool (it is empty), only its fallback ${fallback}` : "no key at all (the pool is empty): they get 503";
  }
  return `only ${members.join(", ")}${fallback ? `, then (only when none of them can serve) ${fallback}` : ""}`;
}

/** A pool's policies in words: the priority tier, and the way its keys go out. */
export function policySentence(pool: PoolInfo): string {
  if (pool.builtin) return "Every tier allowed; its keys go out as their own pools say.";
  const tier = !pool.allow_priority
    ? "Requests for the priority tier (Fast mode) or ultrafast are sent as standard"
    : pool.allow_ultrafast
      ? "The priority tier (Fast mode) and ultrafast are allowed"
      : "The priority tier (Fast mode) is allowed; ultrafast requests are sent as priority";
  const login = pool.proxy_login ? " (its user and password kept in the keychain)" : "";
  return `${tier}; its keys go out ${pool.proxy ? `through the proxy ${pool.proxy}${login}` : "direct"}.`;
}

/** What a pool's fallbacks mean, in words. */
export function fallbackSentence(pool: PoolInfo): string {
  if (pool.builtin) return "It holds every key, so it needs no fallback.";
  if (pool.fallback.length === 0) return "None: when none of its keys can serve, its clients wait (429) or get 503.";
  return `Only when none of its keys can serve: ${pool.fallback.join(", then ")}.`;
}

/** One section of the Keys view: a pool (or none, for keys in no pool of the user's) and its keys. */
export interface KeySection {
  pool: PoolInfo | null;
  keys: KeyInfo[];
}

/**
 * The Keys view's sections. `chosen` is a pool's name, or "" for every key: each pool of the user's
 * with its keys (a key in two pools shows in both), then the keys in none of them. Without pools of
 * the user's there is nothing to group by: null.
 */
export function keySections(keys: KeyInfo[], pools: PoolInfo[], chosen: string): KeySection[] | null {
  const user = pools.filter((p) => !p.builtin);
  if (chosen !== "") {
    const pool = pools.find((p) => p.name === chosen);
    return pool ? [{ pool, keys: keysOf(pool, keys) }] : [];
  }
  if (user.length === 0) return null;
  const sections: KeySection[] = user.map((pool) => ({ pool, keys: keysOf(pool, keys) }));
  const pooled = new Set(user.flatMap((p) => p.key_ids));
  const rest = keys.filter((k) => !pooled.has(k.id));
  if (rest.length > 0) sections.push({ pool: null, keys: rest });
  return sections;
}
