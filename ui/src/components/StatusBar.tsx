import { useState } from "preact/hooks";
import { messageOf, post } from "../api/client";
import type { GatewayInfo } from "../api/types";
import { count } from "../lib/format";
import { planState } from "../lib/keys";
import { keys, refreshStatus, status, statusError, stream } from "../state/store";
import { Countdown } from "./Countdown";

/** The gateway at a glance, always visible: address, keys, load, pause, store and keychain. */
export function StatusBar() {
  const s = status.value;
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  if (!s) {
    return (
      <div class="statusbar" role="status">
        <span class="muted">{statusError.value ?? "Connecting to Keymux…"}</span>
      </div>
    );
  }
  const g: GatewayInfo = s.gateway;
  const toggle = async () => {
    setBusy(true);
    setError(null);
    try {
      await post(g.paused ? "resume" : "pause");
      await refreshStatus();
    } catch (e) {
      setError(messageOf(e));
    } finally {
      setBusy(false);
    }
  };
  const keysTone = g.keys_total === 0 ? "warn" : g.keys_healthy === 0 ? "bad" : g.keys_healthy < g.keys_total ? "warn" : "ok";
  return (
    <div class={`statusbar${g.paused ? " is-paused" : ""}`} data-testid="status-bar">
      <div class="stat stat-address" title="The base URL clients use">
        <span class={`dot ${stream.value === "open" ? "dot-ok" : "dot-warn"}`} title={`Live updates: ${stream.value}`} />
        <code class="num">{g.base_url}</code>
      </div>
      <div class="stat" data-testid="keys-healthy">
        <span class={`dot dot-${keysTone}`} />
        <span class="num">
          {g.keys_healthy}/{g.keys_total}
        </span>
        <span class="label">keys ready</span>
        {g.next_reset_unix_ms !== null && (
          <span class="label">
            · next frees in <Countdown until={g.next_reset_unix_ms} />
          </span>
        )}
      </div>
      <PlanStat />
      <div class="stat">
        <span class="num">{count(g.requests_last_minute)}</span>
        <span class="label">req/min</span>
      </div>
      <div class="stat" title={g.store.error ?? g.store.notice ?? (g.store.path ? `Metrics in ${g.store.path}` : "Metrics in memory")}>
        <span class={`dot ${g.store.error ? "dot-bad" : "dot-ok"}`} />
        <span class="label">{g.store.error ? "metrics store failing" : g.store.persisted ? "metrics stored" : "metrics in memory"}</span>
      </div>
      <div class="stat" title={`Secrets: ${g.keychain.kind}`}>
        <span class={`dot ${g.keychain.ok ? "dot-ok" : "dot-bad"}`} />
        <span class="label">{g.keychain.kind === "memory" ? "keys in memory" : g.keychain.ok ? g.keychain.kind : `${g.keychain.kind} unreachable`}</span>
      </div>
      <div class="stat stat-pause">
        {g.paused && <span class="paused-flag">Paused: new requests get 503</span>}
        <button type="button" class={`button small${g.paused ? " primary" : ""}`} onClick={toggle} disabled={busy} data-testid="pause-toggle">
          {g.paused ? "Resume gateway" : "Pause gateway"}
        </button>
      </div>
      {(g.store.error || error) && (
        <div class="statusbar-alert" role="alert">
          {error ?? `Metrics store: ${g.store.error}`}
        </div>
      )}
    </div>
  );
}

/** Where new sessions go while a ChatGPT plan is in the pool (the tray's menu says the same). */
function PlanStat() {
  const plan = planState(keys.value);
  if (!plan) return null;
  const primary = plan.key.plan_windows?.primary ?? null;
  const title = `Your ChatGPT plan (${plan.key.label}) takes new sessions first while its usage allows; when it is used up they go to your API keys until it resets.`;
  return (
    <div class="stat" data-testid="status-plan" title={title}>
      {plan.kind === "first" && (
        <>
          <span class="dot dot-ok" />
          <span class="label">Plan first</span>
          {primary && <span class="label">· 5h {Math.round(primary.used_percent)} %</span>}
        </>
      )}
      {plan.kind === "used_up" && (
        <>
          <span class="dot dot-warn" />
          <span class="label">
            Plan used up · back in <Countdown until={plan.until} />
          </span>
        </>
      )}
      {plan.kind === "unavailable" && (
        <>
          <span class="dot dot-bad" />
          <span class="label">Plan unavailable · API keys serve</span>
        </>
      )}
    </div>
  );
}
