import { useRef, useState } from "preact/hooks";
import { messageOf, post } from "../api/client";
import { DEFAULT_KEY_SETTINGS, DEFAULT_MONEY_BUDGET, type KeyInfo, type NewKey, type ProviderId } from "../api/types";
import { probeVerdict } from "../lib/keys";
import { PROVIDER } from "../lib/words";
import { refreshStatus } from "../state/store";
import { Notice } from "./Notice";

/**
 * Adds a key. The secret is read from its field when the form is sent, goes to the gateway once and is
 * cleared at once: it is never held in the page's state.
 */
export function AddKeyForm({ onDone }: { onDone?: () => void }) {
  const secretRef = useRef<HTMLInputElement>(null);
  const [label, setLabel] = useState("");
  const [provider, setProvider] = useState<ProviderId>("openai");
  const [baseUrl, setBaseUrl] = useState("");
  const [org, setOrg] = useState("");
  const [priority, setPriority] = useState(String(DEFAULT_KEY_SETTINGS.priority));
  const [budget, setBudget] = useState("");
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState<{ ok: boolean; text: string } | null>(null);

  const submit = async (e: Event) => {
    e.preventDefault();
    const field = secretRef.current;
    if (!field) return;
    const body: NewKey = {
      ...DEFAULT_KEY_SETTINGS,
      ...DEFAULT_MONEY_BUDGET,
      label: label.trim(),
      provider,
      base_url: baseUrl.trim() || null,
      org: org.trim() || null,
      priority: Number(priority) || DEFAULT_KEY_SETTINGS.priority,
      daily_token_budget: budget.trim() ? Number(budget) : null,
      secret: field.value,
    };
    field.value = "";
    setBusy(true);
    setResult(null);
    try {
      const added = await post<KeyInfo | null>("keys", body);
      setResult(probeVerdict(body.label, added));
      setLabel("");
      setBaseUrl("");
      setOrg("");
      setBudget("");
      setPriority(String(DEFAULT_KEY_SETTINGS.priority));
      await refreshStatus();
      onDone?.();
    } catch (err) {
      setResult({ ok: false, text: messageOf(err) });
    } finally {
      setBusy(false);
    }
  };

  return (
    <form class="form add-key" onSubmit={submit} data-testid="add-key-form">
      <div class="grid-2">
        <label>
          <span>Label</span>
          <input name="label" required maxLength={64} placeholder="work" value={label} onInput={(e) => setLabel(e.currentTarget.value)} />
        </label>
        <label>
          <span>Provider</span>
          <select name="provider" value={provider} onChange={(e) => setProvider(e.currentTarget.value as ProviderId)}>
            {(Object.keys(PROVIDER) as ProviderId[]).map((p) => (
              <option key={p} value={p}>
                {PROVIDER[p]}
              </option>
            ))}
          </select>
        </label>
      </div>
      <label>
        <span>API key</span>
        <input
          ref={secretRef}
          name="secret"
          type="password"
          required
          autoComplete="off"
          spellcheck={false}
          placeholder={provider === "azure" ? "Azure resource key" : "sk-…"}
        />
        <small class="muted">Sent once to Keymux, which keeps it in the keychain. It is never shown again.</small>
      </label>
      <label>
        <span>Base URL {provider === "azure" ? "(required for Azure)" : "(optional)"}</span>
        <input
          name="base_url"
          type="url"
          required={provider === "azure"}
          placeholder={provider === "azure" ? "https://RESOURCE.openai.azure.com/openai/v1" : "default upstream"}
          value={baseUrl}
          onInput={(e) => setBaseUrl(e.currentTarget.value)}
        />
      </label>
      <div class="grid-3">
        <label>
          <span>Organization</span>
          <input name="org" placeholder="learned" value={org} onInput={(e) => setOrg(e.currentTarget.value)} />
        </label>
        <label>
          <span>Priority</span>
          <input name="priority" type="number" min={0} max={255} value={priority} onInput={(e) => setPriority(e.currentTarget.value)} />
        </label>
        <label>
          <span>Daily tokens</span>
          <input name="budget" type="number" min={1} placeholder="no budget" value={budget} onInput={(e) => setBudget(e.currentTarget.value)} />
        </label>
      </div>
      <div class="actions">
        <button type="submit" class="button primary" disabled={busy} data-testid="add-key-submit">
          {busy ? "Adding and probing…" : "Add key"}
        </button>
      </div>
      {result && (
        <Notice kind={result.ok ? "ok" : "error"}>
          <span data-testid="add-key-result">{result.text}</span>
        </Notice>
      )}
    </form>
  );
}
