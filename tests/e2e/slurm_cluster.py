"""A real one-node Slurm cluster on localhost for end-to-end tests: munged, slurmctld and slurmd
from Debian's slurm-wlm, with a generated slurm.conf in a temporary directory (own ports, own
state, own munge key), started and stopped by the test.

    cluster = SlurmCluster(cpus=2).start()      # raises unittest.SkipTest, naming what is missing
    ... cluster.env (SLURM_CONF for the Slurm commands), cluster.config_json(...) ...
    cluster.stop()
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

DAEMONS = ["munged", "slurmctld", "slurmd"]
COMMANDS = ["sbatch", "squeue", "scontrol", "scancel", "srun", "sinfo"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def memory_mb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 4096


class SlurmCluster:
    def __init__(self, cpus=2, slurmd_timeout_s=300, nodes=1):
        self.cpus = cpus
        # Two nodes are two slurmd on this host, named after two names of it (its hostname and
        # "localhost"), so that MASTER_ADDR resolves.
        self.nodes = nodes
        # How long slurmctld waits for a silent slurmd before it declares the node DOWN (and its
        # jobs NODE_FAIL).
        self.slurmd_timeout_s = slurmd_timeout_s
        self.tmp = tempfile.mkdtemp(prefix="sovai-slurm-")
        # slurmd runs the jobs as the submitting user (root here); the workloads' own uid must
        # traverse the scratch directory.
        os.chmod(self.tmp, 0o755)
        self.procs = []
        self.host = socket.gethostname().split(".")[0]
        self.node_names = [self.host, "localhost"][:nodes]

    @staticmethod
    def skip_reason():
        missing = [p for p in DAEMONS + COMMANDS if shutil.which(p) is None and
                   not os.path.exists("/usr/sbin/" + p)]
        if missing:
            return "Slurm is not installed (missing %s; apt-get install slurm-wlm munge)" % (
                ", ".join(missing))
        if os.geteuid() != 0:
            return "slurmd must run as root to start jobs as their users"
        if shutil.which("bwrap") is None:
            return "bubblewrap is not installed (the Slurm agent's sandbox)"
        return ""

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def start(self):
        reason = self.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        for d in ["state", "log", "munge", "scratch"] + ["spool-" + n for n in self.node_names]:
            os.makedirs(self.path(d), exist_ok=True)
        os.chmod(self.path("scratch"), 0o755)
        with open(self.path("munge", "munge.key"), "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(self.path("munge", "munge.key"), 0o600)
        socket_path = self.path("munge", "munge.sock")
        ctld_port = free_port()
        slurmd_ports = [free_port() for _ in self.node_names]
        conf = "\n".join([
            "ClusterName=sovaitest",
            "SlurmctldHost=%s(127.0.0.1)" % self.host,
            "SlurmctldPort=%d" % ctld_port,
            "AuthType=auth/munge",
            "AuthInfo=socket=%s" % socket_path,
            "CredType=cred/munge",
            "SlurmUser=root",
            "SlurmdUser=root",
            "StateSaveLocation=%s" % self.path("state"),
            "SlurmdSpoolDir=%s" % self.path("spool-%n"),
            "SlurmctldPidFile=%s" % self.path("slurmctld.pid"),
            "SlurmdPidFile=%s" % self.path("slurmd-%n.pid"),
            "SlurmctldLogFile=%s" % self.path("log", "slurmctld.log"),
            "SlurmdLogFile=%s" % self.path("log", "slurmd-%n.log"),
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=1",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "ReturnToService=2",
            "MinJobAge=3600",
            "KillWait=5",
            "SlurmdTimeout=%d" % self.slurmd_timeout_s,
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SwitchType=switch/none",
        ] + [
            "NodeName=%s NodeHostname=%s NodeAddr=127.0.0.1 Port=%d CPUs=%d RealMemory=%d "
            "State=UNKNOWN" % (name, self.host, slurmd_ports[i], self.cpus,
                               int(memory_mb() * 0.8 / self.nodes))
            for i, name in enumerate(self.node_names)
        ] + [
            "PartitionName=debug Nodes=%s Default=YES MaxTime=INFINITE State=UP" % (
                ",".join(self.node_names)),
            "",
        ])
        self.conf = self.path("slurm.conf")
        with open(self.conf, "w") as f:
            f.write(conf)
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self._daemon(["munged", "--foreground", "--key-file", self.path("munge", "munge.key"),
                      "--socket", socket_path, "--pid-file", self.path("munge", "munged.pid"),
                      "--log-file", self.path("log", "munged.log"),
                      "--seed-file", self.path("munge", "seed"), "--force"])
        self._wait_for(lambda: os.path.exists(socket_path), "munged")
        self._daemon(["slurmctld", "-D", "-f", self.conf])
        for name in self.node_names:
            self._daemon(["slurmd", "-D", "-f", self.conf, "-N", name])
        self._wait_for(self._node_idle, "the node to be idle in sinfo")
        return self

    def _daemon(self, argv):
        log = open(self.path("log", "-".join([argv[0]] + argv[-1:] if argv[0] == "slurmd"
                                             else [argv[0]]) + ".out"), "ab")
        binary = shutil.which(argv[0]) or "/usr/sbin/" + argv[0]
        self.procs.append(subprocess.Popen([binary] + argv[1:], stdout=log, stderr=log,
                                           env=dict(os.environ, SLURM_CONF=self.path("slurm.conf"))))

    def _node_idle(self):
        r = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True,
                           text=True)
        states = r.stdout.split()
        return (r.returncode == 0 and len(states) >= 1 and
                all(state in ("idle", "mix", "alloc") for state in states) and
                self._idle_nodes() == len(self.node_names))

    def _idle_nodes(self):
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env,
                           capture_output=True, text=True)
        return sum(1 for line in r.stdout.splitlines() if line.split()[1:] == ["idle"])

    def _wait_for(self, ready, what, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError("%s exited: %s" % (p.args[0], self.logs()))
            if ready():
                return
            time.sleep(0.1)
        raise RuntimeError("timed out waiting for %s: %s" % (what, self.logs()))

    def logs(self):
        out = []
        for name in sorted(os.listdir(self.path("log"))):
            with open(self.path("log", name), "rb") as f:
                out.append("--- %s\n%s" % (name, f.read().decode(errors="replace")[-2000:]))
        return "\n".join(out)

    def kill_slurmd(self):
        """SIGKILL of slurmd, as a node that dies (its running steps stay behind)."""
        for p in self.procs:
            if p.args[0].endswith("slurmd"):
                p.kill()
                p.wait()

    def squeue(self):
        r = subprocess.run(["squeue", "-h", "-o", "%i|%T|%r"], env=self.env, capture_output=True,
                           text=True)
        return [line.split("|") for line in r.stdout.splitlines() if line]

    def config_file(self, **settings):
        """The --slurm-config file for `sovai server --executor slurm`."""
        import json
        settings.setdefault("slurm_conf", self.conf)
        # Several nodes of this host share its filesystem: a scratch directory per node.
        settings.setdefault("scratch_dir", self.path("scratch") + ("-%n" if self.nodes > 1 else ""))
        settings.setdefault("poll_ms", 200)
        path = self.path("sovai-slurm.json")
        with open(path, "w") as f:
            json.dump(settings, f)
        return path

    def _own_processes(self):
        """Pids of every process this cluster's daemons started (slurmstepd inherits their
        SLURM_CONF) and of their descendants."""
        parents, marked = {}, set()
        needle = ("SLURM_CONF=" + self.conf).encode()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % entry, "rb") as f:
                    stat = f.read()
                parents[int(entry)] = int(stat[stat.rindex(b")") + 2:].split()[1])
                with open("/proc/%s/environ" % entry, "rb") as f:
                    if needle in f.read().split(b"\0"):
                        marked.add(int(entry))
            except (OSError, ValueError):
                continue
        daemons = {p.pid for p in self.procs}
        found = set(marked - daemons)
        changed = True
        while changed:
            changed = False
            for pid, parent in parents.items():
                if parent in found and pid not in found and pid not in daemons:
                    found.add(pid)
                    changed = True
        return found

    def stop(self):
        subprocess.run(["scancel", "--state=PENDING", "-u", "root"], env=self.env,
                       capture_output=True)
        subprocess.run(["scancel", "--full", "-u", "root"], env=self.env, capture_output=True)
        deadline = time.time() + 15
        while self.squeue() and time.time() < deadline:
            time.sleep(0.2)
        # Steps that outlived their slurmd (a killed node) are this test's to end.
        for pid in self._own_processes():
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []
        shutil.rmtree(self.tmp, ignore_errors=True)
