// The ChatGPT plan in the dashboard (started by tests/it/dashboard.rs with an empty keychain, Codex
// logged in to the plan in ~/.codex/auth.json and an API key in OPENAI_API_KEY; the simulator's plan
// allows three requests in its 5-hour window and forty in its weekly one).
//
// The first-run offer lists the plan and the key, and the page imports both. The plan's card shows
// both windows as not reported, then as the backend reports them after a turn; new sessions start on
// the plan (PLAN FIRST); once the 5-hour window is used up a new session goes to the API key (PLAN
// USED UP), the session on the plan is rescued onto it, and the row, the drawer, the card and the
// status bar say why and until when. Screenshots of each state, light and dark, at 1280×800 and at
// the tray window's size.

import { join } from "node:path";
import { CodexSession, LOGIN, newestRow, rowWith, runInBrowser, SHOTS, step, WAIT, watch } from "./common.mjs";

let page;
await runInBrowser(run, () => page);

async function run(browser) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, colorScheme: "light" });
  page = await context.newPage();
  watch(page, "plan");

  step("log in: the first-run offer lists the ChatGPT plan and the API key");
  await page.goto(LOGIN);
  const offer = page.getByTestId("import-keys");
  await offer.waitFor({ timeout: WAIT });
  await offer.getByText("ChatGPT plan", { exact: true }).waitFor({ timeout: WAIT });
  const offered = await offer.innerText();
  if (!offered.includes("acct-plan-7f3a (plus)")) throw new Error(`the offer does not name the plan's account: ${offered}`);
  if (!offered.includes("OPENAI_API_KEY")) throw new Error(`the offer does not list the API key: ${offered}`);
  await page.screenshot({ path: join(SHOTS, "light-1280x800-first-run-offer.png") });
  await page.getByTestId("import-submit").click();
  await page.getByTestId("empty-state").waitFor({ state: "detached", timeout: WAIT });

  step("the plan's card: both windows as the import's probe of the plan reported them");
  const card = await planCard();
  await windowsSay(card, ["0 % used", "0 % used"]);
  const before = await card.getByTestId("plan-windows").innerText();
  if ((before.match(/resets in 5h 00m|resets in 4h 59m/g) ?? []).length !== 1) throw new Error(`before any turn the card says: ${before}`);

  step("a new Codex session starts on the plan");
  const onPlan = new CodexSession();
  let mark = await newestRowShown();
  await onPlan.next();
  let row = await rowAfter(mark, "PLAN FIRST");
  if ((await rowKey(row)) !== "chatgpt") throw new Error(`the first turn went to ${await rowKey(row)}`);
  const cost = await row.getByTestId("row-cost").innerText();
  if (cost.trim() !== "in plan") throw new Error(`a turn the plan served costs ${cost}`);
  await windowsSay(card, ["33 % used", "3 % used"]);
  await statusSays("Plan first · 5h 33 %");
  await shots("plan-first");

  step("the plan's 5-hour window is used up: a new session goes to the API key, with why");
  await onPlan.next();
  await onPlan.next();
  await windowsSay(card, ["100 % used", "8 % used"]);
  const overflow = new CodexSession();
  mark = await newestRowShown();
  await overflow.next();
  row = await rowAfter(mark, "PLAN USED UP");
  const overflowKey = await rowKey(row);
  if (overflowKey === "chatgpt") throw new Error("a new session went to the used-up plan");
  await row.click();
  const drawer = page.getByTestId("drawer");
  const reasons = await drawer.getByTestId("reasons").innerText();
  if (!reasons.includes("Your ChatGPT plan chatgpt") || !reasons.includes("new sessions go to your API keys")) {
    throw new Error(`the drawer does not say the plan is used up: ${reasons}`);
  }
  if (!reasons.includes("was skipped: its plan's usage is used up until its window resets in")) {
    throw new Error(`the drawer does not say why the plan was skipped: ${reasons}`);
  }
  await shots("plan-used-up-drawer", { full: false, keepView: true });
  await page.keyboard.press("Escape");
  await drawer.waitFor({ state: "hidden", timeout: WAIT });

  step("the session on the plan goes on with the API key (rescued), and the card says until when");
  mark = await newestRowShown();
  await onPlan.next();
  row = await rowAfter(mark, "RESCUED");
  if ((await rowKey(row)) === "chatgpt") throw new Error("the rescued turn stayed on the used-up plan");
  await statusSays("Plan used up · back in");
  await page.getByTestId("nav-keys").click();
  const usedUp = await card.innerText();
  if (!usedUp.includes("used up") || usedUp.includes("new sessions go here first")) {
    throw new Error(`the used-up plan's card says: ${usedUp}`);
  }
  await shots("plan-used-up");
  await context.close();
}

