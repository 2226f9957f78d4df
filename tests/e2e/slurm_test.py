"""The Slurm executor end to end: a real one-node Slurm cluster (munged, slurmctld, slurmd from
Debian's slurm-wlm, started here) and a real `sovai server --executor slurm`. Jobs go through the
REST API exactly as on the local executor; the test checks states, Slurm reasons, exit codes,
stop, timeout, queueing on a full node, a two-task job's RANK/WORLD_SIZE, live logs, volumes in
and out, and a server restart while a Slurm job runs."""
import json
import os
import shutil
import subprocess
import urllib.request
import time
import unittest

from slurm_cluster import SlurmCluster, free_port
from sovai_fixture import SovaiServer, TERMINAL, shell


def start_platform(server_args=(), **cluster_args):
    """A started Slurm cluster and a `sovai server --executor slurm` on it (the caller stops
    the server, then the cluster)."""
    cluster = SlurmCluster(**cluster_args).start()
    try:
        server = SovaiServer(extra_args=["--executor", "slurm", "--slurm-config",
                                         cluster.config_file(), *server_args]).start()
    except Exception:
        cluster.stop()
        raise
    return cluster, server


def slurm_platform(testcase, server_args=(), **cluster_args):
    """start_platform, stopped when `testcase` ends."""
    cluster, server = start_platform(server_args, **cluster_args)
    testcase.addCleanup(cluster.stop)
    testcase.addCleanup(server.cleanup)
    return cluster, server


def wait_job(server, job_id, states=TERMINAL, timeout=90):
    """The job once its state is one of `states`, or as it is after `timeout` seconds."""
    deadline = time.time() + timeout
    while True:
        _, job = server.api("GET", "/v1/jobs/" + job_id)
        if job["status"]["state"] in states or time.time() > deadline:
            return job
        time.sleep(0.2)


def job_log(server, job_id):
    _, text = server.api("GET", "/v1/jobs/%s/logs?offset=0" % job_id, raw=True)
    return text


class SlurmExecutorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster, cls.server = start_platform(cpus=2)
        cls.s3 = cls.server.boto3_client()
        cls.s3.create_bucket(Bucket="data")

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()
        cls.cluster.stop()

    def submit(self, spec):
        status, job = self.server.api("POST", "/v1/jobs", spec)
        self.assertEqual(status, 201, job)
        return job["id"]

    def get(self, job_id):
        status, job = self.server.api("GET", "/v1/jobs/" + job_id)
        self.assertEqual(status, 200, job)
        return job

    def wait(self, job_id, states=TERMINAL, timeout=90):
        job = wait_job(self.server, job_id, states, timeout)
        if job["status"]["state"] not in states:
            self.fail("job %s stayed %s; log:\n%s\n%s" % (
                job_id, job["status"], self.log(job_id), self.cluster.logs()))
        return job

    def log(self, job_id):
        status, text = self.server.api("GET", "/v1/jobs/%s/logs?offset=0" % job_id, raw=True)
        self.assertEqual(status, 200, text)
        return text

    def history(self, job):
        return [t["state"] for t in job["status"]["history"]]

    def test_volumes_in_and_out_logs_and_states(self):
        self.s3.put_object(Bucket="data", Key="in/words.txt", Body=b"alpha\nbeta\n")
        job_id = self.submit(shell(
            "wc -l < /mnt/in/words.txt > /mnt/out/count.txt; echo counted; echo warn >&2",
            ["data@EU-WEST-LOCAL/in:/mnt/in:ro", "data@EU-WEST-LOCAL/out:/mnt/out:rw"]))
        job = self.wait(job_id)
        log = self.log(job_id)
        self.assertEqual(job["status"]["state"], "DONE", log)
        self.assertEqual(job["status"]["exit_code"], 0)
        self.assertTrue(job["status"]["slurm_job_id"].isdigit(), job["status"])
        self.assertEqual(job["status"]["node"], self.cluster.host)
        self.assertEqual(self.history(job),
                         ["QUEUED", "INITIALIZING", "PENDING", "RUNNING", "FINALIZING", "DONE"])
        body = self.s3.get_object(Bucket="data", Key="out/count.txt")["Body"].read()
        self.assertEqual(body.strip(), b"2")
        self.assertIn(" stdout counted", log)
        self.assertIn(" stderr warn", log)
        self.assertIn("submitted to Slurm as job " + job["status"]["slurm_job_id"], log)
        self.assertIn("sync down data@EU-WEST-LOCAL/in", log)
        # The agent's reports are consumed: nothing is left in the project bucket but the log.
        bucket = "sovai-" + job["project"].split("_", 1)[1].lower()
        keys = [o["Key"] for o in self.s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
        self.assertEqual([k for k in keys if k.startswith("jobs/%s/agent/" % job_id)], [])
        self.assertIn("jobs/%s/log.txt" % job_id, keys)

    def test_failure_keeps_the_exit_code(self):
        job = self.wait(self.submit(shell("echo failing; exit 7")))
        self.assertEqual(job["status"]["state"], "FAILED", self.log(job["id"]))
        self.assertEqual(job["status"]["exit_code"], 7)
        self.assertEqual(job["status"]["reason"], "exited with code 7")

    def test_the_restart_policy_submits_a_new_slurm_job_per_try(self):
        job = self.wait(self.submit(shell("echo try-$SOVAI_JOB_ID; exit 3",
                                          restart={"policy": "on-failure", "max_retries": 1})))
        log = self.log(job["id"])
        self.assertEqual(job["status"]["state"], "FAILED", log)
        self.assertEqual(job["status"]["retries"], 1)
        # Both tries' output reached the log: each Slurm job numbers its log chunks anew.
        self.assertEqual(log.count(" stdout try-" + job["id"]), 2, log)
        self.assertEqual(log.count("submitted to Slurm as job"), 2, log)

    def test_stop_terminates_and_still_syncs_outputs(self):
        job_id = self.submit(shell(
            "trap 'echo stopped > /mnt/out/stop.txt; exit 143' TERM; echo started; "
            "while true; do sleep 0.1; done",
            ["data@EU-WEST-LOCAL/stop:/mnt/out:rw"]))
        self.wait(job_id, {"RUNNING"})
        deadline = time.time() + 30
        while "started" not in self.log(job_id) and time.time() < deadline:
            time.sleep(0.1)
        status, _ = self.server.api("POST", "/v1/jobs/%s/stop" % job_id)
        self.assertEqual(status, 202)
        job = self.wait(job_id)
        self.assertEqual(job["status"]["state"], "INTERRUPTED", self.log(job_id))
        self.assertEqual(job["status"]["reason"], "stopped by a user")
        keys = [o["Key"] for o in self.s3.list_objects_v2(Bucket="data", Prefix="stop/").get(
            "Contents", [])]
        self.assertEqual(keys, ["stop/stop.txt"], self.log(job_id))
        body = self.s3.get_object(Bucket="data", Key="stop/stop.txt")["Body"].read()
        self.assertEqual(body, b"stopped\n")
        self.assertEqual([j for j in self.cluster.squeue() if j[0] == job["status"]["slurm_job_id"]],
                         [])

    def test_timeout(self):
        job = self.wait(self.submit(shell("sleep 120", timeout_s=2)))
        self.assertEqual(job["status"]["state"], "TIMEOUT", self.log(job["id"]))
        self.assertIn("timeout_s 2", job["status"]["reason"])

    def test_queued_while_the_node_is_full(self):
        # Two CPUs fill the node; the next job waits in Slurm's queue with Slurm's reason.
        blocker = self.submit(shell("sleep 120", units=2))
        self.wait(blocker, {"RUNNING"})
        waiting = self.submit(shell("echo finally"))
        deadline = time.time() + 20
        while time.time() < deadline:
            job = self.get(waiting)
            if "Resources" in job["status"]["reason"]:
                break
            time.sleep(0.2)
        self.assertEqual(job["status"]["state"], "QUEUED", job["status"])
        self.assertIn("Slurm: PENDING (Resources)", job["status"]["reason"])
        self.server.api("POST", "/v1/jobs/%s/stop" % blocker)
        job = self.wait(waiting)
        self.assertEqual(job["status"]["state"], "DONE", self.log(waiting))
        self.assertIn(" stdout finally", self.log(waiting))

    def test_two_tasks_see_rank_and_world_size(self):
        job_id = self.submit(shell(
            "echo task rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT",
            units=2, tasks_per_node=2))
        job = self.wait(job_id)
        log = self.log(job_id)
        self.assertEqual(job["status"]["state"], "DONE", log)
        lines = sorted(l.split(" stdout ", 1)[1] for l in log.splitlines() if " stdout task" in l)
        self.assertEqual(len(lines), 2, log)
        self.assertTrue(lines[0].startswith("task rank=0 local=0 world=2 master="), lines)
        self.assertTrue(lines[1].startswith("task rank=1 local=1 world=2 master="), lines)
        self.assertEqual(lines[0].split("master=")[1], lines[1].split("master=")[1])

    def test_logs_arrive_while_the_job_runs(self):
        job_id = self.submit(shell("echo first line; sleep 30; echo last line"))
        deadline = time.time() + 40
        while time.time() < deadline:
            if " stdout first line" in self.log(job_id):
                break
            time.sleep(0.2)
        self.assertEqual(self.get(job_id)["status"]["state"], "RUNNING")
        self.assertIn(" stdout first line", self.log(job_id))
        self.assertNotIn("last line", self.log(job_id))
        self.server.api("POST", "/v1/jobs/%s/stop" % job_id)
        self.wait(job_id)

    def test_the_cli_runs_and_follows_a_slurm_job(self):
        # The same command as on the local executor: `sovai job run --follow` streams the log
        # and exits with the job's exit code.
        self.s3.put_object(Bucket="data", Key="cli/in.txt", Body=b"from the bucket\n")
        env = dict(os.environ, SOVAI_URL=self.server.api_url, SOVAI_TOKEN=self.server.admin_token())
        run = subprocess.run(
            [os.environ.get("SOVAI_BINARY", "build/src/cli/sovai"), "job", "run", "--follow",
             "--volume", "data@EU-WEST-LOCAL/cli:/mnt/in:ro", "sovai/shell", "--",
             "sh", "-c", "cat /mnt/in/in.txt; exit 4"],
            env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 4, run.stdout + run.stderr)
        self.assertIn("from the bucket", run.stdout)

    def test_bad_specs_are_refused_clearly(self):
        status, body = self.server.api("POST", "/v1/jobs", dict(shell("true"),
                                                                image="oci:data@EU-WEST-LOCAL/x.tar"))
        self.assertEqual(status, 409, body)
        self.assertIn("Slurm executor", body["detail"])
        # More than the partition can ever give: Slurm would keep it pending for ever.
        job = self.wait(self.submit(shell("true", units=12)))
        self.assertEqual(job["status"]["state"], "ERROR")
        self.assertIn("Slurm will never start", job["status"]["reason"])
        self.assertEqual([j for j in self.cluster.squeue() if j[0] == job["status"]["slurm_job_id"]],
                         [])


class SlurmServicesTest(unittest.TestCase):
    """An app's replica and a notebook are Slurm jobs on a node; the gateway reaches them there."""

    @classmethod
    def setUpClass(cls):
        cls.cluster, cls.server = start_platform(cpus=2)

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()
        cls.cluster.stop()

    def wait_for(self, path, field, states, timeout=180):
        deadline = time.time() + timeout
        while time.time() < deadline:
            _, body = self.server.api("GET", path)
            if body[field] in states:
                return body
            time.sleep(0.5)
        return body

    def test_an_app_replica_runs_on_a_node_and_answers_through_the_gateway(self):
        s3 = self.server.boto3_client()
        s3.create_bucket(Bucket="models")
        model_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                 "models", "sovai-tiny-llama")
        for name in os.listdir(model_dir):
            s3.upload_file(os.path.join(model_dir, name), "models", "tiny/" + name)
        status, app = self.server.api("POST", "/v1/apps", {
            "name": "tiny", "model": "models@EU-WEST-LOCAL/tiny", "flavor": "ai1-1-cpu",
            "unsecure_http": True})
        self.assertEqual(status, 201, app)
        app = self.wait_for("/v1/apps/tiny", "state", ("RUNNING", "FAILED"))
        self.assertEqual(app["state"], "RUNNING", (app, self.server.server_log()))
        replica = app["status"]["replicas"][0]
        self.assertEqual(replica["node"], self.cluster.host)
        status, job = self.server.api("GET", "/v1/jobs/" + replica["job"])
        self.assertTrue(job["status"]["slurm_job_id"].isdigit(), job["status"])
        self.assertEqual(job["status"]["node"], self.cluster.host)
        req = urllib.request.Request(
            app["url"] + "v1/chat/completions", method="POST",
            data=json.dumps({"model": "tiny", "max_tokens": 4,
                             "messages": [{"role": "user", "content": "hi"}]}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            answer = json.load(r)
        self.assertEqual(answer["object"], "chat.completion")
        self.assertGreater(answer["usage"]["completion_tokens"], 0)
        self.server.api("DELETE", "/v1/apps/tiny")

    def test_a_notebook_runs_on_a_node_and_answers_through_the_gateway(self):
        if shutil.which("jupyter-notebook") is None:
            self.skipTest("jupyter-notebook is not installed")
        status, nb = self.server.api("POST", "/v1/notebooks", {"flavor": "ai1-1-cpu"})
        self.assertEqual(status, 201, nb)
        nb = self.wait_for("/v1/notebooks/" + nb["id"], "state", ("RUNNING", "FAILED", "ERROR"))
        self.assertEqual(nb["state"], "RUNNING", (nb, self.server.server_log()))
        req = urllib.request.Request(
            self.server.api_url + "/notebooks/%s/api/status" % nb["id"],
            headers={"Authorization": "Bearer " + self.server.admin_token()})
        with urllib.request.urlopen(req, timeout=60) as r:
            self.assertIn("last_activity", json.load(r))
        status, job = self.server.api("GET", "/v1/jobs/" + nb["job"])
        self.assertTrue(job["status"]["slurm_job_id"].isdigit(), job["status"])
        self.assertEqual(job["status"]["node"], self.cluster.host)
        self.server.api("POST", "/v1/notebooks/%s/stop" % nb["id"])


class SlurmTwoNodesTest(unittest.TestCase):
    """A job over two nodes: its volumes are staged on each node, one task per node gets its
    RANK, NODE_RANK and the first node as MASTER_ADDR, and the outputs of the first node come
    back; a torch.distributed script rendezvous across the nodes with that environment."""

    def test_a_two_node_job(self):
        cluster, server = slurm_platform(self, cpus=1, nodes=2)
        s3 = server.boto3_client()
        s3.create_bucket(Bucket="data")
        s3.put_object(Bucket="data", Key="in/shard.txt", Body=b"shared input\n")
        status, job = server.api("POST", "/v1/jobs", shell(
            "echo task rank=$RANK node=$NODE_RANK world=$WORLD_SIZE master=$MASTER_ADDR "
            "input=$(cat /mnt/in/shard.txt); echo $RANK > /mnt/out/rank-$RANK.txt",
            ["data@EU-WEST-LOCAL/in:/mnt/in:ro", "data@EU-WEST-LOCAL/out:/mnt/out:rw"],
            units=2, nodes=2))
        self.assertEqual(status, 201, job)
        job = wait_job(server, job["id"], timeout=120)
        log = job_log(server, job["id"])
        self.assertEqual(job["status"]["state"], "DONE", log)
        lines = sorted(l.split(" stdout ", 1)[1] for l in log.splitlines() if " stdout task" in l)
        self.assertEqual(len(lines), 2, log)
        master = job["status"]["node"]
        self.assertIn(master, cluster.node_names)
        for rank, line in enumerate(lines):
            self.assertEqual(line, "task rank=%d node=%d world=2 master=%s input=shared input" % (
                rank, rank, master))
        # Staged on each node; the first node's outputs are the ones synced back.
        self.assertIn("2 node(s)", log)
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="data", Prefix="out/").get(
            "Contents", [])]
        self.assertEqual(keys, ["out/rank-0.txt"], log)

        # A torchrun-style script: torch.distributed rendezvous over env:// across the nodes.
        if subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed"],
                          capture_output=True).returncode != 0:
            return  # python3-torch is not installed: the environment above is what it reads
        script = ("import torch, torch.distributed as dist\n"
                  "dist.init_process_group('gloo', init_method='env://')\n"
                  "t = torch.tensor([float(dist.get_rank() + 1)])\n"
                  "dist.all_reduce(t)\n"
                  "print('allreduce rank', dist.get_rank(), 'of', dist.get_world_size(), '=',"
                  " t.item(), flush=True)\n")
        status, job = server.api("POST", "/v1/jobs", {
            "image": "sovai/shell", "flavor": "ai1-1-cpu", "units": 2, "nodes": 2,
            "command": ["/usr/bin/python3", "-c", script]})
        self.assertEqual(status, 201, job)
        job = wait_job(server, job["id"], timeout=180)
        log = job_log(server, job["id"])
        self.assertEqual(job["status"]["state"], "DONE", log)
        self.assertIn("stdout allreduce rank 0 of 2 = 3.0", log)
        self.assertIn("stdout allreduce rank 1 of 2 = 3.0", log)


