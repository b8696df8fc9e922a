import { describe, expect, it } from "vitest";
import { DEFAULT_MONEY_BUDGET } from "../api/types";
import { budgetOf, moneyChanges, moneyOf } from "./MoneyFields";

describe("a budget form", () => {
  it("starts a new pool's budget from the gateway's defaults and changes nothing left as it is", () => {
    const fresh = moneyOf(null);
    expect(budgetOf(fresh)).toEqual(DEFAULT_MONEY_BUDGET);
    expect(moneyChanges(fresh, null)).toEqual({});
  });

  it("sends only what differs, and null to remove a budget", () => {
    const set = { ...DEFAULT_MONEY_BUDGET, daily_budget_usd: 5, on_limit: "stop" as const };
    expect(moneyChanges({ ...moneyOf(set), daily: "", monthly: "12.5" }, set)).toEqual({
      daily_budget_usd: null,
      monthly_budget_usd: 12.5,
    });
  });
});
