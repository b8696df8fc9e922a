// The dashboard's acceptance test: a real Chromium drives the real gateway (started by
// tests/it/dashboard.rs in front of the simulator) while this script sends Codex- and pi-shaped traffic
// built from the captured requests in tests/fixtures. It also creates pools and a pool-bound token
// through the page and checks that the Live and Keys views filter by pool. It fails on any console error, page error,
// failed request or unexpected 4xx/5xx, and saves screenshots of every view at two sizes and in both
// colour schemes.
//
// Environment: KEYMUX_ROOT (http://127.0.0.1:PORT), KEYMUX_LOGIN_LINK, KEYMUX_SIM (the simulator's
// root), KEYMUX_TOKEN (a client token), KEYMUX_FIXTURES (tests/fixtures), KEYMUX_SHOTS (where the
// screenshots go), KEYMUX_CODEX_HOME (the user's Codex directory), optionally CHROMIUM (default
// /usr/bin/chromium). What it shares with the other browser tests is in common.mjs.

import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  BASE, clientHeaders, codexTurn1, CodexSession, LOGIN, need, newestRow, piShort, post, ROOT, rowWith as rowWithIn, runInBrowser, send, SHOTS, short, simJson, step, TOKEN, WAIT, watch,
} from "./common.mjs";

const CODEX_HOME = need("KEYMUX_CODEX_HOME");

/**
 * A refusal the test provokes on purpose through the page (the gateway's 400 for a pool change it
 * refuses): its status and a part of its address, while the step that provokes it runs.
 */
let provoked = null;
const isProvoked = (x) =>
  provoked !== null &&
  ((x.status === provoked.status && (x.url ?? "").includes(provoked.path)) ||
    (x.console ?? "").includes(`status of ${provoked.status}`));

let page;
await runInBrowser(run, () => page);

