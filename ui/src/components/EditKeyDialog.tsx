import { useState } from "preact/hooks";
import { messageOf, patch } from "../api/client";
import type { KeyChanges, KeyInfo } from "../api/types";
import { refreshStatus } from "../state/store";
import { Dialog } from "./Dialog";
import { Notice } from "./Notice";

const text = (v: number | null) => (v === null ? "" : String(v));
const numberOrNull = (v: string) => (v.trim() ? Number(v) : null);

/** Renames a key and changes its priority, its token budget and its budgets in money. */
export function EditKeyDialog({ info, onClose }: { info: KeyInfo; onClose: () => void }) {
  const [label, setLabel] = useState(info.label);
  const [priority, setPriority] = useState(String(info.priority));
  const [budget, setBudget] = useState(info.daily_token_budget === null ? "" : String(info.daily_token_budget));
  const [daily, setDaily] = useState(text(info.daily_budget_usd));
  const [monthly, setMonthly] = useState(text(info.monthly_budget_usd));
  const [reserveAt, setReserveAt] = useState(text(info.reserve_at));
  const [onLimit, setOnLimit] = useState(info.on_limit);
  const [keepWindow, setKeepWindow] = useState(text(info.reserve_window_pct));
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);

  const submit = async (e: Event) => {
    e.preventDefault();
    const changes: KeyChanges = {};
    if (label.trim() !== info.label) changes.label = label.trim();
    if (Number(priority) !== info.priority) changes.priority = Number(priority);
    const newBudget = budget.trim() ? Number(budget) : null;
    if (newBudget !== info.daily_token_budget) changes.daily_token_budget = newBudget;
    if (numberOrNull(daily) !== info.daily_budget_usd) changes.daily_budget_usd = numberOrNull(daily);
    if (numberOrNull(monthly) !== info.monthly_budget_usd) changes.monthly_budget_usd = numberOrNull(monthly);
    if (numberOrNull(reserveAt) !== info.reserve_at) changes.reserve_at = numberOrNull(reserveAt);
    if (onLimit !== info.on_limit) changes.on_limit = onLimit;
    if (numberOrNull(keepWindow) !== info.reserve_window_pct) changes.reserve_window_pct = numberOrNull(keepWindow);
    if (Object.keys(changes).length === 0) return onClose();
    setBusy(true);
    setError(null);
    try {
      await patch(`keys/${encodeURIComponent(info.id)}`, changes);
      await refreshStatus();
      onClose();
    } catch (err) {
      setError(messageOf(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <Dialog open onClose={onClose} title={`Edit ${info.label}`} testid="edit-key-dialog">
      <form class="form" onSubmit={submit}>
        <label>
          <span>Label</span>
          <input required maxLength={64} value={label} onInput={(e) => setLabel(e.currentTarget.value)} />
        </label>
        <div class="grid-2">
          <label>
            <span>Priority (lower first)</span>
            <input type="number" min={0} max={255} value={priority} onInput={(e) => setPriority(e.currentTarget.value)} />
          </label>
          <label>
            <span>Daily token budget</span>
            <input type="number" min={1} placeholder="no budget" value={budget} onInput={(e) => setBudget(e.currentTarget.value)} />
          </label>
        </div>
        <div class="grid-2">
          <label>
            <span>Daily budget, US$</span>
            <input type="number" min={0} step="any" placeholder="no budget" value={daily} onInput={(e) => setDaily(e.currentTarget.value)} data-testid="edit-daily-usd" />
          </label>
          <label>
            <span>Monthly budget, US$</span>
            <input type="number" min={0} step="any" placeholder="no budget" value={monthly} onInput={(e) => setMonthly(e.currentTarget.value)} />
          </label>
          <label>
            <span>Reserve at, % (no new sessions past it)</span>
            <input type="number" min={1} max={100} placeholder="100" value={reserveAt} onInput={(e) => setReserveAt(e.currentTarget.value)} data-testid="edit-reserve-at" />
          </label>
          <label>
            <span>At 100 %</span>
            <select value={onLimit} onChange={(e) => setOnLimit(e.currentTarget.value as typeof onLimit)} data-testid="edit-on-limit">
              <option value="reserve">keep serving its sessions</option>
              <option value="stop">stop everything until the reset</option>
            </select>
          </label>
        </div>
        <label>
          <span>Keep for its sessions, % of its rate-limit window (no new sessions below it)</span>
          <input type="number" min={1} max={90} placeholder="nothing kept" value={keepWindow} onInput={(e) => setKeepWindow(e.currentTarget.value)} data-testid="edit-reserve-window" />
        </label>
        {error && <Notice kind="error">{error}</Notice>}
        <div class="actions">
          <button type="button" class="button" onClick={onClose}>
            Cancel
          </button>
          <button type="submit" class="button primary" disabled={busy}>
            {busy ? "Saving…" : "Save"}
          </button>
        </div>
      </form>
    </Dialog>
  );
}
