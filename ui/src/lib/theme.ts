// The colour scheme (light or dark, from the system) and the chart colours read from the stylesheet,
// so charts follow the same palette as the page.

import { signal } from "@preact/signals";

const query = typeof matchMedia === "function" ? matchMedia("(prefers-color-scheme: dark)") : null;

/** Bumped when the system switches between light and dark. */
export const scheme = signal<"light" | "dark">(query?.matches ? "dark" : "light");
query?.addEventListener("change", (e) => {
  scheme.value = e.matches ? "dark" : "light";
});

/** A CSS custom property of the root element. */
export function cssVar(name: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

/** The series colours, in order. */
export function seriesColors(): string[] {
  return [1, 2, 3, 4, 5, 6, 7, 8].map((i) => cssVar(`--series-${i}`));
}
