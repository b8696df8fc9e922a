import type { KeyInfo } from "../api/types";

/**
 * What adding a key came to, in words: the gateway probes a new key before it answers, so the form
 * can say what the provider said, and what to do when it refused the key or could not be reached.
 */
export function probeVerdict(label: string, added: KeyInfo | null): { ok: boolean; text: string } {
  if (!added) return { ok: true, text: `Key “${label}” added.` };
  const where = added.org ? ` Organization ${added.org}.` : "";
  switch (added.health) {
    case "rejected":
      return {
        ok: false,
        text: `Key “${label}” was added, but the provider refused it${added.last_status ? ` (${added.last_status})` : ""}: check it, or replace its secret with \`keymux keys set ${label} --secret\`.`,
      };
    case "unreachable":
      return {
        ok: false,
        text: `Key “${label}” was added, but the provider could not be reached at ${added.base_url ?? "the default upstream"}: check its base URL. Keymux tries it again in the background.`,
      };
    case "ready":
    case "cooling":
    case "quota_exhausted":
    case "disabled": {
      const state = added.health === "ready" ? "" : ` It is ${added.health.replace("_", " ")}.`;
      return { ok: true, text: `Key “${label}” added; the provider accepted it.${where}${state}` };
    }
  }
}

/** Where new sessions go while a ChatGPT plan is in the pool, as the status bar and the plan's card say it. */
export type PlanState =
  | { kind: "first"; key: KeyInfo }
  | { kind: "used_up"; key: KeyInfo; until: number }
  | { kind: "unavailable"; key: KeyInfo };

/**
 * The pool's ChatGPT plan and where new sessions go: to it first while it is open, to the API keys
 * while it is used up (until its reset, as the gateway reports it) or otherwise unusable. `null`
 * without a plan. The same words as the tray's menu line.
 */
export function planState(all: KeyInfo[]): PlanState | null {
  const key = all.find((k) => k.plan !== null);
  return key ? planStateOf(key) : null;
}

/** Where new sessions go for one plan key (see [`planState`]). */
export function planStateOf(key: KeyInfo): PlanState {
  if (key.plan_used_up_until_unix_ms !== null) return { kind: "used_up", key, until: key.plan_used_up_until_unix_ms };
  return key.health === "ready" ? { kind: "first", key } : { kind: "unavailable", key };
}
