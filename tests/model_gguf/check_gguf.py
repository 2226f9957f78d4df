#!/usr/bin/env python3
"""Checks the GGUF files written by model_gguf_fixture against their Hugging Face sources, with
rules implemented here from llama.cpp's convert_hf_to_gguf.py and ggml's quantize_row_q8_0_ref,
independently of the C++ code:

* metadata: every llama.* / general.* / tokenizer.* key with the value type llama.cpp reads it
  as (UINT32, FLOAT32, ...) and the value from config.json / vocab.json;
* tensors: GGUF names, ne = the PyTorch shape reversed, the ggml type chosen per tensor;
* values: F32 exact, F16 / BF16 the source rounded to nearest even, Q8_0 byte-identical to the
  reference quantizer (emulated here in float32) and within its error bound; Q and K rows
  permuted as the converter's permute() does (checked both ways);
* rope_freqs.weight against Llama 3.1's formula.

Run by ctest (model_gguf.python_reader) with SOVAI_GGUF_FIXTURE_DIR set.
"""

import json
import math
import os
import re
import struct
import unittest

import read_gguf

FIXTURE_DIR = os.environ.get("SOVAI_GGUF_FIXTURE_DIR", "")

F32, F16, Q8_0, BF16 = 0, 1, 8, 30
FILE_TYPE_GGML = {"f32": F32, "f16": F16, "bf16": BF16, "q8_0": Q8_0}
FILE_TYPE_FTYPE = {"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32}  # llama.cpp's llama_ftype
TOKEN_TYPE_UNUSED = 5


def f32(x):
    """x rounded to the nearest float32."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f16_round(x):
    return struct.unpack("<e", struct.pack("<e", x))[0]


def bf16_round(x):
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return read_gguf.bf16_to_float(bits)


def q8_0_reference(values):
    """ggml's quantize_row_q8_0_ref, emulating its float32 arithmetic: every f32 operation is
    computed in double (exact for one product; correctly rounded for one quotient) and rounded."""
    out = bytearray()
    for b in range(0, len(values), 32):
        block = values[b:b + 32]
        amax = 0.0
        for v in block:
            amax = max(amax, abs(v))
        d = f32(amax / 127.0)
        inv = f32(1.0 / d) if d != 0 else 0.0
        out += struct.pack("<e", d)
        for v in block:
            x = f32(v * inv)
            q = math.floor(abs(x) + 0.5)  # roundf: halves away from zero
            out += struct.pack("<b", int(-q if x < 0 else q))
    return bytes(out)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[base + begin:base + end]
        dtype = info["dtype"]
        if dtype == "F32":
            values = list(struct.unpack(f"<{len(raw) // 4}f", raw))
        elif dtype == "F16":
            values = list(struct.unpack(f"<{len(raw) // 2}e", raw))
        elif dtype == "BF16":
            values = [read_gguf.bf16_to_float(v) for v in struct.unpack(f"<{len(raw) // 2}H", raw)]
        else:
            raise ValueError(dtype)
        tensors[name] = {"dtype": dtype, "shape": info["shape"], "values": values}
    return tensors


# Hugging Face name -> GGUF name (the converter's tensor map for the llama architecture).
NAME_RULES = [
    (r"^model\.embed_tokens\.weight$", "token_embd.weight"),
    (r"^model\.norm\.weight$", "output_norm.weight"),
    (r"^lm_head\.weight$", "output.weight"),
    (r"^model\.layers\.(\d+)\.input_layernorm\.weight$", r"blk.\1.attn_norm.weight"),
    (r"^model\.layers\.(\d+)\.post_attention_layernorm\.weight$", r"blk.\1.ffn_norm.weight"),
    (r"^model\.layers\.(\d+)\.self_attn\.q_proj\.(weight|bias)$", r"blk.\1.attn_q.\2"),
    (r"^model\.layers\.(\d+)\.self_attn\.k_proj\.(weight|bias)$", r"blk.\1.attn_k.\2"),
    (r"^model\.layers\.(\d+)\.self_attn\.v_proj\.(weight|bias)$", r"blk.\1.attn_v.\2"),
    (r"^model\.layers\.(\d+)\.self_attn\.o_proj\.(weight|bias)$", r"blk.\1.attn_output.\2"),
    (r"^model\.layers\.(\d+)\.mlp\.gate_proj\.(weight|bias)$", r"blk.\1.ffn_gate.\2"),
    (r"^model\.layers\.(\d+)\.mlp\.up_proj\.(weight|bias)$", r"blk.\1.ffn_up.\2"),
    (r"^model\.layers\.(\d+)\.mlp\.down_proj\.(weight|bias)$", r"blk.\1.ffn_down.\2"),
]


def gguf_name(hf_name):
    for pattern, replacement in NAME_RULES:
        if re.match(pattern, hf_name):
            return re.sub(pattern, replacement, hf_name)
    raise KeyError(hf_name)


def expected_type(name, ne, file_type):
    if len(ne) <= 1 or name.endswith("_norm.weight"):
        return F32
    ggml = FILE_TYPE_GGML[file_type]
    if ggml == Q8_0 and ne[0] % 32 != 0:
        return F16  # gguf-py cannot quantize a partial block: the converter falls back to F16
    return ggml


def permute(rows, n_head):
    """The converter's permute(w, n_head): w.reshape(n_head, 2, n // n_head // 2, ...)
    .swapaxes(1, 2).reshape(w.shape), on a list of rows."""
    n = len(rows)
    half = n // n_head // 2
    out = [None] * n
    for h in range(n_head):
        for j in range(2):
            for i in range(half):
                # Element (h, j, i) of the reshaped input lands at (h, i, j) of the output.
                out[h * 2 * half + i * 2 + j] = rows[h * 2 * half + j * half + i]
    return out


def unpermute(rows, n_head):
    n = len(rows)
    half = n // n_head // 2
    out = [None] * n
    for h in range(n_head):
        for i in range(half):
            for j in range(2):
                out[h * 2 * half + j * half + i] = rows[h * 2 * half + i * 2 + j]
    return out


def llama3_rope_factors(config):
    scaling = config["rope_scaling"]
    base = config["rope_theta"]
    dim = config["head_dim"]
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    out = []
    for i in range(0, dim, 2):
        freq = 1.0 / (base ** (i / dim))
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return out


def load_cases():
    if not FIXTURE_DIR:
        raise unittest.SkipTest("SOVAI_GGUF_FIXTURE_DIR is not set (run through ctest)")
    with open(os.path.join(FIXTURE_DIR, "manifest.json")) as f:
        return json.load(f)


class GgufFixtureTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cases = load_cases()
        cls.sources = {}

    def source(self, path):
        if path not in self.sources:
            self.sources[path] = read_safetensors(path)
        return self.sources[path]

    def for_each_file(self, check):
        """Runs check(case, config, vocab, gguf) on every file of the fixture, as subtests."""
        self.assertGreaterEqual(len(self.cases), 9, "fixture manifest too short")
        for case in self.cases:
            with self.subTest(gguf=os.path.basename(case["gguf"])):
                with open(case["config"]) as f:
                    config = json.load(f)
                with open(case["vocab"]) as f:
                    vocab = json.load(f)
                check(case, config, vocab, read_gguf.read(case["gguf"]))

    def assertKey(self, g, key, type_name, value):
        self.assertIn(key, g.metadata)
        got_type, got = g.metadata[key]
        self.assertEqual(got_type, type_name, key)
        if type_name in ("FLOAT32", "FLOAT64"):
            self.assertEqual(got, f32(value) if type_name == "FLOAT32" else value, key)
        else:
            self.assertEqual(got, value, key)

    def test_metadata(self):
        self.for_each_file(self._check_metadata)

    def _check_metadata(self, case, config, vocab, g):
        self.assertEqual(g.version, 3)
        self.assertKey(g, "general.architecture", "STRING", "llama")
        self.assertKey(g, "general.name", "STRING", case["name"])
        self.assertKey(g, "general.file_type", "UINT32", FILE_TYPE_FTYPE[case["file_type"]])
        self.assertKey(g, "general.quantization_version", "UINT32", 2)
        self.assertKey(g, "general.alignment", "UINT32", 32)
        u32 = {
            "llama.vocab_size": config["vocab_size"],
            "llama.context_length": config["max_position_embeddings"],
            "llama.embedding_length": config["hidden_size"],
            "llama.block_count": config["num_hidden_layers"],
            "llama.feed_forward_length": config["intermediate_size"],
            "llama.rope.dimension_count": config["head_dim"],
            "llama.attention.head_count": config["num_attention_heads"],
            "llama.attention.head_count_kv": config["num_key_value_heads"],
        }
        for key, value in u32.items():
            self.assertKey(g, key, "UINT32", value)
        self.assertKey(g, "llama.attention.layer_norm_rms_epsilon", "FLOAT32",
                       config["rms_norm_eps"])
        self.assertKey(g, "llama.rope.freq_base", "FLOAT32", config["rope_theta"])
        if config["head_dim"] * config["num_attention_heads"] != config["hidden_size"]:
            self.assertKey(g, "llama.attention.key_length", "UINT32", config["head_dim"])
            self.assertKey(g, "llama.attention.value_length", "UINT32", config["head_dim"])
        else:
            self.assertNotIn("llama.attention.key_length", g.metadata)
        scaling = config.get("rope_scaling") or {}
        if scaling.get("type") == "linear":
            self.assertKey(g, "llama.rope.scaling.type", "STRING", "linear")
            self.assertKey(g, "llama.rope.scaling.factor", "FLOAT32", scaling["factor"])
        else:
            self.assertNotIn("llama.rope.scaling.type", g.metadata)

        # Tokenizer, padded to vocab_size with [PAD<i>] tokens of type UNUSED.
        n_vocab = config["vocab_size"]
        pad = n_vocab - len(vocab["tokens"])
        tokens = vocab["tokens"] + [f"[PAD{i}]" for i in range(len(vocab["tokens"]), n_vocab)]
        types = vocab["token_types"] + [TOKEN_TYPE_UNUSED] * pad
        self.assertKey(g, "tokenizer.ggml.model", "STRING", vocab["model"])
        self.assertKey(g, "tokenizer.ggml.pre", "STRING", vocab["pre"])
        self.assertKey(g, "tokenizer.ggml.tokens", "ARRAY", ("STRING", tokens))
        self.assertKey(g, "tokenizer.ggml.token_type", "ARRAY", ("INT32", types))
        if vocab["model"] == "gpt2":
            self.assertKey(g, "tokenizer.ggml.merges", "ARRAY", ("STRING", vocab["merges"]))
            self.assertNotIn("tokenizer.ggml.scores", g.metadata)
        else:
            scores = [f32(s) for s in vocab["scores"]] + [-1000.0] * pad
            self.assertKey(g, "tokenizer.ggml.scores", "ARRAY", ("FLOAT32", scores))
            self.assertNotIn("tokenizer.ggml.merges", g.metadata)
        for field, key in (("bos_id", "bos_token_id"), ("eos_id", "eos_token_id"),
                           ("unk_id", "unknown_token_id"), ("pad_id", "padding_token_id")):
            if vocab[field] is None:
                self.assertNotIn("tokenizer.ggml." + key, g.metadata)
            else:
                self.assertKey(g, "tokenizer.ggml." + key, "UINT32", vocab[field])
        for field in ("add_bos", "add_eos"):
            key = f"tokenizer.ggml.{field}_token"
            if vocab[field] is None:
                self.assertNotIn(key, g.metadata)
            else:
                self.assertKey(g, key, "BOOL", vocab[field])
        if vocab["chat_template"]:
            self.assertKey(g, "tokenizer.chat_template", "STRING", vocab["chat_template"])
        else:
            self.assertNotIn("tokenizer.chat_template", g.metadata)

    def test_tensor_directory(self):
        self.for_each_file(self._check_tensor_directory)

    def _check_tensor_directory(self, case, config, vocab, g):
        source = self.source(case["safetensors"])
        expected = {}
        for hf_name, t in source.items():
            if config["tie_word_embeddings"] and hf_name == "lm_head.weight":
                continue
            name = gguf_name(hf_name)
            ne = list(reversed(t["shape"]))
            expected[name] = (ne, expected_type(name, ne, case["file_type"]))
        if (config.get("rope_scaling") or {}).get("rope_type") == "llama3":
            expected["rope_freqs.weight"] = ([config["head_dim"] // 2], F32)
        got = {t["name"]: (t["ne"], t["type"]) for t in g.tensors}
        self.assertEqual(got, expected)
        if config["tie_word_embeddings"]:
            self.assertNotIn("output.weight", got)
        for t in g.tensors:
            self.assertEqual(t["offset"] % g.alignment, 0, t["name"])

    def test_tensor_values(self):
        self.for_each_file(self._check_tensor_values)

    def _check_tensor_values(self, case, config, vocab, g):
        source = self.source(case["safetensors"])
        by_name = {t["name"]: t for t in g.tensors}
        n_head = config["num_attention_heads"]
        n_kv = config["num_key_value_heads"]
        for hf_name, src in source.items():
            if config["tie_word_embeddings"] and hf_name == "lm_head.weight":
                continue
            t = by_name[gguf_name(hf_name)]
            shape = src["shape"]
            cols = shape[1] if len(shape) == 2 else 1
            rows = [src["values"][r * cols:(r + 1) * cols] for r in range(shape[0])]
            heads = n_head if ".q_proj." in hf_name else n_kv if ".k_proj." in hf_name else 0
            expected_rows = permute(rows, heads) if heads else rows
            flat = [v for row in expected_rows for v in row]
            got = read_gguf.tensor_values(g, t)
            self.assertEqual(len(got), len(flat), t["name"])
            if heads:
                # And back: un-permuting the file's rows gives the Hugging Face rows.
                got_rows = [got[r * cols:(r + 1) * cols] for r in range(shape[0])]
                back = [v for row in unpermute(got_rows, heads) for v in row]
                if t["type"] in (F32,) or (t["type"] == BF16 and src["dtype"] == "BF16"):
                    self.assertEqual(back, src["values"], t["name"])
            if t["type"] == F32:
                self.assertEqual(got, flat, t["name"])
            elif t["type"] == F16:
                self.assertEqual(got, [f16_round(v) for v in flat], t["name"])
            elif t["type"] == BF16:
                self.assertEqual(got, [bf16_round(v) for v in flat], t["name"])
            elif t["type"] == Q8_0:
                self.assertEqual(read_gguf.tensor_bytes(g, t), q8_0_reference(flat),
                                 t["name"])
                for b in range(0, len(flat), 32):
                    block = flat[b:b + 32]
                    d = max(abs(v) for v in block) / 127
                    stored = struct.unpack("<e", struct.pack("<e", d))[0]
                    bound = d / 2 + 127 * abs(d - stored) + 1e-9
                    for v, w in zip(block, got[b:b + 32]):
                        self.assertLessEqual(abs(v - w), bound, t["name"])
            else:
                self.fail(f"{t['name']}: unexpected type {t['type']}")

    def test_rope_freqs(self):
        seen = []

        def check(case, config, vocab, g):
            if (config.get("rope_scaling") or {}).get("rope_type") != "llama3":
                return
            seen.append(case["gguf"])
            t = next(t for t in g.tensors if t["name"] == "rope_freqs.weight")
            got = read_gguf.tensor_values(g, t)
            expected = llama3_rope_factors(config)
            self.assertEqual(len(got), len(expected))
            for a, b in zip(got, expected):
                self.assertAlmostEqual(a, b, delta=1e-5 * b)
            # The fixture's frequencies cover all three regimes.
            self.assertEqual(got[0], 1.0)
            self.assertEqual(got[-1], config["rope_scaling"]["factor"])
            self.assertTrue(any(1.0 < v < config["rope_scaling"]["factor"] for v in got))

        self.for_each_file(check)
        self.assertGreater(len(seen), 0)

    def test_q8_0_fallback_is_exercised(self):
        # The fixture must exercise what it claims: a Q8_0 file with an F16 fallback tensor.
        fallback = []

        def check(case, config, vocab, g):
            if case["file_type"] == "q8_0":
                fallback.extend(t["name"] for t in g.tensors if t["type"] == F16)

        self.for_each_file(check)
        self.assertIn("blk.0.ffn_down.weight", fallback)

    def test_cli_dumps_json(self):
        import subprocess
        import sys
        case = self.cases[0]
        out = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__),
                                                           "read_gguf.py"), case["gguf"]],
                             check=True, capture_output=True, text=True).stdout
        dump = json.loads(out)
        self.assertEqual(dump["metadata"]["general.architecture"]["value"], "llama")
        self.assertEqual(dump["tensors"][0]["name"], "rope_freqs.weight")


class PermutationSelfTest(unittest.TestCase):
    def test_permute_interleaves_the_halves_of_each_head(self):
        self.assertEqual(permute(list(range(8)), 1), [0, 4, 1, 5, 2, 6, 3, 7])
        self.assertEqual(permute(list(range(8)), 2), [0, 2, 1, 3, 4, 6, 5, 7])
        self.assertEqual(unpermute(permute(list(range(24)), 3), 3), list(range(24)))

    def test_q8_0_reference_rounds_halves_away_from_zero(self):
        block = [127.0, 2.5, -2.5, 0.5] + [0.0] * 28
        q = q8_0_reference(block)
        self.assertEqual(q[:2], b"\x00\x3c")  # d = 1.0
        self.assertEqual(struct.unpack("<4b", q[2:6]), (127, 3, -3, 1))


if __name__ == "__main__":
    unittest.main()
