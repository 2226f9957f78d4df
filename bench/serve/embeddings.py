#!/usr/bin/env python3
"""Embedding throughput: `sovai-engine serve --task embed` against llama.cpp's
`llama-server --embedding` on the same model (ours reads the model directory and quantizes it to
Q8_0 at load, llama-server reads our Q8_0 GGUF export of it), the same threads, one server at a
time, in one run. Prints prompt tokens/s at batch 1 (one input per request, requests one after
another) and batch 32 (32 inputs per request), each side's, and ours / llama's; the goal is
>= 1.0x. Asserts nothing. See bench/serve/README.md ("Embeddings").

Env: EMBED_MODEL (a model directory; default the serving benchmark's Qwen2.5-0.5B-shaped model,
laid out for last-token pooling), BUILD_DIR, THREADS, LLAMA_SERVER (as run.py), EMBED_TOKENS (200
per input), EMBED_REQUESTS (8 requests at batch 1, and 2 at batch 32)."""
import json
import os
import random
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import loadgen  # noqa: E402
import run as bench  # noqa: E402

TOKENS = int(os.environ.get("EMBED_TOKENS", "200"))
REQUESTS = int(os.environ.get("EMBED_REQUESTS", "8"))
BATCHES = (1, 32)
MODULES = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
           {"idx": 1, "name": "1", "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling"},
           {"idx": 2, "name": "2", "path": "2_Normalize",
            "type": "sentence_transformers.models.Normalize"}]


def embedding_layout(model):
    """The model directory as a last-token embedding model (Qwen3-Embedding's layout): links to
    its files plus modules.json and 1_Pooling/config.json. A directory with modules.json is used
    as it is."""
    if os.path.exists(os.path.join(model, "modules.json")):
        return model
    out = model.rstrip("/") + "-embed"
    os.makedirs(os.path.join(out, "1_Pooling"), exist_ok=True)
    for name in os.listdir(model):
        link = os.path.join(out, name)
        if not os.path.lexists(link):
            os.symlink(os.path.join(os.path.abspath(model), name), link)
    hidden = json.load(open(os.path.join(model, "config.json")))["hidden_size"]
    with open(os.path.join(out, "modules.json"), "w") as f:
        json.dump(MODULES, f)
    with open(os.path.join(out, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": hidden, "pooling_mode_lasttoken": True,
                   "include_prompt": True}, f)
    return out


def post(base_url, body):
    request = urllib.request.Request(base_url + "/v1/embeddings", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              "Cache-Control": "no-store"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def measure(server, prompts):
    """{batch: tokens/s}: every request's token ids over the wall time of the batch size."""
    post(server.base_url, {"model": bench.MODEL_NAME, "input": [prompts[0]]})  # warm-up
    result = {}
    for batch in BATCHES:
        requests = REQUESTS if batch == 1 else max(1, REQUESTS // 4)
        inputs = [prompts[(i % (len(prompts) - 1)) + 1] for i in range(requests * batch)]
        start = time.monotonic()
        for r in range(requests):
            answer = post(server.base_url, {"model": bench.MODEL_NAME,
                                            "input": inputs[r * batch:(r + 1) * batch]})
            assert len(answer["data"]) == batch, answer
        elapsed = time.monotonic() - start
        result[batch] = sum(len(p) for p in inputs) / elapsed
        bench.log("%s batch %d: %.0f tokens/s" % (server.name, batch, result[batch]))
    return result


def main():
    engine = bench.build_engine() if not os.environ.get("SOVAI_ENGINE") else os.environ[
        "SOVAI_ENGINE"]
    model = os.environ.get("EMBED_MODEL") or bench.make_model()
    embed_dir = embedding_layout(model)
    rng = random.Random(1)
    ids = []
    while len(ids) < 40 * TOKENS:
        ids += bench.tokenize(engine, model, "\n\n".join(
            loadgen.make_prompt(rng, 200) for _ in range(50)))
    # Distinct prompts, so that neither server's prefix cache serves one from another.
    prompts = [ids[i * TOKENS:(i + 1) * TOKENS] for i in range(40)]
    logs = os.path.join(bench.CACHE, "logs")
    os.makedirs(logs, exist_ok=True)
    threads = str(bench.THREADS)
    port = bench.free_port()
    ours_cmd = [engine, "serve", "--model", embed_dir, "--task", "embed", "--served-model-name",
                bench.MODEL_NAME, "--listen", "127.0.0.1:%d" % port, "--threads", threads,
                "--response-cache-mb", "0"]
    with bench.Server("ours", ours_cmd, port, os.path.join(logs, "embed-ours.log")) as server:
        ours = measure(server, prompts)
    llama, missing = None, None
    binary, missing = bench.llama_server()
    if binary:
        gguf = bench.export_gguf(engine, model)
        port = bench.free_port()
        slots = max(BATCHES)
        llama_cmd = [binary, "-m", gguf, "--embedding", "--pooling", "last", "-t", threads,
                     "-tb", threads, "-np", str(slots), "-c", str(slots * (TOKENS + 16)),
                     "-b", "2048", "-ub", "2048", "--no-mmap", "--alias", bench.MODEL_NAME,
                     "--host", "127.0.0.1", "--port", str(port)]
        with bench.Server("llama-server", llama_cmd, port,
                          os.path.join(logs, "embed-llama.log")) as server:
            llama = measure(server, prompts)
    print("embedding throughput, %d-token inputs, %s threads, load average %.1f" % (
        TOKENS, threads, os.getloadavg()[0]))
    print("| batch | ours tokens/s | llama-server tokens/s | ours / llama |")
    print("|---|---|---|---|")
    for batch in BATCHES:
        theirs = "%.0f" % llama[batch] if llama else "not available (%s)" % missing
        ratio = "%.2fx" % (ours[batch] / llama[batch]) if llama else "-"
        print("| %d | %.0f | %s | %s |" % (batch, ours[batch], theirs, ratio))
    if llama:
        for batch in BATCHES:
            r = ours[batch] / llama[batch]
            print("goal: batch %d >= 1.0x llama-server: %.2fx %s" % (
                batch, r, "PASS" if r >= 1.0 else "MISS"))


if __name__ == "__main__":
    main()
