// Drives the web panel in headless Chromium (Debian's chromium through npm playwright-core) for
// panel_test.py, the second scenario: the model → app → chat part of the flow without the CLI.
// Create a bucket and upload a model into it, deploy it as an app, see it RUNNING with its
// replicas and request charts, make an app token with the helper, chat with the app in the
// playground and watch the answer stream in, see a wrong key get nothing, create and delete a
// bucket, start / open / stop a notebook, see the bill over time, the budget gauge and the TCO
// chart with its break-even, read the audit log of all this and verify its chain; keyboard,
// labels, contrast and a 375 px width along the way. Prints "ok - <check>" lines, then one JSON
// line with what the Python side verifies. Screenshots go to $PANEL_ARTIFACTS.
//
// Environment: PANEL_URL PANEL_TOKEN PANEL_REGION PANEL_MODEL_DIR PANEL_ARTIFACTS PANEL_CHROMIUM,
// PANEL_NOTEBOOKS ("1": Jupyter is installed, run the notebook part).
import { env, openPanel, runScenario } from "./panel_harness.mjs";
import { DESKTOP_VIEWPORTS, pageOverflow, wrappedText, xTickProblems } from "./panel_layout.mjs";
import { readdirSync } from "node:fs";
import { join } from "node:path";

const URL_BASE = env("PANEL_URL");
const REGION = env("PANEL_REGION");
const ARTIFACTS = env("PANEL_ARTIFACTS");
const MODEL_DIR = env("PANEL_MODEL_DIR");
const MODELS_BUCKET = "panel-models";
const APP = "panel-bot";

const session = await openPanel({
  artifacts: ARTIFACTS,
  expectedErrors: /status of (400|401|403|404|409)/,
});
const { page, ok, shot, result } = session;

/** Every visible control in <main> has a label. */
async function unlabeledControls() {
  return page.evaluate(() =>
    Array.from(document.querySelectorAll("main input, main select, main textarea"))
      .filter((c) => c.type !== "hidden" && c.offsetParent !== null && c.labels.length === 0 && !c.getAttribute("aria-label"))
      .map((c) => c.name || c.id),
  );
}

/** Text whose contrast against its background is under 4.5:1 (WCAG AA), disabled controls aside. */
async function lowContrast() {
  return page.evaluate(() => {
    const rgb = (text) => {
      const m = /rgba?\(([\d.]+), ([\d.]+), ([\d.]+)(?:, ([\d.]+))?\)/.exec(text);
      return m ? [Number(m[1]), Number(m[2]), Number(m[3]), m[4] === undefined ? 1 : Number(m[4])] : null;
    };
    const lum = ([r, g, b]) => {
      const c = [r, g, b].map((v) => {
        v /= 255;
        return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
      });
      return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
    };
    const background = (el) => {
      for (let e = el; e; e = e.parentElement) {
        const c = rgb(getComputedStyle(e).backgroundColor);
        if (c && c[3] > 0.5) return c;
        if (e instanceof SVGSVGElement) return [255, 255, 255, 1];
      }
      return [255, 255, 255, 1];
    };
    const bad = [];
    for (const el of document.querySelectorAll("body *")) {
      const hasText = Array.from(el.childNodes).some((n) => n.nodeType === 3 && n.textContent.trim() !== "");
      if (!hasText || el.closest("[hidden], :disabled, option, script, style, title")) continue;
      const rect = el.getBoundingClientRect();
      if (rect.width === 0 || rect.height === 0) continue;
      const style = getComputedStyle(el);
      const fg = rgb(el instanceof SVGElement ? style.fill : style.color);
      if (!fg) continue;
      const l1 = lum(fg);
      const l2 = lum(background(el));
      const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
      if (ratio < 4.5) bad.push(`${el.tagName.toLowerCase()}.${el.getAttribute("class") || ""} "${el.textContent.trim().slice(0, 30)}" ${ratio.toFixed(2)}`);
    }
    return bad;
  });
}

async function fitsPhone(name) {
  await page.setViewportSize({ width: 375, height: 812 });
  await page.waitForTimeout(300);
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  // What sticks out, when something does: the innermost elements past the right edge.
  const wide = width <= 375 ? [] : await page.evaluate(() => [...document.querySelectorAll("body *")]
    .filter((e) => e.getBoundingClientRect().right > 375 && ![...e.children].some((c) => c.getBoundingClientRect().right > 375))
    .slice(0, 5).map((e) => `${e.tagName.toLowerCase()}.${e.className} right ${e.getBoundingClientRect().right.toFixed(1)}`));
  ok(width <= 375, `${name} fits 375 px`, `scrollWidth ${width}${wide.length ? "; " + wide.join(", ") : ""}`);
  await shot(`phone-${name}`);
  await page.setViewportSize({ width: 1280, height: 900 });
}

