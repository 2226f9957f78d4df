#!/usr/bin/env python3
"""Serving benchmark: `sovai-engine serve` against llama.cpp's llama-server on the same model
(a Qwen2.5-0.5B-shaped Llama with random weights, Q8_0 on both sides: ours quantizes the model
directory at load, llama-server reads our GGUF export of it), on the same machine, the same
threads, one server at a time. Prints, per concurrency level, output tokens/s of each with the
ratio and vLLM's latency metrics (TTFT, TPOT, ITL); the prefix-cache TTFT and the response-cache
hit latency; the single-stream bound set by memory bandwidth; and each goal with PASS/MISS.
Asserts nothing. Run with /usr/bin/python3 (make bench-serve does); see bench/serve/README.md.

Env: BUILD_DIR (build-bench), THREADS (all cores), CONCURRENCY (1,4,8,16), REQUESTS_PER_STREAM
(1), MIN_REQUESTS (2), PROMPT_TOKENS (200), MAX_TOKENS (128), PREFIX_REPS (5), CACHE_HITS (50),
LLAMA_SERVER (a llama-server binary to use instead of building one; "off" to run ours alone),
SOVAI_BENCH_CACHE (~/.cache/sovai-bench), RESULTS_JSON (a file for every number, optional)."""
import json
import math
import os
import random
import signal
import socket
import statistics
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import loadgen  # noqa: E402

BUILD = os.path.join(REPO, os.environ.get("BUILD_DIR", "build-bench"))
CACHE = os.environ.get("SOVAI_BENCH_CACHE", os.path.expanduser("~/.cache/sovai-bench"))
THREADS = int(os.environ.get("THREADS", os.cpu_count()))
LEVELS = [int(c) for c in os.environ.get("CONCURRENCY", "1,4,8,16").split(",")]
REQUESTS_PER_STREAM = int(os.environ.get("REQUESTS_PER_STREAM", "1"))
MIN_REQUESTS = int(os.environ.get("MIN_REQUESTS", "2"))
PROMPT_TOKENS = int(os.environ.get("PROMPT_TOKENS", "200"))
MAX_TOKENS = int(os.environ.get("MAX_TOKENS", "128"))
PREFIX_TOKENS = 700
SUFFIX_TOKENS = 32
PREFIX_REPS = int(os.environ.get("PREFIX_REPS", "5"))
CACHE_HITS = int(os.environ.get("CACHE_HITS", "50"))
SHARED_N = 8  # choices of the shared-prefill request
# Rounds of ours-then-llama: the machine's speed drifts over minutes (other tenants), and the
# tokens/s ratio of one pair of runs moves with it; ROUNDS > 1 quotes the median ratio per level.
ROUNDS = max(1, int(os.environ.get("ROUNDS", "1")))
MODEL_NAME = "bench"
LLAMA_SLOTS = 16
# llama-server splits its context evenly over its slots; each slot must hold the prefix-cache
# test's prompt (700 + 32 tokens plus the output) as well as a load request (200 + 128).
LLAMA_CONTEXT = LLAMA_SLOTS * 1024
STARTUP_TIMEOUT_S = 900

# Goals from the issue.
GOAL_SINGLE_RATIO = 1.0
GOAL_FOUR_RATIO = 1.5
GOAL_PREFIX_TTFT_MS = 90.0
GOAL_HIT_P50_MS = 1.0


def log(msg):
    print("bench/serve: " + msg, file=sys.stderr, flush=True)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


# ---------------------------------------------------------------------------------------------
# What the benchmark needs: the engine, the model, its GGUF, llama-server.


def build_engine():
    env = dict(os.environ, CCACHE_BASEDIR=REPO, CCACHE_NOHASHDIR="1")
    if not os.path.exists(os.path.join(BUILD, "build.ninja")):
        log("configuring %s with the default preset" % BUILD)
        run(["cmake", "--preset", "default", "-B", BUILD], cwd=REPO, env=env, stdout=subprocess.DEVNULL)
    log("building sovai-engine and kernels_bench in %s" % BUILD)
    run(["cmake", "--build", BUILD, "--target", "sovai-engine", "kernels_bench"], cwd=REPO, env=env,
        stdout=subprocess.DEVNULL)
    engine = os.path.join(BUILD, "src", "engine", "sovai-engine")
    if not os.access(engine, os.X_OK):
        sys.exit("bench/serve: the build produced no %s" % engine)
    return engine


