#!/usr/bin/env python3
"""The demo's task: plain-language requests -> the exact `sovai job run` command.

Writes chat JSONL ({"messages": [{"role": "user", ...}, {"role": "assistant", ...}]}) to
OUTPUT_DIR/train.jsonl, validation.jsonl and test.jsonl, and OUTPUT_DIR/dataset.json (the sizes,
seed and held-out slot values). Deterministic: the same --seed gives the same bytes.

  tools/demo/make_dataset.py [--seed N] [--train N] [--validation N] [--test N] OUTPUT_DIR

The answer grammar (docs/cli.md, `job run`), one command on one line:

  sovai job run --flavor FLAVOR
      --volume DATA@EU-WEST-LOCAL/data:/workspace/data:ro
      --volume OUT@EU-WEST-LOCAL/output:/workspace/output:rw
      sovai/finetune

Slots: FLAVOR (the six GPU flavors of the default catalog, named by their GPU model; one GPU, the
server's default unit count), DATA and OUT (bucket names, never equal). Requests name the data
before the output. A GPU count (`--gpu N`, 1-4), a timeout slot and requests naming the output
first were tried and left out: the demo's training budget (about 1M tokens) does not learn them
(tools/demo/README.md; the count stayed at chance, 121 of 200 test answers wrong).

No leakage, and the test measures generalisation:
* Every user text appears in one split only (texts are unique over the whole dataset).
* Validation and test use only held-out (data bucket, output bucket) pairs: a fifth of the ordered
  pairs, which never occur in training, so each test request asks for a combination of buckets
  the model never saw (every bucket alone does occur in training, in both roles). Flavors are
  crossed freely with them.
"""

import argparse
import json
import os
import random
import sys

REGION = "EU-WEST-LOCAL"

# GPU model as people say it -> the catalog's flavor (src/control/flavors.cc).
FLAVORS = {
    "H200": "h200-1-gpu",
    "H100": "h100-1-gpu",
    "A100": "a100-1-gpu",
    "L40S": "l40s-1-gpu",
    "L4": "l4-1-gpu",
    "V100S": "ai1-1-gpu",
}

BUCKETS = [
    "corpus", "wiki", "reviews", "tickets", "legal", "medical", "news", "emails", "chats",
    "invoices", "recipes", "poems", "code", "papers", "faq", "manuals", "tweets", "forum",
    "patents", "lyrics", "out", "results", "runs", "models", "ckpt", "exports", "scratch",
    "archive", "team-nlp", "prod-data", "eval-set", "raw-text", "fr-news", "de-wiki", "q3-logs",
    "finetune", "adapters", "outputs", "backup", "lab",
]


def gpu_phrase(rng, model):
    """One GPU of `model`, as people say it: "an H100", "a single NVIDIA A100 card", "1x l4"."""
    name = rng.choice([model, model, model.lower(), "NVIDIA " + model])
    noun = rng.choice([name, name, name + " GPU", name + " card"])
    article = "a" if name[0] in "Vv" else "an"
    return rng.choice([f"{article} {noun}", f"one {noun}", f"a single {noun}", f"1x {name}",
                       noun])


def bucket_phrase(rng, bucket, role):
    if role == "data":
        return rng.choice([
            f"the data in bucket {bucket}",
            f"the dataset in the {bucket} bucket",
            f"data from bucket {bucket}",
            f"the files in {bucket}",
            f"bucket {bucket} as input",
            f"my {bucket} bucket",
            f"the {bucket} dataset",
            f"input from {bucket}",
            f"the data in {bucket}",
            f"what's in bucket {bucket}",
        ])
    return rng.choice([
        f"write results to {bucket}",
        f"save the output in bucket {bucket}",
        f"put the results in {bucket}",
        f"store outputs in the {bucket} bucket",
        f"send the output to {bucket}",
        f"write everything to bucket {bucket}",
        f"results go to {bucket}",
        f"output to {bucket}",
        f"save it to {bucket}",
        f"keep the checkpoints in {bucket}",
    ])


