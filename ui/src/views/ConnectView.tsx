import { useState } from "preact/hooks";
import type { CreatedToken } from "../api/types";
import { ClientChecks } from "../components/ClientChecks";
import { CopyButton } from "../components/CopyButton";
import { NewClient } from "../components/NewClient";
import { SetupClient } from "../components/SetupClient";
import { TokenList } from "../components/TokenList";
import { codexConfig, piModels } from "../lib/snippets";
import { status } from "../state/store";

/** A token for a client in a pool, what to paste into Codex and pi, and the client tokens. */
export function ConnectView() {
  const [websockets, setWebsockets] = useState(false);
  const [created, setCreated] = useState<CreatedToken | null>(null);
  const base = status.value?.gateway.base_url ?? "http://127.0.0.1:8787/v1";
  const codex = codexConfig(base, websockets);
  const pi = piModels(base);
  return (
    <section class="view connect" aria-labelledby="connect-title">
      <header class="view-head">
        <h1 id="connect-title">Connect</h1>
      </header>

      <ClientChecks />

      <div class="card">
        <SetupClient client="codex" />
      </div>
      <div class="card">
        <SetupClient client="pi" />
      </div>

      <NewClient created={created} onCreated={setCreated} />

      <div class="card">
        <h2>Base URL</h2>
        <div class="secret-row">
          <code class="base-url" data-testid="base-url">
            {base}
          </code>
          <CopyButton text={base} />
        </div>
        <p class="muted small">
          Clients send a Keymux client token, never an OpenAI key. Put one in the environment of the shell that runs
          them:
        </p>
        <pre class="code small" data-testid="token-line">
          <code>export KEYMUX_TOKEN=$(keymux token show {created?.token.name ?? "default"})</code>
        </pre>
      </div>

      <div class="card">
        <div class="card-head">
          <h2>
            Codex CLI by hand <span class="muted small">~/.codex/config.toml</span>
          </h2>
          <CopyButton text={codex} />
        </div>
        <p class="muted small">
          Keymux's own provider, for a ChatGPT login or by hand: Codex records these sessions under <code>keymux</code>, apart from the ones made before. A new file takes all of it. In an existing file, the first line goes at the top, before any{" "}
          <code>[section]</code>; the <code>[model_providers.keymux]</code> section can go anywhere below it.
        </p>
        <pre class="code" data-testid="codex-snippet">
          {codex}
        </pre>
        <label class="check">
          <input type="checkbox" checked={websockets} onChange={(e) => setWebsockets(e.currentTarget.checked)} data-testid="ws-toggle" />
          <span>Use the Responses WebSocket (supports_websockets = true)</span>
        </label>
      </div>

      <div class="card">
        <div class="card-head">
          <h2>
            pi by hand <span class="muted small">$PI_CODING_AGENT_DIR/models.json</span>
          </h2>
          <CopyButton text={pi} />
        </div>
        <pre class="code" data-testid="pi-snippet">
          {pi}
        </pre>
      </div>

      <div class="card">
        <h2>Client tokens</h2>
        <TokenList onRevoked={(id) => created?.token.id === id && setCreated(null)} />
      </div>
    </section>
  );
}