async function run(browser) {
  // Without a session the page says how to log in (the 401s here are the point).
  step("a page without a session shows how to log in");
  const stranger = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const strangerPage = await stranger.newPage();
  const stopStranger = watch(
    strangerPage,
    "no session",
    (x) => (x.status === 401 && x.url.includes("/keymux/api/")) || (x.console ?? "").includes("401"),
  );
  await strangerPage.goto(`${ROOT}/`);
  await strangerPage.getByTestId("login-required").waitFor({ timeout: WAIT });
  const loginText = await strangerPage.getByTestId("login-required").innerText();
  if (!loginText.includes("keymux dashboard --open")) throw new Error(`login screen says: ${loginText}`);
  await strangerPage.screenshot({ path: join(SHOTS, "login-required.png") });
  stopStranger();
  await stranger.close();

  // A browser that announces a language tag Intl rejects (WebKitGTK under LC_CTYPE=C.UTF-8 announces
  // `C`; Chromium normalizes what --lang and Playwright's locale give it, so the page's navigator is
  // made to announce it before any script runs). uPlot formats numbers in navigator.language when it
  // loads: the page still renders, in a language Intl accepts.
  step("a browser announcing the language `C` still gets the page");
  const posix = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  await posix.addInitScript(() => {
    Object.defineProperty(navigator, "language", { value: "C", configurable: true });
    Object.defineProperty(navigator, "languages", { value: ["C"], configurable: true });
  });
  const posixPage = await posix.newPage();
  const stopPosix = watch(
    posixPage,
    "language C",
    (x) => (x.status === 401 && x.url.includes("/keymux/api/")) || (x.console ?? "").includes("401"),
  );
  await posixPage.goto(`${ROOT}/`);
  await posixPage.getByTestId("login-required").waitFor({ timeout: WAIT });
  const repaired = await posixPage.evaluate(() => navigator.language);
  if (repaired === "C") throw new Error("navigator.language is still C");
  stopPosix();
  await posix.close();

  // A script that throws while the page loads: the page says so instead of staying blank.
  step("a script failing while the page loads is shown, not a blank page");
  const broken = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  await broken.addInitScript(() => {
    window.matchMedia = () => {
      throw new Error("matchMedia broke on purpose");
    };
  });
  const brokenPage = await broken.newPage();
  await brokenPage.goto(`${ROOT}/`);
  const failure = brokenPage.locator(".load-failure");
  await failure.waitFor({ timeout: WAIT });
  const failureWords = await failure.innerText();
  if (!failureWords.includes("could not start") || !failureWords.includes("matchMedia broke on purpose")) {
    throw new Error(`the failed page says: ${failureWords}`);
  }
  await brokenPage.screenshot({ path: join(SHOTS, "load-failure.png") });
  await broken.close();

  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, colorScheme: "light", acceptDownloads: true });
  page = await context.newPage();
  const stopWatching = watch(page, "dashboard", isProvoked);

  step("log in through the one-time link");
  await page.goto(LOGIN);
  await page.getByTestId("status-bar").waitFor({ timeout: WAIT });
  if (new URL(page.url()).pathname !== "/") throw new Error(`the login link went to ${page.url()}`);
  await page.getByTestId("nav-live").click();

  const rowsAfter = () => newestRow(page);
  /** Waits for a finished request newer than `after` with `badge`, and returns its number. */
  const rowWith = (after, badge, what) => rowWithIn(page, after, badge, what);

  step("balanced: a short prompt with no cache key");
  let mark = await rowsAfter();
  await short("What is 2 + 2?");
  const balancedSeq = await rowWith(mark, "BALANCED", "balanced");

  step("pinned: turn 2 of a Codex session replays its encrypted reasoning");
  const pinned = new CodexSession();
  mark = await rowsAfter();
  await pinned.next();
  await rowWith(mark, "CACHE MISS", "first Codex turn");
  mark = await rowsAfter();
  await pinned.next();
  const pinnedSeq = await rowWith(mark, "ENCRYPTED PIN", "pinned");

  step("continuity: previous_response_id of a stored response");
  const stored = await send({ model: "gpt-5.5", input: "Remember the number 7.", store: true });
  mark = await rowsAfter();
  await send({ model: "gpt-5.5", input: "Which number?", store: true, previous_response_id: stored.id });
  const continuitySeq = await rowWith(mark, "CONTINUITY", "continuity");

  step("cache hit: turn 2 of a session that keeps no reasoning goes back to its warm key");
  const warm = new CodexSession({ keepReasoning: false });
  await warm.next();
  mark = await rowsAfter();
  await warm.next();
  const cacheSeq = await rowWith(mark, "CACHE HIT", "cache hit");
  const cacheRowBadges = await page.locator(`[data-testid=decision-row][data-seq="${cacheSeq}"] [data-badge]`).allInnerTexts();
  if (cacheRowBadges.includes("ENCRYPTED PIN")) throw new Error(`the cache-hit row is also pinned: ${cacheRowBadges}`);
  console.log(`  rows: balanced #${balancedSeq}, pinned #${pinnedSeq}, continuity #${continuitySeq}, cache hit #${cacheSeq}`);

  step("the drawer shows the pinned request's candidates and attempts");
  await page.locator(`[data-testid=decision-row][data-seq="${pinnedSeq}"]`).click();
  const drawer = page.getByTestId("drawer");
  await drawer.getByTestId("candidates").waitFor({ timeout: WAIT });
  const candidates = await drawer.locator("[data-testid=candidates] li").count();
  const attempts = await drawer.getByTestId("attempt").count();
  const route = await drawer.getByTestId("route-sentence").innerText();
  if (candidates < 1 || attempts < 1) throw new Error(`drawer: ${candidates} candidates, ${attempts} attempts`);
  if (!route.startsWith("Pinned to organization")) throw new Error(`drawer route: ${route}`);
  if (!(await drawer.getByTestId("reasons").innerText()).includes("only its organization can read it")) {
    throw new Error("the drawer does not explain the pin");
  }
  await page.keyboard.press("Escape");
  await drawer.waitFor({ state: "hidden", timeout: WAIT });

  step("Enter on a focused row opens it too");
  await page.locator(`[data-testid=decision-row][data-seq="${continuitySeq}"]`).focus();
  await page.keyboard.press("Enter");
  await drawer.getByTestId("route-sentence").waitFor({ timeout: WAIT });
  const continuityRoute = await drawer.getByTestId("route-sentence").innerText();
  if (!continuityRoute.startsWith("Continuity")) throw new Error(`continuity drawer route: ${continuityRoute}`);
  await page.keyboard.press("Escape");
  await drawer.waitFor({ state: "hidden", timeout: WAIT });

  step("a 429 on sk-a1 cools key a1: its countdown shows on the Keys view");
  await simJson("/__sim/faults", { key: "sk-a1", fault: { type: "rate_limited", retry_after_secs: 300 } });
  const a1Cooling = async () =>
    page.evaluate(async () => {
      const session = sessionStorage.getItem("keymux.session") ?? "";
      const s = await (await fetch("/keymux/api/status", { headers: { "x-keymux-session": session } })).json();
      return s.keys.find((k) => k.label === "a1")?.health === "cooling";
    });
  let tries = 0;
  while (!(await a1Cooling())) {
    if (++tries > 40) throw new Error("forty requests and sk-a1 never met its 429");
    await short(`Request ${tries} while sk-a1 is rate limited.`);
  }
  await rowWith(0, "FAILOVER", "failover");
  await page.getByTestId("nav-keys").click();
  const a1 = page.locator('[data-testid=key-card][data-label="a1"]');
  const countdown = a1.getByTestId("key-countdown");
  await countdown.waitFor({ timeout: WAIT });
  const first = await countdown.innerText();
  if (!/^(\d+m \d\ds|\d+s)$/.test(first)) throw new Error(`a1's countdown reads ${first}`);
  if (!(await a1.getByTestId("key-health").innerText()).includes("cooling")) throw new Error("a1 is not shown cooling");
  await page.waitForFunction((before) => {
    const el = document.querySelector('[data-testid=key-card][data-label="a1"] [data-testid=key-countdown]');
    return el && el.textContent !== before;
  }, first, { timeout: WAIT });
  console.log(`  a1 cooling, ${first} left`);
  const testNow = await a1.getByTestId("key-test").innerText();
  if (testNow !== "Test now") throw new Error(`a cooling key offers "${testNow}", not "Test now"`);

  step("add key d1 (org-d) through the form; the next unpinned request uses it");
  await addKey(page, { label: "d1", secret: "sk-d1", priority: 0 });
  await page.locator('[data-testid=org-group][data-org="org-d"] [data-testid=key-card][data-label="d1"]').waitFor({ timeout: WAIT });
  await page.getByTestId("nav-live").click();
  mark = await rowsAfter();
  await short("The first request after d1 joined.");
  await rowWith(mark, "BALANCED", "after adding d1");
  const newest = await page.locator("[data-testid=decision-row]").first().getByTestId("row-key").innerText();
  if (!newest.includes("d1")) throw new Error(`the next unpinned request went to ${newest}, not d1`);
  const log = await simJson("/__sim/log");
  const lastClient = log.filter((e) => e.path === "/v1/responses").at(-1);
  if (lastClient?.key !== "sk-d1") throw new Error(`the simulator saw the last request on ${lastClient?.key}`);

  step("Test and Edit on d1's card: it works, and goes back to tier 1 with the others");
  await page.getByTestId("nav-keys").click();
  const d1 = page.locator('[data-testid=key-card][data-label="d1"]');
  await d1.getByTestId("key-test").click();
  const tested = await d1.getByTestId("key-message").innerText({ timeout: WAIT });
  if (!tested.startsWith("Works")) throw new Error(`testing d1 said: ${tested}`);
  await d1.getByRole("button", { name: "Edit" }).click();
  const edit = page.getByTestId("edit-key-dialog");
  await edit.locator("input[type=number]").first().fill("1");
  await edit.getByRole("button", { name: "Save" }).click();
  await edit.waitFor({ state: "hidden", timeout: WAIT });
  await d1.locator(".key-meta", { hasText: "priority 1" }).waitFor({ timeout: WAIT });

  step("Connect: the Codex block names this gateway");
  await page.getByTestId("nav-connect").click();
  const snippet = page.getByTestId("codex-snippet");
  const expected = [
    'model_provider = "keymux"',
    "",
    "[model_providers.keymux]",
    'name = "Keymux"',
    `base_url = "${BASE}"`,
    'wire_api = "responses"',
    'env_key = "KEYMUX_TOKEN"',
    "# supports_websockets = true",
    "",
  ].join("\n");
  const got = await snippet.textContent();
  if (got !== expected) throw new Error(`the Codex snippet reads:\n${got}\nexpected:\n${expected}`);
  // The Rust side pastes it into a real config.toml and runs real Codex with it.
  writeFileSync(join(SHOTS, "codex-snippet.toml"), got);
  await page.getByTestId("ws-toggle").check();
  if (!(await snippet.textContent()).includes('\nsupports_websockets = true\n')) throw new Error("the WebSocket toggle did nothing");
  await page.getByTestId("ws-toggle").uncheck();

  step("a client token created on the Connect view is shown once and works");
  await page.getByTestId("new-token-name").fill("e2e");
  await page.getByTestId("new-token-create").click();
  const secret = await page.locator("[data-testid=created-token] .secret").innerText({ timeout: WAIT });
  await send({ model: "gpt-5.5", input: "hello from a new token", store: false }, {}, secret);
  await page.getByRole("button", { name: "I have copied it" }).click();
  if ((await page.locator("body").innerText()).includes(secret)) throw new Error("the token is still on the page");

  step("Pause gateway: clients get 503 and every card says so; Resume brings them back");
  await page.getByTestId("pause-toggle").click();
  await page.getByText("Paused: new requests get 503").waitFor({ timeout: WAIT });
  const pausedAnswer = await fetch(`${BASE}/responses`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${TOKEN}` },
    body: JSON.stringify({ model: "gpt-5.5", input: "while paused", store: false }),
  });
  await pausedAnswer.text();
  if (pausedAnswer.status !== 503) throw new Error(`a request while paused got ${pausedAnswer.status}`);
  await page.getByTestId("nav-keys").click();
  await page.locator('[data-testid=key-card][data-label="c1"] [data-testid=key-health]', { hasText: "gateway paused" }).waitFor({ timeout: WAIT });
  await page.getByTestId("pause-toggle").click();
  await page.getByText("Paused: new requests get 503").waitFor({ state: "detached", timeout: WAIT });

  step("Disable and Enable c1");
  const c1 = page.locator('[data-testid=key-card][data-label="c1"]');
  await c1.getByRole("button", { name: "Disable" }).click();
  await c1.getByTestId("key-health").filter({ hasText: "disabled" }).waitFor({ timeout: WAIT });
  await c1.getByRole("button", { name: "Enable" }).click();
  await c1.getByTestId("key-health").filter({ hasText: "ready" }).waitFor({ timeout: WAIT });

  step("a flood of 600 requests: the live list stays bounded and the page keeps up");
  await page.getByTestId("nav-live").click();
  await page.getByTestId("live-table").waitFor({ timeout: WAIT });
  await page.evaluate(() => {
    window.__longest = 0;
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) window.__longest = Math.max(window.__longest, e.duration);
    }).observe({ type: "longtask", buffered: false });
  });
  const floodStart = Date.now();
  let sent = 0;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (sent < 600) {
        sent += 1;
        await short(`Flood ${sent}`);
      }
    }),
  );
  const floodSecs = (Date.now() - floodStart) / 1000;
  await page.getByText("Showing the newest 200 of 500").waitFor({ timeout: WAIT });
  const drawn = await page.locator("[data-testid=decision-row]").count();
  if (drawn !== 200) throw new Error(`${drawn} rows drawn, expected the newest 200`);
  const longest = await page.evaluate(() => window.__longest);
  console.log(`  600 requests in ${floodSecs.toFixed(1)} s (${Math.round((600 * 2) / floodSecs)} events/s); longest main-thread task ${Math.round(longest)} ms`);
  // Generous for a small shared machine; a list that re-rendered everything per event would blow it.
  if (longest > 1500) throw new Error(`the page blocked for ${Math.round(longest)} ms during the flood`);

  step("more traffic so every view has something to show (and the live view keeps up)");
  const jobs = [];
  for (let i = 0; i < 60; i++) jobs.push(() => (i % 3 === 0 ? piShort() : short(`Burst ${i}`)));
  const sessions = [new CodexSession(), new CodexSession(), new CodexSession({ keepReasoning: false })];
  for (const s of sessions) jobs.push(() => s.next());
  let next = 0;
  await Promise.all(
    Array.from({ length: 6 }, async () => {
      while (next < jobs.length) await jobs[next++]();
    }),
  );
  for (const s of sessions) await s.next();
  await page.getByTestId("nav-live").click();
  await rowWith(0, "", "any");
  await page.waitForFunction(() => document.querySelectorAll("[data-testid=decision-row]").length >= 60, null, { timeout: WAIT });

  step("Sessions and Usage have data, with what it cost; the usage table exports as CSV");
  await page.getByTestId("nav-sessions").click();
  await page.waitForFunction(() => document.querySelectorAll("[data-testid=session-row]").length >= 3, null, { timeout: WAIT });
  const costs = await page.getByTestId("session-cost").allInnerTexts();
  if (!costs.some((c) => /^\$0\.\d+/.test(c.trim()))) throw new Error(`no session shows a cost: ${costs.slice(0, 5)}`);
  await page.getByTestId("nav-usage").click();
  await page.locator("[data-testid=chart-requests] canvas").waitFor({ timeout: WAIT });
  await page.locator("[data-testid=chart-spend] canvas").waitFor({ timeout: WAIT });
  const spent = await page.getByTestId("usage-spend").innerText();
  if (!/\$\d/.test(spent)) throw new Error(`the usage summary shows no spend: ${spent}`);
  const [download] = await Promise.all([page.waitForEvent("download"), page.getByTestId("usage-csv").click()]);
  const csv = readFileSync(await download.path(), "utf8").split("\n");
  if (!csv[0].startsWith("start,key,requests,input_tokens") || !csv.some((l) => /,total,\d+,/.test(l))) {
    throw new Error(`the CSV export reads:\n${csv.slice(0, 4).join("\n")}`);
  }

  await poolSteps(page);

  step("screenshots");
  const sizes = [
    { width: 1280, height: 800 },
    { width: 420, height: 720 },
  ];
  for (const colorScheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme });
    for (const size of sizes) {
      await page.setViewportSize(size);
      const tag = `${colorScheme}-${size.width}x${size.height}`;
      const shot = async (name, full = true) => {
        await page.evaluate(() => window.scrollTo(0, 0));
        await page.waitForTimeout(250); // let charts redraw after a resize or theme change
        await page.screenshot({ path: join(SHOTS, `${tag}-${name}.png`), fullPage: full });
      };
      await page.getByTestId("nav-live").click();
      await page.getByTestId("live-table").waitFor({ timeout: WAIT });
      await shot("live", false);
      await page.getByTestId("filter-pool").selectOption("work");
      await page.locator('[data-testid=decision-row] [data-pool="work"]').first().waitFor({ timeout: WAIT });
      await shot("live-pool", false);
      await page.getByTestId("filter-pool").selectOption("");
      await page.locator('[data-testid=decision-row]:has([data-badge="ENCRYPTED PIN"])').first().click();
      await drawer.getByTestId("attempts").waitFor({ timeout: WAIT });
      await shot("live-drawer", false);
      await page.keyboard.press("Escape");
      await drawer.waitFor({ state: "hidden", timeout: WAIT });
      await page.getByTestId("nav-keys").click();
      await page.locator("[data-testid=pool-section] [data-testid=key-card]").first().waitFor({ timeout: WAIT });
      await shot("keys");
      await page.getByTestId("nav-pools").click();
      await page.locator('[data-testid=pool-card][data-pool="work"]').waitFor({ timeout: WAIT });
      await shot("pools");
      await page.getByTestId("nav-sessions").click();
      await page.getByTestId("sessions-table").waitFor({ timeout: WAIT });
      await shot("sessions");
      await page.getByTestId("nav-usage").click();
      await page.locator("[data-testid=chart-requests] canvas").waitFor({ timeout: WAIT });
      await shot("usage");
      await page.getByTestId("nav-connect").click();
      await page.getByTestId("codex-snippet").waitFor({ timeout: WAIT });
      await page.getByTestId("connect-pool").selectOption("work");
      await page.getByTestId("connect-reach").filter({ hasText: "d1, e1" }).waitFor({ timeout: WAIT });
      await shot("connect");
    }
  }
  await page.emulateMedia({ colorScheme: "light" });
  await page.setViewportSize({ width: 1280, height: 800 });
  await setupSteps(page);
  await budgetSteps(page);

  step("Remove d1: the dialog names it and what becomes of its pinned sessions");
  await page.getByTestId("nav-keys").click();
  const d1Card = page.locator('[data-testid=key-card][data-label="d1"]');
  await d1Card.getByRole("button", { name: "Remove" }).click();
  const confirm = page.getByTestId("confirm-dialog").filter({ hasText: "Remove d1?" });
  await confirm.waitFor({ timeout: WAIT });
  const warning = await confirm.innerText();
  if (!warning.includes("last key of org-d")) throw new Error(`the remove dialog says: ${warning}`);
  if (!warning.includes("It also leaves the pool work.")) throw new Error(`the remove dialog does not name d1's pool: ${warning}`);
  await page.screenshot({ path: join(SHOTS, "light-1280x800-keys-remove.png") });
  await confirm.getByRole("button", { name: "Remove key" }).click();
  await d1Card.waitFor({ state: "detached", timeout: WAIT });

  // Logging out reloads the page, which cuts whatever it had in flight: from here on that is expected.
  stopWatching();
  step("Log out: the session ends at the gateway, and the page says how to log in again");
  const session = await page.evaluate(() => sessionStorage.getItem("keymux.session"));
  if (!session) throw new Error("the page keeps no session in its sessionStorage");
  await page.getByTestId("logout").click();
  await page.getByTestId("login-required").waitFor({ timeout: WAIT });
  const afterLogout = await fetch(`${ROOT}/keymux/api/status`, { headers: { "x-keymux-session": session } });
  if (afterLogout.status !== 401) throw new Error(`the session still works after logout: ${afterLogout.status}`);

  await context.close();
}

