"""rclone (the Debian package; AWS SDK for Go underneath) against a real `sovai server`, over HTTP
and HTTPS, with `provider = Other` and path-style addressing: mkdir, copy/sync of a tree that
includes a 12 MiB file (multipart with 5 MiB chunks), check (sizes and MD5s, then --download for
the bytes), ls/lsf/lsjson, cat/rcat, copyto/moveto (server-side copy, multipart above the copy
cutoff), delete with filters, purge, mtime updates in place, versioning (--s3-versions,
cleanup-hidden). Round trips are checked byte for byte; boto3 is the independent observer of what
was stored."""

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import unittest
import uuid

from botocore.exceptions import ClientError

from sovai_fixture import empty_and_delete_bucket, random_bytes, write_file, read_file, tree_files, REGION, SovaiServer

RCLONE_CONFIG = """[sovai]
type = s3
provider = Other
access_key_id = {access_key}
secret_access_key = {secret_key}
endpoint = {endpoint}
region = {region}
location_constraint = {region}
force_path_style = true
"""

# Multipart above 5 MiB, in 5 MiB parts; no retries, so a server error is never papered over.
RCLONE_FLAGS = ["--s3-chunk-size", "5M", "--s3-upload-cutoff", "5M", "--retries", "1",
                "--low-level-retries", "1", "--stats", "0"]

MIB = 1024 * 1024


def multipart_etag(data, part_size_bytes):
    parts = [data[i:i + part_size_bytes] for i in range(0, len(data), part_size_bytes)]
    digest = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    return '"%s-%d"' % (digest, len(parts))


