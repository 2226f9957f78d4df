"""Crash safety of the object store: many concurrent PUTs and multipart completions, the server
killed with SIGKILL at random moments and restarted on the same data directory. Every
acknowledged object must read back byte-identical; an object whose write was not acknowledged
is either absent or complete (never partial); no temporary files remain after the restart."""

import hashlib
import os
import random
import threading
import time
import unittest

from botocore.exceptions import BotoCoreError, ClientError

from sovai_fixture import REGION, SovaiServer

BUCKET = "crash"


def content(key, generation):
    """Deterministic bytes for (key, generation); sizes span inline and file-backed objects."""
    rng = random.Random("%s/%d" % (key, generation))
    size = rng.choice([0, 1, 4096, 100_000, 300_000, 1_500_000])
    return rng.randbytes(size)


def acknowledged(answer):
    """Whether a write's answer is the server's whole success response, which always carries the
    ETag. A connection cut by the kill while the client reads the response head can reach botocore
    as a 2xx without the rest of its headers (http.client ends a header block at EOF); every run
    sees some such answers to UploadPart. The client never got the server's answer, so the test
    does not count them as acknowledged (the object may then be absent or complete)."""
    return "ETag" in answer


class Workload:
    """Writers that record what was acknowledged and what was in flight when the server died."""

    def __init__(self, server, round_no):
        self.s3 = server.boto3_client()
        self.round = round_no
        self.lock = threading.Lock()
        self.acked = {}      # key -> sha256 of the acknowledged content
        self.possible = {}   # key -> set of sha256 the key may hold (acked or in flight)
        self.stop = threading.Event()

    def note(self, key, digest, acked):
        with self.lock:
            self.possible.setdefault(key, set()).add(digest)
            if acked:
                self.acked[key] = digest

    def put_loop(self, worker):
        n = 0
        while not self.stop.is_set():
            # Half the writes go to a small set of keys that are overwritten again and again.
            if n % 2:
                key = "r%d/shared-%d" % (self.round, n % 7)
            else:
                key = "r%d/w%d/%d" % (self.round, worker, n)
            body = content(key, n)
            digest = hashlib.sha256(body).hexdigest()
            self.note(key, digest, acked=False)
            try:
                answer = self.s3.put_object(Bucket=BUCKET, Key=key, Body=body)
            except (BotoCoreError, ClientError):
                return  # the server is gone
            if not acknowledged(answer):
                return
            self.note(key, digest, acked=True)
            n += 1

    def multipart_loop(self, worker):
        n = 0
        while not self.stop.is_set():
            key = "r%d/mp%d/%d" % (self.round, worker, n)
            parts = [os.urandom(5 * 1024 * 1024), os.urandom(123_456)]
            digest = hashlib.sha256(b"".join(parts)).hexdigest()
            self.note(key, digest, acked=False)
            try:
                up = self.s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
                etags = []
                for i, p in enumerate(parts, 1):
                    answer = self.s3.upload_part(Bucket=BUCKET, Key=key, UploadId=up,
                                                 PartNumber=i, Body=p)
                    if not acknowledged(answer):
                        return
                    etags.append(answer["ETag"])
                answer = self.s3.complete_multipart_upload(
                    Bucket=BUCKET, Key=key, UploadId=up,
                    MultipartUpload={"Parts": [{"PartNumber": i, "ETag": e}
                                               for i, e in enumerate(etags, 1)]})
            except (BotoCoreError, ClientError):
                return
            if not acknowledged(answer):
                return
            self.note(key, digest, acked=True)
            n += 1


class CrashTest(unittest.TestCase):
    ROUNDS = int(os.environ.get("SOVAI_CRASH_ROUNDS", "6"))

    def test_sigkill_during_writes_loses_nothing_acknowledged(self):
        server = SovaiServer().start()
        self.addCleanup(server.cleanup)
        server.boto3_client().create_bucket(
            Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
        rng = random.Random(1234)
        history = []
        for round_no in range(self.ROUNDS):
            work = Workload(server, round_no)
            threads = [threading.Thread(target=work.put_loop, args=(i,)) for i in range(12)]
            threads += [threading.Thread(target=work.multipart_loop, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            time.sleep(rng.uniform(0.5, 2.5))
            server.kill()
            work.stop.set()
            for t in threads:
                t.join(timeout=60)
            history.append(work)
            server.start()  # same data directory, new ports

            tmp = os.path.join(server.data_dir, "objstore", "tmp")
            self.assertEqual(os.listdir(tmp), [], "temporary files survived the restart")
            s3 = server.boto3_client()
            listed = {}
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
                for obj in page.get("Contents", []):
                    listed[obj["Key"]] = obj["Size"]
            for past in history:
                self.assertGreater(len(past.acked), 0, "the workload made no progress")
                for key, digest in past.acked.items():
                    self.assertIn(key, listed, "acknowledged object lost: " + key)
                for key, possible in past.possible.items():
                    if key not in listed:
                        self.assertNotIn(key, past.acked)
                        continue
                    body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
                    got = hashlib.sha256(body).hexdigest()
                    self.assertIn(got, possible, "object %s holds bytes never written" % key)
                    if key in past.acked and not key.startswith("r%d/shared" % past.round):
                        self.assertEqual(got, past.acked[key], "acknowledged object changed: " + key)
            # Nothing unexpected became visible either.
            known = set()
            for past in history:
                known |= set(past.possible)
            self.assertEqual(set(listed) - known, set())
        metrics = server.metrics()
        self.assertIn("sovai_objstore_corruptions_total 0", metrics)


if __name__ == "__main__":
    unittest.main()
