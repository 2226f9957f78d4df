// Headless Chromium submits real HTML forms (hidden fields from boto3's generate_presigned_post
// and a file input) to the S3 server, as a web page uploading straight to a bucket does
// (s3_post_test.py, test_chromium_form). The form page lives on a made-up origin
// (http://app.test) that the browser serves from this script; the redirect target is the test's
// own HTTP server (a followed redirect is not intercepted). For each form of
// $POST_FORMS it records the POST's status, the page it ended on and its text, as one JSON line.
import { tmpdir } from "node:os";
import { env, openPanel, runScenario } from "./panel_harness.mjs";

const forms = JSON.parse(env("POST_FORMS"));
const file = env("POST_FILE");

const escape = (s) => String(s).replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;");
const formPage = (post) => `<!doctype html><html><body><main>
<form method="post" action="${escape(post.url)}" enctype="multipart/form-data">
${Object.entries(post.fields).map(([k, v]) => `<input type="hidden" name="${escape(k)}" value="${escape(v)}">`).join("\n")}
<input type="file" name="file"><button type="submit">Upload</button>
</form></main></body></html>`;

// Refused uploads answer 400/403 on purpose.
const session = await openPanel({ artifacts: tmpdir(), expectedErrors: /status of 40[03]/ });
const { page, ok } = session;
let current = null;
await page.route("http://app.test/**", (route) => {
  const url = route.request().url();
  if (url === "http://app.test/form") {
    return route.fulfill({ status: 200, contentType: "text/html", body: formPage(current) });
  }
  return route.fulfill({ status: 404, contentType: "text/html", body: "<main>no such page</main>" });
});

await runScenario(session, "s3-post-failure", async () => {
  for (const [name, post] of Object.entries(forms)) {
    current = post;
    await page.goto("http://app.test/form");
    await page.setInputFiles("input[type=file]", file);
    const [response] = await Promise.all([
      page.waitForResponse((r) => r.request().method() === "POST"),
      page.waitForNavigation(),
      page.click("button[type=submit]"),
    ]);
    const body = await page.locator("body").innerText().catch(() => "");
    session.result[name] = { status: response.status(), url: page.url(), body };
    ok(true, `${name}: POST answered ${response.status()}, page ${page.url().split("?")[0]}`);
  }
});
