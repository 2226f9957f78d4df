#!/usr/bin/env python3
"""A small GGUF reader written from ggml's docs/gguf.md (version 3), independently of Sovai's C++
reader and writer, so that it can check what they produce.

    read_gguf.py FILE.gguf            prints the header, metadata and tensor infos as JSON

As a module: read(path) -> GgufFile; tensor_values(gguf, info) -> list of floats (F32, F16, BF16
and Q8_0 tensors). Standard library only (struct), so it runs wherever python3 does.

Layout, per the spec: magic "GGUF", u32 version, u64 tensor_count, u64 metadata_kv_count; the
metadata (string key, u32 value type, value); the tensor infos (string name, u32 n_dims,
u64 dims[n_dims] innermost first, u32 ggml type, u64 offset relative to the data section);
zero padding to general.alignment (default 32); the data section. Strings are a u64 length and
bytes; arrays a u32 element type, a u64 count and the elements. Everything is little-endian.
"""

import json
import struct
import sys

VALUE_TYPES = {
    0: ("UINT8", "<B"),
    1: ("INT8", "<b"),
    2: ("UINT16", "<H"),
    3: ("INT16", "<h"),
    4: ("UINT32", "<I"),
    5: ("INT32", "<i"),
    6: ("FLOAT32", "<f"),
    7: ("BOOL", "<?"),
    8: ("STRING", None),
    9: ("ARRAY", None),
    10: ("UINT64", "<Q"),
    11: ("INT64", "<q"),
    12: ("FLOAT64", "<d"),
}

# ggml_type id -> (name, values per block, bytes per block), for the types this checker decodes.
GGML_TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    8: ("Q8_0", 32, 34),
    30: ("BF16", 1, 2),
}


class GgufError(Exception):
    pass


class GgufFile:
    def __init__(self, data):
        self.data = data
        self.version = None
        self.metadata = {}  # key -> (type name, value); arrays: ("ARRAY", (element type, [values]))
        self.tensors = []  # dicts: name, ne, type, offset
        self.alignment = 32
        self.data_offset = None


class _Cursor:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, n, what):
        if self.pos + n > len(self.data):
            raise GgufError(f"truncated at byte {self.pos} reading {what}")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt, what):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what):
        length = self.unpack("<Q", what)
        raw = self.take(length, what)
        return raw.decode("utf-8")


def _value(cur, type_id, what):
    if type_id not in VALUE_TYPES:
        raise GgufError(f"{what}: unknown value type {type_id}")
    name, fmt = VALUE_TYPES[type_id]
    if name == "STRING":
        return cur.string(what)
    if name == "ARRAY":
        element_type = cur.unpack("<I", what)
        count = cur.unpack("<Q", what)
        element_name = VALUE_TYPES.get(element_type, ("?",))[0]
        return (element_name, [_value(cur, element_type, what) for _ in range(count)])
    if name == "BOOL":
        byte = cur.unpack("<B", what)
        if byte > 1:
            raise GgufError(f"{what}: bool byte {byte}")
        return byte == 1
    return cur.unpack(fmt, what)


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    g = GgufFile(data)
    cur = _Cursor(data)
    if cur.take(4, "magic") != b"GGUF":
        raise GgufError("bad magic")
    g.version = cur.unpack("<I", "version")
    if g.version != 3:
        raise GgufError(f"version {g.version}")
    tensor_count = cur.unpack("<Q", "tensor_count")
    kv_count = cur.unpack("<Q", "metadata_kv_count")
    for _ in range(kv_count):
        key = cur.string("key")
        if key in g.metadata:
            raise GgufError(f"duplicate key {key}")
        type_id = cur.unpack("<I", key)
        g.metadata[key] = (VALUE_TYPES.get(type_id, ("?",))[0], _value(cur, type_id, key))
    if "general.alignment" in g.metadata:
        type_name, value = g.metadata["general.alignment"]
        if type_name != "UINT32" or value % 8 != 0:
            raise GgufError(f"general.alignment {type_name} {value}")
        g.alignment = value
    for _ in range(tensor_count):
        name = cur.string("tensor name")
        n_dims = cur.unpack("<I", name)
        ne = [cur.unpack("<Q", name) for _ in range(n_dims)]
        type_id = cur.unpack("<I", name)
        offset = cur.unpack("<Q", name)
        if offset % g.alignment != 0:
            raise GgufError(f"{name}: offset {offset} not aligned to {g.alignment}")
        g.tensors.append({"name": name, "ne": ne, "type": type_id, "offset": offset})
    # Padding to the alignment, then the data section.
    g.data_offset = cur.pos + (g.alignment - cur.pos % g.alignment) % g.alignment
    if any(data[cur.pos:g.data_offset]):
        raise GgufError("non-zero padding before the data section")
    spans = []
    for t in g.tensors:
        t["size"] = tensor_size(t)
        start = g.data_offset + t["offset"]
        if start + t["size"] > len(data):
            raise GgufError(f"{t['name']}: data past the end of the file")
        spans.append((start, start + t["size"], t["name"]))
    spans.sort()
    for (s0, e0, n0), (s1, _, n1) in zip(spans, spans[1:]):
        if s1 < e0:
            raise GgufError(f"tensors {n0} and {n1} overlap")
    return g


def tensor_size(t):
    if t["type"] not in GGML_TYPES:
        raise GgufError(f"{t['name']}: ggml type {t['type']} is not decoded by this checker")
    _, block_values, block_bytes = GGML_TYPES[t["type"]]
    count = 1
    for n in t["ne"]:
        count *= n
    if t["ne"][0] % block_values != 0:
        raise GgufError(f"{t['name']}: ne[0] {t['ne'][0]} is not a multiple of {block_values}")
    return count // block_values * block_bytes


def tensor_bytes(g, t):
    start = g.data_offset + t["offset"]
    return g.data[start:start + t["size"]]


def bf16_to_float(bits):
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def tensor_values(g, t):
    raw = tensor_bytes(g, t)
    name = GGML_TYPES[t["type"]][0]
    if name == "F32":
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    if name == "F16":
        return list(struct.unpack(f"<{len(raw) // 2}e", raw))
    if name == "BF16":
        return [bf16_to_float(b) for b in struct.unpack(f"<{len(raw) // 2}H", raw)]
    if name == "Q8_0":
        out = []
        for block in range(len(raw) // 34):
            chunk = raw[block * 34:(block + 1) * 34]
            d = struct.unpack("<e", chunk[:2])[0]
            out.extend(d * q for q in struct.unpack("<32b", chunk[2:]))
        return out
    raise GgufError(f"cannot decode {name}")


def to_json(g):
    def value_json(type_name, value):
        if type_name == "ARRAY":
            element_type, values = value
            return {"type": "ARRAY", "element_type": element_type, "count": len(values),
                    "values": values if element_type != "ARRAY" else
                    [value_json("ARRAY", v) for v in values]}
        return {"type": type_name, "value": value}

    return {
        "version": g.version,
        "alignment": g.alignment,
        "data_offset": g.data_offset,
        "metadata": {k: value_json(*v) for k, v in g.metadata.items()},
        "tensors": [{"name": t["name"], "ne": t["ne"],
                     "type": GGML_TYPES.get(t["type"], (str(t["type"]),))[0],
                     "offset": t["offset"], "size": t["size"]} for t in g.tensors],
    }


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: read_gguf.py FILE.gguf")
    json.dump(to_json(read(sys.argv[1])), sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")
