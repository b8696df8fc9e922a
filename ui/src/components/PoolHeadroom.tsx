import type { PoolInfo } from "../api/types";
import { percent } from "../lib/format";
import { readyText } from "../lib/pools";
import { Bar } from "./Gauge";

/** How much a pool can take now: its ready keys, and the mean headroom of those keys. */
export function PoolHeadroom({ pool }: { pool: PoolInfo }) {
  const total = pool.key_ids.length;
  const tone = total === 0 || pool.usable === 0 ? "bad" : pool.usable < total ? "warn" : "ok";
  if (total === 0) {
    return (
      <div class="pool-headroom" data-testid="pool-headroom">
        <span class={`dot dot-${tone}`} aria-hidden="true" />
        <span class="num" data-testid="pool-ready">
          no keys
        </span>
      </div>
    );
  }
  return (
    <div class="pool-headroom" data-testid="pool-headroom">
      <span class={`dot dot-${tone}`} aria-hidden="true" />
      <span class="num" data-testid="pool-ready">
        {readyText(pool)}
      </span>
      <span class="pool-gauge" title="Mean rate-limit headroom of its ready keys">
        <Bar left={pool.headroom} label={`${pool.name}: mean headroom of its ready keys`} />
      </span>
      <span class="num muted">{percent(pool.headroom)} headroom</span>
    </div>
  );
}
