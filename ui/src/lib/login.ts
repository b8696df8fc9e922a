// A client's login as the dashboard reads it: which login the page's fragment brought, and the user
// code a person types (the component is components/LoginApproval.tsx).

/** What the page's fragment asks for: a browser login to decide, a device code to enter, or nothing. */
export type LoginLink = { kind: "authorize"; id: string } | { kind: "device"; code: string } | null;

/** Reads the fragment a login brought (`#authorize=…`, `#device`, `#device=ABCD-EFGH`). */
export function loginLink(hash: string): LoginLink {
  const authorize = /^#authorize=([A-Za-z0-9_-]+)$/.exec(hash);
  if (authorize?.[1]) return { kind: "authorize", id: authorize[1] };
  const device = /^#device(?:=([A-Za-z-]*))?$/.exec(hash);
  if (device) return { kind: "device", code: device[1] ?? "" };
  return null;
}

/** A user code as the client shows it (`BCDF-GHJK`), whatever case or spacing it was typed in. */
export function shownUserCode(typed: string): string {
  const letters = typed.replace(/[^A-Za-z]/g, "").toUpperCase().slice(0, 8);
  return letters.length > 4 ? `${letters.slice(0, 4)}-${letters.slice(4)}` : letters;
}


/** Where a browser login that reached a tab without a dashboard session waits for a tab that has one:
 * Codex opens its own tab, which cannot log in to the dashboard (a login link opens another), so the
 * request's id (not a credential: deciding it needs a session) is kept in this origin's storage, and
 * every logged-in tab, already open or opened next, shows it. */
export const PENDING_LOGIN = "keymux.pendingLogin";

/** How long a kept request is offered; the gateway's own expiry decides, this only stops a stale one
 * from being shown at every start. */
export const PENDING_LOGIN_MS = 10 * 60 * 1000;

/** Keeps a browser login for a logged-in tab. */
export function rememberLogin(store: Storage, link: LoginLink, now: number): void {
  if (link?.kind === "authorize") store.setItem(PENDING_LOGIN, JSON.stringify({ id: link.id, at: now }));
}

/** The browser login kept for this tab, if one is there and fresh; a stale or unreadable one is dropped. */
export function pendingLogin(store: Storage, now: number): LoginLink {
  const kept = store.getItem(PENDING_LOGIN);
  if (kept === null) return null;
  try {
    const { id, at } = JSON.parse(kept) as { id?: unknown; at?: unknown };
    if (typeof id === "string" && typeof at === "number" && now - at < PENDING_LOGIN_MS) {
      const link = loginLink(`#authorize=${id}`);
      if (link) return link;
    }
  } catch {
    // Not ours, or cut: dropped below.
  }
  store.removeItem(PENDING_LOGIN);
  return null;
}

/** Forgets the kept browser login once it is decided. */
export function forgetLogin(store: Storage): void {
  store.removeItem(PENDING_LOGIN);
}
