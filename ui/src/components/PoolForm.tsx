import { useState } from "preact/hooks";
import { messageOf, patch, post } from "../api/client";
import { DEFAULT_POOL_POLICIES, type PoolChanges, type PoolConfig, type PoolInfo, type PoolPolicies } from "../api/types";
import { HEALTH } from "../lib/words";
import { keys, keysById, pools, refreshStatus } from "../state/store";
import { Dialog } from "./Dialog";
import { budgetOf, budgetWords, MoneyFields, moneyChanges, moneyOf, type Money } from "./MoneyFields";
import { Notice } from "./Notice";
import { PoolBadge } from "./PoolBadge";

interface Props {
  /** The pool to change, or null to create one. */
  pool: PoolInfo | null;
  onClose: () => void;
  /** Called with what was done, once the gateway accepted it. */
  onDone: (what: string) => void;
}

/** The labels of a pool's keys, as the gateway resolved them. */
function labelsOf(pool: PoolInfo | null): string[] {
  if (!pool) return [];
  const byId = keysById.value;
  return pool.key_ids.map((id) => byId.get(id)?.label ?? id);
}

/**
 * Creates a pool or changes its keys and fallbacks: first the choices, then a summary to confirm; the
 * gateway checks it and says what is wrong (a name taken, a fallback cycle) in its own words.
 */
export function PoolForm({ pool, onClose, onDone }: Props) {
  const [name, setName] = useState(pool?.name ?? "");
  const [chosen, setChosen] = useState<string[]>(() => labelsOf(pool));
  const [fallback, setFallback] = useState<string[]>(pool?.fallback ?? []);
  const [money, setMoney] = useState<Money>(() => moneyOf(pool));
  const [tiers, setTiers] = useState<Tiers>(() => tiersOf(pool ?? DEFAULT_POOL_POLICIES));
  const [proxy, setProxy] = useState((pool ?? DEFAULT_POOL_POLICIES).proxy ?? "");
  const [reviewing, setReviewing] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const creating = pool === null;
  const title = creating ? "New pool" : `Edit pool ${pool.name}`;

  // Keep the key list's order, whatever order they were ticked in.
  const toggle = (label: string, on: boolean) =>
    setChosen(keys.value.map((k) => k.label).filter((l) => (l === label ? on : chosen.includes(l))));

  const save = async () => {
    setBusy(true);
    setError(null);
    try {
      if (creating) {
        const body: PoolConfig = {
          name: name.trim(),
          keys: chosen,
          fallback,
          ...tiers,
          proxy: proxy.trim() || null,
          ...budgetOf(money),
        };
        await post("pools", body);
      } else {
        const body: PoolChanges = {
          keys: chosen,
          fallback,
          ...tiers,
          proxy: proxy.trim() || null,
          ...moneyChanges(money, pool),
        };
        await patch(`pools/${encodeURIComponent(pool.name)}`, body);
      }
      await refreshStatus();
      onDone(creating ? `Pool ${name.trim()} created.` : `Pool ${pool.name} changed.`);
    } catch (e) {
      setError(messageOf(e));
    } finally {
      setBusy(false);
    }
  };

  return (
    <Dialog open onClose={onClose} title={title} testid="pool-form">
      {reviewing ? (
        <Review
          name={creating ? name.trim() : pool.name}
          pool={pool}
          chosen={chosen}
          fallback={fallback}
          money={money}
          tiers={tiers}
          proxy={proxy.trim()}
          busy={busy}
          error={error}
          onBack={() => {
            setReviewing(false);
            setError(null);
          }}
          onConfirm={save}
        />
      ) : (
        <form
          class="form"
          onSubmit={(e) => {
            e.preventDefault();
            setReviewing(true);
          }}
        >
          {creating && (
            <label>
              <span>Name</span>
              <input
                name="pool-name"
                required
                maxLength={64}
                placeholder="e.g. work"
                value={name}
                onInput={(e) => setName(e.currentTarget.value)}
              />
            </label>
          )}
          <KeyChecklist chosen={chosen} onToggle={toggle} />
          <FallbackPicker self={pool?.name ?? name.trim()} fallback={fallback} onChange={setFallback} />
          <MoneyFields money={money} onChange={setMoney} testid="pool" about="What its keys spend together, for its tokens' requests." />
          <Policies tiers={tiers} onTiers={setTiers} proxy={proxy} onProxy={setProxy} />
          <div class="actions">
            <button type="button" class="button" onClick={onClose}>
              Cancel
            </button>
            <button type="submit" class="button primary" data-testid="pool-form-next">
              Review
            </button>
          </div>
        </form>
      )}
    </Dialog>
  );
}

