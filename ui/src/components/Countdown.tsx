import { countdown } from "../lib/format";
import { now } from "../state/store";

/** Time left until a moment on the gateway's clock, updated every second. */
export function Countdown({ until }: { until: number }) {
  return <span class="num">{countdown(until - now.value)}</span>;
}
