"""The RAG example's index format and its calls to the catalog (README.md, "The index").

An index is a directory (or a bucket prefix) of three files:

  vectors.npy    NPY 1.0, dtype '<f4' (little-endian float32), C order, shape (N, D): row i is
                 chunk i's embedding as /v1/embeddings returned it (unit length)
  chunks.jsonl   N lines, line i for row i: {"id", "source", "start", "end", "text"}; start and
                 end are byte offsets into the UTF-8 source file, text is those bytes decoded
  manifest.json  {"format": "sovai-rag-index", "version": 1, "model", "dimension", "count"}

Only the standard library: the platform's images hold python3 without numpy, and numpy.load
reads vectors.npy as it is."""

import ast
import json
import os
import struct
import urllib.error
import urllib.request

FORMAT = "sovai-rag-index"
VERSION = 1
NPY_MAGIC = b"\x93NUMPY"
# Limits on what the query side reads (an index is a file from a bucket, not trusted).
MAX_CHUNKS = 1_000_000
MAX_DIMENSION = 65_536
MAX_NPY_HEADER_BYTES = 4096
MAX_CHUNKS_JSONL_BYTES = 1 << 30


def write_atomically(path, data):
    """Writes bytes so that a reader never sees half a file: a temporary file, fsync, rename."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def npy_bytes(rows, dimension):
    """An NPY 1.0 file of float32 rows: the magic, a padded header dict, the data."""
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (len(rows),
                                                                                dimension)
    # The header, with its 10-byte preamble, is padded with spaces to a multiple of 64 and ends
    # in a newline (numpy's own layout).
    pad = 64 - (10 + len(header) + 1) % 64
    header = (header + " " * (pad % 64) + "\n").encode("latin1")
    out = bytearray(NPY_MAGIC + b"\x01\x00" + struct.pack("<H", len(header)) + header)
    for row in rows:
        if len(row) != dimension:
            raise ValueError("a row of %d values in an index of dimension %d" % (len(row),
                                                                                 dimension))
        out += struct.pack("<%df" % dimension, *row)
    return bytes(out)


def parse_npy(data):
    """The rows of an NPY 1.0/2.0 file of '<f4' values of shape (N, D). ValueError otherwise."""
    if not data.startswith(NPY_MAGIC) or len(data) < 10:
        raise ValueError("vectors.npy is not an NPY file")
    major = data[6]
    if major == 1:
        (header_len,), start = struct.unpack_from("<H", data, 8), 10
    elif major in (2, 3):
        (header_len,), start = struct.unpack_from("<I", data, 8), 12
    else:
        raise ValueError("vectors.npy has NPY version %d; 1, 2 and 3 are read" % major)
    if header_len > MAX_NPY_HEADER_BYTES or start + header_len > len(data):
        raise ValueError("vectors.npy has a header of %d bytes" % header_len)
    try:
        header = ast.literal_eval(data[start:start + header_len].decode("latin1"))
    except (ValueError, SyntaxError) as e:
        raise ValueError("vectors.npy has a malformed header: %s" % e)
    if not isinstance(header, dict) or header.get("descr") != "<f4" or header.get(
            "fortran_order") is not False:
        raise ValueError("vectors.npy must hold '<f4' values in C order, not %r" % (header,))
    shape = header.get("shape")
    if (not isinstance(shape, tuple) or len(shape) != 2 or
            not all(isinstance(n, int) for n in shape)):
        raise ValueError("vectors.npy must be two-dimensional, not of shape %r" % (shape,))
    count, dimension = shape
    if not (0 <= count <= MAX_CHUNKS and 0 < dimension <= MAX_DIMENSION):
        raise ValueError("vectors.npy has shape %r, past the limits" % (shape,))
    body = data[start + header_len:]
    if len(body) != 4 * count * dimension:
        raise ValueError("vectors.npy holds %d data bytes for shape %r" % (len(body), shape))
    values = struct.unpack("<%df" % (count * dimension), body)
    return [values[i * dimension:(i + 1) * dimension] for i in range(count)]


def write_index(directory, model, chunks, vectors):
    """Writes the three files of an index; the manifest last, so that it names a whole index."""
    dimension = len(vectors[0]) if vectors else 0
    os.makedirs(directory, exist_ok=True)
    write_atomically(os.path.join(directory, "vectors.npy"), npy_bytes(vectors, dimension))
    lines = "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in chunks)
    write_atomically(os.path.join(directory, "chunks.jsonl"), lines.encode())
    manifest = {"format": FORMAT, "version": VERSION, "model": model, "dimension": dimension,
                "count": len(chunks)}
    write_atomically(os.path.join(directory, "manifest.json"),
                     (json.dumps(manifest, indent=2) + "\n").encode())


def parse_index(manifest_bytes, vectors_bytes, chunks_bytes):
    """(manifest, chunks, vectors) from an index's three files; ValueError naming what is wrong."""
    try:
        manifest = json.loads(manifest_bytes)
    except ValueError as e:
        raise ValueError("manifest.json is not JSON: %s" % e)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get(
            "version") != VERSION:
        raise ValueError("manifest.json is not a %s version %d manifest" % (FORMAT, VERSION))
    if len(chunks_bytes) > MAX_CHUNKS_JSONL_BYTES:
        raise ValueError("chunks.jsonl is over %d bytes" % MAX_CHUNKS_JSONL_BYTES)
    chunks = []
    for number, line in enumerate(chunks_bytes.decode().splitlines(), 1):
        try:
            chunk = json.loads(line)
        except ValueError as e:
            raise ValueError("chunks.jsonl line %d is not JSON: %s" % (number, e))
        if not isinstance(chunk, dict) or not all(
                isinstance(chunk.get(k), str) for k in ("id", "source", "text")) or not all(
                    isinstance(chunk.get(k), int) for k in ("start", "end")):
            raise ValueError("chunks.jsonl line %d lacks id, source, start, end or text" % number)
        chunks.append(chunk)
    vectors = parse_npy(vectors_bytes)
    if not (len(vectors) == len(chunks) == manifest.get("count")):
        raise ValueError("the index disagrees with itself: %d vectors, %d chunks, count %r" % (
            len(vectors), len(chunks), manifest.get("count")))
    if vectors and len(vectors[0]) != manifest.get("dimension"):
        raise ValueError("vectors.npy rows have %d values, the manifest says %r" % (
            len(vectors[0]), manifest.get("dimension")))
    return manifest, chunks, vectors