/** Every key, with a box to tick for the pool. */
function KeyChecklist({ chosen, onToggle }: { chosen: string[]; onToggle: (label: string, on: boolean) => void }) {
  return (
    <fieldset class="field-group">
      <legend>Keys</legend>
      <p class="muted small">Its tokens reach only these keys. A key may be in several pools.</p>
      <ul class="check-list" data-testid="pool-keys">
        {keys.value.map((k) => {
          const health = HEALTH[k.health];
          return (
            <li key={k.id}>
              <label class="check">
                <input
                  type="checkbox"
                  name="pool-key"
                  value={k.label}
                  checked={chosen.includes(k.label)}
                  onChange={(e) => onToggle(k.label, e.currentTarget.checked)}
                />
                <span class="key-label">{k.label}</span>
                {k.org && <span class="org">{k.org}</span>}
                <span class={`dot tone-${health.tone}`} title={health.name} />
              </label>
            </li>
          );
        })}
      </ul>
    </fieldset>
  );
}

/** The tiers a pool's requests may ask for above the standard one. */
type Tiers = Pick<PoolPolicies, "allow_priority" | "allow_ultrafast">;

function tiersOf({ allow_priority, allow_ultrafast }: Tiers): Tiers {
  return { allow_priority, allow_ultrafast };
}

interface PoliciesProps {
  tiers: Tiers;
  onTiers: (tiers: Tiers) => void;
  proxy: string;
  onProxy: (proxy: string) => void;
}

