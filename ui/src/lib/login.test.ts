import { describe, expect, it } from "vitest";
import { loginLink, shownUserCode } from "./login";

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
});
