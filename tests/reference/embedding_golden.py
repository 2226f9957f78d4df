#!/usr/bin/env python3
"""Checks `sovai-engine serve`'s POST /v1/embeddings and /v1/rerank against PyTorch.

The shipped models/sovai-tiny-embed (the tiny Llama with Qwen3-Embedding's sentence-transformers
layout: last-token pooling, Normalize) is served with f32 weights, and every answer is compared
with the same pooling computed by llama_golden.py's independent PyTorch forward on the same
weights: last-token + L2 (the shipped config), `dimensions` (truncate, renormalize), mean pooling
without Normalize (a copy of the directory with another 1_Pooling/config.json), prompts split
into several prefill chunks, token-id inputs, base64 against float, and the reranker's score
(P(yes) over the pair yes/no after Qwen3-Reranker's prompt) on the same model.

Tolerance: every component within 1e-4 absolute of PyTorch's (the vectors are unit length; f32
sgemm against torch's f32 matmul differ by ~1e-7), scores within 1e-4. (With f32 weights a
repeated prompt, computed with other chunks or from cached blocks, may round differently; the
bit-exact float/base64 parity is e2e.serve_embeddings', on the batch-invariant Q8_0 weights.)

Usage: embedding_golden.py SOVAI_ENGINE   (exit 77 when torch is missing: skipped, not passed)
"""
import base64
import json
import os
import shutil
import struct
import sys
import tempfile
import urllib.error
import urllib.request

try:
    import torch
