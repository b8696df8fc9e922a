import type { SessionInfo } from "../api/types";

/** A row of the Sessions view: a session, or a subagent thread shown under the session it belongs to. */
export interface SessionRow {
  session: SessionInfo;
  /** A subagent thread whose session is in the list, shown right under it. */
  thread: boolean;
}

/**
 * The sessions in the order given (most recent first), each followed by its subagent threads (Codex
 * threads whose `parent` is that session), most recent first. A thread whose session is not in the list
 * keeps its own place.
 */
export function groupThreads(sessions: SessionInfo[]): SessionRow[] {
  const present = new Set(sessions.map((s) => s.session));
  const threads = new Map<string, SessionInfo[]>();
  for (const s of sessions) {
    if (s.parent && s.parent !== s.session && present.has(s.parent)) {
      const under = threads.get(s.parent) ?? [];
      under.push(s);
      threads.set(s.parent, under);
    }
  }
  const rows: SessionRow[] = [];
  for (const s of sessions) {
    if (s.parent && s.parent !== s.session && present.has(s.parent)) continue;
    rows.push({ session: s, thread: false });
    for (const t of threads.get(s.session) ?? []) rows.push({ session: t, thread: true });
  }
  return rows;
}
