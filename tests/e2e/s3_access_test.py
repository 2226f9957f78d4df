"""Access control of the S3 store with real clients (boto3, aws-cli, and botocore's UNSIGNED
client for anonymous requests) against a real `sovai server` (issue 29): canned ACLs, grant
headers and AccessControlPolicy bodies, Object Ownership, the Public Access Block, the policy
status, and bucket policies with conditions, across users. Two ordinary users (alice owns the
buckets, bob is another tenant) so that no request rides on the admin's rights."""

import json
import os
import subprocess
import sys
import unittest
import uuid

import botocore
from botocore.config import Config
from botocore.exceptions import ClientError

from sovai_fixture import empty_and_delete_bucket, REGION, SovaiServer

ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
AUTHENTICATED_USERS = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"


def error_code(e):
    return e.response["Error"]["Code"]


class S3AccessTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = SovaiServer().start()
        cls.admin = cls.server.boto3_client()
        cls.alice_key = cls.server.create_user_key("alice-" + uuid.uuid4().hex[:6])
        cls.bob_key = cls.server.create_user_key("bob-" + uuid.uuid4().hex[:6])
        cls.alice = cls.client(cls.alice_key)
        cls.bob = cls.client(cls.bob_key)
        cls.anonymous = cls.server.boto3_client(signature_version=botocore.UNSIGNED)

    @classmethod
    def client(cls, key):
        return cls.server.boto3_client(access_key=key["access_key_id"],
                                       secret_key=key["secret_access_key"])

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    def setUp(self):
        self.buckets = []

    def tearDown(self):
        for b in self.buckets:
            empty_and_delete_bucket(self.admin, b)

    def new_bucket(self, **kwargs):
        name = "acc-" + uuid.uuid4().hex[:12]
        self.alice.create_bucket(Bucket=name,
                                 CreateBucketConfiguration={"LocationConstraint": REGION},
                                 **kwargs)
        self.buckets.append(name)
        return name

    def assert_error(self, code, call, *args, **kwargs):
        with self.assertRaises(ClientError) as e:
            call(*args, **kwargs)
        self.assertEqual(error_code(e.exception), code, e.exception.response)
        return e.exception.response

    def grants(self, acl):
        return sorted((g["Grantee"]["Type"], g["Grantee"].get("ID") or g["Grantee"].get("URI"),
                       g["Permission"]) for g in acl["Grants"])

    # --- Object Ownership ------------------------------------------------------------------------

    def test_a_new_bucket_has_acls_disabled_as_on_aws(self):
        b = self.new_bucket()
        rules = self.alice.get_bucket_ownership_controls(Bucket=b)["OwnershipControls"]["Rules"]
        self.assertEqual(rules, [{"ObjectOwnership": "BucketOwnerEnforced"}])
        self.assert_error("AccessControlListNotSupported", self.alice.put_object, Bucket=b,
                          Key="k", Body=b"x", ACL="public-read")
        self.assert_error("AccessControlListNotSupported", self.alice.put_bucket_acl, Bucket=b,
                          ACL="public-read")
        self.assert_error("NoSuchKey", self.alice.get_object, Bucket=b, Key="k")
        # What ACLs disabled still take: the owner's full control.
        self.alice.put_object(Bucket=b, Key="k", Body=b"x", ACL="bucket-owner-full-control")
        self.alice.put_bucket_acl(Bucket=b, ACL="private")
        owner = self.alice_key["user"]
        self.assertEqual(self.grants(self.alice.get_bucket_acl(Bucket=b)),
                         [("CanonicalUser", owner, "FULL_CONTROL")])
        self.assert_error("AccessDenied", self.anonymous.get_object, Bucket=b, Key="k")
        self.assert_error("AccessDenied", self.anonymous.list_objects_v2, Bucket=b)
        self.assert_error("AccessDenied", self.bob.get_object, Bucket=b, Key="k")

    def test_ownership_controls_put_get_delete_and_bad_input(self):
        b = self.new_bucket()
        self.alice.put_bucket_ownership_controls(
            Bucket=b, OwnershipControls={"Rules": [{"ObjectOwnership": "ObjectWriter"}]})
        self.assertEqual(self.alice.get_bucket_ownership_controls(Bucket=b)["OwnershipControls"],
                         {"Rules": [{"ObjectOwnership": "ObjectWriter"}]})
        self.alice.put_object(Bucket=b, Key="pub", Body=b"p", ACL="public-read")
        self.alice.delete_bucket_ownership_controls(Bucket=b)
        self.assert_error("OwnershipControlsNotFoundError",
                          self.alice.get_bucket_ownership_controls, Bucket=b)
        self.assertEqual(self.anonymous.get_object(Bucket=b, Key="pub")["Body"].read(), b"p")
        self.assert_error("MalformedXML", self.alice.put_bucket_ownership_controls, Bucket=b,
                          OwnershipControls={"Rules": [{"ObjectOwnership": "Mine"}]})
        self.assert_error("AccessDenied", self.bob.put_bucket_ownership_controls, Bucket=b,
                          OwnershipControls={"Rules": [{"ObjectOwnership": "ObjectWriter"}]})
        name = "acc-" + uuid.uuid4().hex[:12]
        self.assert_error("InvalidBucketAclWithObjectOwnership", self.alice.create_bucket,
                          Bucket=name, CreateBucketConfiguration={"LocationConstraint": REGION},
                          ACL="public-read", ObjectOwnership="BucketOwnerEnforced")
        self.assert_error("NoSuchBucket", self.alice.list_objects_v2, Bucket=name)

    # --- Canned ACLs and anonymous access --------------------------------------------------------

    def test_a_public_read_bucket_lists_and_serves_unsigned_clients(self):
        b = self.new_bucket(ACL="public-read")
        self.assertEqual(self.alice.get_bucket_ownership_controls(Bucket=b)["OwnershipControls"],
                         {"Rules": [{"ObjectOwnership": "ObjectWriter"}]})
        self.alice.put_object(Bucket=b, Key="pub/a.txt", Body=b"public", ACL="public-read")
        self.alice.put_object(Bucket=b, Key="private.txt", Body=b"secret")
        owner = self.alice_key["user"]
        self.assertIn(("Group", ALL_USERS, "READ"), self.grants(self.alice.get_bucket_acl(Bucket=b)))
        listing = self.anonymous.list_objects(Bucket=b)
        self.assertEqual([o["Key"] for o in listing["Contents"]], ["private.txt", "pub/a.txt"])
        self.assertEqual({o["Owner"]["ID"] for o in listing["Contents"]}, {owner})
        v2 = self.anonymous.list_objects_v2(Bucket=b, FetchOwner=True)
        self.assertEqual(v2["KeyCount"], 2)
        self.assertEqual(self.anonymous.get_object(Bucket=b, Key="pub/a.txt")["Body"].read(),
                         b"public")
        self.assertEqual(self.anonymous.head_object(Bucket=b, Key="pub/a.txt")["ContentLength"], 6)
        self.anonymous.head_bucket(Bucket=b)
        # The bucket's READ lists; each object's own ACL decides whether it is served.
        self.assert_error("AccessDenied", self.anonymous.get_object, Bucket=b, Key="private.txt")
        self.assert_error("NoSuchKey", self.anonymous.get_object, Bucket=b, Key="absent")
        self.assert_error("AccessDenied", self.anonymous.put_object, Bucket=b, Key="x", Body=b"x")
        self.assert_error("AccessDenied", self.anonymous.delete_object, Bucket=b, Key="pub/a.txt")
        self.assert_error("AccessDenied", self.anonymous.get_bucket_acl, Bucket=b)
        self.assert_error("AccessDenied", self.anonymous.list_buckets)
        self.assertEqual(self.grants(self.alice.get_object_acl(Bucket=b, Key="pub/a.txt")),
                         [("CanonicalUser", owner, "FULL_CONTROL"), ("Group", ALL_USERS, "READ")])
        # Back to private: anonymous reads stop.
        self.alice.put_object_acl(Bucket=b, Key="pub/a.txt", ACL="private")
        self.assert_error("AccessDenied", self.anonymous.get_object, Bucket=b, Key="pub/a.txt")
        self.alice.put_bucket_acl(Bucket=b, ACL="private")
        self.assert_error("AccessDenied", self.anonymous.list_objects, Bucket=b)

    def test_public_read_write_lets_others_write_and_own_what_they_write(self):
        b = self.new_bucket(ACL="public-read-write")
        self.bob.put_object(Bucket=b, Key="from-bob", Body=b"bob")
        self.anonymous.put_object(Bucket=b, Key="from-anon", Body=b"anon")
        owners = {o["Key"]: o["Owner"]["ID"]
                  for o in self.alice.list_objects_v2(Bucket=b, FetchOwner=True)["Contents"]}
        self.assertEqual(owners, {"from-bob": self.bob_key["user"],
                                  "from-anon": self.alice_key["user"]})
        self.assertEqual(self.bob.get_object(Bucket=b, Key="from-bob")["Body"].read(), b"bob")
        # bob's object is bob's: alice's bucket WRITE does not make it readable by others.
        self.assert_error("AccessDenied", self.anonymous.get_object, Bucket=b, Key="from-bob")
        # bucket-owner-full-control shares it with the bucket owner, who owns the bucket anyway.
        self.bob.put_object(Bucket=b, Key="shared", Body=b"s", ACL="bucket-owner-full-control")
        self.assertIn(("CanonicalUser", self.alice_key["user"], "FULL_CONTROL"),
                      self.grants(self.bob.get_object_acl(Bucket=b, Key="shared")))

    def test_authenticated_read_and_canned_acls_on_copy_and_multipart(self):
        b = self.new_bucket(ObjectOwnership="ObjectWriter")
        self.alice.put_object(Bucket=b, Key="src", Body=b"source")
        self.alice.copy_object(Bucket=b, Key="copy", CopySource={"Bucket": b, "Key": "src"},
                               ACL="authenticated-read")
        self.assertEqual(self.bob.get_object(Bucket=b, Key="copy")["Body"].read(), b"source")
        self.assert_error("AccessDenied", self.anonymous.get_object, Bucket=b, Key="copy")
        self.assert_error("AccessDenied", self.bob.get_object, Bucket=b, Key="src")
        up = self.alice.create_multipart_upload(Bucket=b, Key="mp", ACL="public-read")
        part = self.alice.upload_part(Bucket=b, Key="mp", UploadId=up["UploadId"], PartNumber=1,
                                      Body=b"multi")
        self.alice.complete_multipart_upload(
            Bucket=b, Key="mp", UploadId=up["UploadId"],
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
        self.assertEqual(self.anonymous.get_object(Bucket=b, Key="mp")["Body"].read(), b"multi")
        # A copy does not carry its source's ACL.
        self.alice.copy_object(Bucket=b, Key="mp-copy", CopySource={"Bucket": b, "Key": "mp"})
        self.assert_error("AccessDenied", self.anonymous.get_object, Bucket=b, Key="mp-copy")
        self.assert_error("InvalidArgument", self.alice.put_object, Bucket=b, Key="x", Body=b"x",
                          ACL="everyone-may-read")
        self.assert_error("InvalidRequest", self.alice.put_object, Bucket=b, Key="x", Body=b"x",
                          ACL="public-read", GrantRead='uri="%s"' % ALL_USERS)

    # --- Grants ----------------------------------------------------------------------------------

    def test_a_grant_by_email_names_the_control_plane_user(self):
        # The user with that address (any case) in the control plane is the grantee, by its
        # name, which is its S3 owner id.
        name = "carol-" + uuid.uuid4().hex[:6]
        status, user = self.server.api("POST", "/v1/users",
                                       {"name": name, "email": name + "@Example.com"})
        self.assertEqual(status, 201, user)
        carol = self.client(self.server.create_user_key(name))
        b = self.new_bucket(ObjectOwnership="BucketOwnerPreferred")
        self.alice.put_object(Bucket=b, Key="k", Body=b"for carol")
        self.assert_error("AccessDenied", carol.get_object, Bucket=b, Key="k")
        self.alice.put_object_acl(Bucket=b, Key="k",
                                  GrantRead='emailAddress="%s@example.com"' % name.upper())
        self.assertIn(("CanonicalUser", name, "READ"),
                      self.grants(self.alice.get_object_acl(Bucket=b, Key="k")))
        self.assertEqual(carol.get_object(Bucket=b, Key="k")["Body"].read(), b"for carol")

    def test_delete_objects_is_authorized_per_key(self):
        b = self.new_bucket()
        for key in ("tmp/a", "keep/b"):
            self.alice.put_object(Bucket=b, Key=key, Body=b"x")
        self.alice.put_bucket_policy(Bucket=b, Policy=json.dumps({
            "Version": "2012-10-17", "Statement": [{
                "Effect": "Allow", "Principal": {"AWS": [self.bob_key["user"]]},
                "Action": "s3:DeleteObject", "Resource": "arn:aws:s3:::%s/tmp/*" % b}]}))
        out = self.bob.delete_objects(Bucket=b, Delete={"Objects": [{"Key": "tmp/a"},
                                                                    {"Key": "keep/b"}]})
        self.assertEqual([d["Key"] for d in out.get("Deleted", [])], ["tmp/a"])
        self.assertEqual([(e["Key"], e["Code"]) for e in out["Errors"]],
                         [("keep/b", "AccessDenied")])
        self.assertEqual([o["Key"] for o in self.alice.list_objects_v2(Bucket=b)["Contents"]],
                         ["keep/b"])

    def test_grants_by_id_group_and_email_and_unknown_grantees(self):
        b = self.new_bucket(ObjectOwnership="BucketOwnerPreferred")
        self.alice.put_object(Bucket=b, Key="k", Body=b"granted")
        bob = self.bob_key["user"]
        self.alice.put_object_acl(Bucket=b, Key="k", GrantRead='id="%s"' % bob,
                                  GrantFullControl='id="%s"' % self.alice_key["user"])
        self.assertEqual(self.bob.get_object(Bucket=b, Key="k")["Body"].read(), b"granted")
        self.assert_error("AccessDenied", self.bob.put_object_acl, Bucket=b, Key="k",
                          ACL="public-read")
        owner = {"ID": self.alice_key["user"], "DisplayName": self.alice_key["user"]}
        self.alice.put_bucket_acl(Bucket=b, AccessControlPolicy={
            "Owner": owner,
            "Grants": [
                {"Grantee": {"Type": "CanonicalUser", "ID": self.alice_key["user"]},
                 "Permission": "FULL_CONTROL"},
                {"Grantee": {"Type": "Group", "URI": AUTHENTICATED_USERS}, "Permission": "READ"},
                {"Grantee": {"Type": "CanonicalUser", "ID": bob}, "Permission": "WRITE"}]})
        self.assertEqual([o["Key"] for o in self.bob.list_objects_v2(Bucket=b)["Contents"]], ["k"])
        self.assert_error("AccessDenied", self.anonymous.list_objects_v2, Bucket=b)
        self.bob.put_object(Bucket=b, Key="by-bob", Body=b"b")
        self.assertIn(("CanonicalUser", bob, "WRITE"),
                      self.grants(self.alice.get_bucket_acl(Bucket=b)))
        # Unknown grantees are the client's error, never 501.
        self.assert_error("InvalidArgument", self.alice.put_object_acl, Bucket=b, Key="k",
                          GrantRead='id="nobody-here"')
        self.assert_error("UnresolvableGrantByEmailAddress", self.alice.put_object_acl,
                          Bucket=b, Key="k", GrantRead='emailAddress="nobody@example.com"')
        self.assert_error("InvalidArgument", self.alice.put_bucket_acl, Bucket=b,
                          GrantRead='uri="http://acs.amazonaws.com/groups/global/Nobody"')
        self.assert_error("UnresolvableGrantByEmailAddress", self.alice.put_bucket_acl, Bucket=b,
                          AccessControlPolicy={"Owner": owner, "Grants": [
                              {"Grantee": {"Type": "AmazonCustomerByEmail",
                                           "EmailAddress": "x@example.com"},
                               "Permission": "READ"}]})
        self.assert_error("MalformedACLError", self.alice.put_bucket_acl, Bucket=b,
                          AccessControlPolicy={"Owner": owner, "Grants": [
                              {"Grantee": {"Type": "Group", "URI": ALL_USERS},
                               "Permission": "EVERYTHING"}]})
        self.assert_error("AccessDenied", self.alice.put_bucket_acl, Bucket=b,
                          AccessControlPolicy={"Owner": {"ID": bob}, "Grants": []})
        # The ACL is unchanged by the refused calls.
        self.assertNotIn("EVERYTHING", str(self.alice.get_bucket_acl(Bucket=b)))

    def test_bad_acl_xml_is_malformed(self):
        b = self.new_bucket(ObjectOwnership="ObjectWriter")
        self.alice.put_object(Bucket=b, Key="k", Body=b"x")
        for body in [b"<AccessControlPolicy>", b"<NotAnAcl/>",
                     b'<!DOCTYPE x [<!ENTITY a "b">]><AccessControlPolicy/>']:
            def send(request, body=body, **kwargs):
                # The body and its digests are replaced before the request is signed.
                request.data = body
                for name in list(request.headers.keys()):
                    if name.lower() == "content-md5" or name.lower().startswith("x-amz-checksum") \
                            or name.lower() == "x-amz-sdk-checksum-algorithm":
                        del request.headers[name]
                request.headers["Content-Length"] = str(len(body))
            events = self.alice.meta.events
            events.register("before-sign.s3.PutBucketAcl", send)
            try:
                self.assert_error("MalformedXML", self.alice.put_bucket_acl, Bucket=b,
                                  AccessControlPolicy={"Owner": {"ID": "x"}, "Grants": []})
            finally:
                events.unregister("before-sign.s3.PutBucketAcl", send)

    # --- Public Access Block and policy status ---------------------------------------------------

    def test_public_access_block_enforces_all_four_flags(self):
        b = self.new_bucket(ACL="public-read")
        self.alice.put_object(Bucket=b, Key="pub", Body=b"p", ACL="public-read")
        self.assert_error("NoSuchPublicAccessBlockConfiguration",
                          self.alice.get_public_access_block, Bucket=b)
        self.alice.put_public_access_block(Bucket=b, PublicAccessBlockConfiguration={
            "BlockPublicAcls": True})
        self.assertEqual(
            self.alice.get_public_access_block(Bucket=b)["PublicAccessBlockConfiguration"],
            {"BlockPublicAcls": True, "IgnorePublicAcls": False, "BlockPublicPolicy": False,
             "RestrictPublicBuckets": False})
        self.assert_error("AccessDenied", self.alice.put_object, Bucket=b, Key="p2", Body=b"x",
                          ACL="public-read")
        self.assert_error("AccessDenied", self.alice.put_object_acl, Bucket=b, Key="pub",
                          ACL="public-read-write")
        self.assert_error("AccessDenied", self.alice.put_bucket_acl, Bucket=b,
                          ACL="authenticated-read")
        self.assertEqual(self.anonymous.get_object(Bucket=b, Key="pub")["Body"].read(), b"p")
        self.alice.put_public_access_block(Bucket=b, PublicAccessBlockConfiguration={
            "IgnorePublicAcls": True})
        self.assert_error("AccessDenied", self.anonymous.get_object, Bucket=b, Key="pub")
        self.assert_error("AccessDenied", self.anonymous.list_objects, Bucket=b)
        public = json.dumps({"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
            "Resource": "arn:aws:s3:::%s/*" % b}]})
        self.alice.put_public_access_block(Bucket=b, PublicAccessBlockConfiguration={
            "BlockPublicPolicy": True})
        self.assert_error("AccessDenied", self.alice.put_bucket_policy, Bucket=b, Policy=public)
        self.alice.delete_public_access_block(Bucket=b)
        self.alice.put_bucket_policy(Bucket=b, Policy=public)
        self.assertTrue(self.alice.get_bucket_policy_status(Bucket=b)["PolicyStatus"]["IsPublic"])
        self.alice.put_object(Bucket=b, Key="by-policy", Body=b"pol")
        self.assertEqual(self.anonymous.get_object(Bucket=b, Key="by-policy")["Body"].read(),
                         b"pol")
        self.alice.put_public_access_block(Bucket=b, PublicAccessBlockConfiguration={
            "RestrictPublicBuckets": True})
        self.assert_error("AccessDenied", self.anonymous.get_object, Bucket=b, Key="by-policy")
        self.assert_error("AccessDenied", self.bob.get_object, Bucket=b, Key="by-policy")
        self.assertEqual(self.alice.get_object(Bucket=b, Key="by-policy")["Body"].read(), b"pol")
        self.assert_error("AccessDenied", self.bob.delete_public_access_block, Bucket=b)

    def test_policy_status(self):
        b = self.new_bucket()
        self.assert_error("NoSuchBucketPolicy", self.alice.get_bucket_policy_status, Bucket=b)
        restricted = {"Statement": [{
            "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
            "Resource": "arn:aws:s3:::%s/*" % b,
            "Condition": {"IpAddress": {"aws:SourceIp": "10.1.0.0/16"}}}]}
        self.alice.put_bucket_policy(Bucket=b, Policy=json.dumps(restricted))
        self.assertFalse(self.alice.get_bucket_policy_status(Bucket=b)["PolicyStatus"]["IsPublic"])
        self.assert_error("AccessDenied", self.bob.get_bucket_policy_status, Bucket=b)

    # --- Bucket policies -------------------------------------------------------------------------

    def put_policy(self, bucket, *statements):
        self.alice.put_bucket_policy(Bucket=bucket, Policy=json.dumps(
            {"Version": "2012-10-17", "Statement": list(statements)}))

    def test_policy_conditions_on_prefix_tags_acl_and_source_ip(self):
        b = self.new_bucket(ObjectOwnership="ObjectWriter")
        bob = self.bob_key["user"]
        arn = "arn:aws:s3:::" + b
        self.alice.put_object(Bucket=b, Key="shared/one", Body=b"1")
        self.alice.put_object(Bucket=b, Key="tagged", Body=b"t", Tagging="share=yes")
        self.alice.put_object(Bucket=b, Key="untagged", Body=b"u")
        self.put_policy(
            b,
            {"Effect": "Allow", "Principal": {"AWS": [bob]}, "Action": "s3:ListBucket",
             "Resource": arn, "Condition": {"StringLike": {"s3:prefix": "shared/*"}}},
            {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::000000000000:user/" + bob},
             "Action": "s3:GetObject", "Resource": arn + "/*",
             "Condition": {"StringEquals": {"s3:ExistingObjectTag/share": "yes"}}},
            {"Effect": "Allow", "Principal": {"AWS": [bob]}, "Action": "s3:PutObject",
             "Resource": arn + "/in/*",
             "Condition": {"StringEquals": {"s3:RequestObjectTag/team": "ml",
                                            "s3:x-amz-acl": "bucket-owner-full-control"}}},
            {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
             "Resource": arn + "/shared/*",
             "Condition": {"IpAddress": {"aws:SourceIp": ["127.0.0.0/8", "::1/128"]},
                           "Bool": {"aws:SecureTransport": "false"}}},
            {"Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": arn + "/shared/*",
             "Condition": {"NotIpAddress": {"aws:SourceIp": ["127.0.0.0/8", "::1/128"]}}})
        self.assertEqual(self.bob.list_objects_v2(Bucket=b, Prefix="shared/")["KeyCount"], 1)
        self.assert_error("AccessDenied", self.bob.list_objects_v2, Bucket=b)
        self.assert_error("AccessDenied", self.bob.list_objects_v2, Bucket=b, Prefix="other/")
        self.assertEqual(self.bob.get_object(Bucket=b, Key="tagged")["Body"].read(), b"t")
        self.assert_error("AccessDenied", self.bob.get_object, Bucket=b, Key="untagged")
        self.bob.put_object(Bucket=b, Key="in/ok", Body=b"ok", Tagging="team=ml",
                            ACL="bucket-owner-full-control")
        self.assert_error("AccessDenied", self.bob.put_object, Bucket=b, Key="in/no-tag",
                          Body=b"x", ACL="bucket-owner-full-control")
        self.assert_error("AccessDenied", self.bob.put_object, Bucket=b, Key="in/no-acl",
                          Body=b"x", Tagging="team=ml")
        self.assert_error("AccessDenied", self.bob.put_object, Bucket=b, Key="elsewhere",
                          Body=b"x", Tagging="team=ml", ACL="bucket-owner-full-control")
        # The loopback client over plain HTTP is what the IP and transport conditions allow.
        self.assertEqual(self.anonymous.get_object(Bucket=b, Key="shared/one")["Body"].read(),
                         b"1")
        self.assert_error("AccessDenied", self.anonymous.get_object, Bucket=b, Key="tagged")

    def test_deny_wins_even_for_the_owner_who_can_still_fix_the_policy(self):
        b = self.new_bucket()
        arn = "arn:aws:s3:::" + b
        self.alice.put_object(Bucket=b, Key="k", Body=b"x")
        self.put_policy(b, {"Effect": "Deny", "Principal": "*", "Action": "s3:*",
                            "Resource": [arn, arn + "/*"],
                            "Condition": {"Bool": {"aws:SecureTransport": "false"}}})
        self.assert_error("AccessDenied", self.alice.get_object, Bucket=b, Key="k")
        self.assert_error("AccessDenied", self.alice.list_objects_v2, Bucket=b)
        self.assertIn("Deny", self.alice.get_bucket_policy(Bucket=b)["Policy"])
        self.alice.delete_bucket_policy(Bucket=b)
        self.assertEqual(self.alice.get_object(Bucket=b, Key="k")["Body"].read(), b"x")

    def test_cross_tenant_access_only_where_the_policy_grants_it(self):
        b = self.new_bucket()
        bob = self.bob_key["user"]
        arn = "arn:aws:s3:::" + b
        self.alice.put_object(Bucket=b, Key="doc", Body=b"d")
        self.assert_error("AccessDenied", self.bob.get_object, Bucket=b, Key="doc")
        self.put_policy(b, {"Effect": "Allow", "Principal": {"AWS": bob},
                            "Action": ["s3:Get*", "s3:List*"], "Resource": [arn, arn + "/*"]},
                        {"Effect": "Deny", "Principal": {"AWS": bob}, "Action": "s3:GetObject",
                         "Resource": arn + "/secret*"})
        self.alice.put_object(Bucket=b, Key="secret-plan", Body=b"s")
        self.assertEqual(self.bob.get_object(Bucket=b, Key="doc")["Body"].read(), b"d")
        self.assertEqual(self.bob.list_objects_v2(Bucket=b)["KeyCount"], 2)
        self.assert_error("AccessDenied", self.bob.get_object, Bucket=b, Key="secret-plan")
        self.assert_error("AccessDenied", self.bob.put_object, Bucket=b, Key="x", Body=b"x")
        self.assert_error("AccessDenied", self.bob.delete_object, Bucket=b, Key="doc")
        self.assert_error("AccessDenied", self.bob.put_bucket_policy, Bucket=b, Policy="{}")
        self.assert_error("AccessDenied", self.anonymous.get_object, Bucket=b, Key="doc")

    def test_malformed_policies_are_refused_and_change_nothing(self):
        b = self.new_bucket()
        arn = "arn:aws:s3:::" + b
        good = {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                "Resource": arn + "/*"}
        for text in ["not json", "[]", json.dumps({"Statement": []}),
                     json.dumps({"Statement": [dict(good, Resource="arn:aws:s3:::other/*")]}),
                     json.dumps({"Statement": [dict(good, Condition={
                         "StringMaybe": {"s3:prefix": "a"}})]}),
                     json.dumps({"Statement": [dict(good, Condition={
                         "IpAddress": {"aws:SourceIp": "999.0.0.0/8"}})]}),
                     json.dumps({"Statement": [dict(good, Effect="Perhaps")]}),
                     json.dumps({"Statement": [dict(good, Sid="x" * 21000)]})]:
            self.assert_error("MalformedPolicy", self.alice.put_bucket_policy, Bucket=b,
                              Policy=text)
        self.assert_error("NoSuchBucketPolicy", self.alice.get_bucket_policy, Bucket=b)

    # --- aws-cli ---------------------------------------------------------------------------------

    def aws(self, *args, key=None, unsigned=False):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update({"AWS_DEFAULT_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true",
                    "AWS_SHARED_CREDENTIALS_FILE": os.path.join(self.server.tmp, "none"),
                    "AWS_CONFIG_FILE": os.path.join(self.server.tmp, "none"),
                    "AWS_PAGER": ""})
        if key:
            env.update({"AWS_ACCESS_KEY_ID": key["access_key_id"],
                        "AWS_SECRET_ACCESS_KEY": key["secret_access_key"]})
        cmd = [sys.executable, "-m", "awscli"] + list(args) + [
            "--endpoint-url", self.server.s3_url, "--output", "json"]
        if unsigned:
            cmd.append("--no-sign-request")
        return subprocess.run(cmd, capture_output=True, env=env, timeout=300)

    def test_aws_cli_sets_acls_and_reads_anonymously(self):
        b = "acc-" + uuid.uuid4().hex[:12]
        made = self.aws("s3api", "create-bucket", "--bucket", b, "--acl", "public-read",
                        "--create-bucket-configuration", "LocationConstraint=" + REGION,
                        key=self.alice_key)
        self.assertEqual(made.returncode, 0, made.stderr)
        self.buckets.append(b)
        self.alice.put_object(Bucket=b, Key="site/index.html", Body=b"<h1>hi</h1>")
        put = self.aws("s3api", "put-object-acl", "--bucket", b, "--key", "site/index.html",
                       "--acl", "public-read", key=self.alice_key)
        self.assertEqual(put.returncode, 0, put.stderr)
        acl = json.loads(self.aws("s3api", "get-object-acl", "--bucket", b, "--key",
                                  "site/index.html", key=self.alice_key).stdout)
        self.assertIn(("Group", ALL_USERS, "READ"), self.grants(acl))
        ls = self.aws("s3", "ls", "s3://%s/site/" % b, unsigned=True)
        self.assertEqual(ls.returncode, 0, ls.stderr)
        self.assertIn(b"index.html", ls.stdout)
        cp = self.aws("s3", "cp", "s3://%s/site/index.html" % b, "-", unsigned=True)
        self.assertEqual((cp.returncode, cp.stdout), (0, b"<h1>hi</h1>"), cp.stderr)
        bad = self.aws("s3api", "put-bucket-acl", "--bucket", b, "--grant-read",
                       'id="no-such-user"', key=self.alice_key)
        self.assertEqual(bad.returncode, 255)
        self.assertIn(b"InvalidArgument", bad.stderr)
        denied = self.aws("s3api", "put-object", "--bucket", b, "--key", "x", unsigned=True)
        self.assertEqual(denied.returncode, 255)
        self.assertIn(b"AccessDenied", denied.stderr)


if __name__ == "__main__":
    unittest.main()
