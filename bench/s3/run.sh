#!/usr/bin/env bash
# S3 object storage: `sovai server`'s S3 endpoint against its peers, side by side in one run, on
# the same machine and the same filesystem:
#   PUT of one BIG_MB object (multipart, PART_MB parts, BIG_CONCURRENCY at once)
#       vs the disk's raw sequential write of as many bytes, fdatasync'd (s3_load disk-write),
#       and vs the MD5 ceiling: the same bytes hashed as parts on BIG_CONCURRENCY threads and
#       nothing else (s3_load md5). Every part's ETag is its MD5, so a compliant server cannot
#       beat that ceiling; on a machine whose disk outruns MD5 on all cores it is the real limit
#       (docs/decisions/0004-part-etags-stay-md5.md);
#   GET of that object (one stream)      vs nginx serving a file of the same size;
#   4 KiB PUT/s at each PUT_CONCURRENCY  vs the durable-write floor at the same concurrency: per
#       object write a temp file, fdatasync, rename, fsync the directory (s3_load fsync-put);
#   4 KiB GET/s at each GET_CONCURRENCY  vs nginx serving 4 KiB files.
# Every measurement is s3_load (bench/s3/s3_load.cc): SigV4-signed for Sovai, plain HTTP for
# nginx, so both sides pay the same client. A client check compares s3_load --plain with wrk on
# the same nginx file, to show the load generator is not the limit. Peer and Sovai alternate
# which goes first in each round; the summary prints medians over ROUNDS and the ratios.
# Asserts nothing.
#
# Env: ROUNDS (3), BIG_MB (1024), PART_MB (64), BIG_CONCURRENCY (4), DURATION_S (5, each small
#      run), SMALL_BYTES (4096), GET_KEYS (2000), PUT_CONCURRENCY ("1 16 64"),
#      GET_CONCURRENCY ("16 64"), IO_THREADS (sovai --io-threads and nginx workers; default one
#      per core), NGINX_SENDFILE (off, nginx's default: over loopback on the 2-core dev VM nginx
#      served 256 MiB faster without sendfile, ~1.6 vs ~1.0 GB/s), BENCH_DIR (parent of the work
#      directory; default $TMPDIR or /tmp), BUILD_DIR (build), KEEP (1 keeps the work directory).
# Smoke run: BIG_MB=256 ROUNDS=1 DURATION_S=2 bench/s3/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${ROUNDS:-3}
big_mb=${BIG_MB:-1024}
part_mb=${PART_MB:-64}
big_concurrency=${BIG_CONCURRENCY:-4}
duration_s=${DURATION_S:-5}
small_bytes=${SMALL_BYTES:-4096}
get_keys=${GET_KEYS:-2000}
put_concurrency=${PUT_CONCURRENCY:-1 16 64}
get_concurrency=${GET_CONCURRENCY:-16 64}
io_threads=${IO_THREADS:-$(nproc)}
nginx_sendfile=${NGINX_SENDFILE:-off}
build_dir=${BUILD_DIR:-build}
sovai_bin=$build_dir/src/cli/sovai
load_bin=$build_dir/bench/s3_load
for b in "$sovai_bin" "$load_bin"; do
  [[ -x $b ]] || { echo "bench: $b is missing; build first (make build, or BUILD_DIR=...)" >&2; exit 1; }
done
command -v nginx >/dev/null && command -v wrk >/dev/null ||
  { echo "bench: needs nginx and wrk (tools/bootstrap.sh)" >&2; exit 1; }

work=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/sovai-bench-s3-XXXXXX")
chmod 755 "$work"  # nginx workers run as another user when started by root
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [[ ${KEEP:-0} == 1 ]]; then echo "bench: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
json_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

# --- Sovai ---------------------------------------------------------------------------------------
"$sovai_bin" server --data-dir "$work/sovai" --listen-api 127.0.0.1:0 --listen-s3 127.0.0.1:0 --listen-registry 127.0.0.1:0 \
  --io-threads "$io_threads" --log-level warning >"$work/sovai.log" 2>&1 &
sovai_pid=$!
pids+=("$sovai_pid")
for _ in $(seq 1 300); do
  [[ -f $work/sovai/server.json ]] && [[ $(json_field "$work/sovai/server.json" pid) == "$sovai_pid" ]] && break
  kill -0 "$sovai_pid" 2>/dev/null || { echo "bench: sovai server exited: $(tail -5 "$work/sovai.log")" >&2; exit 1; }
  sleep 0.1