/** The pool's policies: whether its requests may use the priority and ultrafast tiers, and the proxy its keys go out through. */
function Policies({ tiers, onTiers, proxy, onProxy }: PoliciesProps) {
  return (
    <fieldset class="field-group">
      <legend>Policies</legend>
      <label class="check">
        <input
          type="checkbox"
          name="pool-allow-priority"
          checked={tiers.allow_priority}
          onChange={(e) => onTiers({ ...tiers, allow_priority: e.currentTarget.checked })}
        />
        <span>Allow the priority tier (Codex's Fast mode, billed twice)</span>
      </label>
      <label class="check">
        <input
          type="checkbox"
          name="pool-allow-ultrafast"
          checked={tiers.allow_priority && tiers.allow_ultrafast}
          disabled={!tiers.allow_priority}
          onChange={(e) => onTiers({ ...tiers, allow_ultrafast: e.currentTarget.checked })}
        />
        <span>Allow the ultrafast tier (billed 3× until 28 February 2027, then 6×)</span>
      </label>
      <p class="muted small">
        Off: its requests that ask for priority are sent in the standard tier, those that ask for ultrafast in the
        priority tier (or the standard one), and their decision says so.
      </p>
      <label>
        <span>Proxy</span>
        <input
          name="pool-proxy"
          placeholder="direct (or e.g. http://proxy.example:3128)"
          value={proxy}
          onInput={(e) => onProxy(e.currentTarget.value)}
        />
      </label>
      <p class="muted small">
        Every request of its keys goes through this proxy (http://, https://, socks5:// or socks5h://), probes and
        WebSockets included, and fails rather than go direct. A user and password (http://user:password@host:port) are kept
        in the keychain, never shown again; leave the URL as it is to keep them.
      </p>
    </fieldset>
  );
}

interface FallbackProps {
  self: string;
  fallback: string[];
  onChange: (fallback: string[]) => void;
}

/** The fallback pools, in order: added from a list, moved up, removed. */
function FallbackPicker({ self, fallback, onChange }: FallbackProps) {
  const others = pools.value.map((p) => p.name).filter((n) => n.toLowerCase() !== self.toLowerCase() && !fallback.includes(n));
  const move = (i: number, by: number) => {
    const next = [...fallback];
    const [item] = next.splice(i, 1);
    next.splice(i + by, 0, item!);
    onChange(next);
  };
  return (
    <fieldset class="field-group">
      <legend>Fallback pools</legend>
      <p class="muted small">
        Used in this order, and only when none of its own keys can serve. None: its clients wait (429) or get 503 instead.
      </p>
      {fallback.length > 0 && (
        <ol class="fallback-list" data-testid="pool-fallbacks">
          {fallback.map((f, i) => (
            <li key={f}>
              <PoolBadge name={f} />
              <span class="fallback-tools">
                <button type="button" class="icon-button small" aria-label={`Move ${f} up`} disabled={i === 0} onClick={() => move(i, -1)}>
                  ↑
                </button>
                <button
                  type="button"
                  class="icon-button small"
                  aria-label={`Move ${f} down`}
                  disabled={i === fallback.length - 1}
                  onClick={() => move(i, 1)}
                >
                  ↓
                </button>
                <button type="button" class="icon-button small" aria-label={`Remove ${f}`} onClick={() => onChange(fallback.filter((x) => x !== f))}>
                  ×
                </button>
              </span>
            </li>
          ))}
        </ol>
      )}
      {others.length > 0 && (
        <label>
          <span class="sr-only">Add a fallback pool</span>
          <select
            name="pool-fallback"
            value=""
            onChange={(e) => {
              const picked = e.currentTarget.value;
              if (picked) onChange([...fallback, picked]);
            }}
          >
            <option value="">Add a fallback pool…</option>
            {others.map((n) => (
              <option key={n} value={n}>
                {n === "all" ? "all (every key)" : n}
              </option>
            ))}
          </select>
        </label>
      )}
    </fieldset>
  );
}

interface ReviewProps {
  name: string;
  pool: PoolInfo | null;
  chosen: string[];
  fallback: string[];
  money: Money;
  tiers: Tiers;
  proxy: string;
  busy: boolean;
  error: string | null;
  onBack: () => void;
  onConfirm: () => void;
}

/** What the pool will be, to confirm before the gateway is told. */
function Review({ name, pool, chosen, fallback, money, tiers, proxy, busy, error, onBack, onConfirm }: ReviewProps) {
  const tokens = pool?.tokens ?? [];
  return (
    <div class="confirm-text" data-testid="pool-review">
      <p>
        {pool ? "Change" : "Create"} the pool <strong>{name}</strong>?
      </p>
      <dl class="facts">
        <dt>Keys</dt>
        <dd data-testid="pool-review-keys">{chosen.length > 0 ? chosen.join(", ") : "none: its requests get 503 unless a fallback serves them"}</dd>
        <dt>Fallback</dt>
        <dd>{fallback.length > 0 ? fallback.join(", then ") : "none"}</dd>
        <dt>Budget</dt>
        <dd data-testid="pool-review-budget">{budgetWords(money)}</dd>
        <dt>Priority tier</dt>
        <dd data-testid="pool-review-priority">{tiers.allow_priority ? "allowed" : "sent as standard"}</dd>
        <dt>Ultrafast tier</dt>
        <dd data-testid="pool-review-ultrafast">
          {!tiers.allow_priority ? "sent as standard" : tiers.allow_ultrafast ? "allowed" : "sent as priority"}
        </dd>
        <dt>Proxy</dt>
        <dd data-testid="pool-review-proxy">{proxy || "none: direct"}</dd>
      </dl>
      <p class="muted small">
        {tokens.length > 0
          ? `From their next request, ${tokens.join(", ")} reach${tokens.length === 1 ? "es" : ""} only these keys${fallback.length ? ", then the fallbacks" : ""}.`
          : "Tokens you bind to it (on the Connect page) reach only these keys."}
      </p>
      {error && (
        <Notice kind="error">
          <span data-testid="pool-form-error">{error}</span>
        </Notice>
      )}
      <div class="actions">
        <button type="button" class="button" onClick={onBack} autoFocus>
          Back
        </button>
        <button type="button" class="button primary" onClick={onConfirm} disabled={busy} data-testid="pool-form-confirm">
          {busy ? "Saving…" : pool ? "Save changes" : "Create pool"}
        </button>
      </div>
    </div>
  );
}