/**
 * Sets Codex up from the Connect view, through the gateway's setup flow: the preview names both files
 * and offers the key in auth.json, Codex editing config.toml while the preview is on screen gets the
 * Apply refused with the edit kept, a new preview applies (the key imported, the token written works),
 * and Undo puts auth.json back byte for byte while keeping Codex's edit.
 */
async function setupSteps(page) {
  const configPath = join(CODEX_HOME, "config.toml");
  const authPath = join(CODEX_HOME, "auth.json");
  const authBefore = readFileSync(authPath, "utf8");
  step("Connect: Set up Codex shows both files' changes and offers the key in auth.json");
  await page.getByTestId("nav-connect").click();
  const card = page.getByTestId("setup-codex");
  await card.getByTestId("setup-codex-state").filter({ hasText: "not set up" }).waitFor({ timeout: WAIT });
  await card.getByTestId("setup-codex-preview").click();
  const diff = card.getByTestId("setup-codex-diff");
  await diff.waitFor({ timeout: WAIT });
  const shown = await diff.innerText();
  if (!shown.includes(`+openai_base_url = "${BASE}"`) || !shown.includes("auth.json")) throw new Error(`the preview reads:\n${shown}`);
  if (shown.includes("sk-f1")) throw new Error("the preview shows the API key from auth.json");
  if (!(await card.getByTestId("setup-codex-import").isChecked())) throw new Error("importing the key is not offered");
  for (const colorScheme of ["dark", "light"]) {
    await page.emulateMedia({ colorScheme });
    await card.scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(SHOTS, `${colorScheme}-1280x800-connect-setup.png`) });
  }

  step("Connect: Codex edits config.toml while the preview is on screen; Apply is refused and the edit kept");
  const edited = `${readFileSync(configPath, "utf8")}\n[tui]\nscreen_reader_detection_done = true\n`;
  writeFileSync(configPath, edited);
  provoked = { status: 409, path: "/setup/codex/confirm/" };
  await card.getByTestId("setup-codex-apply").click();
  await card.getByTestId("setup-codex-result").filter({ hasText: "changed after the preview" }).waitFor({ timeout: WAIT });
  provoked = null;
  if (readFileSync(configPath, "utf8") !== edited) throw new Error("the file edited after the preview was overwritten");

  step("Connect: a new preview applies: the key joins the pool and Codex's auth.json holds a token that works");
  await card.getByTestId("setup-codex-preview").click();
  await diff.waitFor({ timeout: WAIT });
  await card.getByTestId("setup-codex-apply").click();
  await card.getByTestId("setup-codex-result").filter({ hasText: "Codex now goes through Keymux" }).waitFor({ timeout: WAIT });
  await card.getByTestId("setup-codex-state").filter({ hasText: "set up" }).waitFor({ timeout: WAIT });
  await page.screenshot({ path: join(SHOTS, "light-1280x800-connect-setup-done.png") });
  const token = JSON.parse(readFileSync(authPath, "utf8")).OPENAI_API_KEY;
  if (typeof token !== "string" || !token.startsWith("km-")) throw new Error("auth.json holds no client token");
  const setUp = readFileSync(configPath, "utf8");
  if (!setUp.includes("[tui]\nscreen_reader_detection_done = true\n") || !setUp.includes(`openai_base_url = "${BASE}"`)) {
    throw new Error(`setup lost Codex's own edit or wrote no line:\n${setUp}`);
  }
  await send({ model: "gpt-5.5", input: "hello through the set-up token", store: false }, {}, token);
  await page.getByTestId("nav-keys").click();
  await page.locator('[data-testid=key-card][data-label="codex"]').filter({ hasText: "org-f" }).waitFor({ timeout: WAIT });
  if ((await page.locator("body").innerText()).includes(token)) throw new Error("the client token shows on the page");

  step("Connect: Undo puts auth.json back byte for byte and keeps Codex's edit");
  await page.getByTestId("nav-connect").click();
  await card.getByTestId("setup-codex-undo").click();
  await card.getByTestId("setup-codex-result").filter({ hasText: "back as it was" }).waitFor({ timeout: WAIT });
  await card.getByTestId("setup-codex-state").filter({ hasText: "not set up" }).waitFor({ timeout: WAIT });
  if (readFileSync(authPath, "utf8") !== authBefore) throw new Error("auth.json is not back as it was");
  if (readFileSync(configPath, "utf8") !== edited) throw new Error("Undo did not keep exactly Codex's edit");
}

