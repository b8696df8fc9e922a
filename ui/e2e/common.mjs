// What the dashboard's browser tests share: the environment tests/it/dashboard.rs gives them, traffic
// shaped like Codex and pi (built from the captured requests in tests/fixtures), a watch on each page
// that turns console errors, page errors, failed requests and unexpected 4xx/5xx into problems, and
// the run itself (a headless Chromium; a screenshot of the page when a step fails; exit 1 on any
// problem).
//
// Environment: KEYMUX_ROOT (http://127.0.0.1:PORT), KEYMUX_LOGIN_LINK, KEYMUX_SIM (the simulator's
// root), KEYMUX_TOKEN (a client token), KEYMUX_FIXTURES (tests/fixtures), KEYMUX_SHOTS (where the
// screenshots go), optionally CHROMIUM (default /usr/bin/chromium).

import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

export const need = (name) => {
  const v = process.env[name];
  if (!v) {
    console.error(`e2e: ${name} is not set (run it through \`cargo test --test it dashboard::\`)`);
    process.exit(2);
  }
  return v;
};
export const ROOT = need("KEYMUX_ROOT").replace(/\/$/, "");
export const LOGIN = need("KEYMUX_LOGIN_LINK");
export const SIM = need("KEYMUX_SIM").replace(/\/$/, "");
export const TOKEN = need("KEYMUX_TOKEN");
export const FIXTURES = need("KEYMUX_FIXTURES");
export const SHOTS = need("KEYMUX_SHOTS");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
export const BASE = `${ROOT}/v1`;
/** Generous: the machine is small and shared. */
export const WAIT = 45_000;

const started = Date.now();
export const step = (what) => console.log(`e2e [${((Date.now() - started) / 1000).toFixed(1)}s] ${what}`);

// ---------- traffic, shaped like Codex and pi ----------

export const fixture = (name) => JSON.parse(readFileSync(join(FIXTURES, name), "utf8"));
export const codexTurn1 = fixture("codex/http-turn1.json");
export const piTurn1 = fixture("pi/responses-turn1.json");

export function clientHeaders(captured, sessionId) {
  const drop = new Set(["authorization", "host", "content-length", "connection", "accept-encoding", "content-type"]);
  const out = {};
  for (const [k, v] of captured.headers) {
    const key = k.toLowerCase();
    if (drop.has(key)) continue;
    out[key] = ["session-id", "thread-id", "x-client-request-id", "session_id"].includes(key) ? sessionId : v;
  }
  return out;
}

let sessionCounter = 0;
export function sessionId() {
  sessionCounter += 1;
  return `01a227d7-ed08-7e52-9dfa-${(0xe2e000 + sessionCounter).toString(16).padStart(12, "0")}`;
}