def measure_peak_gflops():
    """GFLOP/s of a 2048^3 OpenBLAS sgemm on THREADS threads, the best of 5 runs (kernels_bench
    --peak): what this machine computes, for the prefix-cache TTFT's compute bound."""
    out = run([os.path.join(BUILD, "src", "kernels", "kernels_bench"), "--peak", "--threads=%d" % THREADS],
              capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def prefill_gflop(gguf, model, cached, total):
    """GFLOP of computing positions cached..total-1 of a prompt whose first `cached` positions are in
    the KV cache, up to the first token: 2 per weight of the layers' matrices per token, 4 x
    head_dim per query head and visible position for attention, and the output matrix once (only
    the last position's logits are needed)."""
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    layer_weights = 0
    for name, (_, dims, _) in gguf_tensors(gguf).items():
        if name.startswith("blk.") and len(dims) == 2:
            layer_weights += dims[0] * dims[1]
    tokens = total - cached
    attention = 4 * cfg["head_dim"] * cfg["num_attention_heads"] * cfg["num_hidden_layers"] * sum(
        p + 1 for p in range(cached, total))
    head = 2 * cfg["hidden_size"] * cfg["vocab_size"]
    return (2 * tokens * layer_weights + attention + head) / 1e9


def make_model():
    out = run(["/usr/bin/python3", os.path.join(HERE, "make_model.py")], capture_output=True, text=True,
              env=dict(os.environ, SOVAI_BENCH_CACHE=CACHE))
    return out.stdout.strip().splitlines()[-1]


def export_gguf(engine, model):
    """Our Q8_0 GGUF export of the model, redone when the model is newer than it."""
    path = model.rstrip("/") + "-q8_0.gguf"
    weights = os.path.join(model, "model.safetensors")
    if os.path.exists(path) and os.path.getmtime(path) >= os.path.getmtime(weights):
        return path
    log("exporting %s" % path)
    tmp = path + ".tmp.gguf"
    run([engine, "convert", "--model", model, "--output", tmp, "--type", "q8_0"], stdout=subprocess.DEVNULL)
    os.replace(tmp, path)
    return path


def llama_server():
    """(path, None), or (None, why it is not available)."""
    chosen = os.environ.get("LLAMA_SERVER", "")
    if chosen == "off":
        return None, "LLAMA_SERVER=off"
    if chosen:
        if not os.access(chosen, os.X_OK):
            return None, "LLAMA_SERVER=%s is not executable" % chosen
        return chosen, None
    log("building llama-server from node-llama-cpp's llama.cpp (cached after the first run)")
    out = subprocess.run(["bash", os.path.join(HERE, "build_llama_server.sh")], capture_output=False,
                         stdout=subprocess.PIPE, text=True, env=dict(os.environ, SOVAI_BENCH_CACHE=CACHE))
    line = (out.stdout.strip().splitlines() or ["no output"])[-1]
    return (line, None) if out.returncode == 0 else (None, line)


# ---------------------------------------------------------------------------------------------
# The physical bound: bytes a decode step reads over the machine's read bandwidth.

GGML_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
              6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 30: ("BF16", 1, 2)}