def request_text(rng, model, data, out):
    gpu = gpu_phrase(rng, model)
    src = bucket_phrase(rng, data, "data")
    dst = bucket_phrase(rng, out, "out")
    verb = rng.choice(["train", "fine-tune", "finetune", "run the fine-tune", "launch training",
                       "start a finetune job", "run training", "kick off a fine-tuning run"])
    opener = rng.choice(["", "", "please ", "can you ", "I want to ", "I'd like to ",
                         "hey, ", "could you "])
    on = rng.choice(["on", "on", "using", "with"])
    shape = rng.randrange(5)
    if shape == 0:
        text = f"{opener}{verb} {on} {gpu} with {src}, {dst}"
    elif shape == 1:
        text = f"{opener}{verb} with {src} {on} {gpu} and {dst}"
    elif shape == 2:
        text = f"{opener}{verb} {on} {gpu}; {src}; {dst}"
    elif shape == 3:
        text = f"{gpu}, {src}, {dst}: {verb}"
    else:
        text = f"{opener}{verb}: {src}, {gpu}, {dst}"
    text = text.strip()
    text = text[0].upper() + text[1:] if rng.random() < 0.5 else text
    if rng.random() < 0.3:
        text += rng.choice([".", "!", " please", " thanks"])
    return text


def command(flavor, data, out):
    parts = ["sovai job run", f"--flavor {flavor}",
             f"--volume {data}@{REGION}/data:/workspace/data:ro",
             f"--volume {out}@{REGION}/output:/workspace/output:rw", "sovai/finetune"]
    return " ".join(parts)


def make(seed, sizes):
    rng = random.Random(seed)
    models = sorted(FLAVORS)
    bucket_pairs = [(d, o) for d in BUCKETS for o in BUCKETS if d != o]
    rng.shuffle(bucket_pairs)
    held_buckets = set(bucket_pairs[: len(bucket_pairs) // 5])
    train_buckets = [p for p in bucket_pairs if p not in held_buckets]
    test_buckets = sorted(held_buckets)
    for role in (0, 1):
        if {p[role] for p in train_buckets} != set(BUCKETS):
            sys.exit("make_dataset: a bucket never appears in training in one role; change --seed")

    seen = set()

    def draw(n, bucket_choices):
        rows = []
        tries = 0
        while len(rows) < n:
            tries += 1
            if tries > 100 * n + 1000:
                sys.exit("make_dataset: cannot draw %d unique requests" % n)
            model = rng.choice(models)
            data, out = rng.choice(bucket_choices)
            user = request_text(rng, model, data, out)
            if user in seen:
                continue
            seen.add(user)
            rows.append({"messages": [
                {"role": "user", "content": user},
                {"role": "assistant",
                 "content": command(FLAVORS[model], data, out)},
            ]})
        return rows

    # Held-out splits first, so a text drawn for them is never drawn again for training.
    test = draw(sizes["test"], test_buckets)
    validation = draw(sizes["validation"], test_buckets)
    train = draw(sizes["train"], train_buckets)
    meta = {
        "seed": seed,
        "task": "plain-language request -> sovai job run command (exact match)",
        "sizes": {"train": len(train), "validation": len(validation), "test": len(test)},
        "held_out_bucket_pairs": len(held_buckets),
        "bucket_pairs": len(bucket_pairs),
    }
    return {"train": train, "validation": validation, "test": test}, meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("output_dir")
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--train", type=int, default=6000)
    ap.add_argument("--validation", type=int, default=100)
    ap.add_argument("--test", type=int, default=200)
    args = ap.parse_args()
    splits, meta = make(args.seed, {"train": args.train, "validation": args.validation,
                                    "test": args.test})
    os.makedirs(args.output_dir, exist_ok=True)
    for name, rows in splits.items():
        path = os.path.join(args.output_dir, name + ".jsonl")
        with open(path + ".tmp", "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
        os.replace(path + ".tmp", path)
    with open(os.path.join(args.output_dir, "dataset.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print("make_dataset: %s: train %d, validation %d, test %d (%d of %d bucket pairs held out)"
          % (args.output_dir, meta["sizes"]["train"], meta["sizes"]["validation"],
             meta["sizes"]["test"], meta["held_out_bucket_pairs"], meta["bucket_pairs"]))


if __name__ == "__main__":
    main()
