import { describe, expect, it } from "vitest";
import type { SessionInfo } from "../api/types";
import { groupThreads } from "./sessions";

const session = (name: string, parent: string | null = null): SessionInfo =>
  ({ session: name, parent }) as unknown as SessionInfo;

describe("groupThreads", () => {
  it("puts each subagent thread right under its session, in the order given", () => {
    const rows = groupThreads([session("t2", "root"), session("other"), session("root"), session("t1", "root")]);
    expect(rows.map((r) => [r.session.session, r.thread])).toEqual([
      ["other", false],
      ["root", false],
      ["t2", true],
      ["t1", true],
    ]);
  });

  it("keeps a thread whose session is not listed in its own place", () => {
    const rows = groupThreads([session("t1", "gone"), session("a")]);
    expect(rows.map((r) => [r.session.session, r.thread])).toEqual([
      ["t1", false],
      ["a", false],
    ]);
  });
});
