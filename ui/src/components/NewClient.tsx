import { useState } from "preact/hooks";
import { messageOf, post } from "../api/client";
import type { CreatedToken, NewToken } from "../api/types";
import { reachOf } from "../lib/pools";
import { keys, pools, tokensVersion } from "../state/store";
import { CopyButton } from "./CopyButton";
import { Notice } from "./Notice";
import { PoolBadge } from "./PoolBadge";

interface Props {
  created: CreatedToken | null;
  onCreated: (token: CreatedToken | null) => void;
}

/** A token for one client, bound to the pool picked here, shown once with the line that uses it. */
export function NewClient({ created, onCreated }: Props) {
  const [pool, setPool] = useState("all");
  const [name, setName] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  // A pool removed since it was picked: back to all.
  const picked = pools.value.some((p) => p.name === pool) ? pool : "all";

  const create = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const body: NewToken = { name: name.trim(), pool: picked };
      onCreated(await post<CreatedToken>("tokens", body));
      setName("");
      tokensVersion.value++;
    } catch (err) {
      setError(messageOf(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <div class="card new-client" data-testid="new-client">
      <h2>A token for a client</h2>
      <p class="muted small">
        One token per client or project. Its pool decides which keys it may reach; you can move it to another pool later.
      </p>
      <form class="new-client-form" onSubmit={create}>
        <label>
          <span>Pool</span>
          <select value={picked} onChange={(e) => setPool(e.currentTarget.value)} data-testid="connect-pool">
            {pools.value.map((p) => (
              <option key={p.name} value={p.name}>
                {p.builtin ? "all (every key)" : `${p.name} (${p.key_ids.length} key${p.key_ids.length === 1 ? "" : "s"})`}
              </option>
            ))}
          </select>
        </label>
        <label class="grow">
          <span>Token name</span>
          <input
            required
            maxLength={64}
            placeholder="e.g. acme-repo"
            value={name}
            onInput={(e) => setName(e.currentTarget.value)}
            data-testid="new-token-name"
          />
        </label>
        <button type="submit" class="button primary" disabled={busy} data-testid="new-token-create">
          Create token
        </button>
      </form>
      <p class="pool-reach small" data-testid="connect-reach">
        <PoolBadge name={picked} /> Its requests reach {reachOf(pools.value.find((p) => p.name === picked), keys.value)}.
      </p>
      {error && <Notice kind="error">{error}</Notice>}
      {created && (
        <div class="created-token" role="status" data-testid="created-token">
          <p>
            <strong>
              Token “{created.token.name}” created in pool <PoolBadge name={created.token.pool} />.
            </strong>{" "}
            Copy it now: you won't see it again.
          </p>
          <div class="secret-row">
            <code class="secret">{created.secret}</code>
            <CopyButton text={created.secret} />
          </div>
          <p class="small">
            In the shell (or the project's environment, such as a direnv <code>.envrc</code>) that runs the client, then use
            the Codex or pi settings below:
          </p>
          <pre class="code small">
            <code>export KEYMUX_TOKEN={created.secret}</code>
          </pre>
          <button type="button" class="button small ghost" onClick={() => onCreated(null)}>
            I have copied it
          </button>
        </div>
      )}
    </div>
  );
}
