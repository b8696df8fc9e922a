// A catch-all for a dashboard that fails while it loads: an error thrown by a script (or a promise
// rejected) before the app has rendered anything shows what failed in the page, instead of a blank
// page. Installed by the first module the page runs, before the libraries and the app load.

/** The words shown for an error thrown while the dashboard loads. */
export function failureText(error: unknown): string {
  let what: string;
  if (error instanceof Error) what = `${error.name}: ${error.message}`;
  else if (typeof error === "string" && error !== "") what = error;
  else what = "a script failed to load";
  return `The dashboard could not start in this browser (${what}). Reload the page; if it stays like this, try another browser, and see the browser's console for details.`;
}

type Target = {
  addEventListener(type: string, listener: (event: any) => void, capture?: boolean): void;
};
type Root = { childElementCount: number; replaceChildren(...nodes: unknown[]): void; ownerDocument: { createElement(tag: string): any } };

/** Shows `error` in `root` unless the app has rendered there already. Returns whether it did. */
export function showFailure(root: Root | null, error: unknown): boolean {
  if (!root || root.childElementCount > 0) return false;
  const message = root.ownerDocument.createElement("p");
  message.className = "load-failure";
  message.setAttribute("role", "alert");
  message.textContent = failureText(error);
  root.replaceChildren(message);
  return true;
}

/** Listens on `win` for errors and rejections while the page loads; shows the first one in `root()`. */
export function catchLoadFailures(win: Target, root: () => Root | null): void {
  const onError = (event: any) => {
    // A script element that failed to load reports an error event without an error object.
    const target = event?.target;
    const error =
      event?.error ?? event?.reason ?? (target && target !== win && target.src ? `could not load ${target.src}` : event?.message);
    showFailure(root(), error);
  };
  win.addEventListener("error", onError, true);
  win.addEventListener("unhandledrejection", onError);
}
