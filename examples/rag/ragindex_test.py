"""The RAG index format (ragindex.py): what numpy would read, written; malformed files refused
with the reason. Standard library only, like the example."""

import json
import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ingest  # noqa: E402
import ragindex  # noqa: E402


def index_files(directory):
    files = []
    for name in ("manifest.json", "vectors.npy", "chunks.jsonl"):
        with open(os.path.join(directory, name), "rb") as f:
            files.append(f.read())
    return files


class RagIndexTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ragindex-")
        self.chunks = [{"id": "a.txt#%d" % i, "source": "a.txt", "start": i, "end": i + 1,
                        "text": "x"} for i in range(3)]
        self.vectors = [[0.5, -0.25, 1.0], [1e-8, 2.0, -3.5], [0.0, 0.0, 1.0]]
        ragindex.write_index(self.dir, "m", self.chunks, self.vectors)

    def test_round_trip_and_numpys_layout(self):
        manifest, chunks, vectors = ragindex.parse_index(*index_files(self.dir))
        self.assertEqual(manifest, {"format": "sovai-rag-index", "version": 1, "model": "m",
                                    "dimension": 3, "count": 3})
        self.assertEqual(chunks, self.chunks)
        want = [list(struct.unpack("<3f", struct.pack("<3f", *v))) for v in self.vectors]
        self.assertEqual([list(v) for v in vectors], want)
        npy = index_files(self.dir)[1]
        # numpy's NPY 1.0: magic, version, header length, a header padded to 64 bytes in all.
        self.assertEqual(npy[:8], b"\x93NUMPY\x01\x00")
        header_len = struct.unpack("<H", npy[8:10])[0]
        self.assertEqual((10 + header_len) % 64, 0)
        self.assertEqual(npy[10:10 + header_len].decode().rstrip(),
                         "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 3), }")
        self.assertEqual(len(npy), 10 + header_len + 4 * 9)

    def test_malformed_files_are_refused_with_the_reason(self):
        manifest, npy, chunks = index_files(self.dir)
        header_len = struct.unpack("<H", npy[8:10])[0]
        cases = [
            ((manifest, npy[:-1], chunks), "holds 35 data bytes"),
            ((manifest, b"PK\x03\x04" + npy[4:], chunks), "not an NPY file"),
            ((manifest, npy.replace(b"'<f4'", b"'<f8'"), chunks), "must hold '<f4'"),
            ((manifest, npy.replace(b"False", b"True "), chunks), "C order"),
            ((manifest, npy[:8] + struct.pack("<H", 60000) + npy[10:], chunks), "header of"),
            ((manifest, npy[:10] + b"{" * header_len + npy[10 + header_len:], chunks),
             "malformed header"),
            ((manifest, npy.replace(b"(3, 3)", b"(3,)  "), chunks), "two-dimensional"),
            ((manifest, npy.replace(b"(3, 3)", b"(4, 3)"), chunks), "data bytes"),
            ((manifest, npy, chunks + b"{not json\n"), "line 4 is not JSON"),
            ((manifest, npy, chunks + b'{"id": 1}\n'), "line 4 lacks"),
            ((manifest, npy, b"".join(chunks.splitlines(True)[:2])), "2 chunks"),
            ((b"[]", npy, chunks), "not a sovai-rag-index"),
            ((b"{", npy, chunks), "not JSON"),
            ((json.dumps(dict(json.loads(manifest), dimension=4)).encode(), npy, chunks),
             "the manifest says 4"),
        ]
        for files, reason in cases:
            with self.subTest(reason=reason):
                with self.assertRaises(ValueError) as e:
                    ragindex.parse_index(*files)
                self.assertIn(reason, str(e.exception))

    def test_chunks_are_whole_paragraphs_with_byte_offsets(self):
        text = ("Première phrase. Deuxième.\n\n" + "Long sentence here. " * 6 + "\n\nEnd.")
        data = text.encode()
        spans = ingest.chunk_spans(data, 40)
        for start, end in spans:
            self.assertLessEqual(end - start, 40)
            self.assertFalse(data[start:end].startswith(b" "))
            data[start:end].decode()  # never cut inside a UTF-8 character
        self.assertEqual(data[spans[0][0]:spans[0][1]].decode(), "Première phrase. Deuxième.")
        # Pieces of the long paragraph are packed with what follows while they fit.
        self.assertTrue(data[spans[-1][0]:spans[-1][1]].endswith(b"here. \n\nEnd."), spans)
        # A sentence longer than a chunk is cut at the limit, still at a character boundary.
        long = ("é" * 30).encode()
        for start, end in ingest.chunk_spans(long, 7):
            self.assertEqual(len(long[start:end].decode()), (end - start) // 2)


if __name__ == "__main__":
    unittest.main()
