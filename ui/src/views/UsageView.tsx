import { useEffect, useMemo, useState } from "preact/hooks";
import { get, messageOf } from "../api/client";
import type { UsageBody, UsagePoint } from "../api/types";
import { Notice } from "../components/Notice";
import { UsageChart, type Series } from "../components/UsageChart";
import { compact, count, percent, usd } from "../lib/format";
import { usageCsv } from "../lib/usage";
import { AFFINITY_SOURCE, AFFINITY_STATE, FAILURE } from "../lib/words";
import { keysByFingerprint } from "../state/store";

type Bucket = "hour" | "day";
const RANGE: Record<Bucket, { days: number; buckets: number; ms: number; label: string }> = {
  hour: { days: 2, buckets: 48, ms: 3_600_000, label: "Per hour, last 48 hours" },
  day: { days: 30, buckets: 30, ms: 86_400_000, label: "Per day, last 30 days" },
};

type Counts = { [key in string]?: number };
/** `prompt_cache_key/hit` → "cache key: hit", through the one table of words. */
/** The affinity chart's series of turns whose reasoning the provider dropped (not an affinity state). */
const DROPPED = "reasoning_dropped";

function affinityLabel(key: string): string {
  if (key === DROPPED) return "Reasoning dropped by the provider";
  const [source, state] = key.split("/");
  const s = AFFINITY_SOURCE[source as keyof typeof AFFINITY_SOURCE] ?? source;
  const t = AFFINITY_STATE[state as keyof typeof AFFINITY_STATE]?.name ?? state;
  return source === "none" ? `${t}` : `${s}: ${t}`;
}

const failureLabel = (key: string) => FAILURE[key as keyof typeof FAILURE] ?? key;

const sum = (m: Counts) => Object.values(m).reduce<number>((a, b) => a + (b ?? 0), 0);

/**
 * Requests, spend, tokens, cache share, errors and affinity states, per hour or day, per key and in
 * total; the table behind them exports as CSV.
 */
