import { computed } from "@preact/signals";
import { useEffect, useMemo, useState } from "preact/hooks";
import { get } from "../api/client";
import type { KeyInfo, UsageBody } from "../api/types";
import { AddKeyForm } from "../components/AddKeyForm";
import { Dialog } from "../components/Dialog";
import { FirstKey } from "../components/FirstKey";
import { ImportKeys } from "../components/ImportKeys";
import { KeyCard } from "../components/KeyCard";
import { PoolSection } from "../components/PoolSection";
import { keySections } from "../lib/pools";
import { keysPool } from "../state/filters";
import { keys, now, pools, status, userPools } from "../state/store";

const HOUR = 3_600_000;
/** The current hour: the sparklines move on once an hour, not with every tick of the clock. */
const hourNow = computed(() => Math.floor(now.value / HOUR));

/** A key's requests per hour. */
type Spark = { times: number[]; values: number[] };

/** Hourly requests per key fingerprint over the last 24 hours, zeros filled in. */
function sparks(usage: UsageBody | null, nowMs: number): Map<string, Spark> {
  const out = new Map<string, Spark>();
  if (!usage) return out;
  const last = Math.floor(nowMs / HOUR) * HOUR;
  const starts = Array.from({ length: 24 }, (_, i) => last - (23 - i) * HOUR);
  const times = starts.map((t) => t / 1000);
  const index = new Map(starts.map((t, i) => [t, i]));
  // Keys with no requests in the last day get a flat line (under no fingerprint).
  out.set("", { times, values: new Array<number>(24).fill(0) });
  for (const p of usage.points) {
    const i = index.get(p.start_unix_ms);
    if (i === undefined || p.key === "total") continue;
    let s = out.get(p.key);
    if (!s) {
      s = { times, values: new Array<number>(24).fill(0) };
      out.set(p.key, s);
    }
    s.values[i] = (s.values[i] ?? 0) + p.requests;
  }
  return out;
}

/** The keys of each organization. */
function OrgGroups({ lines }: { lines: Map<string, Spark> }) {
  const groups = useMemo(() => {
    const by = new Map<string, KeyInfo[]>();
    for (const k of keys.value) {
      const org = k.org ?? "";
      by.set(org, [...(by.get(org) ?? []), k]);
    }
    return [...by.entries()].sort(([a], [b]) => (a === "" ? 1 : b === "" ? -1 : a.localeCompare(b)));
  }, [keys.value]);
  return (
    <div class="org-groups">
      {groups.map(([org, list]) => (
        <section class="org-group" key={org} data-testid="org-group" data-org={org}>
          <h2 class="org-title">
            {list.every((k) => k.plan !== null) ? (
              <>
                Your ChatGPT plan
                <span class="muted small"> · an organization of its own: API keys cannot read what its sessions replay</span>
              </>
            ) : (
              <>
                {org || "Organization not known yet"}
                <span class="muted small">
                  {" "}
                  · {list.length} key{list.length === 1 ? "" : "s"}
                  {list.some((k) => k.org_learned) ? " · learned from the provider" : ""}
                </span>
              </>
            )}
          </h2>
          <div class="key-grid">
            {list.map((k) => (
              <KeyCard key={k.id} info={k} spark={lines.get(k.fingerprint) ?? lines.get("") ?? null} />
            ))}
          </div>
        </section>
      ))}
    </div>
  );
}

/** Chooses the pool whose keys the view shows. */
function PoolChooser() {
  const chosen = keysPool.value;
  return (
    <div class="chips" role="group" aria-label="Show the keys of a pool" data-testid="keys-pool-chooser">
      <button type="button" class="chip" aria-pressed={chosen === ""} onClick={() => (keysPool.value = "")} data-pool="">
        All keys
      </button>
      {userPools.value.map((p) => (
        <button
          type="button"
          key={p.name}
          class="chip"
          aria-pressed={chosen === p.name}
          onClick={() => (keysPool.value = p.name)}
          data-pool={p.name}
        >
          {p.name}{" "}
          <span class="num muted">
            {p.usable}/{p.key_ids.length}
          </span>
        </button>
      ))}
    </div>
  );
}

/** Every key, grouped by pool (or, without pools, by organization), with what can be done to it. */
export function KeysView() {
  const [usage, setUsage] = useState<UsageBody | null>(null);
  const [adding, setAdding] = useState(false);
  useEffect(() => {
    let alive = true;
    const load = () =>
      get<UsageBody>("usage?bucket=hour&days=1")
        .then((u) => alive && setUsage(u))
        .catch(() => undefined);
    void load();
    // Usage is not on the event stream; once a minute is as often as an hourly line can change visibly.
    const timer = setInterval(load, 60_000);
    return () => {
      alive = false;
      clearInterval(timer);
    };
  }, []);
  const hour = hourNow.value;
  const lines = useMemo(() => sparks(usage, hour * HOUR), [usage, hour]);
  // A pool chosen here and removed since shows every key again.
  const chosen = pools.value.some((p) => p.name === keysPool.value) ? keysPool.value : "";
  const sections = useMemo(() => keySections(keys.value, pools.value, chosen), [keys.value, pools.value, chosen]);

  if (status.value && keys.value.length === 0) return <FirstKey />;

  return (
    <section class="view" aria-labelledby="keys-title">
      <header class="view-head">
        <h1 id="keys-title">Keys</h1>
        <div class="view-tools">
          <button type="button" class="button primary small" onClick={() => setAdding(true)} data-testid="add-key-open">
            Add key
          </button>
        </div>
      </header>
      {userPools.value.length > 0 && <PoolChooser />}
      {sections === null ? (
        <OrgGroups lines={lines} />
      ) : (
        <div class="pool-sections">
          {sections.map((section) => (
            <PoolSection key={section.pool?.name ?? ""} pool={section.pool} empty={section.keys.length === 0}>
              {section.keys.map((k) => (
                <KeyCard key={k.id} info={k} showOrg spark={lines.get(k.fingerprint) ?? lines.get("") ?? null} />
              ))}
            </PoolSection>
          ))}
        </div>
      )}
      <ImportKeys />
      <Dialog open={adding} onClose={() => setAdding(false)} title="Add a key" testid="add-key-dialog">
        <AddKeyForm />
      </Dialog>
    </section>
  );
}
