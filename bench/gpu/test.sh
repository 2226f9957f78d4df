#!/usr/bin/env bash
# bench/gpu/test.sh BUILD_DIR: runs the GPU tests that build.sh built. With the cmake build,
# `ctest -L gpu --output-on-failure`; with the direct one, each test program in turn (a program
# that exits 77 found no GPU: ctest calls that skipped). Exits non-zero when any test failed.
set -uo pipefail
BUILD_DIR=${1:?usage: bench/gpu/test.sh BUILD_DIR}
mode=$(cat "$BUILD_DIR/build-mode" 2>/dev/null || echo none)
echo "build mode: $mode"
case "$mode" in
  cmake)
    ctest --test-dir "$BUILD_DIR" -L gpu --output-on-failure
    ;;
  direct)
    status=0
    for name in cuda_device_test cuda_matmul_test; do
      echo "=== $name"
      "$BUILD_DIR/direct/$name"
      rc=$?
      echo "=== $name exit status $rc"
      [ "$rc" = 0 ] || status=1
    done
    echo "cuda_ops_test: not built in the direct mode (it needs the reference backend)"
    exit $status
    ;;
  *)
    echo "nothing was built in $BUILD_DIR"
    exit 1
    ;;
esac
