import type { ComponentChildren } from "preact";
import { useEffect, useRef } from "preact/hooks";

interface Props {
  open: boolean;
  onClose: () => void;
  title: string;
  children: ComponentChildren;
  /** `drawer` slides in from the right; `modal` is centred. */
  kind?: "modal" | "drawer";
  testid?: string;
}

/**
 * A native modal dialog: focus moves in and is kept there, Escape closes it, and focus returns to
 * where it was when it closes.
 */
export function Dialog({ open, onClose, title, children, kind = "modal", testid }: Props) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const d = ref.current;
    if (!d) return;
    if (open && !d.open) d.showModal();
    if (!open && d.open) d.close();
  }, [open]);
  return (
    <dialog
      ref={ref}
      class={kind}
      aria-label={title}
      data-testid={testid}
      onClose={onClose}
      onCancel={(e) => {
        e.preventDefault();
        onClose();
      }}
      onClick={(e) => {
        // A click on the backdrop (the dialog element itself, outside its content) closes it.
        if (e.target === ref.current) onClose();
      }}
    >
      {open && (
        <div class="dialog-body">
          <header class="dialog-head">
            <h2>{title}</h2>
            <button type="button" class="icon-button" aria-label="Close" onClick={onClose}>
              ×
            </button>
          </header>
          {children}
        </div>
      )}
    </dialog>
  );
}
