#!/usr/bin/env bash
# Checks the module graph (src/README.md against the CMake links and #includes), then runs
# clang-tidy (the checks in .clang-tidy) over every project source in the compilation database of a
# build directory: $1, default build/ (`make lint` passes build-lint/, the -Werror build).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 tools/check_module_graph.py
build=${1:-build}
[[ -f $build/compile_commands.json ]] || { echo "lint: build $build first (make lint)" >&2; exit 1; }

# The build precompiles Beast's headers with g++; clang-tidy cannot read g++'s .gch, so it gets a copy
# of the compilation database without the precompiled-header flags (the headers are then parsed).
# -Werror goes too: g++ enforces it in the build; clang's own warnings are not g++'s and are only
# reported here, by the checks .clang-tidy lists.
db=$(mktemp -d -t sovai-lint-XXXXXX)
trap 'rm -rf "$db"' EXIT
python3 - "$build/compile_commands.json" "$db/compile_commands.json" <<'PY'
import json, re, sys
entries = json.load(open(sys.argv[1]))
for e in entries:
    e["command"] = re.sub(r"-include \S*cmake_pch\.hxx|-Winvalid-pch|(?<=\s)-Werror(?=\s|$)", "", e["command"])
json.dump(entries, open(sys.argv[2], "w"))
PY

mapfile -t sources < <(git ls-files 'src/*.cc' 'tests/*.cc' 'bench/*.cc' | grep -v '_fuzzer.cc$')
printf '%s\n' "${sources[@]}" | xargs -P "$(nproc)" -n 4 clang-tidy -p "$db" --quiet 2>/dev/null
echo "lint: clang-tidy clean on ${#sources[@]} files"