GGUF_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def gguf_tensors(path):
    """{name: (type name, dims, bytes)} from a GGUF file's tensor infos."""
    with open(path, "rb") as f:
        def read(fmt):
            size = struct.calcsize("<" + fmt)
            return struct.unpack("<" + fmt, f.read(size))

        def skip_string():
            (n,) = read("Q")
            f.seek(n, 1)

        def skip_value(t):
            if t == 8:
                skip_string()
            elif t == 9:
                elem, n = read("IQ")
                if elem == 8:
                    for _ in range(n):
                        skip_string()
                else:
                    f.seek(n * struct.calcsize("<" + GGUF_SCALAR[elem]), 1)
            else:
                f.seek(struct.calcsize("<" + GGUF_SCALAR[t]), 1)

        if f.read(4) != b"GGUF":
            raise ValueError("%s is not a GGUF file" % path)
        _, n_tensors, n_kv = read("IQQ")
        for _ in range(n_kv):
            skip_string()
            (t,) = read("I")
            skip_value(t)
        out = {}
        for _ in range(n_tensors):
            (n,) = read("Q")
            name = f.read(n).decode()
            (n_dims,) = read("I")
            dims = read("Q" * n_dims)
            ggml_type, _ = read("IQ")
            type_name, block, size = GGML_TYPES[ggml_type]
            elements = 1
            for d in dims:
                elements *= d
            out[name] = (type_name, dims, elements // block * size)
        return out


def decode_bytes_per_token(gguf):
    """Weight bytes one decode step reads: every tensor once, except that the token embedding
    is read one row per token when a separate output matrix exists (tied, it is the output
    matrix and read whole). The KV cache is left out: it depends on the context, and is small
    next to the weights here (2 KV heads)."""
    tensors = gguf_tensors(gguf)
    total = sum(b for _, _, b in tensors.values())
    if "output.weight" in tensors and "token_embd.weight" in tensors:
        _, dims, b = tensors["token_embd.weight"]
        total -= b - b // dims[1]
    types = {}
    for t, _, b in tensors.values():
        types[t] = types.get(t, 0) + b
    return total, types


def measure_bandwidth():
    """Median GB/s of an all-threads streaming read of 1 GiB."""
    exe = os.path.join(CACHE, "membw")
    src = os.path.join(HERE, "membw.c")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        os.makedirs(CACHE, exist_ok=True)
        run(["cc", "-O3", "-march=native", "-fopenmp", src, "-o", exe])
    out = run([exe, "1024", "7"], capture_output=True, text=True,
              env=dict(os.environ, OMP_NUM_THREADS=str(THREADS), OMP_PROC_BIND="spread"))
    return float(out.stdout.strip())


# ---------------------------------------------------------------------------------------------
# Prompts: windows of one tokenized text, so that both servers get the same token ids, every
# prompt is exactly PROMPT_TOKENS long, and no two prompts share a prefix.


def tokenize(engine, model, text):
    out = run([engine, "tokenize", "--tokenizer", os.path.join(model, "tokenizer.json")], input=text,
              capture_output=True, text=True)
    return [int(t) for t in json.loads(out.stdout)]


def make_prompt_sets(engine, model):
    n = {c: max(MIN_REQUESTS, REQUESTS_PER_STREAM * c) for c in LEVELS}
    needed = ((sum(n.values()) + 3) * PROMPT_TOKENS + PREFIX_REPS * (PREFIX_TOKENS + SUFFIX_TOKENS)
              + 64)
    rng = random.Random(0)
    ids = []
    while len(ids) < needed:
        ids += tokenize(engine, model, "\n\n".join(loadgen.make_prompt(rng, 200) for _ in range(100)))
    pos = 0

    def take(count):
        nonlocal pos
        pos += count
        return ids[pos - count:pos]

    warmup = take(PROMPT_TOKENS)
    levels = {c: [take(PROMPT_TOKENS) for _ in range(n[c])] for c in LEVELS}
    prefix = (take(PREFIX_TOKENS), [take(SUFFIX_TOKENS) for _ in range(PREFIX_REPS)])
    # Ours alone: the response cache's prompt, and two for the shared prefill of n choices.
    ours_only = {"response_cache": take(64), "shared": (take(PROMPT_TOKENS), take(PROMPT_TOKENS))}
    return warmup, levels, prefix, ours_only


# ---------------------------------------------------------------------------------------------
# Servers, one at a time.


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, name, cmd, port, log_path):
        self.name, self.cmd, self.port, self.log_path = name, cmd, port, log_path
        self.base_url = "http://127.0.0.1:%d" % port
        self.proc = None

    def __enter__(self):
        log("starting %s: %s" % (self.name, " ".join(self.cmd)))
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        start = time.monotonic()
        while time.monotonic() - start < STARTUP_TIMEOUT_S:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %d while starting; log: %s" % (
                    self.name, self.proc.returncode, self.log_path))
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=5) as r:
                    if r.status == 200:
                        log("%s ready in %.1f s" % (self.name, time.monotonic() - start))
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise RuntimeError("%s not ready after %d s; log: %s" % (self.name, STARTUP_TIMEOUT_S, self.log_path))

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def prefix_cache_ttft(base_url, prefix, suffixes):
    """A 700-token prompt once, then one request per suffix that starts with the same 700 tokens
    and goes on with its own 32. Returns the TTFT of the first (cold) and of the others (cached)."""
    client = loadgen.Client(base_url)
    out = {"cold_ttft_s": [], "cached_ttft_s": [], "cached_tokens": [], "errors": []}
    body = {"model": MODEL_NAME, "max_tokens": 4, "temperature": 0, "ignore_eos": True}
    first = client.stream_completion(dict(body, prompt=prefix))
    if first["ok"]:
        out["cold_ttft_s"].append(first["ttft_s"])
        for suffix in suffixes:
            r = client.stream_completion(dict(body, prompt=prefix + suffix))
            if r["ok"]:
                out["cached_ttft_s"].append(r["ttft_s"])
                out["cached_tokens"].append(r["cached_tokens"])
            else:
                out["errors"].append(r["error"])
    else:
        out["errors"].append(first["error"])
    client.close()
    return out


