#!/usr/bin/env bash
# bench/gpu/build.sh BUILD_DIR: builds, from source, the GPU test programs and gpu_bench.
#
# First the project's own way: `cmake --preset cuda` into BUILD_DIR (for this GPU's architecture
# only, to halve the device-code compile), then only the targets below. If configuring fails
# (the full project also needs OpenSSL, SQLite, libpq, Boost, pugixml, nlohmann_json and GTest,
# which a GPU machine's image may lack), it compiles the programs that need none of them straight
# with nvcc into BUILD_DIR/direct: cuda_device_test, cuda_matmul_test and gpu_bench
# (cuda_ops_test needs the reference backend and is left out there). BUILD_DIR/build-mode says
# which way was taken: "cmake" or "direct".
#
# Env: CUDA_ARCH (default: from nvidia-smi's compute capability; 9.0 -> 90a), JOBS (nproc),
# FORCE_DIRECT=1 (skip cmake, to try the direct way).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD_DIR=${1:?usage: bench/gpu/build.sh BUILD_DIR}
JOBS=${JOBS:-$(nproc)}
TARGETS=(cuda_device_test cuda_ops_test cuda_matmul_test cuda_backend_test gpu_bench sovai-engine)

NVCC=/usr/local/cuda/bin/nvcc
[ -x "$NVCC" ] || NVCC=$(command -v nvcc || true)
if [ -z "$NVCC" ]; then
  echo "build.sh: no nvcc (looked at /usr/local/cuda/bin and PATH)"
  exit 1
fi
echo "nvcc: $NVCC ($("$NVCC" --version | tail -1))"

if [ -z "${CUDA_ARCH:-}" ]; then
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')
  case "$cap" in
    9.0) CUDA_ARCH=90a ;;  # Hopper's arch-specific instructions, as the preset's default
    "") CUDA_ARCH="90a;80" ;;  # no GPU visible: the preset's own list
    *) CUDA_ARCH=${cap/./} ;;
  esac
fi
echo "CUDA architectures: $CUDA_ARCH"
mkdir -p "$BUILD_DIR"

cd "$ROOT"
if [ "${FORCE_DIRECT:-0}" != 1 ] && cmake --preset cuda -B "$BUILD_DIR" -DCMAKE_CUDA_COMPILER="$NVCC" \
    -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH"; then
  echo cmake >"$BUILD_DIR/build-mode"
  cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]}"
  exit $?
fi

echo "build.sh: cuda preset not configured (failed, or FORCE_DIRECT=1); compiling the GPU programs directly with nvcc"
echo direct >"$BUILD_DIR/build-mode"
DIRECT=$BUILD_DIR/direct
rm -rf "$DIRECT"
mkdir -p "$DIRECT"
GENCODE=()
IFS=';' read -ra arches <<<"$CUDA_ARCH"
for arch in "${arches[@]}"; do
  GENCODE+=("-gencode=arch=compute_${arch},code=sm_${arch}")
done
# Everything matmul.h, device.h and the programs need, and nothing that needs another library.
COMMON=(src/base/status.cc src/base/check.cc src/tensor/dtype.cc src/kernels/cuda/device.cu
  src/kernels/cuda/matmul.cc src/kernels/cuda/matmul_plan.cc)
FLAGS=(-std=c++20 -O2 -Isrc "${GENCODE[@]}" -Xcompiler=-Wall)
status=0
build() {  # build NAME SOURCES...
  local name=$1
  shift
  echo "nvcc -> $DIRECT/$name"
  "$NVCC" "${FLAGS[@]}" -o "$DIRECT/$name" "$@" "${COMMON[@]}" -lcublasLt
}
build cuda_device_test src/kernels/cuda/device_test.cc &
build cuda_matmul_test src/kernels/cuda/matmul_test.cc &
build gpu_bench bench/gpu/gpu_bench.cc bench/gpu/bench_kernels.cu &
for job in $(jobs -p); do wait "$job" || status=1; done
for name in cuda_device_test cuda_matmul_test gpu_bench; do
  [ -x "$DIRECT/$name" ] || status=1
done
exit $status
