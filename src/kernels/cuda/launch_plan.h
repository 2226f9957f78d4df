// Launch planning for the CUDA ops (ops.h), on the host and without CUDA: the grid and block shape
// of each op, the vector width its threads read and write with, and the bf16 conversion of host
// weights before they are uploaded. Kept apart from ops.cu so that it builds and is tested in every
// build, GPU or not; ops.cu launches exactly what these functions return.
//
// Vector width: a thread moves `vector_width` consecutive elements per access, at most 16 bytes
// of the narrowest operand (8 bf16, 4 f32, 16 bytes of NF4 codes). A width is usable when the row
// length (or element count) is a multiple of it and every operand's address is a multiple of
// min(width * element_bytes, 16), the alignment of the 16-byte (or narrower) accesses the kernels
// issue; otherwise the width halves, down to 1 (scalar accesses, any layout).
//
// Errors: a size that is zero, negative or too large, a malformed operand or bad limits is an
// InvalidArgument naming the value. (The ops in ops.h treat an empty batch as nothing to do and
// never plan it: a launch of zero blocks is a CUDA error.)
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"

namespace sovai::kernels::cuda {

inline constexpr int kWarpThreads = 32;
// The widest access a thread issues.
inline constexpr int kMaxAccessBytes = 16;
// Threads per block of the element-wise ops: enough warps to hide latency, small enough that a
// block's registers never limit occupancy.
inline constexpr int kElementwiseThreads = 256;
// The first pass of SumOfSquares writes at most this many partial sums (one per block). Fixed,
// not derived from the device, so the reduction order (and the result, bit for bit) depends only
// on the input, not on the GPU it runs on.
inline constexpr int64_t kSumOfSquaresMaxPartials = 1024;

// What a launch may use. The defaults hold on every device of compute capability 3.0 and later
// (gridDim.x up to 2^31 - 1, 1024 threads per block); tests pass smaller ones.
struct LaunchLimits {
  int max_threads_per_block = 1024;
  int64_t max_blocks = 2147483647;
};

// One buffer an op reads or writes: its address and the bytes of one of its elements (for a
// packed format, of what one element of the op's count stands for there). A null address (an
// optional operand not given) imposes nothing.
struct Operand {
  uintptr_t address = 0;
  int element_bytes = 0;
};
template <typename T>
Operand OperandOf(const T* pointer) {
  return Operand{reinterpret_cast<uintptr_t>(pointer), static_cast<int>(sizeof(T))};
}

// The widest usable vector width (see the top of this file) for rows of `row_len` elements.
// row_len must be positive and every operand's element_bytes in {1, 2, 4, 8, 16}.
base::Result<int> ChooseVectorWidth(int64_t row_len, std::span<const Operand> operands);

// Row ops (embedding, RMSNorm): one block per row, its threads striding over the row's vectors.
struct RowPlan {
  int vector_width = 1;  // elements per access
  int threads = 0;       // per block: a multiple of 32, one per vector up to the block limit
  int64_t blocks = 0;    // min(rows, max_blocks); a block handles rows blockIdx.x + k * gridDim.x
};
base::Result<RowPlan> PlanRows(int64_t rows, int64_t row_len, std::span<const Operand> operands,
                               const LaunchLimits& limits = {});

// Element-wise ops over `vectors` units of `vector_width` elements, grid-stride.
struct ElementwisePlan {
  int vector_width = 1;
  int threads = 0;
  int64_t blocks = 0;   // ceil(vectors / threads), capped at max_blocks
  int64_t vectors = 0;  // units of work; each thread handles u = global index + k * total threads
};
base::Result<ElementwisePlan> PlanElementwise(int64_t count, std::span<const Operand> operands,
                                              const LaunchLimits& limits = {});

// RoPE in place on x[N, H, D] (bf16): a unit is `vector_width` pairs (i, i + D/2) of one head,
// so the width divides D/2 and vectors = N * H * (D/2) / vector_width. D must be even and at most
// kMaxRopeHeadDim.
base::Result<ElementwisePlan> PlanRope(int64_t n, int64_t heads, int64_t head_dim, Operand x,
                                       const LaunchLimits& limits = {});

// NF4 dequantization of `numel` values (a positive multiple of 64): a unit is `vector_width` code
// bytes, i.e. 2 * vector_width values, never crossing a block of 64. `codes` has 1-byte elements;
// `out` is bf16, so 4 bytes of it per code byte.
base::Result<ElementwisePlan> PlanNf4Dequantize(int64_t numel, Operand codes, Operand out,
                                                const LaunchLimits& limits = {});

// SumOfSquares: a first pass of at most kSumOfSquaresMaxPartials blocks, each writing one double
// partial sum to the workspace, then one block of first_pass.threads summing the partials.
struct SumOfSquaresPlan {
  ElementwisePlan first_pass;
  int64_t workspace_bytes = 0;  // first_pass.blocks doubles
};
base::Result<SumOfSquaresPlan> PlanSumOfSquares(int64_t count, Operand grad,
                                                const LaunchLimits& limits = {});
// Enough workspace for SumOfSquares of any count.
inline constexpr int64_t kSumOfSquaresWorkspaceBytes =
    kSumOfSquaresMaxPartials * static_cast<int64_t>(sizeof(double));

// to[i] = bf16 of from[i], rounded to nearest even, infinities kept, NaN kept a (quiet) NaN: the
// conversion of tensor/dtype.h, bit-identical to PyTorch's `.to(torch.bfloat16)`. The spans must
// have the same size (InvalidArgument otherwise).
base::Status ConvertToBF16(std::span<const float> from, std::span<uint16_t> to);

}  // namespace sovai::kernels::cuda
