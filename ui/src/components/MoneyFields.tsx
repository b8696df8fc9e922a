import { DEFAULT_MONEY_BUDGET, type MoneyBudget, type MoneyBudgetChange, type OnLimit } from "../api/types";
import { usd } from "../lib/format";

/** A budget in money as a form holds it: text as typed, empty for none. */
export interface Money {
  daily: string;
  monthly: string;
  reserveAt: string;
  onLimit: OnLimit;
}

/** A number as a form field holds it: empty for none. */
export const text = (v: number | null | undefined) => (v === null || v === undefined ? "" : String(v));
/** A form field's number, or null when empty. */
export const numberOrNull = (v: string) => (v.trim() ? Number(v) : null);

/** The form's text for a key's or a pool's budget (a new pool's: the defaults). */
export function moneyOf(budget: MoneyBudget | null): Money {
  const b = budget ?? DEFAULT_MONEY_BUDGET;
  return { daily: text(b.daily_budget_usd), monthly: text(b.monthly_budget_usd), reserveAt: text(b.reserve_at), onLimit: b.on_limit };
}

/** The whole budget the form says (a new pool's). */
export function budgetOf(money: Money): MoneyBudget {
  return {
    daily_budget_usd: numberOrNull(money.daily),
    monthly_budget_usd: numberOrNull(money.monthly),
    reserve_at: numberOrNull(money.reserveAt),
    on_limit: money.onLimit,
  };
}

/** The budget fields that differ from `budget`'s now (from the defaults, for a new pool), as changes. */
export function moneyChanges(money: Money, budget: MoneyBudget | null): MoneyBudgetChange {
  const before = budget ?? DEFAULT_MONEY_BUDGET;
  const out: MoneyBudgetChange = {};
  const daily = numberOrNull(money.daily);
  const monthly = numberOrNull(money.monthly);
  const reserveAt = numberOrNull(money.reserveAt);
  if (daily !== before.daily_budget_usd) out.daily_budget_usd = daily;
  if (monthly !== before.monthly_budget_usd) out.monthly_budget_usd = monthly;
  if (reserveAt !== before.reserve_at) out.reserve_at = reserveAt;
  if (money.onLimit !== before.on_limit) out.on_limit = money.onLimit;
  return out;
}

/** A budget in words, for a review. */
export function budgetWords(money: Money): string {
  const daily = numberOrNull(money.daily);
  const monthly = numberOrNull(money.monthly);
  if (daily === null && monthly === null) return "none";
  const amounts = [daily !== null ? `${usd(daily)} a day` : "", monthly !== null ? `${usd(monthly)} a month` : ""].filter(Boolean).join(" and ");
  const reserve = numberOrNull(money.reserveAt);
  const past = reserve !== null ? `; no new sessions past ${reserve} %` : "";
  return `${amounts}${past}; at 100 % ${money.onLimit === "stop" ? "it stops" : "its sessions go on"}`;
}

interface Props {
  money: Money;
  onChange: (money: Money) => void;
  /** Prefix of the fields' test ids: `edit` (a key) or `pool`. */
  testid: string;
  /** Whose spend the budget counts, in a sentence. */
  about: string;
}

/** The one budget form of the dashboard, a key's and a pool's: per local day and month, the reserve threshold and what happens at 100 %. */
export function MoneyFields({ money, onChange, testid, about }: Props) {
  const set = (field: keyof Money) => (e: { currentTarget: { value: string } }) => onChange({ ...money, [field]: e.currentTarget.value });
  return (
    <fieldset class="field-group" data-testid={`${testid}-budget-fields`}>
      <legend>Budget</legend>
      <p class="muted small">{about} Empty: no budget.</p>
      <div class="grid-2">
        <label>
          <span>Daily budget, US$</span>
          <input type="number" min={0} step="any" placeholder="no budget" value={money.daily} onInput={set("daily")} data-testid={`${testid}-daily-usd`} />
        </label>
        <label>
          <span>Monthly budget, US$</span>
          <input type="number" min={0} step="any" placeholder="no budget" value={money.monthly} onInput={set("monthly")} data-testid={`${testid}-monthly-usd`} />
        </label>
        <label>
          <span>Reserve at, % (no new sessions past it)</span>
          <input type="number" min={1} max={100} placeholder="100" value={money.reserveAt} onInput={set("reserveAt")} data-testid={`${testid}-reserve-at`} />
        </label>
        <label>
          <span>At 100 %</span>
          <select value={money.onLimit} onChange={set("onLimit")} data-testid={`${testid}-on-limit`}>
            <option value="reserve">keep serving its sessions</option>
            <option value="stop">stop everything until the reset</option>
          </select>
        </label>
      </div>
    </fieldset>
  );
}
