"""The web panel end to end: a real `sovai server` serves the panel and the API; headless Chromium
(Debian's `chromium`, driven by npm playwright-core in panel_browser.mjs) signs in, uploads a file
to a bucket through presigned URLs and CORS, submits a job, watches its log lines arrive, sees its
loss chart, stops it, and checks that a wrong token and another project's token see nothing.
A second scenario (panel_apps_browser.mjs) does the rest of the flow without the CLI: a bucket and
the shipped model uploaded into it, the model deployed as an app, an app token from the helper,
a chat whose answer streams in (a wrong key gets nothing), a notebook started, opened and
stopped, the bill over time, the budget gauge, the TCO chart, and the audit log with its chain
verified. Screenshots go to $SOVAI_ARTIFACTS or <build>/Testing/artifacts/panel/.

Also, without a browser: the panel's HTTP answers (types, caching, CSP, SPA pages, the API's 404s)
and POST /v1/presign with its CORS answer on the S3 port."""
import hashlib
import json
import os
import shutil
import subprocess
import unittest
import urllib.error
import urllib.request

from sovai_fixture import REGION, SovaiServer, random_bytes

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "panel_browser.mjs")
APPS_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "panel_apps_browser.mjs")
MODEL_DIR = os.path.join(REPO_ROOT, "models", "sovai-tiny-llama")
CHROMIUM = os.environ.get("SOVAI_CHROMIUM", "/usr/bin/chromium")
BUCKET = "panel-data"


def artifacts_dir():
    """$SOVAI_ARTIFACTS, else Testing/artifacts/panel in the build directory of SOVAI_BINARY."""
    if os.environ.get("SOVAI_ARTIFACTS"):
        path = os.path.join(os.environ["SOVAI_ARTIFACTS"], "panel")
    else:
        path = os.path.abspath(os.environ.get("SOVAI_BINARY", "build/src/cli/sovai"))
        while path != os.path.dirname(path) and not os.path.exists(
                os.path.join(path, "CMakeCache.txt")):
            path = os.path.dirname(path)
        path = os.path.join(path, "Testing", "artifacts", "panel")
    os.makedirs(path, exist_ok=True)
    return path


