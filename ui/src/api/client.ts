// Calls to the control API: same origin, with the dashboard session in a header on every call.
// The session is a token the page got for a one-time login code and keeps in this tab's
// sessionStorage, which no other origin (another port on 127.0.0.1 included) can read; there is no
// cookie a foreign page could ride on, and a header cannot be sent cross-origin without a CORS
// preflight, which Keymux never grants. A 401 means the session is missing or over: the app then
// shows how to log in again.

import { signal } from "@preact/signals";
import type { ErrorBody, SessionToken } from "./types";
import { SseParser } from "../lib/sse";

export const API = "/keymux/api";
/** The header that carries the session. */
const SESSION_HEADER = "x-keymux-session";
/** Where this tab keeps its session. */
const SESSION_KEY = "keymux.session";

/** The session is gone: the app shows the login screen instead of failing quietly. */
export const loggedOut = signal(false);

let session: string | null = sessionStorage.getItem(SESSION_KEY);

/**
 * Set once the person logs out: a call asked for after that (a status read an event scheduled, the
 * periodic refresh) is not sent with the ending session, so the gateway never sees it refused.
 */
let leaving = false;

function forget(): void {
  session = null;
  sessionStorage.removeItem(SESSION_KEY);
  loggedOut.value = true;
}

/** A failed call, with the gateway's message for the user. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string | null,
  ) {
    super(message);
  }
}

async function failure(response: Response): Promise<ApiError> {
  let message = `${response.status} ${response.statusText}`.trim();
  let code: string | null = null;
  try {
    const body = (await response.json()) as ErrorBody;
    if (body?.error?.message) message = body.error.message;
    code = body?.error?.code ?? null;
  } catch {
    // Not JSON: the status line has to do.
  }
  if (response.status === 401) forget();
  return new ApiError(message, response.status, code);
}

function headers(): Record<string, string> {
  const out: Record<string, string> = { accept: "application/json" };
  if (session !== null) out[SESSION_HEADER] = session;
  return out;
}

async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  if (leaving && path !== "logout") throw new ApiError("Logged out.", 401, "logged_out");
  const sent = headers();
  if (body !== undefined) sent["content-type"] = "application/json";
  let response: Response;
  try {
    response = await fetch(`${API}/${path}`, {
      method,
      headers: sent,
      credentials: "omit",
      cache: "no-store",
      body: body === undefined ? null : JSON.stringify(body),
    });
  } catch {
    throw new ApiError("Keymux did not answer. Is it still running?", 0, "unreachable");
  }
  if (!response.ok) throw await failure(response);
  if (response.status === 204) return undefined as T;
  return (await response.json()) as T;
}

/** The login code a login link brought in the page's fragment (`#login=…`), if any. */
export function loginCode(hash: string): string | null {
  const match = /^#login=([A-Za-z0-9_-]+)$/.exec(hash);
  return match?.[1] ?? null;
}

/**
 * Logs the page in: a login code in the fragment is exchanged (once) for a session kept in this tab.
 * False when the page has no session (log in first).
 */
export async function startSession(): Promise<boolean> {
  const code = loginCode(location.hash);
  if (code !== null) {
    // The code is spent either way: keep it out of the history and the address bar.
    history.replaceState(null, "", `${location.pathname}${location.search}#/live`);
    const response = await fetch(`${API}/session`, {
      method: "POST",
      headers: { accept: "application/json", "content-type": "application/json" },
      credentials: "omit",
      cache: "no-store",
      body: JSON.stringify({ code }),
    });
    if (response.ok) {
      const token = ((await response.json()) as SessionToken).token;
      session = token;
      sessionStorage.setItem(SESSION_KEY, token);
    } else if (response.status !== 401) {
      throw await failure(response);
    }
  }
  if (session === null) {
    loggedOut.value = true;
    return false;
  }
  loggedOut.value = false;
  return true;
}

/** Ends the session, here and at the gateway. */
export async function logout(): Promise<void> {
  leaving = true;
  try {
    await call<void>("POST", "logout");
  } finally {
    forget();
  }
}

/**
 * Reads the event stream at `path` with the session header, handing each event to `onEvent`; calls
 * `onOpen` once the stream is open. Resolves when the stream ends; rejects when it cannot open.
 */
export async function readStream(
  path: string,
  signal: AbortSignal,
  onOpen: () => void,
  onEvent: (event: string, data: string) => void,
): Promise<void> {
  const response = await fetch(path, {
    headers: { ...headers(), accept: "text/event-stream" },
    credentials: "omit",
    cache: "no-store",
    signal,
  });
  if (!response.ok || !response.body) throw await failure(response);
  onOpen();
  const parser = new SseParser();
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    for (const e of parser.push(decoder.decode(value, { stream: true }))) onEvent(e.event, e.data);
  }
}

export const get = <T>(path: string) => call<T>("GET", path);
export const post = <T>(path: string, body?: unknown) => call<T>("POST", path, body ?? {});
export const patch = <T>(path: string, body: unknown) => call<T>("PATCH", path, body);
export const del = (path: string) => call<void>("DELETE", path);

/** The message to show for anything thrown by a call. */
export function messageOf(e: unknown): string {
  if (e instanceof ApiError) return e.message;
  if (e instanceof Error) return e.message;
  return String(e);
}
