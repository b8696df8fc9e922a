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

