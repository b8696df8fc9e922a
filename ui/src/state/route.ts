// Hash routing: #/live, #/keys, #/pools, #/sessions, #/usage, #/connect. The gateway serves the page for any
// path, but a hash keeps the address stable when the tray reopens the window.

import { signal } from "@preact/signals";

export const VIEWS = [
  { id: "live", title: "Live" },
  { id: "keys", title: "Keys" },
  { id: "pools", title: "Pools" },
  { id: "sessions", title: "Sessions" },
  { id: "usage", title: "Usage" },
  { id: "connect", title: "Connect" },
] as const;

export type ViewId = (typeof VIEWS)[number]["id"];

function read(): ViewId {
  const id = location.hash.replace(/^#\/?/, "").split(/[/?]/)[0];
  return (VIEWS.find((v) => v.id === id)?.id ?? "live") as ViewId;
}

export const view = signal<ViewId>(read());

addEventListener("hashchange", () => {
  view.value = read();
});

export function go(id: ViewId): void {
  location.hash = `#/${id}`;
}