def response_cache_hits(base_url, prompt):
    """The same greedy non-streamed request, once to fill the cache, then CACHE_HITS times.
    Returns the client-side latencies of the answers marked X-Sovai-Cache: hit."""
    client = loadgen.Client(base_url)
    body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 16, "temperature": 0}
    status, headers, first, _ = client.post("/v1/completions", body)
    out = {"first": headers.get("x-sovai-cache", "(no header)"), "hit_s": [], "other": {}, "errors": []}
    if status != 200:
        out["errors"].append("HTTP %d: %s" % (status, first[:300]))
    for _ in range(CACHE_HITS):
        status, headers, payload, elapsed = client.post("/v1/completions", body)
        state = headers.get("x-sovai-cache", "(no header)")
        if status == 200 and state == "hit":
            out["hit_s"].append(elapsed)
            if payload.strip() != first.strip():  # a miss may lead with heartbeat spaces
                out["errors"].append("a hit differs from the first answer")
        else:
            out["other"][state] = out["other"].get(state, 0) + 1
    client.close()
    return out


def shared_prefill(base_url, prompt_one, prompt_n):
    """A sampled completion of one prompt with n = 1, then of another with n = SHARED_N, 4 tokens
    each, not streamed (sampled without a seed: never from the response cache). Computing the
    prompt once per choice would make the second about SHARED_N times the first; sharing it, about
    the first plus the extra choices' decoding."""
    client = loadgen.Client(base_url)
    out = {"n1_s": None, "n_s": None, "errors": []}
    for key, prompt, n in (("n1_s", prompt_one, 1), ("n_s", prompt_n, SHARED_N)):
        body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 4, "temperature": 1.0,
                "ignore_eos": True, "n": n}
        status, _, payload, elapsed = client.post("/v1/completions", body)
        if status == 200:
            out[key] = elapsed
        else:
            out["errors"].append("n=%d: HTTP %d: %s" % (n, status, payload[:200]))
    client.close()
    return out


def bench_server(server, warmup, levels, prefix_sets, ours_only):
    results = {"levels": {}}
    with server:
        w = loadgen.run_load(server.base_url, MODEL_NAME, 1, [warmup], 8)
        if w["failed"]:
            raise RuntimeError("%s: warm-up request failed: %s" % (server.name, w["first_error"]))
        for c in LEVELS:
            start = time.monotonic()
            load_before = os.getloadavg()[0]
            r = loadgen.run_load(server.base_url, MODEL_NAME, c, levels[c], MAX_TOKENS)
            # The 1-minute load average before and after: this run accounts for about THREADS + 1
            # (server and client); more means other work shared the cores.
            r["loadavg_1m"] = (load_before, os.getloadavg()[0])
            results["levels"][c] = r
            log("%s c=%d: %d/%d ok, %.1f tok/s, TTFT p50 %.0f ms, TPOT p50 %.0f ms (%.0f s)%s" % (
                server.name, c, r["completed"], r["requests"], r["output_tokens_per_s"],
                1e3 * r["ttft_s"]["median"], 1e3 * r["tpot_s"]["median"], time.monotonic() - start,
                "; first error: " + r["first_error"] if r["failed"] else ""))
        results["prefix"] = prefix_cache_ttft(server.base_url, *prefix_sets)
        if ours_only is not None:
            results["response_cache"] = response_cache_hits(server.base_url, ours_only["response_cache"])
            results["shared_prefill"] = shared_prefill(server.base_url, *ours_only["shared"])
    return results


# ---------------------------------------------------------------------------------------------
# Report.


def ms(x):
    return "%.1f" % (1e3 * x) if x == x else "-"


def median_or_nan(values):
    return statistics.median(values) if values else float("nan")


def goal_line(name, measured, target_text, passed):
    print("| %s | %s | %s | %s |" % (name, measured, target_text, "PASS" if passed else "MISS"))


