// Drives the web panel in headless Chromium (Debian's chromium through npm playwright-core) for
// panel_test.py: sign in (a wrong token first), upload to a bucket, download, delete, submit a job
// (a bad volume first), watch its log live, search it, see its loss chart, stop it, look at a phone
// width, and sign in with another project's token. Prints "ok - <check>" lines, then one JSON line
// with what the Python side verifies. Screenshots go to $PANEL_ARTIFACTS.
//
// Environment: PANEL_URL PANEL_TOKEN PANEL_OTHER_TOKEN PANEL_BUCKET PANEL_REGION PANEL_UPLOAD
// PANEL_JOB_SCRIPT PANEL_ARTIFACTS PANEL_CHROMIUM.
import { env, openPanel, runScenario } from "./panel_harness.mjs";
import { readFileSync } from "node:fs";
import { basename, join } from "node:path";

const URL_BASE = env("PANEL_URL");
const BUCKET = env("PANEL_BUCKET");
const REGION = env("PANEL_REGION");
const ARTIFACTS = env("PANEL_ARTIFACTS");
const UPLOAD = env("PANEL_UPLOAD");

const session = await openPanel({
  artifacts: ARTIFACTS,
  expectedErrors: /status of (400|401|403|404)/,
  contextOptions: { acceptDownloads: true },
});
const { page, ok, shot, result } = session;

