// The one mapping from the API's enums to the words the dashboard shows. Each table is a `Record` over
// the generated union, so a value the gateway adds later fails the type check here instead of showing
// up blank.

import type {
  AffinitySource,
  AffinityState,
  Binding,
  ClientKind,
  FailureKind,
  HealthState,
  Operation,
  ProviderId,
  Route,
} from "../api/types";

export const CLIENT: Record<ClientKind, string> = {
  codex_exec: "Codex exec",
  codex_tui: "Codex",
  codex_vscode: "Codex VS Code",
  pi: "pi",
  other: "other",
};

export const PROVIDER: Record<ProviderId, string> = {
  openai: "OpenAI",
  azure: "Azure OpenAI",
  chatgpt: "ChatGPT plan",
};

export const OPERATION: Record<Operation, string> = {
  responses_create: "responses",
  responses_get: "get response",
  responses_delete: "delete response",
  responses_cancel: "cancel response",
  responses_input_items: "input items",
  responses_compact: "compact",
  chat_completions: "chat",
  embeddings: "embeddings",
  models: "models",
  other: "other",
};

/** How a request was placed: a short name and the sentence that explains it. */
export const ROUTE: Record<Route, { name: string; why: string }> = {
  refused: { name: "Refused", why: "No key could take this request." },
  continuity: {
    name: "Continuity",
    why: "It continues a stored response, which only the key that holds it can serve.",
  },
  web_socket_bound: {
    name: "WebSocket bound",
    why: "A turn on a Responses WebSocket stays on the upstream socket, and key, its connection is bound to.",
  },
  pinned: {
    name: "Pinned to organization",
    why: "It replays encrypted reasoning that only the organization that produced it can read.",
  },
  session_hint: {
    name: "Session hint",
    why: "A new WebSocket went to the organization that served this session before.",
  },
  finding_org: {
    name: "Finding organization",
    why: "It replays encrypted reasoning made before Keymux, so one key of each organization was tried until one could read it.",
  },
  affinity: {
    name: "Cache affinity",
    why: "It went to the key (or organization) whose prompt cache is warm for this session.",
  },
  balanced: {
    name: "Balanced",
    why: "Nothing ties it to a key, so the key with the most headroom for its load took it.",
  },
};

export const AFFINITY_SOURCE: Record<AffinitySource, string> = {
  none: "no signal",
  prompt_cache_key: "prompt_cache_key",
  prompt_prefix: "prompt prefix",
};

export const AFFINITY_STATE: Record<AffinityState, { name: string; why: string }> = {
  no_signal: { name: "no signal", why: "The request carried no cache key and no long prompt prefix." },
  cache_miss: { name: "cache miss", why: "Nothing was remembered for its cache signal yet: a new session." },
  hit: { name: "hit", why: "The key that last served this prompt to a successful end was chosen again." },
  target_unavailable: {
    name: "target unavailable",
    why: "The remembered key could not take it (cooling, rejected, gone or busy).",
  },
  disabled: { name: "disabled", why: "Prompt-cache affinity is switched off." },
  cache_unavailable: { name: "table unavailable", why: "The affinity table could not be consulted." },
  short_prompt: {
    name: "short prompt",
    why: "The prompt is shorter than the provider caches (1,024 tokens), so it was balanced by headroom.",
  },
};

export const FAILURE: Record<FailureKind, string> = {
  rate_limited: "rate limited (429)",
  quota_exhausted: "quota exhausted",
  invalid_key: "key rejected",
  model_unavailable: "model unavailable",
  upstream_5xx: "provider error (5xx)",
  timeout: "timed out",
  upstream_unreachable: "provider unreachable",
  upstream_cut: "stream cut",
  client_error: "client error (4xx)",
  wrong_organization: "organization cannot read it",
  client_cancelled: "client went away",
};

export const HEALTH: Record<HealthState, { name: string; tone: Tone }> = {
  ready: { name: "ready", tone: "ok" },
  cooling: { name: "cooling", tone: "info" },
  quota_exhausted: { name: "quota exhausted", tone: "warn" },
  rejected: { name: "rejected", tone: "bad" },
  disabled: { name: "disabled", tone: "muted" },
  unreachable: { name: "unreachable", tone: "bad" },
};

export const BINDING: Record<Binding, string> = {
  encrypted_content: "encrypted reasoning (organization)",
  continuity: "stored response (key)",
  web_socket: "WebSocket (key)",
  none: "not pinned",
};

/** Colour families the stylesheet knows. */
export type Tone = "ok" | "info" | "warn" | "bad" | "muted" | "accent" | "violet" | "teal";
