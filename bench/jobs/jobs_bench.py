"""bench/jobs driver: N trivial jobs through a real `sovai server` against the same command
started directly under bwrap, side by side in one run (see run.sh). Prints; asserts nothing.

Sovai, one job at a time: POST /v1/jobs, then GET until DONE (polling every 2 ms). Latencies
come from the job's own transition timestamps (server clock): submit → RUNNING and
submit → DONE; the client-observed submit → DONE (incl. HTTP and polling) is printed too.
Then a burst: N jobs submitted at once, jobs/s until the last is DONE.
Peer: `bwrap` with the sandbox's namespaces and a read-only host root running the same command,
one at a time; its wall time per run is what the platform's overhead is measured against.
"""
import json
import os
import subprocess
import sys
import time
import urllib.request

TERMINAL = {"DONE", "FAILED", "ERROR", "INTERRUPTED", "TIMEOUT"}


def quantile(values, q):
    v = sorted(values)
    if not v:
        return 0.0
    i = min(len(v) - 1, max(0, int(round(q * (len(v) - 1)))))
    return v[i]


class Api:
    def __init__(self, data_dir):
        with open(os.path.join(data_dir, "server.json")) as f:
            self.url = json.load(f)["api_url"]
        with open(os.path.join(data_dir, "admin.json")) as f:
            self.token = json.load(f)["api_token"]

    def call(self, method, path, body=None):
        req = urllib.request.Request(
            self.url + path, method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": "Bearer " + self.token, "Content-Type": "application/json"})
        with urllib.request.urlopen(req) as r:
            return json.loads(r.read())


SPEC = {"image": "sovai/shell", "flavor": "ai1-1-cpu", "units": 1, "command": ["true"]}


def at(job, state):
    for t in job["status"]["history"]:
        if t["state"] == state:
            return t["at_unix_micros"]
    raise RuntimeError("job %s never was %s: %s" % (job["id"], state, job["status"]))


def wait_done(api, job_id):
    while True:
        job = api.call("GET", "/v1/jobs/" + job_id)
        if job["status"]["state"] in TERMINAL:
            if job["status"]["state"] != "DONE":
                raise RuntimeError("job %s ended %s" % (job_id, job["status"]))
            return job
        time.sleep(0.002)


def sovai_sequential(api, n):
    to_running, to_done, observed = [], [], []
    for _ in range(n):
        t0 = time.monotonic()
        job = api.call("POST", "/v1/jobs", SPEC)
        job = wait_done(api, job["id"])
        observed.append((time.monotonic() - t0) * 1e3)
        created = job["created_unix_micros"]
        to_running.append((at(job, "RUNNING") - created) / 1e3)
        to_done.append((at(job, "DONE") - created) / 1e3)
    return to_running, to_done, observed


def sovai_burst(api, n):
    t0 = time.monotonic()
    ids = [api.call("POST", "/v1/jobs", SPEC)["id"] for _ in range(n)]
    for job_id in ids:
        wait_done(api, job_id)
    return n / (time.monotonic() - t0)


def bwrap_argv():
    argv = ["bwrap", "--unshare-user", "--uid", "65534", "--gid", "65534", "--unshare-pid",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup", "--die-with-parent",
            "--new-session", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for d in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc"):
        path = "/" + d
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    return argv + ["--chdir", "/tmp", "true"]


def bwrap_direct(n):
    argv = bwrap_argv()
    wall = []
    for _ in range(n):
        t0 = time.monotonic()
        subprocess.run(argv, check=True, env={"PATH": "/usr/bin:/bin"})
        wall.append((time.monotonic() - t0) * 1e3)
    return wall


def main():
    data_dir, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    api = Api(data_dir)
    rows = {"bwrap": [], "running": [], "done": [], "observed": [], "burst": []}
    for r in range(rounds):
        # Alternate which side goes first.
        order = ("bwrap", "sovai") if r % 2 == 0 else ("sovai", "bwrap")
        for side in order:
            if side == "bwrap":
                rows["bwrap"].append(bwrap_direct(n))
            else:
                running, done, observed = sovai_sequential(api, n)
                rows["running"].append(running)
                rows["done"].append(done)
                rows["observed"].append(observed)
                rows["burst"].append(sovai_burst(api, n))
        b, d = rows["bwrap"][-1], rows["done"][-1]
        print("round %d: bwrap p50 %.1f ms | sovai submit->RUNNING p50 %.1f ms, submit->DONE p50 "
              "%.1f p99 %.1f ms, client-observed p50 %.1f ms | burst %.1f jobs/s"
              % (r + 1, quantile(b, 0.5), quantile(rows["running"][-1], 0.5), quantile(d, 0.5),
                 quantile(d, 0.99), quantile(rows["observed"][-1], 0.5), rows["burst"][-1]))
    med = lambda key, q: sorted(quantile(x, q) for x in rows[key])[len(rows[key]) // 2]
    bwrap50, bwrap99 = med("bwrap", 0.5), med("bwrap", 0.99)
    run50, run99 = med("running", 0.5), med("running", 0.99)
    done50, done99 = med("done", 0.5), med("done", 0.99)
    obs50, obs99 = med("observed", 0.5), med("observed", 0.99)
    burst = sorted(rows["burst"])[len(rows["burst"]) // 2]
    print("median of %d round(s), %d jobs each:" % (rounds, n))
    print("  bwrap direct, per run          p50 %7.1f ms  p99 %7.1f ms  (%.1f runs/s)"
          % (bwrap50, bwrap99, 1e3 / bwrap50))
    print("  sovai submit -> RUNNING        p50 %7.1f ms  p99 %7.1f ms" % (run50, run99))
    print("  sovai submit -> DONE           p50 %7.1f ms  p99 %7.1f ms" % (done50, done99))
    print("  sovai client-observed -> DONE  p50 %7.1f ms  p99 %7.1f ms" % (obs50, obs99))
    print("  sovai burst of %d              %7.1f jobs/s" % (n, burst))
    print("  overhead added at p50 (submit -> DONE minus bwrap direct): %.1f ms  (goal <= 100 ms)"
          % (done50 - bwrap50))


if __name__ == "__main__":
    main()