/**
 * A budget in money set on c1's card, below what c1 spent today: the card shows the spend against it
 * and "budget: no new sessions", and the next new session's decision says c1 was skipped for it.
 */
async function budgetSteps(page) {
  step("Keys: a $0.01 daily budget on c1, reserved at 50 %: the card says so, and new sessions skip c1");
  await page.getByTestId("nav-keys").click();
  const c1 = page.locator('[data-testid=key-card][data-label="c1"]');
  await c1.getByRole("button", { name: "Edit" }).click();
  const edit = page.getByTestId("edit-key-dialog");
  await edit.getByTestId("edit-daily-usd").fill("0.01");
  await edit.getByTestId("edit-reserve-at").fill("50");
  await edit.getByTestId("edit-reserve-window").fill("20");
  await page.screenshot({ path: join(SHOTS, "light-1280x800-keys-edit-dialog.png") });
  await edit.getByRole("button", { name: "Save" }).click();
  await edit.waitFor({ state: "hidden", timeout: WAIT });
  await c1.getByTestId("key-window-note").filter({ hasText: "keeps 20 % of its window for its sessions" }).waitFor({ timeout: WAIT });
  await c1.getByTestId("key-budget-state").filter({ hasText: "budget: no new sessions" }).waitFor({ timeout: WAIT });
  const spend = await c1.getByTestId("key-spend").innerText();
  if (!spend.includes("of $0.01 a day")) throw new Error(`c1's card does not show its budget: ${spend}`);
  await c1.scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(SHOTS, "light-1280x800-keys-budget.png") });
  const c1Id = await c1.getAttribute("data-key-id");
  for (let i = 0; i < 4; i += 1) await send({ model: "gpt-5.5", input: `budget check ${i}`, store: false });
  const records = await (await page.evaluate(async () => {
    const r = await fetch("/keymux/api/decisions?limit=4", { headers: { "x-keymux-session": sessionStorage.getItem("keymux.session") } });
    return r.json();
  })).data;
  const said = records.every((r) =>
    r.decision.reasons.some((x) => x.rule === "skipped" && x.key === c1Id && x.why.kind === "budget_reserved"),
  );
  if (records.length !== 4 || !said) throw new Error(`not every new session's decision says c1 was skipped for its budget: ${JSON.stringify(records.map((r) => r.decision.reasons))}`);
  if (records.some((r) => r.served_by === c1Id)) throw new Error("a new session went to the reserved key");
}

