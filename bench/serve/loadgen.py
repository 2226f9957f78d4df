#!/usr/bin/env python3
"""Load generator for OpenAI-compatible servers (ours and llama.cpp's llama-server), standard
library only: C worker threads, each with one keep-alive http.client connection, send N
streaming /v1/completions requests (temperature 0, ignore_eos, stream_options.include_usage) and
time the Server-Sent Events as they arrive.

Metrics follow vLLM's benchmark_serving definitions:
  TTFT  time from sending the request to the first chunk carrying text
  ITL   the gaps between consecutive chunks carrying text (pooled over all requests)
  TPOT  per request, (e2e - TTFT) / (output_tokens - 1), output_tokens from the usage chunk
  E2E   time from sending the request to the end of the stream
  request throughput = completed requests / wall time; output tokens/s = sum of output tokens /
  wall time, the wall time running from the first send to the last completion.
Every aggregate is reported as mean, median and p99 (linear interpolation, as numpy).

Usage as a program: loadgen.py --base-url http://127.0.0.1:8000 --model NAME --concurrency 4
[--requests N] [--max-tokens 128] [--prompt-tokens 200] [--seed S]; prints one JSON object.
run.py imports it."""
import argparse
import http.client
import json
import queue
import random
import statistics
import sys
import threading
import time
import urllib.parse

# Words of everyday English: each is one or two tokens in a byte-level BPE vocabulary, so that
# prompts of W words come to about 1.1 W tokens.
WORDS = (
    "the of and to in is was for on with as by at from that this which be are have has had not "
    "but or an they he she it we you their his her our its one two three four five six seven "
    "eight nine ten first second new old good great small large long short high low early late "
    "water river mountain city village market school library garden window kitchen table chair "
    "letter story book paper music song picture colour light shadow morning evening night winter "
    "summer autumn spring weather rain snow wind cloud storm sun moon star ocean island forest "
    "road bridge train station harbour ship engine machine tool metal stone wood glass bread "
    "apple orange coffee tea milk sugar salt friend family teacher doctor farmer driver worker "
    "student child mother father brother sister people group company country government history "
    "science language number question answer problem reason result method system energy power "
    "change moment minute hour day week month year walk run read write speak listen build open "
    "close carry follow begin finish travel return remember forget explain describe compare "
    "quickly slowly quietly carefully often always never sometimes perhaps together almost"
).split()


def make_prompt(rng, words):
    """A paragraph of `words` random words in sentences of 6-14 words."""
    out, left = [], words
    while left > 0:
        n = min(left, rng.randint(6, 14))
        sentence = [rng.choice(WORDS) for _ in range(n)]
        out.append(" ".join(sentence).capitalize() + ".")
        left -= n
    return " ".join(out)


def make_prompts(count, prompt_tokens, seed):
    """`count` distinct prompts of about `prompt_tokens` tokens; distinct from their first words,
    so that no request shares a cached prefix with another."""
    rng = random.Random(seed)
    words = max(1, int(prompt_tokens / 1.1))
    return [make_prompt(rng, words) for _ in range(count)]


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(values):
    if not values:
        return {"mean": float("nan"), "median": float("nan"), "p99": float("nan")}
    return {"mean": statistics.fmean(values), "median": percentile(values, 50), "p99": percentile(values, 99)}


