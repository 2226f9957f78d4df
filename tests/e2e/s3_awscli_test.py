"""The `aws` CLI (v1, the awscli package of the Python that runs the tests) against a real
`sovai server`, over HTTP and HTTPS: the high-level `aws s3` commands (mb, cp, sync, ls, rm, rb,
presign), including a 20 MiB multipart upload with 8 MiB parts and ranged multipart downloads,
and the `aws s3api` calls one operation at a time. Every round trip is checked byte for byte;
listings and error codes are checked exactly. boto3 (its own suite passes) is the independent
observer where the CLI's output is not enough."""

import hashlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import unittest
import urllib.request
import uuid


from sovai_fixture import empty_and_delete_bucket, random_bytes, write_file, read_file, tree_files, REGION, SovaiServer

# aws-cli v1 exits 1 when a high-level `aws s3` transfer fails and 255 when a call gets an error
# response from the server (v2 uses 254 for the latter; this suite drives v1).
EXIT_S3_FAILED = 1
EXIT_SERVICE_ERROR = 255

AWS_CONFIG = """[default]
region = {region}
retry_mode = standard
max_attempts = 1
s3 =
    addressing_style = path
    multipart_threshold = 8MB
    multipart_chunksize = 8MB
"""


class S3AwsCliBase:
    TLS = False

    @classmethod
    def setUpClass(cls):
        cls.server = SovaiServer(tls=cls.TLS).start()
        cls.s3 = cls.server.boto3_client()
        config = os.path.join(cls.server.tmp, "aws-config")
        with open(config, "w") as f:
            f.write(AWS_CONFIG.format(region=REGION))
        cls.env = {k: v for k, v in os.environ.items()
                   if not k.startswith("AWS_") and k != "HTTPS_PROXY" and k != "HTTP_PROXY"}
        cls.env.update({
            "AWS_ACCESS_KEY_ID": cls.server.access_key,
            "AWS_SECRET_ACCESS_KEY": cls.server.secret_key,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_CONFIG_FILE": config,
            # Nothing from the machine's own AWS setup may leak in.
            "AWS_SHARED_CREDENTIALS_FILE": os.path.join(cls.server.tmp, "no-credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_PAGER": "",
        })

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    def setUp(self):
        self.bucket = "cli-" + uuid.uuid4().hex[:12]
        self.work = tempfile.mkdtemp(prefix="awscli-", dir=self.server.tmp)
        self.aws("s3", "mb", "s3://" + self.bucket)

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)
        empty_and_delete_bucket(self.s3, self.bucket)

    # --- Helpers ---------------------------------------------------------------------------------

    def aws(self, *args, expect_rc=0, input=None, env=None):
        """Runs `aws ARGS --endpoint-url ...`; returns stdout (str). Fails the test, with the
        CLI's stderr and the server log, when the exit status is not expect_rc."""
        cmd = [sys.executable, "-m", "awscli"] + list(args) + [
            "--endpoint-url", self.server.s3_url, "--output", "json"]
        if self.TLS:
            cmd += ["--ca-bundle", self.server.cert]
        proc = subprocess.run(cmd, input=input, capture_output=True, env=env or self.env,
                              cwd=self.work, timeout=300)
        if proc.returncode != expect_rc:
            self.fail("%s\nexit %d (want %d)\nstdout: %s\nstderr: %s\nserver log:\n%s" % (
                " ".join(args), proc.returncode, expect_rc, proc.stdout.decode(errors="replace"),
                proc.stderr.decode(errors="replace")[-3000:], self.server.server_log()))
        self.last_stderr = proc.stderr.decode(errors="replace")
        return proc.stdout.decode()

    def api(self, *args):
        """An `aws s3api` call that must succeed; returns its parsed JSON (or {})."""
        out = self.aws("s3api", *args)
        return json.loads(out) if out.strip() else {}

    def api_error(self, *args):
        """An `aws s3api` call that must fail with a service error; returns the stderr text."""
        self.aws("s3api", *args, expect_rc=EXIT_SERVICE_ERROR)
        return self.last_stderr

    def path(self, *parts):
        return os.path.join(self.work, *parts)

    def remote_keys(self, prefix=""):
        """{key: size} of the bucket, through boto3."""
        keys = {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                       Prefix=prefix):
            for c in page.get("Contents", []):
                keys[c["Key"]] = c["Size"]
        return keys

    def fetch(self, url):
        ctx = ssl.create_default_context(cafile=self.server.cert) if self.TLS else None
        with urllib.request.urlopen(url, context=ctx) as r:
            return r.status, r.read()

    # --- aws s3: buckets -------------------------------------------------------------------------

    def test_mb_ls_rb(self):
        listing = self.aws("s3", "ls")
        self.assertIn(" " + self.bucket + "\n", listing)
        self.assertEqual(self.s3.get_bucket_location(Bucket=self.bucket)["LocationConstraint"],
                         REGION)
        # mb on an existing bucket: the CLI reports the S3 error code.
        self.aws("s3", "mb", "s3://" + self.bucket, expect_rc=EXIT_S3_FAILED)
        self.assertIn("BucketAlreadyOwnedByYou", self.last_stderr)
        self.aws("s3", "mb", "s3://Bad_Name", expect_rc=EXIT_S3_FAILED)
        self.assertIn("InvalidBucketName", self.last_stderr)
        write_file(self.path("f"), b"x")
        self.aws("s3", "cp", self.path("f"), "s3://%s/f" % self.bucket)
        self.aws("s3", "rb", "s3://" + self.bucket, expect_rc=EXIT_S3_FAILED)
        self.assertIn("BucketNotEmpty", self.last_stderr)
        self.aws("s3", "rb", "--force", "s3://" + self.bucket)
        self.assertNotIn(" " + self.bucket + "\n", self.aws("s3", "ls"))
        self.aws("s3", "ls", "s3://" + self.bucket, expect_rc=EXIT_SERVICE_ERROR)
        self.assertIn("NoSuchBucket", self.last_stderr)

    # --- aws s3: objects -------------------------------------------------------------------------

    def test_cp_round_trip_stdin_stdout_and_content_type(self):
        body = random_bytes(300 * 1024, "cp")  # above the inline limit: file-backed
        write_file(self.path("up", "data.json"), body)
        out = self.aws("s3", "cp", self.path("up", "data.json"),
                       "s3://%s/dir/data.json" % self.bucket)
        self.assertIn("upload:", out)
        head = self.s3.head_object(Bucket=self.bucket, Key="dir/data.json")
        self.assertEqual(head["ETag"], '"%s"' % hashlib.md5(body).hexdigest())
        self.assertEqual(head["ContentType"], "application/json")  # guessed by the CLI
        self.aws("s3", "cp", "s3://%s/dir/data.json" % self.bucket, self.path("down", "data.json"))
        self.assertEqual(read_file(self.path("down", "data.json")), body)
        # From stdin (unknown length: the CLI streams it) and to stdout.
        small = b"from stdin\n" * 50
        self.aws("s3", "cp", "-", "s3://%s/stdin.txt" % self.bucket, input=small)
        self.assertEqual(self.s3.get_object(Bucket=self.bucket, Key="stdin.txt")["Body"].read(),
                         small)
        # A stream longer than the threshold goes up as a multipart upload, 8 MiB at a time.
        streamed = random_bytes(9 * 1024 * 1024, "stdin")
        self.aws("s3", "cp", "-", "s3://%s/stdin.bin" % self.bucket, input=streamed)
        got = self.s3.get_object(Bucket=self.bucket, Key="stdin.bin")
        self.assertTrue(got["ETag"].endswith('-2"'), got["ETag"])
        self.assertEqual(got["Body"].read(), streamed)
        out = subprocess.run(
            [sys.executable, "-m", "awscli", "s3", "cp", "s3://%s/dir/data.json" % self.bucket, "-",
             "--endpoint-url", self.server.s3_url] +
            (["--ca-bundle", self.server.cert] if self.TLS else []),
            capture_output=True, env=self.env, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr.decode(errors="replace"))
        self.assertEqual(out.stdout, body)
        # Metadata and content type given explicitly.
        self.aws("s3", "cp", self.path("up", "data.json"), "s3://%s/meta" % self.bucket,
                 "--content-type", "application/x-sovai", "--metadata", "origin=cli,stage=raw",
                 "--cache-control", "max-age=5")
        head = self.s3.head_object(Bucket=self.bucket, Key="meta")
        self.assertEqual(head["ContentType"], "application/x-sovai")
        self.assertEqual(head["Metadata"], {"origin": "cli", "stage": "raw"})
        self.assertEqual(head["CacheControl"], "max-age=5")
        # Server-side copy and move.
        self.aws("s3", "cp", "s3://%s/meta" % self.bucket, "s3://%s/copied" % self.bucket)
        self.aws("s3", "mv", "s3://%s/copied" % self.bucket, "s3://%s/moved" % self.bucket)
        self.assertEqual(self.s3.get_object(Bucket=self.bucket, Key="moved")["Body"].read(), body)
        self.assertNotIn("copied", self.remote_keys())
        # A key that does not exist.
        self.aws("s3", "cp", "s3://%s/missing" % self.bucket, self.path("missing"),
                 expect_rc=EXIT_S3_FAILED)
        self.assertIn("404", self.last_stderr)
        self.assertFalse(os.path.exists(self.path("missing")))

    def test_multipart_cp_20_mib_and_ranged_download(self):
        body = random_bytes(20 * 1024 * 1024, "big")
        write_file(self.path("big.bin"), body)
        self.aws("s3", "cp", self.path("big.bin"), "s3://%s/big.bin" % self.bucket)
        head = self.s3.head_object(Bucket=self.bucket, Key="big.bin")
        self.assertEqual(head["ContentLength"], len(body))
        # 8 MiB parts: 8 + 8 + 4 MiB. The multipart ETag is MD5(concatenated part MD5s)-3.
        part_size = 8 * 1024 * 1024
        parts = [body[i:i + part_size] for i in range(0, len(body), part_size)]
        self.assertEqual(len(parts), 3)
        digest = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
        self.assertEqual(head["ETag"], '"%s-3"' % digest)
        self.assertEqual(self.s3.list_multipart_uploads(Bucket=self.bucket).get("Uploads", []), [])
        # Above the threshold the CLI downloads with parallel ranged GETs.
        self.aws("s3", "cp", "s3://%s/big.bin" % self.bucket, self.path("back.bin"))
        self.assertEqual(hashlib.sha256(read_file(self.path("back.bin"))).hexdigest(),
                         hashlib.sha256(body).hexdigest())
        # ... and copies server-side with UploadPartCopy (x-amz-copy-source-range), 8 MiB parts:
        # the same parts, so the same ETag.
        self.aws("s3", "cp", "s3://%s/big.bin" % self.bucket, "s3://%s/copy.bin" % self.bucket)
        copy = self.s3.get_object(Bucket=self.bucket, Key="copy.bin")
        self.assertEqual(copy["ETag"], head["ETag"])
        self.assertEqual(hashlib.sha256(copy["Body"].read()).hexdigest(),
                         hashlib.sha256(body).hexdigest())

    def test_recursive_sync_delete_and_ls(self):
        src = self.path("src")
        tree = {
            "top.txt": b"top level\n",
            "empty.dat": b"",
            "docs/read me.txt": b"a file with spaces in its name\n",
            "docs/guide/intro.md": b"# intro\n" * 40,
            "docs/guide/deep/er/leaf.bin": random_bytes(200 * 1024, "leaf"),
            "data/\u00e9t\u00e9 + plus.csv": b"a,b\n1,2\n",
        }
        for rel, data in tree.items():
            write_file(os.path.join(src, *rel.split("/")), data)
        out = self.aws("s3", "sync", src, "s3://%s/tree" % self.bucket)
        self.assertEqual(out.count("upload:"), len(tree), out)
        self.assertEqual(self.remote_keys("tree/"),
                         {"tree/" + k: len(v) for k, v in tree.items()})
        # ls --recursive: one line per object, "date time size key", keys with spaces intact.
        lines = self.aws("s3", "ls", "--recursive", "s3://%s/tree/" % self.bucket).splitlines()
        listed = {}
        for line in lines:
            fields = line.split(None, 3)
            listed[fields[3]] = int(fields[2])
        self.assertEqual(listed, {"tree/" + k: len(v) for k, v in tree.items()})
        # Non-recursive ls shows the "directories" as PRE lines.
        top = self.aws("s3", "ls", "s3://%s/tree/" % self.bucket)
        self.assertIn("PRE docs/", top)
        self.assertIn("PRE data/", top)
        self.assertIn(" top.txt", top)
        self.assertNotIn("intro.md", top)
        # A second sync finds nothing to do: sizes and times from the listing match.
        self.assertEqual(self.aws("s3", "sync", src, "s3://%s/tree" % self.bucket).strip(), "")
        # Download the tree again and compare every byte.
        dst = self.path("dst")
        out = self.aws("s3", "sync", "s3://%s/tree" % self.bucket, dst)
        self.assertEqual(out.count("download:"), len(tree), out)
        self.assertEqual(tree_files(dst), tree)
        # Change one file (different size), remove one, add one; sync --delete mirrors exactly.
        write_file(os.path.join(src, "top.txt"), b"top level, changed\n")
        os.remove(os.path.join(src, "docs", "read me.txt"))
        write_file(os.path.join(src, "docs", "new file.txt"), b"new\n")
        out = self.aws("s3", "sync", "--delete", src, "s3://%s/tree" % self.bucket)
        self.assertEqual(out.count("upload:"), 2, out)
        self.assertEqual(out.count("delete:"), 1, out)
        self.assertIn("read me.txt", out)
        want = tree_files(src)
        self.assertEqual(self.remote_keys("tree/"), {"tree/" + k: len(v) for k, v in want.items()})
        self.aws("s3", "sync", "--delete", "s3://%s/tree" % self.bucket, dst)
        self.assertEqual(tree_files(dst), want)
        # rm --recursive with a filter, then everything.
        out = self.aws("s3", "rm", "--recursive", "s3://%s/tree/docs/" % self.bucket,
                       "--exclude", "*", "--include", "*.md")
        self.assertEqual(out.count("delete:"), 1, out)
        self.assertNotIn("tree/docs/guide/intro.md", self.remote_keys())
        self.aws("s3", "rm", "--recursive", "s3://%s/tree/" % self.bucket)
        self.assertEqual(self.remote_keys(), {})

    def test_presign(self):
        body = b"presigned by the cli\n"
        self.s3.put_object(Bucket=self.bucket, Key="p q.txt", Body=body)
        url = self.aws("s3", "presign", "s3://%s/p q.txt" % self.bucket,
                       "--expires-in", "120").strip()
        self.assertEqual(self.fetch(url), (200, body))

    # --- aws s3api -------------------------------------------------------------------------------

    def test_s3api_put_head_get_range_and_list(self):
        body = bytes(range(256)) * 512  # 128 KiB
        write_file(self.path("body.bin"), body)
        put = self.api("put-object", "--bucket", self.bucket, "--key", "obj/one.bin",
                       "--body", self.path("body.bin"), "--content-type", "application/x-test",
                       "--metadata", "team=nlp")
        self.assertEqual(put["ETag"], '"%s"' % hashlib.md5(body).hexdigest())
        head = self.api("head-object", "--bucket", self.bucket, "--key", "obj/one.bin")
        self.assertEqual(head["ContentLength"], len(body))
        self.assertEqual(head["ETag"], put["ETag"])
        self.assertEqual(head["ContentType"], "application/x-test")
        self.assertEqual(head["Metadata"], {"team": "nlp"})
        got = self.api("get-object", "--bucket", self.bucket, "--key", "obj/one.bin",
                       "--range", "bytes=1000-1999", self.path("range.bin"))
        self.assertEqual(read_file(self.path("range.bin")), body[1000:2000])
        self.assertEqual(got["ContentLength"], 1000)
        self.assertEqual(got["ContentRange"], "bytes 1000-1999/%d" % len(body))
        got = self.api("get-object", "--bucket", self.bucket, "--key", "obj/one.bin",
                       "--range", "bytes=-10", self.path("tail.bin"))
        self.assertEqual(read_file(self.path("tail.bin")), body[-10:])
        err = self.api_error("get-object", "--bucket", self.bucket, "--key", "obj/one.bin",
                             "--range", "bytes=%d-" % len(body), self.path("none.bin"))
        self.assertIn("InvalidRange", err)
        err = self.api_error("get-object", "--bucket", self.bucket, "--key", "nope",
                             self.path("none.bin"))
        self.assertIn("NoSuchKey", err)
        # The owner's FULL_CONTROL grant, typed with xsi:type as S3 writes it (s3cmd needs it).
        for acl in [self.api("get-object-acl", "--bucket", self.bucket, "--key", "obj/one.bin"),
                    self.api("get-bucket-acl", "--bucket", self.bucket)]:
            self.assertEqual([(g["Grantee"]["Type"], g["Grantee"]["ID"], g["Permission"])
                              for g in acl["Grants"]],
                             [("CanonicalUser", acl["Owner"]["ID"], "FULL_CONTROL")])
        err = self.api_error("head-object", "--bucket", self.bucket, "--key", "nope")
        self.assertIn("404", err)
        # Listing: prefix + delimiter, and the CLI's own pagination over continuation tokens.
        keys = ["a", "obj/two", "obj/sub/three", "z z", "\u00e9"]
        for k in keys:
            self.api("put-object", "--bucket", self.bucket, "--key", k)
        r = self.api("list-objects-v2", "--bucket", self.bucket, "--delimiter", "/")
        self.assertEqual([c["Key"] for c in r["Contents"]], ["a", "z z", "\u00e9"])
        self.assertEqual([p["Prefix"] for p in r["CommonPrefixes"]], ["obj/"])
        r = self.api("list-objects-v2", "--bucket", self.bucket, "--prefix", "obj/",
                     "--delimiter", "/")
        self.assertEqual([c["Key"] for c in r["Contents"]], ["obj/one.bin", "obj/two"])
        self.assertEqual([p["Prefix"] for p in r["CommonPrefixes"]], ["obj/sub/"])
        all_keys = sorted(keys + ["obj/one.bin"], key=lambda k: k.encode())
        r = self.api("list-objects-v2", "--bucket", self.bucket, "--page-size", "2")
        self.assertEqual([c["Key"] for c in r["Contents"]], all_keys)
        r = self.api("list-objects-v2", "--bucket", self.bucket, "--max-keys", "2",
                     "--no-paginate")
        self.assertEqual(r["KeyCount"], 2)
        self.assertTrue(r["IsTruncated"])
        r2 = self.api("list-objects-v2", "--bucket", self.bucket, "--no-paginate",
                      "--continuation-token", r["NextContinuationToken"])
        self.assertEqual([c["Key"] for c in r["Contents"] + r2["Contents"]], all_keys)
        self.assertFalse(r2["IsTruncated"])
        # ListObjects (v1): the CLI pages with Marker = the last key it saw.
        r = self.api("list-objects", "--bucket", self.bucket, "--page-size", "2")
        self.assertEqual([c["Key"] for c in r["Contents"]], all_keys)
        # Tagging.
        self.api("put-object-tagging", "--bucket", self.bucket, "--key", "a", "--tagging",
                 json.dumps({"TagSet": [{"Key": "team", "Value": "nlp"},
                                        {"Key": "stage", "Value": "raw data"}]}))
        tags = self.api("get-object-tagging", "--bucket", self.bucket, "--key", "a")["TagSet"]
        self.assertEqual(sorted((t["Key"], t["Value"]) for t in tags),
                         [("stage", "raw data"), ("team", "nlp")])
        # ls --summarize counts what the listing holds.
        summary = self.aws("s3", "ls", "--recursive", "--summarize", "s3://" + self.bucket)
        self.assertIn("Total Objects: %d" % len(all_keys), summary)
        self.assertIn("Total Size: %d" % len(body), summary)
        # delete-objects with one key that does not exist: S3 reports it deleted as well.
        r = self.api("delete-objects", "--bucket", self.bucket, "--delete",
                     json.dumps({"Objects": [{"Key": "a"}, {"Key": "never"}]}))
        self.assertEqual(sorted(d["Key"] for d in r["Deleted"]), ["a", "never"])
        self.assertNotIn("a", self.remote_keys())

    def test_s3api_versioning(self):
        self.assertEqual(self.api("get-bucket-versioning", "--bucket", self.bucket), {})
        self.api("put-bucket-versioning", "--bucket", self.bucket,
                 "--versioning-configuration", "Status=Enabled")
        self.assertEqual(self.api("get-bucket-versioning", "--bucket", self.bucket)["Status"],
                         "Enabled")
        write_file(self.path("v1"), b"version one")
        write_file(self.path("v2"), b"version two!")
        v1 = self.api("put-object", "--bucket", self.bucket, "--key", "doc", "--body",
                      self.path("v1"))["VersionId"]
        v2 = self.api("put-object", "--bucket", self.bucket, "--key", "doc", "--body",
                      self.path("v2"))["VersionId"]
        self.assertNotEqual(v1, v2)
        r = self.api("list-object-versions", "--bucket", self.bucket)
        versions = [(v["Key"], v["VersionId"], v["IsLatest"], v["Size"]) for v in r["Versions"]]
        self.assertEqual(versions, [("doc", v2, True, 12), ("doc", v1, False, 11)])
        self.api("get-object", "--bucket", self.bucket, "--key", "doc", "--version-id", v1,
                 self.path("old"))
        self.assertEqual(read_file(self.path("old")), b"version one")
        deleted = self.api("delete-object", "--bucket", self.bucket, "--key", "doc")
        self.assertTrue(deleted["DeleteMarker"])
        err = self.api_error("get-object", "--bucket", self.bucket, "--key", "doc",
                             self.path("gone"))
        self.assertIn("NoSuchKey", err)
        r = self.api("list-object-versions", "--bucket", self.bucket)
        self.assertEqual([(m["Key"], m["VersionId"], m["IsLatest"]) for m in r["DeleteMarkers"]],
                         [("doc", deleted["VersionId"], True)])
        self.assertEqual(len(r["Versions"]), 2)
        # Removing the delete marker brings v2 back.
        self.api("delete-object", "--bucket", self.bucket, "--key", "doc", "--version-id",
                 deleted["VersionId"])
        self.api("get-object", "--bucket", self.bucket, "--key", "doc", self.path("back"))
        self.assertEqual(read_file(self.path("back")), b"version two!")
        self.api("put-bucket-versioning", "--bucket", self.bucket,
                 "--versioning-configuration", "Status=Suspended")
        self.assertEqual(self.api("get-bucket-versioning", "--bucket", self.bucket)["Status"],
                         "Suspended")

    def test_s3api_multipart(self):
        part1 = random_bytes(5 * 1024 * 1024, "p1")
        part2 = random_bytes(1234567, "p2")
        write_file(self.path("part1"), part1)
        write_file(self.path("part2"), part2)
        upload = self.api("create-multipart-upload", "--bucket", self.bucket, "--key", "mp/obj",
                          "--content-type", "application/x-parts", "--metadata", "k=v")
        upload_id = upload["UploadId"]
        self.assertEqual(upload["Key"], "mp/obj")
        # Parts uploaded out of order; the second upload of part 1 replaces the first.
        e2 = self.api("upload-part", "--bucket", self.bucket, "--key", "mp/obj", "--upload-id",
                      upload_id, "--part-number", "2", "--body", self.path("part2"))["ETag"]
        self.api("upload-part", "--bucket", self.bucket, "--key", "mp/obj", "--upload-id",
                 upload_id, "--part-number", "1", "--body", self.path("part2"))
        e1 = self.api("upload-part", "--bucket", self.bucket, "--key", "mp/obj", "--upload-id",
                      upload_id, "--part-number", "1", "--body", self.path("part1"))["ETag"]
        self.assertEqual(e1, '"%s"' % hashlib.md5(part1).hexdigest())
        self.assertEqual(e2, '"%s"' % hashlib.md5(part2).hexdigest())
        listed = self.api("list-parts", "--bucket", self.bucket, "--key", "mp/obj",
                          "--upload-id", upload_id)
        self.assertEqual([(p["PartNumber"], p["ETag"], p["Size"]) for p in listed["Parts"]],
                         [(1, e1, len(part1)), (2, e2, len(part2))])
        uploads = self.api("list-multipart-uploads", "--bucket", self.bucket)["Uploads"]
        self.assertEqual([(u["Key"], u["UploadId"]) for u in uploads], [("mp/obj", upload_id)])
        # A wrong part ETag is InvalidPart; the upload stays open.
        bad = json.dumps({"Parts": [{"PartNumber": 1, "ETag": e2}, {"PartNumber": 2, "ETag": e2}]})
        err = self.api_error("complete-multipart-upload", "--bucket", self.bucket, "--key",
                             "mp/obj", "--upload-id", upload_id, "--multipart-upload", bad)
        self.assertIn("InvalidPart", err)
        good = json.dumps({"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
        done = self.api("complete-multipart-upload", "--bucket", self.bucket, "--key", "mp/obj",
                        "--upload-id", upload_id, "--multipart-upload", good)
        digest = hashlib.md5(hashlib.md5(part1).digest() + hashlib.md5(part2).digest()).hexdigest()
        self.assertEqual(done["ETag"], '"%s-2"' % digest)
        self.assertEqual(done["Key"], "mp/obj")
        got = self.api("get-object", "--bucket", self.bucket, "--key", "mp/obj",
                       self.path("whole"))
        self.assertEqual(read_file(self.path("whole")), part1 + part2)
        self.assertEqual(got["ContentType"], "application/x-parts")
        self.assertEqual(got["Metadata"], {"k": "v"})
        # partNumber reads return one part.
        self.api("get-object", "--bucket", self.bucket, "--key", "mp/obj", "--part-number", "2",
                 self.path("p2back"))
        self.assertEqual(read_file(self.path("p2back")), part2)
        # The upload is gone; an abort of another upload removes it from the list.
        err = self.api_error("list-parts", "--bucket", self.bucket, "--key", "mp/obj",
                             "--upload-id", upload_id)
        self.assertIn("NoSuchUpload", err)
        other = self.api("create-multipart-upload", "--bucket", self.bucket,
                         "--key", "mp/other")["UploadId"]
        self.api("abort-multipart-upload", "--bucket", self.bucket, "--key", "mp/other",
                 "--upload-id", other)
        self.assertNotIn("Uploads", self.api("list-multipart-uploads", "--bucket", self.bucket))

    def test_bad_credentials_are_rejected(self):
        env = dict(self.env, AWS_SECRET_ACCESS_KEY="wrong" + self.server.secret_key[5:])
        self.aws("s3api", "list-objects-v2", "--bucket", self.bucket,
                 expect_rc=EXIT_SERVICE_ERROR, env=env)
        self.assertIn("SignatureDoesNotMatch", self.last_stderr)
        env = dict(self.env, AWS_ACCESS_KEY_ID="AKIANOSUCHKEY0000000")
        self.aws("s3", "ls", "s3://" + self.bucket, expect_rc=EXIT_SERVICE_ERROR, env=env)
        self.assertIn("InvalidAccessKeyId", self.last_stderr)
        # Another user cannot see this bucket.
        other = self.server.create_user_key("cli-other-" + uuid.uuid4().hex[:6])
        env = dict(self.env, AWS_ACCESS_KEY_ID=other["access_key_id"],
                   AWS_SECRET_ACCESS_KEY=other["secret_access_key"])
        self.aws("s3api", "list-objects-v2", "--bucket", self.bucket,
                 expect_rc=EXIT_SERVICE_ERROR, env=env)
        self.assertIn("AccessDenied", self.last_stderr)


class S3AwsCliHttpTest(S3AwsCliBase, unittest.TestCase):
    TLS = False


class S3AwsCliHttpsTest(S3AwsCliBase, unittest.TestCase):
    TLS = True


if __name__ == "__main__":
    unittest.main()
