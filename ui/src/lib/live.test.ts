import { describe, expect, it } from "vitest";
import type { Envelope, RequestRecord, Routed } from "../api/types";
import { EventCursor, LiveRows } from "./live";
import { decision as decisionWith } from "./testing";

const decision = (seq: number) => decisionWith({ seq });


function routed(seq: number): Routed {
  return {
    at_unix_ms: 1000 + seq,
    operation: "responses_create",
    transport: "http",
    client: "pi",
    token: "codex",
    pool: "all",
    session: null,
    parent_session: null,
    model: "gpt-5.5",
    decision: decision(seq),
  };
}

function finished(seq: number, status = 200): RequestRecord {
  return {
    ...routed(seq),
    stream: false,
    attempts: [],
    served_by: "k_a1",
    status,
    error: null,
    upstream_code: null,
    rescued_items: 0,
    ttfb_ms: 1,
    duration_ms: 2,
    usage: null,
    cost_usd: null,
    unpriced: null,
  };
}

function env(id: number, seq: number, type: "routed" | "finished" = "finished"): Envelope {
  return type === "routed"
    ? { id, at_unix_ms: 0, type, data: routed(seq) }
    : { id, at_unix_ms: 0, type, data: finished(seq) };
}

describe("EventCursor", () => {
  it("drops events already seen and resumes after the newest", () => {
    const c = new EventCursor(10);
    expect(c.accept(env(9, 1))).toBe(false);
    expect(c.accept(env(10, 1))).toBe(false);
    expect(c.accept(env(11, 2))).toBe(true);
    expect(c.accept(env(11, 2))).toBe(false);
    expect(c.lastId).toBe(11);
    expect(c.url()).toBe("/keymux/api/events?after=11");
  });

  it("starts from now when it has seen nothing", () => {
    expect(new EventCursor().url()).toBe("/keymux/api/events");
  });

  it("always passes a lagged notice, which has no id of its own", () => {
    const c = new EventCursor(50);
    const lagged: Envelope = { id: 0, at_unix_ms: 0, type: "lagged", data: { missed: 7 } };
    expect(c.accept(lagged)).toBe(true);
    expect(c.lastId).toBe(50);
  });
});

describe("LiveRows", () => {
  it("keeps at most its capacity, dropping the oldest requests", () => {
    const rows = new LiveRows(3);
    for (let seq = 1; seq <= 5; seq++) rows.finished(finished(seq));
    expect(rows.size).toBe(3);
    expect(rows.list().map((r) => r.seq)).toEqual([5, 4, 3]);
  });

  it("stays bounded under a long burst", () => {
    const rows = new LiveRows(500);
    for (let seq = 1; seq <= 5000; seq++) {
      rows.apply(env(seq * 2 - 1, seq, "routed"));
      rows.apply(env(seq * 2, seq, "finished"));
    }
    expect(rows.size).toBe(500);
    expect(rows.list()[0]?.seq).toBe(5000);
    expect(rows.list()[499]?.seq).toBe(4501);
  });

  it("keeps one row per request: the finished record replaces its routed decision", () => {
    const rows = new LiveRows(10);
    rows.routed(routed(7));
    expect(rows.list()[0]?.record).toBeNull();
    rows.finished(finished(7, 429));
    expect(rows.size).toBe(1);
    expect(rows.list()[0]?.record?.status).toBe(429);
    expect(rows.list()[0]?.routed).not.toBeNull();
  });

  it("does not let a replayed decision hide a finished record", () => {
    const rows = new LiveRows(10);
    rows.finished(finished(3));
    rows.routed(routed(3));
    expect(rows.list()[0]?.record).not.toBeNull();
  });

  it("ignores a late record older than everything kept at capacity", () => {
    const rows = new LiveRows(2);
    rows.finished(finished(10));
    rows.finished(finished(11));
    rows.finished(finished(1));
    expect(rows.list().map((r) => r.seq)).toEqual([11, 10]);
  });

  it("returns the same list until something changes", () => {
    const rows = new LiveRows(10);
    rows.finished(finished(1));
    const a = rows.list();
    expect(rows.list()).toBe(a);
    rows.finished(finished(2));
    expect(rows.list()).not.toBe(a);
  });

  it("derives badges once per row", () => {
    const rows = new LiveRows(10);
    rows.finished(finished(1));
    expect(rows.list()[0]?.badges).toEqual(["BALANCED"]);
  });
});
