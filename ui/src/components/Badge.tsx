import type { ComponentChildren } from "preact";
import { BADGES, type BadgeName } from "../lib/decision";
import type { Tone } from "../lib/words";

/** A decision badge, from the one table of badges. */
export function Badge({ name }: { name: BadgeName }) {
  const b = BADGES[name];
  return (
    <span class={`badge tone-${b.tone}`} title={b.title} data-badge={name}>
      {name}
    </span>
  );
}

/** A small coloured label (health, status). */
export function Tag({ tone, children, title }: { tone: Tone; children: ComponentChildren; title?: string }) {
  return (
    <span class={`tag tone-${tone}`} title={title}>
      {children}
    </span>
  );
}
