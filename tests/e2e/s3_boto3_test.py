"""boto3 against a real `sovai server`, over HTTP and over HTTPS (the SDK's upload mode differs:
over HTTPS it sends STREAMING-UNSIGNED-PAYLOAD-TRAILER bodies with a CRC trailer)."""

import datetime
import hashlib
import http.client
import json
import os
import socket
import ssl
import tempfile
import time
import unittest
import urllib.error
import urllib.request
import uuid

import boto3
import botocore
from botocore.awsrequest import AWSRequest
from botocore.auth import S3SigV4Auth
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from sovai_fixture import empty_and_delete_bucket, REGION, SovaiServer


def error_code(e):
    return e.response["Error"]["Code"]


class S3Boto3Base:
    TLS = False

    @classmethod
    def setUpClass(cls):
        cls.server = SovaiServer(tls=cls.TLS).start()
        cls.s3 = cls.server.boto3_client()

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    def setUp(self):
        self.bucket = "b-" + uuid.uuid4().hex[:12]
        self.s3.create_bucket(Bucket=self.bucket,
                              CreateBucketConfiguration={"LocationConstraint": REGION})

    def tearDown(self):
        # Empty and delete the bucket the way S3 test suites do: every version, every upload.
        empty_and_delete_bucket(self.s3, self.bucket)

    def open_url(self, url, method="GET", data=None, headers=None):
        ctx = ssl.create_default_context(cafile=self.server.cert) if self.TLS else None
        req = urllib.request.Request(url, method=method, data=data, headers=headers or {})
        try:
            with urllib.request.urlopen(req, context=ctx) as r:
                return r.status, r.read(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read(), dict(e.headers)

    # --- Buckets ---------------------------------------------------------------------------------

    def test_bucket_lifecycle(self):
        names = [b["Name"] for b in self.s3.list_buckets()["Buckets"]]
        self.assertIn(self.bucket, names)
        self.s3.head_bucket(Bucket=self.bucket)
        loc = self.s3.get_bucket_location(Bucket=self.bucket)["LocationConstraint"]
        self.assertEqual(loc, REGION)
        with self.assertRaises(ClientError) as e:
            self.s3.create_bucket(Bucket=self.bucket,
                                  CreateBucketConfiguration={"LocationConstraint": REGION})
        self.assertEqual(error_code(e.exception), "BucketAlreadyOwnedByYou")
        with self.assertRaises(ClientError) as e:
            self.s3.create_bucket(Bucket="other-" + self.bucket,
                                  CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
        self.assertEqual(error_code(e.exception), "IllegalLocationConstraintException")
        with self.assertRaises(ClientError) as e:
            self.s3.create_bucket(Bucket="Bad_Name")
        self.assertEqual(error_code(e.exception), "InvalidBucketName")
        self.s3.put_object(Bucket=self.bucket, Key="k", Body=b"x")
        with self.assertRaises(ClientError) as e:
            self.s3.delete_bucket(Bucket=self.bucket)
        self.assertEqual(error_code(e.exception), "BucketNotEmpty")
        with self.assertRaises(ClientError) as e:
            self.s3.head_bucket(Bucket="no-such-bucket-" + self.bucket)
        self.assertEqual(e.exception.response["ResponseMetadata"]["HTTPStatusCode"], 404)

    # --- Objects ---------------------------------------------------------------------------------

    def test_put_get_head_with_metadata(self):
        body = b"hello, sovai\n" * 100
        put = self.s3.put_object(Bucket=self.bucket, Key="dir/hello.txt", Body=body,
                                 ContentType="text/plain", Metadata={"origin": "lab"},
                                 CacheControl="max-age=60", ContentDisposition="inline",
                                 Tagging="team=nlp&stage=raw")
        self.assertEqual(put["ETag"], '"%s"' % hashlib.md5(body).hexdigest())
        got = self.s3.get_object(Bucket=self.bucket, Key="dir/hello.txt")
        self.assertEqual(got["Body"].read(), body)
        self.assertEqual(got["ContentType"], "text/plain")
        self.assertEqual(got["Metadata"], {"origin": "lab"})
        self.assertEqual(got["CacheControl"], "max-age=60")
        self.assertEqual(got["ContentDisposition"], "inline")
        self.assertEqual(got["TagCount"], 2)
        head = self.s3.head_object(Bucket=self.bucket, Key="dir/hello.txt")
        self.assertEqual(head["ContentLength"], len(body))
        with self.assertRaises(ClientError) as e:
            self.s3.get_object(Bucket=self.bucket, Key="missing")
        self.assertEqual(error_code(e.exception), "NoSuchKey")
        with self.assertRaises(ClientError) as e:
            self.s3.head_object(Bucket=self.bucket, Key="missing")
        self.assertEqual(e.exception.response["ResponseMetadata"]["HTTPStatusCode"], 404)

    def test_ranges_and_response_overrides(self):
        body = bytes(range(256)) * 4096  # 1 MiB, file-backed
        self.s3.put_object(Bucket=self.bucket, Key="r", Body=body)
        for rng, want in [("bytes=0-9", body[:10]), ("bytes=1000-", body[1000:]),
                          ("bytes=-5", body[-5:]), ("bytes=65530-65545", body[65530:65546])]:
            got = self.s3.get_object(Bucket=self.bucket, Key="r", Range=rng)
            self.assertEqual(got["Body"].read(), want, rng)
            self.assertEqual(got["ResponseMetadata"]["HTTPStatusCode"], 206)
        with self.assertRaises(ClientError) as e:
            self.s3.get_object(Bucket=self.bucket, Key="r", Range="bytes=%d-" % len(body))
        self.assertEqual(error_code(e.exception), "InvalidRange")
        got = self.s3.get_object(Bucket=self.bucket, Key="r", ResponseContentType="image/png",
                                 ResponseContentDisposition="attachment; filename=x.png")
        self.assertEqual(got["ContentType"], "image/png")
        self.assertEqual(got["ContentDisposition"], "attachment; filename=x.png")

    def test_conditional_reads(self):
        put = self.s3.put_object(Bucket=self.bucket, Key="c", Body=b"v1")
        etag = put["ETag"]
        self.assertEqual(self.s3.get_object(Bucket=self.bucket, Key="c", IfMatch=etag)["Body"].read(), b"v1")
        with self.assertRaises(ClientError) as e:
            self.s3.get_object(Bucket=self.bucket, Key="c", IfMatch='"nope"')
        self.assertEqual(error_code(e.exception), "PreconditionFailed")
        with self.assertRaises(ClientError) as e:
            self.s3.get_object(Bucket=self.bucket, Key="c", IfNoneMatch=etag)
        self.assertEqual(e.exception.response["ResponseMetadata"]["HTTPStatusCode"], 304)
        future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
        with self.assertRaises(ClientError) as e:
            self.s3.get_object(Bucket=self.bucket, Key="c", IfModifiedSince=future)
        self.assertEqual(e.exception.response["ResponseMetadata"]["HTTPStatusCode"], 304)
        past = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
        with self.assertRaises(ClientError) as e:
            self.s3.get_object(Bucket=self.bucket, Key="c", IfUnmodifiedSince=past)
        self.assertEqual(error_code(e.exception), "PreconditionFailed")

    def test_conditional_writes(self):
        self.s3.put_object(Bucket=self.bucket, Key="once", Body=b"1", IfNoneMatch="*")
        with self.assertRaises(ClientError) as e:
            self.s3.put_object(Bucket=self.bucket, Key="once", Body=b"2", IfNoneMatch="*")
        self.assertEqual(error_code(e.exception), "PreconditionFailed")
        etag = self.s3.head_object(Bucket=self.bucket, Key="once")["ETag"]
        with self.assertRaises(ClientError) as e:
            self.s3.put_object(Bucket=self.bucket, Key="once", Body=b"3", IfMatch='"0"')
        self.assertEqual(error_code(e.exception), "PreconditionFailed")
        self.s3.put_object(Bucket=self.bucket, Key="once", Body=b"4", IfMatch=etag)
        self.assertEqual(self.s3.get_object(Bucket=self.bucket, Key="once")["Body"].read(), b"4")

    def test_checksums_are_verified_stored_and_returned(self):
        # (CRC32C and CRC64NVME need botocore[crt] on the client side; the unit tests cover them.)
        for algorithm in ["CRC32", "SHA1", "SHA256"]:
            key = "sum-" + algorithm
            put = self.s3.put_object(Bucket=self.bucket, Key=key, Body=b"checksummed " * 1000,
                                     ChecksumAlgorithm=algorithm)
            self.assertIn("Checksum" + algorithm, put)
            head = self.s3.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
            self.assertEqual(head["Checksum" + algorithm], put["Checksum" + algorithm])
        with self.assertRaises(ClientError) as e:
            self.s3.put_object(Bucket=self.bucket, Key="bad", Body=b"data",
                               ChecksumSHA256="47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=")
        self.assertEqual(error_code(e.exception), "BadDigest")
        with self.assertRaises(ClientError) as e:
            self.s3.put_object(Bucket=self.bucket, Key="bad", Body=b"data",
                               ContentMD5="1B2M2Y8AsgTpgAmY7PhCfg==")
        self.assertEqual(error_code(e.exception), "BadDigest")
        with self.assertRaises(ClientError):
            self.s3.head_object(Bucket=self.bucket, Key="bad")

    def test_copy_object(self):
        self.s3.put_object(Bucket=self.bucket, Key="src", Body=b"copy me", ContentType="text/x",
                           Metadata={"a": "1"})
        self.s3.copy_object(Bucket=self.bucket, Key="dst", CopySource={"Bucket": self.bucket, "Key": "src"})
        got = self.s3.get_object(Bucket=self.bucket, Key="dst")
        self.assertEqual(got["Body"].read(), b"copy me")
        self.assertEqual(got["Metadata"], {"a": "1"})
        self.s3.copy_object(Bucket=self.bucket, Key="dst2", CopySource={"Bucket": self.bucket, "Key": "src"},
                            MetadataDirective="REPLACE", Metadata={"b": "2"}, ContentType="text/y")
        got = self.s3.head_object(Bucket=self.bucket, Key="dst2")
        self.assertEqual(got["Metadata"], {"b": "2"})
        self.assertEqual(got["ContentType"], "text/y")
        with self.assertRaises(ClientError) as e:
            self.s3.copy_object(Bucket=self.bucket, Key="src", CopySource={"Bucket": self.bucket, "Key": "src"})
        self.assertEqual(error_code(e.exception), "InvalidRequest")
        # Copy onto itself to change metadata.
        self.s3.copy_object(Bucket=self.bucket, Key="src", CopySource={"Bucket": self.bucket, "Key": "src"},
                            MetadataDirective="REPLACE", Metadata={"c": "3"})
        self.assertEqual(self.s3.head_object(Bucket=self.bucket, Key="src")["Metadata"], {"c": "3"})
        with self.assertRaises(ClientError) as e:
            self.s3.copy_object(Bucket=self.bucket, Key="x", CopySource={"Bucket": self.bucket, "Key": "src"},
                                CopySourceIfMatch='"nope"')
        self.assertEqual(error_code(e.exception), "PreconditionFailed")

    def test_delete_objects_batch_and_quiet(self):
        keys = ["k%d" % i for i in range(20)]
        for k in keys:
            self.s3.put_object(Bucket=self.bucket, Key=k, Body=k.encode())
        r = self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in keys[:10]]})
        self.assertEqual(sorted(d["Key"] for d in r["Deleted"]), sorted(keys[:10]))
        r = self.s3.delete_objects(Bucket=self.bucket,
                                   Delete={"Objects": [{"Key": k} for k in keys[10:]], "Quiet": True})
        self.assertNotIn("Deleted", r)
        self.assertEqual(self.s3.list_objects_v2(Bucket=self.bucket)["KeyCount"], 0)
        with self.assertRaises(ClientError) as e:
            self.s3.delete_objects(Bucket=self.bucket,
                                   Delete={"Objects": [{"Key": "k%d" % i} for i in range(1001)]})
        self.assertEqual(error_code(e.exception), "MalformedXML")

    # --- Listing ---------------------------------------------------------------------------------

    def test_list_v2_prefix_delimiter_pages_and_url_encoding(self):
        keys = ["a", "dir/x", "dir/y", "dir/sub/z", "e f+g", "\u00e9t\u00e9", "z/1"]
        for k in keys:
            self.s3.put_object(Bucket=self.bucket, Key=k, Body=b"")
        r = self.s3.list_objects_v2(Bucket=self.bucket, Delimiter="/")
        self.assertEqual([c["Key"] for c in r["Contents"]], ["a", "e f+g", "\u00e9t\u00e9"])
        self.assertEqual([p["Prefix"] for p in r["CommonPrefixes"]], ["dir/", "z/"])
        r = self.s3.list_objects_v2(Bucket=self.bucket, Prefix="dir/", Delimiter="/")
        self.assertEqual([c["Key"] for c in r["Contents"]], ["dir/x", "dir/y"])
        self.assertEqual([p["Prefix"] for p in r["CommonPrefixes"]], ["dir/sub/"])
        seen = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                       PaginationConfig={"PageSize": 2}):
            seen += [c["Key"] for c in page.get("Contents", [])]
        self.assertEqual(seen, sorted(keys, key=lambda k: k.encode()))
        seen = []
        for page in self.s3.get_paginator("list_objects").paginate(Bucket=self.bucket,
                                                                    PaginationConfig={"PageSize": 3}):
            seen += [c["Key"] for c in page.get("Contents", [])]
        self.assertEqual(seen, sorted(keys, key=lambda k: k.encode()))
        r = self.s3.list_objects_v2(Bucket=self.bucket, StartAfter="dir/y")
        self.assertEqual([c["Key"] for c in r["Contents"]][0], "e f+g")
        # boto3 asks for encoding-type=url and decodes: the keys come back exactly.
        r = self.s3.list_objects_v2(Bucket=self.bucket, Prefix="e f")
        self.assertEqual([c["Key"] for c in r["Contents"]], ["e f+g"])

    # --- Multipart -------------------------------------------------------------------------------

    def test_upload_file_50_mib_multipart_and_download(self):
        data = os.urandom(50 * 1024 * 1024)
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "src")
            dst = os.path.join(d, "dst")
            with open(src, "wb") as f:
                f.write(data)
            config = boto3.s3.transfer.TransferConfig(multipart_threshold=8 * 1024 * 1024,
                                                      multipart_chunksize=8 * 1024 * 1024)
            self.s3.upload_file(src, self.bucket, "big.bin", Config=config)
            head = self.s3.head_object(Bucket=self.bucket, Key="big.bin")
            self.assertEqual(head["ContentLength"], len(data))
            self.assertTrue(head["ETag"].endswith('-7"'), head["ETag"])
            self.s3.download_file(self.bucket, "big.bin", dst, Config=config)
            with open(dst, "rb") as f:
                self.assertEqual(hashlib.sha256(f.read()).digest(), hashlib.sha256(data).digest())
        part = self.s3.get_object(Bucket=self.bucket, Key="big.bin", PartNumber=2)
        self.assertEqual(part["PartsCount"], 7)
        self.assertEqual(part["Body"].read(), data[8 << 20:16 << 20])

    def test_multipart_errors_list_and_abort(self):
        up = self.s3.create_multipart_upload(Bucket=self.bucket, Key="m")["UploadId"]
        small = self.s3.upload_part(Bucket=self.bucket, Key="m", UploadId=up, PartNumber=1, Body=b"x" * 100)
        last = self.s3.upload_part(Bucket=self.bucket, Key="m", UploadId=up, PartNumber=2, Body=b"y")
        for n in (0, 10001):
            with self.assertRaises(ClientError) as e:
                self.s3.upload_part(Bucket=self.bucket, Key="m", UploadId=up, PartNumber=n, Body=b"z")
            self.assertEqual(error_code(e.exception), "InvalidArgument")
        parts = self.s3.list_parts(Bucket=self.bucket, Key="m", UploadId=up)["Parts"]
        self.assertEqual([p["PartNumber"] for p in parts], [1, 2])
        uploads = self.s3.list_multipart_uploads(Bucket=self.bucket)["Uploads"]
        self.assertEqual([u["UploadId"] for u in uploads], [up])
        with self.assertRaises(ClientError) as e:
            self.s3.complete_multipart_upload(
                Bucket=self.bucket, Key="m", UploadId=up,
                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": small["ETag"]},
                                           {"PartNumber": 2, "ETag": last["ETag"]}]})
        self.assertEqual(error_code(e.exception), "EntityTooSmall")
        with self.assertRaises(ClientError) as e:
            self.s3.complete_multipart_upload(
                Bucket=self.bucket, Key="m", UploadId=up,
                MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": last["ETag"]},
                                           {"PartNumber": 1, "ETag": small["ETag"]}]})
        self.assertEqual(error_code(e.exception), "InvalidPartOrder")
        with self.assertRaises(ClientError) as e:
            self.s3.complete_multipart_upload(
                Bucket=self.bucket, Key="m", UploadId=up,
                MultipartUpload={"Parts": [{"PartNumber": 3, "ETag": last["ETag"]}]})
        self.assertEqual(error_code(e.exception), "InvalidPart")
        self.s3.abort_multipart_upload(Bucket=self.bucket, Key="m", UploadId=up)
        with self.assertRaises(ClientError) as e:
            self.s3.list_parts(Bucket=self.bucket, Key="m", UploadId=up)
        self.assertEqual(error_code(e.exception), "NoSuchUpload")

    def test_upload_part_copy_with_range(self):
        src = os.urandom(6 * 1024 * 1024)
        self.s3.put_object(Bucket=self.bucket, Key="src", Body=src)
        up = self.s3.create_multipart_upload(Bucket=self.bucket, Key="assembled")["UploadId"]
        p1 = self.s3.upload_part_copy(Bucket=self.bucket, Key="assembled", UploadId=up, PartNumber=1,
                                      CopySource={"Bucket": self.bucket, "Key": "src"},
                                      CopySourceRange="bytes=0-%d" % (5 * 1024 * 1024 - 1))
        p2 = self.s3.upload_part_copy(Bucket=self.bucket, Key="assembled", UploadId=up, PartNumber=2,
                                      CopySource={"Bucket": self.bucket, "Key": "src"},
                                      CopySourceRange="bytes=100-199")
        self.s3.complete_multipart_upload(
            Bucket=self.bucket, Key="assembled", UploadId=up,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p1["CopyPartResult"]["ETag"]},
                                       {"PartNumber": 2, "ETag": p2["CopyPartResult"]["ETag"]}]})
        got = self.s3.get_object(Bucket=self.bucket, Key="assembled")["Body"].read()
        self.assertEqual(got, src[:5 * 1024 * 1024] + src[100:200])

    def test_conditional_complete_multipart(self):
        self.s3.put_object(Bucket=self.bucket, Key="exists", Body=b"old")
        up = self.s3.create_multipart_upload(Bucket=self.bucket, Key="exists")["UploadId"]
        p = self.s3.upload_part(Bucket=self.bucket, Key="exists", UploadId=up, PartNumber=1, Body=b"new")
        with self.assertRaises(ClientError) as e:
            self.s3.complete_multipart_upload(
                Bucket=self.bucket, Key="exists", UploadId=up, IfNoneMatch="*",
                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p["ETag"]}]})
        self.assertEqual(error_code(e.exception), "PreconditionFailed")
        self.assertEqual(self.s3.get_object(Bucket=self.bucket, Key="exists")["Body"].read(), b"old")

    # --- Versioning ------------------------------------------------------------------------------

    def test_versioning(self):
        self.s3.put_bucket_versioning(Bucket=self.bucket, VersioningConfiguration={"Status": "Enabled"})
        self.assertEqual(self.s3.get_bucket_versioning(Bucket=self.bucket)["Status"], "Enabled")
        v1 = self.s3.put_object(Bucket=self.bucket, Key="v", Body=b"one")["VersionId"]
        v2 = self.s3.put_object(Bucket=self.bucket, Key="v", Body=b"two")["VersionId"]
        self.assertNotEqual(v1, v2)
        d = self.s3.delete_object(Bucket=self.bucket, Key="v")
        self.assertTrue(d["DeleteMarker"])
        with self.assertRaises(ClientError) as e:
            self.s3.get_object(Bucket=self.bucket, Key="v")
        self.assertEqual(error_code(e.exception), "NoSuchKey")
        self.assertEqual(self.s3.get_object(Bucket=self.bucket, Key="v", VersionId=v1)["Body"].read(), b"one")
        r = self.s3.list_object_versions(Bucket=self.bucket)
        self.assertEqual([v["VersionId"] for v in r["Versions"]], [v2, v1])
        self.assertEqual(len(r["DeleteMarkers"]), 1)
        self.s3.delete_object(Bucket=self.bucket, Key="v", VersionId=d["VersionId"])
        self.assertEqual(self.s3.get_object(Bucket=self.bucket, Key="v")["Body"].read(), b"two")
        self.s3.put_bucket_versioning(Bucket=self.bucket, VersioningConfiguration={"Status": "Suspended"})
        n = self.s3.put_object(Bucket=self.bucket, Key="v", Body=b"null")
        self.assertEqual(self.s3.head_object(Bucket=self.bucket, Key="v")["VersionId"], "null")

    def test_list_object_versions_on_unversioned_bucket(self):
        self.s3.put_object(Bucket=self.bucket, Key="plain", Body=b"x")
        r = self.s3.list_object_versions(Bucket=self.bucket)
        self.assertEqual([(v["Key"], v["VersionId"]) for v in r["Versions"]], [("plain", "null")])

    # --- Tagging, CORS, policy -------------------------------------------------------------------

    def test_object_and_bucket_tagging(self):
        self.s3.put_object(Bucket=self.bucket, Key="t", Body=b"x")
        self.s3.put_object_tagging(Bucket=self.bucket, Key="t",
                                   Tagging={"TagSet": [{"Key": "k", "Value": "v"}]})
        self.assertEqual(self.s3.get_object_tagging(Bucket=self.bucket, Key="t")["TagSet"],
                         [{"Key": "k", "Value": "v"}])
        self.s3.delete_object_tagging(Bucket=self.bucket, Key="t")
        self.assertEqual(self.s3.get_object_tagging(Bucket=self.bucket, Key="t")["TagSet"], [])
        with self.assertRaises(ClientError) as e:
            self.s3.get_bucket_tagging(Bucket=self.bucket)
        self.assertEqual(error_code(e.exception), "NoSuchTagSet")
        self.s3.put_bucket_tagging(Bucket=self.bucket, Tagging={"TagSet": [{"Key": "p", "Value": "q"}]})
        self.assertEqual(self.s3.get_bucket_tagging(Bucket=self.bucket)["TagSet"], [{"Key": "p", "Value": "q"}])
        with self.assertRaises(ClientError) as e:
            self.s3.put_object_tagging(Bucket=self.bucket, Key="t", Tagging={"TagSet": [
                {"Key": "k%d" % i, "Value": "v"} for i in range(11)]})
        self.assertEqual(error_code(e.exception), "InvalidTag")

    def test_cors_configuration_and_preflight(self):
        with self.assertRaises(ClientError) as e:
            self.s3.get_bucket_cors(Bucket=self.bucket)
        self.assertEqual(error_code(e.exception), "NoSuchCORSConfiguration")
        self.s3.put_bucket_cors(Bucket=self.bucket, CORSConfiguration={"CORSRules": [{
            "AllowedOrigins": ["http://panel.example"], "AllowedMethods": ["PUT", "GET"],
            "AllowedHeaders": ["*"], "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 600}]})
        rules = self.s3.get_bucket_cors(Bucket=self.bucket)["CORSRules"]
        self.assertEqual(rules[0]["AllowedMethods"], ["PUT", "GET"])
        url = "%s/%s/upload.bin" % (self.server.s3_url, self.bucket)
        status, _, headers = self.open_url(url, method="OPTIONS", headers={
            "Origin": "http://panel.example", "Access-Control-Request-Method": "PUT",
            "Access-Control-Request-Headers": "content-type, x-amz-date"})
        self.assertEqual(status, 200)
        self.assertEqual(headers["Access-Control-Allow-Origin"], "http://panel.example")
        self.assertIn("PUT", headers["Access-Control-Allow-Methods"])
        status, _, _ = self.open_url(url, method="OPTIONS", headers={
            "Origin": "http://evil.example", "Access-Control-Request-Method": "PUT"})
        self.assertEqual(status, 403)
        self.s3.delete_bucket_cors(Bucket=self.bucket)
        status, _, _ = self.open_url(url, method="OPTIONS", headers={
            "Origin": "http://panel.example", "Access-Control-Request-Method": "PUT"})
        self.assertEqual(status, 403)

    def test_public_read_policy_allows_anonymous_get_only(self):
        self.s3.put_object(Bucket=self.bucket, Key="pub.txt", Body=b"public")
        url = "%s/%s/pub.txt" % (self.server.s3_url, self.bucket)
        self.assertEqual(self.open_url(url)[0], 403)
        policy = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject"],
            "Resource": ["arn:aws:s3:::%s/*" % self.bucket]}]}
        self.s3.put_bucket_policy(Bucket=self.bucket, Policy=json.dumps(policy))
        self.assertEqual(json.loads(self.s3.get_bucket_policy(Bucket=self.bucket)["Policy"]), policy)
        status, body, _ = self.open_url(url)
        self.assertEqual((status, body), (200, b"public"))
        self.assertEqual(self.open_url(url, method="PUT", data=b"overwrite")[0], 403)
        self.assertEqual(self.open_url("%s/%s" % (self.server.s3_url, self.bucket))[0], 403)
        with self.assertRaises(ClientError) as e:
            self.s3.put_bucket_policy(Bucket=self.bucket, Policy='{"Statement": "nope"}')
        self.assertEqual(error_code(e.exception), "MalformedPolicy")
        self.s3.delete_bucket_policy(Bucket=self.bucket)
        self.assertEqual(self.open_url(url)[0], 403)

    # --- Presigned URLs --------------------------------------------------------------------------

    def test_presigned_v4_and_v2(self):
        self.s3.put_object(Bucket=self.bucket, Key="p r+s.txt", Body=b"presigned")
        v4 = self.s3.generate_presigned_url("get_object", Params={"Bucket": self.bucket, "Key": "p r+s.txt"},
                                            ExpiresIn=60)
        self.assertIn("X-Amz-Signature", v4)
        self.assertEqual(self.open_url(v4)[:2], (200, b"presigned"))
        tampered = v4.replace("p%20r", "p%20q")
        self.assertEqual(self.open_url(tampered)[0], 403)
        v2_client = self.server.boto3_client(signature_version="s3")
        v2 = v2_client.generate_presigned_url("get_object", Params={"Bucket": self.bucket, "Key": "p r+s.txt"},
                                              ExpiresIn=60)
        self.assertIn("AWSAccessKeyId", v2)
        self.assertEqual(self.open_url(v2)[:2], (200, b"presigned"))
        put_url = self.s3.generate_presigned_url("put_object", Params={"Bucket": self.bucket, "Key": "up"},
                                                 ExpiresIn=60)
        self.assertEqual(self.open_url(put_url, method="PUT", data=b"uploaded")[0], 200)
        self.assertEqual(self.s3.get_object(Bucket=self.bucket, Key="up")["Body"].read(), b"uploaded")
        expired = self.s3.generate_presigned_url("get_object", Params={"Bucket": self.bucket, "Key": "up"},
                                                 ExpiresIn=1)
        time.sleep(2.1)
        status, body, _ = self.open_url(expired)
        self.assertEqual(status, 403)
        self.assertIn(b"expired", body)

    # --- Identity and tampering ------------------------------------------------------------------

    def test_wrong_secret_and_unknown_key_are_rejected(self):
        bad = self.server.boto3_client(secret_key="x" * 40)
        with self.assertRaises(ClientError) as e:
            bad.list_objects_v2(Bucket=self.bucket)
        self.assertEqual(error_code(e.exception), "SignatureDoesNotMatch")
        unknown = self.server.boto3_client(access_key="SVUNKNOWNKEY00000000")
        with self.assertRaises(ClientError) as e:
            unknown.list_objects_v2(Bucket=self.bucket)
        self.assertEqual(error_code(e.exception), "InvalidAccessKeyId")
        status, _, _ = self.open_url("%s/%s" % (self.server.s3_url, self.bucket))
        self.assertEqual(status, 403)

    def signed_put(self, key, body, headers=None):
        """A SigV4-signed PUT as botocore would send it: (method, path, headers, body)."""
        url = "%s/%s/%s" % (self.server.s3_url, self.bucket, key)
        req = AWSRequest(method="PUT", url=url, data=body, headers=headers or {})
        req.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
        S3SigV4Auth(Credentials(self.server.access_key, self.server.secret_key), "s3", REGION).add_auth(req)
        return req

    def raw_send(self, method, path, headers, body):
        host, port = self.server.s3_url.split("://")[1].split(":")
        if self.TLS:
            conn = http.client.HTTPSConnection(host, int(port), context=ssl.create_default_context(
                cafile=self.server.cert))
        else:
            conn = http.client.HTTPConnection(host, int(port))
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        out = (r.status, r.read())
        conn.close()
        return out

    def test_tampered_body_or_header_is_rejected(self):
        req = self.signed_put("tampered", b"original body")
        path = "/%s/tampered" % self.bucket
        headers = dict(req.headers.items())
        status, body = self.raw_send("PUT", path, headers, b"Original body")
        self.assertEqual(status, 400, body)
        self.assertIn(b"XAmzContentSHA256Mismatch", body)
        changed = dict(headers)
        changed["x-amz-content-sha256"] = hashlib.sha256(b"Original body").hexdigest()
        status, body = self.raw_send("PUT", path, changed, b"Original body")
        self.assertEqual(status, 403)
        self.assertIn(b"SignatureDoesNotMatch", body)
        with self.assertRaises(ClientError):
            self.s3.head_object(Bucket=self.bucket, Key="tampered")
        status, _ = self.raw_send("PUT", path, headers, b"original body")
        self.assertEqual(status, 200)

    def test_isolation_between_users(self):
        bob = self.server.create_user_key("bob-" + self.bucket)
        b3 = self.server.boto3_client(access_key=bob["access_key_id"], secret_key=bob["secret_access_key"])
        self.s3.put_object(Bucket=self.bucket, Key="secret", Body=b"alice's")
        for call in [lambda: b3.list_objects_v2(Bucket=self.bucket),
                     lambda: b3.get_object(Bucket=self.bucket, Key="secret"),
                     lambda: b3.put_object(Bucket=self.bucket, Key="x", Body=b"bob"),
                     lambda: b3.delete_object(Bucket=self.bucket, Key="secret"),
                     lambda: b3.delete_bucket(Bucket=self.bucket),
                     lambda: b3.get_bucket_policy(Bucket=self.bucket)]:
            with self.assertRaises(ClientError) as e:
                call()
            self.assertEqual(error_code(e.exception), "AccessDenied")
        self.assertNotIn(self.bucket, [b["Name"] for b in b3.list_buckets()["Buckets"]])
        own = "bob-own-" + self.bucket[2:]
        b3.create_bucket(Bucket=own, CreateBucketConfiguration={"LocationConstraint": REGION})
        b3.put_object(Bucket=own, Key="k", Body=b"bob's")
        # A grant in alice's policy lets bob read.
        policy = {"Statement": [{"Effect": "Allow", "Principal": {"AWS": [bob["user"]]},
                                 "Action": ["s3:GetObject", "s3:ListBucket"],
                                 "Resource": ["arn:aws:s3:::%s" % self.bucket,
                                              "arn:aws:s3:::%s/*" % self.bucket]}]}
        self.s3.put_bucket_policy(Bucket=self.bucket, Policy=json.dumps(policy))
        self.assertEqual(b3.get_object(Bucket=self.bucket, Key="secret")["Body"].read(), b"alice's")
        with self.assertRaises(ClientError):
            b3.put_object(Bucket=self.bucket, Key="x", Body=b"bob")
        b3.delete_object(Bucket=own, Key="k")
        b3.delete_bucket(Bucket=own)

    def test_virtual_hosted_style_addressing(self):
        self.s3.put_object(Bucket=self.bucket, Key="vh/key.txt", Body=b"virtual")
        host, port = self.server.s3_url.split("://")[1].split(":")
        url = "%s://%s.s3.localhost:%s/vh/key.txt" % (self.server.s3_url.split(":")[0], self.bucket, port)
        req = AWSRequest(method="GET", url=url)
        req.headers["x-amz-content-sha256"] = hashlib.sha256(b"").hexdigest()
        S3SigV4Auth(Credentials(self.server.access_key, self.server.secret_key), "s3", REGION).add_auth(req)
        headers = dict(req.headers.items())
        headers["Host"] = "%s.s3.localhost:%s" % (self.bucket, port)  # connect to 127.0.0.1
        status, body = self.raw_send("GET", "/vh/key.txt", headers, None)
        self.assertEqual((status, body), (200, b"virtual"))

    def test_payload_mode_matches_the_transport(self):
        before = self.server.metrics()
        self.s3.put_object(Bucket=self.bucket, Key="mode", Body=b"x" * 1000)
        after = self.server.metrics()
        # boto3 signs the payload over HTTP; over HTTPS it streams with a checksum trailer.
        mode = "streaming-unsigned-trailer" if self.TLS else "signed-sha256"
        line = 'sovai_s3_authenticated_requests_total{payload="%s"} ' % mode
        count = lambda text: int(text.split(line)[1].split()[0])
        self.assertGreater(count(after), count(before))

    # --- Bad input -------------------------------------------------------------------------------

    def test_bad_input_gets_s3_errors_and_server_stays_healthy(self):
        req = self.signed_put("x?delete", b"<Delete><Object><Key>a</Key></Object>")
        # POST ?delete with malformed XML.
        url = "%s/%s?delete" % (self.server.s3_url, self.bucket)
        body = b"<Delete><Object><Key>a</Key></Object>"
        req = AWSRequest(method="POST", url=url, data=body,
                         headers={"Content-MD5": __import__("base64").b64encode(hashlib.md5(body).digest()).decode()})
        req.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
        S3SigV4Auth(Credentials(self.server.access_key, self.server.secret_key), "s3", REGION).add_auth(req)
        status, resp = self.raw_send("POST", "/%s?delete" % self.bucket, dict(req.headers.items()), body)
        self.assertEqual(status, 400)
        self.assertIn(b"MalformedXML", resp)
        # A Content-Length that promises more than is sent: the server times the body out or sees
        # the close; either way nothing is stored.
        host, port = self.server.s3_url.split("://")[1].split(":")
        if not self.TLS:
            req = self.signed_put("liar", b"0123456789")
            s = socket.create_connection((host, int(port)))
            lines = ["PUT /%s/liar HTTP/1.1" % self.bucket]
            for k, v in req.headers.items():
                lines.append("%s: %s" % (k, v))
            s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + b"01234")
            s.shutdown(socket.SHUT_WR)
            s.recv(65536)
            s.close()
            with self.assertRaises(ClientError):
                self.s3.head_object(Bucket=self.bucket, Key="liar")
        with urllib.request.urlopen(self.server.api_url + "/health") as r:
            self.assertEqual(r.status, 200)
        self.s3.put_object(Bucket=self.bucket, Key="still", Body=b"fine")


class S3Boto3HttpTest(S3Boto3Base, unittest.TestCase):
    TLS = False


class S3Boto3HttpsTest(S3Boto3Base, unittest.TestCase):
    TLS = True


if __name__ == "__main__":
    unittest.main()
