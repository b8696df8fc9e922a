// The settings a user pastes into Codex and pi, with the gateway's real base URL.

/** `~/.codex/config.toml`: Keymux as Codex's model provider. */
export function codexConfig(baseUrl: string, websockets: boolean): string {
  return [
    'model_provider = "keymux"',
    "",
    "[model_providers.keymux]",
    'name = "Keymux"',
    `base_url = ${JSON.stringify(baseUrl)}`,
    'wire_api = "responses"',
    'env_key = "KEYMUX_TOKEN"',
    websockets ? "supports_websockets = true" : "# supports_websockets = true",
    "",
  ].join("\n");
}

/** pi's `models.json`: Keymux as a provider of the Responses API. */
export function piModels(baseUrl: string): string {
  const models = {
    providers: {
      keymux: {
        baseUrl,
        api: "openai-responses",
        apiKey: "KEYMUX_TOKEN",
        models: [
          {
            id: "gpt-5.5",
            name: "gpt-5.5 via Keymux",
            reasoning: true,
            input: ["text", "image"],
            contextWindow: 400000,
            maxTokens: 128000,
          },
        ],
      },
    },
  };
  return `${JSON.stringify(models, null, 2)}\n`;
}
