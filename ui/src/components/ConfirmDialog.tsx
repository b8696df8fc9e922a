import type { ComponentChildren } from "preact";
import { Dialog } from "./Dialog";

interface Props {
  open: boolean;
  title: string;
  confirm: string;
  busy?: boolean;
  /** `danger` for what cannot be undone, `primary` for a change that can be made again. */
  tone?: "danger" | "primary";
  onConfirm: () => void;
  onCancel: () => void;
  children: ComponentChildren;
}

/** Asks before a change (one that cannot be undone, by default); the safe choice has the focus. */
export function ConfirmDialog({ open, title, confirm, busy, tone = "danger", onConfirm, onCancel, children }: Props) {
  return (
    <Dialog open={open} onClose={onCancel} title={title} testid="confirm-dialog">
      <div class="confirm-text">{children}</div>
      <div class="actions">
        <button type="button" class="button" onClick={onCancel} autoFocus>
          Cancel
        </button>
        <button type="button" class={`button ${tone}`} onClick={onConfirm} disabled={busy} data-testid="confirm">
          {busy ? "Working…" : confirm}
        </button>
      </div>
    </Dialog>
  );
}
