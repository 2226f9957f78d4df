#!/usr/bin/python3
"""Golden test: the reference backend's ops against PyTorch, on random inputs.

usage: /usr/bin/python3 ops_golden.py PATH/TO/reference_ops_driver

Each case writes its inputs as raw f32/int32 files, runs reference_ops_driver (one op of
src/kernels/reference per run, see its header) and compares what it wrote with PyTorch computing
the same thing the way Hugging Face transformers / PEFT / torch.optim do it:

  rmsnorm         LlamaRMSNorm                           forward, d(x), d(weight) by autograd
  rope            transformers' inv_freq (default, linear, llama3) and apply_rotary_pos_emb
                  (rotate_half)                          forward, d(x)
  attention       repeat_kv + causal mask (+ sliding window, + packed segments), softmax
                                                         forward, log-sum-exp, d(q, k, v)
  swiglu          silu(gate) * up                        forward, d(gate), d(up)
  cross_entropy   F.cross_entropy(ignore_index=-100), chunked on our side
                                                         loss, d(hidden), d(head weight)
  lora            PEFT's y + scale * B(A(x)), no dropout forward, d(x, A, B)
  adamw           torch.optim.AdamW, 10 steps            param, exp_avg, exp_avg_sq
  embedding       F.embedding with repeated ids          forward, d(table)
  linear          F.linear with bias                     forward, d(x, w, bias)
  nf4 map         bitsandbytes' create_dynamic_map(signed=True), bit for bit

PyTorch computes in float64 from the same f32 inputs (the exact math, to ~1e-16), except where
the f32 rounding IS the contract: the RoPE angle (position * inv_freq rounded to f32, as
transformers computes it), transformers' f32 inv_freq, torch.optim.AdamW's f32 state, and the
dynamic map. Our reference sums in double and rounds each output once to f32, so against float64
the error is about one f32 rounding of each output (6e-8 relative) plus f32 element-wise math
(exp, cos, silu in f32); the tolerances below are stated per case with that budget.

Exit status: 0 when every check passes, 1 otherwise, 77 (ctest: skipped) when torch cannot be
imported. Use Debian's python3-torch: /usr/bin/python3, not a python3 earlier on PATH.
"""

import json
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the only reason to skip
    print(f"skipped: cannot import torch/numpy ({e})")
    sys.exit(77)

torch.set_num_threads(1)
RNG = np.random.default_rng(20240601)
RESULTS = {"passed": 0, "failed": 0}


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


class Driver:
    def __init__(self, binary, workdir):
        self.binary = binary
        self.workdir = workdir
        self.count = 0

    def run(self, op, params, inputs):
        """Writes inputs, runs one op, returns a reader of its outputs."""
        self.count += 1
        d = os.path.join(self.workdir, f"{self.count:02d}_{op}")
        os.mkdir(d)
        with open(os.path.join(d, "request.json"), "w") as f:
            json.dump({"op": op, "params": params}, f)
        for name, array in inputs.items():
            assert array.dtype in (np.float32, np.int32), (name, array.dtype)
            np.ascontiguousarray(array).tofile(os.path.join(d, name + ".bin"))
        proc = subprocess.run([self.binary, d], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"driver failed on {op}: {proc.stderr.strip()}")

        def out(name, dtype=np.float32):
            return np.fromfile(os.path.join(d, f"out_{name}.bin"), dtype=dtype)

        return out


def check(name, ours, theirs, rtol, atol):
    """ours ~ theirs elementwise: |ours - theirs| <= atol + rtol * |theirs|."""
    ours = np.asarray(ours, dtype=np.float64).ravel()
    theirs = np.asarray(theirs, dtype=np.float64).ravel()
    if ours.shape != theirs.shape:
        print(f"FAIL {name}: shape {ours.shape} vs {theirs.shape}")
        RESULTS["failed"] += 1
        return
    err = np.abs(ours - theirs)
    bound = atol + rtol * np.abs(theirs)
    worst = int(np.argmax(err - bound))
    if np.all(err <= bound):
        RESULTS["passed"] += 1
        print(f"ok   {name}: max |err| {err.max():.3g}")
    else:
        RESULTS["failed"] += 1
        print(f"FAIL {name}: element {worst}: ours {ours[worst]!r} torch {theirs[worst]!r} "
              f"(|err| {err[worst]:.3g} > {bound[worst]:.3g}); "
              f"{int(np.sum(err > bound))} of {err.size} out of tolerance")


