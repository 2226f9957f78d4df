#!/usr/bin/env python3
"""The PyTorch + PEFT reference for the engine's GPU training: LoRA (and QLoRA when bitsandbytes is
importable) on a Llama-3-8B-shaped model with random bf16 weights, on one GPU, with nothing
downloaded.

1. Builds LlamaForCausalLM from the config below with random weights, directly in bf16 on the GPU,
   and saves it with save_pretrained (safetensors) to SCRATCH_DIR, with the token batches
   (batches.safetensors), so that the engine can later load the same files and train on the same
   tokens.
2. LoRA r=16, alpha=32, dropout 0, on all 7 projections of every layer (adapters in PEFT's default
   dtype), AdamW; rows of SEQ tokens (packed: no padding, one causal attention over the row),
   STEPS optimizer steps. Records tokens/s over the steps after the first WARMUP, the peak GPU
   memory (torch.cuda.max_memory_allocated, weights included), and every step's loss.
3. QLoRA: the same, with the saved model loaded as NF4 (double quantization, bf16 compute) through
   BitsAndBytesConfig, after prepare_model_for_kbit_training. When bitsandbytes is not importable
   it records why instead.

Each of the two runs in a process of its own (clean memory statistics, and a crash or time-out in
one leaves the other), under the time left of --budget-s. Writes one JSON (--out), rewritten as
results arrive, so that a run cut short still leaves what it measured.

Env: STEPS (20), WARMUP (3), SEQ (4096), BATCH (1), LR (1e-4), SEED (0), GRAD_CKPT (0; 1 turns on
gradient checkpointing in both), ATTN (default: flash_attention_2 if flash_attn imports, else
sdpa), SCRATCH_DIR (/tmp/sovai-llama3-8b-random), SAVE_MODEL (1), QLORA (1; 0 skips it).
"""
import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

STEPS = int(os.environ.get("STEPS", "20"))
WARMUP = int(os.environ.get("WARMUP", "3"))
SEQ = int(os.environ.get("SEQ", "4096"))
BATCH = int(os.environ.get("BATCH", "1"))
LR = float(os.environ.get("LR", "1e-4"))
SEED = int(os.environ.get("SEED", "0"))
GRAD_CKPT = os.environ.get("GRAD_CKPT", "0") == "1"
SAVE_MODEL = os.environ.get("SAVE_MODEL", "1") == "1"
RUN_QLORA = os.environ.get("QLORA", "1") == "1"
SCRATCH_DIR = os.environ.get("SCRATCH_DIR", "/tmp/sovai-llama3-8b-random")

RANK, LORA_ALPHA = 16, 32
TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# Llama-3-8B's shape (Meta's config.json for Meta-Llama-3-8B), with random weights.
LLAMA3_8B = {
    "vocab_size": 128256,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
}


def version_of(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def model_flops_per_token():
    """PaLM's count (Chowdhery et al. 2022, appendix B): 6 N + 12 L d T per trained token, N the
    parameters in matrix products (every projection and lm_head; not the embedding lookup), T the
    sequence length. It counts the weight gradients that LoRA skips for frozen weights, so the
    hardware does about 2/3 of it: a convention to compare engines by, not the work done."""
    c = LLAMA3_8B
    d, f, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    kv = d // c["num_attention_heads"] * c["num_key_value_heads"]
    per_layer = d * d + 2 * d * kv + d * d + 3 * d * f
    n = layers * per_layer + c["vocab_size"] * d
    return {"n_matmul_params": n, "flops_per_token": 6 * n + 12 * layers * d * SEQ,
            "formula": "6*N + 12*L*d*T (PaLM), N = projection + lm_head parameters, T = %d" % SEQ}


def pick_attention():
    if os.environ.get("ATTN"):
        return os.environ["ATTN"], "set by ATTN"
    if importlib.util.find_spec("flash_attn") is not None:
        try:
            importlib.import_module("flash_attn")
            return "flash_attention_2", "flash_attn imports"
        except Exception as e:  # a broken build of flash_attn: say so, use sdpa
            return "sdpa", "flash_attn found but does not import: %r" % (e,)
    return "sdpa", "flash_attn is not installed"


# --- one phase, in its own process -------------------------------------------------------------


class Phase:
    """Collects one phase's results and rewrites them to `path` as they arrive."""

    def __init__(self, path, name):
        self.path = path
        self.data = {"phase": name, "status": "started"}

    def update(self, **fields):
        self.data.update(fields)
        with open(self.path + ".tmp", "w") as f:
            json.dump(self.data, f, indent=1)
        os.replace(self.path + ".tmp", self.path)


def dtype_kwargs(torch):
    # transformers renamed from_pretrained's torch_dtype to dtype in 4.56.
    version = tuple(int(p) for p in version_of("transformers").split(".")[:2])
    return {"dtype": torch.bfloat16} if version >= (4, 56) else {"torch_dtype": torch.bfloat16}


def make_config(attn):
    import inspect

    from transformers import LlamaConfig

    fields = dict(LLAMA3_8B)
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:
        # transformers 5 keeps rope_theta inside rope_parameters.
        fields["rope_parameters"] = {"rope_type": "default", "rope_theta": fields.pop("rope_theta")}
    config = LlamaConfig(**fields)
    try:
        config._attn_implementation = attn
    except AttributeError:  # a transformers whose property has no setter
        config._attn_implementation_internal = attn
    config.use_cache = False
    rope = getattr(config, "rope_parameters", None) or {}
    theta = rope.get("rope_theta", getattr(config, "rope_theta", None))
    if theta != LLAMA3_8B["rope_theta"]:
        raise RuntimeError("LlamaConfig did not take rope_theta=500000 (got %r)" % (theta,))
    return config


def train(phase, model, torch, data):
    """STEPS optimizer steps of LoRA on `model` (already a PEFT model), timing each."""
    params = [p for p in model.parameters() if p.requires_grad]
    try:
        optimizer = torch.optim.AdamW(params, lr=LR, weight_decay=0.0, fused=True)
        fused = True
    except (RuntimeError, TypeError, ValueError):
        optimizer = torch.optim.AdamW(params, lr=LR, weight_decay=0.0)
        fused = False
    model.train()
    torch.cuda.synchronize()
    weights_bytes = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    losses, step_s = [], []
    for step in range(STEPS):
        batch = data[step % data.shape[0]].cuda(non_blocking=True)
        start = time.perf_counter()
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.item()))  # waits for the step
        torch.cuda.synchronize()
        step_s.append(time.perf_counter() - start)
        print("  step %2d loss %.4f %.3f s" % (step, losses[-1], step_s[-1]), flush=True)
        timed = step_s[WARMUP:]
        phase.update(
            status="training",
            steps_done=step + 1,
            losses=losses,
            step_s=step_s,
            tokens_per_s=BATCH * SEQ * len(timed) / sum(timed) if timed else None,
            median_step_s=statistics.median(timed) if timed else None,
            peak_memory_allocated_bytes=torch.cuda.max_memory_allocated(),
            peak_memory_reserved_bytes=torch.cuda.max_memory_reserved(),
            memory_before_training_bytes=weights_bytes,
            fused_adamw=fused,
        )
    if STEPS <= WARMUP:
        phase.update(status="done", note="STEPS <= WARMUP: nothing timed")
    else:
        phase.update(status="done")


