import { useEffect, useState } from "preact/hooks";
import { get, messageOf } from "../api/client";
import type { SessionInfo, SessionsBody } from "../api/types";
import { Tag } from "../components/Badge";
import { Notice } from "../components/Notice";
import { ago, compact, percent, usd } from "../lib/format";
import { groupThreads } from "../lib/sessions";
import { BINDING, CLIENT } from "../lib/words";
import { finishedCount, keyName, keysById, now } from "../state/store";

/** Conversations Keymux has seen: where each is held, and how well its cache does. */
export function SessionsView() {
  const [sessions, setSessions] = useState<SessionInfo[] | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    // Sessions are not on the event stream: read them at once, then every 5 s while requests finish.
    let alive = true;
    let seen = -1;
    const load = () => {
      if (seen === finishedCount.peek()) return;
      seen = finishedCount.peek();
      get<SessionsBody>("sessions?limit=300")
        .then((b) => {
          if (!alive) return;
          setSessions(b.sessions);
          setError(null);
        })
        .catch((e) => alive && setError(messageOf(e)));
    };
    load();
    const timer = setInterval(load, 5000);
    return () => {
      alive = false;
      clearInterval(timer);
    };
  }, []);

  const byId = keysById.value;
  return (
    <section class="view" aria-labelledby="sessions-title">
      <header class="view-head">
        <h1 id="sessions-title">Sessions</h1>
        <span class="muted small">{sessions ? `${sessions.length} recent` : ""}</span>
      </header>
      {error && <Notice kind="error">{error}</Notice>}
      {sessions === null ? (
        <p class="muted">Loading…</p>
      ) : sessions.length === 0 ? (
        <div class="empty">
          <p>No sessions yet.</p>
          <p class="muted">A session is a conversation of Codex or pi (its prompt_cache_key; for Codex, its thread, with subagent threads under their session), shown here by a short digest.</p>
        </div>
      ) : (
        <div class="table-wrap">
          <table class="sessions-table" data-testid="sessions-table">
            <thead>
              <tr>
                <th>Session</th>
                <th>Client</th>
                <th>Key</th>
                <th>Pinned by</th>
                <th class="num-col">Turns</th>
                <th class="num-col">Cached</th>
                <th class="num-col">Tokens</th>
                <th class="num-col">Cost</th>
                <th>Last seen</th>
                <th>Flags</th>
              </tr>
            </thead>
            <tbody>
              {groupThreads(sessions).map(({ session: s, thread }) => {
                const k = s.key ? byId.get(s.key) : undefined;
                return (
                  <tr key={s.session} data-testid="session-row" data-thread-of={s.parent ?? undefined} class={thread ? "thread-row" : undefined}>
                    <td data-label="Session">
                      {thread && (
                        <span class="muted small" title={`A subagent thread of session ${s.parent}`}>
                          ↳ thread{" "}
                        </span>
                      )}
                      <code>{s.session}</code>
                      {!thread && s.parent && <span class="muted small"> (thread of {s.parent})</span>}
                    </td>
                    <td data-label="Client">{CLIENT[s.client] ?? s.client}</td>
                    <td data-label="Key">
                      <span class="key-label">{k?.label ?? keyName(s.key)}</span>
                      {(s.org ?? k?.org) && <span class="org">{s.org ?? k?.org}</span>}
                    </td>
                    <td data-label="Pinned by">
                      {s.binding === "none" ? <span class="muted">{BINDING.none}</span> : <Tag tone="violet">{BINDING[s.binding] ?? s.binding}</Tag>}
                    </td>
                    <td data-label="Turns" class="num num-col">
                      {s.turns}
                    </td>
                    <td data-label="Cached" class="num num-col">
                      {s.input_tokens > 0 ? percent(s.cached_tokens / s.input_tokens) : "—"}
                    </td>
                    <td data-label="Tokens" class="num num-col">
                      {compact(s.input_tokens)} → {compact(s.output_tokens)}
                    </td>
                    <td
                      data-label="Cost"
                      class="num num-col"
                      data-testid="session-cost"
                      title={s.unpriced_requests > 0 ? `${s.unpriced_requests} turn(s) had no price: not counted, and not $0` : "What its turns cost, from their usage"}
                    >
                      {usd(s.cost_usd)}
                      {s.unpriced_requests > 0 && <span class="muted small"> +{s.unpriced_requests} unpriced</span>}
                    </td>
                    <td data-label="Last seen" class="num">
                      {ago(s.last_seen_unix_ms, now.value)}
                    </td>
                    <td data-label="Flags" class="flags">
                      {(s.rescued_items > 0 || s.refused > 0 || s.failed > 0) && (
                        <span class="badges">
                          {s.rescued_items > 0 && (
                            <Tag tone="warn" title="Items dropped because their organization had no usable key">
                              rescued {s.rescued_items}
                            </Tag>
                          )}
                          {s.refused > 0 && (
                            <Tag tone="bad" title={s.last_refusal ?? undefined}>
                              refused {s.refused}
                            </Tag>
                          )}
                          {s.failed > 0 && <Tag tone="bad">failed {s.failed}</Tag>}
                        </span>
                      )}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