done
s3_url=$(json_field "$work/sovai/server.json" s3_url)
region=$(json_field "$work/sovai/server.json" region | tr '[:upper:]' '[:lower:]')
access_key=$(json_field "$work/sovai/admin.json" access_key_id)
secret_key=$(json_field "$work/sovai/admin.json" secret_access_key)
S3=(--endpoint "$s3_url" --access-key "$access_key" --secret-key "$secret_key" --region "$region"
    --bucket bench)

# --- nginx: the same paths (/bench/<key>) as files under its root -------------------------------
nginx_port=$(free_port)
mkdir -p "$work/nginx/root/bench/g" "$work/floor"
cat >"$work/nginx/nginx.conf" <<CONF
worker_processes $io_threads;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  sendfile $nginx_sendfile;
  tcp_nopush on;
  default_type application/octet-stream;
  client_body_temp_path $work/nginx/body;
  proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fastcgi;
  uwsgi_temp_path $work/nginx/uwsgi;
  scgi_temp_path $work/nginx/scgi;
  server {
    listen 127.0.0.1:$nginx_port;
    root $work/nginx/root;
  }
}
CONF
nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" &
pids+=($!)
NGINX=(--endpoint "http://127.0.0.1:$nginx_port" --bucket bench --plain)

# --- Helpers ------------------------------------------------------------------------------------
last=""  # the last s3_load line
load() {
  if ! last=$("$load_bin" "$@" 2>"$work/load.err"); then
    echo "bench: s3_load $* failed: $(cat "$work/load.err")" >&2
    echo "bench: sovai log tail: $(tail -5 "$work/sovai.log")" >&2
    exit 1
  fi
}
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$last"; }
declare -A vals
rec() { vals[$1]+="$2 "; }  # rec NAME VALUE: one round's value
median() {
  tr ' ' '\n' <<<"${vals[$1]:-}" | grep . | sort -g |
    awk '{a[NR]=$1} END {if (NR == 0) print 0; else print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'
}
# The sovai server's CPU over a measurement, in cores (user + system ticks of its process).
ticks() { awk '{print $14 + $15}' "/proc/$sovai_pid/stat"; }
now_s() { date +%s.%N; }
cpu_begin() { cpu_ticks0=$(ticks); cpu_time0=$(now_s); }
cpu_end() {
  server_cores=$(awk -v a="$cpu_ticks0" -v b="$(ticks)" -v t0="$cpu_time0" -v t1="$(now_s)" \
    -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", (b - a) / hz / (t1 - t0)}')
}
# Runs peer_X and sovai_X (functions), the peer first in odd rounds and last in even ones.
both() { if ((round % 2)); then "peer_$1"; "sovai_$1"; else "sovai_$1"; "peer_$1"; fi; }

peer_put_big() {
  load --op disk-write --dir "$work/nginx/root/bench" --key big --big-mb "$big_mb" --part-mb "$part_mb"
  rec disk_write "$(field MB_per_s)"
  printf '  PUT %5d MiB          disk  %8.1f MB/s\n' "$big_mb" "$(field MB_per_s)"
  load --op md5 --big-mb "$big_mb" --part-mb "$part_mb" --concurrency "$big_concurrency"
  rec md5_ceiling "$(field MB_per_s)"
  printf '  PUT %5d MiB          md5   %8.1f MB/s   (hashing only, %d threads)\n' "$big_mb" \
    "$(field MB_per_s)" "$big_concurrency"
}
sovai_put_big() {
  cpu_begin
  load "${S3[@]}" --op put-big --key "big-$round" --big-mb "$big_mb" --part-mb "$part_mb" \
    --concurrency "$big_concurrency"
  cpu_end
  rec sovai_put_big "$(field MB_per_s)"
  printf '  PUT %5d MiB          sovai %8.1f MB/s   (%d x %d MiB parts at once; part p50 %.0f ms; server %s cores, client %s)\n' \
    "$big_mb" "$(field MB_per_s)" "$big_concurrency" "$part_mb" "$(field p50_ms)" "$server_cores" "$(field client_cpu)"
}
peer_get_big() {
  load "${NGINX[@]}" --op get-big --key big
  rec nginx_get_big "$(field MB_per_s)"
  printf '  GET %5d MiB          nginx %8.1f MB/s   (client %s cores)\n' "$big_mb" "$(field MB_per_s)" "$(field client_cpu)"
}
sovai_get_big() {
  cpu_begin
  load "${S3[@]}" --op get-big --key "big-$round"
  cpu_end
  rec sovai_get_big "$(field MB_per_s)"
  printf '  GET %5d MiB          sovai %8.1f MB/s   (server %s cores, client %s)\n' \
    "$big_mb" "$(field MB_per_s)" "$server_cores" "$(field client_cpu)"
}
small_line() {  # who concurrency name
  rec "$3" "$(field ops_per_s)"
  rec "$3_p50" "$(field p50_ms)"
  rec "$3_p99" "$(field p99_ms)"
  printf '  %-3s %5s B c=%-3d     %-5s %8.0f /s     (p50 %.2f ms, p99 %.2f ms%s)\n' "$op_name" \
    "$small_bytes" "$2" "$1" "$(field ops_per_s)" "$(field p50_ms)" "$(field p99_ms)" "${4:-}"
}
peer_put_small() {
  load --op fsync-put --dir "$work/floor/r$round-c$c" --size-bytes "$small_bytes" \
    --concurrency "$c" --duration-s "$duration_s"
  rm -rf "$work/floor/r$round-c$c"
  op_name=PUT small_line floor "$c" "floor_put_c$c"
}
sovai_put_small() {
  cpu_begin
  load "${S3[@]}" --op put --prefix "p$round-c$c/" --size-bytes "$small_bytes" \
    --concurrency "$c" --duration-s "$duration_s"
  cpu_end
  op_name=PUT small_line sovai "$c" "sovai_put_c$c" "; server $server_cores cores, client $(field client_cpu)"
}
peer_get_small() {
  load "${NGINX[@]}" --op get --prefix g/ --count "$get_keys" --size-bytes "$small_bytes" \
    --concurrency "$c" --duration-s "$duration_s"
  op_name=GET small_line nginx "$c" "nginx_get_c$c" "; client $(field client_cpu)"
}
sovai_get_small() {
  cpu_begin
  load "${S3[@]}" --op get --prefix g/ --count "$get_keys" --size-bytes "$small_bytes" \
    --concurrency "$c" --duration-s "$duration_s"
  cpu_end
  op_name=GET small_line sovai "$c" "sovai_get_c$c" "; server $server_cores cores, client $(field client_cpu)"
}
max_c=$(tr ' ' '\n' <<<"$get_concurrency" | sort -n | tail -1)
# The load generator against independent clients on the same nginx: wrk for small GETs, curl for
# the big file.
peer_client_check() {
  local w m
  w=$(wrk -t1 -c"$max_c" -d"${duration_s}s" "http://127.0.0.1:$nginx_port/bench/g/0" |
    awk '/^Requests\/sec:/ {print $2}')
  m=$(curl -sS -o /dev/null -w '%{speed_download}' "http://127.0.0.1:$nginx_port/bench/big" |
    awk '{printf "%.1f", $1 / 1e6}')
  rec wrk_nginx "$w"
  rec curl_nginx "$m"
  printf '  check: wrk     GET %s B c=%d %8.0f /s   curl GET %d MiB %8.1f MB/s  (nginx)\n' \
    "$small_bytes" "$max_c" "$w" "$big_mb" "$m"
}
sovai_client_check() {
  local m
  load "${NGINX[@]}" --op get-big --key big
  m=$(field MB_per_s)
  load "${NGINX[@]}" --op get --prefix g/ --count 1 --size-bytes "$small_bytes" \
    --concurrency "$max_c" --duration-s "$duration_s"
  rec s3_load_nginx "$(field ops_per_s)"
  rec s3_load_nginx_big "$m"
  printf '  check: s3_load GET %s B c=%d %8.0f /s   s3_load GET %d MiB %8.1f MB/s  (nginx; client %s cores)\n' \
    "$small_bytes" "$max_c" "$(field ops_per_s)" "$big_mb" "$m" "$(field client_cpu)"
}

# --- Setup: the small objects GETs read, in both servers -----------------------------------------
for _ in $(seq 1 50); do
  [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$nginx_port/" || true) != 000 ]] && break
  sleep 0.1
done
load "${S3[@]}" --op create-bucket
load "${S3[@]}" --op put --prefix g/ --count "$get_keys" --size-bytes "$small_bytes" --concurrency 16 --duration-s 600
load --op fsync-put --dir "$work/nginx/root/bench/g" --prefix "" --count "$get_keys" \
  --size-bytes "$small_bytes" --concurrency 16 --duration-s 600

fs=$(df -PT "$work" | awk 'NR == 2 {print $2 " on " $1 " (" $7 ")"}')
echo "bench/s3: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); $rounds round(s); sovai --io-threads $io_threads, nginx $io_threads worker(s), sendfile $nginx_sendfile"
echo "  data: $work (sovai data dir, nginx root, disk peers), filesystem $fs"
echo "  big: $big_mb MiB, $part_mb MiB parts, $big_concurrency at once; small: $small_bytes B objects, ${duration_s}s per run, $get_keys keys for GETs; MB = 10^6 bytes"
for round in $(seq 1 "$rounds"); do
  echo "round $round:"
  both put_big
  both get_big
  for c in $put_concurrency; do both put_small; done
  for c in $get_concurrency; do both get_small; done
  both client_check
done

# --- Summary ---------------------------------------------------------------------------------------
echo "median of $rounds round(s):"
ratio() { awk -v s="$1" -v p="$2" 'BEGIN {printf "%.2f", (p > 0) ? s / p : 0}'; }
row() { printf '  %-24s %-24s %-24s %-6s %s\n' "$@"; }  # what, peer, sovai, ratio, goal
lat() { printf 'p50 %.2f p99 %.2f ms' "$(median "$1_p50")" "$(median "$1_p99")"; }
row "" "peer" "sovai" "ratio" "goal"
s=$(median sovai_put_big); p=$(median disk_write)
row "PUT $big_mb MiB multipart" "$(printf 'disk  %9.1f MB/s' "$p")" "$(printf 'sovai %9.1f MB/s' "$s")" \
  "$(ratio "$s" "$p")" ">= 0.80"
p=$(median md5_ceiling)
row "" "$(printf 'md5   %9.1f MB/s' "$p")" "" "$(ratio "$s" "$p")" "(ceiling: part ETags)"
s=$(median sovai_get_big); p=$(median nginx_get_big)
row "GET $big_mb MiB" "$(printf 'nginx %9.1f MB/s' "$p")" "$(printf 'sovai %9.1f MB/s' "$s")" \
  "$(ratio "$s" "$p")" ">= 0.80"
for c in $put_concurrency; do
  s=$(median "sovai_put_c$c"); p=$(median "floor_put_c$c")
  goal=""; [[ $c == 64 ]] && goal=">= 1500 PUT/s"
  row "PUT $small_bytes B c=$c" "$(printf 'floor %9.0f /s' "$p")" "$(printf 'sovai %9.0f /s' "$s")" \
    "$(ratio "$s" "$p")" "$goal"
  row "" "$(lat "floor_put_c$c")" "$(lat "sovai_put_c$c")"
done
for c in $get_concurrency; do
  s=$(median "sovai_get_c$c"); p=$(median "nginx_get_c$c")
  row "GET $small_bytes B c=$c" "$(printf 'nginx %9.0f /s' "$p")" "$(printf 'sovai %9.0f /s' "$s")" \
    "$(ratio "$s" "$p")" ">= 10000 GET/s"
  row "" "$(lat "nginx_get_c$c")" "$(lat "sovai_get_c$c")"
done
printf '  client check (same nginx): s3_load / wrk, %s B GET c=%d: %s;  s3_load / curl, %d MiB GET: %s\n' \
  "$small_bytes" "$max_c" "$(ratio "$(median s3_load_nginx)" "$(median wrk_nginx)")" \
  "$big_mb" "$(ratio "$(median s3_load_nginx_big)" "$(median curl_nginx)")"
echo "          (>= ~1: the load generator is not what limits the numbers above)"
echo "  ratios: PUT big = sovai / raw disk write; GET big and small GET = sovai / nginx;"
echo "          small PUT = sovai / (temp file + fdatasync + rename + dir fsync per object, same concurrency)"
