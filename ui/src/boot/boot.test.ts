import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { failureText, showFailure, catchLoadFailures } from "./failure";
import { repairLanguage, usableLanguage } from "./language";

// Just enough of a browser for uPlot's module to load: it reads window, document and navigator, and
// watches the pixel ratio through matchMedia.
function browser(language: unknown, languages: unknown) {
  const listeners: Record<string, ((event: unknown) => void)[]> = {};
  const win = {
    devicePixelRatio: 1,
    addEventListener: (type: string, f: (event: unknown) => void) => (listeners[type] ??= []).push(f),
    removeEventListener: () => {},
    dispatchEvent: () => true,
  };
  const nav = { language, languages };
  vi.stubGlobal("window", win);
  vi.stubGlobal("document", { getElementById: () => null });
  vi.stubGlobal("navigator", nav);
  vi.stubGlobal("devicePixelRatio", 1);
  vi.stubGlobal("matchMedia", () => ({ addEventListener: () => {}, removeEventListener: () => {} }));
  return { win, nav, listeners };
}

describe("an invalid navigator.language", () => {
  beforeEach(() => vi.resetModules());
  afterEach(() => vi.unstubAllGlobals());

  it("tells usable tags from ones Intl rejects", () => {
    expect(usableLanguage("en-US")).toBe(true);
    expect(usableLanguage("de")).toBe(true);
    expect(usableLanguage("C")).toBe(false);
    expect(usableLanguage("")).toBe(false);
    expect(usableLanguage(undefined)).toBe(false);
  });

  it("stops uPlot from loading when nothing repairs it (the blank page)", async () => {
    browser("C", ["C"]);
    await expect(import("uplot")).rejects.toThrow(RangeError);
  });

  it("lets uPlot load once the first module has run, keeping the usable announced languages", async () => {
    const { nav } = browser("C", ["C", "de-DE", "en"]);
    await import("./index");
    expect(nav.language).toBe("de-DE");
    expect(nav.languages).toEqual(["de-DE", "en"]);
    const uPlot = (await import("uplot")).default;
    expect(typeof uPlot).toBe("function");
  });

  it("falls back to the engine's default when no announced language is usable", () => {
    const nav: { language?: unknown; languages?: unknown } = { language: "C", languages: ["C", "POSIX"] };
    const chosen = repairLanguage(nav);
    expect(usableLanguage(chosen)).toBe(true);
    expect(nav.language).toBe(chosen);
    expect(nav.languages).toEqual([chosen]);
  });

  it("changes nothing when the announced language is usable", () => {
    const nav = { language: "fr-FR", languages: ["fr-FR", "C"] };
    expect(repairLanguage(nav)).toBeNull();
    expect(nav.language).toBe("fr-FR");
    expect(nav.languages).toEqual(["fr-FR", "C"]);
  });
});

describe("a script that fails while the page loads", () => {
  function root(children = 0) {
    const shown: any[] = [];
    return {
      shown,
      childElementCount: children,
      replaceChildren: (...nodes: unknown[]) => shown.splice(0, shown.length, ...nodes),
      ownerDocument: {
        createElement: (tag: string) => ({ tag, attrs: {} as Record<string, string>, setAttribute(k: string, v: string) { this.attrs[k] = v; } }),
      },
    };
  }

  it("says what failed in words", () => {
    expect(failureText(new RangeError("invalid language tag: C"))).toContain("RangeError: invalid language tag: C");
    expect(failureText(undefined)).toContain("a script failed to load");
  });

  it("shows the first error in the empty page instead of leaving it blank", () => {
    const listeners: Record<string, (event: unknown) => void> = {};
    const win = { addEventListener: (type: string, f: (event: unknown) => void) => (listeners[type] = f) };
    const page = root();
    catchLoadFailures(win, () => page);
    listeners.error!({ target: win, error: new RangeError("invalid language tag: C") });
    expect(page.shown).toHaveLength(1);
    expect(page.shown[0].textContent).toMatch(/could not start.*RangeError: invalid language tag: C/);
    expect(page.shown[0].attrs.role).toBe("alert");
  });

  it("names a script that could not be fetched, and a rejected promise", () => {
    const listeners: Record<string, (event: unknown) => void> = {};
    const win = { addEventListener: (type: string, f: (event: unknown) => void) => (listeners[type] = f) };
    const page = root();
    catchLoadFailures(win, () => page);
    listeners.error!({ target: { src: "/assets/index.js" } });
    expect(page.shown[0].textContent).toContain("could not load /assets/index.js");
    const other = root();
    catchLoadFailures(win, () => other);
    listeners.unhandledrejection!({ reason: new TypeError("x is undefined") });
    expect(other.shown[0].textContent).toContain("TypeError: x is undefined");
  });

  it("leaves a page the app has rendered alone", () => {
    const page = root(1);
    expect(showFailure(page, new Error("late"))).toBe(false);
    expect(page.shown).toHaveLength(0);
  });
});
