#!/usr/bin/env bash
# The recipe of models/sovai-tiny-llama: a small Llama-architecture base model pretrained by our
# own engine on public text from Debian's fortunes packages, with a tokenizer trained by
# `sovai-engine tokenizer train`. The demo and the tests fine-tune it.
#
#   tools/make_base_model.sh [OUTPUT_DIR]     (default: models/sovai-tiny-llama)
# Env: BUILD_DIR (build), STEPS (1200), THREADS (0 = all cores).
# Deterministic for a given engine build: data order, initialisation and split are seeded.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-models/sovai-tiny-llama}
engine=${BUILD_DIR:-build}/src/engine/sovai-engine
[[ -x $engine ]] || { echo "make_base_model: $engine is missing; run make build" >&2; exit 1; }
[[ -d /usr/share/games/fortunes ]] || { echo "make_base_model: apt-get install fortunes fortunes-min" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/sovai-base-model-XXXXXX")
trap 'rm -rf "$work"' EXIT

# 1. The corpus: every English fortune file (the ASCII-art ones left out), one text per cookie.
python3 - "$work" <<'PY'
import glob, json, os, sys
work = sys.argv[1]
texts = []
for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
    name = os.path.basename(path)
    if "." in name or name in ("art", "ascii-art") or os.path.isdir(path):
        continue
    raw = open(path, encoding="utf-8", errors="replace").read()
    for cookie in raw.split("\n%\n"):
        cookie = cookie.strip("%\n ")
        if 20 <= len(cookie) <= 1200:
            texts.append(cookie)
with open(os.path.join(work, "corpus.txt"), "w") as f:
    f.write("\n\n".join(texts))
with open(os.path.join(work, "fortunes.jsonl"), "w") as f:
    for t in texts:
        f.write(json.dumps({"text": t}) + "\n")
print("corpus: %d texts, %d characters" % (len(texts), sum(map(len, texts))))
PY

# 2. The tokenizer (byte-level BPE, 4096 tokens incl. the chat special tokens).
"$engine" tokenizer train --vocab-size 4096 --input "$work/corpus.txt" --output "$work/base"

# 3. The architecture: Llama with GQA and tied embeddings, ~4M parameters.
cat > "$work/base/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 4096,
 "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024,
 "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true,
 "hidden_act": "silu", "torch_dtype": "float32", "initializer_range": 0.02,
 "bos_token_id": 4091, "eos_token_id": 4092}
JSON
# As Llama 3's: a chat turn ends at <|eot_id|>, which generation must stop at too.
cat > "$work/base/generation_config.json" <<'JSON'
{"bos_token_id": 4091, "eos_token_id": [4092, 4095]}
JSON

# 4. Pretraining from random weights.
"$engine" train --model "$work/base" --data "$work/fortunes.jsonl" --output "$work/run" \
  --method full --from-scratch --max-steps "${STEPS:-1200}" --seq-len 256 --batch-rows 8 \
  --learning-rate 2e-3 --warmup-steps 50 --schedule cosine --weight-decay 0.1 \
  --eval-fraction 0.02 --eval-interval 200 --log-interval 50 --seed 20261129 \
  --threads "${THREADS:-0}" | tee "$work/train.log"

rm -rf "$out"
mkdir -p "$(dirname "$out")"
cp -r "$work/run/model" "$out"
cp "$work/run/metrics.jsonl" "$out/pretraining-metrics.jsonl"
grep -E "^(validation loss|done)" "$work/train.log" | tail -2
echo "make_base_model: wrote $out ($(du -sh "$out" | cut -f1))"
