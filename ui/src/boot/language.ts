// Some browsers announce a language tag that `Intl` rejects (WebKitGTK under `LC_CTYPE=C.UTF-8`
// announces `C`). uPlot builds `new Intl.NumberFormat(navigator.language)` when its module loads, so
// such a tag would throw before the dashboard renders and leave the page blank. This module is
// imported before anything else: when `navigator.language` is not a tag `Intl` accepts, it shadows
// `navigator.language` and `navigator.languages` on this page's navigator with the announced
// languages `Intl` accepts, or the engine's own default locale when none is.

/** Whether `Intl` accepts `tag` as a language (an empty or missing tag is not one). */
export function usableLanguage(tag: unknown): tag is string {
  if (typeof tag !== "string" || tag === "") return false;
  try {
    new Intl.NumberFormat(tag);
    return true;
  } catch {
    return false;
  }
}

/** The locale `Intl` uses when given none: always one it accepts. */
function engineDefault(): string {
  try {
    return new Intl.NumberFormat().resolvedOptions().locale;
  } catch {
    return "en-US";
  }
}

/**
 * Makes `nav.language` (and `nav.languages`) tags `Intl` accepts, on this navigator object only.
 * Returns the language put in place, or null when the announced one was usable and nothing changed.
 */
export function repairLanguage(nav: { language?: unknown; languages?: unknown } | undefined): string | null {
  if (!nav) return null;
  let announced: unknown;
  let list: unknown;
  try {
    announced = nav.language;
    list = nav.languages;
  } catch {
    announced = undefined;
    list = undefined;
  }
  if (usableLanguage(announced)) return null;
  const usable = Array.isArray(list) ? list.filter(usableLanguage) : [];
  const languages = usable.length > 0 ? usable : [engineDefault()];
  const language = languages[0] ?? "en-US";
  Object.defineProperty(nav, "language", { value: language, configurable: true });
  Object.defineProperty(nav, "languages", { value: Object.freeze([...languages]), configurable: true });
  return language;
}
