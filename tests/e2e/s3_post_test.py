"""Browser form uploads (POST Object) against a real `sovai server` (issue 29): boto3's
generate_presigned_post signs the policy, and the form goes out as multipart/form-data, built
here with the standard library (what an HTML form sends) and, in test_chromium_form, submitted by
headless Chromium from a real <form> with a file input (s3_post_browser.mjs). Uploads land, and
what the policy, the bucket policy, the ACL rules or the signature do not allow is refused with
AWS's error codes, storing nothing."""

import http.server
import json
import os
import shutil
import subprocess
import threading
import unittest
import urllib.error
import urllib.parse
import urllib.request
import uuid

import botocore
from botocore.exceptions import ClientError

from sovai_fixture import empty_and_delete_bucket, REGION, SovaiServer

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BROWSER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "s3_post_browser.mjs")
CHROMIUM = os.environ.get("SOVAI_CHROMIUM", "/usr/bin/chromium")


def multipart(fields, file_bytes, filename="upload.bin", content_type="application/octet-stream"):
    """The body and Content-Type an HTML form with these fields and a file input sends."""
    boundary = "----SovaiFormBoundary" + uuid.uuid4().hex
    out = b""
    for name, value in fields.items():
        out += ("--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n" %
                (boundary, name, value)).encode()
    out += ("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n"
            "Content-Type: %s\r\n\r\n" % (boundary, filename, content_type)).encode()
    out += file_bytes + ("\r\n--%s--\r\n" % boundary).encode()
    return out, "multipart/form-data; boundary=" + boundary


def post_form(url, fields, file_bytes, **kwargs):
    """(status, headers, body) of the form's POST; redirects are not followed."""
    body, content_type = multipart(fields, file_bytes, **kwargs)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args):
            return None

    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": content_type})
    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


