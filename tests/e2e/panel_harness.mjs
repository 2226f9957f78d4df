// What the panel's browser scenarios (panel_browser.mjs, panel_apps_browser.mjs) share: Debian's
// Chromium launched through playwright-core with the flags the tests need, the check counter,
// the collection of script errors, CSP violations and failed requests, screenshots, and the run
// that prints "ok - <check>" lines, then one JSON line of results for panel_test.py, or the
// failure with what the page showed (exit code 1).
import { chromium } from "playwright-core";
import { join } from "node:path";

export const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

// `expectedErrors`: console errors that the scenario provokes on purpose (a refused call's
// status), which are not problems.
export async function openPanel({ artifacts, expectedErrors, contextOptions = {} }) {
  const browser = await chromium.launch({
    executablePath: process.env.PANEL_CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, ...contextOptions });
  const page = await context.newPage();
  page.setDefaultTimeout(30000);
  const session = { browser, context, page, checks: 0, problems: [], failedRequests: [], result: {} };
  page.on("pageerror", (e) => session.problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    const text = m.text();
    if (/Content Security Policy|Refused to/i.test(text)) session.problems.push(`CSP: ${text}`);
    else if (m.type() === "error" && !expectedErrors.test(text)) session.problems.push(`console: ${text}`);
  });
  page.on("dialog", (d) => void d.accept());
  page.on("response", (r) => {
    if (r.status() >= 400) {
      session.failedRequests.push(`${r.status()} ${r.request().method()} ${r.url().split("?")[0]}`);
    }
  });
  session.ok = (condition, name, detail = "") => {
    if (!condition) throw new Error(`check failed: ${name}${detail ? `: ${detail}` : ""}`);
    session.checks += 1;
    console.log(`ok - ${name}${detail ? ` (${detail})` : ""}`);
  };
  session.shot = (name, p = page) => p.screenshot({ path: join(artifacts, `${name}.png`), fullPage: true });
  return session;
}

// Runs the scenario, then checks that the page raised no script error or CSP violation.
export async function runScenario(session, failureShot, scenario) {
  const { page, problems } = session;
  try {
    await scenario();
    session.ok(problems.length === 0, "no script error and no CSP violation", problems.join(" | "));
    console.log(`done: ${session.checks} checks`);
    console.log(JSON.stringify(session.result));
  } catch (error) {
    await session.shot(failureShot).catch(() => {});
    console.error(`FAIL: ${error.stack || error}`);
    if (problems.length) console.error(`page problems: ${problems.join(" | ")}`);
    console.error(`failed requests: ${session.failedRequests.slice(-20).join(" | ")}`);
    console.error(`at ${page.url()}: ${(await page.locator("main").innerText().catch(() => "")).slice(0, 1500)}`);
    process.exitCode = 1;
  } finally {
    await session.browser.close();
  }
}
