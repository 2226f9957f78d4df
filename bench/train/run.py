#!/usr/bin/env python3
"""LoRA training step: sovai's engine against PyTorch (Debian's python3-torch) in one run, on the
same model, batch, rank and thread count. Prints tokens/s and peak memory of each with the ratio,
and the engine's achieved GFLOP/s against this machine's sgemm GFLOP/s measured in the same run.
Asserts nothing. Run with /usr/bin/python3 (make bench-train does).

Env: BUILD_DIR (build), THREADS (all cores), ROUNDS (3), STEPS (5), BATCH (4), SEQ (256)."""
import os
import sys

# Both sides get the same BLAS kernels and OpenMP waiting as sovai-engine gives itself (it sets
# these and restarts; see src/engine/main.cc): chosen when the libraries load, hence the restart.
if "OPENBLAS_CORETYPE" not in os.environ:
    flags = open("/proc/cpuinfo").read()
    core = "SkylakeX" if " avx512f" in flags else "Haswell" if " avx2" in flags else ""
    if core:
        os.environ["OPENBLAS_CORETYPE"] = core
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")
        os.execv(sys.executable, [sys.executable] + sys.argv)

import json
import math
import resource
import statistics
import struct
import subprocess
import tempfile
import time

import torch
import torch.nn.functional as F

BUILD = os.environ.get("BUILD_DIR", "build")
THREADS = int(os.environ.get("THREADS", os.cpu_count()))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
STEPS = int(os.environ.get("STEPS", "5"))
BATCH = int(os.environ.get("BATCH", "4"))
SEQ = int(os.environ.get("SEQ", "256"))
RANK = 16
CFG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 8192,
       "hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 4,
       "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 1024,
       "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
       "torch_dtype": "float32"}
PROJ = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
        "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}


def make_weights():
    g = torch.Generator().manual_seed(0)
    C, F_, V = CFG["hidden_size"], CFG["intermediate_size"], CFG["vocab_size"]
    H, KV = CFG["num_attention_heads"], CFG["num_key_value_heads"]
    D = C // H
    shapes = {"q_proj": (H * D, C), "k_proj": (KV * D, C), "v_proj": (KV * D, C), "o_proj": (C, H * D),
              "gate_proj": (F_, C), "up_proj": (F_, C), "down_proj": (C, F_)}
    W = {"model.embed_tokens.weight": torch.randn(V, C, generator=g) * 0.02,
         "model.norm.weight": torch.ones(C), "lm_head.weight": torch.randn(V, C, generator=g) * 0.02}
    for l in range(CFG["num_hidden_layers"]):
        p = "model.layers.%d." % l
        W[p + "input_layernorm.weight"] = torch.ones(C)
        W[p + "post_attention_layernorm.weight"] = torch.ones(C)
        for name, shape in shapes.items():
            W["%s%s.%s.weight" % (p, PROJ[name], name)] = torch.randn(*shape, generator=g) * 0.02
    return W


