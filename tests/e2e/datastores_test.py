"""External S3 datastores end to end (docs/api/datastores.md) with two real servers: B stands for
an external S3 service (Ceph RGW, a cloud's S3) and holds a project, its S3 key and two buckets;
on A, a project registers B under the alias `ext` with the real CLI (`sovai datastore add`, the
secret on stdin), and a job mounts `inputs@ext/data` and `outputs@ext/results`: it reads B's
objects and its outputs land in B's bucket, checked with boto3 against B. The secret is never
listed and never stored in clear in A's control.db; another project of A cannot use the alias;
delete forgets it."""
import json
import os
import stat
import subprocess
import unittest

from sovai_fixture import SOVAI_BINARY, SovaiServer, SeveralServers, cli_env, random_bytes

TEXT = b"kept outside the platform\n"
BLOB = random_bytes(300 * 1024, "datastore-e2e")


def copy_job(*volumes):
    return {"image": "sovai/shell", "flavor": "ai1-1-cpu", "units": 1, "network": "none",
            "command": ["sh", "-c", "cp -R /mnt/in/. /mnt/out/ && "
                                    "tr a-z A-Z < /mnt/in/doc.txt > /mnt/out/upper.txt"],
            "volumes": list(volumes) or ["inputs@ext/data:/mnt/in:ro",
                                         "outputs@ext/results:/mnt/out:rw"]}


