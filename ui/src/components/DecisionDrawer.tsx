import type { LiveRow } from "../lib/live";
import { affinitySentence, droppedSentence, reasonSentence, refusalSentence, routeSentence, tierWords } from "../lib/decision";
import { clock, count, duration, percent } from "../lib/format";
import { fallbackPool, tokenName } from "../lib/pools";
import { CLIENT, OPERATION, ROUTE } from "../lib/words";
import { keyName } from "../state/store";
import { AttemptChain } from "./AttemptChain";
import { Badge } from "./Badge";
import { Dialog } from "./Dialog";
import { PoolBadge } from "./PoolBadge";

/** A request's decision in full: route and why, candidates, skipped keys, reasons, attempts, usage. */
export function DecisionDrawer({ row, onClose }: { row: LiveRow | null; onClose: () => void }) {
  return (
    <Dialog open={row !== null} onClose={onClose} kind="drawer" title={row ? `Request #${row.seq}` : "Request"} testid="drawer">
      {row && <Details row={row} />}
    </Dialog>
  );
}

function Details({ row }: { row: LiveRow }) {
  const r = row.record;
  const source = r ?? row.routed;
  if (!source) return null;
  const d = source.decision;
  const skipped = d.reasons.filter((x) => x.rule === "skipped");
  const candidates = [d.choice, ...d.fallbacks].filter((k): k is string => k !== null);
  return (
    <div class="details">
      <p class="details-meta">
        <span class="num">{clock(row.at_unix_ms)}</span> · {CLIENT[source.client] ?? source.client} ·{" "}
        {OPERATION[source.operation] ?? source.operation} · <code>{source.model ?? "no model"}</code> ·{" "}
        {source.transport === "web_socket" ? "WebSocket" : "HTTP"}
        {source.session && (
          <>
            {" "}
            · session <code>{source.session}</code>
          </>
        )}
      </p>
      <p class="badges" data-testid="drawer-pool">
        <PoolBadge name={source.pool} servedBy={fallbackPool(d)} />
        <span class="muted small">
          token <strong>{tokenName(source.token)}</strong>
        </span>
        {row.badges.map((b) => (
          <Badge key={b} name={b} />
        ))}
      </p>

      <section>
        <h3>Route: {ROUTE[d.route]?.name ?? d.route}</h3>
        <p data-testid="route-sentence">{routeSentence(d, keyName)}</p>
        {d.refusal && <p class="notice notice-error" data-testid="refusal">{refusalSentence(d.refusal, keyName, source.pool)}</p>}
        <p class="muted">{affinitySentence(d)}</p>
      </section>

      <section>
        <h3>Candidates</h3>
        {candidates.length === 0 ? (
          <p class="muted">No key could take it.</p>
        ) : (
          <ol class="candidates" data-testid="candidates">
            {candidates.map((k, i) => (
              <li key={k}>
                <span class="key-label">{keyName(k)}</span>
                <span class="muted">{i === 0 ? "first choice" : `fallback ${i}`}</span>
              </li>
            ))}
          </ol>
        )}
        {skipped.length > 0 && (
          <>
            <h4>Skipped</h4>
            <ul class="skipped" data-testid="skipped">
              {skipped.map((s, i) => (
                <li key={i}>{reasonSentence(s, keyName)}</li>
              ))}
            </ul>
          </>
        )}
      </section>

      <section>
        <h3>Why</h3>
        {d.reasons.length === 0 ? (
          <p class="muted">No rule needed explaining.</p>
        ) : (
          <ul class="reasons" data-testid="reasons">
            {d.reasons.map((reason, i) => (
              <li key={i}>{reasonSentence(reason, keyName, d.choice)}</li>
            ))}
          </ul>
        )}
      </section>

      {d.pin && (
        <section>
          <h3>Pin</h3>
          <p>
            Encrypted content made by <strong>{keyName(d.pin.key)}</strong>;{" "}
            {d.pin.exact ? "sent to that very key." : "sent to another key of its organization, which can read it too."}
          </p>
          <p class="muted small">
            Marker organization tag <code>{d.pin.org}</code>
          </p>
        </section>
      )}
      {(d.rescued_orgs.length > 0 || (r?.rescued_items ?? 0) > 0) && (
        <section>
          <h3>Rescued</h3>
          <p>
            {r?.rescued_items ?? 0} item(s) dropped
            {d.rescued_orgs.length > 0 && <> from {d.rescued_orgs.map((o) => <code key={o}>{o} </code>)}</>}: no usable key
            of their organization was left.
          </p>
        </section>
      )}

      {d.reasoning_dropped && (
        <section data-testid="reasoning-dropped">
          <h3>Reasoning dropped</h3>
          <p>{droppedSentence(d.reasoning_dropped)}</p>
        </section>
      )}

      <section>
        <h3>Attempts</h3>
        {r ? <AttemptChain attempts={r.attempts} servedBy={r.served_by} /> : <p class="muted">Still in flight.</p>}
      </section>

      {r && (
        <section>
          <h3>Answer</h3>
          <dl class="facts">
            <dt>Status</dt>
            <dd class="num">
              {r.status}
              {r.error && <> · {r.error}</>}
              {r.upstream_code && (
                <>
                  {" "}
                  · <code>{r.upstream_code}</code>
                </>
              )}
            </dd>
            <dt>Served by</dt>
            <dd>{keyName(r.served_by)}</dd>
            <dt>First byte</dt>
            <dd class="num">{duration(r.ttfb_ms)}</dd>
            <dt>Duration</dt>
            <dd class="num">{duration(r.duration_ms)}</dd>
            <dt>Tokens</dt>
            <dd class="num">
              {r.usage
                ? `${count(r.usage.input)} in (${count(r.usage.cached)} cached, ${percent(r.usage.input ? r.usage.cached / r.usage.input : 0)}) · ${count(r.usage.output)} out`
                : "not reported"}
            </dd>
            {r.usage && (
              <>
                <dt>Service tier</dt>
                <dd data-testid="drawer-tier">{tierWords(r.usage.tier)}</dd>
              </>
            )}
          </dl>
        </section>
      )}
    </div>
  );
}
