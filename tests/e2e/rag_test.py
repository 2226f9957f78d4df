"""The RAG example (examples/rag/) end to end on a real `sovai server`: catalog endpoints added
with `sovai endpoint add` (the shipped embedding model, then the tiny reranker, which also answers
chat: a reranker replica serves the completion routes, so that the test needs two CPU units at a
time and runs on a two-core host), the documents in a bucket, `sovai job run` of examples/rag/ingest.py that embeds them
through the gateway into an index in the bucket, and examples/rag/query.py that retrieves,
reranks and asks the chat endpoint. The tiny models answer badly: the test checks the plumbing
(the quoted chunk comes first, the rerank call is made and its order kept, the passages are in
the prompt, the sources are named), not the answer's text. Also the reranker alone through the
catalog: a token, OpenAI errors, metering."""

import json
import os
import subprocess
import sys
import time
import unittest

from sovai_fixture import REGION, SovaiServer

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(REPO_ROOT, "examples", "rag")
SOVAI = os.environ.get("SOVAI_BINARY", "build/src/cli/sovai")
LOC = "rag@" + REGION.upper()

sys.path.insert(0, EXAMPLE)
import ragindex  # noqa: E402

DOCUMENTS = {
    "handbook/storage.md": (
        "# Storage\n\n"
        "Every project gets its own bucket for logs. The archive keeps each job's log for "
        "ninety days after the job ends.\n\n"
        "Buckets are S3-compatible: boto3, the AWS CLI and rclone work against port 9000 "
        "without changes.\n"),
    "handbook/gpus.md": (
        "# GPUs\n\n"
        "An H100 flavor has eighty gigabytes of memory, enough for a seven billion parameter "
        "fine-tune with LoRA.\n\n"
        "Multi-GPU jobs ask for up to four units; each unit pins one device with "
        "CUDA_VISIBLE_DEVICES.\n"),
    "faq.txt": (
        "Billing is per minute of a running workload. A cancelled job costs only what ran.\n\n"
        "The penguin mascot of the platform is called Gaston and lives in the control panel.\n"),
}


def upload_tree(s3, local, prefix):
    for root, _, files in os.walk(local):
        for name in files:
            path = os.path.join(root, name)
            s3.upload_file(path, "rag", prefix + "/" + os.path.relpath(path, local))


class RagTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = SovaiServer()
        # Replicas and jobs run as an unprivileged user that must reach their directories.
        os.chmod(cls.server.tmp, 0o711)
        cls.server.start()
        # unittest skips tearDownClass when setUpClass fails: the server and its replicas are
        # stopped here then.
        try:
            cls.set_up_class()
        except BaseException:
            cls.server.cleanup()
            raise

    @classmethod
    def set_up_class(cls):
        cpu = [f for f in cls.server.api("GET", "/v1/flavors")[1]["items"]
               if f["id"] == "ai1-1-cpu"][0]
        if not cpu["available"]:
            raise unittest.SkipTest("jobs are not available on this host: " + cpu["reason"])
        cls.env = dict(os.environ, SOVAI_URL=cls.server.api_url,
                       SOVAI_TOKEN=cls.server.admin_token())
        s3 = cls.server.boto3_client()
        s3.create_bucket(Bucket="rag")
        for local, prefix in (("sovai-tiny-embed", "models/embed"),
                              ("sovai-tiny-rerank", "models/rerank")):
            upload_tree(s3, os.path.join(REPO_ROOT, "models", local), prefix)
        for name in ("ingest.py", "query.py", "ragindex.py"):
            s3.upload_file(os.path.join(EXAMPLE, name), "rag", "code/" + name)
        for name, text in DOCUMENTS.items():
            s3.put_object(Bucket="rag", Key="docs/" + name, Body=text.encode())
        # The embedder alone first: the ingest job takes the host's other CPU unit.
        cls.add_endpoint("tiny-embed", "models/embed", "embed")
        cls.token = cls.server.api("POST", "/v1/tokens", {"role": "read"})[1]["token"]

    @classmethod
    def add_endpoint(cls, name, prefix, task):
        """`sovai endpoint add`, then waits for its replica (once per name)."""
        items = cls.server.api("GET", "/v1/endpoints")[1]["items"]
        if not any(e["name"] == name for e in items):
            cls.sovai("endpoint", "add", "--name", name, "--model", LOC + "/" + prefix,
                      "--task", task, "--flavor", "ai1-1-cpu")
        deadline = time.time() + 300
        while True:
            items = cls.server.api("GET", "/v1/endpoints")[1]["items"]
            if any(e["name"] == name and e.get("ready_replicas", 0) >= 1 for e in items):
                return
            if time.time() > deadline:
                raise AssertionError("endpoint %s never ready: %s\n%s" % (
                    name, json.dumps(items, indent=1), cls.server.server_log()))
            time.sleep(0.25)

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    @classmethod
    def sovai(cls, *args):
        result = subprocess.run([SOVAI, *args], capture_output=True, text=True, env=cls.env,
                                timeout=600)
        if result.returncode != 0:
            raise AssertionError("sovai %s failed (%d):\n%s\n%s\nserver log:\n%s" % (
                " ".join(args), result.returncode, result.stdout, result.stderr,
                cls.server.server_log()))
        return result

    def endpoint_usage(self, name):
        app = [e for e in self.server.api("GET", "/v1/endpoints")[1]["items"]
               if e["name"] == name][0]["app"]
        return self.server.api("GET", "/v1/apps/" + app)[1]["status"]["usage"]

    def wait_usage(self, name, requests):
        deadline = time.time() + 10
        while self.endpoint_usage(name)["requests"] < requests:
            self.assertLess(time.time(), deadline, self.endpoint_usage(name))
            time.sleep(0.25)

    # Named to run after the example (unittest sorts by name), whose ingest job needs the CPU unit
    # the reranker takes.
    def test_2_a_reranker_through_the_catalog(self):
        self.add_endpoint("tiny-rerank", "models/rerank", "rerank")
        before = self.endpoint_usage("tiny-rerank")["requests"]
        docs = ["the quick brown fox", "a lazy dog", "buckets of text"]
        body = {"model": "tiny-rerank", "query": "fox", "documents": docs, "top_n": 2,
                "return_documents": True}
        status, answer = self.server.api("POST", "/v1/rerank", body, token=self.token)
        self.assertEqual(status, 200, answer)
        self.assertEqual(len(answer["results"]), 2)
        scores = [r["relevance_score"] for r in answer["results"]]
        self.assertEqual(scores, sorted(scores, reverse=True))
        for r in answer["results"]:
            self.assertTrue(0 < r["relevance_score"] < 1, r)
            self.assertEqual(r["document"]["text"], docs[r["index"]])
        self.assertGreater(answer["usage"]["prompt_tokens"], 0)
        # The same question again: the gateway's response cache answers it.
        self.assertEqual(self.server.api("POST", "/v1/rerank", body, token=self.token),
                         (200, answer))
        status, error = self.server.api("POST", "/v1/rerank", dict(body, documents=[]),
                                        token=self.token)
        self.assertEqual((status, error["error"]["param"]), (400, "documents"), error)
        status, error = self.server.api("POST", "/v1/embeddings",
                                        {"model": "tiny-rerank", "input": "fox"},
                                        token=self.token)
        self.assertEqual((status, error["error"]["param"]), (400, "model"), error)
        status, error = self.server.api("POST", "/v1/rerank", body, token="not-a-token")
        self.assertEqual(status, 401, error)
        self.wait_usage("tiny-rerank", before + 1)
        self.assertGreater(self.endpoint_usage("tiny-rerank")["prompt_tokens"], 0)

    def test_1_the_rag_example_from_a_bucket_to_a_cited_answer(self):
        volumes = ["--volume", LOC + "/code:/workspace/code:ro",
                   "--volume", LOC + "/docs:/workspace/docs:ro",
                   "--volume", LOC + "/index:/workspace/index:rw"]
        # The job calls the catalog with a read token of its own, not the CLI's.
        job = subprocess.run(
            [SOVAI, "job", "run", "--name", "rag-ingest", *volumes,
             "--env", "SOVAI_URL=" + self.server.api_url, "--env", "SOVAI_TOKEN=" + self.token,
             "--follow", "sovai/shell", "--", "python3", "/workspace/code/ingest.py",
             "--docs", "/workspace/docs", "--out", "/workspace/index", "--model", "tiny-embed",
             "--chunk-bytes", "150"],
            capture_output=True, text=True, env=self.env, timeout=600)
        self.assertEqual(job.returncode, 0, job.stdout + job.stderr + self.server.server_log())
        self.assertIn("wrote 6 chunks of 256 dimensions from 3 documents", job.stdout)

        s3 = self.server.boto3_client()
        files = [s3.get_object(Bucket="rag", Key="index/" + name)["Body"].read()
                 for name in ("manifest.json", "vectors.npy", "chunks.jsonl")]
        manifest, chunks, vectors = ragindex.parse_index(*files)
        self.assertEqual((manifest["model"], manifest["dimension"], manifest["count"]),
                         ("tiny-embed", 256, 6))
        for chunk in chunks:
            # Offsets are bytes of the source; the text is those bytes.
            source = DOCUMENTS[chunk["source"]].encode()
            self.assertEqual(source[chunk["start"]:chunk["end"]].decode(), chunk["text"])
            self.assertTrue(chunk["id"].startswith(chunk["source"] + "#"))
        for v in vectors:
            self.assertAlmostEqual(sum(x * x for x in v), 1.0, places=4)

        # The job has ended: its CPU unit goes to the reranker, which also answers chat.
        self.add_endpoint("tiny-rerank", "models/rerank", "rerank")
        query_env = dict(self.env, SOVAI_TOKEN=self.token, AWS_ENDPOINT_URL=self.server.s3_url,
                         AWS_ACCESS_KEY_ID=self.server.access_key,
                         AWS_SECRET_ACCESS_KEY=self.server.secret_key,
                         AWS_DEFAULT_REGION=REGION)
        rerank_before = self.endpoint_usage("tiny-rerank")["requests"]
        # The shipped embedder was not trained for retrieval and pools the last token: it finds
        # a chunk from a question that quotes the chunk whole (its paragraph, not its heading).
        questions = {
            "Every project gets its own bucket for logs. The archive keeps each job's log for "
            "ninety days after the job ends.": "handbook/storage.md#0",
            "Multi-GPU jobs ask for up to four units; each unit pins one device with "
            "CUDA_VISIBLE_DEVICES.": "handbook/gpus.md#1",
            "The penguin mascot of the platform is called Gaston and lives in the control panel.":
                "faq.txt#1",
        }
        by_id = {c["id"]: c for c in chunks}
        for question, want in questions.items():
            result = self.query(query_env, "--question", question, "--json")
            result = json.loads(result.stdout)
            self.assertEqual(result["retrieved"][0]["id"], want, result["retrieved"])
            retrieved = [r["id"] for r in result["retrieved"]]
            self.assertEqual(len(retrieved), 4)
            scores = [r["score"] for r in result["retrieved"]]
            self.assertEqual(scores, sorted(scores, reverse=True))
            # The reranker's order, best first, of chunks that retrieval found.
            reranked = result["reranked"]
            self.assertEqual(len(reranked), 2)
            self.assertTrue({r["id"] for r in reranked} <= set(retrieved), reranked)
            relevance = [r["relevance_score"] for r in reranked]
            self.assertEqual(relevance, sorted(relevance, reverse=True))
            # The prompt sent to chat holds each passage with its source, in that order.
            prompt = result["messages"][-1]["content"]
            self.assertIn("Question: " + question, prompt)
            at = 0
            for n, r in enumerate(reranked, 1):
                chunk = by_id[r["id"]]
                header = "[%d] (source: %s, bytes %d-%d)\n%s" % (
                    n, chunk["source"], chunk["start"], chunk["end"], chunk["text"])
                self.assertIn(header, prompt)
                self.assertGreater(prompt.index(header), at - 1)
                at = prompt.index(header)
            # The sources printed are the passages' sources, numbered as in the prompt.
            self.assertEqual([(s["n"], s["id"]) for s in result["sources"]],
                             [(n, r["id"]) for n, r in enumerate(reranked, 1)])
            self.assertIsInstance(result["answer"], str)
        self.wait_usage("tiny-rerank", rerank_before + len(questions))

        # The text output: the answer, then the sources by name.
        text = self.query(query_env, "--question", list(questions)[2]).stdout
        self.assertIn("\nSources:\n", text)
        sources = text.split("\nSources:\n", 1)[1]
        self.assertRegex(sources, r"\[1\] [\w/.]+\.(md|txt), bytes \d+-\d+")

        # A damaged index is refused with the reason, not answered from.
        s3.put_object(Bucket="rag", Key="broken/manifest.json", Body=files[0])
        s3.put_object(Bucket="rag", Key="broken/vectors.npy", Body=files[1][:-4])
        s3.put_object(Bucket="rag", Key="broken/chunks.jsonl", Body=files[2])
        broken = self.query(query_env, "--question", "x", "--index", "s3://rag/broken",
                            check=False)
        self.assertNotEqual(broken.returncode, 0)
        self.assertIn("vectors.npy holds", broken.stderr)

    def query(self, env, *args, check=True):
        if "--index" not in args:
            args = ("--index", "s3://rag/index") + args
        args = ("--rerank-model", "tiny-rerank", "--chat-model", "tiny-rerank") + args
        result = subprocess.run([sys.executable, os.path.join(EXAMPLE, "query.py"), *args],
                                capture_output=True, text=True, env=env, timeout=600)
        if check:
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        return result


if __name__ == "__main__":
    unittest.main()
