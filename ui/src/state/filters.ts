// What the user chose to see, kept while the page lives: leaving the Live view and coming back (or
// following "show its requests" from the Pools view) keeps the filters.

import { signal } from "@preact/signals";
import type { ClientKind } from "../api/types";
import type { BadgeName } from "../lib/decision";

/** The Live view's filters; "" is "any". `token` is a token's name as `tokenName` gives it. */
export interface LiveFilters {
  client: ClientKind | "";
  key: string;
  org: string;
  pool: string;
  token: string;
  state: BadgeName | "";
  errors: boolean;
}

export const NO_FILTERS: LiveFilters = { client: "", key: "", org: "", pool: "", token: "", state: "", errors: false };

/** The Live view's filters. */
export const liveFilters = signal<LiveFilters>(NO_FILTERS);

/** The pool the Keys view shows ("" for every key). */
export const keysPool = signal("");
