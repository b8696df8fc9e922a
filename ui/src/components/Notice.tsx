import type { ComponentChildren } from "preact";

/** A line that says how something went: success, error or plain information. */
export function Notice({ kind, children }: { kind: "ok" | "error" | "info"; children: ComponentChildren }) {
  return (
    <p class={`notice notice-${kind}`} role={kind === "error" ? "alert" : "status"}>
      {children}
    </p>
  );
}
