#!/usr/bin/env python3
"""Checks sovai's Llama-family model against an independent PyTorch implementation.

For random small configs (GQA, tied embeddings, qkv bias, q/k norm, rope scaling, sliding window,
packed samples) this script writes a model directory and LoRA adapters, runs our engine through
llama_golden_driver, and compares: logits, the loss, every LoRA gradient, and the losses of 10
AdamW steps. The reference below is written from the transformers equations, not from our code.

Usage: llama_golden.py DRIVER   (exit 77 when torch is missing: the test is skipped, not passed)
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch is not importable: install Debian's python3-torch", file=sys.stderr)
    sys.exit(77)

torch.set_num_threads(1)
PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        data = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)


def inv_freq(cfg):
    d = cfg["head_dim"]
    base = cfg["rope_theta"]
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    rs = cfg.get("rope_scaling")
    if rs and rs["rope_type"] == "linear":
        inv = inv / rs["factor"]
    elif rs and rs["rope_type"] == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / lo, old / hi
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv = torch.where(medium, smoothed, scaled)
    return inv.to(torch.float32)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def forward(cfg, W, lora, scale, batch):
    """Logits [B*T, V]."""
    x = hidden_states(cfg, W, lora, scale, batch)
    head = W["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else W["lm_head.weight"]
    return (x @ head.T).view(batch["batch"] * batch["seq_len"], -1)


def hidden_states(cfg, W, lora, scale, batch):
    """The final hidden states [B, T, C], after the final norm (what the head and an embedding
    model's pooling read)."""
    B, T = batch["batch"], batch["seq_len"]
    H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    tokens = torch.tensor(batch["tokens"]).view(B, T)
    pos = torch.tensor(batch["positions"]).view(B, T)
    seg = torch.tensor(batch["segments"]).view(B, T)
    x = W["model.embed_tokens.weight"][tokens]
    freqs = pos[..., None].to(torch.float32) * inv_freq(cfg)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, :, None, :], emb.sin()[:, :, None, :]
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    window = cfg.get("sliding_window") if cfg["model_type"] == "mistral" else None

    def proj(prefix, name, h):
        y = h @ W[prefix + name + ".weight"].T
        if prefix + name + ".bias" in W:
            y = y + W[prefix + name + ".bias"]
        key = "base_model.model." + prefix + name
        if key + ".lora_A.weight" in lora:
            y = y + scale * ((h @ lora[key + ".lora_A.weight"].T) @ lora[key + ".lora_B.weight"].T)
        return y

    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = rmsnorm(x, W[p + "input_layernorm.weight"], eps)
        q = proj(p + "self_attn.", "q_proj", h).view(B, T, H, D)
        k = proj(p + "self_attn.", "k_proj", h).view(B, T, KV, D)
        v = proj(p + "self_attn.", "v_proj", h).view(B, T, KV, D)
        if cfg["model_type"] == "qwen3":
            q = rmsnorm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rmsnorm(k, W[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, D]
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        allowed = (j <= i)[None, :, :] & (seg[:, :, None] == seg[:, None, :])
        if window:
            allowed = allowed & ((i - j) < window)[None, :, :]
        scores = scores.masked_fill(~allowed[:, None, :, :], float("-inf"))
        att = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * D)
        x = x + proj(p + "self_attn.", "o_proj", att)
        h = rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
        g = proj(p + "mlp.", "gate_proj", h)
        u = proj(p + "mlp.", "up_proj", h)
        x = x + proj(p + "mlp.", "down_proj", F.silu(g) * u)
    return rmsnorm(x, W["model.norm.weight"], eps)


