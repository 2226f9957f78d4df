"""Apps and the endpoints catalog end to end: a real `sovai server`, the shipped model and an
adapter trained by `sovai-engine train` in a bucket, `sovai app run` from the CLI, replicas that
are real `sovai-engine serve` processes in the sandbox, and the official `openai` npm client
(apps_openai_client.mjs) talking through the gateway: app tokens (401, 403, 404), the response
cache and Cache-Control, the catalog (404, 429, and OpenAI errors for truncated JSON and a body over
16 MiB), autoscaling out, in and to zero, a replica killed under load, and a rolling update under
load."""
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from sovai_fixture import REGION, CliMixin, SovaiServer, cli_env

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "apps_openai_client.mjs")
MODEL_DIR = os.path.join(REPO_ROOT, "models", "sovai-tiny-llama")
ENGINE = os.environ.get("SOVAI_ENGINE", "build/src/engine/sovai-engine")
LOC = "apps@" + REGION.upper()


def node(scenario, **args):
    result = subprocess.run(["node", CLIENT, scenario, json.dumps(args)], capture_output=True,
                            text=True, timeout=600)
    return result


def train_adapter(workdir, name, answer):
    """A LoRA adapter of the shipped model, trained for a few steps by `sovai-engine train`."""
    data = os.path.join(workdir, name + ".jsonl")
    with open(data, "w") as f:
        for i in range(40):
            f.write(json.dumps({"messages": [
                {"role": "user", "content": "Which bucket holds the training data? (%d)" % i},
                {"role": "assistant", "content": answer}]}) + "\n")
    out = os.path.join(workdir, name)
    subprocess.run([ENGINE, "train", "--model", MODEL_DIR, "--data", data, "--output", out,
                    "--method", "lora", "--rank", "4", "--max-steps", "6", "--seq-len", "48",
                    "--batch-rows", "4", "--learning-rate", "1e-2", "--eval-fraction", "0"],
                   check=True, capture_output=True, timeout=600)
    return out


