import { describe, expect, it } from "vitest";
import type { KeyInfo } from "../api/types";
import { planState, probeVerdict } from "./keys";
import { keyInfo } from "./testing";

function key(over: Partial<KeyInfo>): KeyInfo {
  return { health: "ready", org: "org-a", last_status: 200, base_url: null, ...over } as KeyInfo;
}

describe("probeVerdict", () => {
  it("says the provider accepted a good key, with its organization", () => {
    expect(probeVerdict("work", key({}))).toEqual({ ok: true, text: "Key “work” added; the provider accepted it. Organization org-a." });
  });

  it("says what to do when the provider refused the key", () => {
    const v = probeVerdict("typo", key({ health: "rejected", last_status: 401, org: null }));
    expect(v.ok).toBe(false);
    expect(v.text).toContain("refused it (401)");
    expect(v.text).toContain("keymux keys set typo --secret");
  });

  it("names the base URL that could not be reached", () => {
    const v = probeVerdict("az", key({ health: "unreachable", base_url: "https://RESOURCE.openai.azure.com/openai/v1" }));
    expect(v.ok).toBe(false);
    expect(v.text).toContain("https://RESOURCE.openai.azure.com/openai/v1");
  });
});

describe("planState", () => {
  const plan = { account_id: "acct", plan_type: "plus", expires_unix: null };
  it("is null without a plan", () => {
    expect(planState([keyInfo("k_a1")])).toBeNull();
  });
  it("sends new sessions to an open plan first", () => {
    const p = keyInfo("k_chatgpt", { provider: "chatgpt", plan });
    expect(planState([keyInfo("k_a1"), p])).toEqual({ kind: "first", key: p });
  });
  it("says until when a used-up plan sends them to the API keys, even while its health is ready", () => {
    const p = keyInfo("k_chatgpt", { provider: "chatgpt", plan, plan_used_up_until_unix_ms: 5_000 });
    expect(planState([p])).toEqual({ kind: "used_up", key: p, until: 5_000 });
  });
  it("says a plan that cannot serve for another reason is unavailable", () => {
    const p = keyInfo("k_chatgpt", { provider: "chatgpt", plan, health: "rejected" });
    expect(planState([p])?.kind).toBe("unavailable");
  });
});