def write_model(path, W):
    os.makedirs(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(CFG, f)
    header, offset, blobs = {}, 0, []
    for name, t in W.items():
        data = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for b in blobs:
            f.write(b)


def torch_step_rate(W):
    """PyTorch: frozen base, LoRA (r=16) on all seven projections, AdamW. Returns (tokens/s, peak MiB)."""
    torch.set_num_threads(THREADS)
    C, H, KV = CFG["hidden_size"], CFG["num_attention_heads"], CFG["num_key_value_heads"]
    D, eps = C // H, CFG["rms_norm_eps"]
    lora = {}
    for key, w in W.items():
        for name in PROJ:
            if key.endswith(name + ".weight"):
                lora[key] = (torch.zeros(RANK, w.shape[1]).uniform_(-0.01, 0.01).requires_grad_(True),
                             torch.zeros(w.shape[0], RANK).requires_grad_(True))
    params = [t for pair in lora.values() for t in pair]
    opt = torch.optim.AdamW(params, lr=1e-4)
    scale = 2.0
    inv = 1.0 / (CFG["rope_theta"] ** (torch.arange(0, D, 2).float() / D))
    pos = torch.arange(SEQ).float()[:, None] * inv
    emb = torch.cat((pos, pos), -1)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    mask = torch.full((SEQ, SEQ), float("-inf")).triu(1)
    n = BATCH * SEQ
    tokens = (torch.arange(n) * 7919 % CFG["vocab_size"]).view(BATCH, SEQ)
    targets = (torch.arange(n) * 104729 + 1) % CFG["vocab_size"]

    def lin(h, key):
        a, b = lora[key]
        return h @ W[key].T + scale * ((h @ a.T) @ b.T)

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def rot(x):
        return torch.cat((-x[..., D // 2:], x[..., :D // 2]), -1)

    def step():
        x = W["model.embed_tokens.weight"][tokens]
        for l in range(CFG["num_hidden_layers"]):
            p = "model.layers.%d." % l
            h = rms(x, W[p + "input_layernorm.weight"])
            q = lin(h, p + "self_attn.q_proj.weight").view(BATCH, SEQ, H, D)
            k = lin(h, p + "self_attn.k_proj.weight").view(BATCH, SEQ, KV, D)
            v = lin(h, p + "self_attn.v_proj.weight").view(BATCH, SEQ, KV, D)
            q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
            att = ((q @ k.transpose(-1, -2)) / math.sqrt(D) + mask).softmax(-1) @ v
            x = x + lin(att.transpose(1, 2).reshape(BATCH, SEQ, C), p + "self_attn.o_proj.weight")
            h = rms(x, W[p + "post_attention_layernorm.weight"])
            g = lin(h, p + "mlp.gate_proj.weight")
            u = lin(h, p + "mlp.up_proj.weight")
            x = x + lin(F.silu(g) * u, p + "mlp.down_proj.weight")
        logits = rms(x, W["model.norm.weight"]) @ W["lm_head.weight"].T
        loss = F.cross_entropy(logits.view(n, -1), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()  # warm-up
    times = []
    for _ in range(STEPS):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return n / statistics.median(times), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def step_flops():
    """Matmul FLOPs of one LoRA step (forward, input gradients, LoRA gradients; attention counted
    causal), the work both sides must do."""
    C, Fd, V, L = CFG["hidden_size"], CFG["intermediate_size"], CFG["vocab_size"], CFG["num_hidden_layers"]
    H, KV = CFG["num_attention_heads"], CFG["num_key_value_heads"]
    D = C // H
    n = BATCH * SEQ
    proj = C * H * D + 2 * C * KV * D + H * D * C + 3 * C * Fd
    lora = RANK * (2 * C * 4 + 2 * C + 2 * Fd + C + Fd + 2 * C)  # rough: in + out per projection
    per_layer = 2 * n * proj * 2 + 2 * n * lora * 3  # forward + input grad; LoRA fwd + 2 grads
    attention = 2 * 2 * n * SEQ / 2 * H * D * 3       # QK^T and PV, causal, fwd + 2x bwd
    head = 2 * n * C * V * 2                           # logits + dhidden
    return L * (per_layer + attention) + head


def sgemm_gflops():
    torch.set_num_threads(THREADS)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    a @ b
    times = []
    for _ in range(5):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * 2048 ** 3 / statistics.median(times) / 1e9


def main():
    bench = os.path.join(BUILD, "bench", "lora_step_bench")
    if not os.path.exists(bench):
        sys.exit("bench: %s is missing; build first (make build)" % bench)
    W = make_weights()
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model")
        write_model(model, W)
        ours, theirs = [], []
        for _ in range(ROUNDS):
            out = subprocess.run([bench, model, str(BATCH), str(SEQ), str(RANK), str(STEPS), str(THREADS)],
                                 capture_output=True, text=True, check=True)
            ours.append(json.loads(out.stdout))
            # PyTorch in a fresh process, so that its peak memory is its own.
            code = "import sys; sys.argv=['x']; import runpy; m = runpy.run_path(%r); " \
                   "print(m['torch_step_rate'](m['make_weights']()))" % os.path.abspath(__file__)
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                 env=dict(os.environ, THREADS=str(THREADS)))
            theirs.append(eval(out.stdout.strip().splitlines()[-1]))
    ours_tps = statistics.median(o["tokens_per_second"] for o in ours)
    ours_mem = statistics.median(o["peak_rss_mib"] for o in ours)
    torch_tps = statistics.median(t[0] for t in theirs)
    torch_mem = statistics.median(t[1] for t in theirs)
    peak = sgemm_gflops()
    achieved = step_flops() * ours_tps / (BATCH * SEQ) / 1e9
    print("LoRA step, llama %dx%d, vocab %d, r=%d, batch %dx%d, %d threads, median of %d rounds" % (
        CFG["num_hidden_layers"], CFG["hidden_size"], CFG["vocab_size"], RANK, BATCH, SEQ, THREADS, ROUNDS))
    print("| | sovai | pytorch %s | ratio |" % torch.__version__)
    print("|---|---|---|---|")
    print("| tokens/s | %.0f | %.0f | %.2fx |" % (ours_tps, torch_tps, ours_tps / torch_tps))
    print("| peak memory MiB | %.0f | %.0f | %.2fx |" % (ours_mem, torch_mem, ours_mem / torch_mem))
    print("achieved %.1f GFLOP/s = %.0f%% of this machine's sgemm (%.1f GFLOP/s, torch.mm 2048^3)" % (
        achieved, 100 * achieved / peak, peak))


if __name__ == "__main__":
    main()