class Client:
    """One keep-alive connection to base_url; reconnects after an error. Not thread-safe: one per
    thread."""

    def __init__(self, base_url, timeout_s=600.0):
        u = urllib.parse.urlsplit(base_url)
        self.host, self.port = u.hostname, u.port or 80
        self.timeout_s = timeout_s
        self.conn = None

    def _connection(self):
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        return self.conn

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def _send(self, path, data, headers):
        """POSTs and returns (response, send time). A server may close an idle keep-alive
        connection at any moment (llama-server's does after a stream); http.client only finds
        out on the next request, so a request that fails that way on a reused connection is sent
        again, once, on a new one, and timed from the second send."""
        reused = self.conn is not None
        for attempt in range(2):
            conn = self._connection()
            start = time.perf_counter()
            try:
                conn.request("POST", path, body=data, headers=headers)
                return conn.getresponse(), start
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()
                if not reused or attempt == 1:
                    raise

    def post(self, path, body, headers=None):
        """Non-streaming POST. Returns (status, headers dict (lower-case names), body bytes,
        seconds from send to the whole body)."""
        data = json.dumps(body).encode()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        try:
            resp, start = self._send(path, data, h)
            payload = resp.read()
            elapsed = time.perf_counter() - start
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, payload, elapsed
        except (OSError, http.client.HTTPException):
            self.close()
            raise

    def stream_completion(self, body):
        """Streams one /v1/completions request. Returns a dict: ok, error, ttft_s, itl_s (list),
        e2e_s, output_tokens, prompt_tokens, cached_tokens, text."""
        body = dict(body, stream=True, stream_options={"include_usage": True})
        data = json.dumps(body).encode()
        out = {"ok": False, "error": "", "ttft_s": 0.0, "itl_s": [], "e2e_s": 0.0, "output_tokens": 0,
               "prompt_tokens": 0, "cached_tokens": None, "text": ""}
        text = []
        try:
            resp, start = self._send("/v1/completions", data,
                                     {"Content-Type": "application/json", "Accept": "text/event-stream"})
            if resp.status != 200:
                out["error"] = "HTTP %d: %s" % (resp.status, resp.read()[:500].decode("utf-8", "replace"))
                self.close()
                return out
            last = None
            done = False
            while True:
                line = resp.readline()
                if not line:
                    break
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    done = True
                    break
                now = time.perf_counter()
                chunk = json.loads(payload)
                if "error" in chunk:
                    out["error"] = "stream error: %s" % json.dumps(chunk["error"])[:500]
                    break
                choices = chunk.get("choices") or []
                if choices and choices[0].get("text"):
                    if last is None:
                        out["ttft_s"] = now - start
                    else:
                        out["itl_s"].append(now - last)
                    last = now
                    text.append(choices[0]["text"])
                usage = chunk.get("usage")
                if usage:
                    out["output_tokens"] = usage.get("completion_tokens", 0)
                    out["prompt_tokens"] = usage.get("prompt_tokens", 0)
                    details = usage.get("prompt_tokens_details") or {}
                    out["cached_tokens"] = details.get("cached_tokens")
            resp.read()  # the rest of the chunked body, so the connection can be reused
            out["e2e_s"] = time.perf_counter() - start
            out["text"] = "".join(text)
            if not out["error"]:
                if not done:
                    out["error"] = "stream ended without [DONE]"
                elif last is None:
                    out["error"] = "no chunk carried text"
                elif out["output_tokens"] == 0:
                    out["error"] = "no usage chunk"
                else:
                    out["ok"] = True
            return out
        except (OSError, http.client.HTTPException, ValueError) as e:
            self.close()
            out["error"] = "%s: %s" % (type(e).__name__, e)
            return out


def run_load(base_url, model, concurrency, prompts, max_tokens, extra=None):
    """Sends one streaming request per prompt (a string, or a list of token ids) from
    `concurrency` threads. Returns the summary dict (see the module comment; `texts[i]` is the
    output for prompts[i], None if it failed); failed requests are counted and their first
    error kept."""
    work = queue.Queue()
    for item in enumerate(prompts):
        work.put(item)
    results, lock = [], threading.Lock()

    def worker():
        client = Client(base_url)
        try:
            while True:
                try:
                    index, prompt = work.get_nowait()
                except queue.Empty:
                    return
                body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                        "ignore_eos": True}
                body.update(extra or {})
                r = client.stream_completion(body)
                r["index"] = index
                with lock:
                    results.append(r)
        finally:
            client.close()

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    ok = [r for r in results if r["ok"]]
    failed = [r for r in results if not r["ok"]]
    tpot = [(r["e2e_s"] - r["ttft_s"]) / (r["output_tokens"] - 1) for r in ok if r["output_tokens"] > 1]
    itl = [gap for r in ok for gap in r["itl_s"]]
    output_tokens = sum(r["output_tokens"] for r in ok)
    texts = [None] * len(prompts)
    for r in ok:
        texts[r["index"]] = r["text"]
    return {
        "concurrency": concurrency,
        "requests": len(results),
        "completed": len(ok),
        "failed": len(failed),
        "first_error": failed[0]["error"] if failed else "",
        "wall_s": wall,
        "request_throughput": len(ok) / wall,
        "output_tokens_per_s": output_tokens / wall,
        "output_tokens": output_tokens,
        "mean_prompt_tokens": statistics.fmean(r["prompt_tokens"] for r in ok) if ok else 0,
        "mean_output_tokens": output_tokens / len(ok) if ok else 0,
        "ttft_s": summarize([r["ttft_s"] for r in ok]),
        "tpot_s": summarize(tpot),
        "itl_s": summarize(itl),
        "e2e_s": summarize([r["e2e_s"] for r in ok]),
        "texts": texts,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--requests", type=int, default=0, help="default max(8, 4 * concurrency)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    n = a.requests or max(8, 4 * a.concurrency)
    prompts = make_prompts(n, a.prompt_tokens, a.seed)
    summary = run_load(a.base_url, a.model, a.concurrency, prompts, a.max_tokens)
    del summary["texts"]
    json.dump(summary, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
