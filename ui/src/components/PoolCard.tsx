import { useState } from "preact/hooks";
import { del, messageOf } from "../api/client";
import type { PoolInfo } from "../api/types";
import { usd } from "../lib/format";
import { emptyPoolSentence, fallbackSentence, keysOf, policySentence } from "../lib/pools";
import { HEALTH } from "../lib/words";
import { NO_FILTERS, keysPool, liveFilters } from "../state/filters";
import { go } from "../state/route";
import { keys, refreshStatus } from "../state/store";
import { Tag } from "./Badge";
import { Countdown } from "./Countdown";
import { ConfirmDialog } from "./ConfirmDialog";
import { Notice } from "./Notice";
import { PoolBadge } from "./PoolBadge";
import { PoolHeadroom } from "./PoolHeadroom";

interface Props {
  pool: PoolInfo;
  onEdit: (pool: PoolInfo) => void;
}

/** Why a pool cannot be changed here, or null when it can. */
function locked(pool: PoolInfo): string | null {
  if (pool.builtin) return "Built in: it always holds every key.";
  if (pool.from_env) return `Set by KEYMUX_POOL_${pool.name.toUpperCase()}: change the environment and restart.`;
  return null;
}

/** One pool: its keys, fallbacks, tokens and headroom, and what can be done to it. */
export function PoolCard({ pool, onEdit }: Props) {
  const [removing, setRemoving] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const members = keysOf(pool, keys.value);
  const why = locked(pool);

  const remove = async () => {
    setBusy(true);
    setError(null);
    try {
      await del(`pools/${encodeURIComponent(pool.name)}`);
      await refreshStatus();
    } catch (e) {
      setError(messageOf(e));
    } finally {
      setRemoving(false);
      setBusy(false);
    }
  };
  const showRequests = () => {
    liveFilters.value = { ...NO_FILTERS, pool: pool.name };
    go("live");
  };
  const showKeys = () => {
    keysPool.value = pool.builtin ? "" : pool.name;
    go("keys");
  };

  return (
    <article class="card pool-card" data-testid="pool-card" data-pool={pool.name}>
      <header class="pool-card-head">
        <div class="pool-card-title">
          <h2>
            <PoolBadge name={pool.name} />
          </h2>
          {pool.builtin && <Tag tone="muted">built-in</Tag>}
          {pool.from_env && <Tag tone="muted">from the environment</Tag>}
        </div>
        <PoolHeadroom pool={pool} />
      </header>
      <dl class="facts pool-facts">
        <dt>Keys</dt>
        <dd data-testid="pool-keys-list">
          {members.length === 0 ? (
            <span class="pool-empty-line" data-testid="pool-empty">
              {emptyPoolSentence(pool)}
            </span>
          ) : (
            <span class="key-chips">
              {members.map((k) => (
                <span class="key-chip" key={k.id} data-label={k.label}>
                  <span class={`dot tone-${HEALTH[k.health].tone}`} title={HEALTH[k.health].name} />
                  <span class="key-label">{k.label}</span>
                  {k.org && <span class="org">{k.org}</span>}
                </span>
              ))}
            </span>
          )}
        </dd>
        <dt>Fallback</dt>
        <dd data-testid="pool-fallback">{fallbackSentence(pool)}</dd>
        <dt>Policies</dt>
        <dd data-testid="pool-policies">{policySentence(pool)}</dd>
        <dt>Tokens</dt>
        <dd data-testid="pool-tokens">
          {pool.tokens.length > 0 ? (
            pool.tokens.join(", ")
          ) : (
            <span class="muted">
              None yet: bind one on the <a href="#/connect">Connect</a> page.
            </span>
          )}
        </dd>
        <dt>Spent</dt>
        <dd data-testid="pool-spend">
          {usd(pool.spend_today_usd)} today · {usd(pool.spend_month_usd)} this month
          {pool.unpriced_requests_month > 0 && <span class="muted"> · {pool.unpriced_requests_month} unpriced</span>}
        </dd>
        {(pool.daily_budget_usd !== null || pool.monthly_budget_usd !== null) && (
          <>
            <dt>Budget</dt>
            <dd data-testid="pool-budget">
              {[
                pool.daily_budget_usd !== null ? `${usd(pool.daily_budget_usd)} a day` : "",
                pool.monthly_budget_usd !== null ? `${usd(pool.monthly_budget_usd)} a month` : "",
              ]
                .filter(Boolean)
                .join(" · ")}
              {pool.reserve_at !== null && <span class="muted"> · new sessions stop at {pool.reserve_at} %</span>}
              {pool.on_limit === "stop" && <span class="muted"> · stops at 100 %</span>}{" "}
              {pool.budget.state !== "open" && (
                <Tag tone={pool.budget.state === "stopped" ? "bad" : "warn"}>
                  {pool.budget.state === "stopped" ? "stopped" : "no new sessions"}
                </Tag>
              )}
              {pool.budget_runs_out_unix_ms !== null && pool.budget.state === "open" && (
                <span class="muted" data-testid="pool-runs-out" title="When its budget runs out at its keys' pace over the last hour">
                  {" "}
                  · runs out ~{new Date(pool.budget_runs_out_unix_ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })}
                </span>
              )}
            </dd>
          </>
        )}
        {pool.window_runs_out_unix_ms !== null && (
          <>
            <dt>Rate limits</dt>
            <dd data-testid="pool-window-runs-out" title="Every usable key's rate-limit window runs out at its pace before it refills">
              every key's window runs out in <Countdown until={pool.window_runs_out_unix_ms} />
            </dd>
          </>
        )}
      </dl>
      <footer class="key-actions pool-actions">
        <button type="button" class="button small" onClick={showRequests}>
          Show requests
        </button>
        <button type="button" class="button small" onClick={showKeys}>
          Show keys
        </button>
        {why === null ? (
          <>
            <button type="button" class="button small" onClick={() => onEdit(pool)} data-testid="pool-edit">
              Edit
            </button>
            <button type="button" class="button small danger-ghost" onClick={() => setRemoving(true)} data-testid="pool-delete">
              Delete
            </button>
          </>
        ) : (
          <span class="muted small pool-locked">{why}</span>
        )}
      </footer>
      {error && (
        <Notice kind="error">
          <span data-testid="pool-error">{error}</span>
        </Notice>
      )}
      <ConfirmDialog
        open={removing}
        title={`Delete pool ${pool.name}?`}
        confirm="Delete pool"
        busy={busy}
        onConfirm={remove}
        onCancel={() => setRemoving(false)}
      >
        <p>
          The pool <strong>{pool.name}</strong> goes; its keys stay, in their other pools and in <em>all</em>.
        </p>
        {pool.tokens.length > 0 && (
          <p>
            {pool.tokens.join(", ")} {pool.tokens.length === 1 ? "is" : "are"} bound to it: Keymux keeps the pool until{" "}
            {pool.tokens.length === 1 ? "that token is" : "they are"} moved to another pool (on the Connect page) or revoked.
          </p>
        )}
      </ConfirmDialog>
    </article>
  );
}
