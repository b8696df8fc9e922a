// The usage table as CSV, for a spreadsheet: one row per bucket and key (and the total), in time order.
import type { UsagePoint } from "../api/types";

const COLUMNS = [
  "start",
  "key",
  "requests",
  "input_tokens",
  "cached_tokens",
  "output_tokens",
  "spend_usd",
  "unpriced_requests",
  "failed_attempts",
] as const;

/** A CSV field: quoted when it holds a comma, a quote or a line break (RFC 4180). */
function field(value: string | number): string {
  const text = String(value);
  return /[",\n\r]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

/**
 * The points as CSV with a header line; `name` turns a fingerprint into the key's label (`total` and
 * `no key` stay as they are). Amounts are US dollars with up to nine decimals, as the API sends them.
 */
export function usageCsv(points: UsagePoint[], name: (fingerprint: string) => string): string {
  const rows = [...points].sort((a, b) => a.start_unix_ms - b.start_unix_ms || name(a.key).localeCompare(name(b.key)));
  const lines = rows.map((p) =>
    [
      new Date(p.start_unix_ms).toISOString(),
      name(p.key),
      p.requests,
      p.input_tokens,
      p.cached_tokens,
      p.output_tokens,
      Number(p.spend_usd.toFixed(9)),
      p.unpriced_requests,
      Object.values(p.failures).reduce<number>((a, b) => a + (b ?? 0), 0),
    ]
      .map(field)
      .join(","),
  );
  return `${[COLUMNS.join(","), ...lines].join("\n")}\n`;
}
