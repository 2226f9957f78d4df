"""s3cmd (the Debian package) against a real `sovai server`, over HTTP and HTTPS, path-style with
SigV4: mb/ls/la/du, put/get (single-part, where s3cmd checks that the ETag is the MD5 of the
content; multipart with 5 MiB chunks, from a file and from stdin), info, cp/mv/modify,
del/rm --recursive, sync up and down with --delete-removed, signurl, setpolicy/delpolicy,
setcors/delcors, multipart/listmp/abortmp. Round trips are checked byte for byte; listings and
error exits are checked exactly; boto3 is the independent observer of what was stored."""

import hashlib
import json
import os
import re
import shutil
import ssl
import subprocess
import tempfile
import unittest
import urllib.error
import urllib.request
import uuid


from sovai_fixture import empty_and_delete_bucket, random_bytes, write_file, read_file, tree_files, REGION, SovaiServer

# s3cmd's exit codes (S3/ExitCodes.py).
EX_OK = 0
EX_NOTFOUND = 12
EX_CONFLICT = 13
EX_USAGE = 64
EX_ACCESSDENIED = 77

S3CMD_CONFIG = """[default]
access_key = {access_key}
secret_key = {secret_key}
host_base = {host}
host_bucket = {host}
use_https = {use_https}
ca_certs_file = {ca_certs}
check_ssl_certificate = True
check_ssl_hostname = True
signature_v2 = False
signurl_use_https = {use_https}
bucket_location = {region}
progress_meter = False
socket_timeout = 60
max_retries = 1
"""


