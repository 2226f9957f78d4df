"""`sovai s3 credentials --format X` is the whole setup of each real client: a user logs in with
the CLI, prints a format, and the client configured with exactly that text (nothing added but
the test's throwaway paths) creates a bucket, writes an object and reads it back; boto3 with the
server's admin key observes what was stored. Over HTTP, and over HTTPS with the server's
self-signed certificate given as --ca-bundle. docs/api/s3.md shows the same texts, so the
command, the docs and the clients cannot drift apart. Without --format nothing prints the
secret."""

import json
import os
import subprocess
import sys
import tempfile
import unittest
import uuid

from sovai_fixture import SOVAI_BINARY, REGION, SovaiServer, empty_and_delete_bucket


class S3CredentialsBase:
    TLS = False

    @classmethod
    def setUpClass(cls):
        cls.server = SovaiServer(tls=cls.TLS).start()
        cls.observer = cls.server.boto3_client()
        cls.home = os.path.join(cls.server.tmp, "home")
        os.makedirs(cls.home)
        # Nothing of the machine's own AWS, rclone or sovai setup may leak in.
        cls.env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("AWS_", "RCLONE_", "SOVAI_")) and k not in (
                       "HTTPS_PROXY", "HTTP_PROXY", "XDG_CONFIG_HOME")}
        cls.env.update({
            "HOME": cls.home,
            "AWS_CONFIG_FILE": os.path.join(cls.server.tmp, "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": os.path.join(cls.server.tmp, "no-aws-credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_PAGER": "",
        })
        login = cls.run_sovai("login", "--url", cls.server.api_url,
                              "--token", cls.server.admin_token())
        if login.returncode != 0:
            raise RuntimeError("sovai login failed: %s %s" % (login.stdout, login.stderr))
        with open(os.path.join(cls.home, ".config", "sovai", "config.json")) as f:
            cls.config = json.load(f)

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    @classmethod
    def run_sovai(cls, *args):
        return subprocess.run([SOVAI_BINARY] + list(args), env=cls.env, capture_output=True,
                              text=True, timeout=60)

    def setUp(self):
        self.bucket = "cred-" + uuid.uuid4().hex[:12]
        self.work = tempfile.mkdtemp(prefix="credentials-", dir=self.server.tmp)
        self.body = b"written with the printed config " + uuid.uuid4().hex.encode()

    def tearDown(self):
        empty_and_delete_bucket(self.observer, self.bucket)

    # --- Helpers ---------------------------------------------------------------------------------

    def credentials(self, fmt, *extra):
        """The command's stdout for `--format fmt` (with --ca-bundle over HTTPS); its stderr must
        be empty, so that nothing but the config reaches a redirect."""
        args = ["s3", "credentials", "--format", fmt] + list(extra)
        if self.TLS:
            args += ["--ca-bundle", self.server.cert]
        result = self.run_sovai(*args)
        self.assertEqual(result.returncode, 0, result)
        self.assertEqual(result.stderr, "")
        self.assertIn(self.config["s3_secret_access_key"], result.stdout)
        return result.stdout

    def write(self, name, text):
        path = os.path.join(self.work, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def run_client(self, cmd, input=None, env=None):
        proc = subprocess.run(cmd, input=input, capture_output=True, env=env or self.env,
                              cwd=self.work, timeout=120)
        if proc.returncode != 0:
            self.fail("%s\nexit %d\nstdout: %s\nstderr: %s\nserver log:\n%s" % (
                " ".join(cmd), proc.returncode, proc.stdout.decode(errors="replace"),
                proc.stderr.decode(errors="replace")[-3000:], self.server.server_log()))
        return proc.stdout

    def assert_stored(self, key):
        """The object, as the server's admin sees it: in the logged-in project's bucket, in the
        server's region."""
        got = self.observer.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        self.assertEqual(got, self.body)
        location = self.observer.get_bucket_location(Bucket=self.bucket)["LocationConstraint"]
        self.assertEqual(location, REGION)

    # --- Tests -----------------------------------------------------------------------------------

    def test_without_a_format_the_secret_is_not_shown(self):
        result = self.run_sovai("s3", "credentials")
        self.assertEqual(result.returncode, 0, result)
        self.assertIn(self.config["s3_access_key_id"], result.stdout)
        self.assertIn(self.server.s3_url, result.stdout)
        self.assertNotIn(self.config["s3_secret_access_key"], result.stdout + result.stderr)
        self.assertIn("--format", result.stdout)

    def test_env_configures_aws_cli_and_boto3(self):
        exports = self.credentials("env")
        # The exports as a shell runs them, then the clients in that environment.
        script = 'eval "$(cat "$1")" && shift && exec "$@"'
        path = self.write("exports.sh", exports)
        shell = ["sh", "-c", script, "sh", path]
        self.run_client(shell + [sys.executable, "-m", "awscli", "s3", "mb", "s3://" + self.bucket])
        self.run_client(shell + [sys.executable, "-m", "awscli", "s3", "cp", "-",
                                 "s3://%s/aws.txt" % self.bucket], input=self.body)
        self.assert_stored("aws.txt")
        read = ("import boto3, sys; sys.stdout.buffer.write(boto3.client('s3').get_object("
                "Bucket=sys.argv[1], Key='aws.txt')['Body'].read())")
        self.assertEqual(self.run_client(shell + [sys.executable, "-c", read, self.bucket]),
                         self.body)

    def test_aws_profile(self):
        env = dict(self.env, AWS_CONFIG_FILE=self.write("aws-config", self.credentials("aws")))
        aws = [sys.executable, "-m", "awscli", "--profile", "sovai"]
        self.run_client(aws + ["s3", "mb", "s3://" + self.bucket], env=env)
        self.run_client(aws + ["s3", "cp", "-", "s3://%s/profile.txt" % self.bucket],
                        input=self.body, env=env)
        self.assert_stored("profile.txt")
        listed = json.loads(self.run_client(
            aws + ["s3api", "list-objects-v2", "--bucket", self.bucket, "--output", "json"],
            env=env))
        self.assertEqual([o["Key"] for o in listed["Contents"]], ["profile.txt"])

    def test_rclone_remote(self):
        config = self.write("rclone.conf", self.credentials("rclone", "--name", "eu"))
        rclone = ["rclone", "--config", config, "--retries", "1", "--low-level-retries", "1"]
        if self.TLS:
            rclone += ["--ca-cert", self.server.cert]
        self.run_client(rclone + ["mkdir", "eu:" + self.bucket])
        self.run_client(rclone + ["rcat", "eu:%s/rclone.txt" % self.bucket], input=self.body)
        self.assert_stored("rclone.txt")
        self.assertEqual(self.run_client(rclone + ["cat", "eu:%s/rclone.txt" % self.bucket]),
                         self.body)

    def test_s3cmd_config(self):
        config = self.write("s3cfg", self.credentials("s3cmd"))
        s3cmd = ["s3cmd", "-c", config, "--no-progress"]
        self.run_client(s3cmd + ["mb", "s3://" + self.bucket])
        self.run_client(s3cmd + ["put", "-", "s3://%s/s3cmd.txt" % self.bucket], input=self.body)
        self.assert_stored("s3cmd.txt")
        self.run_client(s3cmd + ["get", "s3://%s/s3cmd.txt" % self.bucket, "back.txt"])
        with open(os.path.join(self.work, "back.txt"), "rb") as f:
            self.assertEqual(f.read(), self.body)

    def test_boto3_client(self):
        code = self.credentials("boto3")
        scope = {}
        exec(compile(code, "sovai-s3-credentials-boto3", "exec"), scope)
        s3 = scope["s3"]
        s3.create_bucket(Bucket=self.bucket,
                         CreateBucketConfiguration={"LocationConstraint": REGION})
        s3.put_object(Bucket=self.bucket, Key="boto3.txt", Body=self.body)
        self.assert_stored("boto3.txt")
        self.assertEqual(s3.get_object(Bucket=self.bucket, Key="boto3.txt")["Body"].read(),
                         self.body)


class S3CredentialsHttpTest(S3CredentialsBase, unittest.TestCase):
    TLS = False


class S3CredentialsHttpsTest(S3CredentialsBase, unittest.TestCase):
    TLS = True


if __name__ == "__main__":
    unittest.main()
