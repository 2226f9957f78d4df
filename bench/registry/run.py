#!/usr/bin/env python3
"""bench/registry: pushing and pulling an image through `sovai server`'s registry against the object
store's own PUT and GET of the same bytes, side by side in one run, and what the layer cache saves
a second job. Prints medians and ratios; asserts nothing.

Each round, an image of one uncompressed layer (busybox as /bin/sh and SIZE_MB MiB of random bytes,
plus a file naming the round, so that no round's blob is one the registry already has), written as
an OCI layout; then, alternating which side goes first:
  push:  `skopeo copy oci:LAYOUT docker://REGISTRY/default/bench:rN` (the layer's blob upload, its
         digest verified by the registry, then the manifest)
  PUT:   boto3 `upload_file` of the layer file into a bucket (multipart, 64 MiB parts, 4 at once,
         as aws-cli and boto3 upload big files)
  pull:  `skopeo copy docker://... oci:OUT` (every blob downloaded and verified)
  GET:   boto3 `download_file` of that object
Goal (issue 26): push and pull >= 0.8x the object store's PUT and GET.
Then two jobs run the image by tag one after the other: the first pulls the layer by digest and
unpacks it, the second finds it in the layer cache; QUEUED -> RUNNING of each is printed (from the
jobs' own transition times).

Env: SIZE_MB (1024), ROUNDS (3), BUILD_DIR (build), KEEP (1 keeps the work directory).
Needs skopeo and busybox-static (tools/bootstrap.sh installs both) and a built `sovai`.
"""
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD_DIR = os.environ.get("BUILD_DIR", os.path.join(REPO, "build"))
os.environ.setdefault("SOVAI_BINARY", os.path.join(BUILD_DIR, "src", "cli", "sovai"))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
from sovai_fixture import SovaiServer, TERMINAL  # noqa: E402

SIZE_MB = int(os.environ.get("SIZE_MB", "1024"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
BUSYBOX = shutil.which("busybox") or "/bin/busybox"
MB = 1e6


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def write_blob(blobs, data):
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blobs, digest), "wb") as f:
        f.write(data)
    return "sha256:" + digest, len(data)


def build_layout(directory, filler, name):
    """An OCI layout tagged `latest`: one uncompressed tar layer (busybox, /bin/sh, the filler
    file, and a file `name`, so that each round's layer is a blob the registry has not seen).
    Returns the layer's path and size."""
    blobs = os.path.join(directory, "blobs", "sha256")
    os.makedirs(blobs)
    layer_path = os.path.join(directory, "layer.tar")
    with tarfile.open(layer_path, "w", format=tarfile.PAX_FORMAT) as tar:
        for directory_name in ("bin", "workspace"):
            info = tarfile.TarInfo(directory_name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        tar.add(BUSYBOX, arcname="bin/busybox")
        link = tarfile.TarInfo("bin/sh")
        link.type, link.linkname = tarfile.SYMTYPE, "busybox"
        tar.addfile(link)
        marker = tarfile.TarInfo(name)
        tar.addfile(marker)
        tar.add(filler, arcname="filler")
    layer_digest = "sha256:" + sha256_file(layer_path)
    layer_size = os.path.getsize(layer_path)
    os.rename(layer_path, os.path.join(blobs, layer_digest.split(":")[1]))
    layer_path = os.path.join(blobs, layer_digest.split(":")[1])
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Entrypoint": ["/bin/sh", "-c", "true"]},
                         "rootfs": {"type": "layers", "diff_ids": [layer_digest]}}).encode()
    config_digest, config_size = write_blob(blobs, config)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest, "size": layer_size}]}).encode()
    manifest_digest, manifest_size = write_blob(blobs, manifest)
    with open(os.path.join(directory, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    with open(os.path.join(directory, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest, "size": manifest_size,
            "annotations": {"org.opencontainers.image.ref.name": "latest"}}]}, f)
    return layer_path, layer_size


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main():
    if not shutil.which("skopeo") or not os.path.exists(BUSYBOX):
        print("bench/registry: needs skopeo and busybox-static (tools/bootstrap.sh)")
        return 1
    work = tempfile.mkdtemp(prefix="sovai-bench-registry-")
    server = SovaiServer(workloads=True).start()
    try:
        return run(server, work)
    finally:
        server.cleanup()
        if os.environ.get("KEEP") == "1":
            print("bench/registry: kept", work)
        else:
            shutil.rmtree(work, ignore_errors=True)


