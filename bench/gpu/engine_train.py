#!/usr/bin/env python3
"""bench/gpu/engine_train.py BINARY OUT_DIR: `sovai-engine train --backend cuda` end to end on the
tiny model of tests/e2e/tiny_model.py (made on the spot, no network), against the same run on
`--backend cpu`.

1. a tokenizer and a 2-layer config (tiny_model.py), then the same 20 steps of full training from
   scratch with the same seed on cpu and on cuda: the logged losses must agree within 1e-3
   relative (both backends store f32 activations; the cuda one sums in another order);
2. 10 LoRA steps on cuda from the model step 1 trained on cpu, which must finish and log
   "backend: cuda on device 0: ...".
Prints PASS/MISS per check, writes engine_train.json to OUT_DIR; exit status 0 when all pass."""
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "e2e"))
import tiny_model  # noqa: E402

LOSS = re.compile(r"^step (\d+)/\d+\s+loss ([0-9.]+)")


def losses(stdout):
    return [(int(m.group(1)), float(m.group(2))) for m in map(LOSS.match, stdout.splitlines()) if m]


def train(binary, backend, base, data, out, method, steps, extra=()):
    return tiny_model.engine(
        binary, "train", "--backend", backend, "--model", base, "--data", data, "--output", out,
        "--method", method, "--max-steps", str(steps), "--seq-len", "64", "--batch-rows", "4",
        "--learning-rate", "1e-2", "--eval-fraction", "0.05", "--log-interval", "1", "--seed", "7",
        *extra, check=False)


def main():
    binary, out_dir = sys.argv[1], sys.argv[2]
    results = {"checks": []}

    def check(name, ok, detail):
        results["checks"].append({"name": name, "pass": bool(ok), "detail": detail})
        print("%s %s: %s" % ("PASS" if ok else "MISS", name, detail), flush=True)

    work = tempfile.mkdtemp(prefix="sovai-engine-train-")
    base, data = tiny_model.make_base(binary, work)

    runs = {}
    for backend in ("cpu", "cuda"):
        r = train(binary, backend, base, data, os.path.join(work, "full-" + backend), "full", 20,
                  ("--from-scratch",))
        runs[backend] = r
        with open(os.path.join(out_dir, "engine-train-full-%s.log" % backend), "w") as f:
            f.write(r.stdout + "\n--- stderr\n" + r.stderr)
        check("full training on %s finishes" % backend, r.returncode == 0,
              "exit status %d, %s" % (r.returncode, (r.stderr.strip().splitlines() or [""])[-1]))
    cpu, cuda = losses(runs["cpu"].stdout), losses(runs["cuda"].stdout)
    results["losses"] = {"cpu": cpu, "cuda": cuda}
    worst = max((abs(a[1] - b[1]) / max(abs(a[1]), 1e-9) for a, b in zip(cpu, cuda)), default=None)
    check("cuda losses track cpu's within 1e-3", cpu and len(cpu) == len(cuda) and
          worst is not None and worst <= 1e-3,
          "%d vs %d logged steps, worst relative difference %s" % (len(cpu), len(cuda), worst))
    check("the job log names the backend and device",
          "backend: cuda on device 0" in runs["cuda"].stdout,
          ([l for l in runs["cuda"].stdout.splitlines() if l.startswith("backend:")] or ["none"])[0])

    pretrained = os.path.join(work, "full-cpu", "model")
    if os.path.isdir(pretrained):
        chat = os.path.join(work, "chat.jsonl")
        tiny_model.write_chat_data(chat)
        r = train(binary, "cuda", pretrained, chat, os.path.join(work, "lora-cuda"), "lora", 10)
        with open(os.path.join(out_dir, "engine-train-lora-cuda.log"), "w") as f:
            f.write(r.stdout + "\n--- stderr\n" + r.stderr)
        lora = losses(r.stdout)
        check("LoRA on cuda finishes with finite losses", r.returncode == 0 and lora and
              all(l[1] == l[1] for l in lora), "exit status %d, losses %s" % (r.returncode, lora))
    with open(os.path.join(out_dir, "engine_train.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0 if all(c["pass"] for c in results["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
