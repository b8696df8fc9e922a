import type { UsageWindow, WindowInfo } from "../api/types";
import { compact, pace } from "../lib/format";
import { Countdown } from "./Countdown";

/** A bar for a share left, 0..1, coloured by how little is left. */
export function Bar({ left, label }: { left: number; label: string }) {
  const share = Math.max(0, Math.min(1, left));
  const tone = share < 0.1 ? "bad" : share < 0.3 ? "warn" : "ok";
  return (
    <svg class={`bar bar-${tone}`} viewBox="0 0 100 6" preserveAspectRatio="none" role="meter" aria-label={label} aria-valuemin={0} aria-valuemax={100} aria-valuenow={Math.round(share * 100)}>
      <rect class="bar-track" x="0" y="0" width="100" height="6" rx="3" />
      <rect class="bar-fill" x="0" y="0" width={share * 100} height="6" rx="3" />
    </svg>
  );
}

/** A window the provider has not reported yet: its title and an unknown bar. */
function Unreported({ title }: { title: string }) {
  return (
    <div class="gauge">
      <div class="gauge-head">
        <span>{title}</span>
        <span class="muted small">not reported yet</span>
      </div>
      <Bar left={1} label={`${title}: unknown`} />
    </div>
  );
}

/** One of a ChatGPT plan's usage windows (5-hour or weekly): the share used, and when it resets. */
export function PlanGauge({ title, window: w }: { title: string; window: UsageWindow | null }) {
  if (!w) {
    return <Unreported title={title} />;
  }
  return (
    <div class="gauge" data-testid="plan-window">
      <div class="gauge-head">
        <span>{title}</span>
        <span class="num">{Math.round(w.used_percent)} % used</span>
      </div>
      <Bar left={Math.max(0, 1 - w.used_percent / 100)} label={`${title} left`} />
      <div class="gauge-foot small">
        <span class="muted">
          {w.resets_unix === null ? "reset not reported" : <>resets in <Countdown until={w.resets_unix * 1000} /></>}
        </span>
      </div>
    </div>
  );
}

/** One rate-limit window: what is left, when it refills, and at what pace it is used. */
export function WindowGauge({ title, window: w }: { title: string; window: WindowInfo | null }) {
  if (!w) {
    return <Unreported title={title} />;
  }
  const left = w.limit > 0 ? w.remaining / w.limit : 1;
  const p = pace(w.pace);
  return (
    <div class="gauge">
      <div class="gauge-head">
        <span>{title}</span>
        <span class="num">
          {compact(w.remaining)} <span class="muted">/ {compact(w.limit)}</span>
        </span>
      </div>
      <Bar left={left} label={`${title} left`} />
      <div class="gauge-foot small">
        <span class="muted">
          resets in <Countdown until={w.resets_at_unix_ms} />
        </span>
        <span class={`pace pace-${p.level}`}>{p.text}</span>
      </div>
    </div>
  );
}
