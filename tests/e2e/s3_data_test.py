"""Object Lock, GetObjectAttributes, multipart checksums and lifecycle rules with boto3 and the
`aws` CLI against a real `sovai server` (issue 29): each as AWS documents it, with the malformed
bodies and refused deletes a real client meets. Lifecycle runs with a 1-second "day"
(--s3-lifecycle-day-seconds) and sweeps on demand (POST /internal/objstore/lifecycle/sweep)."""

import base64
import datetime
import hashlib
import json
import os
import subprocess
import time
import unittest
import urllib.request
import uuid
import zlib

from botocore.exceptions import ClientError

import s3_answers_test  # its signed(); the module, so that its tests are not collected here
from sovai_fixture import empty_and_delete_bucket, REGION, SovaiServer

MIB = 1024 * 1024


def error_of(e):
    return (e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"])


def future(days):
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=days)


class S3DataTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = SovaiServer(extra_args=["--s3-lifecycle-day-seconds", "1",
                                             "--s3-lifecycle-interval", "3600"]).start()
        cls.s3 = cls.server.boto3_client()

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    def setUp(self):
        self.bucket = "data-" + uuid.uuid4().hex[:12]
        self.buckets = [self.bucket]
        self.s3.create_bucket(Bucket=self.bucket,
                              CreateBucketConfiguration={"LocationConstraint": REGION})

    def tearDown(self):
        for bucket in self.buckets:
            try:
                # GOVERNANCE versions go with the bypass; COMPLIANCE ones stay with the server.
                for page in self.s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
                    for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
                        try:
                            self.s3.put_object_legal_hold(Bucket=bucket, Key=v["Key"],
                                                          VersionId=v["VersionId"],
                                                          LegalHold={"Status": "OFF"})
                        except ClientError:
                            pass
                        try:
                            self.s3.delete_object(Bucket=bucket, Key=v["Key"],
                                                  VersionId=v["VersionId"],
                                                  BypassGovernanceRetention=True)
                        except ClientError:
                            pass
                empty_and_delete_bucket(self.s3, bucket)
            except ClientError:
                pass

    def assert_error(self, expected, call, *args, **kwargs):
        with self.assertRaises(ClientError) as e:
            call(*args, **kwargs)
        self.assertEqual(error_of(e.exception), expected, e.exception.response)
        return e.exception.response

    def locked_bucket(self):
        name = "lock-" + uuid.uuid4().hex[:12]
        self.s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True,
                              CreateBucketConfiguration={"LocationConstraint": REGION})
        self.buckets.append(name)
        return name

    def sweep(self):
        req = urllib.request.Request(self.server.api_url + "/internal/objstore/lifecycle/sweep",
                                     method="POST", data=b"",
                                     headers={"Authorization": "Bearer " +
                                              self.server.admin_token()})
        with urllib.request.urlopen(req) as r:
            return json.loads(r.read())

    # (status, body) of a SigV4-signed raw request, for bodies boto3 would not send.
    raw = s3_answers_test.S3AnswersTest.signed

    # --- Object Lock ---------------------------------------------------------------------------

    def test_a_lock_bucket_is_versioned_for_good_and_has_its_configuration(self):
        bucket = self.locked_bucket()
        self.assertEqual(self.s3.get_bucket_versioning(Bucket=bucket)["Status"], "Enabled")
        self.assertEqual(self.s3.get_object_lock_configuration(Bucket=bucket)
                         ["ObjectLockConfiguration"], {"ObjectLockEnabled": "Enabled"})
        self.assert_error((409, "InvalidBucketState"), self.s3.put_bucket_versioning,
                          Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
        self.s3.put_object_lock_configuration(
            Bucket=bucket, ObjectLockConfiguration={
                "ObjectLockEnabled": "Enabled",
                "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}})
        got = self.s3.get_object_lock_configuration(Bucket=bucket)["ObjectLockConfiguration"]
        self.assertEqual(got["Rule"]["DefaultRetention"], {"Mode": "GOVERNANCE", "Days": 1})
        # The default applies to a new object.
        put = self.s3.put_object(Bucket=bucket, Key="k", Body=b"audit record")
        head = self.s3.head_object(Bucket=bucket, Key="k")
        self.assertEqual(head["ObjectLockMode"], "GOVERNANCE")
        self.assertGreater(head["ObjectLockRetainUntilDate"], future(0.9))
        self.assertLess(head["ObjectLockRetainUntilDate"], future(1.1))
        self.assert_error((403, "AccessDenied"), self.s3.delete_object, Bucket=bucket, Key="k",
                          VersionId=put["VersionId"])
        # A plain delete is a delete marker; the locked version stays.
        self.assertTrue(self.s3.delete_object(Bucket=bucket, Key="k")["DeleteMarker"])
        self.assertEqual(self.s3.get_object(Bucket=bucket, Key="k", VersionId=put["VersionId"])
                         ["Body"].read(), b"audit record")
        self.s3.delete_object(Bucket=bucket, Key="k", VersionId=put["VersionId"],
                              BypassGovernanceRetention=True)

    def test_retention_modes_bypass_and_legal_hold(self):
        bucket = self.locked_bucket()
        gov = self.s3.put_object(Bucket=bucket, Key="gov", Body=b"g", ObjectLockMode="GOVERNANCE",
                                 ObjectLockRetainUntilDate=future(2))
        comp = self.s3.put_object(Bucket=bucket, Key="comp", Body=b"c",
                                  ObjectLockMode="COMPLIANCE",
                                  ObjectLockRetainUntilDate=datetime.datetime.now(
                                      datetime.timezone.utc) + datetime.timedelta(seconds=4))
        r = self.s3.get_object_retention(Bucket=bucket, Key="gov")["Retention"]
        self.assertEqual(r["Mode"], "GOVERNANCE")
        # GOVERNANCE: shortening needs the bypass; extending does not.
        self.assert_error((403, "AccessDenied"), self.s3.put_object_retention, Bucket=bucket,
                          Key="gov", Retention={"Mode": "GOVERNANCE",
                                                "RetainUntilDate": future(1)})
        self.s3.put_object_retention(Bucket=bucket, Key="gov", BypassGovernanceRetention=True,
                                     Retention={"Mode": "GOVERNANCE",
                                                "RetainUntilDate": future(1)})
        self.s3.put_object_retention(Bucket=bucket, Key="gov",
                                     Retention={"Mode": "GOVERNANCE",
                                                "RetainUntilDate": future(3)})
        # COMPLIANCE: never shortened, not even with the bypass, never deleted before its date.
        self.assert_error((403, "AccessDenied"), self.s3.put_object_retention, Bucket=bucket,
                          Key="comp", BypassGovernanceRetention=True,
                          Retention={"Mode": "GOVERNANCE", "RetainUntilDate": future(1)})
        self.assert_error((403, "AccessDenied"), self.s3.delete_object, Bucket=bucket,
                          Key="comp", VersionId=comp["VersionId"], BypassGovernanceRetention=True)
        # DeleteObjects reports the refusal per key.
        out = self.s3.delete_objects(Bucket=bucket, Delete={"Objects": [
            {"Key": "gov", "VersionId": gov["VersionId"]}]})
        self.assertEqual(out["Errors"][0]["Code"], "AccessDenied")
        # A legal hold stops even the bypass, until it is released.
        self.s3.put_object_legal_hold(Bucket=bucket, Key="gov", LegalHold={"Status": "ON"})
        self.assertEqual(self.s3.get_object_legal_hold(Bucket=bucket, Key="gov")
                         ["LegalHold"]["Status"], "ON")
        self.assertEqual(self.s3.head_object(Bucket=bucket, Key="gov")
                         ["ObjectLockLegalHoldStatus"], "ON")
        self.assert_error((403, "AccessDenied"), self.s3.delete_object, Bucket=bucket, Key="gov",
                          VersionId=gov["VersionId"], BypassGovernanceRetention=True)
        self.s3.put_object_legal_hold(Bucket=bucket, Key="gov", LegalHold={"Status": "OFF"})
        self.s3.delete_object(Bucket=bucket, Key="gov", VersionId=gov["VersionId"],
                              BypassGovernanceRetention=True)
        # Once its date has passed, a COMPLIANCE version may go.
        time.sleep(4.5)
        self.s3.delete_object(Bucket=bucket, Key="comp", VersionId=comp["VersionId"])

    def test_lock_errors_are_client_errors(self):
        bucket = self.locked_bucket()
        self.s3.put_object(Bucket=bucket, Key="k", Body=b"x")
        self.assert_error((404, "NoSuchObjectLockConfiguration"), self.s3.get_object_retention,
                          Bucket=bucket, Key="k")
        self.assert_error((400, "InvalidArgument"), self.s3.put_object, Bucket=bucket, Key="k",
                          Body=b"x", ObjectLockMode="GOVERNANCE",
                          ObjectLockRetainUntilDate=future(-1))
        self.assert_error((400, "InvalidArgument"), self.s3.put_object_retention, Bucket=bucket,
                          Key="k", Retention={"Mode": "GOVERNANCE",
                                              "RetainUntilDate": future(-1)})
        self.assert_error((404, "NoSuchKey"), self.s3.put_object_retention, Bucket=bucket,
                          Key="missing", Retention={"Mode": "GOVERNANCE",
                                                    "RetainUntilDate": future(1)})
        self.assert_error((400, "InvalidRetentionPeriod"), self.s3.put_object_lock_configuration,
                          Bucket=bucket, ObjectLockConfiguration={
                              "ObjectLockEnabled": "Enabled",
                              "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 0}}})
        for body in [b"<Retention><Mode>FOREVER</Mode><RetainUntilDate>2030-01-01T00:00:00Z"
                     b"</RetainUntilDate></Retention>", b"<Retention><Mode>", b"\x00\xff"]:
            status, answer = self.raw("PUT", "/%s/k" % bucket, body, query="retention")
            self.assertEqual(status, 400, answer)
            self.assertIn(b"<Code>MalformedXML</Code>", answer)
        status, answer = self.raw("PUT", "/%s/k" % bucket, b"<LegalHold><Status>maybe</Status>"
                                  b"</LegalHold>", query="legal-hold")
        self.assertEqual(status, 400, answer)
        self.assertEqual(self.s3.get_object(Bucket=bucket, Key="k")["Body"].read(), b"x")
        # Without Object Lock on the bucket: refused, never ignored.
        self.assert_error((400, "InvalidRequest"), self.s3.put_object, Bucket=self.bucket,
                          Key="k", Body=b"x", ObjectLockLegalHoldStatus="ON")
        self.assert_error((400, "InvalidRequest"), self.s3.put_object_retention,
                          Bucket=self.bucket, Key="k",
                          Retention={"Mode": "GOVERNANCE", "RetainUntilDate": future(1)})
        self.assert_error((409, "InvalidBucketState"), self.s3.put_object_lock_configuration,
                          Bucket=self.bucket,
                          ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})
        self.assert_error((404, "ObjectLockConfigurationNotFoundError"),
                          self.s3.get_object_lock_configuration, Bucket=self.bucket)
        missing = "missing-" + uuid.uuid4().hex[:8]
        self.assert_error((404, "NoSuchBucket"), self.s3.get_object_retention, Bucket=missing,
                          Key="k")
        self.assert_error((404, "NoSuchBucket"), self.s3.put_object_lock_configuration,
                          Bucket=missing, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})

    # --- GetObjectAttributes and multipart checksums -------------------------------------------

    def multipart(self, key, algorithm, checksum_type, parts):
        up = self.s3.create_multipart_upload(Bucket=self.bucket, Key=key,
                                             ChecksumAlgorithm=algorithm,
                                             ChecksumType=checksum_type)
        self.assertEqual(up["ChecksumType"], checksum_type)
        done = []
        for n, data in enumerate(parts, 1):
            p = self.s3.upload_part(Bucket=self.bucket, Key=key, UploadId=up["UploadId"],
                                    PartNumber=n, Body=data, ChecksumAlgorithm=algorithm)
            done.append({"PartNumber": n, "ETag": p["ETag"],
                         "Checksum" + algorithm: p["Checksum" + algorithm]})
        return up["UploadId"], done

    def test_full_object_crc_multipart_upload(self):
        parts = [os.urandom(5 * MIB), os.urandom(1234)]
        whole = b"".join(parts)
        crc = base64.b64encode(zlib.crc32(whole).to_bytes(4, "big")).decode()
        upload_id, done = self.multipart("full", "CRC32", "FULL_OBJECT", parts)
        bad = base64.b64encode((zlib.crc32(whole) ^ 1).to_bytes(4, "big")).decode()
        wrong_part = [dict(done[0], ChecksumCRC32=bad), done[1]]
        self.assert_error((400, "InvalidPart"), self.s3.complete_multipart_upload,
                          Bucket=self.bucket, Key="full", UploadId=upload_id,
                          MultipartUpload={"Parts": wrong_part})
        self.assert_error((400, "BadDigest"), self.s3.complete_multipart_upload,
                          Bucket=self.bucket, Key="full", UploadId=upload_id,
                          MultipartUpload={"Parts": done}, ChecksumCRC32=bad,
                          ChecksumType="FULL_OBJECT")
        out = self.s3.complete_multipart_upload(
            Bucket=self.bucket, Key="full", UploadId=upload_id, MultipartUpload={"Parts": done},
            ChecksumCRC32=crc, ChecksumType="FULL_OBJECT")
        self.assertEqual((out["ChecksumCRC32"], out["ChecksumType"]), (crc, "FULL_OBJECT"))
        head = self.s3.head_object(Bucket=self.bucket, Key="full", ChecksumMode="ENABLED")
        self.assertEqual((head["ChecksumCRC32"], head["ChecksumType"]), (crc, "FULL_OBJECT"))
        got = self.s3.get_object(Bucket=self.bucket, Key="full", ChecksumMode="ENABLED")
        self.assertEqual(got["Body"].read(), whole)  # botocore verifies the full CRC too

    def test_composite_sha256_and_object_attributes_with_parts(self):
        parts = [os.urandom(5 * MIB), os.urandom(5 * MIB), b"tail"]
        upload_id, done = self.multipart("comp", "SHA256", "COMPOSITE", parts)
        out = self.s3.complete_multipart_upload(Bucket=self.bucket, Key="comp",
                                                UploadId=upload_id,
                                                MultipartUpload={"Parts": done})
        composite = base64.b64encode(hashlib.sha256(
            b"".join(hashlib.sha256(p).digest() for p in parts)).digest()).decode() + "-3"
        self.assertEqual(out["ChecksumSHA256"], composite)
        attrs = self.s3.get_object_attributes(
            Bucket=self.bucket, Key="comp", MaxParts=2,
            ObjectAttributes=["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"])
        self.assertEqual(attrs["ETag"], out["ETag"].strip('"'))
        self.assertEqual(attrs["ObjectSize"], sum(map(len, parts)))
        self.assertEqual(attrs["StorageClass"], "STANDARD")
        self.assertEqual(attrs["Checksum"]["ChecksumSHA256"], composite)
        self.assertEqual(attrs["Checksum"]["ChecksumType"], "COMPOSITE")
        object_parts = attrs["ObjectParts"]
        self.assertEqual((object_parts["TotalPartsCount"], object_parts["IsTruncated"],
                          object_parts["NextPartNumberMarker"]), (3, True, 2))
        self.assertEqual([(p["PartNumber"], p["Size"], p["ChecksumSHA256"])
                          for p in object_parts["Parts"]],
                         [(n, len(parts[n - 1]),
                           base64.b64encode(hashlib.sha256(parts[n - 1]).digest()).decode())
                          for n in (1, 2)])
        rest = self.s3.get_object_attributes(Bucket=self.bucket, Key="comp", MaxParts=2,
                                             PartNumberMarker=2, ObjectAttributes=["ObjectParts"])
        self.assertEqual([p["PartNumber"] for p in rest["ObjectParts"]["Parts"]], [3])
        self.assertFalse(rest["ObjectParts"]["IsTruncated"])
        # A part read returns that part's checksum.
        part = self.s3.head_object(Bucket=self.bucket, Key="comp", PartNumber=3,
                                   ChecksumMode="ENABLED")
        self.assertEqual(part["ChecksumSHA256"],
                         base64.b64encode(hashlib.sha256(b"tail").digest()).decode())

    def test_checksum_types_s3_refuses_and_attributes_errors(self):
        self.assert_error((400, "InvalidRequest"), self.s3.create_multipart_upload,
                          Bucket=self.bucket, Key="k", ChecksumAlgorithm="SHA256",
                          ChecksumType="FULL_OBJECT")
        self.assert_error((400, "InvalidRequest"), self.s3.create_multipart_upload,
                          Bucket=self.bucket, Key="k", ChecksumAlgorithm="CRC64NVME",
                          ChecksumType="COMPOSITE")
        self.s3.put_object(Bucket=self.bucket, Key="k", Body=b"single")
        attrs = self.s3.get_object_attributes(Bucket=self.bucket, Key="k",
                                              ObjectAttributes=["ObjectSize", "ObjectParts"])
        self.assertEqual(attrs["ObjectSize"], 6)
        self.assertNotIn("ObjectParts", attrs)  # a single PUT has no parts
        status, answer = self.raw("GET", "/%s/k" % self.bucket, query="attributes",
                                  headers={"x-amz-object-attributes": "ETag,Colour"})
        self.assertEqual(status, 400, answer)
        self.assertIn(b"InvalidArgument", answer)
        status, answer = self.raw("GET", "/%s/k" % self.bucket, query="attributes")
        self.assertEqual(status, 400, answer)
        self.assert_error((404, "NoSuchKey"), self.s3.get_object_attributes, Bucket=self.bucket,
                          Key="missing", ObjectAttributes=["ETag"])

    # --- Lifecycle -----------------------------------------------------------------------------

    def test_lifecycle_configuration_round_trips_and_refuses_bad_rules(self):
        self.assert_error((404, "NoSuchLifecycleConfiguration"),
                          self.s3.get_bucket_lifecycle_configuration, Bucket=self.bucket)
        rules = [{"ID": "logs", "Status": "Enabled",
                  "Filter": {"And": {"Prefix": "logs/", "Tags": [{"Key": "t", "Value": "1"}]}},
                  "Expiration": {"Days": 30}},
                 {"ID": "uploads", "Status": "Enabled", "Filter": {"Prefix": ""},
                  "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 2}}]
        self.s3.put_bucket_lifecycle_configuration(Bucket=self.bucket,
                                                   LifecycleConfiguration={"Rules": rules})
        got = self.s3.get_bucket_lifecycle_configuration(Bucket=self.bucket)["Rules"]
        self.assertEqual([r["ID"] for r in got], ["logs", "uploads"])
        self.assertEqual(got[0]["Expiration"], {"Days": 30})
        self.assertEqual(got[0]["Filter"]["And"]["Tags"], [{"Key": "t", "Value": "1"}])
        for bad, code in [
                ([{"ID": "x", "Status": "Enabled", "Filter": {"Prefix": ""},
                   "Expiration": {"Days": 0}}], "InvalidArgument"),
                ([{"ID": "x", "Status": "Enabled", "Filter": {"Prefix": ""}}],
                 "InvalidArgument"),
                ([{"ID": "x", "Status": "Enabled", "Filter": {"Prefix": ""},
                   "Expiration": {"Days": 1}}] * 2, "InvalidArgument")]:
            self.assert_error((400, code), self.s3.put_bucket_lifecycle_configuration,
                              Bucket=self.bucket, LifecycleConfiguration={"Rules": bad})
        status, answer = self.raw("PUT", "/%s" % self.bucket, b"<LifecycleConfiguration><Rule>",
                                  query="lifecycle")
        self.assertEqual(status, 400, answer)
        self.assertIn(b"MalformedXML", answer)
        self.assertEqual(len(self.s3.get_bucket_lifecycle_configuration(Bucket=self.bucket)
                             ["Rules"]), 2)  # the refused ones changed nothing
        self.s3.delete_bucket_lifecycle(Bucket=self.bucket)
        self.assert_error((404, "NoSuchLifecycleConfiguration"),
                          self.s3.get_bucket_lifecycle_configuration, Bucket=self.bucket)

    def test_lifecycle_expires_objects_and_aborts_uploads(self):
        self.s3.put_bucket_lifecycle_configuration(
            Bucket=self.bucket, LifecycleConfiguration={"Rules": [
                {"ID": "tmp", "Status": "Enabled", "Filter": {"Prefix": "tmp/"},
                 "Expiration": {"Days": 2}},
                {"ID": "mp", "Status": "Enabled", "Filter": {"Prefix": ""},
                 "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 2}}]})
        self.s3.put_object(Bucket=self.bucket, Key="tmp/a", Body=b"a")
        self.s3.put_object(Bucket=self.bucket, Key="keep/b", Body=b"b")
        head = self.s3.head_object(Bucket=self.bucket, Key="tmp/a")
        self.assertIn('rule-id="tmp"', head["Expiration"])
        self.assertNotIn("Expiration", self.s3.head_object(Bucket=self.bucket, Key="keep/b"))
        self.s3.create_multipart_upload(Bucket=self.bucket, Key="big")
        self.sweep()
        self.assertEqual(self.s3.get_object(Bucket=self.bucket, Key="tmp/a")["Body"].read(), b"a")
        time.sleep(2.5)  # two lifecycle "days" of one second
        stats = self.sweep()
        self.assertGreaterEqual(stats["expired_current"], 1)
        self.assert_error((404, "NoSuchKey"), self.s3.get_object, Bucket=self.bucket, Key="tmp/a")
        self.assertEqual(self.s3.get_object(Bucket=self.bucket, Key="keep/b")["Body"].read(),
                         b"b")
        self.assertEqual(self.s3.list_multipart_uploads(Bucket=self.bucket).get("Uploads", []),
                         [])
        self.assertIn("sovai_s3_lifecycle_expired_current_total", self.server.metrics())

    def test_lifecycle_keeps_locked_versions(self):
        bucket = self.locked_bucket()
        self.s3.put_bucket_lifecycle_configuration(
            Bucket=bucket, LifecycleConfiguration={"Rules": [
                {"ID": "old", "Status": "Enabled", "Filter": {"Prefix": ""},
                 "NoncurrentVersionExpiration": {"NoncurrentDays": 1}}]})
        held = self.s3.put_object(Bucket=bucket, Key="k", Body=b"1",
                                  ObjectLockLegalHoldStatus="ON")
        free = self.s3.put_object(Bucket=bucket, Key="k", Body=b"2")
        self.s3.put_object(Bucket=bucket, Key="k", Body=b"3")
        time.sleep(1.5)
        self.sweep()
        versions = [v["VersionId"] for v in
                    self.s3.list_object_versions(Bucket=bucket)["Versions"]]
        self.assertIn(held["VersionId"], versions)
        self.assertNotIn(free["VersionId"], versions)

    # --- aws-cli -------------------------------------------------------------------------------

    def test_aws_cli_object_lock_and_attributes(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update({"AWS_ACCESS_KEY_ID": self.server.access_key,
                    "AWS_SECRET_ACCESS_KEY": self.server.secret_key,
                    "AWS_DEFAULT_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true",
                    "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_CONFIG_FILE": os.devnull,
                    "AWS_PAGER": ""})

        def aws(*args, check=True):
            p = subprocess.run(["aws", "--endpoint-url", self.server.s3_url, "s3api"] +
                               list(args), env=env, capture_output=True, text=True, timeout=120)
            if check:
                self.assertEqual(p.returncode, 0, p.stderr)
            return p

        bucket = "cli-" + uuid.uuid4().hex[:12]
        self.buckets.append(bucket)
        aws("create-bucket", "--bucket", bucket, "--object-lock-enabled-for-bucket",
            "--create-bucket-configuration", "LocationConstraint=" + REGION)
        aws("put-object-lock-configuration", "--bucket", bucket, "--object-lock-configuration",
            json.dumps({"ObjectLockEnabled": "Enabled",
                        "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}}))
        empty = os.path.join(self.server.tmp, "empty")
        open(empty, "wb").close()
        put = json.loads(aws("put-object", "--bucket", bucket, "--key", "k", "--body",
                             empty).stdout)
        retention = json.loads(aws("get-object-retention", "--bucket", bucket, "--key",
                                   "k").stdout)
        self.assertEqual(retention["Retention"]["Mode"], "GOVERNANCE")
        refused = aws("delete-object", "--bucket", bucket, "--key", "k", "--version-id",
                      put["VersionId"], check=False)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("AccessDenied", refused.stderr)
        attrs = json.loads(aws("get-object-attributes", "--bucket", bucket, "--key", "k",
                               "--object-attributes", "ETag", "ObjectSize").stdout)
        self.assertEqual(attrs["ObjectSize"], 0)
        aws("delete-object", "--bucket", bucket, "--key", "k", "--version-id", put["VersionId"],
            "--bypass-governance-retention")


if __name__ == "__main__":
    unittest.main()
