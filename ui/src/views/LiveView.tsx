import { useCallback, useMemo, useState } from "preact/hooks";
import type { ClientKind } from "../api/types";
import { BADGE_NAMES } from "../lib/decision";
import type { LiveRow } from "../lib/live";
import { tokenName } from "../lib/pools";
import { CLIENT } from "../lib/words";
import { DecisionDrawer } from "../components/DecisionDrawer";
import { DecisionRow } from "../components/DecisionRow";
import { FilterSelect } from "../components/FilterSelect";
import { FirstKey } from "../components/FirstKey";
import { NO_FILTERS, liveFilters, type LiveFilters } from "../state/filters";
import { keys, keysById, lagged, live, pools, status } from "../state/store";

/** The most rows drawn at once; the store keeps more for filtering. */
const DRAWN = 200;

function keyOf(row: LiveRow): string | null {
  return row.record?.served_by ?? row.record?.decision.choice ?? row.routed?.decision.choice ?? null;
}

/** The pools and token names to filter by: the gateway's, and any a request still shows. */
function choices(rows: LiveRow[]): { poolNames: string[]; tokenNames: string[] } {
  const poolNames = new Set(pools.value.map((p) => p.name));
  const tokenNames = new Set(pools.value.flatMap((p) => p.tokens));
  for (const row of rows) {
    const source = row.record ?? row.routed;
    if (!source) continue;
    poolNames.add(source.pool);
    tokenNames.add(tokenName(source.token));
  }
  return { poolNames: [...poolNames], tokenNames: [...tokenNames].sort() };
}

/** Whether any filter is set. */
function filtering(f: LiveFilters): boolean {
  return Object.values(f).some(Boolean);
}

