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
