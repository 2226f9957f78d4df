"""Two `sovai server` processes on one PostgreSQL database (docs/state.md), started here with a
throwaway PostgreSQL: both answer the API; only the leader runs jobs, each exactly once, whichever
server they were submitted to; a stop through the other server reaches the job; the other
server's log reads come from the leader; when the leader dies, the other one takes over."""
import concurrent.futures
import os
import shutil
import time
import unittest

from postgres_server import PostgresServer
from sovai_fixture import SovaiServer, TERMINAL, shell


class TwoServersTest(unittest.TestCase):
    def setUp(self):
        self.pg = PostgresServer().start()
        self.addCleanup(self.pg.stop)
        args = ["--state", self.pg.url]
        self.a = SovaiServer(extra_args=args)
        # The sandbox's user traverses down to the jobs' directories.
        os.chmod(self.a.tmp, 0o711)
        self.a.start()
        self.addCleanup(self.a.cleanup)
        # Servers of one database share the bootstrap admin (docs/state.md).
        self.b = SovaiServer(extra_args=args)
        os.chmod(self.b.tmp, 0o711)
        os.makedirs(self.b.data_dir)
        shutil.copy(os.path.join(self.a.data_dir, "admin.json"), self.b.data_dir)
        self.b.start()
        self.addCleanup(self.b.cleanup)

    def submit(self, server, spec):
        status, job = server.api("POST", "/v1/jobs", spec)
        self.assertEqual(status, 201, job)
        return job["id"]

    def wait(self, server, job_id, states=TERMINAL, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, job = server.api("GET", "/v1/jobs/" + job_id)
            self.assertEqual(status, 200, job)
            if job["status"]["state"] in states:
                return job
            time.sleep(0.1)
        self.fail("job %s stayed %s" % (job_id, job["status"]))

    def log(self, server, job_id):
        status, text = server.api("GET", "/v1/jobs/%s/logs?offset=0" % job_id, raw=True)
        self.assertEqual(status, 200, text)
        return text

    def test_both_answer_and_only_the_leader_runs_each_job_once(self):
        # Jobs submitted to both servers at once: each runs once, on the leader (A).
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(self.submit, (self.a, self.b)[i % 2],
                                   shell("echo job-%d-ran" % i)) for i in range(12)]
            ids = [f.result() for f in futures]
        sequences = set()
        for i, job_id in enumerate(ids):
            job = self.wait(self.b, job_id)
            self.assertEqual(job["status"]["state"], "DONE", job["status"])
            runs = [t for t in job["status"]["history"] if t["state"] == "RUNNING"]
            self.assertEqual(len(runs), 1, job["status"]["history"])
            # The follower's log read comes from the leader, and shows one run.
            self.assertEqual(self.log(self.b, job_id).count("stdout job-%d-ran" % i), 1,
                             (self.log(self.b, job_id), self.log(self.a, job_id)))
            self.assertEqual(self.log(self.a, job_id).count("stdout job-%d-ran" % i), 1)
            _, same = self.a.api("GET", "/v1/jobs/" + job_id)
            self.assertEqual(same["status"]["state"], "DONE")
            sequences.add(job_id)
        self.assertEqual(len(sequences), 12)
        # Only A's data directory holds job files.
        self.assertTrue(os.path.isdir(os.path.join(self.a.data_dir, "jobs", ids[0])))
        self.assertFalse(os.path.exists(os.path.join(self.b.data_dir, "jobs", ids[0])))

    def test_a_stop_through_the_follower_reaches_the_job(self):
        job_id = self.submit(self.a, shell("echo up; sleep 120"))
        self.wait(self.a, job_id, {"RUNNING"})
        status, _ = self.b.api("POST", "/v1/jobs/%s/stop" % job_id)
        self.assertEqual(status, 202)
        job = self.wait(self.b, job_id, timeout=30)
        self.assertEqual(job["status"]["state"], "INTERRUPTED")
        self.assertEqual(job["status"]["reason"], "stopped by a user")

    def test_the_follower_takes_over_when_the_leader_dies(self):
        first = self.wait(self.b, self.submit(self.b, shell("echo before")))
        self.assertEqual(first["status"]["state"], "DONE")
        self.a.kill()
        job_id = self.submit(self.b, shell("echo after the takeover"))
        job = self.wait(self.b, job_id, timeout=60)
        self.assertEqual(job["status"]["state"], "DONE", job["status"])
        self.assertIn("stdout after the takeover", self.log(self.b, job_id))
        self.assertTrue(os.path.isdir(os.path.join(self.b.data_dir, "jobs", job_id)))


if __name__ == "__main__":
    unittest.main()
