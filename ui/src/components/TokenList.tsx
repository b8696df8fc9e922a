import { useEffect, useState } from "preact/hooks";
import { del, get, messageOf, patch } from "../api/client";
import type { TokenChanges, TokenInfo } from "../api/types";
import { date } from "../lib/format";
import { reachOf } from "../lib/pools";
import { keys, pools, refreshStatus, tokensVersion } from "../state/store";
import { ConfirmDialog } from "./ConfirmDialog";
import { Notice } from "./Notice";
import { PoolBadge } from "./PoolBadge";

/** A token and the pool it is about to move to. */
interface Move {
  token: TokenInfo;
  pool: string;
}

/** Whether a token is in the config, where the page can change it (not one from the environment). */
function editable(t: TokenInfo): boolean {
  return t.created_unix !== 0;
}

/** What a move means for the token's requests. */
function moveSentence({ token, pool }: Move): string {
  const reach = reachOf(pools.value.find((p) => p.name === pool), keys.value);
  return `From their next request on, the requests of ${token.name} reach ${reach}.`;
}

/** The local client tokens: listed by name with their pool, moved to another pool, revoked. */
export function TokenList({ onRevoked }: { onRevoked: (id: string) => void }) {
  const [tokens, setTokens] = useState<TokenInfo[] | null>(null);
  const [revoking, setRevoking] = useState<TokenInfo | null>(null);
  const [moving, setMoving] = useState<Move | null>(null);
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

  const revoke = async () => {
    if (!revoking) return;
    setBusy(true);
    try {
      await del(`tokens/${encodeURIComponent(revoking.id)}`);
      setMessage({ ok: true, text: `Token “${revoking.name}” revoked: clients using it are refused from their next request.` });
      onRevoked(revoking.id);
      tokensVersion.value++;
    } catch (err) {
      setMessage({ ok: false, text: messageOf(err) });
    } finally {
      setRevoking(null);
      setBusy(false);
    }
  };
  const move = async () => {
    if (!moving) return;
    setBusy(true);
    try {
      const body: TokenChanges = { pool: moving.pool };
      await patch(`tokens/${encodeURIComponent(moving.token.id)}`, body);
      setMessage({ ok: true, text: `Token “${moving.token.name}” moved to pool ${moving.pool}.` });
      tokensVersion.value++;
      await refreshStatus();
    } catch (err) {
      setMessage({ ok: false, text: messageOf(err) });
    } finally {
      setMoving(null);
      setBusy(false);
    }
  };

  return (
    <div class="tokens">
      {tokens === null ? (
        <p class="muted">Loading…</p>
      ) : tokens.length === 0 ? (
        <p class="muted">No client tokens: no client can use Keymux yet. Create one above.</p>
      ) : (
        <ul class="token-list" data-testid="token-list">
          {tokens.map((t) => (
            <li key={t.id} data-token={t.name}>
              <span class="token-name">{t.name}</span>
              {editable(t) ? (
                <label class="token-pool">
                  <span class="sr-only">Pool of {t.name}</span>
                  <select
                    value={t.pool}
                    onChange={(e) => {
                      const pool = e.currentTarget.value;
                      // The select shows the token's pool until the move is confirmed.
                      e.currentTarget.value = t.pool;
                      if (pool !== t.pool) setMoving({ token: t, pool });
                    }}
                    data-testid="token-pool"
                  >
                    {pools.value.map((p) => (
                      <option key={p.name} value={p.name}>
                        {p.name}
                      </option>
                    ))}
                  </select>
                </label>
              ) : (
                <PoolBadge name={t.pool} />
              )}
              <span class="muted small num token-date">{editable(t) ? `created ${date(t.created_unix)}` : "from the environment"}</span>
              <button type="button" class="button small danger-ghost" onClick={() => setRevoking(t)}>
                Revoke
              </button>
            </li>
          ))}
        </ul>
      )}
      {message && <Notice kind={message.ok ? "ok" : "error"}>{message.text}</Notice>}
      <ConfirmDialog
        open={moving !== null}
        title={`Move ${moving?.token.name ?? "token"} to pool ${moving?.pool ?? ""}?`}
        confirm="Move token"
        tone="primary"
        busy={busy}
        onConfirm={move}
        onCancel={() => setMoving(null)}
      >
        {moving && <p>{moveSentence(moving)}</p>}
        <p class="muted small">Requests it has in flight finish where they are.</p>
      </ConfirmDialog>
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
