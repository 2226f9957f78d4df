#!/usr/bin/env python3
"""Prints bench/gpu/run.sh's table from what its stages left: the stage list (name, exit status,
seconds, limit), gpu_bench.json and peft_reference.json in OUT. Standard library only. Anything
missing is reported as missing, never filled in: the engine's own GPU columns say "not built yet"
until its GPU training and serving paths exist.

Usage: report.py OUT_DIR STAGES_TSV"""
import json
import os
import sys

NOT_BUILT = "not built yet"


def load(path):
    try:
        with open(path) as f:
            return json.load(f), None
    except FileNotFoundError:
        return None, "missing (%s was not written)" % os.path.basename(path)
    except ValueError as e:
        return None, "unreadable %s: %s" % (os.path.basename(path), e)


def table(rows, header):
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"
    out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    return "\n".join(out + [line(r) for r in rows])


def main():
    out_dir, stages_path = sys.argv[1], sys.argv[2]
    lines = []
    stages = []
    if os.path.exists(stages_path):
        with open(stages_path) as f:
            stages = [l.rstrip("\n").split("\t") for l in f if l.strip()]
    lines.append("Stages (exit status 124: stopped at its time limit):")
    lines.append(table([s + [""] * (5 - len(s)) for s in stages],
                       ["stage", "exit status", "seconds", "limit s", "note"]))
    lines.append("")

    engine, engine_error = load(os.path.join(out_dir, "engine_train.json"))
    lines.append("sovai-engine train --backend cuda (engine_train.py):")
    if engine:
        for c in engine["checks"]:
            lines.append("  %s %s: %s" % ("PASS" if c["pass"] else "MISS", c["name"], c["detail"]))
    else:
        lines.append("  not run: %s" % engine_error)
    lines.append("")

    bench, bench_error = load(os.path.join(out_dir, "gpu_bench.json"))
    peft, peft_error = load(os.path.join(out_dir, "peft_reference.json"))

    matrix_tflops = read_gbps = None
    rows = []
    if bench:
        device = bench["device"]
        lines.append("Device: %s (compute capability %s, %d SMs, %.0f GiB)" % (
            device["name"], device["compute_capability"], device["multiprocessors"],
            device["memory_bytes"] / 2**30))
        m = bench["matrix"]
        matrix_tflops = m["median_tflops"]
        check = m.get("check_max_error_over_scale")
        check = "NaN in the output" if check is None else "%.1g" % check
        rows.append(["bf16 matrix rate (the MFU denominator)", "%.0f TFLOP/s" % matrix_tflops,
                     "cuBLASLt via MatmulPlanner, %dx%dx%d, bf16 out, f32 accumulate, median of "
                     "%d; spot check error/scale %s" % (m["m"], m["n"], m["k"], bench["runs"],
                                                        check)])
        bw = bench["bandwidth"]
        read_gbps = bw["read_gbps"]
        for r in bw["results"]:
            counted = "bytes read" if r["bytes_moved"] == bw["buffer_bytes"] else \
                "bytes read + written"
            rows.append(["memory bandwidth, %s" % r["name"], "%.0f GB/s" % r["gbps"],
                         "%.1f GiB buffer, %s, median of %d" % (
                             bw["buffer_bytes"] / 2**30, counted, bench["runs"])])
    else:
        rows.append(["GPU ceilings (gpu_bench)", "not measured", bench_error])

    flops = peft["model_flops"] if peft else None
    if read_gbps and flops:
        weight_bytes = 2 * flops["n_matmul_params"]
        rows.append(["decode bound, Llama-3-8B bf16, batch 1",
                     "%.0f tokens/s" % (read_gbps * 1e9 / weight_bytes),
                     "read bandwidth / %.2f GB of projection + lm_head weights per token "
                     "(KV cache not counted)" % (weight_bytes / 1e9)])
    lines.append("Measured ceilings:")
    lines.append(table(rows, ["what", "value", "how"]))
    lines.append("")

    if bench and bench.get("shapes"):
        shape_rows = [[s["name"], "%dx%dx%d" % (s["m"], s["n"], s["k"]), "%.1f" % s["tflops"],
                       "%.0f" % s["weight_gbps"], "%.4f" % (s["median_s"] * 1e3)]
                      for s in bench["shapes"]]
        lines.append("Llama-3-8B products through MatmulPlanner (bf16 out):")
        lines.append(table(shape_rows, ["product", "MxNxK", "TFLOP/s", "weight GB/s", "ms"]))
        lines.append("")

    rows = []
    if peft:
        settings = peft["settings"]
        title = "Llama-3-8B shape, LoRA r=%d on 7 projections, %d tokens/step, %d steps (%d warm-up)" % (
            settings["lora_rank"], settings["tokens_per_step"], settings["steps"],
            settings["warmup_steps"])
        for name, label in (("lora", "LoRA bf16"), ("qlora", "QLoRA NF4")):
            phase = peft["phases"].get(name)
            if not phase:
                rows.append([label, "not run: the reference stopped before it", NOT_BUILT])
                continue
            status = phase.get("status")
            tps = phase.get("tokens_per_s")
            if tps is None:
                why = phase.get("reason") or phase.get("error") or phase.get("process") or status
                rows.append([label + " tokens/s", "not measured: %s" % why, NOT_BUILT])
                continue
            note = "" if status == "done" else " (%s after %s steps)" % (status,
                                                                          phase.get("steps_done"))
            rows.append([label + " tokens/s", "%.0f%s" % (tps, note), NOT_BUILT])
            if matrix_tflops:
                mfu = flops["flops_per_token"] * tps / (matrix_tflops * 1e12)
                rows.append([label + " MFU", "%.1f%%" % (100 * mfu), NOT_BUILT])
            rows.append([label + " peak GPU memory",
                         "%.1f GiB" % (phase["peak_memory_allocated_bytes"] / 2**30), NOT_BUILT])
            losses = phase.get("losses") or []
            if losses:
                rows.append([label + " loss, first / last step",
                             "%.4f / %.4f" % (losses[0], losses[-1]), NOT_BUILT])
            rows.append([label + " attention", str(phase.get("attn_implementation")), NOT_BUILT])
        lines.append("Training (%s):" % title)
        lines.append("MFU = %s x tokens/s / the matrix rate above." % flops["formula"])
    else:
        rows.append(["LoRA / QLoRA", "not measured: %s" % peft_error, NOT_BUILT])
        lines.append("Training:")
    lines.append(table(rows, ["what", "PyTorch + PEFT", "Sovai engine"]))
    lines.append("")
    lines.append("Serving: Sovai engine decode on this GPU: %s (no GPU serving path exists yet; "
                 "compare it with the decode bound above when it does)." % NOT_BUILT)
    text = "\n".join(lines)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
