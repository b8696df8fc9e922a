import { computed } from "@preact/signals";
import { useEffect, useMemo, useState } from "preact/hooks";
import { get } from "../api/client";
import type { KeyInfo, UsageBody } from "../api/types";
import { AddKeyForm } from "../components/AddKeyForm";
import { Dialog } from "../components/Dialog";
import { FirstKey } from "../components/FirstKey";
import { KeyCard } from "../components/KeyCard";
import { keys, now, status } from "../state/store";

const HOUR = 3_600_000;
/** The current hour: the sparklines move on once an hour, not with every tick of the clock. */
const hourNow = computed(() => Math.floor(now.value / HOUR));

/** Hourly requests per key fingerprint over the last 24 hours, zeros filled in. */
function sparks(usage: UsageBody | null, nowMs: number): Map<string, { times: number[]; values: number[] }> {
  const out = new Map<string, { times: number[]; values: number[] }>();
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

/** Every key, grouped by organization, with what can be done to it. */
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
  const groups = useMemo(() => {
    const by = new Map<string, KeyInfo[]>();
    for (const k of keys.value) {
      const org = k.org ?? "";
      by.set(org, [...(by.get(org) ?? []), k]);
    }
    return [...by.entries()].sort(([a], [b]) => (a === "" ? 1 : b === "" ? -1 : a.localeCompare(b)));
  }, [keys.value]);

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
      <div class="org-groups">
      {groups.map(([org, list]) => (
        <section class="org-group" key={org} data-testid="org-group" data-org={org}>
          <h2 class="org-title">
            {org || "Organization not known yet"}
            <span class="muted small">
              {" "}
              · {list.length} key{list.length === 1 ? "" : "s"}
              {list.some((k) => k.org_learned) ? " · learned from the provider" : ""}
            </span>
          </h2>
          <div class="key-grid">
            {list.map((k) => (
              <KeyCard key={k.id} info={k} spark={lines.get(k.fingerprint) ?? lines.get("") ?? null} />
            ))}
          </div>
        </section>
      ))}
      </div>
      <Dialog open={adding} onClose={() => setAdding(false)} title="Add a key" testid="add-key-dialog">
        <AddKeyForm />
      </Dialog>
    </section>
  );
}
