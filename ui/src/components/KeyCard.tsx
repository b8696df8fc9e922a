import { useState } from "preact/hooks";
import { del, messageOf, post } from "../api/client";
import type { KeyInfo, KeyTestBody } from "../api/types";
import { compact, duration, percent, usd } from "../lib/format";
import { planStateOf } from "../lib/keys";
import { HEALTH, PROVIDER } from "../lib/words";
import { keys, refreshStatus, status } from "../state/store";
import { Tag } from "./Badge";
import { ConfirmDialog } from "./ConfirmDialog";
import { Countdown } from "./Countdown";
import { EditKeyDialog } from "./EditKeyDialog";
import { Bar, PlanGauge, WindowGauge } from "./Gauge";
import { Notice } from "./Notice";
import { PoolBadge } from "./PoolBadge";
import { Sparkline } from "./Sparkline";

interface Props {
  info: KeyInfo;
  spark: { times: number[]; values: number[] } | null;
  /** Shows its organization (when the cards are not grouped by it). */
  showOrg?: boolean;
}

/** One key: health, headroom, today's tokens, cache share, last day's requests, and what to do with it. */
export function KeyCard({ info, spark, showOrg = false }: Props) {
  const [busy, setBusy] = useState<string | null>(null);
  const [message, setMessage] = useState<{ ok: boolean; text: string } | null>(null);
  const [editing, setEditing] = useState(false);
  const [removing, setRemoving] = useState(false);
  const paused = status.value?.gateway.paused ?? false;
  const plan = info.plan ? planStateOf(info) : null;
  // A plan its answers reported used up is still "ready" for the sessions on it, but closed to new ones:
  // until when, then.
  const planClosed = plan?.kind === "used_up" && info.health === "ready" ? plan.until : null;
  const health = planClosed !== null ? { name: "used up", tone: "warn" as const } : (HEALTH[info.health] ?? { name: info.health, tone: "muted" as const });

  const act = async (what: string, run: () => Promise<string>) => {
    setBusy(what);
    setMessage(null);
    try {
      setMessage({ ok: true, text: await run() });
      await refreshStatus();
    } catch (e) {
      setMessage({ ok: false, text: messageOf(e) });
    } finally {
      setBusy(null);
    }
  };
  const path = `keys/${encodeURIComponent(info.id)}`;
  const test = () =>
    act("test", async () => {
      const t = await post<KeyTestBody>(`${path}/test`);
      const head = t.ok ? "Works" : "Failed";
      const org = t.org ? `, organization ${t.org}` : "";
      return `${head}${t.status ? ` (${t.status}${org})` : org} in ${duration(t.duration_ms)}: ${t.message}`;
    }).then(() => undefined);
  const toggle = () =>
    act("toggle", async () => {
      const on = info.health === "disabled";
      await post(`${path}/${on ? "enable" : "disable"}`);
      return on ? "Enabled: it takes requests again." : "Disabled: it takes no new requests.";
    });
  const remove = async () => {
    setBusy("remove");
    try {
      await del(path);
      setRemoving(false);
      await refreshStatus();
    } catch (e) {
      setRemoving(false);
      setMessage({ ok: false, text: messageOf(e) });
    } finally {
      setBusy(null);
    }
  };

  // A test result says whether it worked; a failed test is not an error of the page.
  const testFailed = message?.ok && message.text.startsWith("Failed");
  const sameOrg = keys.value.filter((k) => k.id !== info.id && k.org && k.org === info.org);
  const budget = info.daily_token_budget;
  const resting = info.health === "cooling" || info.health === "quota_exhausted";

  return (
    <article class={`key-card health-${info.health}`} data-testid="key-card" data-key-id={info.id} data-label={info.label}>
      <header class="key-head">
        <div class="key-title">
          <h3>{info.label}</h3>
          {info.provider !== "openai" && <Tag tone="muted">{PROVIDER[info.provider]}</Tag>}
        </div>
        <div class="key-health" data-testid="key-health">
          <Tag tone={health.tone}>
            {health.name}
            {planClosed !== null && (
              <>
                {" "}
                <span data-testid="key-countdown">
                  <Countdown until={planClosed} />
                </span>
              </>
            )}
            {info.until_unix_ms !== null &&
              (info.health === "cooling" || info.health === "quota_exhausted" || info.health === "unreachable") && (
              <>
                {" "}
                <span data-testid="key-countdown">
                  <Countdown until={info.until_unix_ms} />
                </span>
              </>
            )}
          </Tag>
          {paused && <Tag tone="warn">gateway paused</Tag>}
        </div>
      </header>
      {info.pools.length > 0 && (
        <p class="badges key-pools" data-testid="key-pools" aria-label="Its pools">
          {info.pools.map((p) => (
            <PoolBadge key={p} name={p} />
          ))}
        </p>
      )}
      <p class="key-meta">
        {showOrg && <code class="key-org">{info.org ?? "organization not known yet"}</code>}
        <code title="Short keyed fingerprint of the secret (never the key)">{info.fingerprint}</code>
        <span>priority {info.priority}</span>
        {info.in_flight > 0 && <span class="num">{info.in_flight} in flight</span>}
        {info.source !== "keychain" && <span>from {info.source}</span>}
      </p>

      {info.plan ? (
        <div class="gauges" data-testid="plan-windows">
          <p class="small muted plan-note" data-testid="plan-note">
            ChatGPT account <code>{info.plan.account_id}</code>
            {info.plan.plan_type && <> ({info.plan.plan_type} plan)</>}
            {plan?.kind === "used_up" ? (
              <>
                : <strong class="plan-used-up">used up</strong>, new sessions go to your API keys for{" "}
                <Countdown until={plan.until} />
              </>
            ) : plan?.kind === "first" ? (
              <>: new sessions go here first</>
            ) : null}
          </p>
          <PlanGauge title="5-hour" window={info.plan_windows?.primary ?? null} />
          <PlanGauge title="Weekly" window={info.plan_windows?.secondary ?? null} />
        </div>
      ) : (
        <div class="gauges">
          <WindowGauge title="Requests" window={info.requests_window} />
          <WindowGauge title="Tokens" window={info.tokens_window} />
        </div>
      )}
      {(info.window_reserved || info.window_runs_out_unix_ms !== null || info.reserve_window_pct !== null) && (
        <p class="small muted key-window-note" data-testid="key-window-note">
          {info.window_reserved && (
            <Tag tone="warn" title={`Less than ${info.reserve_window_pct} % of a window is left: it takes no new sessions until the window refills; the sessions already on it go on`}>
              window kept for its sessions
            </Tag>
          )}
          {info.reserve_window_pct !== null && !info.window_reserved && <span>keeps {info.reserve_window_pct} % of its window for its sessions</span>}
          {info.window_runs_out_unix_ms !== null && info.health === "ready" && (
            <span title="When a rate-limit window runs out at its pace since it began (before it refills)">
              {" "}window runs out in <Countdown until={info.window_runs_out_unix_ms} />
            </span>
          )}
        </p>
      )}

      <div class="key-stats">
        <div class="key-stat">
          <span class="muted small">Today</span>
          <span class="num">
            {compact(info.tokens_today)}
            {budget !== null ? <span class="muted"> / {compact(budget)}</span> : <span class="muted"> tokens</span>}
          </span>
          {budget !== null && <Bar left={1 - info.tokens_today / Math.max(1, budget)} label="Daily budget left" />}
        </div>
        {info.plan ? (
          <div class="key-stat" data-testid="key-spend" title="Your ChatGPT plan's subscription includes what it serves">
            <span class="muted small">Spent</span>
            <span class="num">in plan</span>
            <span class="muted small">nothing more</span>
          </div>
        ) : (
          <div class="key-stat" data-testid="key-spend" title="Spent today and this month (local day and month)">
            <span class="muted small">Spent today</span>
            <span class="num">{usd(info.spend_today_usd)}</span>
            {info.daily_budget_usd !== null && (
              <>
                <span class="muted small">
                  of {usd(info.daily_budget_usd)} a day
                  {info.spend_today_usd >= info.daily_budget_usd ? " · reached" : ""}
                </span>
                <Bar left={1 - info.spend_today_usd / Math.max(1e-9, info.daily_budget_usd)} label="Daily budget in money left" />
              </>
            )}
            <span class="muted small">
              {usd(info.spend_month_usd)}
              {info.monthly_budget_usd !== null ? ` of ${usd(info.monthly_budget_usd)}` : ""} this month
              {info.unpriced_requests_month > 0 ? ` · ${info.unpriced_requests_month} unpriced` : ""}
            </span>
            {info.budget_runs_out_unix_ms !== null && info.budget.state === "open" && (
              <span class="muted small" data-testid="key-runs-out" title="When a budget runs out at the last hour's pace">
                runs out ~{new Date(info.budget_runs_out_unix_ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })}
              </span>
            )}
            {info.budget.state !== "open" && (
              <span data-testid="key-budget-state">
                <Tag tone={info.budget.state === "stopped" ? "bad" : "warn"} title={budgetTitle(info)}>
                  {info.budget.state === "stopped" ? "budget: stopped" : "budget: no new sessions"}
                </Tag>
              </span>
            )}
          </div>
        )}
        <div class="key-stat">
          <span class="muted small">Cached</span>
          <span class="num">{percent(info.cached_ratio)}</span>
        </div>
        <div class="key-stat">
          <span class="muted small">Served</span>
          <span class="num">
            {compact(info.served)}
          </span>
          {info.failed > 0 && <span class="muted small">{compact(info.failed)} failed</span>}
        </div>
      </div>

      <div class="spark-wrap" title="Requests per hour, last 24 hours">
        {spark ? <Sparkline times={spark.times} values={spark.values} label={`${info.label}: requests per hour, last 24 hours`} /> : <div class="sparkline" />}
      </div>

      {info.unavailable_models.length > 0 && (
        <p class="small muted">Provider lacks: {info.unavailable_models.join(", ")}</p>
      )}

      <footer class="key-actions">
        <button
          type="button"
          class="button small"
          onClick={test}
          disabled={busy !== null}
          data-testid="key-test"
          title={resting ? "Probe it now: if the provider answers, its cooldown is lifted (a quota that reset early)" : "Probe it with one free call"}
        >
          {busy === "test" ? "Testing…" : resting ? "Test now" : "Test"}
        </button>
        <button type="button" class="button small" onClick={() => setEditing(true)} disabled={busy !== null}>
          Edit
        </button>
        <button type="button" class="button small" onClick={toggle} disabled={busy !== null}>
          {info.health === "disabled" ? "Enable" : "Disable"}
        </button>
        <button type="button" class="button small danger-ghost" onClick={() => setRemoving(true)} disabled={busy !== null}>
          Remove
        </button>
      </footer>
      {message && (
        <Notice kind={!message.ok || testFailed ? "error" : "ok"}>
          <span data-testid="key-message">{message.text}</span>
        </Notice>
      )}

      {editing && <EditKeyDialog info={info} onClose={() => setEditing(false)} />}
      <ConfirmDialog
        open={removing}
        title={`Remove ${info.label}?`}
        confirm="Remove key"
        busy={busy === "remove"}
        onConfirm={remove}
        onCancel={() => setRemoving(false)}
      >
        <p>
          <strong>{info.label}</strong>
          {info.org ? ` (${info.org})` : ""} leaves the pool now; requests it is serving finish.{" "}
          {info.source === "environment"
            ? "It came from the environment, so it is back at the next start."
            : "Its secret is deleted from the keychain."}
        </p>
        <p>
          {sameOrg.length > 0
            ? `Sessions pinned to ${info.org} go on with its other key${sameOrg.length === 1 ? "" : "s"} (${sameOrg.map((k) => k.label).join(", ")}).`
            : `It is the last key of ${info.org ?? "its organization"}: sessions pinned to it lose the encrypted reasoning only that organization can read. Keymux drops those items and the conversations go on, or refuses them if the lost-organization policy says fail.`}{" "}
          Conversations continuing a stored response on this key cannot continue.
        </p>
        {info.pools.length > 0 && (
          <p>
            It also leaves the pool{info.pools.length === 1 ? "" : "s"} {info.pools.join(", ")}.
          </p>
        )}
      </ConfirmDialog>
    </article>
  );
}

/** What a key's budget state means, for its tooltip. */
function budgetTitle(info: KeyInfo): string {
  const b = info.budget;
  if (b.state === "open") return "";
  const which = `${usd(b.limit)} ${b.period === "day" ? "daily" : "monthly"} budget`;
  const resets = new Date(b.resets_unix_ms).toLocaleString();
  return b.state === "stopped"
    ? `Reached its ${which} (on_limit "stop"): it serves nothing until ${resets}.`
    : `Past ${info.reserve_at ?? 100} % of its ${which}: it takes no new sessions, the ones on it go on, until ${resets}.`;
}
