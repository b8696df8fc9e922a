// The live stores fed by the event stream: where the stream resumes, and the bounded list of recent
// requests. Plain classes with no DOM or network, so they are tested on their own.

import type { Envelope, RequestRecord, Routed } from "../api/types";
import { badges, type BadgeName } from "./decision";

/** How many requests the Live view keeps; older ones are dropped. */
export const LIVE_CAPACITY = 500;

/**
 * Where the event stream stands: the newest event id seen, and which events are new. Events carry
 * increasing ids; a resumed stream may replay some already seen, and those are dropped here. `lagged`
 * has no place in the stream (id 0) and is always new.
 */
export class EventCursor {
  private last: number;

  constructor(after = 0) {
    this.last = after;
  }

  /** The id to resume after (`?after=`). */
  get lastId(): number {
    return this.last;
  }

  /** Whether `envelope` is new; moves the cursor past it when it is. */
  accept(envelope: Envelope): boolean {
    if (envelope.type === "lagged") return true;
    if (envelope.id <= this.last) return false;
    this.last = envelope.id;
    return true;
  }

  /** The stream's address, resuming after the newest event seen. */
  url(base = "/keymux/api/events"): string {
    return this.last > 0 ? `${base}?after=${this.last}` : base;
  }
}

/** One request as the Live view shows it: its decision at once, its record when it finishes. */
export interface LiveRow {
  seq: number;
  at_unix_ms: number;
  routed: Routed | null;
  record: RequestRecord | null;
  badges: BadgeName[];
}

function rowOf(seq: number, routed: Routed | null, record: RequestRecord | null): LiveRow {
  const at = record?.at_unix_ms ?? routed?.at_unix_ms ?? 0;
  const source = record ?? routed;
  return { seq, at_unix_ms: at, routed, record, badges: source ? badges(source) : [] };
}

/**
 * The latest requests, at most `capacity`, one row per request (keyed by the decision's number), newest
 * first. A finished record replaces the routed row of the same request; the oldest rows are dropped.
 */
export class LiveRows {
  private rows = new Map<number, LiveRow>();
  private cache: LiveRow[] | null = null;

  constructor(readonly capacity = LIVE_CAPACITY) {}

  get size(): number {
    return this.rows.size;
  }

  /** A request was routed (still in flight). */
  routed(r: Routed): void {
    const seq = r.decision.seq;
    const had = this.rows.get(seq);
    if (had?.record) return; // finished already (a replay): keep the full record
    if (!had && this.isTooOld(seq)) return;
    this.rows.set(seq, rowOf(seq, r, null));
    this.changed();
  }

  /** A request finished. */
  finished(record: RequestRecord): void {
    const seq = record.decision.seq;
    const had = this.rows.get(seq);
    if (!had && this.isTooOld(seq)) return;
    this.rows.set(seq, rowOf(seq, had?.routed ?? null, record));
    this.changed();
  }

  /** Applies a stream event; true when the rows changed. */
  apply(envelope: Envelope): boolean {
    if (envelope.type === "routed") {
      this.routed(envelope.data);
      return true;
    }
    if (envelope.type === "finished") {
      this.finished(envelope.data);
      return true;
    }
    return false;
  }

  /** Newest first. The same array until something changes (cheap to call every frame). */
  list(): LiveRow[] {
    if (!this.cache) this.cache = [...this.rows.values()].sort((a, b) => b.seq - a.seq);
    return this.cache;
  }

  /** Forgets everything (after the stream lost events, before reloading). */
  clear(): void {
    this.rows.clear();
    this.changed();
  }

  /** At capacity, a request older than every row kept would be dropped at once: do not add it. */
  private isTooOld(seq: number): boolean {
    if (this.rows.size < this.capacity) return false;
    let oldest = Number.POSITIVE_INFINITY;
    for (const k of this.rows.keys()) oldest = Math.min(oldest, k);
    return seq < oldest;
  }

  private changed(): void {
    this.cache = null;
    while (this.rows.size > this.capacity) {
      let oldest = Number.POSITIVE_INFINITY;
      for (const k of this.rows.keys()) oldest = Math.min(oldest, k);
      this.rows.delete(oldest);
    }
  }
}
