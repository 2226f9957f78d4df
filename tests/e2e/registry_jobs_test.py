"""Jobs run images of the server's own registry, with Debian's real buildah and podman: an image
built with buildah (scratch + busybox-static + a training script) is pushed by tag with a Sovai
token (`podman push`) and pulled back (`podman pull`); `sovai job run --flavor ai1-1-cpu
--volume ...:ro --volume ...:rw HOST:PORT/<project>/trainer:latest` runs it and exits 0 with its
output in the bucket; the same by digest; the digest is recorded on the job and in the audit
log; a missing tag is refused at submission with a 404 naming the image; a tag of a repository
with immutable tags is not moved. A notebook runs in an image of the registry (its editor, a
stand-in for Jupyter served by busybox httpd, from the image's PATH): RUNNING with the digest
recorded, "sync now" (`sovai notebook sync`) puts what it wrote into the bucket while it runs;
an image without Jupyter fails the notebook with a reason that says so."""
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

    def build_and_push(self, tag, script, repository="trainer", files=None):
        """buildah from scratch + busybox + `script` (the entrypoint; None: no entrypoint) and
        `files` ({path in the image: executable text}); podman push with the token. The
        digest."""
        ctx = os.path.join(self.work, "ctx-%s-%s" % (repository, tag))
        os.makedirs(os.path.join(ctx, "bin"))
        shutil.copy(BUSYBOX, os.path.join(ctx, "bin", "busybox"))
        for applet in ("sh", "cat", "wc", "mkdir", "httpd"):
            os.symlink("busybox", os.path.join(ctx, "bin", applet))
        os.makedirs(os.path.join(ctx, "workspace"))
        for path, text in dict(files or {}, **({"train.sh": script} if script else {})).items():
            with open(os.path.join(ctx, path), "w") as f:
                f.write(text)
            os.chmod(os.path.join(ctx, path), 0o755)
        container = self.tool(BUILDAH, "from", "scratch").stdout.strip()
        self.tool(BUILDAH, "copy", container, ctx + "/", "/")
        entrypoint = ["--entrypoint", '["/bin/sh", "/train.sh"]', "--cmd", "epoch-1"] if script else []
        self.tool(BUILDAH, "config", *entrypoint, "--workingdir", "/workspace", "--env",
                  "PATH=/bin", container)
        local = "localhost/%s:%s" % (repository, tag)
        self.tool(BUILDAH, "commit", container, local)
        self.tool(BUILDAH, "rm", container)
        remote = "%s/%s/%s:%s" % (self.host, PROJECT, repository, tag)
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
        ctx = os.path.join(self.work, "ctx-trainer-v1")
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

    def wait_notebook(self, nb_id, states):
        deadline = time.time() + 120
        while time.time() < deadline:
            status, nb = self.server.api("GET", "/v1/notebooks/" + nb_id)
            self.assertEqual(status, 200, nb)
            if nb["state"] in states:
                return nb
            time.sleep(0.2)
        self.fail("notebook %s did not reach %s: %s" % (nb_id, states, nb))

    def test_4_a_notebook_runs_in_an_image_and_syncs_now(self):
        digest = self.build_and_push("1", None, repository="notebook",
                                     files={"bin/jupyter-notebook": FAKE_JUPYTER})
        status, nb = self.server.api("POST", "/v1/notebooks", {
            "name": "boxed", "flavor": "ai1-1-cpu", "image": "notebook:1", "idle_timeout_s": 0,
            "volumes": ["my-bucket@EU-WEST-LOCAL/nb:/workspace/work:rw:sync=end"]})
        self.assertEqual(status, 201, nb)
        self.assertEqual(nb["image_digest"], digest)
        nb = self.wait_notebook(nb["id"], {"RUNNING", "FAILED", "ERROR"})
        status, log = self.server.api("GET", "/v1/notebooks/%s/logs" % nb["id"], raw=True)
        self.assertEqual(nb["state"], "RUNNING", log)
        self.assertIn("fake jupyter in the image", log)
        # sync=end: nothing went up by itself; "sync now" puts it in the bucket while it runs.
        self.assertNotIn("Contents", self.s3.list_objects_v2(Bucket="my-bucket", Prefix="nb/"))
        r = self.sovai("notebook", "sync", "boxed")
        self.assertEqual(r.returncode, 0, r.stderr)
        body = self.s3.get_object(Bucket="my-bucket", Key="nb/hello.txt")["Body"].read()
        self.assertEqual(body, b"written in the image\n")
        shown = self.sovai("notebook", "get", "boxed")
        self.assertIn(digest, shown.stdout)
        self.assertEqual(self.wait_notebook(nb["id"], {"RUNNING"})["state"], "RUNNING")
        self.assertEqual(self.sovai("notebook", "stop", "boxed").returncode, 0)
        self.wait_notebook(nb["id"], {"STOPPED"})
        r = self.sovai("notebook", "sync", "boxed")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("RUNNING", r.stderr)

        # An image without Jupyter: the notebook fails, and its reason says what is missing.
        status, nb = self.server.api("POST", "/v1/notebooks", {
            "name": "no-jupyter", "flavor": "ai1-1-cpu", "image": "trainer:latest"})
        self.assertEqual(status, 201, nb)
        nb = self.wait_notebook(nb["id"], {"FAILED", "ERROR"})
        self.assertEqual(nb["state"], "FAILED", nb)
        self.assertIn("must have jupyter-notebook on its PATH", nb["reason"])
        # A missing tag is a 404 naming the image, at creation.
        status, problem = self.server.api("POST", "/v1/notebooks", {
            "flavor": "ai1-1-cpu", "image": "notebook:absent"})
        self.assertEqual(status, 404, problem)
        self.assertEqual(problem["errors"][0]["field"], "image", problem)


# A stand-in for jupyter-notebook in an image: Jupyter's flags in, its api/status out (busybox
# httpd serves the file), and a file written into the notebook's rw volume.
FAKE_JUPYTER = """#!/bin/sh
for a in "$@"; do
  case "$a" in
    --port=*) port="${a#--port=}" ;;
    --NotebookApp.base_url=*) base="${a#--NotebookApp.base_url=}" ;;
    --NotebookApp.notebook_dir=*) dir="${a#--NotebookApp.notebook_dir=}" ;;
  esac
done
mkdir -p "/tmp/www${base}api"
echo '{"last_activity": "2026-01-01T00:00:00.000000Z", "kernels": 0}' > "/tmp/www${base}api/status"
echo "written in the image" > "$dir/work/hello.txt"
echo "fake jupyter in the image on port $port"
exec httpd -f -p "127.0.0.1:$port" -h /tmp/www
"""


if __name__ == "__main__":
    unittest.main()