def make_case(name, seed, model_type="llama", layers=2, hidden=32, heads=4, kv=2, ffn=48, vocab=61,
              tied=False, bias=False, rope_scaling=None, window=None, packed=False, rank=4,
              rslora=False, targets=None, base="f32", batch=2, seq=9):
    g = torch.Generator().manual_seed(seed)
    D = hidden // heads
    cfg = {
        "architectures": [{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                           "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[model_type]],
        "model_type": model_type, "vocab_size": vocab, "hidden_size": hidden,
        "intermediate_size": ffn, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv, "head_dim": D, "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0 if not rope_scaling else 500000.0,
        "tie_word_embeddings": tied, "hidden_act": "silu", "torch_dtype": "float32",
    }
    if rope_scaling:
        cfg["rope_scaling"] = rope_scaling
    if model_type == "llama":
        cfg["attention_bias"] = bias
    if model_type == "mistral":
        cfg["sliding_window"] = window
    W = {"model.embed_tokens.weight": torch.randn(vocab, hidden, generator=g) * 0.5}
    for l in range(layers):
        p = "model.layers.%d." % l
        W[p + "input_layernorm.weight"] = 1 + 0.1 * torch.randn(hidden, generator=g)
        W[p + "post_attention_layernorm.weight"] = 1 + 0.1 * torch.randn(hidden, generator=g)
        shapes = {"q_proj": (heads * D, hidden), "k_proj": (kv * D, hidden), "v_proj": (kv * D, hidden),
                  "o_proj": (hidden, heads * D), "gate_proj": (ffn, hidden), "up_proj": (ffn, hidden),
                  "down_proj": (hidden, ffn)}
        for proj_name, shape in shapes.items():
            sub = "mlp." if proj_name in ("gate_proj", "up_proj", "down_proj") else "self_attn."
            W[p + sub + proj_name + ".weight"] = torch.randn(*shape, generator=g) / math.sqrt(shape[1])
        has_qkv_bias = model_type == "qwen2" or (model_type == "llama" and bias)
        if has_qkv_bias:
            for proj_name in ("q_proj", "k_proj", "v_proj"):
                W[p + "self_attn." + proj_name + ".bias"] = 0.1 * torch.randn(shapes[proj_name][0], generator=g)
        if model_type == "llama" and bias:
            W[p + "self_attn.o_proj.bias"] = 0.1 * torch.randn(hidden, generator=g)
        if model_type == "qwen3":
            W[p + "self_attn.q_norm.weight"] = 1 + 0.1 * torch.randn(D, generator=g)
            W[p + "self_attn.k_norm.weight"] = 1 + 0.1 * torch.randn(D, generator=g)
    W["model.norm.weight"] = 1 + 0.1 * torch.randn(hidden, generator=g)
    if not tied:
        W["lm_head.weight"] = torch.randn(vocab, hidden, generator=g) / math.sqrt(hidden)
    targets = targets or PROJ
    lora = {}
    for l in range(layers):
        for proj_name in targets:
            sub = "mlp." if proj_name in ("gate_proj", "up_proj", "down_proj") else "self_attn."
            w = W["model.layers.%d.%s%s.weight" % (l, sub, proj_name)]
            key = "base_model.model.model.layers.%d.%s%s" % (l, sub, proj_name)
            lora[key + ".lora_A.weight"] = torch.randn(rank, w.shape[1], generator=g) / math.sqrt(w.shape[1])
            # B is non-zero (PEFT starts it at zero) so that every gradient is exercised.
            lora[key + ".lora_B.weight"] = torch.randn(w.shape[0], rank, generator=g) * 0.1
    N = batch * seq
    tokens = torch.randint(0, vocab, (N,), generator=g).tolist()
    targets_ids = torch.randint(0, vocab, (N,), generator=g).tolist()
    for n in range(0, N, 5):
        targets_ids[n] = -100  # ignored positions
    positions, segments = [], []
    for b in range(batch):
        cut = seq // 2 if packed else seq  # two samples in a row: positions restart, no cross-attention
        for t in range(seq):
            positions.append(t if t < cut else t - cut)
            segments.append(0 if t < cut else 1)
    return {
        "name": name, "config": cfg, "weights": W, "lora": lora,
        "options": {"rank": rank, "alpha": 8.0, "rslora": rslora, "targets": targets, "base": base,
                    "learning_rate": 5e-3, "weight_decay": 0.01, "steps": 10},
        "batch": {"batch": batch, "seq_len": seq, "tokens": tokens, "targets": targets_ids,
                  "positions": positions, "segments": segments},
    }


def reference(case, W):
    cfg, opts, batch = case["config"], case["options"], case["batch"]
    scale = opts["alpha"] / (math.sqrt(opts["rank"]) if opts["rslora"] else opts["rank"])
    lora = {k: v.clone().requires_grad_(True) for k, v in case["lora"].items()}
    targets = torch.tensor(batch["targets"])
    logits = forward(cfg, W, lora, scale, batch)
    loss = F.cross_entropy(logits, targets, ignore_index=-100)
    loss.backward()
    grads = {k: v.grad.clone() for k, v in lora.items()}
    # 10 AdamW steps from the same start.
    params = {k: v.detach().clone().requires_grad_(True) for k, v in case["lora"].items()}
    opt = torch.optim.AdamW(list(params.values()), lr=opts["learning_rate"], weight_decay=opts["weight_decay"])
    losses = []
    for _ in range(opts["steps"]):
        opt.zero_grad()
        step_loss = F.cross_entropy(forward(cfg, W, params, scale, batch), targets, ignore_index=-100)
        step_loss.backward()
        opt.step()
        losses.append(step_loss.item())
    return logits.detach(), loss.item(), grads, losses


def close(name, ours, theirs, rtol, atol):
    ours = torch.tensor(ours, dtype=torch.float32).view(theirs.shape)
    diff = (ours - theirs).abs()
    bound = atol + rtol * theirs.abs()
    if bool((diff > bound).any()):
        worst = int((diff - bound).argmax())
        raise AssertionError("%s: element %d is %r, reference %r (max abs diff %.3g)" % (
            name, worst, float(ours.view(-1)[worst]), float(theirs.view(-1)[worst]), float(diff.max())))


def run_case(driver, case, workdir):
    d = os.path.join(workdir, case["name"])
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(case["config"], f)
    write_safetensors(os.path.join(d, "model.safetensors"), case["weights"])
    write_safetensors(os.path.join(d, "lora.safetensors"), case["lora"])
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump({"options": case["options"], "batch": case["batch"]}, f)
    out = subprocess.run([driver, d], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise AssertionError("%s: driver failed (%d): %s" % (case["name"], out.returncode, out.stderr))
    ours = json.loads(out.stdout)
    W = dict(case["weights"])
    # A quantized base is compared with the reference running on the very weights we computed with.
    for name, values in ours.get("dequantized", {}).items():
        W[name] = torch.tensor(values, dtype=torch.float32).view(W[name].shape)
    logits, loss, grads, losses = reference(case, W)
    count = sum(1 for t in case["batch"]["targets"] if t >= 0)
    # f32 throughout on both sides, summed in different orders: differences of a few ulps per
    # reduction, amplified by depth; the bounds are ~100x what we observe.
    close(case["name"] + " logits", ours["logits"], logits, 1e-4, 1e-4)
    if abs(ours["loss_sum"] / count - loss) > 1e-5 * max(1, abs(loss)):
        raise AssertionError("%s: loss %r, reference %r" % (case["name"], ours["loss_sum"] / count, loss))
    for name, g in grads.items():
        if name not in ours["grads"]:
            raise AssertionError("%s: no gradient for %s" % (case["name"], name))
        close(case["name"] + " grad " + name, ours["grads"][name], g, 2e-3, 2e-5)
    if len(ours["losses"]) != len(losses):
        raise AssertionError("%s: %d AdamW losses, reference %d" % (case["name"], len(ours["losses"]), len(losses)))
    for step, (a, b) in enumerate(zip(ours["losses"], losses)):
        if abs(a - b) > 1e-4 * max(1, abs(b)):
            raise AssertionError("%s: AdamW step %d loss %r, reference %r" % (case["name"], step + 1, a, b))
    if not losses[-1] < losses[0]:
        raise AssertionError("%s: the reference loss did not fall; the case checks nothing" % case["name"])
    print("ok %-28s loss %.6f  (%d logits, %d gradients, %d steps)" % (
        case["name"], loss, logits.numel(), len(grads), len(losses)))


def main():
    driver = sys.argv[1]
    cases = [
        make_case("llama-gqa", 1),
        make_case("llama-tied-bias", 2, tied=True, bias=True, kv=4),
        make_case("llama-mqa-rslora", 3, kv=1, rslora=True, targets=["q_proj", "v_proj"]),
        make_case("llama31-rope-scaling", 4, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64}),
        make_case("llama-linear-rope-packed", 5, rope_scaling={"rope_type": "linear", "factor": 2.0}, packed=True),
        make_case("mistral-sliding-window", 6, model_type="mistral", window=3, seq=11),
        make_case("qwen2-qkv-bias", 7, model_type="qwen2", tied=True),
        make_case("qwen3-qk-norm", 8, model_type="qwen3", hidden=48, heads=4, kv=2),
        make_case("qlora-nf4", 9, base="nf4", hidden=64, ffn=128, heads=4, kv=2),
    ]
    only = os.environ.get("SOVAI_GOLDEN_CASE")
    with tempfile.TemporaryDirectory() as workdir:
        for case in cases:
            if only and case["name"] != only:
                continue
            run_case(driver, case, workdir)


if __name__ == "__main__":
    main()
