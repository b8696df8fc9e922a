import type { ComponentChildren } from "preact";
import { useLayoutEffect, useRef } from "preact/hooks";

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
 *
 * The native dialog follows `open` after every render, in the commit (a layout effect, no deps): an
 * effect run after paint, keyed on `open`, could be dropped or run late when the dialog was closed
 * and opened again within a frame (a live update re-rendering it, or Escape then Enter), leaving its
 * content rendered in a closed, invisible dialog. A `close` event counts only while the dialog is
 * closed: one queued by an earlier close does not shut a dialog opened since.
 */
export function Dialog({ open, onClose, title, children, kind = "modal", testid }: Props) {
  const ref = useRef<HTMLDialogElement>(null);
  useLayoutEffect(() => {
    const d = ref.current;
    if (!d) return;
    if (open && !d.open) d.showModal();
    if (!open && d.open) d.close();
  });
  return (
    <dialog
      ref={ref}
      class={kind}
      aria-label={title}
      data-testid={testid}
      onClose={() => {
        if (!ref.current?.open) onClose();
      }}
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