def apply_lora(model, phase):
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=RANK, lora_alpha=LORA_ALPHA, lora_dropout=0.0, bias="none",
                      target_modules=TARGET_MODULES, task_type="CAUSAL_LM")
    model = get_peft_model(model, lora)
    trainable = [p for p in model.parameters() if p.requires_grad]
    phase.update(trainable_params=sum(p.numel() for p in trainable),
                 adapter_dtype=str(trainable[0].dtype) if trainable else None)
    return model


def enable_checkpointing(model):
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()


def token_batches(torch):
    generator = torch.Generator().manual_seed(SEED)
    return torch.randint(0, LLAMA3_8B["vocab_size"], (STEPS, BATCH, SEQ), generator=generator)


def run_lora(phase, attn):
    import torch
    import transformers

    phase.update(torch=torch.__version__, transformers=transformers.__version__,
                 device=torch.cuda.get_device_name(0))
    config = make_config(attn)
    start = time.perf_counter()
    torch.manual_seed(SEED)
    # Initialized in f32 on the GPU (32 GB for a moment), then the parameters rounded to bf16 once.
    # Parameters only: model.to(bf16) would also round the f32 RoPE frequencies (a buffer), which
    # from_pretrained(dtype=bf16) keeps in f32.
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.data = parameter.data.to(torch.bfloat16)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    q0 = model.model.layers[0].self_attn.q_proj.weight
    phase.update(status="built", build_s=time.perf_counter() - start,
                 attn_implementation=getattr(model.config, "_attn_implementation", None),
                 model_params=sum(p.numel() for p in model.parameters()),
                 model_dtype=str(q0.dtype),
                 # initializer_range is 0.02: a different std means the weights were not drawn
                 layer0_q_proj_std=float(q0.float().std()))
    data = token_batches(torch)
    if SAVE_MODEL:
        from safetensors.torch import save_file

        start = time.perf_counter()
        os.makedirs(SCRATCH_DIR, exist_ok=True)
        model.save_pretrained(SCRATCH_DIR, max_shard_size="5GB")
        save_file({"input_ids": data.to(torch.int32).contiguous()},
                  os.path.join(SCRATCH_DIR, "batches.safetensors"))
        saved = sum(os.path.getsize(os.path.join(SCRATCH_DIR, n)) for n in os.listdir(SCRATCH_DIR))
        phase.update(status="saved", save_s=time.perf_counter() - start, saved_dir=SCRATCH_DIR,
                     saved_bytes=saved)
    if GRAD_CKPT:
        enable_checkpointing(model)
    model = apply_lora(model, phase)
    train(phase, model, torch, data)