class SlurmNodeFailureTest(unittest.TestCase):
    """A node that dies under a job: Slurm declares NODE_FAIL, the job ends ERROR saying so."""

    def test_a_node_failure_ends_the_job_in_error(self):
        cluster, server = slurm_platform(self, cpus=2, slurmd_timeout_s=3)
        status, job = server.api("POST", "/v1/jobs", shell("echo up; sleep 300"))
        self.assertEqual(status, 201, job)
        job = wait_job(server, job["id"], {"RUNNING"}, timeout=60)
        self.assertEqual(job["status"]["state"], "RUNNING")
        cluster.kill_slurmd()
        job = wait_job(server, job["id"], timeout=120)
        self.assertEqual(job["status"]["state"], "ERROR", (job["status"], cluster.logs()))
        self.assertIn("NODE_FAIL", job["status"]["reason"])
        self.assertIn("a node of the allocation failed", job["status"]["reason"])


class SlurmRestartTest(unittest.TestCase):
    """A Slurm job outlives the server: a restarted server follows it to its end."""

    def test_server_restart_follows_the_running_slurm_job(self):
        # The nodes reach the platform's S3 at a fixed address, as in any deployment: the
        # restarted server listens where the first one did.
        cluster, server = slurm_platform(self, ["--listen-s3", "127.0.0.1:%d" % free_port()])
        s3 = server.boto3_client()
        s3.create_bucket(Bucket="data")
        status, job = server.api("POST", "/v1/jobs", shell(
            "echo before; sleep 4; echo after > /mnt/out/after.txt; echo after",
            ["data@EU-WEST-LOCAL/out:/mnt/out:rw"]))
        self.assertEqual(status, 201, job)
        job_id = job["id"]
        job = wait_job(server, job_id, {"RUNNING"}, timeout=30)
        self.assertEqual(job["status"]["state"], "RUNNING")
        server.kill()
        server.start()
        job = wait_job(server, job_id, timeout=60)
        log = job_log(server, job_id)
        self.assertEqual(job["status"]["state"], "DONE", log)
        self.assertIn("following Slurm job", log)
        self.assertIn(" stdout after", log)
        self.assertEqual(s3.get_object(Bucket="data", Key="out/after.txt")["Body"].read(),
                         b"after\n")


if __name__ == "__main__":
    unittest.main()
