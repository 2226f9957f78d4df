"""Data residency end to end (docs/sovereignty.md) with two real servers: B of region
EU-CENTRAL-2 holds a bucket; A of region EU-WEST-LOCAL reaches B through `--regions`. A job on A
that mounts B's bucket is refused with the residency rule until A's project allows EU-CENTRAL-2
(`sovai project update`, the real CLI); then the same job reads the file from B and writes it into
a bucket of A's own region."""
import json
import os
import subprocess
import unittest

from sovai_fixture import SOVAI_BINARY, SovaiServer, SeveralServers, cli_env

CONTENT = b"kept in EU-CENTRAL-2\n"


def copy_job(source_volume):
    return {"image": "sovai/shell", "flavor": "ai1-1-cpu", "units": 1, "network": "none",
            "command": ["sh", "-c", "cat /workspace/in/doc.txt > /workspace/out/copy.txt"],
            "volumes": [source_volume, "results@EU-WEST-LOCAL/res:/workspace/out:rw"]}


class ResidencyTest(SeveralServers, unittest.TestCase):
    def setUp(self):
        self.servers = []
        self.central = self.start(SovaiServer(extra_args=["--region", "EU-CENTRAL-2"]))
        regions = os.path.join(self.central.tmp, "regions.json")
        with open(regions, "w") as f:
            json.dump({"regions": [{
                "name": "EU-CENTRAL-2", "s3_endpoint": self.central.s3_url, "jurisdiction": "EU",
                "credentials_file": os.path.join(self.central.data_dir, "admin.json")}]}, f)
        os.chmod(regions, 0o600)
        self.west = self.start(SovaiServer(
            extra_args=["--region", "EU-WEST-LOCAL", "--regions", regions]))
        self.require_jobs(self.west)

    def s3(self, server, region, access_key=None, secret_key=None):
        return server.boto3_client(access_key, secret_key, region=region)

    def sovai(self, *args, token):
        """The real CLI against A, logged in by environment only."""
        env = cli_env(self.west, token, home=self.west.tmp)
        return subprocess.run([SOVAI_BINARY] + list(args), env=env, capture_output=True,
                              text=True, timeout=60)

    def test_a_job_mounts_another_regions_bucket_only_once_the_project_allows_it(self):
        # B: a bucket of region EU-CENTRAL-2 with a file.
        central_s3 = self.s3(self.central, "eu-central-2")
        central_s3.create_bucket(Bucket="central",
                                 CreateBucketConfiguration={"LocationConstraint": "eu-central-2"})
        central_s3.put_object(Bucket="central", Key="ds/doc.txt", Body=CONTENT)
        self.assertEqual(central_s3.get_bucket_location(Bucket="central")["LocationConstraint"],
                         "eu-central-2")

        # A: project nlp, its admin alice, her token and S3 key, a results bucket of A's region.
        _, project = self.west.api("POST", "/v1/projects", {"name": "nlp"})
        _, alice = self.west.api("POST", "/v1/users", {"name": "alice"})
        _, bob = self.west.api("POST", "/v1/users", {"name": "bob"})
        for user, role in ((alice, "admin"), (bob, "operator")):
            status, member = self.west.api(
                "POST", "/v1/projects/%s/members/%s" % (project["id"], user["id"]), {"role": role})
            self.assertIn(status, (200, 201), member)
        tokens = {}
        for user, role in ((alice, "admin"), (bob, "operator")):
            status, created = self.west.api("POST", "/v1/tokens", {
                "user": user["id"], "project": project["id"], "role": role})
            self.assertEqual(status, 201, created)
            tokens[user["name"]] = created["token"]
        alice_token, bob_token = tokens["alice"], tokens["bob"]
        status, key = self.west.api("POST", "/v1/users/%s/s3-keys" % alice["id"], {},
                                    token=alice_token)
        self.assertEqual(status, 201, key)
        west_s3 = self.s3(self.west, "eu-west-local", key["access_key_id"],
                          key["secret_access_key"])
        west_s3.create_bucket(Bucket="results",
                              CreateBucketConfiguration={"LocationConstraint": "eu-west-local"})

        source = "central@EU-CENTRAL-2/ds:/workspace/in:ro"
        # Refused: the rule, the project and the command that would allow it; dry runs alike.
        for path in ("/v1/jobs", "/v1/jobs?dry_run=true"):
            status, problem = self.west.api("POST", path, copy_job(source), token=bob_token)
            self.assertEqual(status, 403, problem)
            self.assertEqual(problem["type"], "urn:sovai:problem:permission-denied")
            self.assertEqual(problem["errors"][0]["field"], "volumes[0]")
            self.assertIn("volume 'central@EU-CENTRAL-2/ds': data residency: project 'nlp' may "
                          "mount only buckets of region EU-WEST-LOCAL; a project admin can allow "
                          "EU-CENTRAL-2 with `sovai project update nlp --allow-region "
                          "EU-CENTRAL-2`", problem["detail"])
        # A region A does not know is another rule.
        status, problem = self.west.api(
            "POST", "/v1/jobs", copy_job("central@US-EAST-1/ds:/workspace/in:ro"), token=bob_token)
        self.assertEqual(status, 400, problem)
        self.assertIn("region 'US-EAST-1' is not one this server knows (docs/sovereignty.md); "
                      "known: EU-WEST-LOCAL, EU-CENTRAL-2", problem["detail"])
        status, jobs = self.west.api("GET", "/v1/jobs", token=bob_token)
        self.assertEqual(jobs["items"], [])

        # Only the project's admins may allow a region.
        refused = self.sovai("project", "update", "nlp", "--allow-region", "EU-CENTRAL-2",
                             token=bob_token)
        self.assertEqual(refused.returncode, 1, refused)
        self.assertIn("needs an admin token of that project", refused.stderr)
        allowed = self.sovai("project", "update", "nlp", "--allow-region", "eu-central-2",
                             token=alice_token)
        self.assertEqual(allowed.returncode, 0, allowed)
        self.assertEqual(allowed.stdout,
                         "Project nlp may mount buckets of this server's region and "
                         "EU-CENTRAL-2.\n")
        status, shown = self.west.api("GET", "/v1/projects/" + project["id"], token=bob_token)
        self.assertEqual(shown["allowed_regions"], ["EU-CENTRAL-2"])

        # The same job now reads B's file through B's S3 endpoint and writes into A's bucket.
        status, job = self.west.api("POST", "/v1/jobs", copy_job(source), token=bob_token)
        self.assertEqual(status, 201, job)
        done = self.wait_job(job["id"], token=bob_token, timeout_s=120, server=self.west)
        status, log = self.west.api("GET", "/v1/jobs/%s/logs" % job["id"], token=bob_token,
                                    raw=True)
        self.assertEqual(done["status"]["state"], "DONE", "%s\n%s" % (done, log))
        self.assertIn("sync down central@EU-CENTRAL-2/ds", log)
        copied = west_s3.get_object(Bucket="results", Key="res/copy.txt")["Body"].read()
        self.assertEqual(copied, CONTENT)
        # Nothing of the job was written to B.
        listed = central_s3.list_objects_v2(Bucket="central")
        self.assertEqual([o["Key"] for o in listed.get("Contents", [])], ["ds/doc.txt"])

        # A's audit log names each handing-out of B's credentials, refusals included.
        status, audit = self.west.api("GET", "/v1/audit?action=REGION&limit=500")
        self.assertEqual(status, 200, audit)
        results = [(e["project"], e["resource"], e["result"]) for e in audit["items"]]
        self.assertIn((project["id"], "EU-CENTRAL-2", 200), results)
        # B's audit log records A's reads (as B's admin key, the one of the regions file).
        status, central_audit = self.central.api("GET", "/v1/audit?action=S3%20GET&limit=500")
        self.assertEqual(status, 200, central_audit)
        self.assertTrue(any(e["resource"] == "/central/ds/doc.txt"
                            and e["actor_token"] == self.central.access_key
                            for e in central_audit["items"]), central_audit["items"][-5:])

        # Allowed no more: refused again.
        cleared = self.sovai("project", "update", "nlp", "--no-other-regions", token=alice_token)
        self.assertEqual(cleared.returncode, 0, cleared)
        status, problem = self.west.api("POST", "/v1/jobs", copy_job(source), token=bob_token)
        self.assertEqual(status, 403, problem)

class RegionsFileTest(unittest.TestCase):
    def test_a_bad_regions_file_stops_the_server_naming_the_field(self):
        server = SovaiServer(extra_args=["--regions", "bad-regions.json"])
        try:
            bad = os.path.join(server.tmp, "bad-regions.json")
            with open(bad, "w") as f:
                json.dump({"regions": [{"name": "EU-CENTRAL-2", "s3_endpoint": "ftp://x",
                                        "jurisdiction": "EU", "credentials_file": "admin.json"}]},
                          f)
            server.extra_args = ["--regions", bad]
            with self.assertRaises(RuntimeError) as raised:
                server.start()
            self.assertIn("regions[0].s3_endpoint: must be http://HOST[:PORT]",
                          str(raised.exception))
        finally:
            server.cleanup()

if __name__ == "__main__":
    unittest.main()
