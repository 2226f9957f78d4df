#!/usr/bin/env bash
# bench/gpu/run.sh: everything to measure on a GPU machine, in one go and within BUDGET_S
# seconds (default 540, so that it fits a ten-minute slot with room for the machine's own start).
# No network access is needed. Stages, in order, each under `timeout` with the smaller of its own
# limit and the time left, each one's exit status recorded, each run even when an earlier one
# failed:
#   build      bench/gpu/build.sh: `cmake --preset cuda` for this GPU's architecture, then only
#              the GPU tests and gpu_bench (or, if configuring fails, those compiled with nvcc)
#   cuda-backend  cuda_backend_test: every kernels::Backend op of the cuda backend against the
#              reference backend, and its memory seam (first, as it is the backend's proof)
#   gpu-tests  bench/gpu/test.sh: `ctest -L gpu --output-on-failure`
#   engine-train  engine_train.py: `sovai-engine train --backend cuda` on the tiny model (full
#              training against --backend cpu's losses, then LoRA), engine_train.json
#   gpu-bench  gpu_bench: the bf16 matrix rate through MatmulPlanner and the memory bandwidth
#   peft       peft_reference.py: PyTorch + PEFT LoRA (and QLoRA) on a Llama-3-8B-shaped model
# then prints the table (report.py) and keeps it in summary.txt.
#
# Results, all in OUT (default bench/gpu/out): build.log, cuda-backend.log, gpu-tests.log,
# engine-train.log (+ engine-train-*.log, engine_train.json), gpu-bench.log, gpu_bench.json,
# peft.log, peft_reference.json, summary.txt.
#
# Env: OUT, BUDGET_S (540), BUILD_DIR (a directory under TMPDIR, outside the source tree), PYTHON
# (python3: the one with torch, transformers and peft), and those of build.sh and
# peft_reference.py (STEPS, WARMUP, SEQ, GRAD_CKPT, ...).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/bench/gpu/out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUDGET_S=${BUDGET_S:-540}
BUILD_DIR=${BUILD_DIR:-${TMPDIR:-/tmp}/sovai-gpu-build}
PYTHON=${PYTHON:-python3}
# Kept back from the last stage for the report.
REPORT_RESERVE_S=15
# A stage given less than this is skipped rather than started to be killed.
MIN_STAGE_S=20

START=$(date +%s)
DEADLINE=$((START + BUDGET_S))
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
STAGES=$WORK/stages.tsv
: >"$STAGES"

# stage NAME LIMIT_S COMMAND...: runs COMMAND from the source root with its output in
# OUT/NAME.log, under the smaller of LIMIT_S and the time left; records its exit status (124:
# stopped at the limit). Returns the exit status.
stage() {
  local name=$1 cap=$2
  shift 2
  local left=$((DEADLINE - $(date +%s) - REPORT_RESERVE_S))
  local limit=$((cap < left ? cap : left))
  local log=$OUT/$name.log
  if ((limit < MIN_STAGE_S)); then
    printf '%s\t-\t0\t%s\tskipped: %s s left of the budget\n' "$name" "$limit" "$left" >>"$STAGES"
    echo "== $name: skipped, $left s left of the budget"
    return 1
  fi
  echo "== $name: at most $limit s, log $log"
  local t0 rc
  t0=$(date +%s)
  (cd "$ROOT" && STAGE_LIMIT_S=$limit timeout --kill-after=10 "$limit" "$@") >"$log" 2>&1
  rc=$?
  local seconds=$(($(date +%s) - t0))
  local note=""
  ((rc == 124 || rc == 137)) && note="stopped at its time limit"
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$rc" "$seconds" "$limit" "$note" >>"$STAGES"
  echo "== $name: exit status $rc after $seconds s"
  if ((rc != 0)); then
    echo "-- last lines of $log:"
    tail -n 25 "$log"
  fi
  return $rc
}

echo "bench/gpu/run.sh: budget $BUDGET_S s, results in $OUT, build in $BUILD_DIR"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu \
  --format=csv 2>&1 | tee "$WORK/nvidia-smi-before.txt"

stage build 300 bench/gpu/build.sh "$BUILD_DIR"
# The cmake build only: the direct nvcc mode builds neither the backend test nor sovai-engine.
if [ "$(cat "$BUILD_DIR/build-mode" 2>/dev/null)" = cmake ] &&
  [ -x "$BUILD_DIR/src/kernels/cuda_backend_test" ]; then
  stage cuda-backend 90 "$BUILD_DIR/src/kernels/cuda_backend_test"
else
  printf 'cuda-backend\t-\t0\t-\tnot run: cuda_backend_test was not built\n' >>"$STAGES"
  echo "== cuda-backend: not run, cuda_backend_test was not built"
fi
stage gpu-tests 120 bench/gpu/test.sh "$BUILD_DIR"
ENGINE_BIN=$BUILD_DIR/src/engine/sovai-engine
if [ -x "$ENGINE_BIN" ]; then
  stage engine-train 150 "$PYTHON" bench/gpu/engine_train.py "$ENGINE_BIN" "$OUT"
else
  printf 'engine-train\t-\t0\t-\tnot run: %s was not built\n' "$ENGINE_BIN" >>"$STAGES"
  echo "== engine-train: not run, $ENGINE_BIN was not built"
fi

BENCH_BIN=$BUILD_DIR/bench/gpu_bench
[ "$(cat "$BUILD_DIR/build-mode" 2>/dev/null)" = direct ] && BENCH_BIN=$BUILD_DIR/direct/gpu_bench
if [ -x "$BENCH_BIN" ]; then
  stage gpu-bench 120 "$BENCH_BIN" --json "$OUT/gpu_bench.json"
else
  printf 'gpu-bench\t-\t0\t-\tnot run: %s was not built\n' "$BENCH_BIN" >>"$STAGES"
  echo "== gpu-bench: not run, $BENCH_BIN was not built"
fi

# The reference gets what is left; it stops its own phases 20 s before the stage's limit so that
# it can still write what it measured.
left=$((DEADLINE - $(date +%s) - REPORT_RESERVE_S))
stage peft "$left" bash -c \
  "exec \"$PYTHON\" bench/gpu/peft_reference.py --out \"$OUT/peft_reference.json\" \
     --budget-s \$((STAGE_LIMIT_S - 20))"

{
  echo "bench/gpu/run.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(($(date +%s) - START)) s of a $BUDGET_S s budget"
  echo "source: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo
  echo "nvidia-smi before:"
  cat "$WORK/nvidia-smi-before.txt"
  echo "nvidia-smi after:"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv 2>&1
  echo
  "$PYTHON" "$ROOT/bench/gpu/report.py" "$OUT" "$STAGES" 2>&1 ||
    python3 "$ROOT/bench/gpu/report.py" "$OUT" "$STAGES" 2>&1 ||
    { echo "report.py failed; the stages were:"; cat "$STAGES"; }
} >"$OUT/summary.txt"
echo
cat "$OUT/summary.txt"
# Failed when any stage failed, so that a caller sees it; the table says which.
! awk -F'\t' '$2 != "0" { bad = 1 } END { exit !bad }' "$STAGES"
