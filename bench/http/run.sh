#!/usr/bin/env bash
# HTTP server throughput: Sovai's HTTP stack (src/net) against nginx serving the same small response,
# on the same machine, with the same number of worker threads, driven by wrk in one run.
# Prints the median req/s of each over ROUNDS alternating rounds, and the ratio. Asserts nothing.
#
# Env: THREADS (server worker threads, default 1), CONNECTIONS (default 64), DURATION_S (default 5),
#      ROUNDS (default 3), WRK_THREADS (default 1).
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${THREADS:-1}
connections=${CONNECTIONS:-64}
duration_s=${DURATION_S:-5}
rounds=${ROUNDS:-3}
wrk_threads=${WRK_THREADS:-1}
server_bin=build/bench/http_bench_server
[[ -x $server_bin ]] || { echo "bench: build first (make build)" >&2; exit 1; }
command -v wrk >/dev/null && command -v nginx >/dev/null || { echo "bench: needs wrk and nginx (tools/bootstrap.sh)" >&2; exit 1; }

work=$(mktemp -d -t sovai-bench-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# nginx: same body, same headers that matter, no access log, keep-alive without a request cap.
nginx_port=$(free_port)
mkdir -p "$work/nginx"
cat >"$work/nginx/nginx.conf" <<CONF
worker_processes $threads;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $work/nginx/body;
  proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fastcgi;
  uwsgi_temp_path $work/nginx/uwsgi;
  scgi_temp_path $work/nginx/scgi;
  server {
    listen 127.0.0.1:$nginx_port;
    location / { default_type text/plain; return 200 "hello, sovai\n"; }
  }
}
CONF
nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" &
pids+=($!)

sovai_port=$(free_port)
"$server_bin" --listen "127.0.0.1:$sovai_port" --threads "$threads" &
pids+=($!)

for port in "$nginx_port" "$sovai_port"; do
  for _ in $(seq 1 50); do curl -fsS "http://127.0.0.1:$port/" >/dev/null 2>&1 && break; sleep 0.1; done
  curl -fsS "http://127.0.0.1:$port/" >/dev/null || { echo "bench: server on $port did not start" >&2; exit 1; }
done

run_wrk() {  # prints req/s
  wrk -t"$wrk_threads" -c"$connections" -d"${duration_s}s" "http://127.0.0.1:$1/" |
    awk '/^Requests\/sec:/ {print $2}'
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "bench/http: $threads server thread(s), wrk -t$wrk_threads -c$connections -d${duration_s}s, $rounds rounds, $(nproc) cores"
nginx_runs=(); sovai_runs=()
for round in $(seq 1 "$rounds"); do
  n=$(run_wrk "$nginx_port"); s=$(run_wrk "$sovai_port")
  nginx_runs+=("$n"); sovai_runs+=("$s")
  printf '  round %d: nginx %10.0f req/s   sovai %10.0f req/s\n' "$round" "$n" "$s"
done
nginx_median=$(printf '%s\n' "${nginx_runs[@]}" | median)
sovai_median=$(printf '%s\n' "${sovai_runs[@]}" | median)
awk -v n="$nginx_median" -v s="$sovai_median" 'BEGIN {
  printf "median: nginx %.0f req/s, sovai %.0f req/s, ratio sovai/nginx = %.2f (target >= 0.70)\n", n, s, s / n }'
