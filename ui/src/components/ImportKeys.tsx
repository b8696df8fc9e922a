import { useEffect, useState } from "preact/hooks";
import { get, messageOf, post } from "../api/client";
import type { ImportDone, ImportOffer } from "../api/types";
import { refreshStatus } from "../state/store";
import { Notice } from "./Notice";

/**
 * The first-run offer: the OpenAI API keys this machine already has in plaintext (OPENAI_API_KEY, Codex's
 * auth.json, pi's files), masked, with where each is. Nothing is imported until the person picks keys
 * and says so; the plaintext copies go only when asked (a backup is kept beside each file). Shown on the
 * first-run screen, and on the Keys view while a key found is not in the pool.
 */
export function ImportKeys({ firstRun = false }: { firstRun?: boolean }) {
  const [offer, setOffer] = useState<ImportOffer | null>(null);
  const [picked, setPicked] = useState<Set<string>>(new Set());
  const [removeCopies, setRemoveCopies] = useState(false);
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState<{ ok: boolean; text: string } | null>(null);

  const load = async () => {
    const found = await get<ImportOffer>("import");
    setOffer(found);
    setPicked(new Set(found.keys.filter((k) => k.pooled_as === null).map((k) => k.fingerprint)));
  };
  useEffect(() => {
    load().catch(() => setOffer(null));
  }, []);

  // Past the first run, the offer shows only while a key found is not in the pool yet.
  const fresh = offer?.keys.filter((k) => k.pooled_as === null).length ?? 0;
  if (offer === null || (fresh === 0 && !(firstRun && offer.refusals.length > 0))) return null;
  const toggle = (fingerprint: string, on: boolean) => {
    const next = new Set(picked);
    if (on) next.add(fingerprint);
    else next.delete(fingerprint);
    setPicked(next);
  };
  const submit = async () => {
    setBusy(true);
    setResult(null);
    try {
      const done = await post<ImportDone>("import", { fingerprints: [...picked], remove_plaintext: removeCopies });
      const failed = done.not_imported.map((n) => `${n.label}: ${n.message}`);
      const text = [done.imported.length > 0 ? `Imported ${done.imported.join(", ")}.` : "", ...failed, ...done.notes].filter(Boolean).join(" ");
      setResult({ ok: failed.length === 0, text });
      await Promise.all([load(), refreshStatus()]);
    } catch (e) {
      setResult({ ok: false, text: messageOf(e) });
    } finally {
      setBusy(false);
    }
  };
  return (
    <div class="card import-keys" data-testid="import-keys">
      <h2>Keys already on this machine</h2>
      <p class="muted small">
        {offer.keys.some((k) => k.provider === "chatgpt")
          ? "Keymux found these OpenAI API keys in plaintext, and the ChatGPT plan Codex is logged in to. Pick the ones to move into the keychain: each key is probed once to learn its organization; the plan then takes new sessions first, and Keymux keeps its login fresh."
          : "Keymux found these OpenAI API keys in plaintext. Pick the ones to move into the keychain; each is probed once to learn its organization."}
      </p>
      <ul class="import-list">
        {offer.keys.map((k) => (
          <li key={k.fingerprint}>
            <label class="check">
              <input type="checkbox" checked={picked.has(k.fingerprint)} disabled={busy || k.pooled_as !== null} onChange={(e) => toggle(k.fingerprint, e.currentTarget.checked)} />
              <code>{k.masked}</code>
              <strong>{k.label}</strong>
              <span class="muted small">{k.pooled_as !== null ? `in the pool as ${k.pooled_as}` : k.source}</span>
            </label>
          </li>
        ))}
      </ul>
      {offer.notes.map((n) => (
        <p key={n} class="muted small">
          {n}
        </p>
      ))}
      {offer.refusals.map((r) => (
        <Notice key={r} kind="error">
          {r}
        </Notice>
      ))}
      <label class="check">
        <input type="checkbox" checked={removeCopies} onChange={(e) => setRemoveCopies(e.currentTarget.checked)} data-testid="import-remove" />
        <span>Then remove the plaintext copy from each file (a backup is kept beside it)</span>
      </label>
      <div class="actions start">
        <button type="button" class="button primary" disabled={busy || picked.size === 0} onClick={submit} data-testid="import-submit">
          Import {picked.size} key{picked.size === 1 ? "" : "s"}
        </button>
      </div>
      {result && <Notice kind={result.ok ? "ok" : "error"}>{result.text}</Notice>}
    </div>
  );
}
