// VS Code in the browser through the gateway (notebooks_vscode_test.py): Debian's Chromium, driven
// by playwright-core, opens the notebook's URL once with ?sovai_token= (the gateway turns it into
// a cookie), waits for VS Code's workbench, opens work/hello.py from the mounted volume in the
// explorer, appends a line and saves it (Ctrl+S), then runs a command in VS Code's terminal
// (node-pty) that writes another file into the volume. Prints "ok - <check>" lines, then one JSON
// line; on failure a screenshot, what the page showed, and exit code 1.
//
// Environment: NOTEBOOK_URL (…/notebooks/<id>/), SOVAI_TOKEN, EDIT_LINE, TERMINAL_COMMAND,
// ARTIFACTS (a directory for screenshots), PANEL_CHROMIUM (default /usr/bin/chromium).
import { chromium } from "playwright-core";
import { join } from "node:path";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

const url = env("NOTEBOOK_URL");
const token = env("SOVAI_TOKEN");
const editLine = env("EDIT_LINE");
const terminalCommand = env("TERMINAL_COMMAND");
const artifacts = env("ARTIFACTS");
// VS Code on two loaded cores: its first load takes tens of seconds.
const kLoadTimeoutMs = 180000;

let checks = 0;
const ok = (condition, name, detail = "") => {
  if (!condition) throw new Error(`check failed: ${name}${detail ? `: ${detail}` : ""}`);
  checks += 1;
  console.log(`ok - ${name}${detail ? ` (${detail})` : ""}`);
};

const browser = await chromium.launch({
  executablePath: process.env.PANEL_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run"],
});
const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
const page = await context.newPage();
page.setDefaultTimeout(60000);
const failed = [];
page.on("response", (r) => {
  if (r.status() >= 400) failed.push(`${r.status()} ${r.request().method()} ${r.url().split("?")[0]}`);
});
const sockets = [];
page.on("websocket", (ws) => sockets.push(ws.url()));

try {
  const first = await page.goto(`${url}?sovai_token=${encodeURIComponent(token)}`);
  ok(first !== null && first.status() === 200, "the gateway's cookie lets the browser in",
    `${first && first.status()} at ${page.url().split("?")[0]}`);
  const cookies = await context.cookies();
  const cookie = cookies.find((c) => c.name === "sovai_token");
  ok(cookie && cookie.httpOnly, "the token is an HttpOnly cookie");
  ok(!page.url().includes("sovai_token="), "the URL no longer carries the token");

  await page.locator(".monaco-workbench").waitFor({ timeout: kLoadTimeoutMs });
  ok(true, "VS Code's workbench loads");
  // The explorer shows the workspace: the volume's folder "work".
  const work = page.locator(".explorer-folders-view .monaco-list-row", { hasText: /^work$/ });
  await work.first().waitFor({ timeout: kLoadTimeoutMs });
  ok(true, "the explorer shows the mounted volume");
  ok(sockets.some((s) => s.includes("/notebooks/")), "VS Code's websocket goes through the gateway",
    sockets.join(" "));
  await work.first().click();
  const hello = page.locator(".explorer-folders-view .monaco-list-row", { hasText: /^hello\.py$/ });
  await hello.first().waitFor();
  await hello.first().click();
  const tab = page.locator(".tabs-container .tab", { hasText: "hello.py" });
  await tab.first().waitFor();
  const editor = page.locator(".editor-instance .monaco-editor .view-lines");
  await editor.first().waitFor();
  await page.locator(".editor-instance .monaco-editor .view-lines", { hasText: "from the bucket" })
    .first().waitFor();
  ok(true, "hello.py opens with the bucket's content");

  await editor.first().click();
  await page.keyboard.press("Control+End");
  await page.keyboard.press("Enter");
  // Typed as keys; the editor may add indentation or close brackets: the line has none of them.
  await page.keyboard.type(editLine, { delay: 10 });
  await page.locator(".editor-instance .monaco-editor .view-lines", { hasText: editLine })
    .first().waitFor();
  // Saved with Ctrl+S (code-server may also save by itself after a delay: the tab is then clean
  // already); the Python side checks the file on disk.
  await page.keyboard.press("Control+S");
  await page.locator(".tabs-container .tab.dirty", { hasText: "hello.py" }).first()
    .waitFor({ state: "detached" });
  ok(true, "the edit is saved (the tab is no longer dirty)");

  // The terminal: node-pty, one of code-server's native modules, runs a shell in the sandbox.
  await page.keyboard.press("Control+Backquote");
  const terminal = page.locator(".terminal-wrapper .xterm");
  await terminal.first().waitFor({ timeout: kLoadTimeoutMs });
  // The terminal draws on a canvas (its text is not in the page): give bash time for its prompt;
  // what is typed before it is kept anyway. The Python side checks the file the command writes.
  await page.waitForTimeout(10000);
  await terminal.first().click();
  // Keys typed while the shell starts may be lost: a fresh line first (Ctrl+C), then the command.
  await page.keyboard.press("Control+C");
  await page.waitForTimeout(2000);
  await page.keyboard.type(terminalCommand, { delay: 20 });
  await page.keyboard.press("Enter");
  await page.waitForTimeout(3000);
  ok(true, "a command was typed into VS Code's terminal");
  await page.screenshot({ path: join(artifacts, "vscode.png") });
  console.log(JSON.stringify({ checks, websockets: sockets.length }));
} catch (error) {
  await page.screenshot({ path: join(artifacts, "vscode-failure.png") }).catch(() => {});
  console.error(`FAIL: ${error.stack || error}`);
  console.error(`failed requests: ${failed.slice(-20).join(" | ")}`);
  console.error(`websockets: ${sockets.join(" ")}`);
  const text = await page.locator("body").innerText().catch(() => "");
  console.error(`at ${page.url()}: ${text.slice(0, 1500)}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
