import { poolTone } from "../lib/pools";
import { pools } from "../state/store";

/**
 * A pool's name in its colour. With `servedBy`, the fallback pool that served a request of this pool
 * follows an arrow.
 */
export function PoolBadge({ name, servedBy = null }: { name: string; servedBy?: string | null }) {
  const list = pools.value;
  const title = servedBy
    ? `Pool ${name}: none of its keys could serve, so its fallback pool ${servedBy} did`
    : name === "all"
      ? "Pool all: every key"
      : `Pool ${name}`;
  return (
    <span class={`tag pool-badge tone-${poolTone(name, list)}`} title={title} data-pool={name}>
      {name}
      {servedBy && (
        <>
          <span aria-hidden="true" class="pool-arrow">
            →
          </span>
          <span class={`pool-served tone-${poolTone(servedBy, list)}`}>{servedBy}</span>
        </>
      )}
    </span>
  );
}