def t64(a, grad=False):
    t = torch.tensor(a, dtype=torch.float64)
    return t.requires_grad_(grad)


# --- cases ------------------------------------------------------------------------------------

def case_linear(drv):
    n, i, o = 5, 48, 16
    x, w, b, dout = f32(n, i), f32(o, i), f32(o), f32(n, o)
    out = drv.run("linear", {"n": n, "in": i, "out": o}, {"x": x, "w": w, "bias": b, "dout": dout})
    tx, tw, tb = t64(x, True), t64(w, True), t64(b, True)
    y = F.linear(tx, tw, tb)
    (y * t64(dout)).sum().backward()
    # Sums of 48 (or 5) products of O(1) values, rounded once to f32 (|y| <~ 20): 1e-6 absolute
    # and relative covers the f32 rounding with margin.
    tol = dict(rtol=1e-6, atol=1e-6)
    check("linear y", out("y"), y.detach(), **tol)
    check("linear dx", out("dx"), tx.grad, **tol)
    check("linear dw", out("dw"), tw.grad, **tol)
    check("linear dbias", out("dbias"), tb.grad, **tol)


def case_rmsnorm(drv):
    n, c, eps = 6, 64, 1e-5
    x, weight, dout = f32(n, c), f32(c), f32(n, c)
    out = drv.run("rmsnorm", {"n": n, "c": c, "eps": eps},
                  {"x": x, "weight": weight, "dout": dout})
    tx, tw = t64(x, True), t64(weight, True)
    # LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * weight. eps goes in as f32 on our side.
    var = tx.pow(2).mean(-1, keepdim=True)
    y = tw * (tx * torch.rsqrt(var + float(np.float32(eps))))
    (y * t64(dout)).sum().backward()
    # Outputs are one f32 rounding of a double value (plus the f32 rstd used in backward):
    # 2e-6 relative, 1e-6 absolute near zero.
    tol = dict(rtol=2e-6, atol=1e-6)
    check("rmsnorm y", out("y"), y.detach(), **tol)
    check("rmsnorm dx", out("dx"), tx.grad, **tol)
    check("rmsnorm dweight", out("dweight"), tw.grad, **tol)


def hf_inv_freq(head_dim, theta, scaling):
    """transformers' modeling_rope_utils, in f32 as transformers runs it."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    kind = scaling["scaling"]
    if kind == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif kind == "llama3":
        factor = scaling["factor"]
        low_freq_factor = scaling["low_freq_factor"]
        high_freq_factor = scaling["high_freq_factor"]
        old_context_len = scaling["original_max_position_embeddings"]
        low_freq_wavelen = old_context_len / low_freq_factor
        high_freq_wavelen = old_context_len / high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth_factor = (old_context_len / wavelen - low_freq_factor) / (
            high_freq_factor - low_freq_factor)
        smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + \
            smooth_factor * inv_freq_llama
        is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        inv_freq = torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
    return inv_freq


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def case_rope(drv):
    configs = [
        ("rope default", 16, 10000.0, {"scaling": "default"}),
        ("rope linear", 16, 10000.0, {"scaling": "linear", "factor": 4.0}),
        ("rope llama3", 128, 500000.0,
         {"scaling": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}),
    ]
    n, heads = 6, 2
    for name, d, theta, scaling in configs:
        positions = np.array([0, 1, 5, 17, 4095, 30000][:n], dtype=np.int32)
        x, dout = f32(n, heads, d), f32(n, heads, d)
        params = {"n": n, "heads": heads, "head_dim": d, "theta": theta, **scaling}
        out = drv.run("rope", params, {"x": x, "positions": positions, "dout": dout})
        ours_inv = out("inv_freq")
        # transformers' f32 pow can be an ulp or two off the correctly rounded value we compute
        # in double: 1e-6 relative.
        check(f"{name} inv_freq vs transformers", ours_inv, hf_inv_freq(d, theta, scaling),
              rtol=1e-6, atol=0)
        # The rotation, with transformers' f32 angle (position.float() * inv_freq) from OUR
        # frequencies, then cos/sin and the rotate-half formula in float64.
        angle = (torch.tensor(positions).float()[:, None] * torch.tensor(ours_inv)[None, :])
        emb = torch.cat((angle, angle), dim=-1).double()[:, None, :]  # [N, 1, D]
        cos, sin = emb.cos(), emb.sin()
        tx = t64(x, True)
        y = tx * cos + rotate_half(tx) * sin
        (y * t64(dout)).sum().backward()
        # Our cos/sin of the f32 angle run in f32 (an ulp of 1: 6e-8) and the products in f32:
        # 5e-7 absolute for |x| up to ~4.
        tol = dict(rtol=1e-6, atol=5e-7)
        check(f"{name} y", out("y"), y.detach(), **tol)
        check(f"{name} dx", out("dx"), tx.grad, **tol)


def repeat_kv(x, n_rep):
    """transformers' repeat_kv on [B, Hkv, T, D]."""
    b, hkv, t, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, hkv, n_rep, t, d).reshape(b, hkv * n_rep, t, d)


