import { describe, expect, it } from "vitest";
import { forgetLogin, loginLink, PENDING_LOGIN, PENDING_LOGIN_MS, pendingLogin, rememberLogin, shownUserCode } from "./login";

describe("a client's login in the dashboard", () => {
  it("reads the browser login and the device code the fragment brought, and nothing else", () => {
    expect(loginLink("#authorize=AbC_12-x")).toEqual({ kind: "authorize", id: "AbC_12-x" });
    expect(loginLink("#device")).toEqual({ kind: "device", code: "" });
    expect(loginLink("#device=BCDF-GHJK")).toEqual({ kind: "device", code: "BCDF-GHJK" });
    expect(loginLink("#/live")).toBeNull();
    expect(loginLink("#login=abc")).toBeNull();
    expect(loginLink("#authorize=<script>")).toBeNull();
  });

  it("shows a typed user code as the client shows it", () => {
    expect(shownUserCode("bcdf ghjk")).toBe("BCDF-GHJK");
    expect(shownUserCode("BCD")).toBe("BCD");
    expect(shownUserCode("bcdf-ghjk-extra")).toBe("BCDF-GHJK");
  });

  it("keeps a browser login from a tab without a session for a logged-in tab, until decided or stale", () => {
    const kept = new Map<string, string>();
    const store = {
      getItem: (k: string) => kept.get(k) ?? null,
      setItem: (k: string, v: string) => void kept.set(k, v),
      removeItem: (k: string) => void kept.delete(k),
    } as unknown as Storage;
    rememberLogin(store, { kind: "device", code: "" }, 0);
    expect(pendingLogin(store, 0)).toBeNull();
    rememberLogin(store, { kind: "authorize", id: "req_1" }, 1000);
    expect(pendingLogin(store, 1000 + PENDING_LOGIN_MS - 1)).toEqual({ kind: "authorize", id: "req_1" });
    expect(pendingLogin(store, 1000 + PENDING_LOGIN_MS)).toBeNull();
    expect(kept.has(PENDING_LOGIN)).toBe(false);
    kept.set(PENDING_LOGIN, JSON.stringify({ id: "<script>", at: 0 }));
    expect(pendingLogin(store, 0)).toBeNull();
    kept.set(PENDING_LOGIN, "{cut");
    expect(pendingLogin(store, 0)).toBeNull();
    rememberLogin(store, { kind: "authorize", id: "req_2" }, 0);
    forgetLogin(store);
    expect(pendingLogin(store, 0)).toBeNull();
  });
});
