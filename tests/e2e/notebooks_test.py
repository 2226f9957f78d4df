"""Notebooks end to end: a real `sovai server`, `sovai notebook run` from the CLI, Jupyter
(Debian's jupyter-notebook) in the sandbox with a rw volume of a bucket, reached through the
gateway at /notebooks/<id>/ with an API token (401 without), a kernel created through Jupyter's
REST API and driven over its websocket (the Jupyter messaging protocol, with a websocket client
written here on the standard library) to write a file into the volume, then `sovai notebook
stop`, and the file found in the bucket with boto3. Also: vscode refused where code-server is not
installed (notebooks_vscode_test.py runs it), the dry run, and
the notebook's minutes on the bill."""
import base64
import hashlib
import json
import os
import shutil
import socket
import struct
import time
import unittest
import urllib.parse
import uuid

from sovai_fixture import REGION, CliMixin, SovaiServer, cli_env

BUCKET = "notebooks"
VOLUME = "%s@%s/work:/workspace/work:rw" % (BUCKET, REGION.upper())
WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class WebSocket:
    """A minimal RFC 6455 client: the handshake, masked text frames out, frames in."""

    def __init__(self, url, path, headers, timeout=60):
        parsed = urllib.parse.urlparse(url)
        self.sock = socket.create_connection((parsed.hostname, parsed.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = ["GET %s HTTP/1.1" % path, "Host: %s" % parsed.netloc, "Upgrade: websocket",
                 "Connection: Upgrade", "Sec-WebSocket-Key: " + key, "Sec-WebSocket-Version: 13"]
        lines += ["%s: %s" % kv for kv in headers.items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("closed during the handshake: %r" % self.buffer)
            self.buffer += chunk
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        self.head = head.decode(errors="replace")
        self.status = int(self.head.split(" ", 2)[1])
        expected = base64.b64encode(hashlib.sha1((key + WEBSOCKET_GUID).encode()).digest())
        # Header names compare case-insensitively (Jupyter's server writes Sec-Websocket-Accept).
        self.accept_ok = ("sec-websocket-accept: " + expected.decode().lower()) in self.head.lower()

    def _read(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the websocket closed")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def send_text(self, text):
        payload = text.encode()
        header = bytes([0x81])
        if len(payload) < 126:
            header += bytes([0x80 | len(payload)])
        elif len(payload) < 65536:
            header += bytes([0x80 | 126]) + struct.pack("!H", len(payload))
        else:
            header += bytes([0x80 | 127]) + struct.pack("!Q", len(payload))
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def recv_message(self):
        """The next text or binary message (continuations joined; pings answered)."""
        message = b""
        while True:
            b0, b1 = self._read(2)
            opcode, length = b0 & 0x0F, b1 & 0x7F
            if length == 126:
                length = struct.unpack("!H", self._read(2))[0]
            elif length == 127:
                length = struct.unpack("!Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            payload = self._read(length)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == 0x8:
                raise ConnectionError("the server closed the websocket")
            if opcode == 0x9:  # ping: pong with the same payload
                self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + b"\0\0\0\0" + payload)
                continue
            if opcode == 0xA:
                continue
            message += payload
            if b0 & 0x80:
                return message

    def close(self):
        try:
            self.sock.sendall(bytes([0x88, 0x80]) + b"\0\0\0\0")
        except OSError:
            pass
        self.sock.close()


@unittest.skipIf(shutil.which("jupyter-notebook") is None,
                 "jupyter-notebook is not installed (tools/bootstrap.sh installs Debian's "
                 "jupyter-notebook package)")
class NotebooksTest(CliMixin, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # No code-server here (notebooks_vscode_test.py runs it): `--editor vscode` is refused.
        # The notebook runs as an unprivileged user that must reach its directories.
        cls.server = SovaiServer(extra_args=["--code-server", "/nonexistent/code-server"],
                                 workloads=True).start()
        cls.s3 = cls.server.boto3_client()
        cls.s3.create_bucket(Bucket=BUCKET)
        cls.s3.put_object(Bucket=BUCKET, Key="work/input.txt", Body=b"from the bucket\n")
        cls.env = cli_env(cls.server)

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    def gateway(self, method, path, token=None, body=None):
        """(status, text) of a request to the gateway (not under /v1)."""
        import urllib.request
        import urllib.error
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = "Bearer " + token
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server.api_url + path, method=method, data=data,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def execute(self, ws, code):
        """Runs `code` in the kernel; returns (reply content, stdout text)."""
        session = uuid.uuid4().hex
        msg_id = uuid.uuid4().hex
        ws.send_text(json.dumps({
            "header": {"msg_id": msg_id, "username": "e2e", "session": session,
                       "msg_type": "execute_request", "version": "5.3",
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
            "parent_header": {}, "metadata": {},
            "content": {"code": code, "silent": False, "store_history": True,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
            "buffers": [], "channel": "shell"}))
        # The reply comes on the shell channel, the output on iopub, in no set order: done once
        # both the reply and iopub's "idle" for this request arrived.
        stdout, reply, idle = "", None, False
        deadline = time.time() + 120
        while time.time() < deadline and (reply is None or not idle):
            msg = json.loads(ws.recv_message())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                stdout += msg["content"].get("text", "")
            elif msg["msg_type"] == "execute_reply":
                reply = msg["content"]
            elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                idle = True
        if reply is None or not idle:
            self.fail("no execute_reply and idle status within 120 s")
        return reply, stdout

    def test_a_kernel_writes_into_the_rw_volume_and_the_file_reaches_the_bucket(self):
        token = self.server.admin_token()
        run = self.sovai("notebook", "run", "--name", "e2e", "--volume", VOLUME, "--cpu", "2",
                         "--wait", "--timeout", "5m", "-o", "json")
        nb = json.loads(run.stdout)
        nb_id = nb["id"]
        self.assertEqual(nb["state"], "RUNNING")
        self.assertEqual(nb["workdir"], "/workspace")
        self.assertTrue(nb["url"].endswith("/notebooks/%s/" % nb_id), nb["url"])
        base = "/notebooks/%s/" % nb_id

        # Jupyter through the gateway: the user's token, never Jupyter's.
        status, text = self.gateway("GET", base + "api/status", token=token)
        self.assertEqual(status, 200, text)
        self.assertIn("last_activity", json.loads(text))
        status, text = self.gateway("GET", base + "api/status")
        self.assertEqual(status, 401, text)
        status, text = self.gateway("GET", base + "api/status", token="sov_not_a_token")
        self.assertEqual(status, 401, text)
        status, text = self.gateway("GET", base + "api/contents/work/input.txt?content=1",
                                    token=token)
        self.assertEqual(status, 200, text)
        self.assertEqual(json.loads(text)["content"], "from the bucket\n")

        # A kernel, and code run in it over the websocket.
        status, text = self.gateway("POST", base + "api/kernels", token=token,
                                    body={"name": "python3"})
        self.assertEqual(status, 201, text)
        kernel = json.loads(text)["id"]
        ws = WebSocket(self.server.api_url,
                       base + "api/kernels/%s/channels?session_id=%s" % (kernel, uuid.uuid4().hex),
                       {"Authorization": "Bearer " + token})
        self.assertEqual(ws.status, 101, ws.head)
        self.assertTrue(ws.accept_ok, ws.head)
        try:
            reply, stdout = self.execute(
                ws, "import os\n"
                    "with open('/workspace/work/from_kernel.txt', 'w') as f:\n"
                    "    f.write('written by the kernel\\n')\n"
                    "print(sorted(os.listdir('/workspace/work')))\n")
        finally:
            ws.close()
        self.assertEqual(reply["status"], "ok", reply)
        self.assertIn("from_kernel.txt", stdout)
        self.assertIn("input.txt", stdout)
        # Without a token, no websocket either.
        anonymous = WebSocket(self.server.api_url,
                              base + "api/kernels/%s/channels" % kernel, {})
        self.assertEqual(anonymous.status, 401, anonymous.head)
        anonymous.close()

        # Stop: the rw volume is synced back before STOPPED.
        stopped = self.sovai("notebook", "stop", nb_id)
        self.assertIn("STOPPING", stopped.stdout)
        nb = self.wait_notebook(nb_id, "STOPPED")
        self.assertEqual(nb["reason"], "stopped by the user")
        body = self.s3.get_object(Bucket=BUCKET, Key="work/from_kernel.txt")["Body"].read()
        self.assertEqual(body, b"written by the kernel\n")
        status, text = self.gateway("GET", base + "api/status", token=token)
        self.assertEqual(status, 503, text)

        # Its minutes are on the bill, under the notebook's id.
        status, usage = self.server.api("GET", "/v1/billing/usage?group_by=resource")
        self.assertEqual(status, 200, usage)
        self.assertIn(nb_id, [line["resource"] for line in usage["lines"]], usage)

        # Logs and delete.
        logs = self.sovai("notebook", "logs", nb_id)
        self.assertIn("Jupyter", logs.stdout + logs.stderr)
        self.sovai("notebook", "delete", nb_id)
        status, _ = self.server.api("GET", "/v1/notebooks/" + nb_id)
        deadline = time.time() + 60
        while status != 404 and time.time() < deadline:
            time.sleep(0.5)
            status, _ = self.server.api("GET", "/v1/notebooks/" + nb_id)
        self.assertEqual(status, 404)

    def test_vscode_without_code_server_is_refused_saying_how_to_install_it(self):
        status, before = self.server.api("GET", "/v1/notebooks")
        result = self.sovai("notebook", "run", "--editor", "vscode", check=False)
        self.assertNotEqual(result.returncode, 0, result.stdout)
        self.assertIn("tools/install_code_server.sh", result.stderr)
        status, problem = self.server.api("POST", "/v1/notebooks",
                                          {"flavor": "ai1-1-cpu", "editor": "vscode"})
        self.assertEqual(status, 409, problem)
        self.assertEqual(problem["errors"][0]["field"], "editor")
        self.assertIn("code-server", problem["errors"][0]["message"])
        status, after = self.server.api("GET", "/v1/notebooks")
        self.assertEqual(len(after["items"]), len(before["items"]))

    def test_dry_run_prices_an_hour_and_creates_nothing(self):
        status, before = self.server.api("GET", "/v1/notebooks")
        self.assertEqual(status, 200, before)
        result = self.sovai("notebook", "run", "--dry-run", "--cpu", "2", "--volume", VOLUME)
        self.assertIn("Price", result.stdout)
        self.assertIn("3600s", result.stdout)
        status, after = self.server.api("GET", "/v1/notebooks")
        self.assertEqual(status, 200, after)
        self.assertEqual(len(after["items"]), len(before["items"]))


if __name__ == "__main__":
    unittest.main()
