#!/usr/bin/env python3
"""The demo's task: turn a plain-language request into the exact `sovai job run` command.

    "train on two H100s with the data in bucket corpus, write results to out"
    -> sovai job run --flavor h100-1-gpu --gpu 2 --volume corpus@EU-WEST-LOCAL/:/workspace/data:ro
       --volume out@EU-WEST-LOCAL/:/workspace/output:rw sovai/finetune

Examples are generated from a seed with varied phrasings; train, validation and test splits share
no (flavor, count, bucket, output) combination, so the test split measures generalisation, not
recall. Writes <out>/{train,validation,test}.jsonl as chat examples.

Usage: make_dataset.py OUT_DIR [--seed N] [--count N]
"""
import argparse
import json
import os
import random

REGION = "EU-WEST-LOCAL"
GPUS = {"H100": "h100-1-gpu", "A100": "a100-1-gpu", "L40S": "l40s-1-gpu"}
NUMBERS = {1: ["one", "a single", "1"], 2: ["two", "2", "a pair of"], 4: ["four", "4"],
           8: ["eight", "8"]}
BUCKETS = ["corpus", "legal-docs", "tickets", "medical-notes", "contracts", "faq", "emails",
           "reviews", "manuals", "chats", "papers", "invoices", "logs", "recipes", "patents"]
OUTPUTS = ["out", "results", "runs", "checkpoints", "models", "artifacts", "finetuned", "exp1"]
ASKS = [
    "train on {n} {gpu}s with the data in bucket {data}, write results to {out}",
    "fine-tune using {n} {gpu} GPUs; dataset is in {data} and outputs go to {out}",
    "please run a training job with {n} {gpu}s reading {data} and saving to bucket {out}",
    "I need {n} {gpu}s to fine-tune on bucket {data}. Put the output in {out}.",
    "launch finetuning: data={data}, output={out}, {n}x {gpu}",
    "use bucket {data} as training data and {out} for results, on {n} {gpu}s",
]
CPU_ASKS = [
    "train on the CPU with {n} cores using bucket {data}, results in {out}",
    "fine-tune with {n} CPU cores; data in {data}, write to {out}",
    "run it on {n} cpus: dataset {data}, output bucket {out}",
]
SYSTEM = "You turn requests into the exact sovai command. Answer with the command only."


def command(kind, n, data, out):
    if kind == "cpu":
        resources = "--flavor ai1-1-cpu --cpu %d" % n
    else:
        resources = "--flavor %s --gpu %d" % (GPUS[kind], n)
    return ("sovai job run %s --volume %s@%s/:/workspace/data:ro --volume %s@%s/:/workspace/output:rw "
            "sovai/finetune" % (resources, data, REGION, out, REGION))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--count", type=int, default=1200)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    combos = []
    for kind in list(GPUS) + ["cpu"]:
        for n in ([1, 2, 4, 8] if kind != "cpu" else [2, 4, 8]):
            for data in BUCKETS:
                for out in OUTPUTS:
                    combos.append((kind, n, data, out))
    rng.shuffle(combos)
    # Disjoint combinations per split: 80 / 10 / 10.
    cut1, cut2 = int(len(combos) * 0.8), int(len(combos) * 0.9)
    splits = {"train": combos[:cut1], "validation": combos[cut1:cut2], "test": combos[cut2:]}
    sizes = {"train": int(args.count * 0.8), "validation": args.count // 10, "test": args.count // 10}
    os.makedirs(args.out, exist_ok=True)
    for name, pool in splits.items():
        with open(os.path.join(args.out, name + ".jsonl"), "w") as f:
            for i in range(sizes[name]):
                kind, n, data, out = pool[i % len(pool)]
                words = rng.choice(NUMBERS.get(n, [str(n)])) if kind != "cpu" else str(n)
                template = rng.choice(CPU_ASKS if kind == "cpu" else ASKS)
                ask = template.format(n=words, gpu=kind, data=data, out=out)
                if rng.random() < 0.3:
                    ask = ask[0].upper() + ask[1:]
                f.write(json.dumps({"messages": [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": ask},
                    {"role": "assistant", "content": command(kind, n, data, out)}]}) + "\n")
    print("wrote %s: %s" % (args.out, ", ".join("%s %d" % (k, v) for k, v in sizes.items())))


if __name__ == "__main__":
    main()