/** Adds a key through the Keys view's form, which must say it was added and forget the secret. */
async function addKey(page, { label, secret, priority }) {
  await page.getByTestId("nav-keys").click();
  await page.getByTestId("add-key-open").click();
  const form = page.getByTestId("add-key-form");
  await form.locator("input[name=label]").fill(label);
  await form.locator("input[name=secret]").fill(secret);
  await form.locator("input[name=priority]").fill(String(priority));
  await form.getByTestId("add-key-submit").click();
  const result = await form.getByTestId("add-key-result").innerText({ timeout: WAIT });
  if (!result.includes("added")) throw new Error(`adding ${label} said: ${result}`);
  if ((await form.locator("input[name=secret]").inputValue()) !== "") throw new Error("the secret field kept the key");
  await page.keyboard.press("Escape");
  await page.locator(`[data-testid=key-card][data-label="${label}"]`).waitFor({ timeout: WAIT });
}

/** The pools as the gateway has them (read with the page's session). */
async function apiPools(page) {
  return page.evaluate(async () => {
    const session = sessionStorage.getItem("keymux.session") ?? "";
    return (await fetch("/keymux/api/pools", { headers: { "x-keymux-session": session } })).json();
  });
}

/** Creates a pool through the Pools view's form: the choices, then the summary, then confirm. */
async function createPool(page, { name, keys = [], fallback = [], shot = null, taken = false, priority = true }) {
  await page.getByTestId("nav-pools").click();
  await page.getByTestId("pool-new").click();
  const form = page.getByTestId("pool-form");
  await form.locator("input[name=pool-name]").fill(name);
  for (const label of keys) await form.locator(`input[name=pool-key][value="${label}"]`).check();
  for (const f of fallback) await form.locator("select[name=pool-fallback]").selectOption(f);
  if (!priority) await form.locator("input[name=pool-allow-priority]").uncheck();
  if (shot) await page.screenshot({ path: join(SHOTS, `${shot}-form.png`) });
  await form.getByTestId("pool-form-next").click();
  const review = await form.getByTestId("pool-review").innerText({ timeout: WAIT });
  for (const label of keys) if (!review.includes(label)) throw new Error(`the summary of ${name} does not name ${label}: ${review}`);
  const tier = await form.getByTestId("pool-review-priority").innerText();
  if (tier !== (priority ? "allowed" : "sent as standard")) throw new Error(`the summary of ${name} says the priority tier is ${tier}`);
  const ultrafast = await form.getByTestId("pool-review-ultrafast").innerText();
  if (ultrafast !== (priority ? "allowed" : "sent as standard")) throw new Error(`the summary of ${name} says ultrafast is ${ultrafast}`);
  if (!taken && (await apiPools(page)).some((p) => p.name === name)) throw new Error(`pool ${name} exists before it was confirmed`);
  if (shot) await page.screenshot({ path: join(SHOTS, `${shot}-review.png`) });
  return form;
}

