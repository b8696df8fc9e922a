import type { Attempt } from "../api/types";
import { duration } from "../lib/format";
import { FAILURE } from "../lib/words";
import { keyName } from "../state/store";

/** Every key tried for a request, in order, with how each went. */
export function AttemptChain({ attempts, servedBy }: { attempts: Attempt[]; servedBy: string | null }) {
  if (attempts.length === 0) return <p class="muted">No key was tried.</p>;
  return (
    <ol class="attempts" data-testid="attempts">
      {attempts.map((a, i) => {
        const ok = a.failure === null && a.status !== null && a.status < 400;
        return (
          <li key={i} class={`attempt${ok ? " ok" : " failed"}`} data-testid="attempt">
            <div class="attempt-head">
              <span class="attempt-n num">{i + 1}</span>
              <span class="attempt-key">{keyName(a.key)}</span>
              <span class={`status tone-${ok ? "ok" : "bad"} num`}>{a.status ?? "no answer"}</span>
              <span class="num muted">{duration(a.duration_ms)}</span>
              {a.key === servedBy && <span class="tag tone-ok">answered</span>}
            </div>
            {a.failure && <div class="attempt-failure">{FAILURE[a.failure] ?? a.failure}</div>}
            {a.message && <div class="attempt-message">{a.message}</div>}
          </li>
        );
      })}
    </ol>
  );
}
