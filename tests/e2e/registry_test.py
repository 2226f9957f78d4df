"""The OCI registry of `sovai server` with Debian's real skopeo: an image built by hand as an
OCI layout (busybox-static in a tar layer) is pushed by tag with a Sovai API token, inspected and
pulled back; another project is denied both ways; an interrupted chunked upload leaves no blob;
a manifest naming a missing blob is refused; `sovai registry gc` removes only unreferenced
blobs; `sovai registry login` writes the auth file skopeo reads."""
import base64
import gzip
import hashlib
import http.client
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
import unittest

from sovai_fixture import SOVAI_BINARY, SovaiServer

SKOPEO = shutil.which("skopeo")
BUSYBOX = "/bin/busybox" if os.path.exists("/bin/busybox") else shutil.which("busybox")


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def build_oci_layout(directory, script):
    """An OCI image layout (oci-layout, index.json, blobs/sha256/...) tagged `latest`: one gzip
    layer with busybox as /bin/sh and `script` as /train.sh."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for d in ("bin", "workspace"):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
        with open(BUSYBOX, "rb") as f:
            data = f.read()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("bin/sh")
        link.type, link.linkname = tarfile.SYMTYPE, "busybox"
        tar.addfile(link)
        body = script.encode()
        info = tarfile.TarInfo("train.sh")
        info.size, info.mode = len(body), 0o755
        tar.addfile(info, io.BytesIO(body))
    layer_tar = raw.getvalue()
    layer = gzip.compress(layer_tar, mtime=0)
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["/bin/sh", "/train.sh"], "WorkingDir": "/workspace"},
        "rootfs": {"type": "layers", "diff_ids": [sha256(layer_tar)]}}).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": sha256(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": sha256(layer), "size": len(layer)}]}).encode()
    blobs = os.path.join(directory, "blobs", "sha256")
    os.makedirs(blobs)
    for data in (layer, config, manifest):
        with open(os.path.join(blobs, hashlib.sha256(data).hexdigest()), "wb") as f:
            f.write(data)
    with open(os.path.join(directory, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    with open(os.path.join(directory, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": sha256(manifest), "size": len(manifest),
            "annotations": {"org.opencontainers.image.ref.name": "latest"}}]}, f)
    return {"layer": sha256(layer), "config": sha256(config), "manifest": sha256(manifest)}


@unittest.skipUnless(SKOPEO and BUSYBOX, "needs skopeo and busybox-static (tools/bootstrap.sh)")
class RegistryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Storage is sampled for billing every second (each hour bills its largest sample).
        cls.server = SovaiServer(extra_args=["--billing-sample-interval", "1"]).start()
        cls.host = cls.server.registry_url.split("://", 1)[1]
        cls.tokens = {}
        for project, role, key in (("alpha", "operator", "alpha-op"), ("alpha", "read", "alpha-read"),
                                   ("beta", "operator", "beta-op")):
            status, p = cls.server.api("POST", "/v1/projects", {"name": project})
            if status == 409:
                p = [x for x in cls.server.api("GET", "/v1/projects")[1]["items"]
                     if x["name"] == project][0]
            status, user = cls.server.api("POST", "/v1/users", {"name": key})
            assert status == 201, user
            cls.server.api("POST", "/v1/projects/%s/members/%s" % (p["id"], user["id"]),
                           {"role": role})
            status, token = cls.server.api("POST", "/v1/tokens", {
                "user": user["id"], "project": p["id"], "role": role})
            assert status == 201, token
            cls.tokens[key] = token["token"]
        cls.work = tempfile.mkdtemp(prefix="sovai-registry-e2e-")
        cls.layout = os.path.join(cls.work, "layout")
        os.makedirs(cls.layout)
        cls.digests = build_oci_layout(cls.layout, "echo training on $(cat /workspace/data/x)\n")

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()
        shutil.rmtree(cls.work, ignore_errors=True)

    def skopeo(self, *args, check=True):
        env = dict(os.environ, HOME=self.work, XDG_RUNTIME_DIR=self.work)
        r = subprocess.run([SKOPEO, "--insecure-policy"] + list(args), capture_output=True,
                           text=True, env=env, timeout=300)
        if check:
            self.assertEqual(r.returncode, 0, r.stderr)
        return r

    def push(self, ref, token):
        return self.skopeo("copy", "--dest-tls-verify=false", "--dest-creds", "sovai:" + token,
                           "oci:" + self.layout + ":latest", "docker://%s/%s" % (self.host, ref),
                           check=False)

    def call(self, method, path, body=b"", token=None, headers=None):
        conn = http.client.HTTPConnection(self.host, timeout=60)
        h = {"Authorization": "Basic " + base64.b64encode(
            ("sovai:" + (token or self.tokens["alpha-op"])).encode()).decode()}
        h.update(headers or {})
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, dict(r.getheaders()), data

    def sovai(self, *args):
        env = dict(os.environ, SOVAI_URL=self.server.api_url, SOVAI_TOKEN=self.tokens["alpha-op"],
                   SOVAI_REGISTRY=self.host, HOME=self.work, XDG_RUNTIME_DIR=self.work,
                   XDG_CONFIG_HOME=os.path.join(self.work, "config"))
        return subprocess.run([SOVAI_BINARY] + list(args), capture_output=True, text=True,
                              env=env, timeout=120)

    def test_1_push_inspect_pull_back(self):
        r = self.push("alpha/trainer:latest", self.tokens["alpha-op"])
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.skopeo("inspect", "--tls-verify=false", "--creds",
                        "sovai:" + self.tokens["alpha-read"],
                        "docker://%s/alpha/trainer:latest" % self.host)
        info = json.loads(r.stdout)
        self.assertEqual(info["Digest"], self.digests["manifest"])
        self.assertEqual(info["Layers"], [self.digests["layer"]])
        pulled = os.path.join(self.work, "pulled")
        self.skopeo("copy", "--src-tls-verify=false", "--src-creds",
                    "sovai:" + self.tokens["alpha-read"],
                    "docker://%s/alpha/trainer:latest" % self.host, "oci:" + pulled + ":latest")
        for digest in (self.digests["layer"], self.digests["config"]):
            name = digest.split(":")[1]
            with open(os.path.join(self.layout, "blobs", "sha256", name), "rb") as a, \
                    open(os.path.join(pulled, "blobs", "sha256", name), "rb") as b:
                self.assertEqual(a.read(), b.read())
        # By digest too.
        self.skopeo("inspect", "--tls-verify=false", "--creds", "sovai:" + self.tokens["alpha-op"],
                    "docker://%s/alpha/trainer@%s" % (self.host, self.digests["manifest"]))

    def test_2_another_project_is_denied(self):
        self.assertEqual(self.push("alpha/trainer:latest", self.tokens["alpha-op"]).returncode, 0)
        r = self.skopeo("inspect", "--tls-verify=false", "--creds",
                        "sovai:" + self.tokens["beta-op"],
                        "docker://%s/alpha/trainer:latest" % self.host, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("denied", r.stderr.lower())
        r = self.push("alpha/intruder:latest", self.tokens["beta-op"])
        self.assertNotEqual(r.returncode, 0)
        # skopeo's first request is a HEAD of a blob, whose 403 has no body to quote.
        self.assertRegex(r.stderr.lower(), "denied|403")
        r = self.push("alpha/reader:latest", self.tokens["alpha-read"])
        self.assertNotEqual(r.returncode, 0)
        status, _, _ = self.call("GET", "/v2/alpha/intruder/tags/list")
        self.assertEqual(status, 404)
        # Beta pushes to its own project.
        self.assertEqual(self.push("beta/trainer:v1", self.tokens["beta-op"]).returncode, 0)

    def test_3_interrupted_chunked_upload_leaves_no_blob(self):
        data = os.urandom(200000)
        status, headers, _ = self.call("POST", "/v2/alpha/partial/blobs/uploads/")
        self.assertEqual(status, 202)
        location = headers["Location"]
        status, headers, _ = self.call("PATCH", location, data[:100000],
                                       headers={"Content-Range": "0-99999"})
        self.assertEqual(status, 202)
        self.assertEqual(headers["Range"], "0-99999")
        # The second chunk breaks off: the connection closes before its declared length.
        auth = base64.b64encode(("sovai:" + self.tokens["alpha-op"]).encode()).decode()
        with socket.create_connection(tuple(self.host.rsplit(":", 1))) as s:
            s.sendall(("PATCH %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Basic %s\r\n"
                       "Content-Range: 100000-199999\r\nContent-Length: 100000\r\n\r\n"
                       % (location, self.host, auth)).encode() + data[100000:150000])
        # The server notices the break when its read fails; until then the upload is busy.
        for _ in range(200):
            status, _, _ = self.call("GET", location)
            if status == 404:
                break
            time.sleep(0.05)
        status, _, body = self.call("PUT", location + "?digest=" + sha256(data), data[150000:])
        self.assertEqual(status, 404, body)
        self.assertEqual(json.loads(body)["errors"][0]["code"], "BLOB_UPLOAD_UNKNOWN")
        status, _, _ = self.call("HEAD", "/v2/alpha/partial/blobs/" + sha256(data))
        self.assertEqual(status, 404)

    def test_4_manifest_naming_a_missing_blob_is_refused(self):
        config = b'{"architecture":"amd64","os":"linux"}'
        status, _, _ = self.call("POST", "/v2/alpha/broken/blobs/uploads/?digest=" + sha256(config),
                                 config)
        self.assertEqual(status, 201)
        manifest = json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": sha256(config), "size": len(config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        "digest": sha256(b"never pushed"), "size": 12}]}).encode()
        status, _, body = self.call("PUT", "/v2/alpha/broken/manifests/v1", manifest, headers={
            "Content-Type": "application/vnd.oci.image.manifest.v1+json"})
        self.assertEqual(status, 400, body)
        self.assertEqual(json.loads(body)["errors"][0]["code"], "MANIFEST_BLOB_UNKNOWN")
        status, _, _ = self.call("GET", "/v2/alpha/broken/manifests/v1")
        self.assertEqual(status, 404)

    def test_5_gc_removes_only_unreferenced_blobs(self):
        self.assertEqual(self.push("alpha/trainer:latest", self.tokens["alpha-op"]).returncode, 0)
        orphan = b"a blob no manifest references"
        status, _, _ = self.call("POST", "/v2/alpha/trainer/blobs/uploads/?digest=" + sha256(orphan),
                                 orphan)
        self.assertEqual(status, 201)
        dry = self.sovai("registry", "gc", "--min-age-s", "0", "-o", "json")
        self.assertEqual(dry.returncode, 0, dry.stderr)
        report = json.loads(dry.stdout)
        self.assertTrue(report["dry_run"])
        removed = {r["digest"] for r in report["removed"]}
        self.assertIn(sha256(orphan), removed)
        self.assertNotIn(self.digests["layer"], removed)
        self.assertNotIn(self.digests["config"], removed)
        status, _, _ = self.call("HEAD", "/v2/alpha/trainer/blobs/" + sha256(orphan))
        self.assertEqual(status, 200)  # a dry run removes nothing
        real = self.sovai("registry", "gc", "--min-age-s", "0", "--apply")
        self.assertEqual(real.returncode, 0, real.stderr)
        self.assertIn("removed", real.stderr)
        status, _, _ = self.call("HEAD", "/v2/alpha/trainer/blobs/" + sha256(orphan))
        self.assertEqual(status, 404)
        status, _, _ = self.call("HEAD", "/v2/alpha/trainer/blobs/" + self.digests["layer"])
        self.assertEqual(status, 200)
        self.skopeo("copy", "--src-tls-verify=false", "--src-creds",
                    "sovai:" + self.tokens["alpha-op"],
                    "docker://%s/alpha/trainer:latest" % self.host,
                    "oci:" + os.path.join(self.work, "after-gc") + ":latest")

    def test_6_registry_login_and_image_commands(self):
        self.assertEqual(self.push("alpha/trainer:latest", self.tokens["alpha-op"]).returncode, 0)
        auth_file = os.path.join(self.work, "auth.json")
        r = self.sovai("registry", "login", "--authfile", auth_file)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.skopeo("inspect", "--tls-verify=false", "--authfile", auth_file,
                    "docker://%s/alpha/trainer:latest" % self.host)
        r = self.sovai("image", "list", "-o", "json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("alpha/trainer", json.loads(r.stdout)["repositories"])
        self.assertNotIn("beta/trainer", json.loads(r.stdout)["repositories"])
        r = self.sovai("image", "tags", "alpha/trainer")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("latest", r.stdout)
        self.assertIn(self.digests["manifest"], r.stdout)
        self.assertEqual(self.push("alpha/trainer:old", self.tokens["alpha-op"]).returncode, 0)
        r = self.sovai("image", "delete", "alpha/trainer:old")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.skopeo("inspect", "--tls-verify=false", "--authfile", auth_file,
                        "docker://%s/alpha/trainer:old" % self.host, check=False)
        self.assertNotEqual(r.returncode, 0)

    def test_7_images_are_billed_per_repository_to_their_project(self):
        self.assertEqual(self.push("alpha/trainer:latest", self.tokens["alpha-op"]).returncode, 0)
        _, projects = self.server.api("GET", "/v1/projects")
        ids = {p["name"]: p["id"] for p in projects["items"]}
        deadline = time.time() + 60
        while True:
            status, usage = self.server.api("GET", "/v1/billing/usage?project=*")
            self.assertEqual(status, 200, usage)
            storage = [l for l in usage["lines"] if l["kind"] == "storage"]
            mine = [l for l in storage if l["project"] == ids["alpha"]
                    and l["resource"] == "registry:alpha/trainer"]
            if mine or time.time() > deadline:
                break
            time.sleep(0.5)
        self.assertTrue(mine, storage)
        self.assertEqual(mine[0]["unit_price_micro_eur"], storage[0]["unit_price_micro_eur"])
        # The registry's bucket is no project's: its bytes are billed only per repository.
        self.assertEqual([l for l in storage if l["project"] not in ids.values()], [])


if __name__ == "__main__":
    unittest.main()
