"""Starts a real `sovai server` for end-to-end tests: a temporary data directory, ports chosen
at run time, optional HTTPS for S3 with a self-signed certificate. Tests talk to it with the
real clients (boto3, aws-cli, s3cmd, rclone, npm SDKs)."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

SOVAI_BINARY = os.environ.get("SOVAI_BINARY", "build/src/cli/sovai")
REGION = "eu-west-local"
# The states a job ends in (docs/api/jobs.md).
TERMINAL = {"DONE", "FAILED", "ERROR", "INTERRUPTED", "TIMEOUT"}


def shell(script, volumes=(), **extra):
    """A job spec that runs `script` with sh on one CPU unit, with these volumes."""
    spec = {"image": "sovai/shell", "flavor": "ai1-1-cpu", "units": 1,
            "command": ["sh", "-c", script], "volumes": list(volumes)}
    spec.update(extra)
    return spec


def random_bytes(size_bytes, seed):
    """Deterministic, incompressible bytes: SHA-256 in counter mode (deterministicBytes in
    s3_npm_clients.mjs makes the same)."""
    out = bytearray()
    counter = 0
    while len(out) < size_bytes:
        out += hashlib.sha256(b"%s:%d" % (seed.encode(), counter)).digest()
        counter += 1
    return bytes(out[:size_bytes])

def write_file(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)

def read_file(path):
    with open(path, "rb") as f:
        return f.read()

def tree_files(root):
    """{relative path with '/': bytes} for every file under root."""
    files = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            files[os.path.relpath(path, root).replace(os.sep, "/")] = read_file(path)
    return files



def empty_and_delete_bucket(s3, bucket):
    """Deletes every version, delete marker and multipart upload, then the bucket, the way S3
    test suites clean up (a bucket that is already gone is fine)."""
    from botocore.exceptions import ClientError
    try:
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
            for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
                s3.delete_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])
        for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
            s3.abort_multipart_upload(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"])
        s3.delete_bucket(Bucket=bucket)
    except ClientError as e:
        if e.response["Error"]["Code"] != "NoSuchBucket":
            raise


def create_bucket(s3, name, region=REGION):
    """Creates bucket `name` in `region` with a boto3 client."""
    s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": region})


def cli_env(server, token=None, home=None, **extra):
    """The environment in which the `sovai` CLI acts on `server`, logged in by environment only
    (`token`, else the admin's); with `home`, HOME and the CLI's config live there."""
    env = dict(os.environ, SOVAI_URL=server.api_url, SOVAI_TOKEN=token or server.admin_token())
    if home:
        env.update(HOME=home, XDG_CONFIG_HOME=os.path.join(home, "config"))
    env.update(extra)
    return env


def make_self_signed_cert(directory):
    """A self-signed certificate for 127.0.0.1 / localhost; returns (cert, key) paths."""
    cert = os.path.join(directory, "cert.pem")
    key = os.path.join(directory, "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", key, "-out", cert],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cert, key


class SovaiServer:
    """With `workloads`, the server's directory is traversable by the unprivileged uid that jobs,
    notebooks and app replicas run as, so that they reach their volumes, images and models."""

    def __init__(self, tls=False, extra_args=(), data_dir=None, workloads=False):
        self.tmp = tempfile.mkdtemp(prefix="sovai-e2e-")
        if workloads:
            os.chmod(self.tmp, 0o711)
        self.data_dir = data_dir or os.path.join(self.tmp, "data")
        self.tls = tls
        self.extra_args = list(extra_args)
        self.cert = None
        self.proc = None
        if tls:
            self.cert, self.key = make_self_signed_cert(self.tmp)

    def start(self):
        args = [SOVAI_BINARY, "server", "--data-dir", self.data_dir,
                "--listen-api", "127.0.0.1:0", "--listen-s3", "127.0.0.1:0",
                "--listen-registry", "127.0.0.1:0",
                "--log-level", "warning"] + self.extra_args
        if self.tls:
            args += ["--s3-tls-cert", self.cert, "--s3-tls-key", self.key]
        self.log = open(os.path.join(self.tmp, "server.log"), "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log)
        server_json = os.path.join(self.data_dir, "server.json")
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("sovai server exited: " + self.server_log())
            if os.path.exists(server_json):
                with open(server_json) as f:
                    info = json.load(f)
                if info.get("pid") == self.proc.pid:
                    break
            time.sleep(0.05)
        else:
            raise RuntimeError("sovai server did not start: " + self.server_log())
        self.api_url = info["api_url"]
        self.s3_url = info["s3_url"]
        self.registry_url = info.get("registry_url", "")
        with open(os.path.join(self.data_dir, "admin.json")) as f:
            admin = json.load(f)
        self.access_key = admin["access_key_id"]
        self.secret_key = admin["secret_access_key"]
        return self

    def server_log(self):
        try:
            with open(os.path.join(self.tmp, "server.log"), "rb") as f:
                return f.read().decode(errors="replace")[-4000:]
        except OSError:
            return ""

    def metrics(self):
        with urllib.request.urlopen(self.api_url + "/metrics") as r:
            return r.read().decode()

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if getattr(self, "log", None):
            self.log.close()
            self.log = None

    def kill(self):
        self.stop(signal.SIGKILL)

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def boto3_client(self, access_key=None, secret_key=None, addressing="path", region=REGION,
                     **config):
        import boto3
        from botocore.config import Config
        return boto3.client(
            "s3", endpoint_url=self.s3_url, region_name=region,
            aws_access_key_id=access_key or self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            verify=self.cert if self.tls else None,
            config=Config(s3={"addressing_style": addressing}, retries={"max_attempts": 1},
                          **config))

    def admin_token(self):
        with open(os.path.join(self.data_dir, "admin.json")) as f:
            return json.load(f)["api_token"]

    def api(self, method, path, body=None, token=None, raw=False, timeout=60):
        """(status, parsed JSON or text) of a /v1 call; the admin token unless `token`."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.api_url + path, method=method, data=data,
            headers={"Authorization": "Bearer " + (token or self.admin_token()),
                     "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, text = r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode(errors="replace")
        if raw or not text:
            return status, text
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def create_user_key(self, user):
        """S3 credentials for a new user, through the internal API (admin token)."""
        with open(os.path.join(self.data_dir, "admin.json")) as f:
            admin = json.load(f)
        req = urllib.request.Request(
            self.api_url + "/internal/objstore/access-keys", method="POST",
            data=json.dumps({"user": user}).encode(),
            headers={"Authorization": "Bearer " + admin["api_token"],
                     "Content-Type": "application/json"})
        with urllib.request.urlopen(req) as r:
            return json.load(r)


class JobsMixin:
    """unittest mixin for tests that run jobs over the REST API: on `self.server`, or on the
    server a call names."""

    def require_jobs(self, server=None):
        """Skips the test, saying why, where this host cannot run jobs."""
        status, info = (server or self.server).api("GET", "/v1/flavors")
        self.assertEqual(status, 200, info)
        cpu = [f for f in info["items"] if f["id"] == "ai1-1-cpu"][0]
        if not cpu["available"]:
            self.skipTest("jobs are not available on this host: " + cpu["reason"])

    def submit_job(self, spec, token=None, expect=201, server=None):
        status, job = (server or self.server).api("POST", "/v1/jobs", spec, token=token)
        self.assertEqual(status, expect, job)
        return job

    def get_job(self, job_id, token=None, server=None):
        status, job = (server or self.server).api("GET", "/v1/jobs/" + job_id, token=token)
        self.assertEqual(status, 200, job)
        return job

    def wait_job(self, job_id, state=None, token=None, timeout_s=60, server=None,
                 interval_s=0.05):
        """The job once it is in `state` (a name or a set of names; None: any end state), or
        the test fails after `timeout_s`."""
        states = TERMINAL if state is None else {state} if isinstance(state, str) else state
        deadline = time.time() + timeout_s
        job = None
        while time.time() < deadline:
            job = self.get_job(job_id, token=token, server=server)
            if job["status"]["state"] in states:
                return job
            time.sleep(interval_s)
        self.fail("job %s did not reach %s: %s" % (job_id, state or "an end", job))


class CliMixin:
    """unittest mixin for tests that drive the `sovai` CLI against `self.server` in `self.env`
    (cli_env)."""

    def sovai(self, *args, check=True):
        """The CLI's result; unless check=False a non-zero exit fails the test, with the server's
        log."""
        result = subprocess.run([SOVAI_BINARY, *args], capture_output=True, text=True,
                                env=self.env, timeout=600)
        if check and result.returncode != 0:
            self.fail("sovai %s failed (%d):\n%s\n%s\nserver log:\n%s" % (
                " ".join(args), result.returncode, result.stdout, result.stderr,
                self.server.server_log()))
        return result

    def wait_notebook(self, nb_id, state, timeout_s=300, interval_s=0.5):
        """The notebook (`sovai notebook get`) once it is in `state`; a notebook that fails
        meanwhile fails the test, with its log."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            nb = json.loads(self.sovai("notebook", "get", nb_id, "-o", "json").stdout)
            if nb["state"] == state:
                return nb
            if nb["state"] in ("FAILED", "ERROR") and state not in ("FAILED", "ERROR"):
                self.fail("notebook %s is %s: %s\nlog:\n%s" % (
                    nb_id, nb["state"], nb["reason"],
                    self.sovai("notebook", "logs", nb_id, check=False).stdout[-6000:]))
            time.sleep(interval_s)
        self.fail("notebook %s is not %s after %d s" % (nb_id, state, timeout_s))


class SeveralServers(JobsMixin):
    """unittest mixin for tests of several servers: start() records each one (its directory
    traversable by the workloads' uid), tearDown stops them, the last started first. Job calls
    name their server."""

    def start(self, server):
        if not hasattr(self, "servers"):
            self.servers = []
        self.servers.append(server)
        os.chmod(server.tmp, 0o711)
        return server.start()

    def tearDown(self):
        for server in reversed(getattr(self, "servers", [])):
            server.cleanup()