/** Every request as it is routed and finished, newest first; pausable and filterable. */
export function LiveView() {
  const filters = liveFilters.value;
  const [frozen, setFrozen] = useState<LiveRow[] | null>(null);
  const [openSeq, setOpenSeq] = useState<number | null>(null);
  const byId = keysById.value;
  const all = frozen ?? live.value;
  const orgs = useMemo(() => [...new Set(keys.value.map((k) => k.org).filter((o): o is string => !!o))].sort(), [keys.value]);
  const { poolNames, tokenNames } = useMemo(() => choices(all), [all, pools.value]);

  const shown = useMemo(() => {
    const f = filters;
    if (!filtering(f)) return all;
    return all.filter((row) => {
      const source = row.record ?? row.routed;
      if (f.client && source?.client !== f.client) return false;
      if (f.pool && source?.pool !== f.pool) return false;
      if (f.token && (source ? tokenName(source.token) : null) !== f.token) return false;
      const k = keyOf(row);
      if (f.key && k !== f.key) return false;
      if (f.org && (k ? byId.get(k)?.org : null) !== f.org) return false;
      if (f.state && !row.badges.includes(f.state)) return false;
      if (f.errors && !(row.record && (row.record.status >= 400 || row.record.attempts.some((a) => a.failure)))) return false;
      return true;
    });
  }, [all, filters, byId]);

  const open = useCallback((seq: number) => setOpenSeq(seq), []);
  // The drawer follows the row: a request still in flight fills in when it finishes.
  const openRow = openSeq === null ? null : ((frozen ?? live.value).find((r) => r.seq === openSeq) ?? null);
  const set = (patch: Partial<LiveFilters>) => (liveFilters.value = { ...filters, ...patch });
  const newer = frozen ? live.value.filter((r) => r.seq > (frozen[0]?.seq ?? 0)).length : 0;

  if (status.value && status.value.keys.length === 0) return <FirstKey />;

  return (
    <section class="view" aria-labelledby="live-title">
      <header class="view-head">
        <h1 id="live-title">Live</h1>
        <div class="view-tools">
          <button
            type="button"
            class={`button small${frozen ? " primary" : ""}`}
            onClick={() => setFrozen(frozen ? null : live.value)}
            data-testid="live-pause"
            aria-pressed={frozen !== null}
          >
            {frozen ? `Show new requests${newer ? ` (${newer})` : ""}` : "Hold the list"}
          </button>
        </div>
      </header>

      <form class="filters" onSubmit={(e) => e.preventDefault()} aria-label="Filters">
        <FilterSelect
          label="Client"
          value={filters.client}
          options={(Object.keys(CLIENT) as ClientKind[]).map((c) => [c, CLIENT[c]])}
          onChange={(client) => set({ client })}
        />
        <FilterSelect label="Pool" value={filters.pool} options={poolNames.map((p) => [p, p])} onChange={(pool) => set({ pool })} testid="filter-pool" />
        <FilterSelect
          label="Token"
          value={filters.token}
          options={tokenNames.map((t) => [t, t])}
          onChange={(token) => set({ token })}
          testid="filter-token"
        />
        <FilterSelect label="Key" value={filters.key} options={keys.value.map((k) => [k.id, k.label])} onChange={(key) => set({ key })} />
        <FilterSelect label="Org" value={filters.org} options={orgs.map((o) => [o, o])} onChange={(org) => set({ org })} />
        <FilterSelect
          label="State"
          value={filters.state}
          options={BADGE_NAMES.map((b) => [b, b.toLowerCase()])}
          onChange={(state) => set({ state })}
        />
        <label class="check">
          <input type="checkbox" checked={filters.errors} onChange={(e) => set({ errors: e.currentTarget.checked })} />
          <span>Errors only</span>
        </label>
        {filtering(filters) && (
          <button type="button" class="button small ghost" onClick={() => (liveFilters.value = NO_FILTERS)}>
            Clear
          </button>
        )}
      </form>

      {lagged.value !== null && (
        <p class="notice notice-info" role="status">
          The live stream skipped {lagged.value} event{lagged.value === 1 ? "" : "s"} while this page fell behind; the list was
          reloaded.{" "}
          <button type="button" class="linkish" onClick={() => (lagged.value = null)}>
            Dismiss
          </button>
        </p>
      )}

      {shown.length === 0 ? (
        <div class="empty" data-testid="live-empty">
          {all.length === 0 ? (
            <>
              <p>No requests yet.</p>
              <p class="muted">
                Point Codex or pi at <code>{status.value?.gateway.base_url ?? "the base URL"}</code>; the{" "}
                <a href="#/connect">Connect</a> page has the settings to paste.
              </p>
            </>
          ) : (
            <p>No request matches these filters.</p>
          )}
        </div>
      ) : (
        <div class="table-wrap">
          <table class="live-table" data-testid="live-table">
            <thead>
              <tr>
                <th class="c-time">Time</th>
                <th class="c-client">Client</th>
                <th class="c-pool">Pool · token</th>
                <th class="c-model">Model</th>
                <th class="c-key">Key</th>
                <th class="c-badges">Decision</th>
                <th class="c-status">Status</th>
                <th class="c-ttfb">TTFB</th>
                <th class="c-dur">Duration</th>
                <th class="c-tokens">Tokens</th>
                <th class="c-cached">Cached</th>
                <th class="c-cost">Cost</th>
              </tr>
            </thead>
            <tbody>
              {shown.slice(0, DRAWN).map((row) => {
                const k = keyOf(row);
                const info = k ? byId.get(k) : undefined;
                return (
                  <DecisionRow
                    key={row.seq}
                    row={row}
                    keyLabel={info?.label ?? k ?? "—"}
                    keyOrg={info?.org ?? null}
                    onPlan={info?.plan != null}
                    onOpen={open}
                  />
                );
              })}
            </tbody>
          </table>
          {shown.length > DRAWN && <p class="muted small">Showing the newest {DRAWN} of {shown.length}.</p>}
        </div>
      )}
      <DecisionDrawer row={openRow} onClose={() => setOpenSeq(null)} />
    </section>
  );
}
