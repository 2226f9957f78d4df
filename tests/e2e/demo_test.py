"""`make demo`'s script end to end, with the recipe it ships (tools/demo/recipe.sh: 6,000 training
examples, 2,000 steps of full fine-tuning, about 4 minutes on 2 cores), and each stage's outcome
checked with real clients afterwards:

* the dataset and the base model are objects in the bucket (boto3);
* the fine-tuning job is DONE and its loss fell (metrics.jsonl in the bucket);
* the fine-tuned model and the model card (naming the job) are in the bucket;
* the fine-tuned model scores far above the base model on the held-out test split (a floor well
  below the spread measured over seeds, tools/demo/README.md), and the base model near zero;
* the demo shows one test request answered right and one answered wrong;
* the deployed app answers through the official `openai` npm client, and its usage is counted;
* the bill has a line for the job;
* Ctrl-C in the middle of the fine-tune leaves no process of the demo running (with DEMO_QUICK:
  400 training examples, a 40-step LoRA run).
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import boto3
from botocore.config import Config

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEMO = os.path.join(REPO, "tools", "demo.sh")
SOVAI_BINARY = os.environ.get("SOVAI_BINARY", "")
SOVAI_ENGINE = os.environ.get("SOVAI_ENGINE", "")
REGION = "EU-WEST-LOCAL"

# The recipe's test exact match, out of 200, measured over seeds and sgemm kernels (a change in
# the last bits of the numerics): 147-185 (tools/demo/README.md, "The recipe"). The floor
# sits far below the lowest, so that such a change (which train_trainer_test pins) cannot make
# this test flake, while a recipe back on the old plateau (33/200 when this was written) fails.
FINETUNED_FLOOR = 110
# The base model has never seen the task; it matched none of the 200 in any measurement.
BASE_CEILING = 2


def demo_env(work, keep_server, quick):
    env = dict(os.environ)
    env.pop("DEMO_QUICK", None)
    if quick:
        env["DEMO_QUICK"] = "1"
    env.update({"DEMO_DIR": work, "DEMO_KEEP_SERVER": "1" if keep_server else "0",
                "SOVAI_BINARY": SOVAI_BINARY, "SOVAI_ENGINE": SOVAI_ENGINE})
    return env


def read_env_file(path):
    values = {}
    with open(path) as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition("=")
            values[key] = value
    return values


def processes_mentioning(text):
    """Pids of live processes whose command line contains `text` (the demo's directory)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            pids.append((int(entry), cmdline))
    return pids


def wait_until_gone(text, timeout_s):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        left = processes_mentioning(text)
        if not left:
            return []
        time.sleep(0.2)
    return processes_mentioning(text)


@unittest.skipUnless(SOVAI_BINARY and SOVAI_ENGINE, "SOVAI_BINARY and SOVAI_ENGINE are not set")
class DemoTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="sovai-demo-test-")
        os.chmod(cls.tmp.name, 0o711)  # the jobs' sandbox user traverses it
        cls.work = os.path.join(cls.tmp.name, "demo")
        run = subprocess.run(["bash", DEMO], env=demo_env(cls.work, keep_server=True, quick=False),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=2400)
        cls.output = run.stdout.decode(errors="replace")
        cls.returncode = run.returncode
        # What the demo printed, in the test's log (ctest keeps it in
        # Testing/Temporary/LastTest.log): its scores, examples and step times are what docs quote.
        sys.stdout.write(cls.output)
        sys.stdout.flush()
        cls.info = {}
        env_file = os.path.join(cls.work, "demo.env")
        if os.path.exists(env_file):
            cls.info = read_env_file(env_file)

    @classmethod
    def tearDownClass(cls):
        pid = int(cls.info.get("server_pid") or 0)
        if pid:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            wait_until_gone(cls.work, 60)
        cls.tmp.cleanup()

    def setUp(self):
        self.assertEqual(self.returncode, 0, self.output[-6000:])
        with open(os.path.join(self.info["data_dir"], "admin.json")) as f:
            admin = json.load(f)
        self.token = admin["api_token"]
        self.s3 = boto3.client("s3", endpoint_url=self.info["s3_url"], region_name=REGION.lower(),
                               aws_access_key_id=admin["access_key_id"],
                               aws_secret_access_key=admin["secret_access_key"],
                               config=Config(s3={"addressing_style": "path"}))

    def api(self, path):
        request = urllib.request.Request(self.info["api_url"] + path,
                                         headers={"Authorization": "Bearer " + self.token})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    def keys(self, prefix):
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket="demo", Prefix=prefix)
        return {o["Key"] for page in pages for o in page.get("Contents", [])}

    def finetune_job(self):
        jobs = [j for j in self.api("/v1/jobs")["items"] if j["spec"].get("name") == "demo-finetune"]
        self.assertEqual(len(jobs), 1, jobs)
        return jobs[0]

    def test_prints_the_six_steps_in_order(self):
        at = [self.output.find("== %d/6" % n) for n in range(1, 7)]
        self.assertNotIn(-1, at, self.output[-4000:])
        self.assertEqual(at, sorted(at))
        self.assertIn("exact match", self.output)
        self.assertIn("Demo time:", self.output)

    def test_the_dataset_and_the_base_model_are_in_the_bucket(self):
        self.assertLessEqual({"dataset/train.jsonl", "dataset/validation.jsonl", "dataset/test.jsonl"},
                             self.keys("dataset/"))
        local = set(os.listdir(os.path.join(REPO, "models", "sovai-tiny-llama")))
        self.assertEqual({"base-model/" + name for name in local}, self.keys("base-model/"))
        body = self.s3.get_object(Bucket="demo", Key="dataset/train.jsonl")["Body"].read()
        self.assertEqual(6000, len(body.splitlines()))

    def test_the_job_is_done_and_its_loss_fell(self):
        job = self.finetune_job()
        self.assertEqual(job["status"]["state"], "DONE", job)
        metrics = self.s3.get_object(Bucket="demo", Key="output/metrics.jsonl")["Body"].read()
        losses = [row["loss"] for row in map(json.loads, metrics.splitlines()) if "loss" in row]
        self.assertGreaterEqual(len(losses), 3, losses)
        self.assertLess(losses[-1], losses[0] * 0.8, losses)
        self.assertIn("step 2000/2000", self.output)

    def test_checkpoints_reached_the_bucket_while_the_job_trained(self):
        # Every 500 steps a checkpoint (tools/demo/recipe.sh); the live output volume uploads each
        # as a unit, files first and its manifest last, while training goes on. The three before
        # the last must be complete in the bucket before the job left RUNNING.
        job = self.finetune_job()
        left_running = min(t["at_unix_micros"] for t in job["status"]["history"]
                           if t["state"] == "FINALIZING") / 1e6
        objects = {}
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket="demo",
                                                                  Prefix="output/checkpoints/")
        for page in pages:
            for o in page.get("Contents", []):
                objects[o["Key"]] = o["LastModified"].timestamp()
        for step in (500, 1000, 1500, 2000):
            unit = "output/checkpoints/step-%08d/" % step
            manifest = unit + ".sovai-unit.json"
            self.assertIn(manifest, objects, sorted(objects))
            listed = json.loads(self.s3.get_object(Bucket="demo", Key=manifest)["Body"].read())
            files = [f["path"] for f in listed["files"]]
            self.assertTrue(listed["complete"] and files, listed)
            for name in files:
                self.assertLessEqual(objects[unit + name], objects[manifest], (unit, name))
            if step < 2000:
                self.assertLess(objects[manifest], left_running, (manifest, job["status"]))
        self.assertIn("Checkpoints in the bucket", self.output)

    def test_the_model_and_the_model_card_are_in_the_bucket(self):
        keys = self.keys("output/")
        for key in ("output/model/config.json", "output/model/model.safetensors",
                    "output/model/tokenizer.json", "output/model_card.json",
                    "output/MODEL_CARD.md"):
            self.assertIn(key, keys)
        card = json.loads(self.s3.get_object(Bucket="demo", Key="output/model_card.json")["Body"].read())
        self.assertEqual(card["job"], self.finetune_job()["id"])
        self.assertEqual(card["outputs"][0]["kind"], "model")
        self.assertEqual(card["outputs"][0]["location"], "demo@%s/output/model" % REGION)
        self.assertEqual({d["key"] for d in card["datasets"]}, {"dataset/train.jsonl"})

    def test_the_fine_tuned_model_scores_far_above_the_base_model(self):
        base_right, base_total = map(int, self.info["base_score"].split("/"))
        tuned_right, tuned_total = map(int, self.info["finetuned_score"].split("/"))
        self.assertEqual((base_total, tuned_total), (200, 200))
        self.assertLessEqual(base_right, BASE_CEILING, self.info)
        self.assertGreaterEqual(tuned_right, FINETUNED_FLOOR, self.info)
        # The evaluation's rows agree with the score it printed.
        with open(os.path.join(self.work, "eval-finetuned.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        self.assertEqual(tuned_right, sum(row["exact_match"] for row in rows))

    def test_it_shows_one_answer_right_and_one_wrong(self):
        with open(os.path.join(self.work, "eval-finetuned.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        right = next(row for row in rows if row["exact_match"])
        wrong = next(row for row in rows if not row["exact_match"])
        self.assertIn("that the evaluation scored right:\n", self.output)
        self.assertIn("asked:     %s\n" % right["request"], self.output)
        self.assertIn("expected:  %s\n" % right["reference"], self.output)
        shown = ("scored wrong (%d of 200 are), as the evaluation answered it:\n"
                 "asked:     %s\nanswered:  %s\nexpected:  %s\nwrong:     "
                 % (200 - sum(row["exact_match"] for row in rows), wrong["request"],
                    wrong["prediction"], wrong["reference"]))
        self.assertIn(shown, self.output)

    def test_the_app_answers_through_the_openai_client(self):
        apps = [a for a in self.api("/v1/apps")["items"] if a["name"] == "sovai-commands"]
        self.assertEqual(len(apps), 1, apps)
        app = apps[0]
        self.assertEqual(app["state"], "RUNNING", app)
        with open(os.path.join(self.work, "answer-openai.txt")) as f:
            lines = f.read().splitlines()
        self.assertTrue(lines[0].strip(), lines)  # the streamed answer
        usage = json.loads(lines[-1].removeprefix("usage: "))
        self.assertGreater(usage["completion_tokens"], 0)
        self.assertGreater(usage["prompt_tokens"], 0)
        # And once more now, with the app token the demo created: the endpoint is still live.
        ask = subprocess.run(["node", os.path.join(REPO, "tools", "demo", "ask.mjs"),
                              self.info["app_url"], self.info["app_token"], "sovai-commands",
                              "please run training: the data in poems, one H100"],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        self.assertEqual(ask.returncode, 0, ask.stderr)
        # A wrong token is refused by the gateway, not answered.
        refused = subprocess.run(["node", os.path.join(REPO, "tools", "demo", "ask.mjs"),
                                  self.info["app_url"], "not-a-token", "sovai-commands", "hi"],
                                 cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        self.assertEqual(refused.returncode, 1)
        self.assertIn("HTTP 401", refused.stderr.decode())

    def test_the_bill_has_a_line_for_the_job(self):
        job = self.finetune_job()
        lines = [line for line in self.api("/v1/billing/usage")["lines"]
                 if line["kind"] == "job" and line["resource"] == job["id"]]
        self.assertTrue(lines, "no bill line for " + job["id"])
        self.assertGreater(sum(line["amount_micro_eur"] for line in lines), 0)
        self.assertEqual(lines[0]["flavor"], "ai1-1-cpu")


@unittest.skipUnless(SOVAI_BINARY and SOVAI_ENGINE, "SOVAI_BINARY and SOVAI_ENGINE are not set")
class DemoInterruptTest(unittest.TestCase):
    def test_ctrl_c_during_the_fine_tune_leaves_nothing_running(self):
        with tempfile.TemporaryDirectory(prefix="sovai-demo-int-") as tmp:
            os.chmod(tmp, 0o711)
            work = os.path.join(tmp, "demo")
            demo = subprocess.Popen(["bash", DEMO], env=demo_env(work, keep_server=False, quick=True),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            seen = b""
            deadline = time.time() + 300
            while b"step 10/40" not in seen and time.time() < deadline:
                chunk = demo.stdout.read1(4096)
                if not chunk:
                    break
                seen += chunk
            self.assertIn(b"step 10/40", seen, seen.decode(errors="replace")[-4000:])
            self.assertTrue(processes_mentioning(work))  # the server and the job's sandbox
            # Ctrl-C in a terminal signals the whole foreground process group.
            os.killpg(demo.pid, signal.SIGINT)
            rest, _ = demo.communicate(timeout=120)
            seen += rest
            self.assertEqual(demo.returncode, 130, seen.decode(errors="replace")[-4000:])
            self.assertIn(b"demo: interrupted", seen)
            self.assertEqual([], wait_until_gone(work, 30))


if __name__ == "__main__":
    unittest.main()
