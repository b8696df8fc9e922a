import { useEffect, useState } from "preact/hooks";
import { get, messageOf } from "../api/client";
import type { ClientChecked, ClientsBody } from "../api/types";
import { Tag } from "./Badge";

/**
 * Whether the installed clients work through Keymux: the gateway checks each one when it starts and when
 * its version changes (`keymux clients check` for that client), and this says what it found.
 */
export function ClientChecks() {
  const [clients, setClients] = useState<ClientChecked[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    let alive = true;
    const load = () =>
      get<ClientsBody>("clients")
        .then((b) => alive && (setClients(b.clients), setError(null)))
        .catch((e) => alive && setError(messageOf(e)));
    load();
    // A check ends at most once an hour per client; a minute's delay in showing it is fine.
    const timer = setInterval(load, 60_000);
    return () => {
      alive = false;
      clearInterval(timer);
    };
  }, []);
  if (error) return <p class="muted small">{error}</p>;
  if (!clients || clients.length === 0) return null;
  return (
    <div class="card" data-testid="client-checks">
      <h2>Your clients through Keymux</h2>
      <ul class="plain">
        {clients.map((c) => (
          <li key={c.name} data-testid="client-check">
            {c.ok ? <Tag tone="ok">works</Tag> : <Tag tone="bad">fails</Tag>} {c.summary}
          </li>
        ))}
      </ul>
      <p class="muted small">
        Checked when Keymux starts and when a client's version changes. <code>keymux clients check</code> runs it
        again.
      </p>
    </div>
  );
}
