import { describe, expect, it } from "vitest";
import { ago, compact, count, countdown, duration, pace, percent, usd } from "./format";

describe("numbers", () => {
  it("counts with thousands separators and a dash for nothing", () => {
    expect(count(1234567)).toBe("1,234,567");
    expect(count(null)).toBe("—");
    expect(count(Number.NaN)).toBe("—");
  });

  it("compacts to one decimal below ten units and none above, never 10.0k", () => {
    expect(compact(999)).toBe("999");
    expect(compact(1000)).toBe("1k");
    expect(compact(1234)).toBe("1.2k");
    expect(compact(9960)).toBe("10k");
    expect(compact(12_345)).toBe("12k");
    expect(compact(2_500_000)).toBe("2.5M");
    expect(compact(-1500)).toBe("-1.5k");
  });

  it("rounds up into the larger unit instead of showing 1000M", () => {
    expect(compact(999_999_999)).toBe("1B");
    expect(compact(1e12)).toBe("1T");
    expect(compact(999_700)).toBe("1M");
    expect(compact(999.7)).toBe("1k");
  });

  it("shows small shares with a decimal so 0.4 % does not read as zero", () => {
    expect(percent(0.865)).toBe("87%");
    expect(percent(0.004)).toBe("0.4%");
    expect(percent(0)).toBe("0%");
    expect(percent(1)).toBe("100%");
  });
});

describe("durations and countdowns", () => {
  it("picks the unit by size", () => {
    expect(duration(85)).toBe("85 ms");
    expect(duration(1234)).toBe("1.2 s");
    expect(duration(14_400)).toBe("14 s");
    expect(duration(125_000)).toBe("2m 05s");
  });

  it("rounds a countdown up so a cooling key never shows 0s", () => {
    expect(countdown(200)).toBe("1s");
    expect(countdown(59_001)).toBe("1m 00s");
    expect(countdown(30_000)).toBe("30s");
    expect(countdown(3_723_000)).toBe("1h 02m");
    expect(countdown(90_000_000)).toBe("1d 1h");
  });

  it("says now for a moment already past", () => {
    expect(countdown(0)).toBe("now");
    expect(countdown(-5000)).toBe("now");
  });

  it("says how long ago", () => {
    const now = 1_000_000_000;
    expect(ago(now - 1000, now)).toBe("just now");
    expect(ago(now - 30_000, now)).toBe("30s ago");
    expect(ago(now - 5 * 60_000, now)).toBe("5m ago");
    expect(ago(now - 3 * 3_600_000, now)).toBe("3h ago");
  });
});

describe("pace", () => {
  it("warns when a window runs out before its reset", () => {
    expect(pace(1.6)).toEqual({ text: "pace 1.6×: runs out before reset", level: "over" });
    expect(pace(0.9).level).toBe("warn");
    expect(pace(0.3)).toEqual({ text: "pace 0.3×", level: "calm" });
  });

  it("says when the provider has not told the pace", () => {
    expect(pace(null).level).toBe("unknown");
  });
});

describe("usd", () => {
  it("shows cents, fractions of a cent, and no figure", () => {
    expect(usd(12.345)).toBe("$12.35");
    expect(usd(0.00042)).toBe("$0.0004");
    expect(usd(0)).toBe("$0");
    expect(usd(1234.5)).toBe("$1,235");
    expect(usd(null)).toBe("—");
  });
});