class AppsTest(CliMixin, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sovai-apps-")
        # Replicas run as an unprivileged user that must reach their directories.
        cls.server = SovaiServer(workloads=True).start()
        s3 = cls.server.boto3_client()
        s3.create_bucket(Bucket="apps")
        for name in os.listdir(MODEL_DIR):
            s3.upload_file(os.path.join(MODEL_DIR, name), "apps", "base/" + name)
        for label, answer in (("output", "It is in bucket corpus."), ("output-v2", "Bucket v2.")):
            out = train_adapter(cls.tmp, label, answer)
            for root, _, files in os.walk(out):
                for name in files:
                    path = os.path.join(root, name)
                    s3.upload_file(path, "apps", label + "/" + os.path.relpath(path, out))
        cls.env = cli_env(cls.server)

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    def app(self, name):
        status, body = self.server.api("GET", "/v1/apps/" + name)
        self.assertEqual(status, 200, body)
        return body

    def wait_app(self, name, predicate, what, timeout=180):
        deadline = time.time() + timeout
        app = None
        while time.time() < deadline:
            app = self.app(name)
            if predicate(app):
                return app
            time.sleep(0.25)
        self.fail("app %s never %s: %s\nserver log:\n%s" % (
            name, what, json.dumps(app, indent=1), self.server.server_log()))

    def token(self, role="read", labels="", project=None):
        body = {"role": role}
        if labels:
            body["labels"] = labels
        if project:
            body["project"] = project
        status, created = self.server.api("POST", "/v1/tokens", body)
        self.assertEqual(status, 201, created)
        return created["token"]

    def run_app(self, name, *flags):
        out = self.sovai("app", "run", "--name", name, "--model", LOC + "/output",
                         "--base-model", LOC + "/base", "--flavor", "ai1-1-cpu", *flags,
                         "--wait", "--timeout", "3m")
        app = self.app(name)
        self.assertEqual(app["state"], "RUNNING", out.stdout + out.stderr)
        # The machine has few CPUs: every test gives its replicas back.
        self.addCleanup(self.delete_app, name)
        return app

    def delete_app(self, name):
        status, _ = self.server.api("DELETE", "/v1/apps/" + name)
        if status != 404:
            self.wait_app_gone(name)

    def test_app_with_tokens_through_the_openai_client(self):
        app = self.run_app("bot", "--label", "team=support")
        self.assertTrue(app["adapter"])
        self.assertEqual(app["model_location"], LOC + "/output/adapter")
        other = self.server.api("POST", "/v1/projects", {"name": "other-team"})[1]
        me = self.server.api("GET", "/v1/whoami")[1]["user"]["id"]
        self.server.api("POST", "/v1/projects/%s/members/%s" % (other["id"], me),
                        {"role": "operator"})
        result = node("app", base_url=app["url"] + "v1", model="bot",
                      token=self.token(labels="team=support"),
                      wrong_label_token=self.token(labels="team=sales"),
                      other_token=self.token(project=other["id"]))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr +
                         self.server.server_log())
        for check in ("chat through the gateway", "streaming passes through token by token",
                      "401 without a token", "403 for a token whose selector the app does not "
                      "match", "404 for a token of another project", "404 for an unknown model",
                      "the gateway's response cache answers a repeated deterministic request",
                      "no-store neither reads nor writes the gateway's cache",
                      "no-cache refreshes the gateway's cached answer"):
            self.assertIn("ok " + check, result.stdout)
        # The gateway metered what went through it (the streamed answer's usage included).
        deadline = time.time() + 10
        while self.app("bot")["status"]["usage"]["requests"] < 5:
            self.assertLess(time.time(), deadline, self.app("bot")["status"]["usage"])
            time.sleep(0.25)
        usage = self.app("bot")["status"]["usage"]
        self.assertGreater(usage["prompt_tokens"], 0)
        self.assertGreater(usage["completion_tokens"], 0)
        metrics = self.server.metrics()
        self.assertRegex(metrics, r'sovai_gateway_response_cache_hits_total\{app="%s",name="bot"\} '
                                  r'[1-9]' % app["id"])
        listed = self.sovai("app", "list").stdout
        self.assertIn("bot", listed)
        self.assertIn("RUNNING", listed)
        logs = self.sovai("app", "logs", "bot").stdout
        self.assertIn("listening on port", logs)
        deleted = self.sovai("app", "delete", "bot").stdout
        self.assertIn("DELETING", deleted)
        self.wait_app_gone("bot")

    def wait_app_gone(self, name, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, _ = self.server.api("GET", "/v1/apps/" + name)
            if status == 404:
                return
            time.sleep(0.25)
        self.fail("app %s was never deleted" % name)

    def test_catalog_serves_published_models_with_a_per_project_limit(self):
        status, endpoint = self.server.api("POST", "/v1/endpoints", {
            "name": "tiny-chat", "model": LOC + "/base", "flavor": "ai1-1-cpu",
            "rate_limit": "8/min"})
        self.assertEqual(status, 201, endpoint)
        # Cleanups run last first: delete, then wait for the app to be gone.
        self.addCleanup(self.wait_app_gone, endpoint["app"])
        self.addCleanup(self.server.api, "DELETE", "/v1/endpoints/tiny-chat")
        deadline = time.time() + 180
        while self.server.api("GET", "/v1/endpoints")[1]["items"][0].get("ready_replicas", 0) < 1:
            self.assertLess(time.time(), deadline, self.server.server_log())
            time.sleep(0.25)
        # A user of another project calls the catalog with their own project's key.
        project = self.server.api("POST", "/v1/projects", {"name": "catalog-users"})[1]
        me = self.server.api("GET", "/v1/whoami")[1]["user"]["id"]
        self.server.api("POST", "/v1/projects/%s/members/%s" % (project["id"], me),
                        {"role": "read"})
        result = node("catalog", base_url=self.server.api_url + "/v1", model="tiny-chat",
                      token=self.token(project=project["id"]), limit=8)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        for check in ("the catalog lists the endpoint", "chat through the catalog",
                      "streaming through the catalog", "404 for a model the catalog does not have",
                      "401 without an API key", "truncated JSON is an OpenAI 400 saying where",
                      "a body over 16 MiB is an OpenAI 413",
                      "429 with Retry-After over the per-project limit"):
            self.assertIn("ok " + check, result.stdout)
        self.assertEqual(self.server.api("DELETE", "/v1/endpoints/tiny-chat")[0], 204)
        self.assertEqual(self.server.api("DELETE", "/v1/endpoints/tiny-chat")[0], 404)

    def test_catalog_serves_an_embedding_model(self):
        s3 = self.server.boto3_client()
        embed_dir = os.path.join(REPO_ROOT, "models", "sovai-tiny-embed")
        for root, _, files in os.walk(embed_dir):
            for name in files:
                path = os.path.join(root, name)
                s3.upload_file(path, "apps", "embed/" + os.path.relpath(path, embed_dir))
        out = self.sovai("endpoint", "add", "--name", "tiny-embed", "--model", LOC + "/embed",
                         "--task", "embed", "--flavor", "ai1-1-cpu")
        endpoint = self.server.api("GET", "/v1/endpoints")[1]["items"][0]
        self.assertEqual(endpoint["name"], "tiny-embed", out.stdout)
        self.addCleanup(self.wait_app_gone, endpoint["app"])
        self.addCleanup(self.server.api, "DELETE", "/v1/endpoints/tiny-embed")
        deadline = time.time() + 180
        while self.server.api("GET", "/v1/endpoints")[1]["items"][0].get("ready_replicas", 0) < 1:
            self.assertLess(time.time(), deadline, self.server.server_log())
            time.sleep(0.25)
        body = {"model": "tiny-embed", "input": ["the quick brown fox", "a lazy dog"]}
        status, first = self.server.api("POST", "/v1/embeddings", body, token=self.token())
        self.assertEqual(status, 200, first)
        self.assertEqual([len(d["embedding"]) for d in first["data"]], [256, 256])
        self.assertGreater(first["usage"]["prompt_tokens"], 2)
        status, again = self.server.api("POST", "/v1/embeddings", body, token=self.token())
        self.assertEqual((status, again), (200, first))
        status, error = self.server.api("POST", "/v1/rerank", {
            "model": "tiny-embed", "query": "q", "documents": ["d"]}, token=self.token())
        self.assertEqual((status, error["error"]["param"]), (400, "model"), error)
        status, error = self.server.api("POST", "/v1/embeddings", {"model": "nope", "input": "x"},
                                        token=self.token())
        self.assertEqual(status, 404, error)

    def load(self, app, token, **kwargs):
        args = dict(base_url=app["url"] + "v1", model=app["name"], token=token, concurrency=4,
                    duration_ms=5000, max_tokens=16, stream=True)
        args.update(kwargs)
        result = node("load", **args)
        self.assertEqual(result.returncode, 0, result.stderr)
        return json.loads(result.stdout.strip().splitlines()[-1])

    def test_autoscaling_out_in_and_to_zero_then_the_first_request_is_held(self):
        app = self.run_app("auto", "--auto-min-replicas", "0", "--auto-max-replicas", "2",
                           "--auto-resource-type", "REQUESTS", "--auto-resource-usage-threshold",
                           "1", "--auto-scale-down-window-s", "2", "--auto-cooldown-s", "4")
        token = self.token()
        counts = {}
        loader = threading.Thread(target=lambda: counts.update(self.load(
            app, token, concurrency=4, duration_ms=20000, max_tokens=64)))
        loader.start()
        self.wait_app("auto", lambda a: a["status"]["ready_replicas"] == 2, "scaled out to 2")
        loader.join()
        self.assertEqual(counts["failed_before_first_byte"] + counts["failed_after_first_byte"], 0,
                         counts)
        scaled = self.wait_app("auto", lambda a: a["status"]["desired_replicas"] == 0,
                               "scaled to zero", timeout=120)
        events = "\n".join(e["what"] for e in scaled["status"]["events"])
        self.assertRegex(events, r"scale 1 -> 2: REQUESTS")
        self.assertRegex(events, r"scale 2 -> 1: ")
        self.assertIn("scale to zero", events)
        self.wait_app("auto", lambda a: not a["status"]["replicas"], "stopped its replicas")
        self.assertIn('sovai_gateway_scaling_decisions_total{app="%s",name="auto"}' % app["id"],
                      self.server.metrics())
        # At zero: the first request is held until a replica is ready, not refused.
        result = node("one", base_url=app["url"] + "v1", model="auto", token=token)
        self.assertEqual(result.returncode, 0, result.stderr + self.server.server_log())
        self.assertEqual(self.app("auto")["status"]["desired_replicas"], 1)

    def test_a_replica_killed_under_load_is_replaced_and_no_unstarted_request_fails(self):
        app = self.run_app("crashy", "--replicas", "2")
        token = self.token()
        first = {r["job"] for r in app["status"]["replicas"]}
        counts = {}
        loader = threading.Thread(target=lambda: counts.update(self.load(
            app, token, concurrency=4, duration_ms=12000, max_tokens=24)))
        loader.start()
        time.sleep(3)
        victim = app["status"]["replicas"][0]["job"]
        self.kill_replica(app["id"], victim)
        loader.join()
        self.assertGreater(counts["requests"], 10, counts)
        self.assertEqual(counts["failed_before_first_byte"], 0, counts)
        replaced = self.wait_app("crashy", lambda a: a["status"]["ready_replicas"] == 2 and
                                 victim not in {r["job"] for r in a["status"]["replicas"]},
                                 "replaced the killed replica")
        self.assertEqual(len({r["job"] for r in replaced["status"]["replicas"]} - first), 1)
        self.assertTrue(any("ended" in e["what"] and victim in e["what"]
                            for e in replaced["status"]["events"]))

    def kill_replica(self, app_id, job):
        """SIGKILL to the `sovai-engine serve` of replica `job` (found by its port)."""
        app = self.server.api("GET", "/v1/apps/" + app_id)[1]
        status, spec = self.server.api("GET", "/v1/jobs/" + job)
        command = spec["spec"]["command"]
        listen = command[command.index("--listen") + 1]
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"serve" in argv and listen.encode() in argv and not any(
                    a.endswith(b"bwrap") for a in argv[:1]):
                os.kill(int(pid), signal.SIGKILL)
                return
        self.fail("no process serves %s for %s (%s)" % (listen, job, app))

    def test_rolling_update_under_load_fails_no_request(self):
        app = self.run_app("rolling", "--replicas", "1")
        token = self.token()
        old = app["status"]["replicas"][0]["job"]
        counts = {}
        loader = threading.Thread(target=lambda: counts.update(self.load(
            app, token, concurrency=3, duration_ms=15000, max_tokens=24)))
        loader.start()
        time.sleep(2)
        self.sovai("app", "update", "rolling", "--model", LOC + "/output-v2",
                   "--base-model", LOC + "/base")
        updated = self.wait_app("rolling", lambda a: a["generation"] == 2 and
                                a["state"] == "RUNNING" and
                                old not in {r["job"] for r in a["status"]["replicas"]},
                                "rolled over")
        loader.join()
        self.assertGreater(counts["requests"], 10, counts)
        self.assertEqual(counts["failed_before_first_byte"] + counts["failed_after_first_byte"], 0,
                         counts)
        self.assertEqual(updated["model_location"], LOC + "/output-v2/adapter")
        # Streams without include_usage are metered too (the engine's usage comment).
        deadline = time.time() + 10
        while self.app("rolling")["status"]["usage"]["completion_tokens"] == 0:
            self.assertLess(time.time(), deadline, self.app("rolling")["status"]["usage"])
            time.sleep(0.25)


if __name__ == "__main__":
    unittest.main()
