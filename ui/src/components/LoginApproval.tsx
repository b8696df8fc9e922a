// A client's login (Codex's gateway login): the browser flow lands here with `#authorize=<id>`, the
// device flow with `#device` or `#device=<code>`. The person sees who asks, picks the pool the
// client's token is bound to, and approves or refuses. Shown over every view until decided.

import { signal } from "@preact/signals";
import { useEffect, useState } from "preact/hooks";
import { get, messageOf, post } from "../api/client";
import type { LoginDecided, LoginRequest } from "../api/types";
import { forgetLogin, type LoginLink, loginLink, PENDING_LOGIN, pendingLogin, shownUserCode } from "../lib/login";
import { pools } from "../state/store";

/** The fragment's login, read once at start, else one a tab without a session kept (see
 * `lib/login.ts`); cleared when decided. */
export const loginAsked = signal<LoginLink>(loginLink(location.hash) ?? pendingLogin(localStorage, Date.now()));

// A login kept by another tab while this one is open shows here at once.
addEventListener("storage", (e) => {
  if (e.key === PENDING_LOGIN && loginAsked.value === null) loginAsked.value = pendingLogin(localStorage, Date.now());
});

function done(): void {
  loginAsked.value = null;
  forgetLogin(localStorage);
  history.replaceState(null, "", `${location.pathname}${location.search}#/live`);
}

/** The approval pane. */
export function LoginApproval() {
  const link = loginAsked.value;
  const [request, setRequest] = useState<LoginRequest | null>(null);
  const [pool, setPool] = useState("all");
  const [code, setCode] = useState(link?.kind === "device" ? shownUserCode(link.code) : "");
  const [error, setError] = useState<string | null>(null);
  const [result, setResult] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    if (link?.kind !== "authorize") return;
    get<LoginRequest>(`oauth/requests/${link.id}`).then(setRequest, (e) => setError(messageOf(e)));
  }, [link]);

  if (link === null) return null;

  async function decide(approve: boolean) {
    if (link === null) return;
    setBusy(true);
    setError(null);
    try {
      const body = approve ? { approve, pool } : { approve };
      if (link.kind === "authorize") {
        const decided = await post<LoginDecided>(`oauth/requests/${link.id}`, body);
        done();
        // Back to the client's own page on this machine, with the code or the refusal.
        if (decided.redirect) location.assign(decided.redirect);
      } else {
        const decided = await post<LoginDecided>("oauth/device", { ...body, user_code: code });
        setResult(approve ? `${decided.client} is logged in to the pool '${pool}'.` : `${decided.client}'s login was refused.`);
      }
    } catch (e) {
      setError(messageOf(e));
    } finally {
      setBusy(false);
    }
  }

  const who = link.kind === "authorize" ? (request?.client ?? "A client") : "A client";
  return (
    <section class="login-approval card" role="dialog" aria-labelledby="login-approval-title" data-testid="login-approval">
      <h2 id="login-approval-title">{who} asks to log in to Keymux</h2>
      {link.kind === "authorize" && request && (
        <p class="muted">It waits for the answer at {request.callback} on this machine.</p>
      )}
      {link.kind === "device" && (
        <label>
          Code the client shows
          <input
            value={code}
            onInput={(e) => setCode(shownUserCode(e.currentTarget.value))}
            placeholder="BCDF-GHJK"
            autocomplete="off"
            data-testid="login-user-code"
          />
        </label>
      )}
      <label>
        Pool its requests may reach
        <select value={pool} onChange={(e) => setPool(e.currentTarget.value)} data-testid="login-pool">
          {pools.value.map((p) => (
            <option key={p.name} value={p.name}>
              {p.name}
            </option>
          ))}
        </select>
      </label>
      {error && <p class="error" role="alert">{error}</p>}
      {result && <p role="status">{result}</p>}
      <div class="actions">
        <button type="button" class="button" disabled={busy} onClick={() => (result ? done() : decide(false))}>
          {result ? "Close" : "Refuse"}
        </button>
        {!result && (
          <button
            type="button"
            class="button primary"
            disabled={busy || (link.kind === "device" && code.length !== 9) || (link.kind === "authorize" && !request)}
            onClick={() => decide(true)}
            data-testid="login-approve"
          >
            Approve
          </button>
        )}
      </div>
    </section>
  );
}