/** Posts to /v1/responses and reads the whole answer, whatever its status. */
export async function post(body, headers, token) {
  const r = await fetch(`${BASE}/responses`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${token}`, ...headers },
    body: JSON.stringify(body),
  });
  return { status: r.status, text: await r.text() };
}

export async function send(body, headers = {}, token = TOKEN) {
  const { status, text } = await post(body, headers, token);
  if (status !== 200) throw new Error(`POST /v1/responses answered ${status}: ${text.slice(0, 300)}`);
  if (body.stream) {
    // The output items of a streamed answer, from its `response.output_item.done` events.
    const items = [];
    let id = null;
    for (const frame of text.split("\n\n")) {
      const data = frame.split("\n").find((l) => l.startsWith("data:"));
      if (!data || data.includes("[DONE]")) continue;
      const ev = JSON.parse(data.slice(5));
      if (ev.type === "response.output_item.done") items.push(ev.item);
      if (ev.type === "response.completed") id = ev.response.id;
    }
    return { id, output: items };
  }
  return JSON.parse(text);
}

/** A Codex conversation: each turn re-sends the whole history, replaying reasoning byte for byte. */
export class CodexSession {
  constructor({ keepReasoning = true, token = TOKEN } = {}) {
    this.token = token;
    this.id = sessionId();
    this.body = structuredClone(codexTurn1.body);
    this.body.prompt_cache_key = this.id;
    this.body.client_metadata = { ...this.body.client_metadata, session_id: this.id, thread_id: this.id };
    this.body.stream = true;
    this.keepReasoning = keepReasoning;
    this.turn = 1;
  }
  async next() {
    const answer = await send(this.body, clientHeaders(codexTurn1, this.id), this.token);
    for (const item of answer.output) {
      if (item.type === "reasoning") {
        // A client with reasoning summaries off keeps no reasoning items (nothing pins it).
        if (!this.keepReasoning) continue;
        this.body.input.push({ ...item, content: null });
      } else {
        this.body.input.push(item);
      }
    }
    this.turn += 1;
    this.body.input.push({
      type: "message",
      id: `msg_${this.id}-${this.turn}`,
      role: "user",
      content: [{ type: "input_text", text: `Turn ${this.turn}: please continue.` }],
    });
    return answer;
  }
}

export const short = (text = "hello", token = TOKEN) => send({ model: "gpt-5.5", input: text, store: false }, {}, token);
export const piShort = (text = "Say hi.", token = TOKEN) =>
  send({ model: "gpt-5.5", input: [{ role: "user", content: text }], store: false, stream: false }, clientHeaders(piTurn1, sessionId()), token);

export async function simJson(path, body) {
  const r = await fetch(`${SIM}${path}`, body ? { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) } : {});
  if (!r.ok) throw new Error(`simulator ${path}: ${r.status} ${await r.text()}`);
  return r.json();
}


// ---------- the browser ----------

/** The newest row's number in the Live table as drawn (0 when it has none). */
export function newestRow(page) {
  return page.evaluate(() => Math.max(0, ...[...document.querySelectorAll("[data-testid=decision-row]")].map((r) => Number(r.dataset.seq))));
}

/**
 * Waits for a finished row of the Live table newer than `after` with `badge` (any row without one),
 * and returns its number; when none comes, fails naming `what` and the newest rows.
 */
export async function rowWith(page, after, badge, what = "a") {
  try {
    const handle = await page.waitForFunction(
      ([after, badge]) => {
        const row = [...document.querySelectorAll("[data-testid=decision-row]:not(.is-pending)")].find(
          (r) => Number(r.dataset.seq) > after && (!badge || r.querySelector(`[data-badge="${badge}"]`)),
        );
        return row ? Number(row.dataset.seq) : false;
      },
      [after, badge],
      { timeout: WAIT },
    );
    return await handle.jsonValue();
  } catch (e) {
    const rows = await page.evaluate(() =>
      [...document.querySelectorAll("[data-testid=decision-row]")].slice(0, 5).map((r) => r.innerText.replace(/\s+/g, " ")),
    );
    throw new Error(`no ${what} row with ${badge} after #${after}; newest rows: ${JSON.stringify(rows)} (${e.message})`);
  }
}

/** What went wrong, said once the run ends. */
export const problems = [];

/** Watches `page`: what `allowed` does not excuse becomes a problem. Returns a function that stops it. */
export function watch(page, name, allowed = () => false) {
  let closing = false;
  page.on("console", (m) => {
    if (closing) return;
    if (m.type() === "error" && !allowed({ console: m.text() })) problems.push(`[${name}] console error: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`[${name}] page error: ${e.message}`));
  page.on("requestfailed", (r) => {
    if (closing) return;
    problems.push(`[${name}] request failed: ${r.method()} ${r.url()} (${r.failure()?.errorText})`);
  });
  page.on("response", (r) => {
    // Once the watching stops (a logout reloads the page), an answer to a request still in flight is
    // expected to fail: a status poll the page sent just before it logged out gets its 401.
    if (closing) return;
    if (r.status() >= 400 && !allowed({ url: r.url(), status: r.status() })) {
      problems.push(`[${name}] ${r.status()} for ${r.request().method()} ${r.url()}`);
    }
  });
  return () => {
    closing = true;
  };
}

/**
 * Runs `run(browser)` in a headless Chromium. When it throws, `lastPage()` (if any) is saved as
 * failure.png. Exits 1 when anything went wrong.
 */
export async function runInBrowser(run, lastPage = () => undefined) {
  mkdirSync(SHOTS, { recursive: true });
  // Playwright gives every launch a fresh, temporary profile (it refuses --user-data-dir here).
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  try {
    await run(browser);
  } catch (e) {
    console.error(`e2e failed: ${e.stack ?? e}`);
    const page = lastPage();
    if (page) await page.screenshot({ path: join(SHOTS, "failure.png"), fullPage: true }).catch(() => undefined);
    problems.push(`failed: ${e.message}`);
  } finally {
    await browser.close().catch(() => undefined);
  }
  if (problems.length > 0) {
    console.error(`e2e: ${problems.length} problem(s):\n  ${problems.join("\n  ")}`);
    process.exit(1);
  }
  step(`passed; screenshots in ${SHOTS}`);
}