def ratio(ours, theirs):
    """ours / theirs, or NaN when theirs is missing or zero (every request of the level failed)."""
    return ours / theirs if theirs else float("nan")


def round_ratios(rounds):
    """{concurrency: [ours / llama tokens/s, one per round with both]}."""
    out = {}
    for ours, llama in rounds:
        if not llama:
            continue
        for c in LEVELS:
            o, l = ours["levels"][c], llama["levels"][c]
            out.setdefault(c, []).append(ratio(o["output_tokens_per_s"], l["output_tokens_per_s"]))
    return out


def report(ours, llama, llama_missing, bound, peak, info, rounds):
    def lvl(res, c):
        return res["levels"].get(c) if res else None

    def pair(o, l, key, q="median"):
        return "%s / %s" % (ms(o[key][q]), ms(l[key][q]) if l else "-")

    def tok_s(r):
        return r["output_tokens_per_s"] if r else float("nan")

    print()
    print("Serving benchmark: %s" % info["model_line"])
    print("%d threads on %d cores; prompts %d tokens (the same token ids for both), max_tokens %d, "
          "greedy, ignore_eos, streamed; requests per level max(%d, %d x concurrency)" % (
              THREADS, os.cpu_count(), PROMPT_TOKENS, MAX_TOKENS, MIN_REQUESTS, REQUESTS_PER_STREAM))
    print("ours: sovai-engine serve --dtype q8_0 --threads %d; llama: %s" % (
        THREADS, info["llama_line"] if llama else "not available (%s)" % llama_missing))
    print()
    print("| concurrency | ours tok/s | llama tok/s | ratio | ours req/s | llama req/s "
          "| TTFT p50 ms ours / llama | TPOT p50 ms ours / llama | ITL p50 ms ours / llama |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in LEVELS:
        o, l = lvl(ours, c), lvl(llama, c)
        print("| %d | %.1f | %s | %s | %.3f | %s | %s | %s | %s |" % (
            c, tok_s(o), "%.1f" % tok_s(l) if l else "-", "%.2fx" % ratio(tok_s(o), tok_s(l)) if l else "-",
            o["request_throughput"], "%.3f" % l["request_throughput"] if l else "-",
            pair(o, l, "ttft_s"), pair(o, l, "tpot_s"), pair(o, l, "itl_s")))
    print()
    print("| concurrency | TTFT p99 ms ours / llama | TPOT p99 | ITL p99 | E2E p50 | failed requests |")
    print("|---|---|---|---|---|---|")
    for c in LEVELS:
        o, l = lvl(ours, c), lvl(llama, c)
        print("| %d | %s | %s | %s | %s | %d / %s |" % (
            c, pair(o, l, "ttft_s", "p99"), pair(o, l, "tpot_s", "p99"), pair(o, l, "itl_s", "p99"),
            pair(o, l, "e2e_s"), o["failed"], l["failed"] if l else "-"))
    for name, res in (("ours", ours), ("llama", llama)):
        if not res:
            continue
        for c in LEVELS:
            r = res["levels"][c]
            if r["failed"]:
                print("%s c=%d: %d failed (not counted in tok/s; vLLM's rule); first error: %s" % (
                    name, c, r["failed"], r["first_error"]))
            if r["completed"] and r["mean_output_tokens"] != MAX_TOKENS:
                print("%s c=%d: mean output %.1f tokens, not %d" % (
                    name, c, r["mean_output_tokens"], MAX_TOKENS))
        print("%s: mean prompt tokens (usage) %.1f; machine load average (1 min) before/after each "
              "level: %s" % (
            name, statistics.fmean(res["levels"][c]["mean_prompt_tokens"] for c in LEVELS),
            ", ".join("c=%d %.1f/%.1f" % ((c,) + res["levels"][c]["loadavg_1m"]) for c in LEVELS)))
    if llama:
        pairs = [(a, b) for c in LEVELS
                 for a, b in zip(ours["levels"][c]["texts"], llama["levels"][c]["texts"])
                 if a is not None and b is not None]
        print("greedy outputs identical to llama-server's: %d of %d (informational: Q8_0 rounding and "
              "summation order differ, and random weights give near-flat logits)" % (
                  sum(a == b for a, b in pairs), len(pairs)))

    print()
    weight_bytes, bandwidth, types = bound
    limit = bandwidth * 1e9 / weight_bytes
    print("Memory-bandwidth bound: a decode step reads %.1f MB of weights (%s; token_embd is also the output "
          "matrix); measured read bandwidth %.2f GB/s (%d threads, 1 GiB, median of 7) -> single stream "
          "<= %.1f tok/s" % (weight_bytes / 1e6, ", ".join("%s %.1f MB" % (t, b / 1e6) for t, b in
                                                           sorted(types.items())), bandwidth, THREADS, limit))
    if 1 in LEVELS:
        for name, res in (("ours", ours), ("llama", llama)):
            r = lvl(res, 1)
            if r:
                decode = 1 / r["tpot_s"]["median"]
                print("  %s at concurrency 1: %.1f tok/s = %.0f%% of the bound; decode alone (1 / TPOT p50) "
                      "%.1f tok/s = %.0f%%" % (name, tok_s(r), 100 * tok_s(r) / limit, decode,
                                               100 * decode / limit))

    print()
    for name, res in (("ours", ours), ("llama", llama)):
        if not res:
            continue
        p = res["prefix"]
        print("Prefix cache, %s: a %d-token prompt (TTFT %s ms), then %d requests of the same %d tokens + %d "
              "others: TTFT p50 %s ms (cached_tokens %s)%s" % (
                  name, PREFIX_TOKENS, ms(median_or_nan(p["cold_ttft_s"])), PREFIX_REPS, PREFIX_TOKENS,
                  SUFFIX_TOKENS, ms(median_or_nan(p["cached_ttft_s"])), p["cached_tokens"],
                  "; errors: %s" % p["errors"][:2] if p["errors"] else ""))
    rc = ours.get("response_cache")
    if rc:
        print("Response cache, ours: first answer %s; %d hits of %d repeats, p50 %s ms, p99 %s ms%s%s" % (
            rc["first"], len(rc["hit_s"]), CACHE_HITS, ms(median_or_nan(rc["hit_s"])),
            ms(loadgen.percentile(rc["hit_s"], 99)), "; not hits: %s" % rc["other"] if rc["other"] else "",
            "; errors: %s" % rc["errors"][:2] if rc["errors"] else ""))
    sp = ours.get("shared_prefill")
    if sp:
        if sp["n1_s"] and sp["n_s"]:
            print("Shared prefill, ours: a %d-token prompt, 4 sampled tokens: n=1 %s ms, n=%d %s ms (%.2fx; "
                  "computing the prompt once per choice would be about %dx)" % (
                      PROMPT_TOKENS, ms(sp["n1_s"]), SHARED_N, ms(sp["n_s"]), sp["n_s"] / sp["n1_s"],
                      SHARED_N))
        else:
            print("Shared prefill, ours: failed: %s" % sp["errors"][:2])

    cached = median_or_nan(ours["prefix"]["cached_tokens"])
    if peak and not math.isnan(cached):
        total = PREFIX_TOKENS + SUFFIX_TOKENS
        gflop = prefill_gflop(info["gguf"], info["model"], int(cached), total)
        t = median_or_nan(ours["prefix"]["cached_ttft_s"])
        print("Compute bound, prefix cache: the %d uncached positions (%d - %d cached) take %.1f GFLOP up to the first token; at the sgemm peak measured in "
              "this run (%.1f GFLOP/s, 2048^3 OpenBLAS, %d threads, best of 5) that is >= %.0f ms; ours computes "
              "at %.0f%% of that peak (TTFT p50 %s ms)" % (
                  total - int(cached), total, int(cached), gflop, peak, THREADS, gflop / peak * 1e3,
                  100 * gflop / peak * 1e3 / (t * 1e3), ms(t)))

    ratios = round_ratios(rounds)
    if len(rounds) > 1 and ratios:
        print()
        print("Rounds (ours then llama, %d times; the tables above are the last round's): tokens/s "
              "ratio per level" % len(rounds))
        print("| concurrency | ratio per round | median |")
        print("|---|---|---|")
        for c in LEVELS:
            print("| %d | %s | %.2fx |" % (c, ", ".join("%.2fx" % r for r in ratios[c]),
                                          statistics.median(ratios[c])))

    print()
    print("| goal | measured | target | result |")
    print("|---|---|---|---|")
    for c, target, label in ((1, GOAL_SINGLE_RATIO, "single stream tok/s vs llama-server"),
                             (4, GOAL_FOUR_RATIO, "4 streams aggregate tok/s vs llama-server")):
        if c not in LEVELS:
            print("| %s | not measured (concurrency %d not run) | >= %.1fx | - |" % (label, c, target))
        elif not llama:
            print("| %s | not available (%s) | >= %.1fx | - |" % (label, llama_missing, target))
        else:
            r = statistics.median(ratios[c])
            measured = "%.2fx" % r + (" (median of %d rounds)" % len(ratios[c]) if len(ratios[c]) > 1 else "")
            goal_line(label, measured, ">= %.1fx" % target, r >= target)
    t = median_or_nan(ours["prefix"]["cached_ttft_s"])
    goal_line("TTFT, request sharing a cached 700-token prefix (p50)", "%s ms" % ms(t),
              "<= %.0f ms" % GOAL_PREFIX_TTFT_MS, t * 1e3 <= GOAL_PREFIX_TTFT_MS)
    h = median_or_nan(rc["hit_s"]) if rc else float("nan")
    goal_line("response-cache hit latency p50", "%s ms" % ms(h), "< %.0f ms" % GOAL_HIT_P50_MS,
              h * 1e3 < GOAL_HIT_P50_MS)


def main():
    start = time.monotonic()
    engine = build_engine()
    model = make_model()
    gguf = export_gguf(engine, model)
    llama, llama_missing = llama_server()
    if llama_missing:
        log("llama-server not available: %s" % llama_missing)
    decode_bytes, types = decode_bytes_per_token(gguf)
    bandwidth = measure_bandwidth()
    peak = measure_peak_gflops()
    warmup, levels, prefix_sets, ours_only = make_prompt_sets(engine, model)
    log("ready after %.0f s; running the servers one at a time" % (time.monotonic() - start))

    work = os.path.join(CACHE, "logs")
    os.makedirs(work, exist_ok=True)
    port = free_port()
    ours_cmd = [engine, "serve", "--model", model, "--served-model-name", MODEL_NAME,
                "--listen", "127.0.0.1:%d" % port, "--threads", str(THREADS), "--dtype", "q8_0"]
    rounds = []
    llama_line = ""
    for round_no in range(ROUNDS):
        if ROUNDS > 1:
            log("round %d of %d" % (round_no + 1, ROUNDS))
        try:
            ours = bench_server(Server("ours", ours_cmd, port, os.path.join(work, "ours.log")),
                                warmup, levels, prefix_sets, ours_only)
        except RuntimeError as e:
            sys.exit("bench/serve: %s" % e)
        llama_res = None
        if llama and not llama_missing:
            llama_port = free_port()
            args = ["-t", str(THREADS), "-tb", str(THREADS), "-np", str(LLAMA_SLOTS), "-c", str(LLAMA_CONTEXT),
                    "--cont-batching", "--no-mmap"]
            llama_cmd = [llama, "-m", gguf, "--host", "127.0.0.1", "--port", str(llama_port),
                         "-a", MODEL_NAME] + args
            origin = ("node-llama-cpp@%s's llama.cpp" % os.environ.get("NODE_LLAMA_CPP_VERSION", "3.21.1")
                      if not os.environ.get("LLAMA_SERVER") else llama)
            llama_line = "llama-server (%s) %s" % (origin, " ".join(args))
            try:
                llama_res = bench_server(Server("llama", llama_cmd, llama_port, os.path.join(work, "llama.log")),
                                         warmup, levels, prefix_sets, None)
            except RuntimeError as e:
                llama_missing = str(e)
                log("llama-server failed: %s" % e)
        rounds.append((ours, llama_res))
    info = {"model_line": "Llama shaped like Qwen2.5-0.5B (24 x 896, 14/2 heads, MLP 4864, vocab 151936, "
                          "tied), random bf16 weights served as Q8_0 (%s)" % os.path.basename(gguf),
            "llama_line": llama_line, "gguf": gguf, "model": model}
    report(ours, llama_res, llama_missing, (decode_bytes, bandwidth, types), peak, info, rounds)
    log("done in %.0f s; server logs in %s" % (time.monotonic() - start, work))
    if os.environ.get("RESULTS_JSON"):
        with open(os.environ["RESULTS_JSON"], "w") as f:
            json.dump({"ours": ours, "llama": llama_res, "llama_missing": llama_missing,
                       "rounds": [{"ours": o, "llama": l} for o, l in rounds],
                       "decode_bytes": decode_bytes, "bandwidth_gbps": bandwidth,
                       "sgemm_peak_gflops": peak}, f, indent=1)


if __name__ == "__main__":
    main()
