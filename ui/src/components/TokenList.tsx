import { useEffect, useState } from "preact/hooks";
import { del, get, messageOf, post } from "../api/client";
import type { CreatedToken, TokenInfo } from "../api/types";
import { date } from "../lib/format";
import { tokensVersion } from "../state/store";
import { ConfirmDialog } from "./ConfirmDialog";
import { CopyButton } from "./CopyButton";
import { Notice } from "./Notice";

/** The local client tokens: listed by name, created (shown once), revoked. */
export function TokenList() {
  const [tokens, setTokens] = useState<TokenInfo[] | null>(null);
  const [name, setName] = useState("");
  const [created, setCreated] = useState<CreatedToken | null>(null);
  const [revoking, setRevoking] = useState<TokenInfo | null>(null);
  const [busy, setBusy] = useState(false);
  const [message, setMessage] = useState<{ ok: boolean; text: string } | null>(null);
  const version = tokensVersion.value;

  useEffect(() => {
    let alive = true;
    get<TokenInfo[]>("tokens")
      .then((t) => alive && setTokens(t))
      .catch((e) => alive && setMessage({ ok: false, text: messageOf(e) }));
    return () => {
      alive = false;
    };
  }, [version]);

  const create = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setMessage(null);
    try {
      const t = await post<CreatedToken>("tokens", { name: name.trim() });
      setCreated(t);
      setName("");
      tokensVersion.value++;
    } catch (err) {
      setMessage({ ok: false, text: messageOf(err) });
    } finally {
      setBusy(false);
    }
  };
  const revoke = async () => {
    if (!revoking) return;
    setBusy(true);
    try {
      await del(`tokens/${encodeURIComponent(revoking.id)}`);
      setMessage({ ok: true, text: `Token “${revoking.name}” revoked: clients using it are refused from their next request.` });
      if (created?.token.id === revoking.id) setCreated(null);
      tokensVersion.value++;
    } catch (err) {
      setMessage({ ok: false, text: messageOf(err) });
    } finally {
      setRevoking(null);
      setBusy(false);
    }
  };

  return (
    <div class="tokens">
      {created && (
        <div class="created-token" role="status" data-testid="created-token">
          <p>
            <strong>Token “{created.token.name}” created.</strong> Copy it now: you won't see it again.
          </p>
          <div class="secret-row">
            <code class="secret">{created.secret}</code>
            <CopyButton text={created.secret} />
          </div>
          <pre class="code small">
            <code>export KEYMUX_TOKEN={created.secret}</code>
          </pre>
          <button type="button" class="button small ghost" onClick={() => setCreated(null)}>
            I have copied it
          </button>
        </div>
      )}
      {tokens === null ? (
        <p class="muted">Loading…</p>
      ) : tokens.length === 0 ? (
        <p class="muted">No client tokens: no client can use Keymux yet. Create one below.</p>
      ) : (
        <ul class="token-list" data-testid="token-list">
          {tokens.map((t) => (
            <li key={t.id}>
              <span class="token-name">{t.name}</span>
              <span class="muted small num">{t.created_unix ? `created ${date(t.created_unix)}` : "from the environment"}</span>
              <button type="button" class="button small danger-ghost" onClick={() => setRevoking(t)}>
                Revoke
              </button>
            </li>
          ))}
        </ul>
      )}
      <form class="inline-form" onSubmit={create}>
        <label>
          <span class="sr-only">Token name</span>
          <input required maxLength={64} placeholder="name, e.g. codex" value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </label>
        <button type="submit" class="button primary small" disabled={busy}>
          Create token
        </button>
      </form>
      {message && <Notice kind={message.ok ? "ok" : "error"}>{message.text}</Notice>}
      <ConfirmDialog
        open={revoking !== null}
        title={`Revoke ${revoking?.name ?? "token"}?`}
        confirm="Revoke token"
        busy={busy}
        onConfirm={revoke}
        onCancel={() => setRevoking(null)}
      >
        <p>
          Clients using <strong>{revoking?.name}</strong> are refused from their next request. Give them a new token to
          continue.
        </p>
      </ConfirmDialog>
    </div>
  );
}