class S3cmdBase:
    TLS = False

    @classmethod
    def setUpClass(cls):
        cls.server = SovaiServer(tls=cls.TLS).start()
        cls.s3 = cls.server.boto3_client()
        cls.host = cls.server.s3_url.split("://", 1)[1].rstrip("/")
        cls.config = cls.write_config(cls.server.access_key, cls.server.secret_key, "s3cfg")

    @classmethod
    def write_config(cls, access_key, secret_key, name):
        path = os.path.join(cls.server.tmp, name)
        with open(path, "w") as f:
            f.write(S3CMD_CONFIG.format(
                access_key=access_key, secret_key=secret_key, host=cls.host,
                use_https=str(cls.TLS), ca_certs=cls.server.cert or "", region=REGION))
        return path

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    def setUp(self):
        self.bucket = "cmd-" + uuid.uuid4().hex[:12]
        self.work = tempfile.mkdtemp(prefix="s3cmd-", dir=self.server.tmp)
        self.s3cmd("mb", "s3://" + self.bucket)

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)
        empty_and_delete_bucket(self.s3, self.bucket)

    # --- Helpers ---------------------------------------------------------------------------------

    def s3cmd(self, *args, expect_rc=EX_OK, config=None):
        """Runs `s3cmd -c CONFIG ARGS`; returns stdout. Fails the test, with s3cmd's stderr and
        the server log, when the exit status is not expect_rc."""
        cmd = ["s3cmd", "-c", config or self.config, "--no-progress"] + list(args)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        proc = subprocess.run(cmd, capture_output=True, env=env, cwd=self.work, timeout=300)
        self.last_stderr = proc.stderr.decode(errors="replace")
        if proc.returncode != expect_rc:
            self.fail("s3cmd %s\nexit %d (want %d)\nstdout: %s\nstderr: %s\nserver log:\n%s" % (
                " ".join(args), proc.returncode, expect_rc, proc.stdout.decode(errors="replace"),
                self.last_stderr[-3000:], self.server.server_log()))
        return proc.stdout.decode()

    def path(self, *parts):
        return os.path.join(self.work, *parts)

    def uri(self, key=""):
        return "s3://%s/%s" % (self.bucket, key)

    def remote_keys(self, prefix=""):
        """{key: size} of the bucket, through boto3."""
        keys = {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                       Prefix=prefix):
            for c in page.get("Contents", []):
                keys[c["Key"]] = c["Size"]
        return keys

    def ls(self, *args):
        """`s3cmd ls ARGS` parsed: ({uri: size} of objects, [uri] of DIR lines)."""
        objects, dirs = {}, []
        for line in self.s3cmd("ls", *args).splitlines():
            fields = line.split()
            if fields[0] == "DIR":
                dirs.append(line.split("DIR", 1)[1].strip())
            else:
                # "2024-01-01 12:00   1234  s3://bucket/key with spaces"
                m = re.match(r"\S+ \S+\s+(\d+)\s+(s3://.*)$", line)
                self.assertIsNotNone(m, line)
                objects[m.group(2)] = int(m.group(1))
        return objects, dirs

    # --- Tests -----------------------------------------------------------------------------------

    def test_buckets_mb_ls_rb(self):
        listing = self.s3cmd("ls")
        self.assertRegex(listing, r"(?m)^\S+ \S+\s+s3://%s$" % self.bucket)
        self.s3cmd("mb", self.uri(), expect_rc=EX_CONFLICT)
        self.assertIn("BucketAlreadyOwnedByYou", self.last_stderr)
        info = self.s3cmd("info", self.uri())
        self.assertIn("Location:  %s" % REGION, info)
        write_file(self.path("f"), b"x")
        self.s3cmd("put", self.path("f"), self.uri("f"))
        self.s3cmd("rb", self.uri(), expect_rc=EX_CONFLICT)
        self.assertIn("BucketNotEmpty", self.last_stderr)
        self.s3cmd("del", self.uri("f"))
        self.s3cmd("rb", self.uri())
        self.assertNotIn("s3://%s\n" % self.bucket, self.s3cmd("ls"))
        self.s3cmd("ls", self.uri(), expect_rc=EX_NOTFOUND)
        self.assertIn("NoSuchBucket", self.last_stderr)

    def test_put_get_info_single_part(self):
        body = random_bytes(300 * 1024, "single")  # above the inline limit: file-backed
        write_file(self.path("data.bin"), body)
        out = self.s3cmd("put", "--mime-type", "application/x-sovai", "--add-header",
                         "x-amz-meta-origin:s3cmd", self.path("data.bin"), self.uri("dir/data.bin"))
        self.assertIn("upload:", out)
        head = self.s3.head_object(Bucket=self.bucket, Key="dir/data.bin")
        self.assertEqual(head["ETag"], '"%s"' % hashlib.md5(body).hexdigest())
        self.assertEqual(head["ContentType"], "application/x-sovai")
        self.assertEqual(head["Metadata"].get("origin"), "s3cmd")
        # s3cmd compares the downloaded bytes' MD5 with the ETag / its md5 attribute.
        out = self.s3cmd("get", self.uri("dir/data.bin"), self.path("back.bin"))
        self.assertIn("download:", out)
        self.assertNotIn("MD5 signatures do not match", self.last_stderr)
        self.assertEqual(read_file(self.path("back.bin")), body)
        info = self.s3cmd("info", self.uri("dir/data.bin"))
        self.assertIn("File size: %d" % len(body), info)
        self.assertIn("MIME type: application/x-sovai", info)
        self.assertIn("MD5 sum:   %s" % hashlib.md5(body).hexdigest(), info)
        # A missing key, and get onto an existing file without --force.
        # (get lists the source first, finds nothing and calls it a parameter problem.)
        self.s3cmd("get", self.uri("nope"), self.path("nope"), expect_rc=EX_USAGE)
        self.assertIn("'%s' does not exist" % self.uri("nope"), self.last_stderr)
        self.assertFalse(os.path.exists(self.path("nope")))
        self.s3cmd("info", self.uri("nope"), expect_rc=EX_NOTFOUND)
        self.assertIn("404", self.last_stderr)
        # Small, inline objects too, including an empty one.
        for name, data in [("empty", b""), ("small.txt", b"small\n")]:
            write_file(self.path(name), data)
            self.s3cmd("put", self.path(name), self.uri(name))
            self.s3cmd("get", "--force", self.uri(name), self.path(name + ".back"))
            self.assertEqual(read_file(self.path(name + ".back")), data)
        objects, dirs = self.ls(self.uri())
        self.assertEqual(objects, {self.uri("empty"): 0, self.uri("small.txt"): 6})
        self.assertEqual(dirs, [self.uri("dir/")])
        objects, _ = self.ls("--recursive", self.uri())
        self.assertEqual(objects[self.uri("dir/data.bin")], len(body))
        du = self.s3cmd("du", self.uri()).split()
        self.assertEqual(int(du[0]), len(body) + 6)
        self.assertEqual(int(du[1]), 3)

    def test_multipart_put_get_12_mib(self):
        body = random_bytes(12 * 1024 * 1024, "multi")
        write_file(self.path("big.bin"), body)
        # (With --no-progress s3cmd prints no per-part lines; the ETag below shows the parts.)
        self.s3cmd("put", "--multipart-chunk-size-mb=5", self.path("big.bin"), self.uri("big.bin"))
        head = self.s3.head_object(Bucket=self.bucket, Key="big.bin")
        self.assertEqual(head["ContentLength"], len(body))
        chunk = 5 * 1024 * 1024
        digest = hashlib.md5(b"".join(hashlib.md5(body[i:i + chunk]).digest()
                                      for i in range(0, len(body), chunk))).hexdigest()
        self.assertEqual(head["ETag"], '"%s-3"' % digest)
        # s3cmd keeps the whole file's MD5 in x-amz-meta-s3cmd-attrs and checks it on get.
        self.assertIn("md5:%s" % hashlib.md5(body).hexdigest(), head["Metadata"]["s3cmd-attrs"])
        self.s3cmd("get", self.uri("big.bin"), self.path("back.bin"))
        self.assertNotIn("MD5 signatures do not match", self.last_stderr)
        self.assertEqual(hashlib.sha256(read_file(self.path("back.bin"))).hexdigest(),
                         hashlib.sha256(body).hexdigest())
        info = self.s3cmd("info", self.uri("big.bin"))
        self.assertIn("MD5 sum:   %s" % hashlib.md5(body).hexdigest(), info)
        self.assertEqual(self.s3.list_multipart_uploads(Bucket=self.bucket).get("Uploads", []), [])

    def test_sync_tree_up_down_and_delete_removed(self):
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
        out = self.s3cmd("sync", src + "/", self.uri("tree/"))
        self.assertEqual(out.count("upload:"), len(tree), out)
        self.assertEqual(self.remote_keys("tree/"),
                         {"tree/" + k: len(v) for k, v in tree.items()})
        objects, _ = self.ls("--recursive", self.uri("tree/"))
        self.assertEqual(objects, {self.uri("tree/" + k): len(v) for k, v in tree.items()})
        # Nothing changed: s3cmd compares size and MD5 (the ETag) and uploads nothing.
        out = self.s3cmd("sync", src + "/", self.uri("tree/"))
        self.assertNotIn("upload:", out)
        dst = self.path("dst")
        out = self.s3cmd("sync", self.uri("tree/"), dst + "/")
        self.assertEqual(out.count("download:"), len(tree), out)
        self.assertEqual(tree_files(dst), tree)
        # Same size, different content: only the MD5 tells them apart.
        write_file(os.path.join(src, "top.txt"), b"TOP LEVEL\n")
        os.remove(os.path.join(src, "docs", "read me.txt"))
        write_file(os.path.join(src, "docs", "new file.txt"), b"new\n")
        out = self.s3cmd("sync", "--delete-removed", src + "/", self.uri("tree/"))
        self.assertEqual(out.count("upload:"), 2, out)
        self.assertEqual(out.count("delete:"), 1, out)
        want = tree_files(src)
        self.assertEqual(self.remote_keys("tree/"), {"tree/" + k: len(v) for k, v in want.items()})
        self.assertEqual(self.s3.get_object(Bucket=self.bucket, Key="tree/top.txt")["Body"].read(),
                         b"TOP LEVEL\n")
        self.s3cmd("sync", "--delete-removed", self.uri("tree/"), dst + "/")
        self.assertEqual(tree_files(dst), want)

    def test_cp_mv_del_recursive_and_signurl(self):
        write_file(self.path("a.txt"), b"alpha\n")
        self.s3cmd("put", self.path("a.txt"), self.uri("a.txt"))
        self.s3cmd("cp", self.uri("a.txt"), self.uri("copy/a.txt"))
        self.s3cmd("mv", self.uri("copy/a.txt"), self.uri("moved/a b.txt"))
        self.assertEqual(self.remote_keys(), {"a.txt": 6, "moved/a b.txt": 6})
        self.assertEqual(
            self.s3.get_object(Bucket=self.bucket, Key="moved/a b.txt")["Body"].read(), b"alpha\n")
        # signurl: a presigned GET that anyone can fetch until it expires.
        url = self.s3cmd("signurl", self.uri("moved/a b.txt"), "+120").strip()
        ctx = ssl.create_default_context(cafile=self.server.cert) if self.TLS else None
        with urllib.request.urlopen(url, context=ctx) as r:
            self.assertEqual(r.read(), b"alpha\n")
        for i in range(5):
            write_file(self.path("many", "f%d" % i), b"%d" % i)
        self.s3cmd("put", "--recursive", self.path("many"), self.uri("many/"))
        self.assertEqual(len(self.remote_keys("many/")), 5)
        out = self.s3cmd("del", "--recursive", "--force", self.uri("many/"))
        self.assertEqual(out.count("delete:"), 5, out)
        self.assertEqual(self.remote_keys(), {"a.txt": 6, "moved/a b.txt": 6})

    def test_stdin_modify_policy_cors_and_multipart_commands(self):
        # From stdin s3cmd always uses multipart (the size is unknown): 7 MiB in 5 MiB chunks.
        body = random_bytes(7 * 1024 * 1024, "stdin")
        proc = subprocess.run(["s3cmd", "-c", self.config, "--no-progress",
                               "--multipart-chunk-size-mb=5", "put", "-", self.uri("stdin.bin")],
                              input=body, capture_output=True, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr.decode(errors="replace"))
        head = self.s3.head_object(Bucket=self.bucket, Key="stdin.bin")
        self.assertEqual(head["ContentLength"], len(body))
        self.assertTrue(head["ETag"].endswith('-2"'), head["ETag"])
        self.s3cmd("get", self.uri("stdin.bin"), self.path("stdin.back"))
        self.assertEqual(read_file(self.path("stdin.back")), body)
        # modify: a copy onto itself with new headers; content and s3cmd's attributes survive.
        write_file(self.path("m.txt"), b"modify me\n")
        self.s3cmd("put", self.path("m.txt"), self.uri("m.txt"))
        self.s3cmd("modify", "--add-header=Cache-Control:max-age=9", "--mime-type=text/x-m",
                   self.uri("m.txt"))
        head = self.s3.head_object(Bucket=self.bucket, Key="m.txt")
        self.assertEqual((head["CacheControl"], head["ContentType"]), ("max-age=9", "text/x-m"))
        self.assertEqual(self.s3.get_object(Bucket=self.bucket, Key="m.txt")["Body"].read(),
                         b"modify me\n")
        # Bucket policy: public read, shown by info, removed by delpolicy.
        policy = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject"],
            "Resource": ["arn:aws:s3:::%s/*" % self.bucket]}]}
        write_file(self.path("policy.json"), json.dumps(policy).encode())
        url = "%s/%s/m.txt" % (self.server.s3_url, self.bucket)
        self.assertEqual(self.anonymous_get(url)[0], 403)
        self.s3cmd("setpolicy", self.path("policy.json"), self.uri())
        self.assertEqual(json.loads(self.s3.get_bucket_policy(Bucket=self.bucket)["Policy"]),
                         policy)
        self.assertIn("arn:aws:s3:::%s/*" % self.bucket, self.s3cmd("info", self.uri()))
        self.assertEqual(self.anonymous_get(url), (200, b"modify me\n"))
        self.s3cmd("delpolicy", self.uri())
        self.assertEqual(self.anonymous_get(url)[0], 403)
        self.assertIn("Policy:    none", self.s3cmd("info", self.uri()))
        # CORS: set from an XML file, shown by info, removed by delcors.
        write_file(self.path("cors.xml"), (
            b"<CORSConfiguration><CORSRule><AllowedOrigin>http://panel.example</AllowedOrigin>"
            b"<AllowedMethod>GET</AllowedMethod><MaxAgeSeconds>60</MaxAgeSeconds></CORSRule>"
            b"</CORSConfiguration>"))
        self.s3cmd("setcors", self.path("cors.xml"), self.uri())
        rules = self.s3.get_bucket_cors(Bucket=self.bucket)["CORSRules"]
        self.assertEqual((rules[0]["AllowedOrigins"], rules[0]["AllowedMethods"]),
                         (["http://panel.example"], ["GET"]))
        self.assertIn("http://panel.example", self.s3cmd("info", self.uri()))
        self.s3cmd("delcors", self.uri())
        self.assertIn("CORS:      none", self.s3cmd("info", self.uri()))
        # multipart / listmp / abortmp on an upload left open.
        part = random_bytes(5 * 1024 * 1024, "open-part")
        upload_id = self.s3.create_multipart_upload(Bucket=self.bucket, Key="open/up")["UploadId"]
        etag = self.s3.upload_part(Bucket=self.bucket, Key="open/up", UploadId=upload_id,
                                   PartNumber=1, Body=part)["ETag"]
        self.assertIn(upload_id, self.s3cmd("multipart", self.uri()))
        parts = self.s3cmd("listmp", self.uri("open/up"), upload_id)
        # "LastModified<tab>PartNumber<tab>ETag<tab>Size" lines.
        self.assertRegex(parts, r"(?m)^\S+\t1\t%s\t%d$" % (re.escape(etag), len(part)))
        self.s3cmd("abortmp", self.uri("open/up"), upload_id)
        self.assertEqual(self.s3.list_multipart_uploads(Bucket=self.bucket).get("Uploads", []), [])

    def anonymous_get(self, url):
        ctx = ssl.create_default_context(cafile=self.server.cert) if self.TLS else None
        try:
            with urllib.request.urlopen(url, context=ctx) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def test_bad_credentials_and_other_users(self):
        bad = self.write_config(self.server.access_key, "wrong" + self.server.secret_key[5:],
                                "s3cfg-bad-secret")
        self.s3cmd("ls", self.uri(), config=bad, expect_rc=EX_ACCESSDENIED)
        self.assertIn("SignatureDoesNotMatch", self.last_stderr)
        other = self.server.create_user_key("s3cmd-other-" + uuid.uuid4().hex[:6])
        cfg = self.write_config(other["access_key_id"], other["secret_access_key"], "s3cfg-other")
        self.s3cmd("ls", self.uri(), config=cfg, expect_rc=EX_ACCESSDENIED)
        self.assertIn("AccessDenied", self.last_stderr)
        write_file(self.path("x"), b"x")
        self.s3cmd("put", self.path("x"), self.uri("x"), config=cfg, expect_rc=EX_ACCESSDENIED)
        self.assertEqual(self.remote_keys(), {})


class S3cmdHttpTest(S3cmdBase, unittest.TestCase):
    TLS = False


class S3cmdHttpsTest(S3cmdBase, unittest.TestCase):
    TLS = True


if __name__ == "__main__":
    unittest.main()
