import type { ComponentChildren } from "preact";
import { Dialog } from "./Dialog";

interface Props {
  open: boolean;
  title: string;
  confirm: string;
  busy?: boolean;
  onConfirm: () => void;
  onCancel: () => void;
  children: ComponentChildren;
}

/** Asks before something that cannot be undone; the safe choice has the focus. */
export function ConfirmDialog({ open, title, confirm, busy, onConfirm, onCancel, children }: Props) {
  return (
    <Dialog open={open} onClose={onCancel} title={title} testid="confirm-dialog">
      <div class="confirm-text">{children}</div>
      <div class="actions">
        <button type="button" class="button" onClick={onCancel} autoFocus>
          Cancel
        </button>
        <button type="button" class="button danger" onClick={onConfirm} disabled={busy}>
          {busy ? "Working…" : confirm}
        </button>
      </div>
    </Dialog>
  );
}
