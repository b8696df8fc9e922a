import { useState } from "preact/hooks";
import type { PoolInfo } from "../api/types";
import { Notice } from "../components/Notice";
import { PoolCard } from "../components/PoolCard";
import { PoolForm } from "../components/PoolForm";
import { pools } from "../state/store";

/** The pools: which keys each client token may reach, and what happens when they cannot serve. */
export function PoolsView() {
  // null: no form open; "new": creating; a pool: editing it.
  const [editing, setEditing] = useState<PoolInfo | "new" | null>(null);
  const [done, setDone] = useState<string | null>(null);
  return (
    <section class="view pools" aria-labelledby="pools-title">
      <header class="view-head">
        <h1 id="pools-title">Pools</h1>
        <div class="view-tools">
          <button
            type="button"
            class="button primary small"
            onClick={() => {
              setDone(null);
              setEditing("new");
            }}
            data-testid="pool-new"
          >
            New pool
          </button>
        </div>
      </header>
      <p class="muted intro">
        A pool is a set of keys. Every client token is bound to one pool and reaches only its keys, then its fallback pools
        in order, so work code never goes through a personal organization unless you say so. The built-in pool{" "}
        <strong>all</strong> holds every key.
      </p>
      {done && (
        <Notice kind="ok">
          <span data-testid="pool-done">{done}</span>
        </Notice>
      )}
      <div class="pool-list" data-testid="pool-list">
        {pools.value.map((p) => (
          <PoolCard key={p.name} pool={p} onEdit={(pool) => setEditing(pool)} />
        ))}
      </div>
      {editing !== null && (
        <PoolForm
          pool={editing === "new" ? null : editing}
          onClose={() => setEditing(null)}
          onDone={(what) => {
            setEditing(null);
            setDone(what);
          }}
        />
      )}
    </section>
  );
}