def http(method, url, headers=None, data=None):
    """(status, headers, body bytes), errors included."""
    req = urllib.request.Request(url, method=method, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def job_script():
    """A job that writes a decreasing loss into its rw volume, then prints numbered lines slowly
    (one line of sh, as the form takes one argument per line)."""
    rows = []
    for step in range(1, 21):
        rows.append('{"step":%d,"loss":%.4f}' % (step, 3.0 * 0.9 ** step))
        if step % 5 == 0:
            rows.append('{"step":%d,"eval_loss":%.4f}' % (step, 3.2 * 0.92 ** step))
    metrics = " ".join("'%s'" % r for r in rows)
    return ("printf '%%s\\n' %s > /workspace/output/metrics.jsonl; "
            "i=0; while [ $i -lt 600 ]; do i=$((i+1)); echo \"line $i\"; sleep 0.2; done"
            % metrics)


class PanelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = SovaiServer()
        # The workload's unprivileged uid must traverse down to its volumes.
        os.chmod(cls.server.tmp, 0o711)
        cls.server.start()
        cls.s3 = cls.server.boto3_client()
        cls.s3.create_bucket(Bucket=BUCKET,
                             CreateBucketConfiguration={"LocationConstraint": REGION})
        _, me = cls.server.api("GET", "/v1/whoami")
        cls.me = me
        # A second project with an operator token: it must see none of the first one.
        _, project = cls.server.api("POST", "/v1/projects", {"name": "panel-other"})
        _, bob = cls.server.api("POST", "/v1/users", {"name": "panel-bob"})
        cls.server.api("POST", "/v1/projects/%s/members/%s" % (project["id"], bob["id"]),
                       {"role": "operator"})
        status, token = cls.server.api("POST", "/v1/tokens", {
            "user": bob["id"], "project": project["id"], "role": "operator"})
        assert status == 201, token
        cls.other_token = token["token"]
        # A read token of the admin's project, and one limited by labels.
        status, token = cls.server.api("POST", "/v1/tokens", {
            "user": me["user"]["id"], "project": me["project"]["id"], "role": "read"})
        assert status == 201, token
        cls.read_token = token["token"]
        status, token = cls.server.api("POST", "/v1/tokens", {
            "user": me["user"]["id"], "project": me["project"]["id"], "role": "operator",
            "labels": "team=nlp"})
        assert status == 201, token
        cls.labeled_token = token["token"]

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    # --- Serving ------------------------------------------------------------------------------
    def test_index_assets_and_pages(self):
        base = self.server.api_url
        status, headers, body = http("GET", base + "/")
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "text/html; charset=utf-8")
        self.assertEqual(headers["Cache-Control"], "no-cache")
        self.assertEqual(headers["X-Content-Type-Options"], "nosniff")
        csp = headers["Content-Security-Policy"]
        self.assertIn("script-src 'self';", csp)
        self.assertIn("connect-src 'self' " + self.server.s3_url + ";", csp)
        self.assertNotIn("unsafe", csp)
        html = body.decode()
        # A page route is the same document; a conditional GET is 304.
        status, headers2, body2 = http("GET", base + "/jobs/job_123?x=1")
        self.assertEqual((status, body2), (200, body))
        status, _, _ = http("GET", base + "/", {"If-None-Match": headers["ETag"]})
        self.assertEqual(status, 304)
        # Every script and stylesheet it names is served with its type and cached for good.
        import re
        assets = re.findall(r'(?:src|href)="(/assets/[^"]+)"', html)
        if "/assets/" not in html:
            self.skipTest("this build embeds the placeholder page (no Node.js at configure time)")
        self.assertTrue(any(a.endswith(".js") for a in assets), html)
        for asset in assets:
            status, headers, _ = http("GET", base + asset)
            self.assertEqual(status, 200, asset)
            self.assertIn("immutable", headers["Cache-Control"])
            want = "text/javascript" if asset.endswith(".js") else "text/css"
            self.assertTrue(headers["Content-Type"].startswith(want), headers["Content-Type"])
        self.assertNotRegex(html, r"<script(?![^>]*\bsrc=)[^>]*>", "inline script")
        status, _, _ = http("GET", base + "/assets/index-missing.js")
        self.assertEqual(status, 404)

    def test_the_panel_shadows_no_api(self):
        base = self.server.api_url
        status, headers, body = http("GET", base + "/v1/nothing-here")
        self.assertEqual(status, 404)
        self.assertEqual(headers["Content-Type"], "application/problem+json")
        self.assertEqual(http("GET", base + "/v1/whoami")[0], 401)
        self.assertEqual(http("GET", base + "/health")[0], 200)
        self.assertTrue(http("GET", base + "/metrics")[2].startswith(b"#"))
        self.assertEqual(http("POST", base + "/jobs", data=b"{}")[0], 404)
        self.assertEqual(http("GET", base + "/notebooks/x")[0], 404)

    # --- POST /v1/presign and CORS on the S3 port ----------------------------------------------
    def presign(self, body, token=None):
        return self.server.api("POST", "/v1/presign", body, token=token)

    def test_presign_roles_and_errors(self):
        status, got = self.presign({"method": "GET", "bucket": BUCKET, "key": "x"},
                                   token=self.read_token)
        self.assertEqual(status, 200, got)
        self.assertTrue(got["url"].startswith(self.server.s3_url + "/" + BUCKET + "/x?"))
        status, problem = self.presign({"method": "PUT", "bucket": BUCKET, "key": "x"},
                                       token=self.read_token)
        self.assertEqual(status, 403, problem)
        self.assertEqual(problem["errors"][0]["field"], "method")
        status, problem = self.presign({"method": "GET", "bucket": BUCKET},
                                       token=self.labeled_token)
        self.assertEqual(status, 403, problem)
        status, problem = self.presign({"method": "POST", "bucket": "No", "expires_s": 0})
        self.assertEqual(status, 400, problem)
        self.assertEqual(sorted(e["field"] for e in problem["errors"]),
                         ["bucket", "expires_s", "method"])
        status, _ = self.server.api("POST", "/v1/presign", {"method": "GET"}, token="sov_wrong")
        self.assertEqual(status, 401)

    def test_presigned_put_get_with_cors(self):
        origin = "http://panel.example:8080"
        status, put = self.presign({"method": "PUT", "bucket": BUCKET, "key": "cors/a b.txt",
                                    "origin": origin})
        self.assertEqual(status, 200, put)
        # The browser's preflight, then the upload.
        status, headers, _ = http("OPTIONS", put["url"], {
            "Origin": origin, "Access-Control-Request-Method": "PUT",
            "Access-Control-Request-Headers": "content-type"})
        self.assertEqual(status, 200)
        self.assertEqual(headers["Access-Control-Allow-Origin"], origin)
        self.assertIn("PUT", headers["Access-Control-Allow-Methods"])
        self.assertEqual(headers["Access-Control-Allow-Headers"], "content-type")
        status, headers, body = http("PUT", put["url"], {"Origin": origin,
                                                         "Content-Type": "text/plain"},
                                     data=b"through the panel\n")
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["Access-Control-Allow-Origin"], origin)
        self.assertIn("ETag", headers["Access-Control-Expose-Headers"])
        got = self.s3.get_object(Bucket=BUCKET, Key="cors/a b.txt")
        self.assertEqual(got["Body"].read(), b"through the panel\n")
        # Another origin gets no CORS answer; the URL still works for a non-browser client.
        status, headers, _ = http("OPTIONS", put["url"], {
            "Origin": "http://evil.example", "Access-Control-Request-Method": "PUT"})
        self.assertEqual(status, 403)
        self.assertIsNone(headers["Access-Control-Allow-Origin"])
        # A listing, presigned for GET; the same URL refuses another method.
        status, listing = self.presign({"method": "GET", "bucket": BUCKET,
                                        "query": {"list-type": "2", "prefix": "cors/"}})
        self.assertEqual(status, 200, listing)
        status, _, body = http("GET", listing["url"])
        self.assertEqual(status, 200, body)
        self.assertIn(b"<Key>cors/a b.txt</Key>", body)
        self.assertEqual(http("DELETE", listing["url"])[0], 403)
        # Another project's URL does not reach this bucket.
        status, other = self.presign({"method": "GET", "bucket": BUCKET, "key": "cors/a b.txt"},
                                     token=self.other_token)
        self.assertEqual(status, 200, other)
        self.assertEqual(http("GET", other["url"])[0], 403)

    # --- The browser ----------------------------------------------------------------------------
    def require_browser_and_jobs(self):
        """node's path; skips without Chromium, a built panel or jobs, fails without playwright."""
        if not os.path.exists(CHROMIUM):
            self.skipTest("chromium is not installed (%s): tools/bootstrap.sh installs it" %
                          CHROMIUM)
        node = shutil.which("node")
        if node is None or not os.path.isdir(os.path.join(REPO_ROOT, "node_modules",
                                                          "playwright-core")):
            self.fail("node and npm playwright-core are needed: run tools/bootstrap.sh")
        status, html = self.server.api("GET", "/", raw=True)
        if "/assets/" not in html:
            self.skipTest("this build embeds the placeholder page (no Node.js at configure time)")
        status, flavors = self.server.api("GET", "/v1/flavors")
        cpu = [f for f in flavors["items"] if f["id"] == "ai1-1-cpu"][0]
        if not cpu["available"]:
            self.skipTest("jobs are not available on this host: " + cpu["reason"])
        return node

    def test_browser(self):
        node = self.require_browser_and_jobs()

        artifacts = artifacts_dir()
        print("panel screenshots: " + artifacts, flush=True)
        upload = os.path.join(self.server.tmp, "panel-upload.bin")
        data = random_bytes(3 * 1024 * 1024 + 17, "panel-upload")
        with open(upload, "wb") as f:
            f.write(data)
        env = dict(os.environ)
        env.update({
            "PANEL_URL": self.server.api_url, "PANEL_TOKEN": self.server.admin_token(),
            "PANEL_OTHER_TOKEN": self.other_token, "PANEL_BUCKET": BUCKET,
            "PANEL_REGION": REGION.upper(), "PANEL_UPLOAD": upload,
            "PANEL_JOB_SCRIPT": job_script(), "PANEL_ARTIFACTS": artifacts,
            "PANEL_CHROMIUM": CHROMIUM,
        })
        proc = subprocess.run([node, SCRIPT], capture_output=True, env=env, cwd=REPO_ROOT,
                              timeout=600)
        out = proc.stdout.decode(errors="replace")
        err = proc.stderr.decode(errors="replace")
        if proc.returncode != 0:
            self.fail("node panel_browser.mjs exited %d\n%s\n--- stderr ---\n%s\n"
                      "--- server log ---\n%s" % (proc.returncode, out[-4000:], err[-4000:],
                                                  self.server.server_log()))
        result = json.loads(out.strip().splitlines()[-1])
        # What the browser did, seen by other clients.
        got = self.s3.get_object(Bucket=BUCKET, Key="panel-upload.bin")["Body"].read()
        self.assertEqual(hashlib.sha256(got).hexdigest(), hashlib.sha256(data).hexdigest())
        keys = [o["Key"] for o in self.s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
        self.assertNotIn("panel-delete-me.txt", keys)
        status, job = self.server.api("GET", "/v1/jobs/" + result["job_id"])
        self.assertEqual(status, 200, job)
        self.assertEqual(job["status"]["state"], "INTERRUPTED", job)
        self.assertEqual(job["spec"]["image"], "sovai/shell")
        self.assertEqual(job["spec"]["volumes"][0].split(":")[0], BUCKET + "@" + REGION.upper()
                         + "/panel-run")
        self.assertGreater(result["log_lines_later"], result["log_lines_first"])
        self.assertGreaterEqual(result["chart_points"], 20)
        for name in ("signin-wrong-token", "buckets-upload", "job-form", "job-running",
                     "job-stopped", "phone-job", "other-project"):
            self.assertTrue(os.path.exists(os.path.join(artifacts, name + ".png")), name)


    # --- GET /v1/tco: the numbers of `sovai tco` over HTTP --------------------------------------
    def test_tco_route(self):
        status, tco = self.server.api("GET", "/v1/tco")
        self.assertEqual(status, 200, tco)
        # docs/tco.md's worked example: the defaults at the catalog's h100-1-gpu price.
        self.assertEqual(tco["flavor"], "h100-1-gpu")
        self.assertEqual(tco["owning"]["total_cents"], 1507833)
        self.assertEqual(tco["assumed"]["pay_as_you_go_cents"], 981821)
        self.assertEqual(tco["break_even_utilisation_percent"], "92.15%")
        self.assertEqual(len(tco["curves"]), 21)
        self.assertEqual(tco["curves"][-1]["pay_as_you_go_cents"], tco["pay_as_you_go_full_cents"])
        # The project's history is there (no H100 minutes here: 0 %).
        self.assertEqual(tco["actual"]["utilisation_ppm"], 0, tco)
        self.assertEqual(tco["history_note"], "")
        status, tco = self.server.api(
            "GET", "/v1/tco?gpus=4&purchase_eur=100000&utilisation=1&price_per_gpu_minute_eur=0.1"
            "&history=false")
        self.assertEqual(status, 200, tco)
        self.assertEqual(tco["price_source"], "flag")
        self.assertIsNone(tco["actual"])
        self.assertEqual(tco["assumed"]["cheaper"], "owning")
        status, problem = self.server.api("GET", "/v1/tco?utilisation=1.5&gpus=0&colour=red")
        self.assertEqual(status, 400, problem)
        self.assertEqual(sorted(e["field"] for e in problem["errors"]),
                         ["colour", "gpus", "utilisation"])
        status, problem = self.server.api("GET", "/v1/tco?gpu_model=B200")
        self.assertEqual(status, 404, problem)
        self.assertEqual(problem["errors"][0]["field"], "gpu_model")
        # A token limited to labels gets the comparison without the history.
        status, tco = self.server.api("GET", "/v1/tco", token=self.labeled_token)
        self.assertEqual(status, 200, tco)
        self.assertIsNone(tco["actual"])
        self.assertIn("labels", tco["history_note"])
        self.assertEqual(self.server.api("GET", "/v1/tco", token="sov_wrong")[0], 401)

    def test_browser_apps(self):
        node = self.require_browser_and_jobs()
        binary = os.path.realpath(os.environ.get("SOVAI_BINARY", "build/src/cli/sovai"))
        engine = os.path.join(os.path.dirname(binary), "..", "engine", "sovai-engine")
        if not os.path.exists(engine):
            self.skipTest("apps need sovai-engine next to sovai (%s)" % engine)

        artifacts = artifacts_dir()
        print("panel screenshots: " + artifacts, flush=True)
        env = dict(os.environ)
        env.update({
            "PANEL_URL": self.server.api_url, "PANEL_TOKEN": self.server.admin_token(),
            "PANEL_REGION": REGION.upper(), "PANEL_MODEL_DIR": MODEL_DIR,
            "PANEL_ARTIFACTS": artifacts, "PANEL_CHROMIUM": CHROMIUM,
            "PANEL_NOTEBOOKS": "1" if shutil.which("jupyter-notebook") else "0",
        })
        proc = subprocess.run([node, APPS_SCRIPT], capture_output=True, env=env, cwd=REPO_ROOT,
                              timeout=800)
        out = proc.stdout.decode(errors="replace")
        err = proc.stderr.decode(errors="replace")
        print(out[-3000:], flush=True)
        self.addCleanup(self.delete_apps)
        if proc.returncode != 0:
            self.fail("node panel_apps_browser.mjs exited %d\n%s\n--- stderr ---\n%s\n"
                      "--- server log ---\n%s" % (proc.returncode, out[-4000:], err[-4000:],
                                                  self.server.server_log()))
        result = json.loads(out.strip().splitlines()[-1])
        # What the browser did, seen by other clients.
        status, app = self.server.api("GET", "/v1/apps/" + result["app_id"])
        self.assertEqual(status, 200, app)
        self.assertEqual(app["state"], "RUNNING", app)
        self.assertEqual(app["spec"]["model"], "panel-models@%s/tiny" % REGION.upper())
        self.assertEqual(app["spec"]["labels"], {"team": "panel"})
        keys = [o["Key"] for o in self.s3.list_objects_v2(Bucket="panel-models")["Contents"]]
        self.assertIn("tiny/model.safetensors", keys)
        buckets = [b["Name"] for b in self.s3.list_buckets()["Buckets"]]
        self.assertNotIn("panel-trash", buckets)
        # The helper's token reaches the app, and only apps labelled team=panel.
        url = self.server.api_url + "/apps/%s/v1/chat/completions" % result["app_id"]
        body = json.dumps({"model": "panel-bot", "max_tokens": 4,
                           "messages": [{"role": "user", "content": "hi"}]}).encode()
        status, _, answer = http("POST", url, {"Authorization": "Bearer " + result["app_token"],
                                               "Content-Type": "application/json"}, body)
        self.assertEqual(status, 200, answer)
        status, _, _ = http("POST", url, {"Authorization": "Bearer sov_wrong",
                                          "Content-Type": "application/json"}, body)
        self.assertEqual(status, 401)
        status, tokens = self.server.api("GET", "/v1/tokens?limit=500")
        made = [t for t in tokens["items"] if t.get("name") == "app-panel-bot"]
        self.assertEqual(len(made), 1, tokens)
        self.assertEqual(made[0]["labels"], "team=panel")
        self.assertEqual(made[0]["role"], "read")
        status, budget = self.server.api("GET", "/v1/billing/budget")
        self.assertEqual(budget["monthly_cap_eur"], "50.000000", budget)
        self.assertTrue(result["answer"])
        names = ["buckets-create-delete", "app-form", "app-running", "phone-app", "chat-streamed",
                 "chat-wrong-key", "phone-playground", "notebooks", "billing", "phone-billing",
                 "audit", "phone-audit", "billing-1400x900", "billing-1024x768",
                 "audit-1400x900", "audit-1024x768"]
        if result.get("notebook"):
            names.append("notebook-jupyter")
        for name in names:
            self.assertTrue(os.path.exists(os.path.join(artifacts, name + ".png")), name)

    def delete_apps(self):
        """The machine has few CPUs: give the replicas back."""
        status, apps = self.server.api("GET", "/v1/apps")
        for app in apps.get("items", []) if status == 200 else []:
            self.server.api("DELETE", "/v1/apps/" + app["id"])


if __name__ == "__main__":
    unittest.main()
