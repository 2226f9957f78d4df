#!/usr/bin/env python3
"""Writes the serving benchmark's model: a Hugging Face LlamaForCausalLM directory shaped like
Qwen2.5-0.5B (24 layers, hidden 896, 14 heads over 2 KV heads of 64, MLP 4864, vocab 151936, tied
embeddings) with seeded random bf16 weights, and the real Qwen2.5 tokenizer, so that prompts
tokenize to realistic lengths. Random weights decode at the same speed as trained ones: the
benchmark measures speed, never text quality.

Usage: make_model.py [DIR]   (default $SOVAI_BENCH_CACHE/qwen2.5-0.5b-shape, under
~/.cache/sovai-bench). A directory that is already complete is kept: the weights are the same
for the same seed, and writing 1 GB again costs a minute. Prints the directory.
Needs numpy; run with /usr/bin/python3."""
import json
import os
import shutil
import struct
import sys

import numpy as np

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOKENIZER_DIR = os.path.join(REPO, "node_modules", "@lenml", "tokenizer-qwen2_5", "models")
CACHE = os.environ.get("SOVAI_BENCH_CACHE", os.path.expanduser("~/.cache/sovai-bench"))
SEED = 0
STD = 0.02
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "rope_theta": 1000000.0,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "torch_dtype": "bfloat16",
}
# Written last: its presence means the directory is complete.
DONE_MARK = "model.safetensors"


def tensor_shapes():
    """(name, shape) in Hugging Face naming, the order they are written."""
    C, F = CONFIG["hidden_size"], CONFIG["intermediate_size"]
    V, D = CONFIG["vocab_size"], CONFIG["head_dim"]
    H, KV = CONFIG["num_attention_heads"], CONFIG["num_key_value_heads"]
    out = [("model.embed_tokens.weight", (V, C))]
    for layer in range(CONFIG["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        out += [
            (p + "input_layernorm.weight", (C,)),
            (p + "self_attn.q_proj.weight", (H * D, C)),
            (p + "self_attn.k_proj.weight", (KV * D, C)),
            (p + "self_attn.v_proj.weight", (KV * D, C)),
            (p + "self_attn.o_proj.weight", (C, H * D)),
            (p + "post_attention_layernorm.weight", (C,)),
            (p + "mlp.gate_proj.weight", (F, C)),
            (p + "mlp.up_proj.weight", (F, C)),
            (p + "mlp.down_proj.weight", (C, F)),
        ]
    out.append(("model.norm.weight", (C,)))
    return out


def to_bf16_bytes(x):
    """float32 array -> bf16 bytes, rounded to nearest even (as torch's .to(bfloat16))."""
    bits = x.astype(np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return rounded.astype(np.uint16).tobytes()


def write_safetensors(path):
    shapes = tensor_shapes()
    header, offset = {}, 0
    for name, shape in shapes:
        size = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    rng = np.random.default_rng(SEED)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for name, shape in shapes:
            if len(shape) == 1:  # RMSNorm weights
                f.write(to_bf16_bytes(np.ones(shape, np.float32)))
            else:
                f.write(to_bf16_bytes(rng.standard_normal(shape, np.float32) * np.float32(STD)))
    os.replace(tmp, path)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(CACHE, "qwen2.5-0.5b-shape")
    if os.path.exists(os.path.join(out, DONE_MARK)):
        print(out)
        return
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if not os.path.exists(os.path.join(TOKENIZER_DIR, name)):
            sys.exit("make_model: %s is missing; run 'npm ci' in %s" % (
                os.path.join(TOKENIZER_DIR, name), REPO))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": CONFIG["bos_token_id"], "eos_token_id": CONFIG["eos_token_id"]}, f)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(TOKENIZER_DIR, name), os.path.join(out, name))
    write_safetensors(os.path.join(out, DONE_MARK))
    print(out)


if __name__ == "__main__":
    main()
