"""`sovai-engine serve` against the official `openai` npm client (pinned by package-lock.json):
models, chat and completions (plain, streamed, stop, n, logprobs, json_schema), OpenAI's errors,
32 concurrent requests equal to sequential ones, adapters mixed in one batch, clients that go
away, the response cache and a full queue. serve_openai_client.mjs makes the requests and checks
each answer; this test starts the servers, runs each scenario and asserts the checks it reports,
then reads /metrics to see that the KV cache was freed."""

import json
import os
import random
import re
import shutil
import struct
import subprocess
import tempfile
import time
import unittest
import urllib.request

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve_openai_client.mjs")
MODEL_DIR = os.path.join(REPO_ROOT, "models", "sovai-tiny-llama")
MODEL = "sovai-tiny-llama"


def write_random_adapter(directory, seed, rank=8, scale=0.5):
    """A PEFT LoRA adapter for the shipped model with random A and B (B is not zero, so the
    adapter changes the model's answers)."""
    with open(os.path.join(MODEL_DIR, "config.json")) as f:
        config = json.load(f)
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    kv = config["num_key_value_heads"] * config["head_dim"]
    q = config["num_attention_heads"] * config["head_dim"]
    rng = random.Random(seed)
    tensors = {}
    for layer in range(layers):
        for module, (out_features, in_features) in {"q_proj": (q, hidden),
                                                    "v_proj": (kv, hidden)}.items():
            prefix = "base_model.model.model.layers.%d.self_attn.%s" % (layer, module)
            tensors[prefix + ".lora_A.weight"] = (
                [rank, in_features], [rng.gauss(0, scale) for _ in range(rank * in_features)])
            tensors[prefix + ".lora_B.weight"] = (
                [out_features, rank], [rng.gauss(0, scale) for _ in range(out_features * rank)])
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        shape, values = tensors[name]
        blob = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    header_bytes = json.dumps(header).encode()
    header_bytes += b" " * ((8 - len(header_bytes) % 8) % 8)
    os.makedirs(directory)
    with open(os.path.join(directory, "adapter_model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)) + header_bytes + b"".join(blobs))
    with open(os.path.join(directory, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank,
                   "lora_alpha": 2 * rank, "target_modules": ["q_proj", "v_proj"],
                   "base_model_name_or_path": MODEL}, f)


class ServeProcess:
    def __init__(self, *extra, model_dir=MODEL_DIR):
        self.engine = os.environ["SOVAI_ENGINE"]
        self.proc = subprocess.Popen(
            [self.engine, "serve", "--model", model_dir, "--listen", "127.0.0.1:0",
             "--threads", "2", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()
        match = re.search(r"listening on port (\d+)", line)
        if not match:
            self.proc.kill()
            raise AssertionError("no port in: " + line + self.proc.stderr.read())
        self.url = "http://127.0.0.1:%s" % match.group(1)
        deadline = time.time() + 120
        while True:
            status, _ = self.get("/health")
            if status == 200:
                break
            if time.time() > deadline or self.proc.poll() is not None:
                raise AssertionError("server did not get ready: %s" % self.proc.stderr.read())
            time.sleep(0.1)

    def get(self, path):
        try:
            with urllib.request.urlopen(self.url + path, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def metrics(self):
        status, text = self.get("/metrics")
        assert status == 200, status
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        self.proc.stderr.close()


def run_client(server, scenario, *names):
    result = subprocess.run(["node", SCRIPT, server.url, scenario, MODEL, *names],
                            capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    if result.returncode != 0:
        raise AssertionError("scenario %s failed:\n%s\n%s" % (scenario, result.stdout,
                                                              result.stderr))
    return [line[3:] for line in result.stdout.splitlines() if line.startswith("ok ")]


class ServeOpenAiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sovai-serve-")
        write_random_adapter(os.path.join(cls.tmp, "a1"), seed=1)
        write_random_adapter(os.path.join(cls.tmp, "a2"), seed=2)
        # Heartbeats every 100 ms: the disconnect test's non-streamed clients leave mid-answer.
        cls.server = ServeProcess("--lora", "a1=" + os.path.join(cls.tmp, "a1"),
                                  "--lora", "a2=" + os.path.join(cls.tmp, "a2"),
                                  "--heartbeat-ms", "100")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def wait_idle(self):
        """Until no sequence runs or waits, then the metrics."""
        deadline = time.time() + 60
        while True:
            m = self.server.metrics()
            if m["sovai_serve_requests_running"] == 0 and m["sovai_serve_requests_waiting"] == 0:
                return m
            self.assertLess(time.time(), deadline, m)
            time.sleep(0.1)

    def test_basics(self):
        checks = run_client(self.server, "basics", "a1", "a2")
        for check in ["models list has adapters with parent", "chat completion with usage",
                      "prefix cache reports cached_tokens",
                      "streamed chat equals the non-streamed answer",
                      "completions plain and streamed", "completions echo",
                      "batched completions", "tokenize and detokenize", "stop sequence",
                      "n with seed is reproducible", "logprobs", "logit_bias forces a token",
                      "min_p and repetition_penalty accepted", "min_tokens holds the end back",
                      "json_schema output validates"]:
            self.assertIn(check, checks)

    def test_errors(self):
        checks = run_client(self.server, "errors")
        self.assertEqual(len(checks), 10, checks)
        for check in ("malformed JSON is 400 saying where", "a body over 16 MiB is an OpenAI 413",
                      "an unknown route is an OpenAI 404"):
            self.assertIn(check, checks)

    def test_concurrency_and_mixed_adapters(self):
        checks = run_client(self.server, "concurrency", "a1", "a2")
        self.assertIn("32 concurrent greedy requests equal the sequential ones", checks)
        self.assertIn("mixed adapters in one batch", checks)

    def test_disconnects_free_the_kv_cache(self):
        checks = run_client(self.server, "disconnects")
        self.assertIn("server still answers", checks)
        m = self.wait_idle()
        self.assertEqual(m["sovai_serve_kv_cache_usage_ratio"], 0, m)
        self.assertGreaterEqual(m["sovai_serve_request_aborted_total"], 10, m)
        self.assertEqual(self.server.get("/health")[0], 200)

    def test_adapters_load_and_unload_at_run_time(self):
        # a2's directory loaded again under another name must answer exactly like a2.
        checks = run_client(self.server, "adapters", os.path.join(self.tmp, "a2"), "a2")
        self.assertIn("an adapter loaded at run time answers like the same adapter loaded at start",
                      checks)
        self.assertIn("an unloaded adapter is gone", checks)

    def test_response_cache(self):
        checks = run_client(self.server, "cache")
        self.assertIn("response cache hit returns the identical body", checks)
        self.assertIn("cache-control no-store bypasses the cache", checks)
        self.assertIn("cache-control no-cache refreshes the cached answer", checks)
        self.assertIn("sampled requests never come from the cache", checks)
        self.assertGreaterEqual(self.server.metrics()["sovai_serve_response_cache_hits_total"], 1)

    def test_a_heartbeat_out_of_range_is_a_usage_error(self):
        for value in ("5", "60001"):
            r = subprocess.run([os.environ["SOVAI_ENGINE"], "serve", "--model", MODEL_DIR,
                                "--heartbeat-ms", value], capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("--heartbeat-ms must be from 10 to 60000", r.stderr)

    def test_queue_full_is_429(self):
        small = ServeProcess("--max-num-seqs", "1", "--max-waiting", "1",
                             "--max-num-batched-tokens", "64")
        try:
            checks = run_client(small, "queue_full")
            self.assertIn("queue full is 429 with Retry-After", checks)
            self.assertGreater(small.metrics()["sovai_serve_requests_rejected_total"], 0)
        finally:
            small.stop()

    def test_a_context_longer_than_the_cache_is_cut_unless_asked_for(self):
        # The tiny model's 1,024 positions need 4 MiB of f32 KV cache; 1 MiB holds 256 tokens.
        small = ServeProcess("--kv-cache-mb", "1")
        try:
            status, body = small.get("/v1/models")
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["data"][0]["max_model_len"], 256)
        finally:
            small.stop()
        refused = subprocess.run(
            [os.environ["SOVAI_ENGINE"], "serve", "--model", MODEL_DIR, "--listen", "127.0.0.1:0",
             "--kv-cache-mb", "1", "--max-model-len", "1024"],
            capture_output=True, text=True, timeout=120)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("a KV cache of 1 MiB holds 256 tokens", refused.stderr)


if __name__ == "__main__":
    unittest.main()