/** Rows of the Live table as drawn: pool, fallback pool, token, key and badges. */
async function liveRows(page) {
  return page.evaluate(() =>
    [...document.querySelectorAll("[data-testid=decision-row]")].map((r) => ({
      seq: Number(r.dataset.seq),
      pending: r.classList.contains("is-pending"),
      pool: r.querySelector("[data-testid=row-pool] [data-pool]")?.dataset.pool ?? null,
      token: r.querySelector("[data-testid=row-token]")?.textContent ?? null,
      key: r.querySelector("[data-testid=row-key] .key-label")?.textContent ?? null,
      badges: [...r.querySelectorAll("[data-badge]")].map((b) => b.dataset.badge),
      text: r.textContent,
    })),
  );
}

/**
 * Pools end to end: creates the pool work (d1, e1) and an empty pool spare that falls back to work
 * through the Pools view, a token bound to work through the Connect view, sends traffic with it and
 * with the all-pool token, and checks the Live and Keys views' pool filters, the fallback and the
 * gateway's refusals.
 */
async function poolSteps(page) {
  // A pool in the config file can name only keys the config file holds (the gateway's environment
  // keys a1..c1 are not), so the pool is made of keys added through the page: d1, and e1 here.
  step("add key e1 (org-e) through the form, for the pool");
  await addKey(page, { label: "e1", secret: "sk-e1", priority: 1 });

  step("Pools: all is built in and cannot be edited");
  await page.getByTestId("nav-pools").click();
  const allCard = page.locator('[data-testid=pool-card][data-pool="all"]');
  await allCard.waitFor({ timeout: WAIT });
  if ((await allCard.getByTestId("pool-edit").count()) + (await allCard.getByTestId("pool-delete").count()) > 0) {
    throw new Error("the built-in pool all offers Edit or Delete");
  }
  if (!(await allCard.innerText()).includes("built-in")) throw new Error("the pool all is not marked built-in");

  step("Pools: create work with d1 and e1, confirmed from its summary");
  let form = await createPool(page, { name: "work", keys: ["d1", "e1"], shot: "light-1280x800-pools-new" });
  await form.getByTestId("pool-form-confirm").click();
  await form.waitFor({ state: "hidden", timeout: WAIT });
  const workCard = page.locator('[data-testid=pool-card][data-pool="work"]');
  await workCard.getByTestId("pool-ready").filter({ hasText: "2/2 ready" }).waitFor({ timeout: WAIT });
  const workKeys = await workCard.locator(".key-chip").evaluateAll((els) => els.map((e) => e.dataset.label));
  if (workKeys.join(",") !== "d1,e1") throw new Error(`the work card lists the keys ${workKeys}`);
  const created = (await apiPools(page)).find((p) => p.name === "work");
  if (created?.keys.join(",") !== "d1,e1") throw new Error(`the gateway holds work as ${JSON.stringify(created)}`);

  step("Pools: a taken name is refused, in the gateway's words, inside the form");
  provoked = { status: 400, path: "/keymux/api/pools" };
  form = await createPool(page, { name: "work", keys: ["a2"], taken: true });
  await form.getByTestId("pool-form-confirm").click();
  const refusal = await form.getByTestId("pool-form-error").innerText({ timeout: WAIT });
  if (!refusal.includes("already exists")) throw new Error(`a taken name said: ${refusal}`);
  await form.getByRole("button", { name: "Back" }).click();
  await form.getByRole("button", { name: "Cancel" }).click();
  await form.waitFor({ state: "hidden", timeout: WAIT });
  provoked = null;

  step("Pools: spare, with no keys, falls back to work, and keeps its requests out of the priority tier");
  form = await createPool(page, { name: "spare", fallback: ["work"], priority: false });
  await form.getByTestId("pool-form-confirm").click();
  await form.waitFor({ state: "hidden", timeout: WAIT });
  const spareCard = page.locator('[data-testid=pool-card][data-pool="spare"]');
  const empty = await spareCard.getByTestId("pool-empty").innerText({ timeout: WAIT });
  if (empty !== "No keys: its requests go to its fallback pool (work).") throw new Error(`the empty pool says: ${empty}`);
  const policies = await spareCard.getByTestId("pool-policies").innerText();
  if (!policies.startsWith("Requests for the priority tier (Fast mode) or ultrafast are sent as standard; its keys go out direct")) {
    throw new Error(`the spare card says: ${policies}`);
  }
  if ((await apiPools(page)).find((p) => p.name === "spare")?.allow_priority !== false) throw new Error("spare allows priority");

  step("Connect: a token for acme-repo, bound to work, with its line");
  await page.getByTestId("nav-connect").click();
  await page.getByTestId("connect-pool").selectOption("work");
  await page.getByTestId("connect-reach").filter({ hasText: "reach only d1, e1" }).waitFor({ timeout: WAIT });
  await page.getByTestId("new-token-name").fill("acme-repo");
  await page.getByTestId("new-token-create").click();
  const createdBox = page.getByTestId("created-token");
  const secret = await createdBox.locator(".secret").innerText({ timeout: WAIT });
  if (!(await createdBox.innerText()).includes("pool work")) throw new Error("the new token does not say its pool");
  if (!(await page.getByTestId("token-line").innerText()).includes("keymux token show acme-repo")) {
    throw new Error("the base URL card does not name the new token");
  }
  const acmeRow = page.locator('[data-testid=token-list] li[data-token="acme-repo"]');
  await acmeRow.waitFor({ timeout: WAIT });
  if ((await acmeRow.getByTestId("token-pool").inputValue()) !== "work") throw new Error("acme-repo is not listed in work");
  await page.screenshot({ path: join(SHOTS, "light-1280x800-connect-pool-token.png") });
  await createdBox.getByRole("button", { name: "I have copied it" }).click();
  if ((await page.locator("body").innerText()).includes(secret)) throw new Error("the work token is still on the page");

  step("traffic: the work token and the all-pool token, interleaved (Codex and pi shapes)");
  await page.getByTestId("nav-live").click();
  const before = Math.max(0, ...(await liveRows(page)).map((r) => r.seq));
  const workSession = new CodexSession({ token: secret });
  let workSent = 0;
  let allSent = 0;
  for (let i = 0; i < 4; i++) {
    await short(`acme-repo request ${i}`, secret);
    await piShort(`acme-repo pi ${i}`, secret);
    await workSession.next();
    workSent += 3;
    await short(`all-pool request ${i}`);
    allSent += 1;
  }
  const workIds = new Set([workSession.id]);
  const log = await simJson("/__sim/log");
  const ours = log.filter((e) => {
    const body = JSON.stringify(e.body ?? "");
    return body.includes("acme-repo") || [...workIds].some((id) => body.includes(id));
  });
  if (ours.length < workSent) throw new Error(`the simulator saw ${ours.length} requests of the work token, ${workSent} were sent`);
  const outside = ours.filter((e) => !["sk-d1", "sk-e1"].includes(e.key));
  if (outside.length > 0) throw new Error(`the work token reached keys outside work: ${outside.map((e) => e.key)}`);

  step("Live: the pool filter shows only work's requests, each with its badge and token");
  await page.waitForFunction(
    ([before, n]) =>
      [...document.querySelectorAll("[data-testid=decision-row]:not(.is-pending)")].filter((r) => Number(r.dataset.seq) > before).length >= n,
    [before, workSent + allSent],
    { timeout: WAIT },
  );
  const mixed = (await liveRows(page)).filter((r) => r.seq > before);
  if (!mixed.some((r) => r.pool === "all" && r.token === "KEYMUX_CLIENT_TOKEN")) throw new Error("no all-pool row among the new ones");
  await page.getByTestId("filter-pool").selectOption("work");
  await page.waitForFunction(
    () => [...document.querySelectorAll("[data-testid=decision-row]")].every((r) => r.querySelector('[data-pool="work"]')),
    null,
    { timeout: WAIT },
  );
  const workRows = await liveRows(page);
  if (workRows.length !== workSent) throw new Error(`the work filter shows ${workRows.length} rows, ${workSent} were sent`);
  const stray = workRows.filter((r) => r.token !== "acme-repo" || !["d1", "e1"].includes(r.key));
  if (stray.length > 0) throw new Error(`rows of work not on d1/e1 or not acme-repo: ${JSON.stringify(stray)}`);
  if (!workRows.some((r) => r.badges.includes("ENCRYPTED PIN"))) throw new Error("the Codex session of work was never pinned inside work");
  await page.getByTestId("filter-pool").selectOption("");
  await page.getByTestId("filter-token").selectOption("acme-repo");
  await page.waitForFunction((n) => document.querySelectorAll("[data-testid=decision-row]").length === n, workSent, { timeout: WAIT });
  await page.getByTestId("filter-token").selectOption("");

  step("Live and Keys: what each request cost, and each key's spend today");
  const costs = await page.locator("[data-testid=decision-row]:not(.is-pending) [data-testid=row-cost]").allInnerTexts();
  if (!costs.some((c) => /^\$\d/.test(c.trim()))) throw new Error(`no request shows a cost: ${JSON.stringify(costs.slice(0, 10))}`);

  step("Keys: grouped by pool; the chooser shows only work's keys under its header");
  await page.getByTestId("nav-keys").click();
  const sections = page.getByTestId("pool-section");
  await page.waitForFunction(() => document.querySelectorAll("[data-testid=pool-section]").length === 3, null, { timeout: WAIT });
  const spends = await page.getByTestId("key-spend").allInnerTexts();
  if (!spends.some((t) => /Spent today\s*\$(?!0(\s|$))\d/.test(t))) throw new Error(`no key shows a spend above $0: ${JSON.stringify(spends)}`);
  const order = await sections.evaluateAll((els) => els.map((e) => e.dataset.pool));
  if (order.join(",") !== "work,spare,") throw new Error(`the Keys view's sections are ${JSON.stringify(order)}`);
  await page.locator('[data-testid=keys-pool-chooser] [data-pool="work"]').click();
  await page.waitForFunction(() => document.querySelectorAll("[data-testid=pool-section]").length === 1, null, { timeout: WAIT });
  const shownKeys = await page.locator("[data-testid=key-card]").evaluateAll((els) => els.map((e) => e.dataset.label));
  if (shownKeys.join(",") !== "d1,e1") throw new Error(`the work pool shows the keys ${shownKeys}`);
  if (!(await sections.first().getByTestId("pool-ready").innerText()).includes("2/2 ready")) throw new Error("work's header is not 2/2 ready");
  for (const label of shownKeys) {
    const badges = await page.locator(`[data-testid=key-card][data-label="${label}"] [data-testid=key-pools] [data-pool]`).allInnerTexts();
    if (!badges.includes("work")) throw new Error(`${label}'s card has no work badge: ${badges}`);
  }
  await page.locator('[data-testid=keys-pool-chooser] [data-pool=""]').click();
  await page.waitForFunction(() => document.querySelectorAll("[data-testid=pool-section]").length === 3, null, { timeout: WAIT });

  step("a Codex session begun outside work, continued with the work token: 403 pool_mismatch, explained");
  // With work's keys switched off, the all-pool token's session starts on a key outside work.
  const workKeyCard = (label) => page.locator(`[data-testid=pool-section][data-pool="work"] [data-testid=key-card][data-label="${label}"]`);
  for (const label of ["d1", "e1"]) {
    await workKeyCard(label).getByRole("button", { name: "Disable" }).click();
    await workKeyCard(label).getByTestId("key-health").filter({ hasText: "disabled" }).waitFor({ timeout: WAIT });
  }
  const outsider = new CodexSession();
  await outsider.next();
  for (const label of ["d1", "e1"]) {
    await workKeyCard(label).getByRole("button", { name: "Enable" }).click();
    await workKeyCard(label).getByTestId("key-health").filter({ hasText: "ready" }).waitFor({ timeout: WAIT });
  }
  const crossed = await post(outsider.body, clientHeaders(codexTurn1, outsider.id), secret);
  if (crossed.status !== 403 || !crossed.text.includes("pool_mismatch")) {
    throw new Error(`replaying another pool's reasoning answered ${crossed.status}: ${crossed.text.slice(0, 300)}`);
  }
  await page.getByTestId("nav-live").click();
  await page.getByTestId("filter-pool").selectOption("work");
  const refused = page.locator(`[data-testid=decision-row]:not(.is-pending):has([data-badge="REFUSED"])`).first();
  await refused.click();
  const refusalText = await page.getByTestId("drawer").getByTestId("refusal").innerText({ timeout: WAIT });
  if (!refusalText.includes("outside its token's pool work")) throw new Error(`the drawer explains the refusal as: ${refusalText}`);
  await page.getByTestId("drawer").evaluate((d) => Promise.all(d.getAnimations().map((a) => a.finished)));
  await page.screenshot({ path: join(SHOTS, "light-1280x800-live-mismatch-drawer.png") });
  await page.keyboard.press("Escape");
  await page.getByTestId("drawer").waitFor({ state: "hidden", timeout: WAIT });
  await page.getByTestId("filter-pool").selectOption("");

  step("Connect: acme-repo moves to spare after confirming; its next request is served by work as a fallback");
  await page.getByTestId("nav-connect").click();
  await acmeRow.getByTestId("token-pool").selectOption("spare");
  const move = page.getByTestId("confirm-dialog").filter({ hasText: "Move acme-repo to pool spare?" });
  await move.waitFor({ timeout: WAIT });
  if (!(await move.innerText()).includes("no key of the pool (it is empty), only its fallback work")) throw new Error(`the move dialog says: ${await move.innerText()}`);
  if ((await apiPools(page)).find((p) => p.name === "spare")?.tokens.length) throw new Error("the token moved before confirming");
  await page.screenshot({ path: join(SHOTS, "light-1280x800-connect-move.png") });
  await move.getByTestId("confirm").click();
  await move.waitFor({ state: "hidden", timeout: WAIT });
  await page.waitForFunction(
    () => document.querySelector('[data-testid=token-list] li[data-token="acme-repo"] select')?.value === "spare",
    null,
    { timeout: WAIT },
  );
  await page.getByTestId("nav-live").click();
  const beforeFallback = Math.max(0, ...(await liveRows(page)).map((r) => r.seq));
  await short("acme-repo request from spare", secret);
  await page.getByTestId("filter-pool").selectOption("spare");
  const fell = page.locator(`[data-testid=decision-row]:not(.is-pending):has([data-badge="POOL FALLBACK"])`).first();
  await fell.waitFor({ timeout: WAIT });
  if (Number(await fell.getAttribute("data-seq")) <= beforeFallback) throw new Error("the fallback row is an old one");
  const badge = await fell.getByTestId("row-pool").innerText();
  if (!/spare\s*→\s*work/.test(badge)) throw new Error(`the fallback row's pool reads ${badge}`);
  await fell.click();
  const drawer = page.getByTestId("drawer");
  const reasons = await drawer.getByTestId("reasons").innerText({ timeout: WAIT });
  if (!reasons.includes("spare had no key that could serve: used fallback pool work.")) throw new Error(`the drawer says: ${reasons}`);
  await drawer.evaluate((d) => Promise.all(d.getAnimations().map((a) => a.finished)));
  await page.screenshot({ path: join(SHOTS, "light-1280x800-live-fallback-drawer.png") });
  await page.keyboard.press("Escape");
  await drawer.waitFor({ state: "hidden", timeout: WAIT });
  await page.getByTestId("filter-pool").selectOption("");

  step("Pools: deleting spare while acme-repo is bound to it is refused, and the card says why");
  await page.getByTestId("nav-pools").click();
  await spareCard.getByTestId("pool-tokens").filter({ hasText: "acme-repo" }).waitFor({ timeout: WAIT });
  provoked = { status: 400, path: "/keymux/api/pools/spare" };
  await spareCard.getByTestId("pool-delete").click();
  const del = page.getByTestId("confirm-dialog").filter({ hasText: "Delete pool spare?" });
  await del.waitFor({ timeout: WAIT });
  if (!(await del.innerText()).includes("acme-repo")) throw new Error("the delete dialog does not name the bound token");
  await del.getByTestId("confirm").click();
  const why = await spareCard.getByTestId("pool-error").innerText({ timeout: WAIT });
  if (!why.includes("still has tokens (acme-repo")) throw new Error(`deleting spare said: ${why}`);
  provoked = null;
  if (!(await apiPools(page)).some((p) => p.name === "spare")) throw new Error("spare was deleted");

  step("Pools: scratch is created, edited (keys, fallbacks in order) and deleted, each after confirming");
  form = await createPool(page, { name: "scratch", keys: ["e1"] });
  await form.getByTestId("pool-form-confirm").click();
  await form.waitFor({ state: "hidden", timeout: WAIT });
  const scratch = page.locator('[data-testid=pool-card][data-pool="scratch"]');
  await scratch.getByTestId("pool-edit").click();
  await form.locator('input[name=pool-key][value="d1"]').check();
  await form.locator("select[name=pool-fallback]").selectOption("spare");
  await form.locator("select[name=pool-fallback]").selectOption("work");
  await form.getByRole("button", { name: "Move work up" }).click();
  await form.getByTestId("pool-daily-usd").fill("2.5");
  await form.getByTestId("pool-reserve-at").fill("80");
  await form.getByTestId("pool-on-limit").selectOption("stop");
  await form.getByTestId("pool-budget-fields").scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(SHOTS, "light-1280x800-pool-budget-form.png") });
  await form.getByTestId("pool-form-next").click();
  const editReview = await form.getByTestId("pool-review").innerText({ timeout: WAIT });
  if (!editReview.includes("d1, e1") || !editReview.includes("work, then spare")) throw new Error(`the edit summary says: ${editReview}`);
  if (!editReview.includes("$2.50 a day; no new sessions past 80 %; at 100 % it stops")) throw new Error(`the edit summary's budget: ${editReview}`);
  await form.getByTestId("pool-form-confirm").click();
  await form.waitFor({ state: "hidden", timeout: WAIT });
  await scratch.getByTestId("pool-fallback").filter({ hasText: "work, then spare" }).waitFor({ timeout: WAIT });
  await scratch.getByTestId("pool-budget").filter({ hasText: "$2.50 a day" }).waitFor({ timeout: WAIT });
  const edited = (await apiPools(page)).find((p) => p.name === "scratch");
  if (edited?.keys.join(",") !== "d1,e1" || edited.fallback.join(",") !== "work,spare") {
    throw new Error(`the gateway holds scratch as ${JSON.stringify(edited)}`);
  }
  if (edited.daily_budget_usd !== 2.5 || edited.reserve_at !== 80 || edited.on_limit !== "stop" || edited.monthly_budget_usd !== null) {
    throw new Error(`the gateway holds scratch's budget as ${JSON.stringify(edited)}`);
  }
  await scratch.getByTestId("pool-delete").click();
  await page.getByTestId("confirm-dialog").filter({ hasText: "Delete pool scratch?" }).getByTestId("confirm").click();
  await scratch.waitFor({ state: "detached", timeout: WAIT });
  if ((await apiPools(page)).some((p) => p.name === "scratch")) throw new Error("scratch is still there");

  step("Connect: acme-repo goes back to work");
  await page.getByTestId("nav-connect").click();
  await acmeRow.getByTestId("token-pool").selectOption("work");
  await page.getByTestId("confirm-dialog").filter({ hasText: "Move acme-repo to pool work?" }).getByTestId("confirm").click();
  await page.waitForFunction(
    () => document.querySelector('[data-testid=token-list] li[data-token="acme-repo"] select')?.value === "work",
    null,
    { timeout: WAIT },
  );
}
