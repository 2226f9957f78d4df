"""The audit log of a real `sovai server`, through real clients (docs/audit.md):

* S3 requests made with boto3 under a user's key are recorded with the user, the key, the
  resource and the result, refused ones included; REST changes with the token that made them;
* the chain verifies (GET /v1/audit/verify), and an entry edited in control.db is named;
* --audit-export writes the chain into a bucket at shutdown, and the exported files verify
  offline with tools/audit_verify_export.py, which also catches an edited line.
"""
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import unittest
import urllib.parse

from botocore.exceptions import ClientError

from sovai_fixture import SovaiServer

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VERIFY = os.path.join(REPO, "tools", "audit_verify_export.py")


def entries(server, **query):
    path = "/v1/audit?" + urllib.parse.urlencode(dict(limit=500, **query))
    status, body = server.api("GET", path)
    assert status == 200, body
    return body["items"]


class AuditTest(unittest.TestCase):
    def setUp(self):
        self.server = SovaiServer(extra_args=["--audit-export", "audit-bkt/chain",
                                              "--audit-export-interval", "1h"]).start()
        self.addCleanup(self.server.cleanup)
        # A user with an S3 key of the default project.
        status, user = self.server.api("POST", "/v1/users", {"name": "alice"})
        self.assertEqual(status, 201, user)
        self.user = user["id"]
        _, project = self.server.api("GET", "/v1/whoami")
        project_id = project["project"]["id"]
        status, body = self.server.api(
            "POST", "/v1/projects/%s/members/%s" % (project_id, self.user), {"role": "operator"})
        self.assertIn(status, (200, 201), body)
        status, key = self.server.api("POST", "/v1/users/%s/s3-keys" % self.user, {})
        self.assertEqual(status, 201, key)
        self.key = key["access_key_id"]
        self.s3 = self.server.boto3_client(access_key=self.key,
                                           secret_key=key["secret_access_key"])

    def test_s3_and_rest_calls_are_recorded_with_who_what_and_result(self):
        self.s3.create_bucket(Bucket="ledger")
        self.s3.put_object(Bucket="ledger", Key="q3/report.csv", Body=b"a,b\n1,2\n")
        self.assertEqual(b"a,b\n1,2\n",
                         self.s3.get_object(Bucket="ledger", Key="q3/report.csv")["Body"].read())
        with self.assertRaises(ClientError):
            self.s3.get_object(Bucket="ledger", Key="missing.csv")
        status, _ = self.server.api("POST", "/v1/tokens", {"role": "superuser"})
        self.assertEqual(status, 400)

        s3 = entries(self.server, action="S3")
        by_action = {}
        for e in s3:
            if e["resource"] in ("/ledger", "/ledger/q3/report.csv", "/ledger/missing.csv"):
                by_action.setdefault((e["action"], e["resource"]), []).append(e)
        put = by_action[("S3 PUT", "/ledger/q3/report.csv")][0]
        self.assertEqual((put["actor_user"], put["actor_token"], put["result"]),
                         (self.user, self.key, 200))
        get = by_action[("S3 GET", "/ledger/q3/report.csv")][0]
        self.assertEqual((get["actor_user"], get["result"]), (self.user, 200))
        self.assertEqual(by_action[("S3 GET", "/ledger/missing.csv")][0]["result"], 404)
        self.assertEqual(by_action[("S3 PUT", "/ledger")][0]["result"], 200)  # CreateBucket
        self.assertTrue(put["source"].startswith("127.0.0.1:"), put)

        rest = [e for e in entries(self.server, action="POST /v1/tokens") if e["result"] == 400]
        self.assertEqual(len(rest), 1, rest)
        _, whoami = self.server.api("GET", "/v1/whoami")
        self.assertEqual(rest[0]["actor_token"], whoami["token"]["id"])
        self.assertIn("role", rest[0]["detail"])
        # Reads of /v1 are not recorded; the list itself is a GET.
        self.assertFalse([e for e in entries(self.server) if e["action"].startswith("GET ")])

        status, report = self.server.api("GET", "/v1/audit/verify")
        self.assertEqual((status, report["ok"]), (200, True), report)
        self.assertGreaterEqual(report["entries"], 8)  # users, members, keys, S3 and REST calls

    def test_an_entry_edited_in_the_database_is_named_by_verify(self):
        self.s3.create_bucket(Bucket="ledger")
        for n in range(3):
            self.s3.put_object(Bucket="ledger", Key="k%d" % n, Body=b"x")
        target = [e for e in entries(self.server, action="S3 PUT") if e["resource"] == "/ledger/k1"]
        seq = target[0]["seq"]
        self.server.stop()
        db = sqlite3.connect(os.path.join(self.server.data_dir, "control.db"))
        with db:
            db.execute("UPDATE audit_log SET resource = '/ledger/other' WHERE seq = ?", (seq,))
        db.close()
        self.server.start()
        status, report = self.server.api("GET", "/v1/audit/verify")
        self.assertEqual(status, 200)
        self.assertFalse(report["ok"], report)
        self.assertEqual(report["first_bad_seq"], seq)
        self.assertIn("modified", report["problem"])

    def test_the_export_verifies_offline_and_catches_an_edit(self):
        self.s3.create_bucket(Bucket="ledger")
        self.s3.put_object(Bucket="ledger", Key="k", Body=b"x")
        last = entries(self.server)[-1]
        self.server.stop()  # the final export
        self.server.start()
        admin = self.server.boto3_client()
        keys = sorted(o["Key"] for o in
                      admin.list_objects_v2(Bucket="audit-bkt", Prefix="chain/")["Contents"])
        self.assertTrue(keys, "nothing exported")
        with tempfile.TemporaryDirectory() as out:
            for key in keys:
                admin.download_file("audit-bkt", key, os.path.join(out, os.path.basename(key)))
            good = subprocess.run([sys.executable, VERIFY, out], capture_output=True, text=True)
            self.assertEqual(good.returncode, 0, good.stdout + good.stderr)
            count, last_hash = good.stdout.split("ok: ")[1].split(" entries, last hash ")
            # The export reaches at least the entry read before the stop, with the same hash.
            self.assertGreaterEqual(int(count), last["seq"])
            exported = {}
            for key in keys:
                with open(os.path.join(out, os.path.basename(key))) as f:
                    for line in f:
                        e = json.loads(line)
                        exported[e["seq"]] = e
            self.assertEqual(exported[last["seq"]]["hash"], last["hash"])
            # Editing one exported line breaks the offline check, naming the entry.
            path = os.path.join(out, os.path.basename(keys[0]))
            with open(path) as f:
                lines = f.readlines()
            edited = json.loads(lines[1])
            edited["result"] = 200 if edited["result"] != 200 else 201
            lines[1] = json.dumps(edited) + "\n"
            with open(path, "w") as f:
                f.writelines(lines)
            bad = subprocess.run([sys.executable, VERIFY, out], capture_output=True, text=True)
            self.assertEqual(bad.returncode, 1, bad.stdout)
            self.assertIn("entry %d was modified" % edited["seq"], bad.stdout)


if __name__ == "__main__":
    unittest.main()
