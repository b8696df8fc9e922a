import type { ComponentChildren } from "preact";
import type { PoolInfo } from "../api/types";
import { emptyPoolSentence } from "../lib/pools";
import { Tag } from "./Badge";
import { PoolBadge } from "./PoolBadge";
import { PoolHeadroom } from "./PoolHeadroom";

interface Props {
  /** The pool, or null for the keys in none of the user's pools. */
  pool: PoolInfo | null;
  /** Whether it has no keys (its cards are the children). */
  empty: boolean;
  children: ComponentChildren;
}

/** A pool's keys on the Keys view, under a header that says how much the pool can take now. */
export function PoolSection({ pool, empty, children }: Props) {
  return (
    <section class="pool-section" data-testid="pool-section" data-pool={pool?.name ?? ""}>
      <header class="pool-head">
        {pool ? (
          <>
            <h2 class="pool-title">
              <PoolBadge name={pool.name} />
            </h2>
            {pool.from_env && <Tag tone="muted">from the environment</Tag>}
            <PoolHeadroom pool={pool} />
            <span class="muted small">
              {pool.fallback.length > 0 ? `falls back to ${pool.fallback.join(", then ")}` : "no fallback"}
              {" · "}
              {pool.tokens.length > 0
                ? `token${pool.tokens.length === 1 ? "" : "s"} ${pool.tokens.join(", ")}`
                : "no token bound yet"}
            </span>
          </>
        ) : (
          <>
            <h2 class="pool-title">In none of your pools</h2>
            <span class="muted small">Only tokens of the pool all (or of a pool that falls back to it) reach these keys.</span>
          </>
        )}
      </header>
      {pool && empty ? (
        <p class="empty pool-empty" data-testid="pool-empty">
          {emptyPoolSentence(pool)} Add keys to it on the <a href="#/pools">Pools</a> page.
        </p>
      ) : (
        <div class="key-grid">{children}</div>
      )}
    </section>
  );
}
