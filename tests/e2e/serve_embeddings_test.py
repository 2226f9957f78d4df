"""`sovai-engine serve` with the shipped embedding model (models/sovai-tiny-embed) against the
official `openai` npm client's embeddings.create (float, base64, the client's default, dimensions,
token ids, errors; serve_embeddings_client.mjs), then the response cache and /metrics, and
POST /v1/rerank on a reranker server. The values themselves are checked against PyTorch by
tests/reference/embedding_golden.py."""

import json
import os
import subprocess
import unittest
import urllib.request

from serve_openai_test import REPO_ROOT, ServeProcess

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve_embeddings_client.mjs")
EMBED_DIR = os.path.join(REPO_ROOT, "models", "sovai-tiny-embed")
MODEL = "sovai-tiny-embed"


def post(url, path, body, headers=None):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read())


class ServeEmbeddingsTest(unittest.TestCase):
    def test_openai_client_embeddings(self):
        server = ServeProcess(model_dir=EMBED_DIR)
        try:
            result = subprocess.run(["node", SCRIPT, server.url, MODEL], capture_output=True,
                                    text=True, timeout=600, cwd=REPO_ROOT)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            checks = [l[3:] for l in result.stdout.splitlines() if l.startswith("ok ")]
            self.assertEqual(len(checks), 6, checks)

            body = {"model": MODEL, "input": ["cached one", "cached two"]}
            status, headers, first = post(server.url, "/v1/embeddings", body)
            self.assertEqual((status, headers["X-Sovai-Cache"]), (200, "miss"))
            status, headers, again = post(server.url, "/v1/embeddings", body)
            self.assertEqual((status, headers["X-Sovai-Cache"]), (200, "hit"))
            self.assertEqual(again, first)
            status, headers, fresh = post(server.url, "/v1/embeddings", body,
                                          {"Cache-Control": "no-store"})
            self.assertEqual((status, headers["X-Sovai-Cache"]), (200, "bypass"))
            # Computed again, its prompts' blocks now from the prefix cache. Q8_0 computes each
            # row alike in any batch, but this model's MLP down projection (688 inputs, not whole
            # Q8_0 blocks) stays bf16 through sgemm, whose rounding moves with the batch's shape:
            # the same vectors within 1e-6 (measured: at most 4.5e-8), not the same bits.
            for got, want in zip(fresh["data"], first["data"]):
                self.assertEqual(len(got["embedding"]), len(want["embedding"]))
                for a, b in zip(got["embedding"], want["embedding"]):
                    self.assertAlmostEqual(a, b, delta=1e-6)

            m = server.metrics()
            self.assertEqual(m["sovai_serve_embedding_requests_total"], 8)
            self.assertGreaterEqual(m["sovai_serve_pooled_prompts_total"], 12)
            self.assertEqual(m["sovai_serve_requests_running"], 0)
            self.assertGreater(m["sovai_serve_response_cache_hits_total"], 0)
        finally:
            server.stop()

    def test_rerank(self):
        server = ServeProcess("--task", "rerank", "--rerank-tokens", "\u0120yes,\u0120no")
        try:
            docs = ["the quick brown fox", "a lazy dog", {"text": "buckets of text"}]
            status, _, answer = post(server.url, "/v1/rerank", {
                "model": "sovai-tiny-llama", "query": "fox", "documents": docs, "top_n": 2,
                "return_documents": True})
            self.assertEqual(status, 200, answer)
            self.assertEqual(len(answer["results"]), 2)
            scores = [r["relevance_score"] for r in answer["results"]]
            self.assertEqual(scores, sorted(scores, reverse=True))
            for r in answer["results"]:
                self.assertTrue(0 < r["relevance_score"] < 1)
                doc = docs[r["index"]]
                self.assertEqual(r["document"]["text"], doc if isinstance(doc, str) else doc["text"])
            self.assertGreater(answer["usage"]["prompt_tokens"], 0)
            status, _, error = post(server.url, "/v1/rerank", {
                "model": "sovai-tiny-llama", "query": "fox", "documents": []})
            self.assertEqual((status, error["error"]["param"]), (400, "documents"))
            self.assertEqual(server.metrics()["sovai_serve_rerank_requests_total"], 1)
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main()
