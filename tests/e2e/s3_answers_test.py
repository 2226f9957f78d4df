"""The S3 answers a real client gets where this server once answered wrong or dangerously (issue
29, issue 28 item 11), with boto3 against a real `sovai server`: subresources that replaced an
object's bytes, protections accepted and ignored, multipart completions, listings, conditional
writes, authentication errors. Each test would have failed before its fix."""

import base64
import datetime
import hashlib
import http.client
import unittest
import uuid
from unittest import mock

import boto3
import botocore.session
from botocore.config import Config
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from sovai_fixture import empty_and_delete_bucket, REGION, SovaiServer

ORIGINAL = b"ORIGINAL-BYTES"
MIB = 1024 * 1024
RETENTION_XML = (b'<Retention xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                 b"<Mode>GOVERNANCE</Mode><RetainUntilDate>2030-01-01T00:00:00Z</RetainUntilDate>"
                 b"</Retention>")


def error_code(e):
    return e.response["Error"]["Code"]


def status_of(e):
    return e.response["ResponseMetadata"]["HTTPStatusCode"]


class S3AnswersTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = SovaiServer().start()
        cls.s3 = cls.server.boto3_client()

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    def setUp(self):
        self.bucket = "ans-" + uuid.uuid4().hex[:12]
        self.s3.create_bucket(Bucket=self.bucket,
                              CreateBucketConfiguration={"LocationConstraint": REGION})
        self.s3.put_object(Bucket=self.bucket, Key="k", Body=ORIGINAL)

    def tearDown(self):
        empty_and_delete_bucket(self.s3, self.bucket)

    def assert_original(self):
        got = self.s3.get_object(Bucket=self.bucket, Key="k")
        self.assertEqual(got["Body"].read(), ORIGINAL)
        self.assertEqual(got["ETag"], '"%s"' % hashlib.md5(ORIGINAL).hexdigest())

    def assert_not_implemented(self, call, *args, **kwargs):
        with self.assertRaises(ClientError) as e:
            call(*args, **kwargs)
        self.assertEqual((status_of(e.exception), error_code(e.exception)),
                         (501, "NotImplemented"), e.exception.response)
        return e.exception.response["Error"].get("Message", "")

    def signed(self, method, path, body=b"", headers=None, region=REGION, query=""):
        """(status, body) of a SigV4-signed raw request, as botocore signs it."""
        url = "%s%s%s" % (self.server.s3_url, path, "?" + query if query else "")
        req = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
        req.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
        S3SigV4Auth(Credentials(self.server.access_key, self.server.secret_key), "s3",
                    region).add_auth(req)
        host, port = self.server.s3_url.split("://")[1].split(":")
        conn = http.client.HTTPConnection(host, int(port))
        conn.request(method, req.url[len(self.server.s3_url):], body=body,
                     headers=dict(req.headers.items()))
        r = conn.getresponse()
        out = (r.status, r.read())
        conn.close()
        return out

    # --- Subresources never fall through to the object --------------------------------------

    def assert_client_error(self, expected, call, *args, **kwargs):
        with self.assertRaises(ClientError) as e:
            call(*args, **kwargs)
        self.assertEqual((status_of(e.exception), error_code(e.exception)), expected,
                         e.exception.response)

    def test_object_lock_calls_keep_the_bytes(self):
        # Before: put_object_retention answered 200 and the object read back as the XML. This
        # bucket has no Object Lock: the calls are refused as S3 refuses them (s3_data_test.py
        # covers a lock bucket), and the object is untouched.
        self.assert_client_error((400, "InvalidRequest"), self.s3.put_object_retention,
                                 Bucket=self.bucket, Key="k",
                                 Retention={"Mode": "GOVERNANCE",
                                            "RetainUntilDate": datetime.datetime(2030, 1, 1)})
        self.assert_client_error((400, "InvalidRequest"), self.s3.put_object_legal_hold,
                                 Bucket=self.bucket, Key="k", LegalHold={"Status": "ON"})
        self.assert_original()
        # Before: 500 without an S3 body (retried four times by the SDKs), or the object's bytes.
        self.assert_client_error((400, "InvalidRequest"), self.s3.get_object_retention,
                                 Bucket=self.bucket, Key="k")
        self.assert_client_error((400, "InvalidRequest"), self.s3.get_object_legal_hold,
                                 Bucket=self.bucket, Key="k")
        self.assertEqual(self.s3.get_object_attributes(Bucket=self.bucket, Key="k",
                                                       ObjectAttributes=["ETag"])["ETag"],
                         hashlib.md5(ORIGINAL).hexdigest())
        self.assert_not_implemented(self.s3.get_object_torrent, Bucket=self.bucket, Key="k")
        # 501 is not an error the SDKs retry (500 was, four times).
        retrying = boto3.client(
            "s3", endpoint_url=self.server.s3_url, region_name=REGION,
            aws_access_key_id=self.server.access_key,
            aws_secret_access_key=self.server.secret_key,
            config=Config(s3={"addressing_style": "path"},
                          retries={"max_attempts": 5, "mode": "standard"}))
        with self.assertRaises(ClientError) as e:
            retrying.get_object_torrent(Bucket=self.bucket, Key="k")
        self.assertEqual(e.exception.response["ResponseMetadata"]["RetryAttempts"], 0)
        self.assert_client_error((409, "InvalidBucketState"),
                                 self.s3.put_object_lock_configuration, Bucket=self.bucket,
                                 ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})
        self.assert_original()

    def test_every_subresource_of_botocores_model_leaves_the_object_alone(self):
        # Every operation AWS's model (botocore's) routes by a `?subresource`, on this object or
        # its bucket, sent with an XML body where it takes one: none may change the object, and
        # none may answer a 5xx other than 501 NotImplemented.
        model = botocore.session.get_session().get_service_model("s3")
        tried = set()
        for name in model.operation_names:
            route = model.operation_model(name).http
            path, _, query = route["requestUri"].partition("?")
            if not query or "{Bucket}" not in path:
                continue
            sub = query.split("&")[0].split("=")[0]
            if sub == "list-type":
                continue
            target = "/%s/k" % self.bucket if "{Key+}" in path else "/" + self.bucket
            if (route["method"], target, sub) in tried:
                continue
            tried.add((route["method"], target, sub))
            body = RETENTION_XML if route["method"] in ("PUT", "POST") else b""
            status, answer = self.signed(route["method"], target, body, query=sub)
            self.assertTrue(status < 500 or status == 501, (name, status, answer))
            if status == 501:
                self.assertIn(b"<Code>NotImplemented</Code>", answer, name)
            self.assert_original()
        self.assertGreater(len(tried), 60)

    def test_calls_on_a_missing_bucket_are_no_such_bucket(self):
        missing = "missing-" + self.bucket
        for call, kwargs in [
                (self.s3.get_object_lock_configuration, {}),
                (self.s3.put_object_lock_configuration,
                 {"ObjectLockConfiguration": {"ObjectLockEnabled": "Enabled"}}),
                (self.s3.get_object_retention, {"Key": "k"}),
                (self.s3.put_object_retention,
                 {"Key": "k", "Retention": {"Mode": "GOVERNANCE",
                                            "RetainUntilDate": datetime.datetime(2030, 1, 1)}}),
                (self.s3.get_object_legal_hold, {"Key": "k"}),
                (self.s3.get_bucket_lifecycle_configuration, {})]:
            with self.assertRaises(ClientError) as e:
                call(Bucket=missing, **kwargs)
            self.assertEqual((status_of(e.exception), error_code(e.exception)),
                             (404, "NoSuchBucket"), call)

    # --- Protections are refused, never accepted and ignored -------------------------------

    def test_create_bucket_with_object_lock_takes_effect(self):
        # Before: answered 200 and set neither the lock nor versioning.
        name = "lock-" + self.bucket
        self.s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True,
                              CreateBucketConfiguration={"LocationConstraint": REGION})
        self.assertEqual(self.s3.get_bucket_versioning(Bucket=name)["Status"], "Enabled")
        self.assertEqual(self.s3.get_object_lock_configuration(Bucket=name)
                         ["ObjectLockConfiguration"]["ObjectLockEnabled"], "Enabled")
        self.s3.delete_bucket(Bucket=name)

    def test_encryption_and_locks_are_refused_and_acls_disabled_by_every_write(self):
        copy = {"Bucket": self.bucket, "Key": "k"}
        # A new bucket has ACLs disabled (BucketOwnerEnforced): exposures are refused, not ignored.
        for extra in [{"ACL": "public-read"}, {"GrantRead": 'uri="http://acs.amazonaws.com/'
                                                            'groups/global/AllUsers"'}]:
            for call, kwargs in [(self.s3.put_object, {"Body": b"x"}),
                                 (self.s3.copy_object, {"CopySource": copy}),
                                 (self.s3.create_multipart_upload, {})]:
                with self.assertRaises(ClientError) as e:
                    call(Bucket=self.bucket, Key="new", **kwargs, **extra)
                self.assertEqual((status_of(e.exception), error_code(e.exception)),
                                 (400, "AccessControlListNotSupported"))
        for extra in [{"ServerSideEncryption": "AES256"}]:
            self.assert_not_implemented(self.s3.put_object, Bucket=self.bucket, Key="new",
                                        Body=b"x", **extra)
            self.assert_not_implemented(self.s3.copy_object, Bucket=self.bucket, Key="new",
                                        CopySource=copy, **extra)
            self.assert_not_implemented(self.s3.create_multipart_upload, Bucket=self.bucket,
                                        Key="new", **extra)
        # Object Lock on a bucket without it: refused as S3 refuses it.
        for extra in [{"ObjectLockMode": "GOVERNANCE",
                       "ObjectLockRetainUntilDate": datetime.datetime(2030, 1, 1)},
                      {"ObjectLockLegalHoldStatus": "ON"}]:
            for call, kwargs in [(self.s3.put_object, {"Body": b"x"}),
                                 (self.s3.copy_object, {"CopySource": copy}),
                                 (self.s3.create_multipart_upload, {})]:
                self.assert_client_error((400, "InvalidRequest"), call, Bucket=self.bucket,
                                         Key="new", **kwargs, **extra)
        with self.assertRaises(ClientError) as e:
            self.s3.head_object(Bucket=self.bucket, Key="new")
        self.assertEqual(status_of(e.exception), 404)
        self.assertEqual(self.s3.list_multipart_uploads(Bucket=self.bucket).get("Uploads", []),
                         [])
        # What is true here is accepted: private, and the bucket owner's full control.
        self.s3.copy_object(Bucket=self.bucket, Key="new", CopySource=copy, ACL="private")
        up = self.s3.create_multipart_upload(Bucket=self.bucket, Key="new2",
                                             ACL="bucket-owner-full-control")
        self.s3.abort_multipart_upload(Bucket=self.bucket, Key="new2", UploadId=up["UploadId"])

    def test_expected_bucket_owner_is_checked(self):
        with self.assertRaises(ClientError) as e:
            self.s3.get_object(Bucket=self.bucket, Key="k", ExpectedBucketOwner="111122223333")
        self.assertEqual(error_code(e.exception), "AccessDenied")
        owner = self.s3.list_buckets()["Owner"]["ID"]
        got = self.s3.get_object(Bucket=self.bucket, Key="k", ExpectedBucketOwner=owner)
        self.assertEqual(got["Body"].read(), ORIGINAL)

    # --- Multipart ---------------------------------------------------------------------------

    def upload_two_parts(self, key):
        up = self.s3.create_multipart_upload(Bucket=self.bucket, Key=key,
                                             ChecksumAlgorithm="SHA256")["UploadId"]
        parts = []
        for n, data in [(1, b"a" * (5 * MIB)), (2, b"tail")]:
            r = self.s3.upload_part(Bucket=self.bucket, Key=key, UploadId=up, PartNumber=n,
                                    Body=data, ChecksumAlgorithm="SHA256")
            parts.append({"PartNumber": n, "ETag": r["ETag"], "ChecksumSHA256": r["ChecksumSHA256"]})
        raw = b"".join(base64.b64decode(p["ChecksumSHA256"]) for p in parts)
        composite = base64.b64encode(hashlib.sha256(raw).digest()).decode() + "-2"
        return up, parts, composite

    def test_complete_checks_the_object_checksum_and_a_retry_gets_the_same_answer(self):
        up, parts, composite = self.upload_two_parts("mp")
        # Before: BadDigest, the header being checked against the XML body's hash.
        done = self.s3.complete_multipart_upload(Bucket=self.bucket, Key="mp", UploadId=up,
                                                 MultipartUpload={"Parts": parts},
                                                 ChecksumSHA256=composite)
        self.assertEqual(done["ChecksumSHA256"], composite)
        # Before: NoSuchUpload. S3 answers a repeated completion with the same 200 and ETag.
        again = self.s3.complete_multipart_upload(Bucket=self.bucket, Key="mp", UploadId=up,
                                                  MultipartUpload={"Parts": parts})
        self.assertEqual(again["ETag"], done["ETag"])
        self.assertEqual(again["ChecksumSHA256"], composite)
        # A different part list is not that completion.
        with self.assertRaises(ClientError) as e:
            self.s3.complete_multipart_upload(Bucket=self.bucket, Key="mp", UploadId=up,
                                              MultipartUpload={"Parts": parts[:1]})
        self.assertEqual(error_code(e.exception), "NoSuchUpload")
        self.assertEqual(self.s3.head_object(Bucket=self.bucket, Key="mp")["ContentLength"],
                         5 * MIB + 4)

    def test_complete_with_a_wrong_checksum_or_size_keeps_the_upload(self):
        up, parts, composite = self.upload_two_parts("bad")
        wrong = base64.b64encode(hashlib.sha256(b"other").digest()).decode() + "-2"
        with self.assertRaises(ClientError) as e:
            self.s3.complete_multipart_upload(Bucket=self.bucket, Key="bad", UploadId=up,
                                              MultipartUpload={"Parts": parts},
                                              ChecksumSHA256=wrong)
        self.assertEqual(error_code(e.exception), "BadDigest")
        with self.assertRaises(ClientError) as e:
            self.s3.complete_multipart_upload(Bucket=self.bucket, Key="bad", UploadId=up,
                                              MultipartUpload={"Parts": parts},
                                              MpuObjectSize=5 * MIB)
        self.assertEqual(error_code(e.exception), "InvalidRequest")
        with self.assertRaises(ClientError) as e:
            self.s3.complete_multipart_upload(Bucket=self.bucket, Key="bad", UploadId=up,
                                              MultipartUpload={"Parts": parts},
                                              ChecksumCRC32="AAAAAA==")
        self.assertEqual(error_code(e.exception), "InvalidRequest")
        self.assertEqual(len(self.s3.list_parts(Bucket=self.bucket, Key="bad",
                                                UploadId=up)["Parts"]), 2)
        # The value without its "-N" is the same checksum.
        done = self.s3.complete_multipart_upload(Bucket=self.bucket, Key="bad", UploadId=up,
                                                 MultipartUpload={"Parts": parts},
                                                 ChecksumSHA256=composite[:-2],
                                                 MpuObjectSize=5 * MIB + 4)
        self.assertEqual(done["ChecksumSHA256"], composite)

    def test_delete_bucket_takes_its_pending_uploads(self):
        self.s3.delete_object(Bucket=self.bucket, Key="k")
        up = self.s3.create_multipart_upload(Bucket=self.bucket, Key="pending")["UploadId"]
        self.s3.upload_part(Bucket=self.bucket, Key="pending", UploadId=up, PartNumber=1,
                            Body=b"p" * 1000)
        # Before: BucketNotEmpty.
        self.s3.delete_bucket(Bucket=self.bucket)
        with self.assertRaises(ClientError) as e:
            self.s3.head_bucket(Bucket=self.bucket)
        self.assertEqual(status_of(e.exception), 404)
        self.s3.create_bucket(Bucket=self.bucket,
                              CreateBucketConfiguration={"LocationConstraint": REGION})
        self.assertEqual(self.s3.list_multipart_uploads(Bucket=self.bucket).get("Uploads", []),
                         [])
        with self.assertRaises(ClientError) as e:
            self.s3.list_parts(Bucket=self.bucket, Key="pending", UploadId=up)
        self.assertEqual(error_code(e.exception), "NoSuchUpload")
        # Objects still keep a bucket.
        self.s3.put_object(Bucket=self.bucket, Key="k", Body=ORIGINAL)
        with self.assertRaises(ClientError) as e:
            self.s3.delete_bucket(Bucket=self.bucket)
        self.assertEqual(error_code(e.exception), "BucketNotEmpty")

    # --- Listings, metadata, versioning -------------------------------------------------------

    def test_max_keys_zero_and_an_empty_continuation_token(self):
        r = self.s3.list_objects_v2(Bucket=self.bucket, MaxKeys=0)
        self.assertEqual((r["KeyCount"], r["IsTruncated"], r.get("Contents")), (0, False, None))
        r = self.s3.list_objects(Bucket=self.bucket, MaxKeys=0)
        self.assertEqual((r["IsTruncated"], r.get("Contents")), (False, None))
        r = self.s3.list_object_versions(Bucket=self.bucket, MaxKeys=0)
        self.assertEqual((r["IsTruncated"], r.get("Versions")), (False, None))
        r = self.s3.list_objects_v2(Bucket=self.bucket, ContinuationToken="")
        self.assertEqual(r["ContinuationToken"], "")
        self.assertEqual([c["Key"] for c in r["Contents"]], ["k"])

    def test_url_encoded_listing_of_a_prefix_with_a_newline(self):
        self.s3.put_object(Bucket=self.bucket, Key="line\nbreak", Body=b"x")
        # boto3 asks for encoding-type=url and decodes what it knows is encoded.
        r = self.s3.list_objects_v2(Bucket=self.bucket, Prefix="line\n")
        self.assertEqual(r["Prefix"], "line\n")
        self.assertEqual([c["Key"] for c in r["Contents"]], ["line\nbreak"])
        # ListObjects (v1): S3 sends the Prefix as given, the rest encoded; botocore decodes
        # exactly those (before: "line%0A").
        r = self.s3.list_objects(Bucket=self.bucket, Prefix="line\n")
        self.assertEqual(r["Prefix"], "line\n")
        self.assertEqual([c["Key"] for c in r["Contents"]], ["line\nbreak"])
        r = self.s3.list_objects(Bucket=self.bucket, Delimiter="\n")
        self.assertEqual([p["Prefix"] for p in r["CommonPrefixes"]], ["line\n"])
        self.assertEqual(r["Delimiter"], "\n")
        r = self.s3.list_object_versions(Bucket=self.bucket, Prefix="line\n")
        self.assertEqual(r["Prefix"], "line\n")
        self.assertEqual([v["Key"] for v in r["Versions"]], ["line\nbreak"])

    def test_content_encoding_is_kept_as_sent(self):
        self.s3.put_object(Bucket=self.bucket, Key="enc", Body=b"x", ContentEncoding="deflate, gzip")
        self.assertEqual(self.s3.head_object(Bucket=self.bucket, Key="enc")["ContentEncoding"],
                         "deflate, gzip")

    def test_versioning_status_of_a_new_and_a_suspended_bucket(self):
        self.assertNotIn("Status", self.s3.get_bucket_versioning(Bucket=self.bucket))
        self.s3.put_bucket_versioning(Bucket=self.bucket,
                                      VersioningConfiguration={"Status": "Suspended"})
        self.assertEqual(self.s3.get_bucket_versioning(Bucket=self.bucket)["Status"], "Suspended")
        self.assert_original()

    def test_conditional_writes_in_every_combination(self):
        etag = self.s3.head_object(Bucket=self.bucket, Key="k")["ETag"]
        # If-None-Match with ETags: write unless the current one is among them.
        self.s3.put_object(Bucket=self.bucket, Key="k", Body=ORIGINAL, IfNoneMatch='"other"')
        with self.assertRaises(ClientError) as e:
            self.s3.put_object(Bucket=self.bucket, Key="k", Body=b"no", IfNoneMatch=etag)
        self.assertEqual(error_code(e.exception), "PreconditionFailed")
        # Both headers: both hold.
        self.s3.put_object(Bucket=self.bucket, Key="k", Body=ORIGINAL, IfMatch=etag,
                           IfNoneMatch='"other"')
        with self.assertRaises(ClientError) as e:
            self.s3.put_object(Bucket=self.bucket, Key="k", Body=b"no", IfMatch=etag,
                               IfNoneMatch="*")
        self.assertEqual(error_code(e.exception), "PreconditionFailed")
        with self.assertRaises(ClientError) as e:
            self.s3.put_object(Bucket=self.bucket, Key="k", Body=b"no", IfMatch='"a", "b"')
        self.assertEqual(error_code(e.exception), "PreconditionFailed")
        self.s3.put_object(Bucket=self.bucket, Key="k", Body=ORIGINAL, IfMatch='"a", ' + etag)
        with self.assertRaises(ClientError) as e:
            self.s3.put_object(Bucket=self.bucket, Key="absent", Body=b"no", IfMatch="*")
        self.assertEqual(status_of(e.exception), 404)
        # CopyObject takes the same conditions.
        with self.assertRaises(ClientError) as e:
            self.s3.copy_object(Bucket=self.bucket, Key="k", IfNoneMatch=etag,
                                CopySource={"Bucket": self.bucket, "Key": "k"},
                                MetadataDirective="REPLACE")
        self.assertEqual(error_code(e.exception), "PreconditionFailed")
        self.assert_original()

    # --- Authentication ---------------------------------------------------------------------

    def test_an_expired_request_date_is_forbidden(self):
        # Signed an hour ago (botocore's clock, moved back for this one signature).
        old = datetime.datetime.utcnow() - datetime.timedelta(hours=1)
        url = "%s/%s/late" % (self.server.s3_url, self.bucket)
        req = AWSRequest(method="PUT", url=url, data=b"late")
        req.headers["x-amz-content-sha256"] = hashlib.sha256(b"late").hexdigest()
        with mock.patch("botocore.auth.get_current_datetime", return_value=old):
            S3SigV4Auth(Credentials(self.server.access_key, self.server.secret_key), "s3",
                        REGION).add_auth(req)
        self.assertIn(old.strftime("%Y%m%dT%H%M%SZ"), req.headers["X-Amz-Date"])
        host, port = self.server.s3_url.split("://")[1].split(":")
        conn = http.client.HTTPConnection(host, int(port))
        conn.request("PUT", "/%s/late" % self.bucket, body=b"late",
                     headers=dict(req.headers.items()))
        r = conn.getresponse()
        status, body = r.status, r.read()
        conn.close()
        self.assertEqual(status, 403, body)
        self.assertIn(b"RequestTimeTooSkewed", body)

    def test_a_scope_of_another_region_names_the_servers(self):
        for region in ["us-east-1", REGION.upper()]:
            status, body = self.signed("GET", "/" + self.bucket, region=region)
            self.assertEqual(status, 400, body)
            self.assertIn(b"<Code>AuthorizationHeaderMalformed</Code>", body)
            self.assertIn(("the region '%s' is wrong; expecting '%s'" % (region, REGION)).encode(),
                          body)
            self.assertIn(("<Region>%s</Region>" % REGION).encode(), body)
        # botocore reads that Region and signs again (as against AWS): a client configured for
        # another region still works, after one refused request.
        other = self.server.boto3_client(region="us-east-1")
        got = other.get_object(Bucket=self.bucket, Key="k")
        self.assertEqual(got["Body"].read(), ORIGINAL)


class S3UsEast1Test(unittest.TestCase):
    """A server of region us-east-1 follows that region's rule for a bucket you already own."""

    def test_create_bucket_you_own_is_ok_in_us_east_1(self):
        server = SovaiServer(extra_args=["--region", "US-EAST-1"]).start()
        try:
            s3 = server.boto3_client(region="us-east-1")
            s3.create_bucket(Bucket="owned")
            s3.put_object(Bucket="owned", Key="k", Body=ORIGINAL)
            s3.create_bucket(Bucket="owned")  # 200, nothing changed
            self.assertEqual(s3.get_object(Bucket="owned", Key="k")["Body"].read(), ORIGINAL)
            self.assertEqual(s3.get_bucket_location(Bucket="owned")["LocationConstraint"], None)
        finally:
            server.cleanup()


if __name__ == "__main__":
    unittest.main()