class S3RcloneBase:
    TLS = False

    @classmethod
    def setUpClass(cls):
        cls.server = SovaiServer(tls=cls.TLS).start()
        cls.s3 = cls.server.boto3_client()
        cls.config = cls.write_config(cls.server.access_key, cls.server.secret_key, "rclone.conf")

    @classmethod
    def write_config(cls, access_key, secret_key, name):
        path = os.path.join(cls.server.tmp, name)
        with open(path, "w") as f:
            f.write(RCLONE_CONFIG.format(access_key=access_key, secret_key=secret_key,
                                         endpoint=cls.server.s3_url, region=REGION))
        return path

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    def setUp(self):
        self.bucket = "rc-" + uuid.uuid4().hex[:12]
        self.work = tempfile.mkdtemp(prefix="rclone-", dir=self.server.tmp)
        self.rclone("mkdir", self.remote())
        self.assertEqual(self.s3.get_bucket_location(Bucket=self.bucket)["LocationConstraint"],
                         REGION)

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)
        empty_and_delete_bucket(self.s3, self.bucket)

    # --- Helpers ---------------------------------------------------------------------------------

    def rclone(self, *args, expect_rc=0, input=None, config=None):
        """Runs `rclone --config CONFIG [--ca-cert CERT] ARGS` without AWS_CA_BUNDLE in the
        environment (rclone would add it to --ca-cert's pool and log a warning); returns stdout.
        Fails the test, with rclone's stderr and the server log, when the exit status is not
        expect_rc."""
        cmd = ["rclone", "--config", config or self.config] + RCLONE_FLAGS
        if self.TLS:
            cmd += ["--ca-cert", self.server.cert]
        cmd += list(args)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")
               and not k.startswith("RCLONE_")}
        proc = subprocess.run(cmd, input=input, capture_output=True, env=env, cwd=self.work,
                              timeout=300)
        self.last_stderr = proc.stderr.decode(errors="replace")
        if proc.returncode != expect_rc:
            self.fail("rclone %s\nexit %d (want %d)\nstdout: %s\nstderr: %s\nserver log:\n%s" % (
                " ".join(args), proc.returncode, expect_rc, proc.stdout.decode(errors="replace"),
                self.last_stderr[-3000:], self.server.server_log()))
        return proc.stdout.decode()

    def remote(self, path=""):
        return "sovai:%s/%s" % (self.bucket, path)

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

    def make_tree(self, root):
        tree = {
            "top.txt": b"top level\n",
            "empty.dat": b"",
            "big/twelve.bin": random_bytes(12 * MIB, "twelve"),
            "docs/read me.txt": b"a file with spaces in its name\n",
            "docs/guide/intro.md": b"# intro\n" * 40,
            "docs/guide/deep/er/leaf.bin": random_bytes(200 * 1024, "leaf"),
            "data/\u00e9t\u00e9 + plus.csv": b"a,b\n1,2\n",
        }
        for rel, data in tree.items():
            write_file(os.path.join(root, *rel.split("/")), data)
        return tree

    # --- Tests -----------------------------------------------------------------------------------

    def test_copy_check_and_listings(self):
        src = self.path("src")
        tree = self.make_tree(src)
        self.rclone("copy", src, self.remote("tree"))
        self.assertEqual(self.remote_keys("tree/"),
                         {"tree/" + k: len(v) for k, v in tree.items()})
        # 12 MiB in 5 MiB chunks: three parts, and rclone's whole-file MD5 in the metadata.
        big = tree["big/twelve.bin"]
        head = self.s3.head_object(Bucket=self.bucket, Key="tree/big/twelve.bin")
        self.assertEqual(head["ETag"], multipart_etag(big, 5 * MIB))
        self.assertEqual(self.s3.list_multipart_uploads(Bucket=self.bucket).get("Uploads", []), [])
        small = self.s3.head_object(Bucket=self.bucket, Key="tree/docs/read me.txt")
        self.assertEqual(small["ETag"], '"%s"' % hashlib.md5(tree["docs/read me.txt"]).hexdigest())
        # check: sizes and MD5 hashes (from the ETag, or the metadata for multipart).
        self.rclone("check", src, self.remote("tree"))
        self.assertIn("%d matching files" % len(tree), self.last_stderr)
        # check --download: every byte read back and compared.
        self.rclone("check", "--download", src, self.remote("tree"))
        self.assertIn("0 differences found", self.last_stderr)
        # ls: "size path" for every object, recursively.
        listed = {}
        for line in self.rclone("ls", self.remote("tree")).splitlines():
            size, name = line.strip().split(" ", 1)
            listed[name] = int(size)
        self.assertEqual(listed, {k: len(v) for k, v in tree.items()})
        # lsf: one level, directories with a trailing slash.
        self.assertEqual(sorted(self.rclone("lsf", self.remote("tree")).splitlines()),
                         ["big/", "data/", "docs/", "empty.dat", "top.txt"])
        self.assertEqual(sorted(self.rclone("lsf", "-R", "--files-only",
                                            self.remote("tree")).splitlines()), sorted(tree))
        # lsjson --hash: rclone's MD5 for every file, the multipart one included.
        entries = json.loads(self.rclone("lsjson", "-R", "--hash", "--files-only",
                                         self.remote("tree")))
        self.assertEqual({e["Path"]: e["Hashes"]["md5"] for e in entries},
                         {k: hashlib.md5(v).hexdigest() for k, v in tree.items()})
        # Copy back down and compare every file.
        dst = self.path("dst")
        self.rclone("copy", self.remote("tree"), dst)
        self.assertEqual(tree_files(dst), tree)
        # Server-side copy above --s3-copy-cutoff: UploadPartCopy in 5 MiB ranges, the same
        # parts, so the same ETag; rclone's MD5 metadata comes along.
        self.rclone("copyto", "--s3-copy-cutoff", "5M", self.remote("tree/big/twelve.bin"),
                    self.remote("copy/twelve.bin"))
        copy = self.s3.get_object(Bucket=self.bucket, Key="copy/twelve.bin")
        self.assertEqual(copy["ETag"], multipart_etag(big, 5 * MIB))
        self.assertEqual(hashlib.sha256(copy["Body"].read()).digest(),
                         hashlib.sha256(big).digest())
        self.assertEqual(self.rclone("md5sum", self.remote("copy")).split(),
                         [hashlib.md5(big).hexdigest(), "twelve.bin"])
        # A second copy transfers nothing.
        self.rclone("copy", "-v", src, self.remote("tree"))
        self.assertNotIn("Copied (new)", self.last_stderr)
        self.assertNotIn("Copied (replaced", self.last_stderr)

    def test_sync_mirrors_changes_and_deletions(self):
        src = self.path("src")
        self.make_tree(src)
        self.rclone("sync", src, self.remote("tree"))
        # Same size, different content (caught by the hash), a removal and an addition.
        write_file(os.path.join(src, "top.txt"), b"TOP LEVEL\n")
        os.remove(os.path.join(src, "docs", "read me.txt"))
        write_file(os.path.join(src, "docs", "new file.txt"), b"new\n")
        write_file(os.path.join(src, "big", "twelve.bin"), random_bytes(12 * MIB, "changed"))
        self.rclone("sync", "-v", "--checksum", src, self.remote("tree"))
        self.assertIn("Deleted", self.last_stderr)
        want = tree_files(src)
        self.assertEqual(self.remote_keys("tree/"), {"tree/" + k: len(v) for k, v in want.items()})
        self.rclone("check", "--download", src, self.remote("tree"))
        self.assertEqual(
            hashlib.sha256(self.s3.get_object(Bucket=self.bucket,
                                              Key="tree/big/twelve.bin")["Body"].read()).digest(),
            hashlib.sha256(want["big/twelve.bin"]).digest())
        # A tampered object makes check fail (and say which file).
        self.s3.put_object(Bucket=self.bucket, Key="tree/top.txt", Body=b"tampered!\n")
        self.rclone("check", src, self.remote("tree"), expect_rc=1)
        self.assertIn("top.txt", self.last_stderr)
        self.assertIn("1 differences found", self.last_stderr)
        # Sync down mirrors too.
        dst = self.path("dst")
        write_file(os.path.join(dst, "stale.txt"), b"stale")
        self.rclone("sync", self.remote("tree"), dst)
        want["top.txt"] = b"tampered!\n"
        self.assertEqual(tree_files(dst), want)

    def test_cat_rcat_copyto_moveto_delete_purge(self):
        payload = random_bytes(6 * MIB + 123, "rcat")  # streamed: rclone uses multipart
        self.rclone("rcat", self.remote("streamed.bin"), input=payload)
        self.assertEqual(self.s3.get_object(Bucket=self.bucket,
                                            Key="streamed.bin")["Body"].read(), payload)
        out = subprocess.run(
            ["rclone", "--config", self.config] + RCLONE_FLAGS +
            (["--ca-cert", self.server.cert] if self.TLS else []) +
            ["cat", self.remote("streamed.bin")],
            capture_output=True, timeout=300,
            env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")})
        self.assertEqual(out.returncode, 0, out.stderr.decode(errors="replace"))
        self.assertEqual(out.stdout, payload)
        self.rclone("rcat", self.remote("small.txt"), input=b"small\n")
        self.assertEqual(self.rclone("cat", "--offset", "1", "--count", "3",
                                     self.remote("small.txt")), "mal")
        # Server-side copy and move.
        self.rclone("copyto", self.remote("small.txt"), self.remote("dir/copy.txt"))
        self.rclone("moveto", self.remote("dir/copy.txt"), self.remote("dir/moved.txt"))
        self.assertEqual(self.remote_keys(),
                         {"streamed.bin": len(payload), "small.txt": 6, "dir/moved.txt": 6})
        self.assertEqual(self.s3.get_object(Bucket=self.bucket,
                                            Key="dir/moved.txt")["Body"].read(), b"small\n")
        # md5sum lines are "<32 hex or blanks>  <path>". A streamed upload has no MD5 (rclone
        # learns it only at the end, after the multipart upload began): rclone prints blanks.
        md5sums = {line[34:]: line[:32].strip()
                   for line in self.rclone("md5sum", self.remote()).splitlines()}
        self.assertEqual(md5sums, {"streamed.bin": "",
                                   "small.txt": hashlib.md5(b"small\n").hexdigest(),
                                   "dir/moved.txt": hashlib.md5(b"small\n").hexdigest()})
        self.assertEqual(self.s3.head_object(Bucket=self.bucket, Key="streamed.bin")["ETag"],
                         multipart_etag(payload, 5 * MIB))
        size = json.loads(self.rclone("size", "--json", self.remote()))
        self.assertEqual((size["count"], size["bytes"]), (3, len(payload) + 12))
        # delete with a filter, then purge removes the rest and the bucket.
        self.rclone("delete", "--include", "*.txt", self.remote())
        self.assertEqual(self.remote_keys(), {"streamed.bin": len(payload)})
        self.rclone("purge", self.remote())
        with self.assertRaises(ClientError) as e:
            self.s3.head_bucket(Bucket=self.bucket)
        self.assertEqual(e.exception.response["ResponseMetadata"]["HTTPStatusCode"], 404)
        # The bucket is gone: rclone maps NoSuchBucket to "directory not found" (exit 3). (A
        # missing key is just an empty "directory" to rclone, so it has no error to check.)
        self.rclone("ls", self.remote(), expect_rc=3)
        self.assertIn("directory not found", self.last_stderr)
        self.rclone("mkdir", self.remote())

    def test_modtime_update_and_versions(self):
        # rclone keeps the file's mtime in X-Amz-Meta-Mtime. Same content, new mtime: sync
        # updates the metadata in place (CopyObject onto itself, REPLACE) without re-uploading.
        write_file(self.path("src", "t.txt"), b"same bytes\n")
        os.utime(self.path("src", "t.txt"), (1_600_000_000, 1_600_000_000))
        self.rclone("sync", self.path("src"), self.remote())
        self.assertEqual(self.s3.head_object(Bucket=self.bucket, Key="t.txt")["Metadata"]["mtime"],
                         "1600000000")
        os.utime(self.path("src", "t.txt"), (1_700_000_000, 1_700_000_000))
        self.rclone("sync", "-v", self.path("src"), self.remote())
        self.assertIn("Updated modification time in destination", self.last_stderr)
        self.assertNotIn("Copied", self.last_stderr)
        head = self.s3.head_object(Bucket=self.bucket, Key="t.txt")
        self.assertEqual(head["Metadata"]["mtime"], "1700000000")
        self.assertEqual(self.s3.get_object(Bucket=self.bucket, Key="t.txt")["Body"].read(),
                         b"same bytes\n")
        modtimes = json.loads(self.rclone("lsjson", self.remote()))
        self.assertEqual([(e["Path"], e["ModTime"][:19]) for e in modtimes],
                         [("t.txt", "2023-11-14T22:13:20")])
        # Versioning through rclone's backend command; --s3-versions lists old versions
        # (ListObjectVersions) with a -vTIMESTAMP suffix, and reads them back.
        self.rclone("backend", "versioning", self.remote(), "Enabled")
        self.assertEqual(self.s3.get_bucket_versioning(Bucket=self.bucket)["Status"], "Enabled")
        self.assertEqual(self.rclone("backend", "versioning", self.remote()).strip(), "Enabled")
        self.rclone("rcat", self.remote("t.txt"), input=b"second version\n")
        names = self.rclone("lsf", "--s3-versions", self.remote()).splitlines()
        self.assertEqual(len(names), 2, names)
        self.assertIn("t.txt", names)
        old = [n for n in names if n != "t.txt"][0]
        self.assertRegex(old, r"^t-v\d{4}-\d{2}-\d{2}-\d{6}-\d{3}\.txt$")
        self.assertEqual(self.rclone("cat", "--s3-versions", self.remote(old)), "same bytes\n")
        self.assertEqual(self.rclone("cat", self.remote("t.txt")), "second version\n")
        # rclone delete on a versioned bucket leaves a delete marker; cleanup-hidden removes
        # the hidden versions.
        self.rclone("delete", self.remote())
        self.assertEqual(self.rclone("lsf", self.remote()), "")
        versions = self.s3.list_object_versions(Bucket=self.bucket)
        self.assertEqual(len(versions["Versions"]), 2)
        self.assertEqual(len(versions["DeleteMarkers"]), 1)
        self.rclone("backend", "cleanup-hidden", self.remote())
        versions = self.s3.list_object_versions(Bucket=self.bucket)
        self.assertEqual(versions.get("Versions", []), [])

    def test_bad_credentials_and_other_users(self):
        bad = self.write_config(self.server.access_key, "wrong" + self.server.secret_key[5:],
                                "rclone-bad.conf")
        self.rclone("lsf", self.remote(), config=bad, expect_rc=1)
        self.assertIn("SignatureDoesNotMatch", self.last_stderr)
        other = self.server.create_user_key("rclone-other-" + uuid.uuid4().hex[:6])
        cfg = self.write_config(other["access_key_id"], other["secret_access_key"],
                                "rclone-other.conf")
        self.rclone("lsf", self.remote(), config=cfg, expect_rc=1)
        self.assertIn("AccessDenied", self.last_stderr)
        self.rclone("rcat", self.remote("x"), config=cfg, input=b"x", expect_rc=1)
        self.assertEqual(self.remote_keys(), {})


class S3RcloneHttpTest(S3RcloneBase, unittest.TestCase):
    TLS = False


class S3RcloneHttpsTest(S3RcloneBase, unittest.TestCase):
    TLS = True


if __name__ == "__main__":
    unittest.main()