await runScenario(session, "failure", async () => {
  // --- Sign in: a signed-out visit lands on the sign-in page; a wrong token sees nothing. ---
  await page.goto(`${URL_BASE}/jobs`);
  await page.waitForURL(/\/signin\?next=%2Fjobs$/);
  ok((await page.locator("h1").textContent()) === "Sign in", "a signed-out visit shows the sign-in page");
  await page.getByLabel("API token").fill("sov_this_token_does_not_exist");
  await page.getByRole("button", { name: "Sign in" }).click();
  const refused = page.getByRole("alert").filter({ hasText: "This token was refused" });
  await refused.waitFor();
  ok(true, "a wrong token is refused with a message");
  ok((await page.locator("table").count()) === 0, "a wrong token sees no data");
  ok((await page.evaluate(() => sessionStorage.getItem("sovai.token"))) === null, "a wrong token is not kept");
  ok((await page.getByLabel("API token").getAttribute("aria-invalid")) === "true", "the token field is marked invalid");
  await shot("signin-wrong-token");
  await page.goto(`${URL_BASE}/buckets`);
  await page.waitForURL(/\/signin/);
  ok(true, "without a valid token the buckets page is not shown");

  await page.getByLabel("API token").fill(env("PANEL_TOKEN"));
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(/\/buckets$/);
  await page.locator(".topbar .who").filter({ hasText: "(admin)" }).waitFor();
  ok(true, "signing in goes back to the page asked for and names the user");
  await page.reload();
  await page.getByRole("link", { name: BUCKET, exact: true }).waitFor();
  await page.keyboard.press("Tab");
  ok(await page.evaluate(() => document.activeElement?.classList.contains("skip-link")), "the first Tab stop is the skip link");
  await page.keyboard.press("Enter");
  ok(await page.evaluate(() => document.activeElement?.id === "main"), "the skip link moves focus to the content");

  // --- Buckets: upload two files with progress, download one, delete the other. ---
  await page.getByRole("link", { name: BUCKET, exact: true }).click();
  await page.waitForURL(new RegExp(`/buckets/${BUCKET}$`));
  const small = { name: "panel-delete-me.txt", mimeType: "text/plain", buffer: Buffer.from("delete me\n") };
  const big = { name: basename(UPLOAD), mimeType: "application/octet-stream", buffer: readFileSync(UPLOAD) };
  await page.getByLabel("Files").setInputFiles([big, small]);
  await page.getByRole("button", { name: "Upload", exact: true }).click();
  await page.getByRole("status").filter({ hasText: "Uploaded 2 files" }).waitFor();
  ok(true, "two files uploaded through presigned URLs");
  const bars = await page.locator(".uploads progress").evaluateAll((els) => els.map((e) => e.value));
  ok(bars.length === 2 && bars.every((v) => v === 1), "each upload's progress bar reached 100 %", JSON.stringify(bars));
  const uploaded = basename(UPLOAD);
  await page.getByRole("cell", { name: uploaded, exact: true }).waitFor();
  await page.getByRole("cell", { name: "panel-delete-me.txt", exact: true }).waitFor();
  ok(true, "the uploaded files are listed");
  await shot("buckets-upload");
  const downloading = page.waitForEvent("download");
  await page.getByRole("button", { name: `Download ${uploaded}` }).click();
  const download = await downloading;
  const downloaded = readFileSync(await download.path());
  ok(downloaded.equals(readFileSync(UPLOAD)), "the download has the uploaded bytes", `${downloaded.length} bytes`);
  ok(download.suggestedFilename() === uploaded, "the download is named after the key", download.suggestedFilename());
  await page.getByRole("button", { name: "Delete panel-delete-me.txt" }).click();
  await page.getByRole("status").filter({ hasText: "Deleted panel-delete-me.txt" }).waitFor();
  await page.getByRole("cell", { name: "panel-delete-me.txt", exact: true }).waitFor({ state: "detached" });
  ok(true, "a deleted object leaves the listing");

  // --- A job: the form with its price, a bad volume refused next to its field, then submit. ---
  await page.getByRole("link", { name: "Jobs", exact: true }).click();
  await page.waitForURL(/\/jobs$/);
  await page.getByRole("link", { name: "New job" }).click();
  await page.waitForURL(/\/jobs\/new$/);
  const unlabeled = await page.evaluate(() =>
    Array.from(document.querySelectorAll("main input, main select, main textarea"))
      .filter((c) => c.type !== "hidden" && c.labels.length === 0 && !c.getAttribute("aria-label"))
      .map((c) => c.name || c.id),
  );
  ok(unlabeled.length === 0, "every form control has a label", unlabeled.join(", "));
  await page.getByLabel("Name (optional)").fill("panel-e2e");
  await page.getByLabel("Flavor").selectOption("ai1-1-cpu");
  await page.getByLabel("Command").fill(["sh", "-c", env("PANEL_JOB_SCRIPT")].join("\n"));
  await page.getByLabel("Volumes").fill("not-a-volume-spec");
  await page.getByRole("button", { name: "Submit job" }).click();
  const volumeError = page.locator('[data-field="volumes"] .field-error');
  await volumeError.waitFor();
  ok((await page.getByLabel("Volumes").getAttribute("aria-invalid")) === "true", "a bad volume is refused next to its field", await volumeError.textContent());
  ok(await page.evaluate(() => document.activeElement?.getAttribute("name") === "volumes"), "focus moves to the bad field");
  await page.getByLabel("Volumes").fill(`${BUCKET}@${REGION}/panel-run:/workspace/output:rw`);
  await page.locator(".price").filter({ hasText: /€[0-9.]+ per minute/ }).waitFor();
  ok(true, "the dry run's price is shown before submitting", await page.locator(".price").textContent());
  await shot("job-form");
  await page.getByRole("button", { name: "Submit job" }).click();
  await page.waitForURL(/\/jobs\/job_[^/]+$/);
  result.job_id = decodeURIComponent(new URL(page.url()).pathname.split("/").pop());
  ok(result.job_id !== "new", "the job was submitted", result.job_id);

  // --- The job page: the log arrives live, search filters it, the chart draws the loss. ---
  const lines = page.locator(".log .line");
  await lines.filter({ hasText: /line 3$/ }).waitFor({ timeout: 60000 });
  result.log_lines_first = await lines.count();
  await page.waitForTimeout(2500);
  result.log_lines_later = await lines.count();
  ok(result.log_lines_later > result.log_lines_first, "log lines keep arriving without a reload", `${result.log_lines_first} then ${result.log_lines_later}`);
  await page.locator(".job-head .badge[data-state=RUNNING]").waitFor();
  ok(true, "the state badge says RUNNING");
  await page.getByLabel("Search").fill("line 1");
  const visible = await lines.evaluateAll((els) => els.filter((e) => !e.hidden).map((e) => e.querySelector(".text").textContent));
  ok(visible.length > 0 && visible.every((t) => t.includes("line 1")), "search shows only matching lines", `${visible.length} shown`);
  await page.getByLabel("Search").fill("");
  await page.getByRole("button", { name: "Sync outputs now" }).click();
  const liveSync = page.locator("[data-live-sync]").filter({ hasText: /files .* pending.*units up/ });
  await liveSync.waitFor({ timeout: 30000 });
  ok(true, "the job page shows its live sync", await liveSync.textContent());
  const trainPath = page.locator("#loss-chart path.series[data-series='training loss']");
  await trainPath.waitFor({ timeout: 60000 });
  result.chart_points = Number(await trainPath.getAttribute("data-points"));
  const evalPoints = Number(await page.locator("#loss-chart path.series[data-series='validation loss']").getAttribute("data-points"));
  const d = await trainPath.getAttribute("d");
  ok(result.chart_points === 20 && (d.match(/L/g) || []).length === 19, "the loss chart draws the training loss", `${result.chart_points} points`);
  ok(evalPoints === 4, "and the validation loss", `${evalPoints} points`);
  const label = await page.locator("#loss-chart svg").getAttribute("aria-label");
  ok(/training loss from 2\.7 .* to 0\.3647/.test(label), "the chart has a text summary", label);
  await shot("job-running");

  // --- Stop, and the list. ---
  await page.getByRole("button", { name: "Stop" }).click();
  await page.locator(".job-head .badge[data-state=INTERRUPTED]").waitFor({ timeout: 90000 });
  ok(true, "Stop ends the job INTERRUPTED");
  await page.getByRole("button", { name: "Delete" }).waitFor();
  await page.getByText("The job has ended: this is its whole log.").waitFor();
  ok(true, "the log says it is complete");
  await shot("job-stopped");
  await page.getByRole("link", { name: "Jobs", exact: true }).click();
  const row = page.locator(`tr[data-key="${result.job_id}"]`);
  await row.locator(".badge[data-state=INTERRUPTED]").waitFor();
  ok((await row.getByRole("link").textContent()) === "panel-e2e", "the job list shows the job and its state");

  // --- A phone's width: nothing wider than the screen. ---
  await page.setViewportSize({ width: 375, height: 812 });
  await page.goto(`${URL_BASE}/jobs/${encodeURIComponent(result.job_id)}`);
  await page.locator("#loss-chart svg").waitFor();
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth);
  ok(overflow <= 375, "the job page fits 375 px", `scrollWidth ${overflow}`);
  await shot("phone-job");
  await page.goto(`${URL_BASE}/buckets/${BUCKET}`);
  await page.getByRole("cell", { name: basename(UPLOAD), exact: true }).waitFor();
  ok((await page.evaluate(() => document.documentElement.scrollWidth)) <= 375, "the bucket page fits 375 px");
  await shot("phone-bucket");
  await page.setViewportSize({ width: 1280, height: 900 });

  // --- Another project's token sees none of this. ---
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.waitForURL(/\/signin/);
  await page.getByLabel("API token").fill(env("PANEL_OTHER_TOKEN"));
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(/\/jobs$/);
  await page.getByText("No job yet.").waitFor();
  ok(true, "another project's token sees no job");
  await page.goto(`${URL_BASE}/buckets`);
  await page.locator("table.data").waitFor();
  ok((await page.getByRole("link", { name: BUCKET, exact: true }).count()) === 0, "nor the bucket");
  await page.goto(`${URL_BASE}/jobs/${encodeURIComponent(result.job_id)}`);
  await page.getByRole("alert").filter({ hasText: "does not exist" }).waitFor();
  ok((await page.locator(".log").count()) === 0, "nor the job's page");
  await shot("other-project");

});