class S3PostTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = SovaiServer().start()
        cls.admin = cls.server.boto3_client()
        key = cls.server.create_user_key("poster-" + uuid.uuid4().hex[:6])
        cls.s3 = cls.server.boto3_client(access_key=key["access_key_id"],
                                         secret_key=key["secret_access_key"])
        cls.anonymous = cls.server.boto3_client(signature_version=botocore.UNSIGNED)

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    def setUp(self):
        self.bucket = "post-" + uuid.uuid4().hex[:12]
        self.s3.create_bucket(Bucket=self.bucket,
                              CreateBucketConfiguration={"LocationConstraint": REGION})

    def tearDown(self):
        empty_and_delete_bucket(self.admin, self.bucket)

    def presign(self, key, fields=None, conditions=None, expires_in=600):
        return self.s3.generate_presigned_post(self.bucket, key, Fields=fields,
                                               Conditions=conditions, ExpiresIn=expires_in)

    def assert_refused(self, status, body, code, message=""):
        self.assertEqual(status, 403 if code in ("AccessDenied", "SignatureDoesNotMatch") else 400,
                         body)
        self.assertIn(("<Code>%s</Code>" % code).encode(), body)
        self.assertIn(message.encode(), body)

    def assert_absent(self, key):
        with self.assertRaises(ClientError) as e:
            self.s3.head_object(Bucket=self.bucket, Key=key)
        self.assertEqual(e.exception.response["Error"]["Code"], "404")

    def test_upload_with_a_presigned_post(self):
        data = os.urandom(300 * 1024 + 7)  # several reads of the server's window
        post = self.presign("in/${filename}",
                            fields={"Content-Type": "text/csv", "x-amz-meta-team": "ml"},
                            conditions=[["starts-with", "$key", "in/"],
                                        {"Content-Type": "text/csv"}, {"x-amz-meta-team": "ml"},
                                        ["content-length-range", 1, 1 << 20]])
        status, headers, body = post_form(post["url"], post["fields"], data, filename="rows.csv")
        self.assertEqual(status, 204, body)
        obj = self.s3.get_object(Bucket=self.bucket, Key="in/rows.csv")
        self.assertEqual(obj["Body"].read(), data)
        self.assertEqual(obj["ContentType"], "text/csv")
        self.assertEqual(obj["Metadata"], {"team": "ml"})
        self.assertEqual(headers["ETag"], obj["ETag"])
        self.assertTrue(headers["Location"].endswith("/%s/in/rows.csv" % self.bucket))

    def test_success_action_status_and_redirect(self):
        post = self.presign("created", fields={"success_action_status": "201"},
                            conditions=[{"success_action_status": "201"}])
        status, _, body = post_form(post["url"], post["fields"], b"hello")
        self.assertEqual(status, 201, body)
        self.assertIn(b"<Key>created</Key>", body)
        self.assertIn(("<Bucket>%s</Bucket>" % self.bucket).encode(), body)

        post = self.presign("moved", fields={"success_action_redirect": "http://app.test/done"},
                            conditions=[{"success_action_redirect": "http://app.test/done"}])
        status, headers, body = post_form(post["url"], post["fields"], b"hello")
        self.assertEqual(status, 303, body)
        self.assertTrue(headers["Location"].startswith(
            "http://app.test/done?bucket=%s&key=moved&etag=%%22" % self.bucket), headers)
        self.assertEqual(self.s3.get_object(Bucket=self.bucket, Key="moved")["Body"].read(),
                         b"hello")

    def test_what_the_policy_does_not_allow_is_refused(self):
        ranged = self.presign("small", conditions=[["content-length-range", 2, 10]])
        status, _, body = post_form(ranged["url"], ranged["fields"], b"x" * 11)
        self.assert_refused(status, body, "EntityTooLarge")
        status, _, body = post_form(ranged["url"], ranged["fields"], b"x")
        self.assert_refused(status, body, "EntityTooSmall")
        self.assert_absent("small")

        prefixed = self.presign("in/${filename}", conditions=[["starts-with", "$key", "in/"]])
        fields = dict(prefixed["fields"], key="elsewhere/x")
        status, _, body = post_form(prefixed["url"], fields, b"x")
        self.assert_refused(status, body, "AccessDenied",
                            "Invalid according to Policy: Policy Condition failed")
        self.assert_absent("elsewhere/x")

        extra = dict(prefixed["fields"], **{"x-amz-meta-sneaky": "1"})
        status, _, body = post_form(prefixed["url"], extra, b"x")
        self.assert_refused(status, body, "AccessDenied", "Extra input fields: x-amz-meta-sneaky")

        expired = self.presign("late", expires_in=-60)
        status, _, body = post_form(expired["url"], expired["fields"], b"x")
        self.assert_refused(status, body, "AccessDenied", "Policy expired.")
        self.assert_absent("late")

        forged = dict(expired["fields"])
        forged["x-amz-signature"] = "0" * 64
        status, _, body = post_form(expired["url"], forged, b"x")
        self.assert_refused(status, body, "SignatureDoesNotMatch")

    def test_malformed_forms(self):
        url = self.presign("k")["url"]
        req = urllib.request.Request(url, data=b"key=k", method="POST", headers={
            "Content-Type": "application/x-www-form-urlencoded"})
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=60)
        self.assertEqual(e.exception.code, 400)
        self.assertIn(b"MalformedPOSTRequest", e.exception.read())

        post = self.presign("k")
        body, content_type = multipart(post["fields"], b"data")
        req = urllib.request.Request(url, data=body[:-20], method="POST",
                                     headers={"Content-Type": content_type})
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=60)
        self.assertEqual(e.exception.code, 400)
        self.assertIn(b"MalformedPOSTRequest", e.exception.read())
        self.assert_absent("k")

    def test_a_put_s_access_checks_apply(self):
        # The bucket policy denies this prefix: a valid POST policy does not get past it.
        self.s3.put_bucket_policy(Bucket=self.bucket, Policy=json.dumps({
            "Version": "2012-10-17", "Statement": [{
                "Effect": "Deny", "Principal": "*", "Action": "s3:PutObject",
                "Resource": "arn:aws:s3:::%s/locked/*" % self.bucket}]}))
        post = self.presign("locked/x")
        status, _, body = post_form(post["url"], post["fields"], b"x")
        self.assert_refused(status, body, "AccessDenied")
        self.assert_absent("locked/x")
        # ACLs are disabled on a new bucket (BucketOwnerEnforced), for a form as for a PUT.
        post = self.presign("public", fields={"acl": "public-read"},
                            conditions=[{"acl": "public-read"}])
        status, _, body = post_form(post["url"], post["fields"], b"x")
        self.assert_refused(status, body, "AccessControlListNotSupported")
        # With ACLs enabled, the form's acl field makes the object public.
        self.s3.put_bucket_ownership_controls(Bucket=self.bucket, OwnershipControls={
            "Rules": [{"ObjectOwnership": "ObjectWriter"}]})
        status, _, body = post_form(post["url"], post["fields"], b"public bytes")
        self.assertEqual(status, 204, body)
        got = self.anonymous.get_object(Bucket=self.bucket, Key="public")["Body"].read()
        self.assertEqual(got, b"public bytes")
        # An unsigned form is an anonymous PUT: refused on this private bucket.
        status, _, body = post_form(post["url"], {"key": "anon"}, b"x")
        self.assert_refused(status, body, "AccessDenied")
        self.assert_absent("anon")

    def test_chromium_form(self):
        node = shutil.which("node")
        if not os.path.exists(CHROMIUM):
            self.skipTest("chromium is not installed (%s): tools/bootstrap.sh installs it" %
                          CHROMIUM)
        if node is None or not os.path.isdir(os.path.join(REPO_ROOT, "node_modules",
                                                          "playwright-core")):
            self.fail("node and npm playwright-core are needed: run tools/bootstrap.sh")
        upload = os.path.join(self.server.tmp, "browser upload.txt")
        with open(upload, "wb") as f:
            f.write(b"from the browser\n" * 1000)
        # The page a successful upload redirects to: a real server, since the browser follows
        # the S3 server's 303 to it.
        class Done(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = b"<main>uploaded</main>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        done = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Done)
        threading.Thread(target=done.serve_forever, daemon=True).start()
        self.addCleanup(done.server_close)
        self.addCleanup(done.shutdown)
        redirect = "http://127.0.0.1:%d/done" % done.server_port
        forms = {
            "redirect": self.presign("web/${filename}",
                                     fields={"success_action_redirect": redirect},
                                     conditions=[["starts-with", "$key", "web/"],
                                                 {"success_action_redirect": redirect}]),
            "status": self.presign("web/status.txt", fields={"success_action_status": "201"},
                                   conditions=[{"success_action_status": "201"}]),
            "too_large": self.presign("web/big.txt",
                                      conditions=[["content-length-range", 0, 100]]),
            "wrong_prefix": self.presign("web/${filename}",
                                         conditions=[["starts-with", "$key", "web/"]]),
            "expired": self.presign("web/late.txt", expires_in=-60),
        }
        forms["wrong_prefix"]["fields"]["key"] = "other/${filename}"
        env = dict(os.environ, POST_FORMS=json.dumps(forms), POST_FILE=upload,
                   PANEL_CHROMIUM=CHROMIUM)
        proc = subprocess.run([node, BROWSER_SCRIPT], capture_output=True, env=env,
                              cwd=REPO_ROOT, timeout=300)
        out = proc.stdout.decode(errors="replace")
        if proc.returncode != 0:
            self.fail("node s3_post_browser.mjs exited %d\n%s\n--- stderr ---\n%s" %
                      (proc.returncode, out[-4000:], proc.stderr.decode(errors="replace")[-4000:]))
        result = json.loads(out.strip().splitlines()[-1])
        with open(upload, "rb") as f:
            data = f.read()
        # The redirect carries the object's name and ETag; the object is the file.
        obj = self.s3.get_object(Bucket=self.bucket, Key="web/browser upload.txt")
        self.assertEqual(obj["Body"].read(), data)
        self.assertEqual(result["redirect"]["url"].split("?")[0], redirect)
        self.assertIn("key=web%2Fbrowser%20upload.txt", result["redirect"]["url"])
        self.assertIn("etag=" + urllib.parse.quote(obj["ETag"], safe=""), result["redirect"]["url"])
        self.assertEqual(result["status"]["status"], 201)
        self.assertEqual(self.s3.get_object(Bucket=self.bucket,
                                            Key="web/status.txt")["Body"].read(), data)
        self.assertEqual(result["too_large"]["status"], 400)
        self.assertIn("EntityTooLarge", result["too_large"]["body"])
        self.assertEqual(result["wrong_prefix"]["status"], 403)
        self.assertIn("Policy Condition failed", result["wrong_prefix"]["body"])
        self.assertEqual(result["expired"]["status"], 403)
        self.assertIn("Policy expired.", result["expired"]["body"])
        for key in ("web/big.txt", "other/browser upload.txt", "web/late.txt"):
            self.assert_absent(key)


if __name__ == "__main__":
    unittest.main()
