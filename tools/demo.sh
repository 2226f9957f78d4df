#!/usr/bin/env bash
# `make demo`: Sovai's main job on the embedded defaults. For now it starts `sovai server` in a fresh
# data directory, waits for /health, shows the endpoints and the metrics, and stops it cleanly.
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
