// The dashboard's state: what the gateway said last (status), the live requests from the event stream,
// and a clock corrected for the gateway's. Everything is a signal; every collection is bounded.

import { batch, computed, signal } from "@preact/signals";
import { get, loggedOut, messageOf, readStream, startSession } from "../api/client";
import type { DecisionsBody, Envelope, KeyInfo, PoolInfo, StatusBody } from "../api/types";
import { EventCursor, LIVE_CAPACITY, LiveRows, type LiveRow } from "../lib/live";

/** The gateway and its keys, as last read. */
export const status = signal<StatusBody | null>(null);
/** Why the status could not be read, if it could not. */
export const statusError = signal<string | null>(null);
/** The latest requests, newest first (at most `LIVE_CAPACITY`). */
export const live = signal<LiveRow[]>([]);
/** The event stream's state. */
export const stream = signal<"connecting" | "open" | "retrying">("connecting");
/** Events the stream lost (the Live view says so), or null. */
export const lagged = signal<number | null>(null);
/** Bumped when client tokens change (or move to another pool), so the Connect view reloads its list. */
export const tokensVersion = signal(0);
/** Bumped when any request finishes (views that poll may refresh sooner). */
export const finishedCount = signal(0);

/** The gateway's clock minus ours, so countdowns agree with the gateway. */
let skewMs = 0;
/** Now on the gateway's clock, ticking once a second (only for countdowns). */
export const now = signal(Date.now());

export const keys = computed<KeyInfo[]>(() => status.value?.keys ?? []);
export const keysById = computed(() => new Map(keys.value.map((k) => [k.id, k])));
export const keysByFingerprint = computed(() => new Map(keys.value.map((k) => [k.fingerprint, k])));
/** The pools: the built-in `all` first, then the user's, in their order. */
export const pools = computed<PoolInfo[]>(() => status.value?.pools ?? []);
/** The user's own pools (not `all`). */
export const userPools = computed(() => pools.value.filter((p) => !p.builtin));

/** "label · org" for a key id, or the id itself when the key is gone. */
export function keyName(id: string | null | undefined): string {
  if (!id) return "—";
  const k = keysById.value.get(id);
  if (!k) return id;
  return k.org ? `${k.label} (${k.org})` : k.label;
}

const rows = new LiveRows(LIVE_CAPACITY);
let cursor = new EventCursor();
let source: AbortController | null = null;
let frame = 0;
let statusTimer: ReturnType<typeof setTimeout> | null = null;
let retryTimer: ReturnType<typeof setTimeout> | null = null;
let retryDelay = 1000;

/** Publishes the rows at most once per frame, however many events arrived. */
function publish(): void {
  if (frame) return;
  frame = requestAnimationFrame(() => {
    frame = 0;
    live.value = rows.list();
  });
}

export async function refreshStatus(): Promise<void> {
  try {
    const body = await get<StatusBody>("status");
    skewMs = body.gateway.now_unix_ms - Date.now();
    batch(() => {
      status.value = body;
      statusError.value = null;
      now.value = Date.now() + skewMs;
    });
  } catch (e) {
    statusError.value = messageOf(e);
  }
}

/** Reads the status soon, once, however many events asked for it. */
export function scheduleStatus(delayMs = 150): void {
  if (statusTimer) return;
  statusTimer = setTimeout(() => {
    statusTimer = null;
    void refreshStatus();
  }, delayMs);
}

async function loadRecent(): Promise<void> {
  try {
    const body = await get<DecisionsBody>(`decisions?limit=${LIVE_CAPACITY}`);
    for (const record of body.data) rows.finished(record);
    publish();
  } catch (e) {
    statusError.value = messageOf(e);
  }
}

function onEvent(envelope: Envelope): void {
  if (!cursor.accept(envelope)) return;
  switch (envelope.type) {
    case "routed":
    case "finished":
      rows.apply(envelope);
      if (envelope.type === "finished") {
        finishedCount.value++;
        // The key cards' counters (served, tokens, spend, windows) follow the traffic: at most one
        // status read a second however many requests finish.
        scheduleStatus(1000);
      }
      publish();
      break;
    case "key":
      scheduleStatus();
      break;
    case "gateway": {
      const kind = envelope.data.kind;
      // A pool change may move a token (its pool shows in the token list); the pools are in the status.
      if (kind === "token_created" || kind === "token_revoked" || kind === "pools_changed") tokensVersion.value++;
      scheduleStatus(kind === "pools_changed" ? 0 : undefined);
      break;
    }
    case "lagged":
      // The stream dropped events for us: say so, and read again what they would have told.
      lagged.value = (lagged.value ?? 0) + envelope.data.missed;
      scheduleStatus(0);
      void loadRecent();
      break;
  }
}

const EVENT_TYPES = ["routed", "finished", "key", "gateway", "lagged"] as const;

function connect(): void {
  source?.abort();
  const reading = new AbortController();
  source = reading;
  stream.value = "connecting";
  const opened = () => {
    stream.value = "open";
    retryDelay = 1000;
  };
  const handler = (type: string, data: string) => {
    if (!(EVENT_TYPES as readonly string[]).includes(type)) return;
    try {
      onEvent(JSON.parse(data) as Envelope);
    } catch {
      // A frame that is not an envelope: nothing to show.
    }
  };
  const ended = () => {
    // Reconnect, resuming after the last event seen.
    if (source !== reading) return;
    source = null;
    stream.value = "retrying";
    if (retryTimer) clearTimeout(retryTimer);
    retryTimer = setTimeout(async () => {
      retryTimer = null;
      try {
        if (!(await startSession())) return; // logged out: the login screen takes over
      } catch {
        // Gateway unreachable: try again later.
      }
      if (!loggedOut.value) connect();
    }, retryDelay);
    retryDelay = Math.min(retryDelay * 2, 15_000);
  };
  readStream(cursor.url(), reading.signal, opened, handler).then(ended, ended);
}

let started = false;

/** Logs the page in (reads the CSRF token), loads the state and opens the event stream. */
export async function start(): Promise<boolean> {
  if (started) return true;
  let ok: boolean;
  try {
    ok = await startSession();
  } catch (e) {
    statusError.value = messageOf(e);
    return false;
  }
  if (!ok) return false;
  started = true;
  await refreshStatus();
  // Resume the stream from the status's event id, so nothing between the two reads is missed; the
  // recent records and any replayed events are merged by request number.
  const after = status.value?.gateway.last_event_id ?? 0;
  cursor = new EventCursor(after);
  connect();
  await loadRecent();
  setInterval(() => {
    now.value = Date.now() + skewMs;
  }, 1000);
  setInterval(() => {
    if (document.visibilityState === "visible") void refreshStatus();
  }, 10_000);
  addEventListener("pagehide", () => source?.abort());
  return true;
}
