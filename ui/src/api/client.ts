// Calls to the control API: same origin, the session cookie, and the CSRF header on every change.
// A 401 means the dashboard session is missing or expired: the app then shows how to log in again.

import { signal } from "@preact/signals";
import type { ErrorBody, SessionBody } from "./types";

export const API = "/keymux/api";

/** The session is gone: the app shows the login screen instead of failing quietly. */
export const loggedOut = signal(false);

let csrf: string | null = null;

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
  if (response.status === 401) loggedOut.value = true;
  return new ApiError(message, response.status, code);
}

async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { accept: "application/json" };
  if (method !== "GET") {
    if (csrf === null) await startSession();
    headers["x-keymux-csrf"] = csrf ?? "";
  }
  if (body !== undefined) headers["content-type"] = "application/json";
  let response: Response;
  try {
    response = await fetch(`${API}/${path}`, {
      method,
      headers,
      credentials: "same-origin",
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

/** Reads the session's CSRF token; false when there is no session (log in first). */
export async function startSession(): Promise<boolean> {
  const response = await fetch(`${API}/session`, { credentials: "same-origin", cache: "no-store" });
  if (response.status === 401) {
    loggedOut.value = true;
    return false;
  }
  if (!response.ok) throw await failure(response);
  csrf = ((await response.json()) as SessionBody).csrf;
  loggedOut.value = false;
  return true;
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