def run(server, work):
    from boto3.s3.transfer import TransferConfig
    filler = os.path.join(work, "filler")
    with open(filler, "wb") as f:
        for _ in range(SIZE_MB):
            f.write(os.urandom(1 << 20))
    host = server.registry_url.split("://", 1)[1]
    token = server.admin_token()
    env = dict(os.environ, HOME=work, XDG_RUNTIME_DIR=work)

    def skopeo(*args):
        subprocess.run(["skopeo", "--insecure-policy"] + list(args), check=True, env=env,
                       stdout=subprocess.DEVNULL, timeout=1800)

    s3 = server.boto3_client()
    s3.create_bucket(Bucket="bench")
    transfer = TransferConfig(multipart_chunksize=64 << 20, multipart_threshold=64 << 20,
                              max_concurrency=4)
    rates = {"push": [], "put": [], "pull": [], "get": []}
    print("bench/registry: %d cores, layers of %d MiB of random bytes (uncompressed tar), "
          "%d round(s); MB = 10^6 bytes" % (os.cpu_count(), SIZE_MB, ROUNDS))
    for r in range(ROUNDS):
        layout = os.path.join(work, "layout-%d" % r)
        os.makedirs(layout)
        layer_path, layer_size = build_layout(layout, filler, "round-%d" % r)
        ref = "docker://%s/default/bench:r%d" % (host, r)
        out = os.path.join(work, "pulled-%d" % r)
        download = os.path.join(work, "download-%d" % r)
        sides = {
            "push": lambda: skopeo("copy", "--dest-tls-verify=false", "--dest-creds",
                                   "sovai:" + token, "oci:%s:latest" % layout, ref),
            "put": lambda: s3.upload_file(layer_path, "bench", "layer-%d" % r, Config=transfer),
            "pull": lambda: skopeo("copy", "--src-tls-verify=false", "--src-creds",
                                   "sovai:" + token, ref, "oci:%s:latest" % out),
            "get": lambda: s3.download_file("bench", "layer-%d" % r, download, Config=transfer),
        }
        order = (["push", "put", "pull", "get"] if r % 2 == 0 else ["put", "push", "get", "pull"])
        for side in order:
            seconds = timed(sides[side])
            rates[side].append(layer_size / MB / seconds)
            print("  round %d  %-4s %8.1f MB/s  (%.2f s)" % (r + 1, side, rates[side][-1], seconds))
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(layout, ignore_errors=True)
        os.unlink(download)

    med = {k: statistics.median(v) for k, v in rates.items()}
    print("median of %d round(s):" % ROUNDS)
    print("  push  %8.1f MB/s   object store PUT %8.1f MB/s   ratio %.2f   goal >= 0.80"
          % (med["push"], med["put"], med["push"] / med["put"]))
    print("  pull  %8.1f MB/s   object store GET %8.1f MB/s   ratio %.2f   goal >= 0.80"
          % (med["pull"], med["get"], med["pull"] / med["get"]))

    # The layer cache: the same image by tag in two jobs, one after the other.
    image = "%s/default/bench:r0" % host
    for n in (1, 2):
        status, job = server.api("POST", "/v1/jobs", {"image": image, "flavor": "ai1-1-cpu",
                                                      "units": 1, "command": ["/bin/sh", "-c",
                                                                              "true"]})
        if status != 201:
            print("bench/registry: job refused: %s %s" % (status, job))
            return 1
        deadline = time.time() + 1800
        while time.time() < deadline:
            _, job = server.api("GET", "/v1/jobs/" + job["id"])
            if job["status"]["state"] in TERMINAL:
                break
            time.sleep(0.2)
        history = {t["state"]: t["at_unix_micros"] for t in job["status"]["history"]}
        if job["status"]["state"] != "DONE" or "RUNNING" not in history:
            print("bench/registry: job %s ended %s" % (job["id"], job["status"]))
            return 1
        print("  job %d (%s): QUEUED -> RUNNING %.2f s" % (
            n, "pulls and unpacks the layer" if n == 1 else "layer cache hit",
            (history["RUNNING"] - history["QUEUED"]) / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