class DatastoresTest(SeveralServers, unittest.TestCase):
    def setUp(self):
        self.servers = []
        # B: another Sovai server of its own region, standing for any S3 service.
        self.ext = self.start(SovaiServer(extra_args=["--region", "EU-NORTH-9"]))
        self.platform = self.start(SovaiServer())
        self.require_jobs(self.platform)

    def s3(self, server, region, access_key, secret_key):
        return server.boto3_client(access_key, secret_key, region=region)

    def member(self, server, project_name, user_name, role):
        """A project, a user with `role` in it and the user's token on `server`."""
        status, project = server.api("POST", "/v1/projects", {"name": project_name})
        self.assertEqual(status, 201, project)
        status, user = server.api("POST", "/v1/users", {"name": user_name})
        self.assertEqual(status, 201, user)
        status, m = server.api("POST", "/v1/projects/%s/members/%s" % (project["id"], user["id"]),
                               {"role": role})
        self.assertIn(status, (200, 201), m)
        status, token = server.api("POST", "/v1/tokens", {
            "user": user["id"], "project": project["id"], "role": role})
        self.assertEqual(status, 201, token)
        return project, user, token["token"]

    def sovai(self, *args, token, stdin=None, env=None):
        """The real CLI against A, logged in by environment only."""
        full_env = cli_env(self.platform, token, home=self.platform.tmp)
        full_env.pop("SOVAI_DATASTORE_SECRET_KEY", None)
        full_env.update(env or {})
        return subprocess.run([SOVAI_BINARY] + list(args), env=full_env, input=stdin,
                              capture_output=True, text=True, timeout=60)

    def test_a_job_syncs_from_and_to_an_external_s3_datastore(self):
        # B: a project's S3 key (what its operator hands out), its input objects, an output
        # bucket.
        _, ext_user, ext_token = self.member(self.ext, "shared", "platform-a", "operator")
        status, key = self.ext.api("POST", "/v1/users/%s/s3-keys" % ext_user["id"], {},
                                   token=ext_token)
        self.assertEqual(status, 201, key)
        access_key, secret = key["access_key_id"], key["secret_access_key"]
        ext_s3 = self.s3(self.ext, "eu-north-9", access_key, secret)
        for bucket in ("inputs", "outputs"):
            ext_s3.create_bucket(Bucket=bucket,
                                 CreateBucketConfiguration={"LocationConstraint": "eu-north-9"})
        ext_s3.put_object(Bucket="inputs", Key="data/doc.txt", Body=TEXT)
        ext_s3.put_object(Bucket="inputs", Key="data/sub/blob.bin", Body=BLOB)
        ext_s3.put_object(Bucket="inputs", Key="elsewhere/not-mounted.txt", Body=b"x")

        # A: project nlp (alice operator, carol read) and project cv (dave admin).
        nlp, _, alice = self.member(self.platform, "nlp", "alice", "operator")
        status, carol_user = self.platform.api("POST", "/v1/users", {"name": "carol"})
        self.platform.api("POST", "/v1/projects/%s/members/%s" % (nlp["id"], carol_user["id"]),
                          {"role": "read"})
        _, carol = self.platform.api("POST", "/v1/tokens", {
            "user": carol_user["id"], "project": nlp["id"], "role": "read"})
        carol = carol["token"]
        _, _, dave = self.member(self.platform, "cv", "dave", "admin")

        # Before it is registered, the alias is unknown, and the error lists the datastores.
        status, problem = self.platform.api("POST", "/v1/jobs", copy_job(), token=alice)
        self.assertEqual(status, 400, problem)
        self.assertIn("region 'ext' is not one this server knows (docs/sovereignty.md); known: "
                      "EU-WEST-LOCAL; the project's datastores (docs/api/datastores.md): none",
                      problem["detail"])

        # Register B under `ext`, the secret on stdin (never on the command line).
        add = ["datastore", "add", "s3", "ext", "--endpoint", self.ext.s3_url,
               "--region", "eu-north-9", "--access-key", access_key]
        refused = self.sovai(*add, "--secret-key", "-", token=carol, stdin=secret + "\n")
        self.assertEqual(refused.returncode, 1, refused)
        self.assertIn("role 'read'", refused.stderr)
        added = self.sovai(*add, "--secret-key", "-", token=alice, stdin=secret + "\n")
        self.assertEqual(added.returncode, 0, added)
        self.assertIn("Added datastore ext (s3, %s, access key %s)" % (self.ext.s3_url, access_key),
                      added.stdout)
        self.assertNotIn(secret, added.stdout + added.stderr)
        again = self.sovai(*add, token=alice, env={"SOVAI_DATASTORE_SECRET_KEY": secret})
        self.assertEqual(again.returncode, 1, again)
        self.assertIn("already has a datastore 'ext'", again.stderr)
        clash = self.sovai("datastore", "add", "s3", "eu-west-local", "--endpoint",
                           self.ext.s3_url, "--region", "eu-north-9", "--access-key", access_key,
                           token=alice, env={"SOVAI_DATASTORE_SECRET_KEY": secret})
        self.assertEqual(clash.returncode, 1, clash)
        self.assertIn("this server's own region", clash.stderr)

        # Listed and shown without the secret, to readers too.
        for args in (("datastore", "list"), ("datastore", "list", "-o", "json"),
                     ("datastore", "get", "ext"), ("datastore", "get", "EXT", "-o", "json")):
            shown = self.sovai(*args, token=carol)
            self.assertEqual(shown.returncode, 0, shown)
            self.assertIn("ext", shown.stdout)
            self.assertIn(access_key, shown.stdout)
            self.assertNotIn(secret, shown.stdout + shown.stderr)
        listed = json.loads(self.sovai("datastore", "list", "-o", "json", token=carol).stdout)
        self.assertIsNone(listed["next_cursor"])  # the API's own page object
        listed = listed["items"]
        self.assertEqual([(d["alias"], d["endpoint"], d["region"], d["secret_key_set"])
                          for d in listed], [("ext", self.ext.s3_url, "eu-north-9", True)])
        self.assertNotIn("secret_key", listed[0])

        # The job reads B's objects and writes its outputs into B's bucket.
        status, job = self.platform.api("POST", "/v1/jobs", copy_job(), token=alice)
        self.assertEqual(status, 201, job)
        self.assertEqual(job["spec"]["volumes"],
                         ["inputs@ext/data:/mnt/in:ro:no-cache",
                          "outputs@ext/results:/mnt/out:rw:no-cache"])
        done = self.wait_job(job["id"], token=alice, timeout_s=120, server=self.platform)
        status, log = self.platform.api("GET", "/v1/jobs/%s/logs" % job["id"], token=alice,
                                        raw=True)
        self.assertEqual(done["status"]["state"], "DONE", "%s\n%s" % (done, log))
        self.assertIn("sync down inputs@ext/data", log)
        self.assertIn("sync up outputs@ext/results", log)
        got = {o["Key"]: ext_s3.get_object(Bucket="outputs", Key=o["Key"])["Body"].read()
               for o in ext_s3.list_objects_v2(Bucket="outputs").get("Contents", [])}
        self.assertEqual(got, {"results/doc.txt": TEXT, "results/sub/blob.bin": BLOB,
                               "results/upper.txt": TEXT.upper()})
        # The input bucket is untouched.
        self.assertEqual(sorted(o["Key"] for o in
                                ext_s3.list_objects_v2(Bucket="inputs")["Contents"]),
                         ["data/doc.txt", "data/sub/blob.bin", "elsewhere/not-mounted.txt"])
        # A's audit log names each handing-out of the datastore's keys.
        status, audit = self.platform.api("GET", "/v1/audit?action=DATASTORE&limit=500")
        self.assertEqual(status, 200, audit)
        self.assertIn((nlp["id"], "ext", 200),
                      [(e["project"], e["resource"], e["result"]) for e in audit["items"]])
        self.assertNotIn(secret, json.dumps(audit))

        # The secret is sealed at rest: not in control.db (nor its WAL) in clear; the master key
        # is a 32-byte file only the server may read.
        for name in ("control.db", "control.db-wal"):
            path = os.path.join(self.platform.data_dir, name)
            if os.path.exists(path):
                with open(path, "rb") as f:
                    self.assertNotIn(secret.encode(), f.read(), name)
        key_file = os.path.join(self.platform.data_dir, "secrets.key")
        self.assertEqual(os.path.getsize(key_file), 32)
        self.assertEqual(stat.S_IMODE(os.stat(key_file).st_mode), 0o600)

        # Another project cannot use nlp's alias, nor see it.
        status, problem = self.platform.api("POST", "/v1/jobs", copy_job(), token=dave)
        self.assertEqual(status, 400, problem)
        self.assertIn("the project's datastores (docs/api/datastores.md): none", problem["detail"])
        hidden = self.sovai("datastore", "get", "ext", token=dave)
        self.assertEqual(hidden.returncode, 1, hidden)
        self.assertIn("datastore 'ext' not found in this project", hidden.stderr)
        self.assertEqual(self.sovai("datastore", "delete", "ext", token=dave).returncode, 1)

        # Delete forgets it: the alias is unknown again, B's buckets are untouched.
        deleted = self.sovai("datastore", "delete", "ext", token=alice)
        self.assertEqual(deleted.returncode, 0, deleted)
        self.assertEqual(deleted.stdout, "Deleted datastore ext.\n")
        self.assertEqual(json.loads(self.sovai("datastore", "list", "-o", "json",
                                               token=alice).stdout)["items"], [])
        status, problem = self.platform.api("POST", "/v1/jobs", copy_job(), token=alice)
        self.assertEqual(status, 400, problem)
        self.assertEqual(len(ext_s3.list_objects_v2(Bucket="outputs")["Contents"]), 3)


if __name__ == "__main__":
    unittest.main()
