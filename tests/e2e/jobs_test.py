"""Jobs end to end: a real `sovai server` (REST + S3 + bwrap sandbox), boto3 for the buckets and
the REST API for the jobs — the brief's shape: dataset in a bucket → job with a ro and a rw
volume → result in the bucket, logs followed live. Plus isolation between projects, the sandbox
against the data directory, bad specs, and SIGKILL of the server with jobs running and queued."""
import hashlib
import io
import json
import os
import subprocess
import tarfile
import time
import unittest

from sovai_fixture import JobsMixin, SovaiServer, create_bucket, shell
from tiny_model import upload_tiny_model


def shell_image_archive():
    """A `docker save` archive of a one-layer image holding /bin/sh and the libraries ldd lists,
    with an Entrypoint, a Cmd, an Env and a file of its own."""
    files = ["/bin/sh"]
    for line in subprocess.run(["ldd", "/bin/sh"], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        files += [t for t in line.split() if t.startswith("/")]
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as t:
        seen = set()
        for path in files:
            real = os.path.realpath(path)
            for target, source in ((path, real),):
                parts = target.strip("/").split("/")
                for i in range(1, len(parts)):
                    d = "/".join(parts[:i])
                    if d not in seen:
                        seen.add(d)
                        info = tarfile.TarInfo(d)
                        info.type, info.mode = tarfile.DIRTYPE, 0o755
                        t.addfile(info)
                name = target.strip("/")
                if name in seen:
                    continue
                seen.add(name)
                with open(source, "rb") as f:
                    data = f.read()
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o755
                t.addfile(info, io.BytesIO(data))
        motd = b"hello from the image\n"
        info = tarfile.TarInfo("etc/motd")
        info.size = len(motd)
        if "etc" not in seen:
            d = tarfile.TarInfo("etc")
            d.type, d.mode = tarfile.DIRTYPE, 0o755
            t.addfile(d)
        t.addfile(info, io.BytesIO(motd))
    layer_bytes = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["GREETING=from-image", "PATH=/bin"], "Entrypoint": ["/bin/sh", "-c"],
                   "Cmd": ["read -r l < /etc/motd; echo \"$l $GREETING\""],
                   "WorkingDir": "/etc"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": ["test:latest"],
                            "Layers": ["layer0/layer.tar"]}]).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as t:
        for name, data in ((config_name, config), ("layer0/layer.tar", layer_bytes),
                           ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return out.getvalue()


class JobsTest(JobsMixin, unittest.TestCase):
    def setUp(self):
        self.server = SovaiServer(workloads=True).start()
        self.s3 = self.server.boto3_client()
        self.require_jobs()

    def tearDown(self):
        self.server.cleanup()

    def test_the_briefs_job_with_ro_and_rw_volumes_and_live_logs(self):
        create_bucket(self.s3, "my-bucket")
        for i in range(3):
            self.s3.put_object(Bucket="my-bucket", Key="dataset/part-%d.txt" % i,
                               Body=("line\n" * (i + 1)).encode())
        job = self.submit_job(shell(
            "cat /workspace/data/*.txt | wc -l > /workspace/output/lines.txt; "
            "for i in 1 2 3; do echo tick $i; sleep 0.2; done; echo warn >&2",
            ["my-bucket@EU-WEST-LOCAL/dataset:/workspace/data:ro",
             "my-bucket@EU-WEST-LOCAL/output:/workspace/output:rw"]))
        # Follow the log live: the response ends when the job has ended.
        status, log = self.server.api(
            "GET", "/v1/jobs/%s/logs?follow=true" % job["id"], raw=True)
        self.assertEqual(status, 200)
        for text in ("stdout tick 1", "stdout tick 3", "stderr warn", "sovai job DONE"):
            self.assertIn(text, log)
        done = self.wait_job(job["id"])
        self.assertEqual(done["status"]["state"], "DONE", done)
        self.assertEqual(done["status"]["exit_code"], 0)
        states = [t["state"] for t in done["status"]["history"]]
        self.assertEqual(states, ["QUEUED", "INITIALIZING", "PENDING", "RUNNING", "FINALIZING",
                                  "DONE"])
        body = self.s3.get_object(Bucket="my-bucket", Key="output/lines.txt")["Body"].read()
        self.assertEqual(body, b"6\n")
        # Paged reads continue where the last one stopped.
        status, first = self.server.api("GET", "/v1/jobs/%s/logs" % job["id"], raw=True)
        self.assertEqual(status, 200)
        self.assertEqual(first, log)
        # The archived log is in the project's bucket.
        buckets = [b["Name"] for b in self.s3.list_buckets()["Buckets"]]
        archive = [b for b in buckets
                   if b == "sovai-" + done["project"].split("_", 1)[-1].lower()]
        self.assertEqual(len(archive), 1, buckets)
        key = "jobs/%s/log.txt" % job["id"]
        self.assertIn(b"tick 3", self.s3.get_object(Bucket=archive[0], Key=key)["Body"].read())

    def test_sovai_finetune_fine_tunes_a_model_from_a_bucket_into_a_bucket(self):
        engine = os.environ.get("SOVAI_ENGINE")
        if not engine:
            self.skipTest("SOVAI_ENGINE is not set")
        work = os.path.join(self.server.tmp, "model-work")
        os.makedirs(work)
        create_bucket(self.s3, "demo")
        upload_tiny_model(engine, work, self.s3, "demo", "model", "dataset")
        job = self.submit_job({
            "image": "sovai/finetune", "flavor": "ai1-1-cpu", "units": 1,
            "command": ["--model", "/workspace/model", "--data", "/workspace/data",
                        "--output", "/workspace/output", "--max-steps", "6", "--seq-len", "64",
                        "--rank", "4", "--log-interval", "2"],
            "volumes": ["demo@EU-WEST-LOCAL/model:/workspace/model:ro",
                        "demo@EU-WEST-LOCAL/dataset:/workspace/data:ro",
                        "demo@EU-WEST-LOCAL/output:/workspace/output:rw"]})
        done = self.wait_job(job["id"], timeout_s=300)
        status, log = self.server.api("GET", "/v1/jobs/%s/logs" % job["id"], raw=True)
        self.assertEqual(done["status"]["state"], "DONE", log)
        self.assertIn("step 6/6", log)
        keys = {o["Key"] for o in self.s3.list_objects_v2(Bucket="demo", Prefix="output/")["Contents"]}
        for key in ("output/adapter/adapter_config.json", "output/adapter/adapter_model.safetensors",
                    "output/metrics.jsonl"):
            self.assertIn(key, keys)
        # A bad argument fails the job with the engine's usage error in its log.
        bad = self.wait_job(self.submit_job({"image": "sovai/finetune", "flavor": "ai1-1-cpu", "units": 1,
                                     "command": ["--method", "dora"]})["id"])
        self.assertEqual(bad["status"]["state"], "FAILED", bad)
        self.assertEqual(bad["status"]["exit_code"], 2)

    def test_an_oci_image_from_a_bucket_is_the_jobs_root(self):
        create_bucket(self.s3, "images")
        self.s3.put_object(Bucket="images", Key="shell.tar", Body=shell_image_archive())
        image = "oci:images@EU-WEST-LOCAL/shell.tar"
        # The image's Entrypoint + Cmd and Env.
        first = self.wait_job(self.submit_job({"image": image, "flavor": "ai1-1-cpu"})["id"])
        _, log = self.server.api("GET", "/v1/jobs/%s/logs" % first["id"], raw=True)
        self.assertEqual(first["status"]["state"], "DONE", log)
        self.assertIn("stdout hello from the image from-image", log)
        self.assertIn("unpacked 1 layers", log)
        # A command replaces Cmd; the root is the image's, not the host's; the rootfs is reused.
        second = self.wait_job(self.submit_job({
            "image": image, "flavor": "ai1-1-cpu", "env": {"GREETING": "overridden"},
            "command": ["echo $GREETING; pwd; test -e /usr/bin/python3 || echo no-host-root"]})["id"])
        _, log = self.server.api("GET", "/v1/jobs/%s/logs" % second["id"], raw=True)
        self.assertEqual(second["status"]["state"], "DONE", log)
        for text in ("stdout overridden", "stdout /etc", "stdout no-host-root",
                     "cached rootfs reused"):
            self.assertIn(text, log)
        # A missing archive, like a missing bucket, is a 404 naming the image at submission.
        code, problem = self.server.api("POST", "/v1/jobs", {"image": "oci:images@EU-WEST-LOCAL/nope.tar",
                                                              "flavor": "ai1-1-cpu"})
        self.assertEqual(code, 404, problem)
        self.assertEqual(problem["errors"][0]["field"], "image")
        self.assertIn("s3://images/nope.tar does not exist", problem["detail"])
        code, problem = self.server.api("POST", "/v1/jobs", {"image": "oci:nobucket@EU-WEST-LOCAL/x.tar",
                                                              "flavor": "ai1-1-cpu"})
        self.assertEqual(code, 404, problem)
        self.assertEqual(problem["errors"][0]["field"], "image")

    def test_rwd_deletes_push_data_mid_run_and_cache_reuse(self):
        create_bucket(self.s3, "data")
        for key in ("rw/old.txt", "rwd/old.txt"):
            self.s3.put_object(Bucket="data", Key=key, Body=b"old")
        for mode in ("rw", "rwd"):
            job = self.wait_job(self.submit_job(shell("rm /out/old.txt; echo new > /out/new.txt",
                                              ["data@EU-WEST-LOCAL/%s:/out:%s" % (mode, mode)]))["id"])
            self.assertEqual(job["status"]["state"], "DONE")
        keys = {o["Key"] for o in self.s3.list_objects_v2(Bucket="data")["Contents"]}
        self.assertEqual(keys, {"rw/old.txt", "rw/new.txt", "rwd/new.txt"})

        # push-data: a checkpoint reaches the bucket while the job still runs.
        job = self.submit_job(shell("echo step-1 > /ckpt/c.txt; sleep 60",
                                ["data@EU-WEST-LOCAL/ckpt:/ckpt:rw"]))
        self.wait_job(job["id"], state="RUNNING")
        body = None
        for _ in range(50):
            status, _ = self.server.api("POST", "/v1/jobs/%s/push-data" % job["id"])
            self.assertEqual(status, 200)
            try:
                body = self.s3.get_object(Bucket="data", Key="ckpt/c.txt")["Body"].read()
                break
            except Exception:
                time.sleep(0.05)
        self.assertEqual(body, b"step-1\n")
        _, running = self.server.api("GET", "/v1/jobs/" + job["id"])
        self.assertEqual(running["status"]["state"], "RUNNING")
        self.server.api("POST", "/v1/jobs/%s/stop" % job["id"])
        self.wait_job(job["id"])

        # :cache: a rerun takes unchanged objects from the project's cache.
        for i in range(3):
            self.s3.put_object(Bucket="data", Key="ds/%d.bin" % i, Body=os.urandom(50000))
        volume = "data@EU-WEST-LOCAL/ds:/ds:ro:cache"
        first = self.wait_job(self.submit_job(shell("cat /ds/* | wc -c", [volume]))["id"])
        self.s3.put_object(Bucket="data", Key="ds/2.bin", Body=b"changed")
        second = self.wait_job(self.submit_job(shell("cat /ds/* | wc -c", [volume]))["id"])
        self.assertEqual(second["status"]["state"], "DONE")
        _, log = self.server.api("GET", "/v1/jobs/%s/logs" % second["id"], raw=True)
        self.assertIn("2 from cache", log)
        self.assertIn("stdout 100007", log)

    def test_bad_specs_are_clear_4xx(self):
        create_bucket(self.s3, "data")
        cases = [
            ({"image": "sovai/shell", "flavor": "nope", "command": ["true"]}, 404, "flavor"),
            (shell("true", flavor="ai1-1-cpu", units=13), 400, "units"),
            (shell("true", flavor="h100-1-gpu", units=5), 400, "units"),
            (shell("true", ["data:/x"]), 400, "volumes[0]"),
            (shell("true", ["nosuch@EU-WEST-LOCAL:/x"]), 404, "volumes[0]"),
            (shell("true", ["data@US-EAST-1:/x"]), 400, "volumes"),
            ({"image": "docker.io/ubuntu", "flavor": "ai1-1-cpu", "command": ["true"]}, 400,
             "image"),
            ({"image": "sovai/shell", "flavor": "ai1-1-cpu", "command": "true"}, 400, "command"),
        ]
        for spec, status, field in cases:
            code, problem = self.server.api("POST", "/v1/jobs", spec)
            self.assertEqual(code, status, (spec, problem))
            self.assertEqual(problem["errors"][0]["field"], field, problem)
            self.assertTrue(problem["detail"], problem)
            # An entry does not repeat its field's name (the detail may: it is read alone).
            self.assertFalse(problem["errors"][0]["message"].startswith(field + ":"), problem)
        code, problem = self.server.api("POST", "/v1/jobs", shell("true", ["nosuch@EU-WEST-LOCAL:/x"]))
        self.assertEqual(problem["detail"], "volumes[0]: bucket 'nosuch' does not exist in this project")
        self.assertEqual(problem["errors"], [{"field": "volumes[0]",
                                              "message": "bucket 'nosuch' does not exist in this project"}])
        # A GPU flavor on a machine without that GPU: 409 naming what is missing.
        code, problem = self.server.api("POST", "/v1/jobs", shell("true", flavor="h100-1-gpu"))
        self.assertEqual(code, 409, problem)
        self.assertIn("0 GPUs (H100)", problem["detail"])

    def test_projects_are_isolated(self):
        create_bucket(self.s3, "admin-data")
        self.s3.put_object(Bucket="admin-data", Key="secret.txt", Body=b"admin only")
        admin_job = self.submit_job(shell("echo admin"))
        self.wait_job(admin_job["id"])
        # Project B with an operator, bob, his token and his S3 key.
        _, project = self.server.api("POST", "/v1/projects", {"name": "team-b"})
        _, bob = self.server.api("POST", "/v1/users", {"name": "bob"})
        status, _ = self.server.api(
            "POST", "/v1/projects/%s/members/%s" % (project["id"], bob["id"]), {"role": "operator"})
        self.assertIn(status, (200, 201))
        status, token = self.server.api("POST", "/v1/tokens", {
            "user": bob["id"], "project": project["id"], "role": "operator"})
        self.assertEqual(status, 201, token)
        bob_token = token["token"]
        status, key = self.server.api("POST", "/v1/users/%s/s3-keys" % bob["id"], {}, token=bob_token)
        self.assertEqual(status, 201, key)
        bob_s3 = self.server.boto3_client(key["access_key_id"], key["secret_access_key"])

        # Bob sees nothing of the admin's project.
        self.assertEqual(self.server.api("GET", "/v1/jobs/" + admin_job["id"], token=bob_token)[0], 404)
        self.assertEqual(self.server.api("GET", "/v1/jobs/%s/logs" % admin_job["id"],
                                         token=bob_token)[0], 404)
        self.assertEqual(self.server.api("POST", "/v1/jobs/%s/stop" % admin_job["id"],
                                         token=bob_token)[0], 404)
        status, listed = self.server.api("GET", "/v1/jobs", token=bob_token)
        self.assertEqual(listed["items"], [])
        with self.assertRaises(Exception):
            bob_s3.get_object(Bucket="admin-data", Key="secret.txt")
        code, problem = self.server.api(
            "POST", "/v1/jobs", shell("cat /in/secret.txt", ["admin-data@EU-WEST-LOCAL:/in:ro"]),
            token=bob_token)
        self.assertEqual(code, 404, problem)

        # His own bucket works for his jobs; the admin does not see them in its project.
        create_bucket(bob_s3, "bob-data")
        bob_s3.put_object(Bucket="bob-data", Key="in/x.txt", Body=b"bob\n")
        job = self.submit_job(shell("cat /in/x.txt > /out/y.txt",
                                ["bob-data@EU-WEST-LOCAL/in:/in:ro",
                                 "bob-data@EU-WEST-LOCAL/out:/out:rw"]), token=bob_token)
        self.assertEqual(self.wait_job(job["id"], token=bob_token)["status"]["state"], "DONE")
        self.assertEqual(bob_s3.get_object(Bucket="bob-data", Key="out/y.txt")["Body"].read(),
                         b"bob\n")
        self.assertEqual(self.server.api("GET", "/v1/jobs/" + job["id"])[0], 404)

    def test_a_token_with_a_label_selector_sees_only_jobs_with_its_labels(self):
        _, me = self.server.api("GET", "/v1/whoami")
        status, token = self.server.api("POST", "/v1/tokens", {
            "user": me["user"]["id"], "project": me["project"]["id"], "role": "operator",
            "labels": "team=nlp"})
        self.assertEqual(status, 201, token)
        nlp = token["token"]
        unlabeled = self.wait_job(self.submit_job(shell("true"))["id"])
        # Its jobs carry its labels even when the spec does not say so; it cannot contradict them.
        mine = self.wait_job(self.submit_job(shell("true"), token=nlp)["id"], token=nlp)
        self.assertEqual(mine["spec"]["labels"], {"team": "nlp"})
        code, problem = self.server.api("POST", "/v1/jobs", shell("true", labels={"team": "cv"}),
                                        token=nlp)
        self.assertEqual(code, 403, problem)
        self.assertEqual(problem["errors"][0]["field"], "labels.team")
        _, listed = self.server.api("GET", "/v1/jobs", token=nlp)
        self.assertEqual([j["id"] for j in listed["items"]], [mine["id"]])
        self.assertEqual(self.server.api("GET", "/v1/jobs/" + unlabeled["id"], token=nlp)[0], 404)
        # The admin's token has no selector: it sees both; ?labels= filters.
        _, both = self.server.api("GET", "/v1/jobs")
        self.assertEqual(len(both["items"]), 2)
        _, filtered = self.server.api("GET", "/v1/jobs?labels=team=nlp")
        self.assertEqual([j["id"] for j in filtered["items"]], [mine["id"]])

    def test_the_sandbox_sees_neither_the_data_dir_nor_other_jobs(self):
        create_bucket(self.s3, "data")
        data_dir = os.path.abspath(self.server.data_dir)
        first = self.submit_job(shell("echo private > /tmp/mine; sleep 30"))
        self.wait_job(first["id"], state="RUNNING")
        probe = self.submit_job(shell(
            "cat %s/admin.json && echo LEAK; ls %s/jobs && echo LEAK; cat /tmp/mine && echo LEAK;"
            " echo x > /in/new && echo LEAK; id -u" % (data_dir, data_dir),
            ["data@EU-WEST-LOCAL:/in:ro"]))
        done = self.wait_job(probe["id"])
        _, log = self.server.api("GET", "/v1/jobs/%s/logs" % probe["id"], raw=True)
        self.assertNotIn("LEAK", log)
        self.assertNotIn("access_key_id", log)
        self.assertIn("stdout 65534", log)
        self.assertEqual(done["status"]["state"], "DONE", log)
        self.server.api("POST", "/v1/jobs/%s/stop" % first["id"])

    def test_stop_timeout_failure_and_restart_policy(self):
        slow = self.submit_job(shell("sleep 60"))
        self.wait_job(slow["id"], state="RUNNING")
        status, _ = self.server.api("POST", "/v1/jobs/%s/stop" % slow["id"])
        self.assertEqual(status, 202)
        stopped = self.wait_job(slow["id"])
        self.assertEqual(stopped["status"]["state"], "INTERRUPTED")
        self.assertEqual(stopped["status"]["reason"], "stopped by a user")

        timed = self.wait_job(self.submit_job(shell("sleep 60", timeout_s=1))["id"])
        self.assertEqual(timed["status"]["state"], "TIMEOUT")

        failing = self.wait_job(self.submit_job(shell(
            "exit 7", restart={"policy": "on-failure", "max_retries": 2}))["id"])
        self.assertEqual(failing["status"]["state"], "FAILED")
        self.assertEqual(failing["status"]["exit_code"], 7)
        self.assertEqual(failing["status"]["retries"], 2)

        # Deleting: not while running; afterwards it is gone.
        self.assertEqual(self.server.api("DELETE", "/v1/jobs/" + failing["id"])[0], 204)
        self.assertEqual(self.server.api("GET", "/v1/jobs/" + failing["id"])[0], 404)

    def test_a_quota_keeps_a_second_job_queued_until_the_first_ends(self):
        _, me = self.server.api("GET", "/v1/whoami")
        project = me["project"]["id"]
        status, quota = self.server.api("PUT", "/v1/projects/%s/quota" % project,
                                        {"max_cpus": 1, "max_gpus": None})
        self.assertEqual(status, 200, quota)
        self.assertEqual(self.server.api("GET", "/v1/projects/%s/quota" % project)[1], quota)
        code, problem = self.server.api("PUT", "/v1/projects/%s/quota" % project, {"max_cpus": -1})
        self.assertEqual(code, 400, problem)
        first = self.submit_job(shell("sleep 60"))
        self.wait_job(first["id"], state="RUNNING")
        second = self.submit_job(shell("echo second"))
        time.sleep(0.3)
        _, waiting = self.server.api("GET", "/v1/jobs/" + second["id"])
        self.assertEqual(waiting["status"]["state"], "QUEUED")
        self.assertIn("project quota: 1 CPU", waiting["status"]["reason"])
        self.server.api("POST", "/v1/jobs/%s/stop" % first["id"])
        self.assertEqual(self.wait_job(second["id"])["status"]["state"], "DONE")

    def test_sigkill_of_the_server_with_jobs_running_and_queued(self):
        create_bucket(self.s3, "data")
        cpus = os.cpu_count()
        running = self.submit_job(shell("echo partial > /out/p.txt; sleep 61",
                                    ["data@EU-WEST-LOCAL/run:/out:rw"], units=min(cpus, 12)))
        self.wait_job(running["id"], state="RUNNING")
        queued = self.submit_job(shell("echo later", units=min(cpus, 12)))
        self.assertEqual(self.server.api("GET", "/v1/jobs/" + queued["id"])[1]["status"]["state"],
                         "QUEUED")
        time.sleep(0.3)
        self.server.kill()
        self.server.start()
        self.s3 = self.server.boto3_client()  # the ports changed
        recovered = self.wait_job(running["id"])
        self.assertEqual(recovered["status"]["state"], "INTERRUPTED")
        self.assertEqual(recovered["status"]["reason"],
                         "the server restarted while the job was RUNNING")
        self.assertEqual(self.s3.get_object(Bucket="data", Key="run/p.txt")["Body"].read(),
                         b"partial\n")
        later = self.wait_job(queued["id"])
        self.assertEqual(later["status"]["state"], "DONE")
        # No workload of the old process survived it.
        ps = os.popen("ps -eo args").read()
        self.assertNotIn("sleep 61", ps)


if __name__ == "__main__":
    unittest.main()
