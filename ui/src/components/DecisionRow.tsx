import { memo } from "preact/compat";
import type { Unpriced } from "../api/types";
import type { LiveRow } from "../lib/live";
import { clock, compact, duration, percent, usd } from "../lib/format";
import { fallbackPool, tokenName } from "../lib/pools";
import { CLIENT } from "../lib/words";
import { Badge } from "./Badge";
import { PoolBadge } from "./PoolBadge";

/** What had no price, for a record's `unpriced` reason. */
const UNPRICED_WHAT: Record<Unpriced, string> = {
  model: "model",
  tier: "service tier (on this day)",
  cache_retention: "model's 12-hour cache writes",
};

interface Props {
  row: LiveRow;
  keyLabel: string;
  keyOrg: string | null;
  /** Served by a ChatGPT plan: its subscription includes what it served. */
  onPlan?: boolean;
  onOpen: (seq: number) => void;
}

function statusTone(status: number): string {
  if (status >= 500) return "bad";
  if (status === 429) return "warn";
  if (status >= 400) return "bad";
  return "ok";
}

/** One request in the Live table: click or Enter opens its decision. */
export const DecisionRow = memo(function DecisionRow({ row, keyLabel, keyOrg, onPlan = false, onOpen }: Props) {
  const r = row.record;
  const source = r ?? row.routed;
  const usage = r?.usage;
  const cached = usage && usage.input > 0 ? usage.cached / usage.input : null;
  return (
    <tr
      class={`decision-row${r && r.status >= 400 ? " is-error" : ""}${r ? "" : " is-pending"}`}
      tabIndex={0}
      data-testid="decision-row"
      data-seq={row.seq}
      aria-label={`Request ${row.seq}: open its decision`}
      onClick={() => onOpen(row.seq)}
      onKeyDown={(e) => {
        if (e.key === "Enter" || e.key === " ") {
          e.preventDefault();
          onOpen(row.seq);
        }
      }}
    >
      <td class="c-time num">{clock(row.at_unix_ms)}</td>
      <td class="c-client">{source ? CLIENT[source.client] ?? source.client : "—"}</td>
      <td class="c-pool" data-testid="row-pool">
        {source && (
          <>
            <PoolBadge name={source.pool} servedBy={fallbackPool(source.decision)} />
            <span class="row-token" data-testid="row-token" title="The client token it came with">
              {tokenName(source.token)}
            </span>
          </>
        )}
      </td>
      <td class="c-model">
        <code>{source?.model ?? "—"}</code>
      </td>
      <td class="c-key" data-testid="row-key">
        <span class="key-label">{keyLabel}</span>
        {keyOrg && <span class="org">{keyOrg}</span>}
      </td>
      <td class="c-badges">
        <span class="badges">
          {row.badges.map((b) => (
            <Badge key={b} name={b} />
          ))}
        </span>
      </td>
      <td class="c-status num">
        {r ? <span class={`status tone-${statusTone(r.status)}`}>{r.status}</span> : <span class="status tone-muted">…</span>}
      </td>
      <td class="c-ttfb num" title="Time to first byte">
        {r ? duration(r.ttfb_ms) : ""}
      </td>
      <td class="c-dur num" title="Duration">
        {r ? duration(r.duration_ms) : "in flight"}
      </td>
      <td class="c-tokens num" title="Tokens in and out">
        {usage ? `${compact(usage.input)} → ${compact(usage.output)}` : ""}
      </td>
      <td class="c-cached num" title="Share of prompt tokens from the provider's cache">
        {cached !== null ? percent(cached) : ""}
      </td>
      <td
        class="c-cost num"
        data-testid="row-cost"
        title={
          r?.unpriced
            ? `No price for this ${UNPRICED_WHAT[r.unpriced]}: not counted, and not $0`
            : onPlan
              ? "Included in your ChatGPT plan: it costs nothing more"
              : "What it cost, from its usage"
        }
      >
        {r?.unpriced ? <span class="muted">unpriced</span> : r?.usage && onPlan ? <span class="muted">in plan</span> : r?.usage ? usd(r.cost_usd) : ""}
        {usage && usage.tier !== "standard" && (
          <span class="muted small" data-testid="row-tier" title="The service tier the provider says it served (what the cost is in)">
            {" "}
            {usage.tier}
          </span>
        )}
      </td>
    </tr>
  );
});
