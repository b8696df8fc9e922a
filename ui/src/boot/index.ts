// The first module the page runs (main.tsx imports it before anything else; modules run in import
// order): it makes a page that fails while loading say so, and it makes `navigator.language` a tag
// `Intl` accepts before uPlot reads it.
import { catchLoadFailures } from "./failure";
import { repairLanguage } from "./language";

if (typeof window !== "undefined") {
  catchLoadFailures(window, () => document.getElementById("app"));
  repairLanguage(navigator);
}