export function UsageView() {
  const [bucket, setBucket] = useState<Bucket>("hour");
  const [scope, setScope] = useState("total");
  const [usage, setUsage] = useState<UsageBody | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    let alive = true;
    const load = () =>
      get<UsageBody>(`usage?bucket=${bucket}&days=${RANGE[bucket].days}`)
        .then((u) => {
          if (!alive) return;
          setUsage(u);
          setError(null);
        })
        .catch((e) => alive && setError(messageOf(e)));
    void load();
    // Counters are merged every few seconds; a chart of hours needs no more than a refresh a minute.
    const timer = setInterval(load, 60_000);
    return () => {
      alive = false;
      clearInterval(timer);
    };
  }, [bucket]);

  const byFp = keysByFingerprint.value;
  const name = (fp: string) => (fp === "total" ? "total" : fp === "none" ? "no key" : (byFp.get(fp)?.label ?? fp));

  const model = useMemo(() => {
    if (!usage) return null;
    const r = RANGE[bucket];
    const step = usage.bucket_ms || r.ms;
    const lastStart = Math.floor(Date.now() / step) * step;
    const starts = Array.from({ length: r.buckets }, (_, i) => lastStart - (r.buckets - 1 - i) * step);
    const index = new Map(starts.map((t, i) => [t, i]));
    const times = starts.map((t) => t / 1000);
    const perKey = new Map<string, (UsagePoint | null)[]>();
    for (const p of usage.points) {
      const i = index.get(p.start_unix_ms);
      if (i === undefined) continue;
      let row = perKey.get(p.key);
      if (!row) {
        row = new Array<UsagePoint | null>(starts.length).fill(null);
        perKey.set(p.key, row);
      }
      row[i] = p;
    }
    return { times, perKey, step };
  }, [usage, bucket]);

  // In label order, so each key keeps its colour from one refresh to the next.
  const scopes = model ? [...model.perKey.keys()].filter((k) => k !== "total").sort((a, b) => name(a).localeCompare(name(b))) : [];
  const rows = model?.perKey.get(scope) ?? null;
  const pick = (f: (p: UsagePoint) => number | null) => (rows ?? []).map((p) => (p ? f(p) : 0));
  const mapSeries = (f: (p: UsagePoint) => Counts, label: (key: string) => string = (k) => k): Series[] => {
    const names = new Set<string>();
    for (const p of rows ?? []) if (p) for (const [k, v] of Object.entries(f(p))) if ((v ?? 0) > 0) names.add(k);
    return [...names].sort().map((n) => ({ label: label(n), values: pick((p) => f(p)[n] ?? 0) }));
  };

  const totals = (rows ?? []).reduce(
    (a, p) => {
      if (!p) return a;
      a.requests += p.requests;
      a.input += p.input_tokens;
      a.cached += p.cached_tokens;
      a.output += p.output_tokens;
      a.failures += sum(p.failures);
      a.spend += p.spend_usd;
      a.unpriced += p.unpriced_requests;
      return a;
    },
    { requests: 0, input: 0, cached: 0, output: 0, failures: 0, spend: 0, unpriced: 0 },
  );
  const spendSeries: Series[] =
    scope === "total" && model
      ? [
          ...scopes.map((fp) => ({ label: name(fp), values: (model.perKey.get(fp) ?? []).map((p) => p?.spend_usd ?? 0) })),
          { label: "total", values: pick((p) => p.spend_usd), strong: true },
        ]
      : [{ label: name(scope), values: pick((p) => p.spend_usd) }];
  const exportCsv = () => {
    if (!usage) return;
    const blob = new Blob([usageCsv(usage.points, name)], { type: "text/csv" });
    const link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = `keymux-usage-${bucket}-${new Date().toISOString().slice(0, 10)}.csv`;
    link.click();
    URL.revokeObjectURL(link.href);
  };

  const requestSeries: Series[] =
    scope === "total" && model
      ? [
          ...scopes.map((fp) => ({ label: name(fp), values: (model.perKey.get(fp) ?? []).map((p) => p?.requests ?? 0) })),
          { label: "total", values: pick((p) => p.requests), strong: true },
        ]
      : [{ label: name(scope), values: pick((p) => p.requests) }];

  return (
    <section class="view" aria-labelledby="usage-title">
      <header class="view-head">
        <h1 id="usage-title">Usage</h1>
        <div class="view-tools">
          <div class="segmented" role="group" aria-label="Bucket">
            {(["hour", "day"] as Bucket[]).map((b) => (
              <button key={b} type="button" class="button small" aria-pressed={bucket === b} onClick={() => setBucket(b)} data-testid={`usage-${b}`}>
                {b === "hour" ? "Hourly" : "Daily"}
              </button>
            ))}
          </div>
          <label class="inline">
            <span class="sr-only">Key</span>
            <select value={scope} onChange={(e) => setScope(e.currentTarget.value)}>
              <option value="total">All keys</option>
              {scopes.map((fp) => (
                <option key={fp} value={fp}>
                  {name(fp)}
                </option>
              ))}
            </select>
          </label>
          <button type="button" class="button small" onClick={exportCsv} disabled={!usage} data-testid="usage-csv">
            Export CSV
          </button>
        </div>
      </header>
      <p class="muted small">{RANGE[bucket].label}. Keys are counted by fingerprint; nothing here names a prompt or session.</p>
      {error && <Notice kind="error">{error}</Notice>}
      {!model ? (
        <p class="muted">Loading…</p>
      ) : (
        <>
          <div class="summary">
            <div>
              <span class="muted small">Requests</span>
              <strong class="num">{count(totals.requests)}</strong>
            </div>
            <div>
              <span class="muted small">Tokens in / out</span>
              <strong class="num">
                {compact(totals.input)} / {compact(totals.output)}
              </strong>
            </div>
            <div>
              <span class="muted small">Cached</span>
              <strong class="num">{totals.input ? percent(totals.cached / totals.input) : "—"}</strong>
            </div>
            <div>
              <span class="muted small">Failed attempts</span>
              <strong class="num">{count(totals.failures)}</strong>
            </div>
            <div data-testid="usage-spend">
              <span class="muted small">Spend{totals.unpriced > 0 ? ` (+${count(totals.unpriced)} unpriced)` : ""}</span>
              <strong class="num">{usd(totals.spend)}</strong>
            </div>
          </div>
          <div class="chart-grid">
            <UsageChart title="Requests" times={model.times} bucketMs={model.step} series={requestSeries} testid="chart-requests" />
            <UsageChart
              title="Spend, US$"
              times={model.times}
              bucketMs={model.step}
              series={spendSeries}
              testid="chart-spend"
              format={(v) => usd(v)}
              integer={false}
            />
            <UsageChart
              title="Tokens"
              times={model.times}
              bucketMs={model.step}
              testid="chart-tokens"
              series={[
                { label: "input", values: pick((p) => p.input_tokens) },
                { label: "cached", values: pick((p) => p.cached_tokens) },
                { label: "output", values: pick((p) => p.output_tokens) },
              ]}
            />
            <UsageChart
              title="Cached share of prompt tokens"
              times={model.times}
              bucketMs={model.step}
              testid="chart-cached"
              format={(v) => percent(v)}
              integer={false}
              series={[{ label: "cached", values: pick((p) => (p.input_tokens > 0 ? p.cached_tokens / p.input_tokens : null)) }]}
            />
            <UsageChart title="Failed attempts by category" times={model.times} bucketMs={model.step} series={mapSeries((p) => p.failures, failureLabel)} testid="chart-errors" />
            <UsageChart title="Affinity states" times={model.times} bucketMs={model.step} series={mapSeries((p) => ({ ...p.by_affinity, [DROPPED]: p.reasoning_dropped }), affinityLabel)} testid="chart-affinity" />
            <UsageChart title="Answers by status" times={model.times} bucketMs={model.step} series={mapSeries((p) => p.by_status)} testid="chart-status" />
          </div>
        </>
      )}
    </section>
  );
}