def run_qlora(phase, attn):
    try:
        import bitsandbytes
    except Exception as e:
        phase.update(status="not run", reason="bitsandbytes is not importable: %r" % (e,))
        return
    import torch
    import transformers
    from peft import prepare_model_for_kbit_training

    phase.update(torch=torch.__version__, transformers=transformers.__version__,
                 bitsandbytes=bitsandbytes.__version__, device=torch.cuda.get_device_name(0))
    if not os.path.exists(os.path.join(SCRATCH_DIR, "config.json")):
        phase.update(status="not run", reason="no saved model in %s (the LoRA phase saves it)"
                     % SCRATCH_DIR)
        return
    quantization = transformers.BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16)
    start = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        SCRATCH_DIR, quantization_config=quantization, device_map={"": 0},
        attn_implementation=attn, **dtype_kwargs(torch))
    model.config.use_cache = False
    torch.cuda.synchronize()
    phase.update(status="loaded", load_s=time.perf_counter() - start,
                 attn_implementation=getattr(model.config, "_attn_implementation", None))
    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=GRAD_CKPT)
    model = apply_lora(model, phase)
    train(phase, model, torch, token_batches(torch))


def run_phase(name, path):
    phase = Phase(path, name)
    attn, why = pick_attention()
    phase.update(attn_requested=attn, attn_why=why, grad_ckpt=GRAD_CKPT)
    try:
        (run_lora if name == "lora" else run_qlora)(phase, attn)
    except BaseException as e:  # record it for the report, then fail the process
        phase.update(status="failed", error=repr(e), traceback=traceback.format_exc())
        raise


# --- the driver ----------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="peft_reference.json")
    parser.add_argument("--budget-s", type=float, default=480.0,
                        help="wall-clock seconds for both phases together")
    parser.add_argument("--phase", choices=["lora", "qlora"], help=argparse.SUPPRESS)
    parser.add_argument("--phase-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        run_phase(args.phase, args.phase_out)
        return 0

    deadline = time.monotonic() + args.budget_s
    result = {
        "what": "PyTorch + PEFT LoRA / QLoRA training steps, Llama-3-8B shape, random bf16 weights",
        "model_config": LLAMA3_8B,
        "settings": {"steps": STEPS, "warmup_steps": WARMUP, "seq": SEQ, "batch": BATCH,
                     "tokens_per_step": SEQ * BATCH, "lr": LR, "seed": SEED, "lora_rank": RANK,
                     "lora_alpha": LORA_ALPHA, "lora_dropout": 0.0,
                     "target_modules": TARGET_MODULES, "gradient_checkpointing": GRAD_CKPT,
                     "optimizer": "torch.optim.AdamW, weight_decay 0",
                     "data": "uniform random token ids, one packed row of SEQ tokens per sequence"},
        "model_flops": model_flops_per_token(),
        "environment": {"python": platform.python_version(), "torch": version_of("torch"),
                        "transformers": version_of("transformers"), "peft": version_of("peft"),
                        "bitsandbytes": version_of("bitsandbytes"),
                        "flash_attn": version_of("flash-attn") or version_of("flash_attn")},
        "phases": {},
    }

    def write():
        with open(args.out + ".tmp", "w") as f:
            json.dump(result, f, indent=1)
        os.replace(args.out + ".tmp", args.out)

    write()
    phases = ["lora"] + (["qlora"] if RUN_QLORA else [])
    if not RUN_QLORA:
        result["phases"]["qlora"] = {"status": "not run", "reason": "QLORA=0"}
    status = 0
    for name in phases:
        if name == "qlora" and importlib.util.find_spec("bitsandbytes") is None:
            result["phases"][name] = {"status": "not run",
                                      "reason": "bitsandbytes is not installed for %s"
                                      % sys.executable}
            print("qlora: not run: bitsandbytes is not installed", flush=True)
            write()
            continue
        left = deadline - time.monotonic()
        if left < 30:
            result["phases"][name] = {"status": "not run",
                                      "reason": "budget spent (%.0f s left)" % left}
            write()
            continue
        # Not beside --out: the output directory should hold only the results.
        path = os.path.join(tempfile.gettempdir(),
                            "sovai-peft-%s-%d.json" % (name, os.getpid()))
        print("=== %s (at most %.0f s)" % (name, left), flush=True)
        start = time.monotonic()
        try:
            rc = subprocess.run([sys.executable, os.path.abspath(__file__), "--phase", name,
                                 "--phase-out", path], timeout=left).returncode
            outcome = "exit status %d" % rc
        except subprocess.TimeoutExpired:
            rc, outcome = 124, "timed out after %.0f s (killed)" % left
        try:
            with open(path) as f:
                phase = json.load(f)
            os.remove(path)
        except (OSError, ValueError):
            phase = {"status": "failed", "error": "the phase wrote no results"}
        phase["process"] = outcome
        phase["wall_s"] = time.monotonic() - start
        if rc != 0 and phase.get("status") not in ("failed", "not run"):
            phase["status"] = "incomplete"
        if rc != 0:
            status = 1
        result["phases"][name] = phase
        print("=== %s: %s, %s" % (name, phase.get("status"), outcome), flush=True)
        write()
    return status


if __name__ == "__main__":
    sys.exit(main())
