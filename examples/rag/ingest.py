"""Chunks the documents of a directory and embeds them through the catalog: the RAG example's
job (README.md). Run inside `sovai job run` with the documents' bucket mounted read-only and the
index's prefix read-write; the volume sync writes the index back to the bucket.

  python3 ingest.py --docs /workspace/docs --out /workspace/index --model tiny-embed

Reads every .txt and .md file under --docs (sorted, so that the index is reproducible), cuts
each into chunks of whole paragraphs of at most --chunk-bytes (a longer paragraph is cut at
sentence ends, and a longer sentence at the limit), and writes the index (ragindex.py)."""

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ragindex  # noqa: E402

MAX_DOCUMENT_BYTES = 64 << 20
# Inputs in one /v1/embeddings request: well under the server's limit (serve/limits.h), small
# enough that a request never waits long behind one batch.
BATCH = 32


def pieces(data, start, end, separator):
    """(start, end) spans of data[start:end] cut after each match of `separator`."""
    spans, at = [], start
    for m in separator.finditer(data, start, end):
        spans.append((at, m.end()))
        at = m.end()
    if at < end:
        spans.append((at, end))
    return spans


def chunk_spans(data, limit):
    """Byte spans of the chunks of one document: whole paragraphs packed up to `limit` bytes."""
    units = []
    for start, end in pieces(data, 0, len(data), re.compile(rb"\n\s*\n")):
        if end - start <= limit:
            units.append((start, end))
            continue
        for s, e in pieces(data, start, end, re.compile(rb"[.!?]\s+")):
            while e - s > limit:  # a sentence longer than a chunk: cut at the limit
                cut = s + limit
                while cut > s and (data[cut] & 0xC0) == 0x80:  # not inside a UTF-8 character
                    cut -= 1
                units.append((s, cut))
                s = cut
            units.append((s, e))
    spans = []
    for start, end in units:
        if spans and end - spans[-1][0] <= limit:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
    # Leading and trailing white space is not part of a chunk.
    out = []
    for start, end in spans:
        while start < end and data[start:start + 1].isspace():
            start += 1
        while end > start and data[end - 1:end].isspace():
            end -= 1
        if end > start:
            out.append((start, end))
    return out


def read_chunks(docs, limit):
    chunks = []
    for root, dirs, files in os.walk(docs):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith((".txt", ".md")):
                continue
            path = os.path.join(root, name)
            source = os.path.relpath(path, docs)
            if os.path.getsize(path) > MAX_DOCUMENT_BYTES:
                raise SystemExit("%s is over %d bytes" % (source, MAX_DOCUMENT_BYTES))
            with open(path, "rb") as f:
                data = f.read()
            for n, (start, end) in enumerate(chunk_spans(data, limit)):
                chunks.append({"id": "%s#%d" % (source, n), "source": source, "start": start,
                               "end": end, "text": data[start:end].decode(errors="replace")})
    return chunks


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", required=True, help="directory of .txt and .md documents")
    parser.add_argument("--out", required=True, help="directory the index is written to")
    parser.add_argument("--model", required=True, help="the catalog's embedding endpoint")
    parser.add_argument("--chunk-bytes", type=int, default=600, help="largest chunk")
    args = parser.parse_args()
    if args.chunk_bytes < 16:
        raise SystemExit("--chunk-bytes must be at least 16")
    catalog = ragindex.catalog_from_env()
    chunks = read_chunks(args.docs, args.chunk_bytes)
    if not chunks:
        raise SystemExit("no .txt or .md document under " + args.docs)
    vectors = []
    for i in range(0, len(chunks), BATCH):
        vectors += catalog.embed(args.model, [c["text"] for c in chunks[i:i + BATCH]])
        print("embedded %d of %d chunks" % (len(vectors), len(chunks)), flush=True)
    ragindex.write_index(args.out, args.model, chunks, vectors)
    print("wrote %d chunks of %d dimensions from %d documents to %s" % (
        len(chunks), len(vectors[0]), len({c["source"] for c in chunks}), args.out), flush=True)


if __name__ == "__main__":
    main()