def case_attention(drv):
    b, t, d = 2, 7, 8
    cases = [
        ("attention causal gqa", 4, 2, 0, None),
        ("attention causal mqa", 4, 1, 0, None),
        ("attention sliding window 3", 4, 2, 3, None),
        ("attention packed segments", 2, 2, 0, [0, 0, 0, 1, 1, 2, 2, 5, 5, 5, 5, 5, 6, 6]),
        ("attention window 2 + segments", 4, 2, 2, [0, 0, 0, 0, 1, 1, 1, 3, 3, 4, 4, 4, 4, 4]),
    ]
    for name, hq, hkv, window, segment in cases:
        scale = 1 / math.sqrt(d)
        q, k, v = f32(b, t, hq, d), f32(b, t, hkv, d), f32(b, t, hkv, d)
        dout = f32(b, t, hq, d)
        inputs = {"q": q, "k": k, "v": v, "dout": dout}
        if segment is not None:
            inputs["segment"] = np.array(segment, dtype=np.int32)
        params = {"batch": b, "seq_len": t, "q_heads": hq, "kv_heads": hkv, "head_dim": d,
                  "window": window, "scale": scale, "segmented": segment is not None}
        out = drv.run("attention", params, inputs)
        tq, tk, tv = t64(q, True), t64(k, True), t64(v, True)
        # [B, T, H, D] -> [B, H, T, D] as transformers lays it out.
        qh = tq.transpose(1, 2)
        kh = repeat_kv(tk.transpose(1, 2), hq // hkv)
        vh = repeat_kv(tv.transpose(1, 2), hq // hkv)
        i = torch.arange(t)[:, None]
        j = torch.arange(t)[None, :]
        allowed = (j <= i)[None, None]
        if window > 0:
            allowed = allowed & ((i - j) < window)[None, None]
        if segment is not None:
            s = torch.tensor(segment).view(b, t)
            allowed = allowed & (s[:, None, :, None] == s[:, None, None, :])
        # The scale goes in as f32 on our side.
        scores = (qh @ kh.transpose(-1, -2)) * float(np.float32(scale))
        scores = scores.masked_fill(~allowed, float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)  # [B, H, T]
        probs = torch.softmax(scores, dim=-1)
        y = (probs @ vh).transpose(1, 2)  # back to [B, T, H, D]
        (y * t64(dout)).sum().backward()
        # Double sums over <= 7 keys of 8-term dot products, rounded once; exp in double:
        # 2e-6 relative, 1e-6 absolute.
        tol = dict(rtol=2e-6, atol=1e-6)
        check(f"{name} out", out("out"), y.detach(), **tol)
        check(f"{name} lse", out("lse"), lse.detach(), **tol)
        check(f"{name} dq", out("dq"), tq.grad, **tol)
        check(f"{name} dk", out("dk"), tk.grad, **tol)
        check(f"{name} dv", out("dv"), tv.grad, **tol)


def case_swiglu(drv):
    count = 300
    gate, up, dout = f32(count, scale=3.0), f32(count), f32(count)
    out = drv.run("swiglu", {"count": count}, {"gate": gate, "up": up, "dout": dout})
    tg, tu = t64(gate, True), t64(up, True)
    y = F.silu(tg) * tu
    (y * t64(dout)).sum().backward()
    # Element-wise in f32 (exp, divide, three products): a few f32 roundings of values up to
    # ~10, so 2e-6 relative and absolute.
    tol = dict(rtol=2e-6, atol=2e-6)
    check("swiglu out", out("out"), y.detach(), **tol)
    check("swiglu dgate", out("dgate"), tg.grad, **tol)
    check("swiglu dup", out("dup"), tu.grad, **tol)


def case_cross_entropy(drv):
    n, c, vocab, chunk = 9, 16, 50, 4
    hidden, weight = f32(n, c), f32(vocab, c, scale=0.5)
    targets = RNG.integers(0, vocab, size=n).astype(np.int32)
    targets[[1, 4, 8]] = -100
    counted = int(np.sum(targets >= 0))
    grad_scale = 1.0 / counted
    out = drv.run("cross_entropy",
                  {"n": n, "c": c, "vocab": vocab, "chunk_rows": chunk, "grad_scale": grad_scale},
                  {"hidden": hidden, "weight": weight, "targets": targets})
    th, tw = t64(hidden, True), t64(weight, True)
    logits = th @ tw.T
    loss_sum = F.cross_entropy(logits, torch.tensor(targets, dtype=torch.int64),
                               ignore_index=-100, reduction="sum")
    (loss_sum / counted).backward()
    # The loss is a double computation from f32 inputs on both sides: 1e-9 relative.
    check("cross_entropy loss (sum)", out("loss", np.float64), loss_sum.detach(), rtol=1e-9,
          atol=0)
    # grad_scale goes in as f32 (1/6 rounded: 3e-8 relative) and outputs are f32: 1e-6.
    tol = dict(rtol=1e-6, atol=1e-7)
    check("cross_entropy dhidden", out("dhidden"), th.grad, **tol)
    check("cross_entropy dweight", out("dweight"), tw.grad, **tol)


def case_lora(drv):
    n, i, o, r = 5, 24, 12, 4
    scale = 16 / r  # lora_alpha / r
    x, a, b = f32(n, i), f32(r, i, scale=0.3), f32(o, r, scale=0.3)
    y0, dy = f32(n, o), f32(n, o)
    out = drv.run("lora", {"n": n, "in": i, "out": o, "rank": r, "scale": scale},
                  {"x": x, "a": a, "b": b, "y0": y0, "dy": dy})
    tx, ta, tb = t64(x, True), t64(a, True), t64(b, True)
    # PEFT's Linear.forward: result + lora_B(lora_A(dropout(x))) * scaling (dropout off).
    y = t64(y0) + F.linear(F.linear(tx, ta), tb) * scale
    (y * t64(dy)).sum().backward()
    # xa is stored in f32 between the two products (as a real forward keeps it), then scaled by
    # 4 and summed over rows into gradients of magnitude ~10: 4e-6 relative and absolute.
    tol = dict(rtol=4e-6, atol=4e-6)
    check("lora y", out("y"), y.detach(), **tol)
    check("lora dx", out("dx"), tx.grad, **tol)
    check("lora da", out("da"), ta.grad, **tol)
    check("lora db", out("db"), tb.grad, **tol)


def case_adamw(drv):
    count, steps = 64, 10
    lr, beta1, beta2, eps, wd = 1e-2, 0.9, 0.95, 1e-8, 0.1
    param = f32(count)
    grads = f32(steps, count, scale=0.1)
    out = drv.run("adamw", {"count": count, "steps": steps, "lr": lr, "beta1": beta1,
                            "beta2": beta2, "eps": eps, "weight_decay": wd},
                  {"param": param, "grads": grads})
    # torch.optim.AdamW on an f32 parameter: its f32 state is the contract here.
    p = torch.nn.Parameter(torch.tensor(param))
    opt = torch.optim.AdamW([p], lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=wd)
    for s in range(steps):
        p.grad = torch.tensor(grads[s])
        opt.step()
    state = opt.state[p]
    # torch rounds every intermediate to f32, we round each state once per step from double;
    # after 10 steps the difference is a few f32 ulps of each value: 5e-6 relative, and 1e-7
    # absolute on the parameter (updates are ~1e-2) and 1e-9 on the small second moments.
    check("adamw param", out("param"), p.detach(), rtol=5e-6, atol=1e-7)
    check("adamw exp_avg", out("m"), state["exp_avg"], rtol=5e-6, atol=1e-9)
    check("adamw exp_avg_sq", out("v"), state["exp_avg_sq"], rtol=5e-6, atol=1e-11)


def case_embedding(drv):
    n, vocab, c = 10, 6, 5
    ids = np.array([5, 0, 5, 2, 5, 1, 0, 3, 5, 4], dtype=np.int32)
    table, dout = f32(vocab, c), f32(n, c)
    out = drv.run("embedding", {"n": n, "vocab": vocab, "c": c},
                  {"ids": ids, "table": table, "dout": dout})
    tt = t64(table, True)
    y = F.embedding(torch.tensor(ids, dtype=torch.int64), tt)
    (y * t64(dout)).sum().backward()
    check("embedding out", out("out"), y.detach(), rtol=0, atol=0)  # a copy: exact
    # Up to four f32 additions into an f32 gradient: 1e-6 relative.
    check("embedding dtable", out("dtable"), tt.grad, rtol=1e-6, atol=1e-7)


def bnb_create_dynamic_map():
    """bitsandbytes.functional.create_dynamic_map(signed=True, max_exponent_bits=7,
    total_bits=8), transcribed: it runs on PyTorch's f32 CPU kernels."""
    data = []
    max_exponent_bits, non_sign_bits = 7, 7
    for i in range(max_exponent_bits):
        fraction_items = int(2 ** (i + non_sign_bits - max_exponent_bits) + 1)
        boundaries = torch.linspace(0.1, 1, fraction_items)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
        data += (-(10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
    data.append(0)
    data.append(1.0)
    assert len(data) == 256
    data.sort()
    return torch.Tensor(data)


def case_nf4_map(drv):
    config = torch.__config__.show()
    if "CPU capability usage: AVX2" not in config:
        # Our map is the one PyTorch's AVX2 kernels produce; other vector widths round some
        # linspace entries differently (see src/kernels/nf4.h).
        print("note nf4 dynamic map: PyTorch does not use AVX2 kernels here; bit check skipped")
        return
    out = drv.run("nf4_map", {}, {})
    ours = out("map")
    theirs = bnb_create_dynamic_map().numpy()
    same = np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))
    if same:
        RESULTS["passed"] += 1
        print("ok   nf4 dynamic map: 256 entries bit-identical to create_dynamic_map")
    else:
        RESULTS["failed"] += 1
        bad = np.nonzero(ours.view(np.uint32) != theirs.view(np.uint32))[0]
        print(f"FAIL nf4 dynamic map: {len(bad)} entries differ, first {bad[0]}: "
              f"ours {ours[bad[0]]!r} torch {theirs[bad[0]]!r}")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory(prefix="sovai_ops_golden_") as workdir:
        drv = Driver(sys.argv[1], workdir)
        for case in (case_linear, case_rmsnorm, case_rope, case_attention, case_swiglu,
                     case_cross_entropy, case_lora, case_adamw, case_embedding, case_nf4_map):
            case(drv)
    print(f"{RESULTS['passed']} passed, {RESULTS['failed']} failed")
    return 1 if RESULTS["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
