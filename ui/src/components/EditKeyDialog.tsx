import { useState } from "preact/hooks";
import { messageOf, patch } from "../api/client";
import type { KeyChanges, KeyInfo } from "../api/types";
import { refreshStatus } from "../state/store";
import { Dialog } from "./Dialog";
import { MoneyFields, moneyChanges, moneyOf, numberOrNull, text } from "./MoneyFields";
import { Notice } from "./Notice";


/** Renames a key and changes its settings: priority, token budget, budgets in money (the form pools use too), window kept. */
export function EditKeyDialog({ info, onClose }: { info: KeyInfo; onClose: () => void }) {
  const [label, setLabel] = useState(info.label);
  const [priority, setPriority] = useState(String(info.priority));
  const [budget, setBudget] = useState(text(info.daily_token_budget));
  const [money, setMoney] = useState(() => moneyOf(info));
  const [keepWindow, setKeepWindow] = useState(text(info.reserve_window_pct));
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);

  const submit = async (e: Event) => {
    e.preventDefault();
    const changes: KeyChanges = moneyChanges(money, info);
    if (label.trim() !== info.label) changes.label = label.trim();
    if (Number(priority) !== info.priority) changes.priority = Number(priority);
    if (numberOrNull(budget) !== info.daily_token_budget) changes.daily_token_budget = numberOrNull(budget);
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
        <MoneyFields money={money} onChange={setMoney} testid="edit" about="What this key spends, per local day and month." />
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
