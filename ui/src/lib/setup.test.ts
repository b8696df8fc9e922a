import { describe, expect, it } from "vitest";
import { remedyOf, setupLabel } from "./setup";

describe("setup", () => {
  it("offers the one choice a refusal names, and nothing for other refusals", () => {
    expect(remedyOf("setup_needs_custom_provider")).toBe("custom_provider");
    expect(remedyOf("setup_needs_force")).toBe("force");
    expect(remedyOf("setup_changed_since_preview")).toBeNull();
    expect(remedyOf(null)).toBeNull();
  });

  it("names the clients as people write them", () => {
    expect(setupLabel("codex")).toBe("Codex");
    expect(setupLabel("pi")).toBe("pi");
  });
});
