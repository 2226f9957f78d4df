"""Jobs run images of the server's own registry, with Debian's real buildah and podman: an image
built with buildah (scratch + busybox-static + a training script) is pushed by tag with a Sovai
token (`podman push`) and pulled back (`podman pull`); `sovai job run --flavor ai1-1-cpu
--volume ...:ro --volume ...:rw HOST:PORT/<project>/trainer:latest` runs it and exits 0 with its
output in the bucket; the same by digest; the digest is recorded on the job and in the audit
log; a missing tag is refused at submission with a 404 naming the image; a tag of a repository
with immutable tags is not moved."""
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

from sovai_fixture import REGION, SOVAI_BINARY, SovaiServer

BUILDAH = shutil.which("buildah")
PODMAN = shutil.which("podman")
BUSYBOX = "/bin/busybox" if os.path.exists("/bin/busybox") else shutil.which("busybox")
TERMINAL = {"DONE", "FAILED", "ERROR", "INTERRUPTED", "TIMEOUT"}
PROJECT = "default"  # the admin token's project (control/identity.h kSystemProjectName)

TRAIN_SH = """#!/bin/sh
set -e
n=$(cat /workspace/data/*.txt | wc -l)
echo "trained on $n lines" > /workspace/output/result.txt
echo "done: $n lines, $1"
"""


@unittest.skipUnless(BUILDAH and PODMAN and BUSYBOX,
                     "needs buildah, podman and busybox-static (tools/bootstrap.sh)")
class RegistryJobsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = SovaiServer()
        # The workload's unprivileged uid must traverse down to its volumes and image.
        os.chmod(cls.server.tmp, 0o711)
        cls.server.start()
        cls.host = cls.server.registry_url.split("://", 1)[1]
        cls.token = cls.server.admin_token()
        cls.work = tempfile.mkdtemp(prefix="sovai-registry-jobs-")
        # Containers' storage of this suite alone: vfs needs neither fuse nor overlay mounts.
        cls.storage_conf = os.path.join(cls.work, "storage.conf")
        with open(cls.storage_conf, "w") as f:
            f.write('[storage]\ndriver = "vfs"\nrunroot = "%s/run"\ngraphroot = "%s/graph"\n'
                    % (cls.work, cls.work))
        cls.s3 = cls.server.boto3_client()
        cls.s3.create_bucket(Bucket="my-bucket",
                             CreateBucketConfiguration={"LocationConstraint": REGION})
        for i in range(3):
            cls.s3.put_object(Bucket="my-bucket", Key="dataset/part-%d.txt" % i,
                              Body=("line\n" * (i + 1)).encode())

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()
        shutil.rmtree(cls.work, ignore_errors=True)

    def tool(self, program, *args, check=True):
        env = dict(os.environ, CONTAINERS_STORAGE_CONF=self.storage_conf, HOME=self.work,
                   XDG_RUNTIME_DIR=self.work, BUILDAH_ISOLATION="chroot")
        r = subprocess.run([program] + list(args), capture_output=True, text=True, env=env,
                           timeout=300)
        if check:
            self.assertEqual(r.returncode, 0, "%s %s: %s" % (program, args, r.stderr))
        return r

    def sovai(self, *args):
        env = dict(os.environ, SOVAI_URL=self.server.api_url, SOVAI_TOKEN=self.token,
                   SOVAI_REGISTRY=self.host, HOME=self.work, XDG_CONFIG_HOME=os.path.join(self.work, "config"))
        return subprocess.run([SOVAI_BINARY] + list(args), capture_output=True, text=True,
                              env=env, timeout=300)

    def build_and_push(self, tag, script):
        """buildah from scratch + busybox + `script`; podman push with the token. The digest."""
        ctx = os.path.join(self.work, "ctx-" + tag)
        os.makedirs(os.path.join(ctx, "bin"))
        shutil.copy(BUSYBOX, os.path.join(ctx, "bin", "busybox"))
        os.symlink("busybox", os.path.join(ctx, "bin", "sh"))
        os.symlink("busybox", os.path.join(ctx, "bin", "cat"))
        os.symlink("busybox", os.path.join(ctx, "bin", "wc"))
        os.makedirs(os.path.join(ctx, "workspace"))
        with open(os.path.join(ctx, "train.sh"), "w") as f:
            f.write(script)
        os.chmod(os.path.join(ctx, "train.sh"), 0o755)
        container = self.tool(BUILDAH, "from", "scratch").stdout.strip()
        self.tool(BUILDAH, "copy", container, ctx + "/", "/")
        self.tool(BUILDAH, "config", "--entrypoint", '["/bin/sh", "/train.sh"]', "--cmd",
                  "epoch-1", "--workingdir", "/workspace", "--env", "PATH=/bin", container)
        local = "localhost/trainer:" + tag
        self.tool(BUILDAH, "commit", container, local)
        self.tool(BUILDAH, "rm", container)
        remote = "%s/%s/trainer:%s" % (self.host, PROJECT, tag)
        digest_file = os.path.join(self.work, "digest-" + tag)
        self.tool(PODMAN, "push", "--tls-verify=false", "--creds", "sovai:" + self.token,
                  "--digestfile", digest_file, local, "docker://" + remote)
        with open(digest_file) as f:
            return f.read().strip()

    def run_job(self, image, *extra):
        r = self.sovai("job", "run", "--flavor", "ai1-1-cpu",
                       "--volume", "my-bucket@EU-WEST-LOCAL/dataset:/workspace/data:ro",
                       "--volume", "my-bucket@EU-WEST-LOCAL/output:/workspace/output:rw",
                       "--follow", image, *extra)
        return r

    def job_by_image(self, image):
        status, page = self.server.api("GET", "/v1/jobs")
        self.assertEqual(status, 200, page)
        return [j for j in page["items"] if j["spec"]["image"] == image][0]

    def test_1_build_push_pull_then_run_by_tag_and_by_digest(self):
        digest = self.build_and_push("latest", TRAIN_SH)
        self.assertTrue(digest.startswith("sha256:"), digest)
        # podman pulls it back (a second storage, so the pull really downloads).
        self.tool(PODMAN, "rmi", "-f", "localhost/trainer:latest")
        self.tool(PODMAN, "pull", "--tls-verify=false", "--creds", "sovai:" + self.token,
                  "docker://%s/%s/trainer:latest" % (self.host, PROJECT))
        images = self.tool(PODMAN, "images", "--digests", "--format", "{{.Digest}}").stdout
        self.assertIn(digest, images)

        # The brief's command: flags, then the image positionally.
        image = "%s/%s/trainer:latest" % (self.host, PROJECT)
        r = self.run_job(image)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("done: 6 lines, epoch-1", r.stdout)
        body = self.s3.get_object(Bucket="my-bucket", Key="output/result.txt")["Body"].read()
        self.assertEqual(body, b"trained on 6 lines\n")
        job = self.job_by_image(image)
        self.assertEqual(job["status"]["state"], "DONE", job)
        self.assertEqual(job["status"]["image_digest"], digest)
        shown = self.sovai("job", "get", job["id"])
        self.assertIn(digest, shown.stdout)

        # By digest, with a command that replaces Cmd; the rootfs is reused.
        by_digest = "%s/%s/trainer@%s" % (self.host, PROJECT, digest)
        r = self.run_job(by_digest, "--", "epoch-2")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("done: 6 lines, epoch-2", r.stdout)
        self.assertEqual(self.job_by_image(by_digest)["status"]["image_digest"], digest)
        # A bare name:tag is the project's repository.
        r = self.run_job("trainer:latest", "--", "epoch-3")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("done: 6 lines, epoch-3", r.stdout)

        # The audit log says which digest each submission resolved to.
        status, audit = self.server.api("GET", "/v1/audit?action=POST%20/v1/jobs")
        self.assertEqual(status, 200, audit)
        details = [e.get("detail", "") for e in audit["items"]]
        self.assertTrue(any(digest in d for d in details), details)

    def test_2_missing_tags_and_other_registries_are_refused_at_submission(self):
        for image in ("%s/%s/trainer:nope" % (self.host, PROJECT),
                      "%s/%s/absent:latest" % (self.host, PROJECT), "absent:v1"):
            status, problem = self.server.api("POST", "/v1/jobs", {
                "image": image, "flavor": "ai1-1-cpu"})
            self.assertEqual(status, 404, problem)
            self.assertEqual(problem["errors"][0]["field"], "image", problem)
            self.assertIn(image, problem["detail"])
        status, problem = self.server.api("POST", "/v1/jobs", {
            "image": "registry.example:5000/%s/trainer:latest" % PROJECT, "flavor": "ai1-1-cpu"})
        self.assertEqual(status, 400, problem)
        self.assertIn("push the image there", problem["detail"])
        r = self.run_job("%s/%s/trainer:nope" % (self.host, PROJECT))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("trainer:nope", r.stderr)

    def test_3_immutable_tags_are_not_moved(self):
        self.build_and_push("v1", TRAIN_SH)
        r = self.sovai("image", "immutable", "%s/trainer" % PROJECT, "on")
        self.assertEqual(r.returncode, 0, r.stderr)
        ctx = os.path.join(self.work, "ctx-v1")
        shutil.rmtree(ctx)
        container = self.tool(BUILDAH, "from", "scratch").stdout.strip()
        os.makedirs(ctx)
        with open(os.path.join(ctx, "other.txt"), "w") as f:
            f.write("another image\n")
        self.tool(BUILDAH, "copy", container, ctx + "/", "/")
        self.tool(BUILDAH, "commit", container, "localhost/other:v1")
        r = self.tool(PODMAN, "push", "--tls-verify=false", "--creds", "sovai:" + self.token,
                      "localhost/other:v1", "docker://%s/%s/trainer:v1" % (self.host, PROJECT),
                      check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("immutable", r.stderr)
        r = self.sovai("image", "immutable", "%s/trainer" % PROJECT, "off")
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    unittest.main()
