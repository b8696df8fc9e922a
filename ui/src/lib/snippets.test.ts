import { describe, expect, it } from "vitest";
import { codexConfig, piModels } from "./snippets";

describe("client settings", () => {
  it("gives Codex a provider block with the gateway's own base URL", () => {
    expect(codexConfig("http://127.0.0.1:40123/v1", false)).toBe(
      [
        'model_provider = "keymux"',
        "",
        "[model_providers.keymux]",
        'name = "Keymux"',
        'base_url = "http://127.0.0.1:40123/v1"',
        'wire_api = "responses"',
        'env_key = "KEYMUX_TOKEN"',
        "# supports_websockets = true",
        "",
      ].join("\n"),
    );
  });

  it("switches WebSockets on only when asked", () => {
    expect(codexConfig("http://x/v1", true)).toContain("\nsupports_websockets = true\n");
    expect(codexConfig("http://x/v1", false)).not.toMatch(/^supports_websockets/m);
  });

  it("gives pi the Responses API and the token's variable name, not a token", () => {
    const json = JSON.parse(piModels("http://127.0.0.1:8787/v1"));
    expect(json.providers.keymux.baseUrl).toBe("http://127.0.0.1:8787/v1");
    expect(json.providers.keymux.api).toBe("openai-responses");
    expect(json.providers.keymux.apiKey).toBe("KEYMUX_TOKEN");
  });
});
