import { describe, expect, it } from "vitest";
import type { KeyInfo } from "../api/types";
import { probeVerdict } from "./keys";

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
