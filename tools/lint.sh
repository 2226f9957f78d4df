#!/usr/bin/env bash
# Runs clang-tidy (the checks in .clang-tidy) over every project source in build/compile_commands.json.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -f build/compile_commands.json ]] || { echo "lint: run 'make build' first" >&2; exit 1; }
mapfile -t sources < <(git ls-files 'src/*.cc' 'tests/*.cc' 'bench/*.cc' | grep -v '_fuzzer.cc$')
jobs=$(nproc)
printf '%s\n' "${sources[@]}" | xargs -P "$jobs" -n 4 clang-tidy -p build --quiet 2>/dev/null
echo "lint: clang-tidy clean on ${#sources[@]} files"
