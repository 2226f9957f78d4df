"""The npm S3 clients (@aws-sdk/client-s3 with lib-storage and s3-request-presigner, and minio),
pinned by the repository's package-lock.json, against a real `sovai server` over HTTP and HTTPS.
s3_npm_clients.mjs does the client work and checks each result; this test runs it, asserts its exit
status and the checks it reports, and then reads what it left behind with boto3, byte for byte."""

import hashlib
import os
import re
import shutil
import subprocess
import unittest
import uuid


from sovai_fixture import empty_and_delete_bucket, random_bytes, REGION, SovaiServer

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "s3_npm_clients.mjs")
MIB = 1024 * 1024

# Checks each suite must report (a subset of what the script prints: the ones that matter most).
REQUIRED_CHECKS = {
    "aws-sdk": [
        "aws-sdk PutObject ETag is the MD5",
        "aws-sdk GetObject body",
        "aws-sdk GetObject range body",
        "aws-sdk ListObjectsV2 paginated",
        "aws-sdk CopyObject body",
        "aws-sdk DeleteObjects deleted",
        "aws-sdk Upload 12 MiB ETag (3 parts)",
        "aws-sdk Upload 12 MiB round trip",
        "aws-sdk presigned GET body",
        "aws-sdk presigned PUT stored",
        "aws-sdk wrong secret is SignatureDoesNotMatch",
    ],
    "minio": [
        "minio bucketExists",
        "minio putObject ETag is the MD5",
        "minio getObject",
        "minio fPutObject 12 MiB ETag (3 parts)",
        "minio 12 MiB round trip",
        "minio listObjectsV2 recursive",
        "minio listObjectsV2 one level",
        "minio presignedGetObject body",
        "minio removeObject removed it",
        "minio wrong secret GET is SignatureDoesNotMatch",
    ],
}

# What each suite leaves under keep/: {key: bytes}.
KEPT = {
    "aws-sdk": {"keep/aws-sdk-small.txt": b"one part\n",
                "keep/presigned-put.txt": b"put through a presigned URL\n"},
    "minio": {"keep/minio-presigned.txt": b"minio presigned put\n"},
}


class S3NpmBase:
    TLS = False

    @classmethod
    def setUpClass(cls):
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("node is not installed: run tools/bootstrap.sh (Node.js 20+)")
        if not os.path.isdir(os.path.join(REPO_ROOT, "node_modules", "@aws-sdk", "client-s3")):
            raise RuntimeError("node_modules is missing: run tools/bootstrap.sh (npm ci)")
        cls.node = node
        cls.server = SovaiServer(tls=cls.TLS).start()
        cls.s3 = cls.server.boto3_client()

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    def setUp(self):
        self.bucket = "npm-" + uuid.uuid4().hex[:12]  # the script creates it

    def tearDown(self):
        empty_and_delete_bucket(self.s3, self.bucket)

    def run_suite(self, suite):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update({
            "S3_ENDPOINT": self.server.s3_url, "S3_ACCESS_KEY": self.server.access_key,
            "S3_SECRET_KEY": self.server.secret_key, "S3_REGION": REGION,
            "S3_BUCKET": self.bucket,
        })
        if self.TLS:
            env["NODE_EXTRA_CA_CERTS"] = self.server.cert
        else:
            env.pop("NODE_EXTRA_CA_CERTS", None)
        proc = subprocess.run([self.node, SCRIPT, suite], capture_output=True, env=env,
                              cwd=REPO_ROOT, timeout=600)
        out = proc.stdout.decode(errors="replace")
        err = proc.stderr.decode(errors="replace")
        if proc.returncode != 0:
            self.fail("node s3_npm_clients.mjs %s exited %d\n%s\n--- stderr ---\n%s\n"
                      "--- server log ---\n%s" % (suite, proc.returncode, out[-3000:],
                                                  err[-4000:], self.server.server_log()))
        self.assertNotIn("FAIL:", err)
        reported = re.findall(r"(?m)^ok - (.*)$", out)
        for name in REQUIRED_CHECKS[suite]:
            self.assertIn(name, reported)
        done = re.search(r"(?m)^done: (\S+), (\d+) checks$", out)
        self.assertIsNotNone(done, out[-2000:])
        self.assertEqual(done.group(1), suite)
        self.assertEqual(int(done.group(2)), len(reported))
        # What the script stored, read back by another client.
        kept = dict(KEPT[suite])
        kept["keep/%s-multipart.bin" % suite] = random_bytes(12 * MIB, suite + "-multipart")
        for key, want in kept.items():
            got = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            self.assertEqual(hashlib.sha256(got).hexdigest(), hashlib.sha256(want).hexdigest(),
                             key)
        head = self.s3.head_object(Bucket=self.bucket, Key="keep/%s-multipart.bin" % suite)
        self.assertTrue(head["ETag"].endswith('-3"'), head["ETag"])
        return reported

    def test_aws_sdk_v3(self):
        reported = self.run_suite("aws-sdk")
        self.assertGreaterEqual(len(reported), 30)

    def test_minio(self):
        reported = self.run_suite("minio")
        self.assertGreaterEqual(len(reported), 20)
        listed = [c["Key"] for c in self.s3.list_objects_v2(Bucket=self.bucket)["Contents"]]
        self.assertEqual(listed, ["keep/minio-multipart.bin", "keep/minio-presigned.txt"])


class S3NpmHttpTest(S3NpmBase, unittest.TestCase):
    TLS = False


class S3NpmHttpsTest(S3NpmBase, unittest.TestCase):
    TLS = True


if __name__ == "__main__":
    unittest.main()
