// Words and decisions for setting a client up from the dashboard.
import type { Client } from "../api/types";

/** The client's name as people write it. */
export function setupLabel(client: Client): string {
  return client === "codex" ? "Codex" : "pi";
}

/** The choice a refused setup names (by the error's code), for the button that makes it. */
export function remedyOf(code: string | null): "custom_provider" | "force" | null {
  switch (code) {
    case "setup_needs_custom_provider":
      return "custom_provider";
    case "setup_needs_force":
      return "force";
    default:
      return null;
  }
}