/** At each desktop size: no text of `selector` on two lines, nothing wider than the window, the
 * page's own checks (`more(size)`), then a screenshot `<name>-<width>x<height>.png`. */
async function fitsDesktop(name, selector, more = async () => {}) {
  for (const viewport of DESKTOP_VIEWPORTS) {
    await page.setViewportSize(viewport);
    await page.waitForTimeout(300);
    const size = `${viewport.width}x${viewport.height}`;
    await more(size);
    const wrapped = await wrappedText(page, selector);
    ok(wrapped.length === 0, `${name}: labels, headings and ids keep to one line at ${size}`, wrapped.slice(0, 6).join(" | "));
    const over = await pageOverflow(page);
    ok(over === 0, `${name}: nothing scrolls sideways at ${size}`, `${over} px too wide`);
    await shot(`${name}-${size}`);
  }
  await page.setViewportSize({ width: 1280, height: 900 });
}

const nav = async (label) => {
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: label, exact: true }).click();
};

await runScenario(session, "apps-failure", async () => {
  // --- Sign in. ---
  await page.goto(`${URL_BASE}/signin`);
  await page.getByLabel("API token").fill(env("PANEL_TOKEN"));
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(/\/jobs$/);

  // --- A bucket for the model, created in the panel; the model uploaded through it. ---
  await nav("Buckets");
  await page.waitForURL(/\/buckets$/);
  await page.getByLabel("New bucket name").fill("Not_A_Bucket");
  await page.getByRole("button", { name: "Create bucket" }).click();
  ok((await page.getByLabel("New bucket name").getAttribute("aria-invalid")) === "true", "a bad bucket name is refused next to its field");
  await page.getByLabel("New bucket name").fill(MODELS_BUCKET);
  await page.getByRole("button", { name: "Create bucket" }).click();
  await page.getByRole("status").filter({ hasText: `Created the bucket ${MODELS_BUCKET}` }).waitFor();
  await page.getByRole("link", { name: MODELS_BUCKET, exact: true }).waitFor();
  ok(true, "a bucket is created from the panel (presigned CreateBucket)");
  await page.goto(`${URL_BASE}/buckets/${MODELS_BUCKET}?prefix=tiny%2F`);
  const modelFiles = readdirSync(MODEL_DIR).map((f) => join(MODEL_DIR, f));
  await page.getByLabel("Files").setInputFiles(modelFiles);
  await page.getByRole("button", { name: "Upload", exact: true }).click();
  await page.getByRole("status").filter({ hasText: `Uploaded ${modelFiles.length} files` }).waitFor({ timeout: 120000 });
  ok(true, "the model's files are uploaded into the bucket", `${modelFiles.length} files`);

  // --- A bucket created and deleted; a non-empty one refuses. ---
  await nav("Buckets");
  await page.getByLabel("New bucket name").fill("panel-trash");
  await page.getByRole("button", { name: "Create bucket" }).click();
  await page.getByRole("link", { name: "panel-trash", exact: true }).waitFor();
  await page.getByRole("button", { name: "Delete bucket panel-trash" }).click();
  await page.getByRole("status").filter({ hasText: "Deleted the bucket panel-trash" }).waitFor();
  await page.getByRole("link", { name: "panel-trash", exact: true }).waitFor({ state: "detached" });
  ok(true, "an empty bucket is deleted from the panel (presigned DeleteBucket)");
  await page.getByRole("button", { name: `Delete bucket ${MODELS_BUCKET}` }).click();
  await page.getByRole("alert").filter({ hasText: "BucketNotEmpty" }).waitFor();
  ok(true, "a bucket with objects is not deleted, and S3 says why");
  await shot("buckets-create-delete");

  // --- Deploy the model as an app from the form. ---
  await nav("Apps");
  await page.waitForURL(/\/deployments$/);
  await page.getByRole("link", { name: "Deploy a model" }).click();
  await page.waitForURL(/\/deployments\/new$/);
  let unlabeled = await unlabeledControls();
  ok(unlabeled.length === 0, "every control of the app form has a label", unlabeled.join(", "));
  await page.getByLabel("Name", { exact: true }).fill(APP);
  await page.getByLabel("Model", { exact: true }).fill(`${MODELS_BUCKET}@${REGION}/nothing-here`);
  await page.getByLabel("Flavor").selectOption("ai1-1-cpu");
  await page.getByLabel("Labels").fill("team=panel");
  await page.getByRole("button", { name: "Deploy" }).click();
  const modelError = page.locator('[data-field="model"] .field-error');
  await modelError.waitFor();
  ok((await page.getByLabel("Model", { exact: true }).getAttribute("aria-invalid")) === "true", "a model location without a model is refused next to its field", await modelError.textContent());
  await page.getByLabel("Model", { exact: true }).fill(`${MODELS_BUCKET}@${REGION}/tiny`);
  await page.locator(".price").filter({ hasText: /€[0-9.]+ per minute/ }).waitFor();
  ok(true, "the app's price is shown before deploying", await page.locator(".price").textContent());
  await shot("app-form");
  await page.getByRole("button", { name: "Deploy" }).click();
  await page.waitForURL(/\/deployments\/app_[^/]+$/);
  result.app_id = decodeURIComponent(new URL(page.url()).pathname.split("/").pop());
  await page.locator(".job-head .badge[data-state=RUNNING]").waitFor({ timeout: 240000 });
  ok(true, "the app is RUNNING", result.app_id);
  const readyPath = page.locator("#replicas-chart path.series[data-series='ready replicas']");
  await page.waitForFunction(() => Number(document.querySelector("#replicas-chart path.series[data-series='ready replicas']")?.getAttribute("data-max")) >= 1);
  ok(Number(await readyPath.getAttribute("data-points")) >= 2, "the replicas chart samples the ready replicas over time");

  // --- The token helper: an app token for the app's labels, shown once. ---
  await page.getByRole("button", { name: "Create an app token" }).click();
  const tokenField = page.getByLabel("App token", { exact: true });
  await tokenField.waitFor();
  result.app_token = await tokenField.inputValue();
  ok(result.app_token.startsWith("sov_"), "the helper shows the new token once");
  const curl = await page.getByLabel("curl command", { exact: true }).inputValue();
  ok(curl.includes(result.app_token) && curl.includes(`/apps/${result.app_id}/v1/chat/completions`), "with a curl command for the app");
  ok((await page.getByLabel("Python (openai)", { exact: true }).inputValue()).includes(`base_url="${URL_BASE}/apps/${result.app_id}/v1"`), "and an openai snippet");
  ok((await page.getByRole("button", { name: "Copy App token" }).count()) === 1, "with a copy button");
  await shot("app-running");

  // Requests through the gateway show in the request-rate chart.
  await page.evaluate(async ([id, token]) => {
    for (let i = 0; i < 3; i++) {
      await fetch(`/apps/${id}/v1/chat/completions`, {
        method: "POST",
        headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
        body: JSON.stringify({ model: "panel-bot", messages: [{ role: "user", content: `ping ${i}` }], max_tokens: 2 }),
      });
    }
  }, [result.app_id, result.app_token]);
  await page.waitForFunction(() => Number(document.querySelector("#requests-chart path.series")?.getAttribute("data-max")) > 0, null, { timeout: 30000 });
  ok(true, "the request-rate chart shows the requests");
  await fitsPhone("app");

  // --- The chat playground: the answer streams in. ---
  await page.getByRole("link", { name: "Chat with it" }).click();
  await page.waitForURL(/\/playground\?app=/);
  unlabeled = await unlabeledControls();
  ok(unlabeled.length === 0, "every control of the playground has a label", unlabeled.join(", "));
  ok((await page.getByLabel("Talk to").inputValue()) === `app:${result.app_id}`, "the playground opens on the app");
  await page.getByLabel("API key (optional)").fill(result.app_token);
  await page.getByLabel("Max tokens").fill("48");
  await page.getByLabel("Temperature").fill("0");
  await page.getByLabel("Message").fill("Tell me a long story about a bucket of data.");
  // Record the answer's length at each change the page makes, then send from the keyboard.
  await page.evaluate(() => {
    window.__lengths = [];
    new MutationObserver(() => {
      const text = document.querySelector(".chat-msg.assistant:last-child .chat-text");
      if (text) window.__lengths.push(text.textContent.length);
    }).observe(document.querySelector(".chat"), { childList: true, subtree: true, characterData: true });
  });
  const streamed = page.waitForResponse((r) => r.url().includes("/chat/completions"), { timeout: 120000 });
  await page.getByLabel("Message").press("Control+Enter");
  await page.locator(".chat-msg.assistant .chat-text[data-done]").waitFor({ timeout: 120000 });
  const lengths = await page.evaluate(() => window.__lengths);
  const growing = [...new Set(lengths.filter((n) => n > 0))];
  result.answer = await page.locator(".chat-msg.assistant .chat-text").first().textContent();
  ok(result.answer.length > 0, "the model answers", JSON.stringify(result.answer.slice(0, 60)));
  // The answer came as Server-Sent Events, one delta per token, and the page shows all of them
  // in order. (How many repaints that took depends on the machine's load: a short answer may
  // land in one read, so the repaint count is reported, not required.)
  const response = await streamed;
  const deltas = (await response.text()).split("\n").filter((line) => line.startsWith("data: {"))
    .map((line) => JSON.parse(line.slice(6)).choices?.[0]?.delta?.content ?? "").filter((t) => t.length > 0);
  ok((response.headers()["content-type"] ?? "").startsWith("text/event-stream") && deltas.length >= 2,
    "the answer streams as Server-Sent Events, token by token", `${deltas.length} deltas`);
  ok(deltas.join("") === result.answer && growing.every((n, i) => i === 0 || n > growing[i - 1]),
    "the page shows every delta, in order", `lengths ${growing.join(",")}`);
  await page.getByRole("status").filter({ hasText: "Answer complete" }).waitFor();
  await shot("chat-streamed");
  const contrast = await lowContrast();
  ok(contrast.length === 0, "the playground's text has a contrast of at least 4.5:1", contrast.slice(0, 5).join(" | "));

  // A wrong key sees nothing of an answer.
  const before = await page.locator(".chat-msg").count();
  await page.getByLabel("API key (optional)").fill("sov_this_key_is_wrong");
  await page.getByLabel("Message").fill("Who are you?");
  await page.getByRole("button", { name: "Send" }).click();
  await page.getByRole("alert").filter({ hasText: "401" }).waitFor();
  ok((await page.locator(".chat-msg").count()) === before, "a wrong key gets a refusal and no text");
  ok((await page.locator(".topbar .who").count()) === 1, "and does not sign the session out");
  await shot("chat-wrong-key");
  await fitsPhone("playground");

  // --- Notebooks: start, open, stop. ---
  await nav("Notebooks");
  await page.waitForURL(/\/lab$/);
  unlabeled = await unlabeledControls();
  ok(unlabeled.length === 0, "every control of the notebook form has a label", unlabeled.join(", "));
  ok(!(await page.locator('option[value="vscode"]').isDisabled()), "the VS Code editor is offered beside Jupyter");
  await page.getByLabel("Name (optional)").fill("panel-nb");
  await page.getByLabel("Flavor").selectOption("ai1-1-cpu");
  await page.getByLabel("Volumes").fill("no-such-bucket-here@" + REGION + "/x:/workspace/x:rw");
  await page.getByRole("button", { name: "Start notebook" }).click();
  await page.locator('[data-field="volumes"] .field-error').waitFor();
  ok(true, "a volume of a missing bucket is refused next to its field");
  await page.getByLabel("Volumes").fill("");
  await page.getByLabel("Image (optional)").fill("no-such-notebook-image:1");
  await page.getByRole("button", { name: "Start notebook" }).click();
  await page.locator('[data-field="image"] .field-error').waitFor();
  ok(true, "an image the registry does not have is refused next to its field");
  await page.getByLabel("Image (optional)").fill("");
  if (process.env.PANEL_NOTEBOOKS === "1") {
    await page.getByLabel("Volumes").fill(`${MODELS_BUCKET}@${REGION}/work:/workspace/work:rw`);
    await page.getByRole("button", { name: "Start notebook" }).click();
    await page.getByRole("status").filter({ hasText: "is starting" }).waitFor();
    const row = page.locator("tr").filter({ hasText: "panel-nb" });
    await row.locator(".badge[data-state=RUNNING]").waitFor({ timeout: 300000 });
    ok(true, "the notebook is RUNNING");
    const popup = page.waitForEvent("popup");
    await page.getByRole("button", { name: "Open panel-nb" }).click();
    const jupyter = await popup;
    await jupyter.waitForLoadState("domcontentloaded");
    await jupyter.waitForURL((u) => !u.search.includes("sovai_token"), { timeout: 60000 });
    await jupyter.locator("#notebook_list, #ipython-main-app, body.notebook_list").first().waitFor({ timeout: 60000 });
    ok(!jupyter.url().includes("sovai_token"), "Open shows Jupyter, and the token left the URL", jupyter.url().replace(/\?.*$/, ""));
    await shot("notebook-jupyter", jupyter);
    await jupyter.close();
    await page.getByRole("button", { name: "Sync now panel-nb" }).click();
    await page.getByRole("status").filter({ hasText: "Synced the rw volumes of panel-nb" }).waitFor();
    ok(true, "Sync now uploads the notebook's rw volumes while it runs");
    await page.getByRole("button", { name: "Stop panel-nb" }).click();
    await row.locator(".badge[data-state=STOPPED]").waitFor({ timeout: 120000 });
    ok(true, "Stop stops it");
    result.notebook = true;
  }
  await shot("notebooks");

  // --- Billing: usage over time, the budget gauge, the TCO chart. ---
  await nav("Billing");
  await page.waitForURL(/\/billing$/);
  await page.getByLabel("Monthly cap (€)").fill("50");
  await page.getByRole("button", { name: "Set budget" }).click();
  await page.getByRole("status").filter({ hasText: "Budget saved" }).waitFor();
  const gauge = page.locator("#budget-gauge meter");
  ok(Number(await gauge.getAttribute("max")) === 50, "the budget gauge shows the cap", await page.locator("#budget-gauge label").textContent());
  await page.locator("#usage-chart svg").waitFor();
  const total = Number(await page.locator("[data-total]").getAttribute("data-total"));
  ok(total > 0, "the month's usage is billed", `${total} €`);
  const cpuSeries = page.locator("#usage-chart path.series[data-series='ai1-1-cpu']");
  ok((await cpuSeries.count()) === 1 && Number(await cpuSeries.getAttribute("data-max")) > 0, "the usage chart draws the spend per day by flavor");
  await page.getByLabel("By", { exact: true }).selectOption("project");
  await page.locator("#usage-chart figcaption").filter({ hasText: "by project" }).waitFor();
  ok(true, "and by project");
  const breakEven = page.locator("#tco-chart circle.mark[data-mark='break-even']");
  await breakEven.waitFor();
  const tcoLabel = await page.locator("#tco-chart svg").getAttribute("aria-label");
  ok(/break-even at 92\.15%/.test(tcoLabel), "the TCO chart marks the break-even (the catalog's H100 price)", tcoLabel);
  ok((await page.locator("#tco-chart path.series").count()) === 2, "with the owning and pay-as-you-go lines");
  await page.getByLabel("Utilisation (0..1)").fill("1.5");
  await page.locator('[data-field="utilisation"] .field-error').waitFor();
  ok(true, "a utilisation above 1 is refused next to its field");
  // A cheaper server: 100 000 € over 36 months makes owning 12 300.55 € a month, equal to renting
  // at 75.17 % (docs/tco.md's formulas).
  await page.getByLabel("Utilisation (0..1)").fill("0.95");
  await page.getByLabel("Purchase (€)").fill("100000");
  await page.waitForFunction(() => {
    const label = document.querySelector("#tco-chart svg")?.getAttribute("aria-label") ?? "";
    return label.includes("break-even at 75.17%") && label.includes("assumed 95.00%");
  });
  result.tco_label = await page.locator("#tco-chart svg").getAttribute("aria-label");
  ok((await page.locator(".tco-summary").textContent()).includes("above 75.17%"), "the chart and the summary follow the inputs", result.tco_label);
  await shot("billing");
  const billingContrast = await lowContrast();
  ok(billingContrast.length === 0, "the billing page's text has a contrast of at least 4.5:1", billingContrast.slice(0, 5).join(" | "));
  await fitsPhone("billing");

  // --- Billing at desktop sizes: one-line labels, one tick per day shown, and the two figures
  // saying what each covers (the budget: this project since the 1st; the total: the lines shown).
  const gaugeText = await page.locator("#budget-gauge label").textContent();
  ok(/^Spent this month: €\d+\.\d{2,6} of the €50\.00 cap \(/.test(gaugeText), "the budget's figure says it is this month's spend against the cap", gaugeText);
  const coversText = await page.locator("#budget-covers").textContent();
  ok(/^Project .+'s spend since [A-Z][a-z]{2} 1, \d{4}, 00:00 UTC, running work up to now/.test(coversText), "and whose spend, since when", coversText);
  await page.locator("details summary").filter({ hasText: "More inputs" }).click();
  await fitsDesktop("billing", "main h1, main h2, main label, main th, main caption, main summary, main button, main dt, main figcaption, main .legend li", async (size) => {
    for (const [period, minTicks] of [["30", 3], ["90", 3], ["month", 1]]) {
      await page.getByLabel("Period", { exact: true }).selectOption(period);
      await page.locator(`#usage-total[data-period="${period}"]`).waitFor();
      const problems = await xTickProblems(page, "#usage-chart", { minTicks, unit: 86_400 });
      ok(problems.length === 0, `the usage chart's days are distinct, in order, apart and on midnight UTC (${period === "month" ? "this month" : `${period} days`}, ${size})`, problems.slice(0, 4).join(" | "));
    }
  });
  const totalText = await page.locator("#usage-total").textContent();
  ok(/^Total of the lines shown: €[\d.]+ \(\d+ lines? of every project, .+ UTC to .+ UTC\)\.$/.test(totalText), "the usage total says it sums the lines shown, of which projects, over which window", totalText);

  // --- The audit log lists what this browser did, and the chain verifies. ---
  await nav("Audit");
  await page.waitForURL(/\/audit$/);
  await page.locator("table.data").waitFor();
  ok((await page.locator("table.data tbody tr").count()) > 0, "the audit log lists the last day's entries");
  for (const action of ["POST /v1/apps", "POST /v1/tokens", "PUT /v1/projects/{id}/budget", "S3 PUT", "APP POST"]) {
    await page.getByLabel("Action starts with").fill(action);
    await page.getByRole("button", { name: "Show" }).click();
    await page.waitForFunction((a) => {
      const cells = Array.from(document.querySelectorAll("table.data tbody tr td:nth-child(3)"));
      return cells.length > 0 && cells.every((td) => td.textContent.startsWith(a));
    }, action);
    ok((await page.getByRole("cell", { name: action, exact: true }).count()) > 0, `the audit log lists this run's ${action}`);
  }
  ok(await page.getByRole("button", { name: "Load more" }).isHidden(), "no Load more when the page holds every match");
  await page.getByRole("button", { name: "Verify the chain" }).click();
  await page.getByRole("status").filter({ hasText: "Verified: ok" }).waitFor();
  ok(true, "verify says the chain is ok", await page.getByRole("status").filter({ hasText: "Verified" }).textContent());
  await shot("audit");
  // Every entry of the run (no action filter): ids, times, actions and addresses on one line each
  // (the Actor cell holds the user and the token, one line each; Detail is prose and wraps).
  await page.getByLabel("Action starts with").fill("");
  await page.getByRole("button", { name: "Show" }).click();
  await page.waitForFunction(() => document.querySelectorAll("table.data tbody tr").length > 20);
  await fitsDesktop("audit", "main h1, main label, main button, main th, main caption, table.data tbody td:nth-child(-n+3), table.data tbody td:nth-child(5), table.data tbody td:nth-child(4) > code, table.data tbody td:nth-child(6) > *", async (size) => {
    const hidden = await page.locator(".table-scroll").evaluate((e) => e.scrollWidth - e.clientWidth);
    ok(hidden <= 0, `the audit table shows every column without scrolling at ${size}`, `${hidden} px off to the right`);
  });
  const untitled = await page.locator("table.data .clip").evaluateAll((els) => els.filter((e) => e.title !== e.textContent).length);
  ok(untitled === 0, "every action and resource has its whole text in a tooltip (a long one is cut with an ellipsis)");
  await fitsPhone("audit");

  // --- Keyboard: the top bar's links are reachable with Tab and followed with Enter. ---
  await page.goto(`${URL_BASE}/billing`);
  await page.locator("#tco-chart svg").waitFor();
  let reached = false;
  for (let i = 0; i < 12 && !reached; i++) {
    await page.keyboard.press("Tab");
    reached = await page.evaluate(() => document.activeElement?.textContent === "Apps" && document.activeElement.closest("nav") !== null);
  }
  ok(reached, "the Apps link is reached with Tab");
  await page.keyboard.press("Enter");
  await page.waitForURL(/\/deployments$/);
  ok(await page.evaluate(() => document.activeElement?.tagName === "H1"), "and Enter opens the page with focus on its heading");
  await page.getByRole("link", { name: APP, exact: true }).waitFor();

});
