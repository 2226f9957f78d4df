// The device kernels gpu_bench needs beside cuBLASLt: random bf16 data (never time zeros: they
// can run faster than real data) and the two memory-bandwidth probes. Each launcher enqueues on
// `stream` and returns the launch's error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sovai::bench {

// out[count] = bf16 values uniform in [-1, 1), a hash of (index, seed): the same bits on every
// run and every GPU.
cudaError_t FillRandomBf16(uint16_t* out, int64_t count, uint32_t seed, int multiprocessors,
                           cudaStream_t stream);

// dst[i] = src[i] over `chunks` 16-byte chunks: reads and writes each byte once.
cudaError_t CopyChunks(const void* src, void* dst, int64_t chunks, int multiprocessors,
                       cudaStream_t stream);

// Reads `chunks` 16-byte chunks once and folds them into a value the kernel stores to *sink only
// if it equals a constant no data here produces, so the compiler cannot skip the loads and the
// kernel writes (almost) nothing.
cudaError_t ReadChunks(const void* src, int64_t chunks, uint32_t* sink, int multiprocessors,
                       cudaStream_t stream);

}  // namespace sovai::bench