except ImportError:
    print("torch is not importable: install Debian's python3-torch", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import llama_golden  # noqa: E402  (the independent PyTorch forward)
from serve_openai_test import ServeProcess  # noqa: E402  (starts and stops the server)

torch.set_num_threads(1)
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL_DIR = os.path.join(REPO, "models", "sovai-tiny-embed")
TOLERANCE = 1e-4
TEXTS = ["The quick brown fox jumps over the lazy dog.",
         "Sovereign clouds keep data under EU law.",
         "A fortune: you will write many tests, and most of them will pass on the first try."]


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", name
        a, b = info["data_offsets"]
        out[name] = torch.frombuffer(bytearray(raw[8 + n + a:8 + n + b]),
                                     dtype=torch.float32).view(info["shape"])
    return out


class Server(ServeProcess):
    """The e2e tests' `sovai-engine serve` child (f32 weights, model id "m"), with JSON calls."""

    def __init__(self, engine, model, *extra):
        os.environ["SOVAI_ENGINE"] = engine
        super().__init__("--dtype", "f32", "--served-model-name", "m", *extra, model_dir=model)

    def request(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        def parse(raw):
            try:
                return json.loads(raw or b"null")
            except ValueError:
                return raw.decode(errors="replace")  # /health answers text
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, parse(r.read())
        except urllib.error.HTTPError as e:
            return e.code, parse(e.read())
        except OSError:
            return 0, None

    def post(self, path, body):
        status, answer = self.request("POST", path, body)
        assert status == 200, (path, status, answer)
        return answer

    def tokens(self, text, add_special_tokens=True):
        return self.post("/tokenize", {"model": "m", "prompt": text,
                                       "add_special_tokens": add_special_tokens})["tokens"]


class Reference:
    def __init__(self):
        with open(os.path.join(MODEL_DIR, "config.json")) as f:
            self.cfg = json.load(f)
        self.W = read_safetensors(os.path.join(MODEL_DIR, "model.safetensors"))

    def hidden(self, ids):  # [T, C]
        batch = {"batch": 1, "seq_len": len(ids), "tokens": ids,
                 "positions": list(range(len(ids))), "segments": [0] * len(ids)}
        with torch.no_grad():
            return llama_golden.hidden_states(self.cfg, self.W, {}, 0.0, batch)[0].double()

    def logits(self, ids):  # [V] after the last token
        with torch.no_grad():
            head = self.W["model.embed_tokens.weight"].double()
            return self.hidden(ids)[-1] @ head.T


def unit(v):
    return v / max(float(v.norm()), 1e-12)


def check_close(what, ours, theirs, tol=TOLERANCE):
    ours = torch.tensor(ours, dtype=torch.float64)
    assert ours.shape == theirs.shape, (what, ours.shape, theirs.shape)
    worst = float((ours - theirs).abs().max())
    assert worst <= tol, "%s: max |ours - torch| = %.3g > %.3g" % (what, worst, tol)
    print("ok %s (max diff %.2g)" % (what, worst))


def decode_base64(text):
    raw = base64.b64decode(text)
    return list(struct.unpack("<%df" % (len(raw) // 4), raw))


def rerank_prompt(instruction, query, document):
    # Qwen3-Reranker's model card, written out here independently of src/serve.
    prefix = ("<|im_start|>system\nJudge whether the Document meets the requirements based on "
              "the Query and the Instruct provided. Note that the answer can only be \"yes\" or "
              "\"no\".<|im_end|>\n<|im_start|>user\n")
    suffix = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    return prefix + "<Instruct>: %s\n<Query>: %s\n<Document>: %s" % (
        instruction, query, document) + suffix


def main():
    engine = sys.argv[1]
    ref = Reference()
    tmp = tempfile.mkdtemp(prefix="sovai-embed-golden-")
    try:
        # Prefill chunks of 16 tokens: the longer inputs are pooled over several steps.
        server = Server(engine, MODEL_DIR, "--max-num-batched-tokens", "16", "--max-num-seqs", "4")
        try:
            status, models = server.request("GET", "/v1/models")
            assert models["data"][0]["kind"] == "embedding", models
            assert models["data"][0]["embedding_dimension"] == 256, models
            print("ok /v1/models: kind embedding, 256 dimensions")
            ids = [server.tokens(t) for t in TEXTS]
            assert max(len(i) for i in ids) > 16, ids
            answer = server.post("/v1/embeddings", {"model": "m", "input": TEXTS})
            assert answer["usage"]["prompt_tokens"] == sum(len(i) for i in ids), answer["usage"]
            want = [unit(ref.hidden(i)[-1]) for i in ids]
            for k, item in enumerate(answer["data"]):
                assert item["index"] == k
                check_close("last-token, normalized, input %d" % k, item["embedding"], want[k])
            by_ids = server.post("/v1/embeddings", {"model": "m", "input": ids})
            for k, item in enumerate(by_ids["data"]):
                check_close("token-id input %d" % k, item["embedding"], want[k])
            cut = server.post("/v1/embeddings", {"model": "m", "input": TEXTS[0],
                                                 "dimensions": 64})
            check_close("dimensions 64: truncated and renormalized", cut["data"][0]["embedding"],
                        unit(ref.hidden(ids[0])[-1][:64]))
            b64 = server.post("/v1/embeddings", {"model": "m", "input": TEXTS,
                                                 "encoding_format": "base64"})
            for k, item in enumerate(b64["data"]):
                check_close("base64 input %d" % k, decode_base64(item["embedding"]), want[k])
            status, error = server.request("POST", "/v1/embeddings", {
                "model": "m", "input": "x", "dimensions": 257})
            assert status == 400 and error["error"]["param"] == "dimensions", (status, error)
            print("ok dimensions above the model's: 400")
        finally:
            server.stop()

        # Mean pooling without Normalize: the same files, another pooling config.
        mean_dir = os.path.join(tmp, "mean")
        os.makedirs(os.path.join(mean_dir, "1_Pooling"))
        for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
            os.symlink(os.path.realpath(os.path.join(MODEL_DIR, f)), os.path.join(mean_dir, f))
        with open(os.path.join(mean_dir, "modules.json"), "w") as f:
            json.dump([{"path": "", "type": "sentence_transformers.models.Transformer"},
                       {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}], f)
        with open(os.path.join(mean_dir, "1_Pooling", "config.json"), "w") as f:
            json.dump({"word_embedding_dimension": 256, "pooling_mode_mean_tokens": True}, f)
        server = Server(engine, mean_dir, "--max-num-batched-tokens", "16", "--max-num-seqs", "4",
                        "--response-cache-mb", "0")
        try:
            # Twice: the second time the prefix cache holds the prompts' blocks, which mean
            # pooling must not reuse (it reads every token's hidden state).
            for round_ in range(2):
                answer = server.post("/v1/embeddings", {"model": "m", "input": TEXTS})
                for k, item in enumerate(answer["data"]):
                    check_close("mean pooling, round %d, input %d" % (round_, k),
                                item["embedding"], ref.hidden(ids[k]).mean(0))
        finally:
            server.stop()

        # Reranking: Qwen3-Reranker's prompt and P(yes) over {yes, no}. The tiny vocabulary
        # holds the words with their leading space only.
        server = Server(engine, os.path.join(REPO, "models", "sovai-tiny-llama"), "--task",
                        "rerank", "--rerank-tokens", "\u0120yes,\u0120no")
        try:
            query = "Which animal jumps over the dog?"
            docs = TEXTS
            answer = server.post("/v1/rerank", {"model": "m", "query": query,
                                                "documents": docs, "top_n": 2})
            vocab = json.load(open(os.path.join(MODEL_DIR, "tokenizer.json")))["model"]["vocab"]
            yes, no = vocab["\u0120yes"], vocab["\u0120no"]
            instruction = ("Given a web search query, retrieve relevant passages that answer the "
                           "query")
            scores = []
            for d in docs:
                logits = ref.logits(server.tokens(rerank_prompt(instruction, query, d), False))
                scores.append(float(torch.sigmoid(logits[yes] - logits[no])))
            order = sorted(range(len(docs)), key=lambda i: (-scores[i], i))[:2]
            assert [r["index"] for r in answer["results"]] == order, (answer, scores)
            for r in answer["results"]:
                check_close("rerank score of document %d" % r["index"], [r["relevance_score"]],
                            torch.tensor([scores[r["index"]]], dtype=torch.float64))
                assert r["document"]["text"] == docs[r["index"]]
            status, error = server.request("POST", "/v1/embeddings", {"model": "m", "input": "x"})
            assert status == 400 and error["error"]["param"] == "model", (status, error)
            print("ok a reranker refuses /v1/embeddings")
        finally:
            server.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("all embedding goldens passed")


if __name__ == "__main__":
    main()
