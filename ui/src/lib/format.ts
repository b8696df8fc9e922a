// Every number, duration, countdown and time the dashboard shows is formatted here, so they read the
// same everywhere and are tested in one place.

const DASH = "—";

/** A count with thousands separators: 12,345. */
export function count(n: number | null | undefined): string {
  if (n == null || !Number.isFinite(n)) return DASH;
  return Math.round(n).toLocaleString("en-US");
}

/** A compact count for tight spaces: 999, 1.2k, 12k, 1.2M, 3.4B. */
export function compact(n: number | null | undefined): string {
  if (n == null || !Number.isFinite(n)) return DASH;
  const sign = n < 0 ? "-" : "";
  const a = Math.abs(n);
  const units: [number, string][] = [
    [1e12, "T"],
    [1e9, "B"],
    [1e6, "M"],
    [1e3, "k"],
  ];
  for (let i = 0; i < units.length; i++) {
    const [size, unit] = units[i]!;
    if (a >= size) {
      const v = a / size;
      // 999,999,999 is "1B", not "1000M": round up into the larger unit.
      if (Math.round(v) >= 1000 && i > 0) return `${sign}1${units[i - 1]![1]}`;
      // One decimal below 10 (1.2k), none above (12k); never "10.0k".
      const text = v < 9.95 ? v.toFixed(1).replace(/\.0$/, "") : Math.round(v).toString();
      return `${sign}${text}${unit}`;
    }
  }
  if (Math.round(a) >= 1000) return `${sign}1k`;
  return `${sign}${Math.round(a)}`;
}

/** A share 0..1 as a whole percentage (with one decimal below 10 %): 87 %, 4.5 %, 0 %. */
export function percent(share: number | null | undefined): string {
  if (share == null || !Number.isFinite(share)) return DASH;
  const p = Math.max(0, share) * 100;
  if (p > 0 && p < 10) return `${p.toFixed(1).replace(/\.0$/, "")}%`;
  return `${Math.round(p)}%`;
}

/** A short duration in milliseconds: 85 ms, 1.2 s, 14 s, 2m 05s, 1h 02m. */
export function duration(ms: number | null | undefined): string {
  if (ms == null || !Number.isFinite(ms)) return DASH;
  const v = Math.max(0, ms);
  if (v < 1000) return `${Math.round(v)} ms`;
  if (v < 10_000) return `${(v / 1000).toFixed(1)} s`;
  if (v < 60_000) return `${Math.round(v / 1000)} s`;
  return countdown(v);
}

/**
 * A countdown to a moment, in whole seconds rounded up (a key cooling for 200 ms still shows 1s, never
 * 0s): 45s, 2m 05s, 1h 02m, 3d 4h. Zero or past: "now".
 */
export function countdown(ms: number): string {
  if (!Number.isFinite(ms) || ms <= 0) return "now";
  const s = Math.ceil(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${pad(s % 60)}s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h ${pad(m % 60)}m`;
  const d = Math.floor(h / 24);
  return `${d}d ${h % 24}h`;
}

/** How long ago, from a Unix time in ms: just now, 12s ago, 4m ago, 2h ago, 3d ago. */
export function ago(atMs: number, nowMs: number): string {
  const s = Math.floor((nowMs - atMs) / 1000);
  if (s < 5) return "just now";
  if (s < 60) return `${s}s ago`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ago`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ago`;
  return `${Math.floor(h / 24)}d ago`;
}

/** A wall-clock time of day, 24 h, local: 14:03:07. */
export function clock(atMs: number): string {
  const d = new Date(atMs);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** A bucket start for chart axes and tooltips: "14:00" for hours, "Mar 4" for days. */
export function bucketLabel(atMs: number, bucketMs: number): string {
  const d = new Date(atMs);
  if (bucketMs >= 86_400_000) {
    return d.toLocaleDateString("en-US", { month: "short", day: "numeric", timeZone: "UTC" });
  }
  return `${pad(d.getHours())}:00`;
}

/** What a window's pace means, in words and as a level for colour. */
export interface PaceText {
  text: string;
  level: "calm" | "warn" | "over" | "unknown";
}

/**
 * Pace is used share over elapsed share of the window: 1.0 uses it up exactly at its reset, above 1 it
 * runs out early.
 */
export function pace(p: number | null | undefined): PaceText {
  if (p == null || !Number.isFinite(p)) return { text: "pace unknown", level: "unknown" };
  const v = `${p.toFixed(p < 10 ? 1 : 0)}×`;
  if (p > 1.05) return { text: `pace ${v}: runs out before reset`, level: "over" };
  if (p > 0.8) return { text: `pace ${v}: near the limit`, level: "warn" };
  return { text: `pace ${v}`, level: "calm" };
}

/** Tokens in and out of one request: "12.4k in · 310 out". */
export function tokensInOut(input: number, output: number): string {
  return `${compact(input)} in · ${compact(output)} out`;
}

/** The time since a Unix second (0 = unknown) as a date: "2025-03-04". */
export function date(unixSeconds: number): string {
  if (!unixSeconds) return DASH;
  return new Date(unixSeconds * 1000).toISOString().slice(0, 10);
}

function pad(n: number): string {
  return n < 10 ? `0${n}` : `${n}`;
}

/**
 * US dollars for a glance: cents from $0.01 up, four decimals below (a single turn often costs a
 * fraction of a cent), "—" when there is no figure.
 */
export function usd(amount: number | null | undefined): string {
  if (amount === null || amount === undefined || !Number.isFinite(amount)) return "—";
  if (amount === 0) return "$0";
  if (amount < 0.01) return `$${amount.toFixed(4)}`;
  if (amount < 1000) return `$${amount.toFixed(2)}`;
  return `$${Math.round(amount).toLocaleString("en-US")}`;
}