class Catalog:
    """The platform's OpenAI-compatible /v1 (the gateway's catalog endpoints) with a token."""

    def __init__(self, url, token, timeout_s=300):
        self.base = url.rstrip("/")
        if not self.base.endswith("/v1"):
            self.base += "/v1"
        self.token = token
        self.timeout_s = timeout_s

    def post(self, route, body):
        request = urllib.request.Request(
            self.base + route, data=json.dumps(body).encode(), method="POST",
            headers={"Authorization": "Bearer " + self.token,
                     "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            raise RuntimeError("POST %s answered %d: %s" % (route, e.code, text))

    def embed(self, model, texts):
        answer = self.post("/embeddings", {"model": model, "input": texts})
        return [d["embedding"] for d in sorted(answer["data"], key=lambda d: d["index"])]

    def rerank(self, model, query, documents, top_n):
        answer = self.post("/rerank", {"model": model, "query": query, "documents": documents,
                                       "top_n": top_n})
        return answer["results"]

    def chat(self, model, messages, max_tokens):
        answer = self.post("/chat/completions", {"model": model, "messages": messages,
                                                 "max_tokens": max_tokens, "temperature": 0})
        return answer["choices"][0]["message"]["content"]


def catalog_from_env():
    """The catalog at $SOVAI_URL with the token $SOVAI_TOKEN (what `sovai login` uses too)."""
    url, token = os.environ.get("SOVAI_URL"), os.environ.get("SOVAI_TOKEN")
    if not url or not token:
        raise SystemExit("set SOVAI_URL (the server, e.g. http://127.0.0.1:8080) and SOVAI_TOKEN "
                         "(an API token: sovai token create)")
    return Catalog(url, token)