/** The plan's card on the Keys view. */
async function planCard() {
  await page.getByTestId("nav-keys").click();
  const card = page.locator('[data-testid=key-card][data-label="chatgpt"]');
  await card.getByTestId("plan-windows").waitFor({ timeout: WAIT });
  return card;
}

/** Waits until the card's two windows read `want` (5-hour, weekly), on the Keys view. */
async function windowsSay(card, want) {
  await page.getByTestId("nav-keys").click();
  try {
    await page.waitForFunction(
      ([want]) => {
        const card = document.querySelector('[data-testid=key-card][data-label="chatgpt"]');
        const got = [...(card?.querySelectorAll("[data-testid=plan-window] .gauge-head .num") ?? [])].map((n) => n.textContent);
        return got.length === 2 && got.every((text, i) => text === want[i]);
      },
      [want],
      { timeout: WAIT },
    );
  } catch (e) {
    throw new Error(`the plan's windows do not read ${want.join(" / ")}: ${await card.innerText()} (${e.message})`);
  }
}

/** Waits until the status bar's plan line says `words` (its spaces and line breaks taken as one space). */
async function statusSays(words) {
  const said = () => page.evaluate(() => document.querySelector("[data-testid=status-plan]")?.innerText.replace(/\s+/g, " ").trim() ?? "(none)");
  try {
    await page.waitForFunction(
      (words) => (document.querySelector("[data-testid=status-plan]")?.innerText ?? "").replace(/\s+/g, " ").includes(words),
      words,
      { timeout: WAIT },
    );
  } catch (e) {
    throw new Error(`the status bar's plan line does not say "${words}": ${await said()} (${e.message})`);
  }
}

/** The newest row's number on the Live view. */
async function newestRowShown() {
  await page.getByTestId("nav-live").click();
  await page.locator("[data-testid=live-table], [data-testid=live-empty]").first().waitFor({ timeout: WAIT });
  return newestRow(page);
}

/** Waits for a finished row newer than `after` with `badge` on the Live view, and returns it. */
async function rowAfter(after, badge) {
  await page.getByTestId("nav-live").click();
  const seq = await rowWith(page, after, badge, "a");
  return page.locator(`[data-testid=decision-row][data-seq="${seq}"]`);
}

/** The label of the key a row was served by. */
function rowKey(row) {
  return row.getByTestId("row-key").locator(".key-label").innerText();
}

/**
 * Screenshots of the view on screen (the Keys view unless `keepView`), light and dark, at 1280×800
 * and at the tray window's size.
 */
async function shots(name, { full = true, keepView = false } = {}) {
  for (const colorScheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme });
    for (const size of [
      { width: 1280, height: 800 },
      { width: 420, height: 720 },
    ]) {
      await page.setViewportSize(size);
      if (!keepView) {
        await page.getByTestId("nav-keys").click();
        await page.locator('[data-testid=key-card][data-label="chatgpt"] [data-testid=plan-windows]').waitFor({ timeout: WAIT });
      }
      await page.evaluate(() => window.scrollTo(0, 0));
      await page.waitForTimeout(250); // let charts redraw after a resize or theme change
      await page.screenshot({ path: join(SHOTS, `${colorScheme}-${size.width}x${size.height}-${name}.png`), fullPage: full });
    }
  }
  await page.emulateMedia({ colorScheme: "light" });
  await page.setViewportSize({ width: 1280, height: 800 });
}
