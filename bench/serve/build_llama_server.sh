#!/usr/bin/env bash
# Builds llama.cpp's llama-server from the llama.cpp source that the npm package
# node-llama-cpp@NODE_LLAMA_CPP_VERSION ships (package/llama/gitRelease.bundle, a git bundle of
# the release it pins, plus its patches in package/llama/patches, applied as node-llama-cpp's own
# source build applies them). Only the npm registry is needed. Nothing lands in the repository:
# the tarball is unpacked in a temporary directory and the source and build are cached under
# $SOVAI_BENCH_CACHE (~/.cache/sovai-bench), so that a rerun skips the build (~25 minutes on
# two cores).
#
# Prints the llama-server path on stdout and exits 0, or prints one line "REASON" on stdout and
# exits 1 when it cannot be had (no npm, no bundle in the tarball, a failed build); the log of
# a failed build is kept in the cache directory.
#
# Env: SOVAI_BENCH_CACHE, NODE_LLAMA_CPP_VERSION (3.21.1), BUILD_JOBS (nproc).
set -uo pipefail
version=${NODE_LLAMA_CPP_VERSION:-3.21.1}
cache=${SOVAI_BENCH_CACHE:-$HOME/.cache/sovai-bench}
root=$cache/llama.cpp-node-llama-cpp-$version
src=$root/src
build=$root/build
server=$build/bin/llama-server
jobs=${BUILD_JOBS:-$(nproc)}

fail() { echo "$1"; exit 1; }
log() { echo "build_llama_server: $*" >&2; }

if [[ -x $server ]]; then
  echo "$server"
  exit 0
fi
command -v npm >/dev/null || fail "npm is not installed"
command -v git >/dev/null || fail "git is not installed"
command -v cmake >/dev/null || fail "cmake is not installed"
mkdir -p "$root"

if [[ ! -f $src/.source-ready ]]; then
  tmp=$(mktemp -d -t sovai-node-llama-cpp-XXXXXX)
  trap 'rm -rf "$tmp"' EXIT
  log "npm pack node-llama-cpp@$version"
  (cd "$tmp" && npm pack --silent "node-llama-cpp@$version" >/dev/null 2>"$tmp/npm.err") ||
    fail "npm pack node-llama-cpp@$version failed: $(tail -1 "$tmp/npm.err")"
  tar -xzf "$tmp/node-llama-cpp-$version.tgz" -C "$tmp" package/llama ||
    fail "node-llama-cpp@$version tarball has no llama/ directory"
  bundle=$tmp/package/llama/gitRelease.bundle
  [[ -f $bundle ]] || fail "node-llama-cpp@$version ships no llama.cpp source (no llama/gitRelease.bundle)"
  log "llama.cpp release $(tr -d '\n ' <"$tmp/package/llama/llama.cpp.info.json" 2>/dev/null)"
  rm -rf "$src"
  git clone --quiet "$bundle" "$src" 2>"$tmp/git.err" ||
    fail "git clone of the bundled llama.cpp failed: $(tail -1 "$tmp/git.err")"
  for patch in "$tmp"/package/llama/patches/*.diff; do
    [[ -f $patch ]] || continue
    if git -C "$src" apply --ignore-whitespace --check "$patch" 2>/dev/null; then
      git -C "$src" apply --ignore-whitespace "$patch" || fail "patch $(basename "$patch") failed"
      log "applied $(basename "$patch")"
    else
      log "skipped $(basename "$patch") (does not apply: already in the source)"
    fi
  done
  cp "$tmp/package/llama/llama.cpp.info.json" "$src/node-llama-cpp.info.json" 2>/dev/null
  touch "$src/.source-ready"
fi

# Release with the host's instruction set, CPU only, no network features, no web UI (it would be
# downloaded); only the server target.
log "building llama-server with $jobs jobs (log: $root/build.log)"
if ! { cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
         -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
         -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_CCACHE=OFF &&
       cmake --build "$build" --target llama-server -j "$jobs"; } >"$root/build.log" 2>&1; then
  fail "the llama-server build failed (see $root/build.log: $(grep -m1 -i 'error' "$root/build.log"))"
fi
[[ -x $server ]] || fail "the build finished without $server"
echo "$server"
