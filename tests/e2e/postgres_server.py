"""A throwaway PostgreSQL server for end-to-end tests, from Debian's binaries: initdb and pg_ctl
in a temporary directory (as the `postgres` user when the tests run as root, since initdb
refuses root), trust authentication on 127.0.0.1 and a port chosen at run time.

    pg = PostgresServer().start()      # raises unittest.SkipTest, naming what is missing
    ... pg.url ...                     # postgres://sovai@127.0.0.1:PORT/postgres
    pg.stop()
"""

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import unittest


def _bin_dir():
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                        key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0)
    for path in reversed(candidates):
        if os.access(os.path.join(path, "initdb"), os.X_OK):
            return path
    return None


class PostgresServer:
    def __init__(self):
        self.bin = _bin_dir()
        self.tmp = None

    def start(self):
        if self.bin is None:
            raise unittest.SkipTest("PostgreSQL is not installed (apt-get install postgresql)")
        prefix = []
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise unittest.SkipTest("running as root and there is no 'postgres' user")
            prefix = ["runuser", "-u", "postgres", "--"]
        self.prefix = prefix
        self.tmp = tempfile.mkdtemp(prefix="sovai-pg-")
        if prefix:
            os.chown(self.tmp, pw.pw_uid, pw.pw_gid)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        data = os.path.join(self.tmp, "data")
        subprocess.run(prefix + [os.path.join(self.bin, "initdb"), "-D", data, "-A", "trust",
                                 "-U", "sovai", "-E", "UTF8"],
                       check=True, capture_output=True)
        subprocess.run(prefix + [os.path.join(self.bin, "pg_ctl"), "-D", data, "-w",
                                 "-l", os.path.join(self.tmp, "server.log"), "-o",
                                 "-c listen_addresses=127.0.0.1 -c port=%d "
                                 "-c unix_socket_directories=%s -c fsync=off" % (self.port,
                                                                                 self.tmp),
                                 "start"],
                       check=True, capture_output=True)
        self.url = "postgres://sovai@127.0.0.1:%d/postgres" % self.port
        return self

    def stop(self):
        if self.tmp is None:
            return
        subprocess.run(self.prefix + [os.path.join(self.bin, "pg_ctl"), "-D",
                                      os.path.join(self.tmp, "data"), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp = None
