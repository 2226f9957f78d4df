#!/usr/bin/env bash
# Jobs: N trivial jobs (`true` on ai1-1-cpu) through a real `sovai server` (REST, scheduler,
# sandbox, state in SQLite) against the same command started directly under bwrap, side by side
# in one run; prints p50/p99 latencies, jobs/s and the overhead at p50 (jobs_bench.py).
# Asserts nothing.
# Env: JOBS (100), ROUNDS (3), BUILD_DIR (build), BENCH_DIR (parent of the work dir; $TMPDIR or
# /tmp), KEEP (1 keeps the work directory).
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs=${JOBS:-100}
rounds=${ROUNDS:-3}
sovai_bin=${BUILD_DIR:-build}/src/cli/sovai
[[ -x $sovai_bin ]] || { echo "bench: $sovai_bin is missing; build first (make build)" >&2; exit 1; }
command -v bwrap >/dev/null || { echo "bench: needs bwrap (tools/bootstrap.sh)" >&2; exit 1; }
work=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/sovai-bench-jobs-XXXXXX")
chmod 711 "$work"  # the workloads' uid traverses to their directories
pid=""
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  if [[ ${KEEP:-0} == 1 ]]; then echo "bench: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
"$sovai_bin" server --data-dir "$work/data" --listen-api 127.0.0.1:0 --listen-s3 127.0.0.1:0 --listen-registry 127.0.0.1:0 \
  --log-level warning >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  [[ -f $work/data/server.json ]] && break
  kill -0 "$pid" 2>/dev/null || { echo "bench: server exited: $(tail -5 "$work/server.log")" >&2; exit 1; }
  sleep 0.1
done
echo "bench/jobs: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); $rounds round(s) of $jobs jobs"
python3 bench/jobs/jobs_bench.py "$work/data" "$jobs" "$rounds"
