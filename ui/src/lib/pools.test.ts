import { describe, expect, it } from "vitest";
import {
  policySentence,
  emptyPoolSentence,
  fallbackPool,
  fallbackSentence,
  keySections,
  poolTone,
  reachOf,
  readyText,
  tokenName,
} from "./pools";
import { decision, keyInfo, poolInfo } from "./testing";

const keys = [keyInfo("k_a1"), keyInfo("k_b1"), keyInfo("k_c1"), keyInfo("k_d1")];
const all = poolInfo("all", ["k_a1", "k_b1", "k_c1", "k_d1"]);
const work = poolInfo("work", ["k_b1", "k_c1"]);
const personal = poolInfo("personal", ["k_a1", "k_b1"]);

describe("a request's token and pool", () => {
  it("names the environment's nameless token as the variable it comes from", () => {
    expect(tokenName("")).toBe("KEYMUX_CLIENT_TOKEN");
    expect(tokenName("acme-repo")).toBe("acme-repo");
  });

  it("finds the fallback pool that served, and none when its own pool did", () => {
    const fell = decision({ reasons: [{ rule: "pool_fallback", from: "work", to: "personal" }] });
    expect(fallbackPool(fell)).toBe("personal");
    expect(fallbackPool(decision())).toBeNull();
  });
});

describe("pool colours", () => {
  it("keeps all grey and gives the user's pools distinct colours by their order", () => {
    const pools = [all, work, personal];
    expect(poolTone("all", pools)).toBe("muted");
    expect(poolTone("work", pools)).not.toBe(poolTone("personal", pools));
    expect(poolTone("work", pools)).not.toBe("muted");
    expect(poolTone("Work", pools)).toBe(poolTone("work", pools));
  });

  it("shows a pool that is gone in grey", () => {
    expect(poolTone("gone", [all, work])).toBe("muted");
  });
});

describe("pool sentences", () => {
  it("counts the ready keys of the pool", () => {
    expect(readyText({ ...work, usable: 1 })).toBe("1/2 ready");
  });

  it("says an empty pool's requests get 503, unless it falls back", () => {
    expect(emptyPoolSentence(poolInfo("spare", []))).toBe("No keys: its requests get 503.");
    expect(emptyPoolSentence(poolInfo("spare", [], { fallback: ["work"] }))).toBe(
      "No keys: its requests go to its fallback pool (work).",
    );
  });

  it("says which keys a pool's tokens reach, fallbacks last", () => {
    expect(reachOf(all, keys)).toBe("every key");
    expect(reachOf(undefined, keys)).toBe("every key");
    expect(reachOf(work, keys)).toBe("only b1, c1");
    expect(reachOf({ ...work, fallback: ["personal"] }, keys)).toBe("only b1, c1, then (only when none of them can serve) personal");
    expect(reachOf(poolInfo("spare", [], { fallback: ["work"] }), keys)).toBe("no key of the pool (it is empty), only its fallback work");
    expect(reachOf(poolInfo("spare", []), keys)).toBe("no key at all (the pool is empty): they get 503");
  });

  it("lists fallbacks in order", () => {
    expect(fallbackSentence({ ...work, fallback: ["personal", "all"] })).toContain("personal, then all");
    expect(fallbackSentence(work)).toContain("None");
    expect(fallbackSentence(all)).toContain("every key");
  });
});

describe("the Keys view's sections", () => {
  it("has nothing to group by without pools of the user's", () => {
    expect(keySections(keys, [all], "")).toBeNull();
  });

  it("shows each pool with its keys, a key in two pools in both, then the keys in none", () => {
    const sections = keySections(keys, [all, work, personal], "");
    expect(sections?.map((s) => [s.pool?.name ?? null, s.keys.map((k) => k.id)])).toEqual([
      ["work", ["k_b1", "k_c1"]],
      ["personal", ["k_a1", "k_b1"]],
      [null, ["k_d1"]],
    ]);
  });

  it("shows only the chosen pool's keys", () => {
    const sections = keySections(keys, [all, work, personal], "work");
    expect(sections?.map((s) => [s.pool?.name, s.keys.map((k) => k.id)])).toEqual([["work", ["k_b1", "k_c1"]]]);
  });

  it("shows an empty pool as a section with no keys", () => {
    const sections = keySections(keys, [all, poolInfo("spare", [])], "spare");
    expect(sections).toEqual([{ pool: poolInfo("spare", []), keys: [] }]);
  });
});

describe("policySentence", () => {
  it("says whether the priority tier is allowed and which way the keys go out", () => {
    expect(policySentence(poolInfo("home", ["k_a1"]))).toBe(
      "The priority tier (Fast mode) and ultrafast are allowed; its keys go out direct.",
    );
    expect(policySentence(poolInfo("work", ["k_a1"], { allow_priority: false, proxy: "http://proxy.example:3128" }))).toBe(
      "Requests for the priority tier (Fast mode) or ultrafast are sent as standard; its keys go out through the proxy http://proxy.example:3128.",
    );
    expect(policySentence(poolInfo("team", ["k_a1"], { allow_ultrafast: false }))).toBe(
      "The priority tier (Fast mode) is allowed; ultrafast requests are sent as priority; its keys go out direct.",
    );
  });
});
