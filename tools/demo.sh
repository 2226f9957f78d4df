#!/usr/bin/env bash
# `make demo`: Sovai's main job on the embedded defaults. It starts `sovai server` in a fresh data
# directory, waits for /health, then lives the story as a user does with the `sovai` CLI: log in,
# put a dataset in a bucket, run a job that reads it from a ro volume and writes into a rw volume
# with its logs followed live, read the result back from the bucket; then shows the metrics and
# stops the server cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
sovai=build/src/cli/sovai

data_dir=$(mktemp -d -t sovai-demo-XXXXXX)
log="$data_dir/server.log"
server_pid=
cleanup() {
  if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then kill -KILL "$server_pid"; fi
  rm -rf "$data_dir"
}
trap cleanup EXIT

echo "== sovai $($sovai version)"
echo "== starting sovai server in $data_dir"
"$sovai" server --data-dir "$data_dir" --listen-api 127.0.0.1:0 --listen-s3 127.0.0.1:0 >"$log" 2>&1 &
server_pid=$!

for _ in $(seq 1 100); do
  [[ -f $data_dir/server.json ]] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$log"; echo "demo: server exited early" >&2; exit 1; }
  sleep 0.1
done
[[ -f $data_dir/server.json ]] || { cat "$log"; echo "demo: server did not start" >&2; exit 1; }
api_url=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["api_url"])' "$data_dir/server.json")
s3_url=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["s3_url"])' "$data_dir/server.json")

echo "== waiting for $api_url/health"
for _ in $(seq 1 50); do
  curl -fsS "$api_url/health" >/dev/null 2>&1 && break
  sleep 0.1
done
echo "\$ curl $api_url/health"
curl -fsS "$api_url/health"; echo
echo
echo "Endpoints:"
echo "  REST API, panel, /health, /metrics  $api_url"
echo "  S3                                  $s3_url"
echo "  admin credentials                   $data_dir/admin.json (mode $(stat -c %a "$data_dir/admin.json"))"
echo
# The user's side, with the CLI's config inside the demo directory.
export SOVAI_CONFIG="$data_dir/cli-config.json"
token=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["api_token"])' "$data_dir/admin.json")
run() { echo "\$ sovai $(printf '%q ' "$@")"; "$sovai" "$@"; }
run login --url "$api_url" --token "$token"
echo
run flavor list
echo
mkdir -p "$data_dir/dataset"
printf '{"text": "hello"}\n{"text": "bonjour"}\n{"text": "hallo"}\n' >"$data_dir/dataset/train.jsonl"
run bucket mb my-bucket
run bucket cp -r "$data_dir/dataset" s3://my-bucket/dataset
echo
if "$sovai" flavor list -o json | python3 -c 'import json,sys; sys.exit(0 if any(f["id"] == "ai1-1-cpu" and f["available"] for f in json.load(sys.stdin)) else 1)'; then
  run job run --flavor ai1-1-cpu --cpu 1 \
    --volume my-bucket@EU-WEST-LOCAL/dataset:/workspace/data:ro \
    --volume my-bucket@EU-WEST-LOCAL/output:/workspace/output:rw \
    --follow sovai/shell -- sh -c 'wc -l /workspace/data/train.jsonl | tee /workspace/output/lines.txt'
  echo
  run bucket cp s3://my-bucket/output/lines.txt -
  run job list
else
  echo "(jobs are not available on this host; see the server log: $log)"
fi
echo
echo "\$ curl $api_url/metrics | grep -E '^sovai_(build_info|uptime|http_open|http_requests_total)'"
curl -fsS "$api_url/metrics" | grep -E '^sovai_(build_info|uptime|http_open|http_requests_total)'
echo
echo "== stopping the server (SIGTERM)"
kill -TERM "$server_pid"
if wait "$server_pid"; then
  echo "== server stopped cleanly"
  server_pid=
else
  status=$?
  server_pid=
  cat "$log"
  echo "demo: server exited with status $status" >&2
  exit 1
fi
