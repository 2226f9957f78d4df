"""Answers a question from a RAG index through the catalog: the RAG example's query program
(README.md).

  python3 query.py --index s3://rag/index --question "Which bucket holds the corpus?"

1. embeds the question (/v1/embeddings, the index's model);
2. takes the --top-k chunks by cosine similarity;
3. reranks them (/v1/rerank) and keeps the --top-n best;
4. asks a chat endpoint (/v1/chat/completions) with those passages, numbered, and their sources;
5. prints the answer and the sources of the passages it was given ([n] marks those it cited).

--index is a directory or s3://BUCKET/PREFIX (read with boto3: AWS_ENDPOINT_URL and the usual
AWS_* credentials). --json prints every step (what was retrieved, the rerank scores, the messages
sent to chat) for scripts and tests."""

import argparse
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ragindex  # noqa: E402

FILES = ("manifest.json", "vectors.npy", "chunks.jsonl")
SYSTEM_PROMPT = ("Answer the question using only the numbered passages. Cite every passage you "
                 "use by its number in brackets, like [1]. If the passages do not hold the "
                 "answer, say so.")


def read_index(location):
    if location.startswith("s3://"):
        import boto3
        bucket, _, prefix = location[len("s3://"):].partition("/")
        s3 = boto3.client("s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL"))
        prefix = prefix.rstrip("/") + "/" if prefix else ""
        files = [s3.get_object(Bucket=bucket, Key=prefix + name)["Body"].read() for name in FILES]
    else:
        files = []
        for name in FILES:
            with open(os.path.join(location, name), "rb") as f:
                files.append(f.read())
    return ragindex.parse_index(*files)


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def passage_header(n, chunk):
    return "[%d] (source: %s, bytes %d-%d)" % (n, chunk["source"], chunk["start"], chunk["end"])


def prompt_messages(question, passages):
    text = "\n\n".join(passage_header(n, c) + "\n" + c["text"]
                       for n, c in enumerate(passages, 1))
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": "Passages:\n\n%s\n\nQuestion: %s" % (text, question)}]


def answer(catalog, index, question, top_k, top_n, rerank_model, chat_model, max_tokens):
    manifest, chunks, vectors = index
    [query] = catalog.embed(manifest["model"], [question])
    scored = sorted(((cosine(query, v), i) for i, v in enumerate(vectors)), reverse=True)[:top_k]
    retrieved = [{"id": chunks[i]["id"], "source": chunks[i]["source"], "score": s}
                 for s, i in scored]
    candidates = [chunks[i] for _, i in scored]
    results = catalog.rerank(rerank_model, question, [c["text"] for c in candidates], top_n)
    passages = [candidates[r["index"]] for r in results]
    reranked = [{"id": c["id"], "source": c["source"], "relevance_score": r["relevance_score"]}
                for c, r in zip(passages, results)]
    messages = prompt_messages(question, passages)
    text = catalog.chat(chat_model, messages, max_tokens)
    cited = sorted({int(n) for n in re.findall(r"\[(\d+)\]", text) if 1 <= int(n) <= len(passages)})
    sources = [{"n": n, "id": c["id"], "source": c["source"], "start": c["start"],
                "end": c["end"], "cited": n in cited} for n, c in enumerate(passages, 1)]
    return {"question": question, "retrieved": retrieved, "reranked": reranked,
            "messages": messages, "answer": text, "sources": sources}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", required=True, help="directory or s3://BUCKET/PREFIX")
    parser.add_argument("--question", required=True)
    parser.add_argument("--rerank-model", default="tiny-rerank", help="the catalog's reranker")
    parser.add_argument("--chat-model", default="tiny-chat", help="the catalog's chat model")
    parser.add_argument("--top-k", type=int, default=4, help="chunks retrieved by similarity")
    parser.add_argument("--top-n", type=int, default=2, help="passages kept after reranking")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json", action="store_true", help="print every step as JSON")
    args = parser.parse_args()
    if not 1 <= args.top_n <= args.top_k:
        raise SystemExit("--top-n must be from 1 to --top-k")
    catalog = ragindex.catalog_from_env()
    try:
        index = read_index(args.index)
    except (OSError, ValueError) as e:
        raise SystemExit("cannot read the index at %s: %s" % (args.index, e))
    result = answer(catalog, index, args.question, args.top_k, args.top_n, args.rerank_model,
                    args.chat_model, args.max_tokens)
    if args.json:
        print(json.dumps(result, indent=1, ensure_ascii=False))
        return
    print(result["answer"].strip())
    print("\nSources:")
    for s in result["sources"]:
        print("%s[%d] %s, bytes %d-%d" % ("* " if s["cited"] else "  ", s["n"], s["source"],
                                          s["start"], s["end"]))


if __name__ == "__main__":
    main()
